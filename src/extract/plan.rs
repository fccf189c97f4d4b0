//! The plan of a sync: which mode it reads the applications in, and what is left to request,
//! with an estimate of the time. The caller shows it before the bulk of the requests.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;

use super::landing::Landing;
use super::quick::{self, Snapshot};
use super::{ExtractConfig, SyncMode};
use crate::api::PacingConfig;

/// The request plan, made once page 1 of every status is landed.
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    /// Status → (rows, pages) from page 1.
    pub statuses: BTreeMap<String, (u64, u64)>,
    pub application_requests: u64,
    pub content_requests: u64,
    pub min_interval_ms: u64,
    pub hourly_cap: Option<u32>,
    pub concurrency: usize,
    pub estimated_s: u64,
    /// `quick` or `full`, and why.
    pub sync: SyncMode,
    pub reason: String,
}

impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "plan:")?;
        for (s, (rows, pages)) in &self.statuses {
            writeln!(f, "  {s:<17} {rows:>9} rows {pages:>7} pages")?;
        }
        let cap = self.hourly_cap.map_or("no hourly cap".to_owned(), |c| format!("at most {c} requests per window"));
        writeln!(
            f,
            "  requests to go: {} application pages + {} content windows = {}",
            self.application_requests,
            self.content_requests,
            self.application_requests + self.content_requests
        )?;
        writeln!(f, "  pacing: {} ms between requests, {cap}, concurrency {}", self.min_interval_ms, self.concurrency)?;
        writeln!(f, "  estimated duration: {}", human_duration(self.estimated_s))?;
        match self.sync {
            SyncMode::Quick => {
                write!(f, "  sync: quick ({}): only the pages that locate what changed are read", self.reason)
            }
            _ => write!(f, "  sync: full ({})", self.reason),
        }
    }
}

