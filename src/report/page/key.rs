//! The keys of the figures that the overview reads from each organization's page (and that the
//! page's JSON block carries), named once: the section that writes a figure and the overview that
//! reads it use the same constant, so a renamed figure cannot quietly read as missing.

pub const LAST_SYNC_MODE: &str = "last_sync_mode";
pub const LAST_RUN_REQUESTS: &str = "last_run_requests";
pub const LAST_RUN_RATE_LIMITED: &str = "last_run_rate_limited";
pub const APPLICATIONS_TOTAL: &str = "applications_total";
pub const APPLICATIONS_PENDING: &str = "applications_pending";
pub const ACCEPTANCE_RATE: &str = "acceptance_rate";

/// A metric's (`views`, `likes`) total of the last full ISO week.
pub fn last_full_week(metric: &str) -> String {
    format!("{metric}_last_full_week")
}

/// A metric's change from the full week before to the last full week.
pub fn wow_change(metric: &str) -> String {
    format!("{metric}_wow_change")
}
