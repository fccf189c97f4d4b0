//! Extract: a complete, drift-safe, rate-aware crawl of every application and of the daily
//! content statistics, landed raw, resumable after any interruption.
//!
//! - **Applications**: every status (or `--statuses`), 100 rows a page. Page 1 of every status
//!   comes first, which gives the page counts and so the plan. Then the remaining pages follow,
//!   up to `--concurrency` at once; the shared pacer keeps the spacing.
//! - **Drift**: the list is newest first and changes while we page. Rows are deduplicated by id,
//!   and the latest observation wins, across statuses too. After a pass, the rows still in the
//!   status are compared with the service's `row_count`. When they differ, the status is crawled
//!   again, in the other direction, up to `--max-passes`. A difference that remains is a recorded
//!   data-quality warning, never silent.
//! - **Content**: `[from, to]` in windows of `--window-days`, each fetched with `limit=10000` and
//!   validated (see [`landing::validate_content`]). A truncated window is asked again, then fails
//!   the run; it is never loaded as complete. A window whose series are both empty has no
//!   statistics (an organization without content yet): it loads as no rows, with a warning.
//! - **Quick sync** (`--sync quick`, or `auto` within `--reconcile-every` of the last full
//!   sync): page 1 of every status, then only the pages [`quick`] needs to locate what changed
//!   since the previous sync's lists (the snapshot the caller reads from the warehouse). The
//!   applications on pages not read are listed in `quick.json` in the landing, and the load
//!   takes them from the warehouse. A full sync is a *reconcile*.
//! - **Resume**: the raw landing is the checkpoint. An unfinished run with the same request is
//!   continued by the next invocation, which fetches only what is not landed.
//!
//! An invocation is [`begin`] (open the run, land page 1 of every status, make the [`Plan`]),
//! then [`Extraction::finish`]; the caller shows the plan between the two. The pieces: [`runs`]
//! keeps the run directory (its request, resume, completion, pruning), [`plan`] chooses the mode
//! and estimates the requests, [`crawl`] sends them, [`landing`] reads what is landed, [`quick`]
//! locates a quick sync's changes, [`raw`] writes and reads the landing, [`report`] assembles
//! the run report.

pub mod crawl;
mod extraction;
pub mod landing;
pub mod plan;
pub mod quick;
pub mod raw;
pub mod report;
pub mod runs;

use std::time::Duration;

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::api::models::ApplicationStatus;
use crate::api::ApiError;
use crate::out::{OutDir, OutError};

pub use extraction::{begin, Extraction};
pub use landing::{ContentRow, Metric, Observation};
pub use plan::{choose_mode, Plan};
pub use quick::Snapshot;
pub use report::{ContentSummary, ExtractReport, ExtractTimings, RunStatus, StatusSummary, SyncSummary};
pub use runs::{
    content_range, latest_complete_run, read_extracted, read_quick, unfinished_run, Extracted, QuickLanding, RunSpec,
};

/// How a sync reads the applications (`--sync`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SyncMode {
    /// Quick within `--reconcile-every` of the last full sync, full otherwise.
    #[default]
    Auto,
    /// Page 1 of each status, then only the pages that locate what changed.
    Quick,
    /// Every page of every status: a reconcile.
    Full,
}

impl SyncMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SyncMode::Auto => "auto",
            SyncMode::Quick => "quick",
            SyncMode::Full => "full",
        }
    }
}

impl std::fmt::Display for SyncMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for SyncMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(SyncMode::Auto),
            "quick" => Ok(SyncMode::Quick),
            "full" => Ok(SyncMode::Full),
            _ => Err(format!("`{s}` is not a sync mode; allowed: quick, full, auto")),
        }
    }
}