fn human_duration(s: u64) -> String {
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

/// The mode a sync starts in (`quick` or `full`), and why. `auto` is quick only with a
/// snapshot and a full sync within `--reconcile-every`.
pub fn choose_mode(config: &ExtractConfig, snapshot: Option<&Snapshot>, now: DateTime<Utc>) -> (SyncMode, String) {
    let every = humantime_ish(config.reconcile_every);
    let (quick, reason) = match (config.sync, snapshot) {
        (SyncMode::Full, _) => (false, "`--sync full`".into()),
        (_, None) => {
            (false, "the warehouse holds no earlier sync of these statuses and campaign to compare with".into())
        }
        (SyncMode::Quick, Some(_)) => (true, "`--sync quick`".into()),
        (SyncMode::Auto, Some(s)) => match s.last_reconcile {
            None => (false, "no full sync of these statuses and campaign yet".into()),
            Some(t) if now.signed_duration_since(t).to_std().unwrap_or_default() >= config.reconcile_every => (
                false,
                format!(
                    "the last full sync finished at {}, {every} or more ago (`--reconcile-every`)",
                    t.format("%Y-%m-%d %H:%M:%SZ")
                ),
            ),
            Some(t) => (
                true,
                format!(
                    "the last full sync finished at {}, within {every} (`--reconcile-every`)",
                    t.format("%Y-%m-%d %H:%M:%SZ")
                ),
            ),
        },
    };
    (if quick { SyncMode::Quick } else { SyncMode::Full }, reason)
}

/// `90s`, `15m`, `24h` or `2h30m`, as the flags take them.
fn humantime_ish(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        _ if s.is_multiple_of(3600) && s > 0 => format!("{}h", s / 3600),
        _ if s.is_multiple_of(60) && s > 0 => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

/// With `auto`: a reason to read everything when locating the changes the counts show would
/// cost about as many requests as reading every page.
pub(crate) fn too_many_changes(config: &ExtractConfig, snap: &Snapshot, landing: &Landing) -> Option<String> {
    let (mut locate, mut rest, mut moved) = (0, 0, 0);
    for s in &config.statuses {
        let Some(first) = landing.page(s.as_str(), 1, 1) else { continue };
        let delta = first.row_count.abs_diff(snap.list(s.as_str()).len() as u64);
        locate += quick::estimate(first.page_count, delta);
        rest += first.page_count.saturating_sub(1);
        moved += delta;
    }
    (rest > 0 && locate >= rest).then(|| {
        format!("the counts moved by {moved} since the last sync: locating the changes would cost about as many requests as reading every page ({rest})")
    })
}

/// The plan from what is landed: the pages of each status's current pass and the windows not
/// landed yet. `first_pages` is how long page 1 of every status took, a measure of latency.
pub(crate) fn make_plan(
    config: &ExtractConfig,
    pacing: &PacingConfig,
    landing: &Landing,
    windows: &[(NaiveDate, NaiveDate)],
    first_pages: Duration,
    (sync, reason): (SyncMode, String),
) -> Plan {
    let mut statuses = BTreeMap::new();
    let mut app_requests = 0;
    for s in &config.statuses {
        let pass = landing.last_pass(s.as_str()).unwrap_or(1);
        let rows = landing.page(s.as_str(), pass, 1).map_or(0, |p| p.row_count);
        let pages = landing.page_count(s.as_str(), pass);
        let landed = landing.pages.get(&(s.as_str().to_owned(), pass)).map_or(0, |m| m.len() as u64);
        app_requests += pages.saturating_sub(landed);
        statuses.insert(s.to_string(), (rows, pages));
    }
    let content_requests = windows.iter().filter(|w| !landing.windows.contains_key(w)).count() as u64;
    let n = app_requests + content_requests;
    let latency = first_pages.as_secs_f64() / config.statuses.len().max(1) as f64;
    let per_request = pacing.min_interval.as_secs_f64().max(latency / config.concurrency.max(1) as f64);
    let mut estimate = n as f64 * per_request;
    if let Some(cap) = pacing.hourly_cap.filter(|c| *c > 0) {
        let resets = n.saturating_sub(1) / u64::from(cap);
        estimate = estimate.max(resets as f64 * pacing.cap_window.as_secs_f64());
    }
    Plan {
        statuses,
        application_requests: app_requests,
        content_requests,
        min_interval_ms: pacing.min_interval.as_millis() as u64,
        hourly_cap: pacing.hourly_cap,
        concurrency: config.concurrency,
        estimated_s: estimate.ceil() as u64,
        sync,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extract::raw::RawRecord;
    use crate::out::OutDir;

    fn config(sync: SyncMode) -> ExtractConfig {
        ExtractConfig { sync, ..ExtractConfig::defaults(OutDir::new("/nowhere")) }
    }

    fn snapshot(last_reconcile: Option<DateTime<Utc>>) -> Snapshot {
        Snapshot { base_run: "r1".into(), last_reconcile, ..Snapshot::default() }
    }

    #[test]
    fn the_mode_follows_the_flag_the_snapshot_and_the_last_reconcile() {
        let now = Utc::now();
        let hours = |h| now - chrono::Duration::hours(h);
        let mode = |sync, snap: Option<&Snapshot>| choose_mode(&config(sync), snap, now);
        assert_eq!(mode(SyncMode::Full, Some(&snapshot(Some(hours(1))))), (SyncMode::Full, "`--sync full`".into()));
        assert_eq!(mode(SyncMode::Quick, Some(&snapshot(None))), (SyncMode::Quick, "`--sync quick`".into()));
        for sync in [SyncMode::Quick, SyncMode::Auto] {
            let (m, why) = mode(sync, None);
            assert_eq!(m, SyncMode::Full);
            assert!(why.contains("no earlier sync"), "{why}");
        }
        let (m, why) = mode(SyncMode::Auto, Some(&snapshot(None)));
        assert_eq!((m, why.as_str()), (SyncMode::Full, "no full sync of these statuses and campaign yet"));
        let (m, why) = mode(SyncMode::Auto, Some(&snapshot(Some(hours(2)))));
        assert_eq!(m, SyncMode::Quick);
        assert!(why.contains("within 24h (`--reconcile-every`)"), "{why}");
        let (m, why) = mode(SyncMode::Auto, Some(&snapshot(Some(hours(24)))));
        assert_eq!(m, SyncMode::Full);
        assert!(why.contains("24h or more ago"), "{why}");
    }

    #[test]
    fn durations_read_as_the_flags_take_them() {
        let d = Duration::from_secs;
        let got: Vec<String> = [d(90), d(900), d(86_400), d(9_000)].into_iter().map(humantime_ish).collect();
        assert_eq!(got, ["90s", "15m", "24h", "150m"]);
        assert_eq!(human_duration(59), "59 s");
        assert_eq!(human_duration(61), "1 min 1 s");
        assert_eq!(human_duration(7_320), "2 h 2 min");
    }

    fn page_one(status: &str, row_count: u64, page_count: u64) -> RawRecord {
        RawRecord {
            seq: 0,
            invocation: 1,
            endpoint: "list_applications".into(),
            path: "/campaign_applications".into(),
            query: [("status".to_owned(), status.to_owned()), ("page".to_owned(), "1".to_owned())].into(),
            received_at: Utc::now(),
            status: 200,
            attempts: 1,
            pass: Some(1),
            window: None,
            valid: true,
            problem: None,
            body: serde_json::json!({
                "data": [],
                "meta": {"row_count": row_count, "page_count": page_count, "current_page": 1, "per_page": 100}
            })
            .to_string(),
        }
    }

    #[test]
    fn the_plan_counts_what_is_left_and_the_cap_bounds_the_estimate() {
        let config = ExtractConfig {
            statuses: vec![crate::api::models::ApplicationStatus::Accepted],
            concurrency: 4,
            ..config(SyncMode::Auto)
        };
        let landing = Landing::from_records(&[page_one("accepted", 950, 10)]);
        let day = |d| NaiveDate::from_ymd_opt(2024, 1, d).unwrap();
        let windows = [(day(1), day(10)), (day(11), day(20))];
        let pacing = PacingConfig {
            min_interval: Duration::from_millis(2000),
            hourly_cap: Some(5),
            cap_window: Duration::from_secs(3600),
            wait_for_answers: false,
        };
        let mode = (SyncMode::Full, "`--sync full`".to_owned());
        let plan = make_plan(&config, &pacing, &landing, &windows, Duration::from_millis(100), mode);
        assert_eq!(plan.statuses["accepted"], (950, 10));
        assert_eq!((plan.application_requests, plan.content_requests), (9, 2));
        assert_eq!(plan.estimated_s, 2 * 3600, "11 requests at 5 per window: two resets");
        let text = plan.to_string();
        assert!(text.contains("requests to go: 9 application pages + 2 content windows = 11"), "{text}");
        assert!(text.ends_with("  sync: full (`--sync full`)"), "{text}");

        let quick = make_plan(
            &config,
            &PacingConfig { hourly_cap: None, ..pacing },
            &landing,
            &windows,
            Duration::ZERO,
            (SyncMode::Quick, "`--sync quick`".into()),
        );
        assert_eq!(quick.estimated_s, 22, "11 requests 2 s apart");
        assert!(quick.to_string().contains("no hourly cap"));
        assert!(quick.to_string().ends_with("only the pages that locate what changed are read"));
    }
}