/// The default of `--reconcile-every`.
pub const DEFAULT_RECONCILE_EVERY: Duration = Duration::from_secs(24 * 3600);
/// [`DEFAULT_RECONCILE_EVERY`] as the `--reconcile-every` flag writes it.
pub const DEFAULT_RECONCILE_EVERY_FLAG: &str = "24h";
/// Defaults of `--concurrency`, `--max-passes`, `--window-days`, `--lookback-days` and
/// `--since-days`, which a fleet's organizations and the demo take too.
pub const DEFAULT_CONCURRENCY: usize = 8;
pub const DEFAULT_MAX_PASSES: u32 = 3;
pub const DEFAULT_WINDOW_DAYS: u32 = 90;
pub const DEFAULT_LOOKBACK_DAYS: u32 = 7;
pub const DEFAULT_SINCE_DAYS: u32 = 365;

/// A validated extract request.
#[derive(Clone, Debug)]
pub struct ExtractConfig {
    pub out: OutDir,
    pub statuses: Vec<ApplicationStatus>,
    pub campaign_id: Option<i64>,
    pub concurrency: usize,
    pub max_passes: u32,
    /// Explicit content range; `None` means the incremental default.
    pub from: Option<NaiveDate>,
    pub to: Option<NaiveDate>,
    pub window_days: u32,
    pub lookback_days: u32,
    pub since_days: u32,
    pub plan_only: bool,
    pub keep_raw: Option<usize>,
    /// Start a new run even when an unfinished one could be resumed.
    pub fresh: bool,
    pub progress_bars: bool,
    pub sync: SyncMode,
    /// With `auto`: the longest time since the last full sync for a quick one.
    pub reconcile_every: Duration,
    /// The last content day the warehouse has loaded (the caller reads it from the `runs`
    /// ledger): incremental content starts there minus `lookback_days`. `None` before the
    /// first load: `since_days` ago.
    pub content_cursor: Option<NaiveDate>,
}

#[derive(Debug, Error)]
pub enum ExtractError {
    #[error("{context}: {source}; what was fetched is saved: rerun the same command to resume")]
    Api {
        context: String,
        // Not `#[source]`: the message already says it, and the exit code reads it.
        source: ApiError,
    },
    #[error("content {start}..{end} stayed invalid after {tries} answers ({problem}); it was not loaded. Its answers are in the raw landing; rerun to try again")]
    Truncated { start: NaiveDate, end: NaiveDate, tries: u32, problem: String },
    #[error("interrupted; progress is saved and the next run resumes it")]
    Interrupted,
    #[error("request budget of {max} spent; progress is saved and the next run resumes it")]
    BudgetSpent { max: u64 },
    #[error(transparent)]
    Out(#[from] OutError),
    #[error("raw run `{0}` not found or unreadable")]
    NoSuchRun(String),
}

impl ExtractError {
    /// A failed request; one that a stop ended is an interruption, and one that the request
    /// budget ended says so.
    pub(crate) fn api(context: String, source: ApiError) -> Self {
        match source {
            ApiError::Interrupted { .. } => ExtractError::Interrupted,
            ApiError::BudgetSpent { max, .. } => ExtractError::BudgetSpent { max },
            source => ExtractError::Api { context, source },
        }
    }
}

impl ExtractConfig {
    /// Every status, incremental content, automatic sync: the command line's defaults, without
    /// progress bars.
    pub fn defaults(out: OutDir) -> Self {
        ExtractConfig {
            out,
            statuses: ApplicationStatus::KNOWN.to_vec(),
            campaign_id: None,
            concurrency: DEFAULT_CONCURRENCY,
            max_passes: DEFAULT_MAX_PASSES,
            from: None,
            to: None,
            window_days: DEFAULT_WINDOW_DAYS,
            lookback_days: DEFAULT_LOOKBACK_DAYS,
            since_days: DEFAULT_SINCE_DAYS,
            plan_only: false,
            keep_raw: None,
            fresh: false,
            progress_bars: false,
            sync: SyncMode::Auto,
            reconcile_every: DEFAULT_RECONCILE_EVERY,
            content_cursor: None,
        }
    }
}
