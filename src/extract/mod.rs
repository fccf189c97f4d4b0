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
//!   the run; it is never loaded as complete.
//! - **Quick sync** (`--sync quick`, or `auto` within `--reconcile-every` of the last full
//!   sync): page 1 of every status, then only the pages [`quick`] needs to locate what changed
//!   since the previous sync's lists (the snapshot the caller reads from the warehouse). The
//!   applications on pages not read are listed in `quick.json` in the landing, and the load
//!   takes them from the warehouse. A full sync is a *reconcile*.
//! - **Resume**: the raw landing is the checkpoint. An unfinished run with the same request is
//!   continued by the next invocation, which fetches only what is not landed.

pub mod crawl;
pub mod landing;
pub mod quick;
pub mod raw;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::sync::watch;

use crate::api::models::ApplicationStatus;
use crate::api::{ApiError, Client, MetricsSnapshot, MAX_APPLICATIONS_PER_PAGE};
use crate::out::{io_err, write_json_atomic, OutDir, OutError};
use crate::progress::Progress;
use crawl::Crawl;
use landing::Landing;
use raw::RawWriter;

pub use landing::{ContentRow, Metric, Observation};
pub use quick::Snapshot;

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

/// What a run was asked to do, stored as `run.json` so that a resumed invocation continues the
/// same request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    pub run_id: String,
    pub created_at: DateTime<Utc>,
    pub base_url: String,
    pub statuses: Vec<String>,
    pub campaign_id: Option<i64>,
    pub max_passes: u32,
    pub from: NaiveDate,
    pub to: NaiveDate,
    pub window_days: u32,
    /// `quick` or `full` (runs before quick sync existed were full).
    #[serde(default = "full_mode")]
    pub sync: SyncMode,
    /// A quick run's snapshot: the run whose load the warehouse held.
    #[serde(default)]
    pub base_run: Option<String>,
}

fn full_mode() -> SyncMode {
    SyncMode::Full
}

/// What a sync read and what it verified: the report's `sync`, and columns of `runs`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SyncSummary {
    /// `--sync`: `auto`, `quick` or `full`.
    pub requested: SyncMode,
    /// `quick` or `full` (a reconcile).
    pub mode: SyncMode,
    /// Why this mode.
    pub reason: String,
    /// A quick sync's snapshot: the run whose load the warehouse held.
    pub base_run: Option<String>,
    /// When the last full sync of the same scope finished (a quick sync's; a full one is the
    /// reconcile itself).
    pub last_reconcile_at: Option<DateTime<Utc>>,
    /// Pages of applications read, and what a full crawl reads.
    pub pages_verified: u64,
    pub pages_full: u64,
    /// Every status's rows add up to the service's count.
    pub counts_agree: bool,
    /// Statuses a quick sync read in full, and why.
    pub read_in_full: BTreeMap<String, String>,
    /// Applications located entering or leaving a status, and kept from the snapshot unread.
    pub entered: u64,
    pub left: u64,
    pub kept: u64,
}

/// A quick run's locations, `raw/<run>/quick.json`: what the load takes from the warehouse.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct QuickLanding {
    pub base_run: String,
    pub located: BTreeMap<String, quick::Located>,
}

impl QuickLanding {
    /// The applications kept from the warehouse unread, over every status.
    pub fn kept(&self) -> impl Iterator<Item = i64> + '_ {
        self.located.values().flat_map(|l| l.kept.iter().copied())
    }
}

/// Reads a run's `quick.json`; `None` for a full run.
pub fn read_quick(out: &OutDir, run_id: &str) -> Result<Option<QuickLanding>, ExtractError> {
    let path = out.raw_dir(run_id).join("quick.json");
    match std::fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b).map(Some).map_err(|_| ExtractError::NoSuchRun(run_id.to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err("read", &path)(e).into()),
    }
}

/// The mode a sync starts in, and why. `auto` is quick only with a snapshot and a full sync
/// within `--reconcile-every`.
pub fn choose_mode(config: &ExtractConfig, snapshot: Option<&Snapshot>, now: DateTime<Utc>) -> (bool, String) {
    let every = humantime_ish(config.reconcile_every);
    match (config.sync, snapshot) {
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
    }
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

/// Drift and completeness of one status.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StatusSummary {
    /// The service's `row_count` at the end of the last pass.
    pub row_count: u64,
    /// Rows of this status seen in the last pass.
    pub seen: u64,
    /// Applications whose latest observation has this status.
    pub rows: u64,
    pub pages_fetched: u64,
    pub passes: u32,
    /// Rows first seen in a re-crawl: what a single pass would have lost.
    pub recovered: u64,
    pub converged: bool,
    /// A quick sync's applications on pages it did not read, taken from the snapshot.
    #[serde(default)]
    pub kept: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ContentSummary {
    pub from: Option<NaiveDate>,
    pub to: Option<NaiveDate>,
    pub windows: u64,
    /// Days per metric.
    pub days: u64,
    /// Answers refused as invalid (truncated) and asked again.
    pub invalid_answers: u64,
}

/// The run report, `OUT/runs/<run_id>.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ExtractReport {
    pub run_id: String,
    /// `completed`, `planned` (`--plan-only`), `interrupted` or `failed`.
    pub status: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// Invocations that worked on this run, this one included.
    pub invocations: u32,
    pub resumed: bool,
    /// Requests of every invocation that reported its counters.
    pub requests: MetricsSnapshot,
    /// Invocations that ended without reporting counters (killed).
    pub unreported_invocations: u32,
    pub applications: BTreeMap<String, StatusSummary>,
    /// Applications in the run's scope: those read, and a quick sync's kept ones.
    pub applications_total: u64,
    pub content: ContentSummary,
    pub durations_ms: BTreeMap<String, u64>,
    pub warnings: Vec<String>,
    pub error: Option<String>,
    pub raw_dir: PathBuf,
    /// Quick or full, and what it verified.
    #[serde(default)]
    pub sync: SyncSummary,
}

/// The request plan, printed before the bulk of the requests.
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
        write!(f, "  estimated duration: {}", human_duration(self.estimated_s))
    }
}

fn human_duration(s: u64) -> String {
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

/// The content range of a new run: explicit, or from the last loaded day minus the lookback
/// (recent days still change), or the first run's `since_days`. `to` never passes today (UTC).
pub fn content_range(config: &ExtractConfig, today: NaiveDate) -> (NaiveDate, NaiveDate) {
    let to = config.to.unwrap_or(today).min(today);
    let from = config.from.unwrap_or_else(|| match config.content_cursor {
        Some(last) => last - chrono::Duration::days(i64::from(config.lookback_days)),
        None => today - chrono::Duration::days(i64::from(config.since_days)),
    });
    (from.min(to), to)
}

/// The newest raw run's directory, when that run did not finish extracting.
fn unfinished_dir(out: &OutDir) -> Option<PathBuf> {
    let dir = runs_oldest_first(out).into_iter().rev().find(|d| d.join("run.json").exists())?;
    (!dir.join("COMPLETE").exists()).then_some(dir)
}

/// The id of the newest raw run when it did not finish extracting: the next run with the same
/// request resumes it.
pub fn unfinished_run(out: &OutDir) -> Option<String> {
    Some(unfinished_dir(out)?.file_name()?.to_string_lossy().into_owned())
}

/// An unfinished run asking for the same thing, to resume.
fn find_resumable(config: &ExtractConfig, base_url: &str) -> Option<RunSpec> {
    let dir = unfinished_dir(&config.out)?;
    let spec: RunSpec = serde_json::from_slice(&std::fs::read(dir.join("run.json")).ok()?).ok()?;
    let same = spec.base_url == base_url
        && spec.statuses == config.statuses.iter().map(|s| s.to_string()).collect::<Vec<_>>()
        && spec.campaign_id == config.campaign_id
        && spec.window_days == config.window_days
        && config.from.is_none_or(|f| f == spec.from)
        && config.to.is_none_or(|t| t == spec.to);
    if !same {
        tracing::warn!(run_id = %spec.run_id, "an unfinished run asked for something else; starting a new run");
        return None;
    }
    Some(spec)
}

fn invocations_dir(out: &OutDir, run_id: &str) -> PathBuf {
    out.raw_dir(run_id).join("invocations")
}

/// Sums the counters the run's earlier invocations reported.
fn earlier_metrics(out: &OutDir, run_id: &str, before: u32) -> (MetricsSnapshot, u32) {
    let mut total = MetricsSnapshot::default();
    let mut missing = 0;
    for n in 1..before {
        match std::fs::read(invocations_dir(out, run_id).join(format!("{n:04}.json")))
            .ok()
            .and_then(|b| serde_json::from_slice::<MetricsSnapshot>(&b).ok())
        {
            Some(m) => total.merge(&m),
            None => missing += 1,
        }
    }
    (total, missing)
}

/// The raw landings, oldest first: by creation time (run ids only resolve seconds), then name.
fn runs_oldest_first(out: &OutDir) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(out.raw_root()) else { return vec![] };
    let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    let created = |d: &PathBuf| {
        std::fs::read(d.join("run.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<RunSpec>(&b).ok())
            .map(|s| s.created_at)
    };
    dirs.sort_by_cached_key(|d| (created(d), d.clone()));
    dirs
}

/// Removes raw directories without a `run.json`: a run killed while it wrote its spec, before
/// it could land anything. The caller holds the lock, so no other run is starting.
fn remove_unstarted(out: &OutDir) -> Result<(), OutError> {
    let Ok(entries) = std::fs::read_dir(out.raw_root()) else { return Ok(()) };
    for dir in entries.flatten().map(|e| e.path()).filter(|p| p.is_dir() && !p.join("run.json").exists()) {
        std::fs::remove_dir_all(&dir).map_err(io_err("remove", &dir))?;
        tracing::info!(dir = %dir.display(), "removed the raw directory of a run killed before it started");
    }
    Ok(())
}

/// Deletes all but the newest `keep` runs' raw landings (never `current`).
fn prune_raw(out: &OutDir, keep: usize, current: &str) -> Result<(), OutError> {
    let dirs = runs_oldest_first(out);
    let excess = dirs.len().saturating_sub(keep.max(1));

    for d in dirs.into_iter().take(excess) {
        if d.file_name().and_then(|n| n.to_str()) != Some(current) {
            std::fs::remove_dir_all(&d).map_err(io_err("remove", &d))?;
            tracing::info!(dir = %d.display(), "pruned old raw landing");
        }
    }
    Ok(())
}

/// Runs an extract. The caller holds the lock on the output directory. On failure or
/// interruption the landing and the report are saved before the error is returned, and the
/// next run resumes. `snapshot` is the previous sync's lists, for a quick sync (see
/// [`choose_mode`]).
pub async fn run(
    config: &ExtractConfig,
    client: &Client,
    stop: watch::Receiver<bool>,
    snapshot: Option<&Snapshot>,
) -> Result<ExtractReport, ExtractError> {
    let base_url = client.base_url().to_string();
    let today = Utc::now().date_naive();
    let (quick, mut reason) = choose_mode(config, snapshot, Utc::now());
    let resumed = if config.fresh { None } else { find_resumable(config, &base_url) };
    // An unfinished quick run continues only on the same snapshot; an unfinished full run
    // continues as it began, unless this run asks for quick.
    let resumed = resumed.filter(|spec| match spec.sync {
        SyncMode::Quick => quick && snapshot.map(|s| &s.base_run) == spec.base_run.as_ref(),
        _ => config.sync != SyncMode::Quick || !quick,
    });
    if resumed.as_ref().is_some_and(|spec| spec.sync != SyncMode::Quick && quick) {
        reason = "continuing an unfinished full sync".into();
    }
    // From here on, the spec's mode is the run's.
    let mut spec = match &resumed {
        Some(spec) => spec.clone(),
        None => {
            let (from, to) = content_range(config, today);
            RunSpec {
                run_id: crate::out::new_run_id(),
                created_at: Utc::now(),
                base_url,
                statuses: config.statuses.iter().map(|s| s.to_string()).collect(),
                campaign_id: config.campaign_id,
                max_passes: config.max_passes,
                from,
                to,
                window_days: config.window_days,
                sync: if quick { SyncMode::Quick } else { SyncMode::Full },
                base_run: snapshot.filter(|_| quick).map(|s| s.base_run.clone()),
            }
        }
    };
    let dir = config.out.raw_dir(&spec.run_id);
    if resumed.is_none() {
        remove_unstarted(&config.out)?;
        write_json_atomic(&dir.join("run.json"), &spec)?;
    }
    let recovered = raw::recover_partials(&dir)?;
    let mut landing = Landing::from_records(&raw::read_run(&dir)?);
    let invocation = landing.max_invocation.max(count_segments(&dir)) + 1;
    if resumed.is_some() {
        tracing::info!(
            run_id = %spec.run_id,
            invocation,
            landed = landing.next_seq,
            recovered,
            "resuming an unfinished run"
        );
    } else {
        tracing::info!(run_id = %spec.run_id, from = %spec.from, to = %spec.to, "starting a run");
    }
    let mut writer = RawWriter::create(&dir, invocation)?;
    let progress = Progress::new(config.progress_bars);
    let started = Instant::now();
    let mut durations = BTreeMap::new();
    let mut outcomes = BTreeMap::new();
    let mut warnings = vec![];
    let windows = landing::windows(spec.from, spec.to, spec.window_days);
    let mut located = BTreeMap::new();
    let mut read_in_full = BTreeMap::new();

    let result: Result<&'static str, ExtractError> = async {
        let mut crawl = Crawl {
            client,
            writer: &mut writer,
            landing: &mut landing,
            invocation,
            campaign_id: spec.campaign_id,
            concurrency: config.concurrency,
            stop: stop.clone(),
            progress: &progress,
        };
        let t = Instant::now();
        for status in &config.statuses {
            crawl.first_page(status, crawl.landing.last_pass(status.as_str()).unwrap_or(1)).await?;
        }
        if spec.sync == SyncMode::Quick && config.sync == SyncMode::Auto {
            if let Some(why) = snapshot.and_then(|snap| too_many_changes(config, snap, crawl.landing)) {
                reason = why;
                spec.sync = SyncMode::Full;
                spec.base_run = None;
                write_json_atomic(&dir.join("run.json"), &spec)?;
            }
        }
        let plan = make_plan(config, client, crawl.landing, &windows, t.elapsed());
        eprintln!("{plan}");
        match spec.sync {
            SyncMode::Quick => eprintln!("  sync: quick ({reason}): only the pages that locate what changed are read"),
            _ => eprintln!("  sync: full ({reason})"),
        }
        tracing::info!(requests = plan.application_requests + plan.content_requests, estimated_s = plan.estimated_s, "plan");
        if config.plan_only {
            return Ok("planned");
        }
        if let (SyncMode::Quick, Some(snap)) = (spec.sync, snapshot) {
            located = locate_changes(&mut crawl, snap, &config.statuses, spec.max_passes, &mut outcomes, &mut read_in_full)
                .await?;
            write_json_atomic(
                &dir.join("quick.json"),
                &QuickLanding { base_run: snap.base_run.clone(), located: located.clone() },
            )?;
        }
        let unread: Vec<&ApplicationStatus> =
            config.statuses.iter().filter(|s| !outcomes.contains_key(s.as_str())).collect();
        for status in unread {
            let outcome = crawl.status(status, spec.max_passes).await?;
            if !outcome.converged {
                warnings.push(format!(
                    "status `{status}`: {} rows seen after {} passes, but the service reports {}: the list changed while paging; the next run picks up the difference",
                    outcome.seen, outcome.passes, outcome.row_count
                ));
            }
            outcomes.insert(status.to_string(), outcome);
        }
        for (status, why) in &read_in_full {
            warnings.push(format!("quick sync: status `{status}` was read in full: {why}"));
        }
        durations.insert("applications".to_owned(), t.elapsed().as_millis() as u64);
        let t = Instant::now();
        crawl.content(&windows).await?;
        durations.insert("content".to_owned(), t.elapsed().as_millis() as u64);
        Ok("completed")
    }
    .await;
    progress.finish();
    writer.finish()?;

    let metrics = client.metrics();
    write_json_atomic(&invocations_dir(&config.out, &spec.run_id).join(format!("{invocation:04}.json")), &metrics)?;
    let (mut requests, unreported) = earlier_metrics(&config.out, &spec.run_id, invocation);
    requests.merge(&metrics);
    durations.insert("extract".to_owned(), started.elapsed().as_millis() as u64);

    let (status, error) = match &result {
        Ok(s) => (s.to_string(), None),
        // The run report says the same of a stop and a spent budget: the next run resumes.
        Err(ExtractError::Interrupted | ExtractError::BudgetSpent { .. }) => {
            ("interrupted".to_owned(), Some(ExtractError::Interrupted.to_string()))
        }
        Err(e) => ("failed".to_owned(), Some(e.to_string())),
    };
    let mut report = build_report(
        config,
        &spec,
        &landing,
        &outcomes,
        status,
        error,
        invocation,
        resumed.is_some(),
        requests,
        unreported,
        durations,
        warnings,
    );
    for (s, l) in &located {
        if let Some(summary) = report.applications.get_mut(s) {
            summary.kept = l.kept.len() as u64;
            summary.rows += summary.kept;
            report.applications_total += summary.kept;
        }
    }
    let report = ExtractReport {
        sync: sync_summary(config, &spec, snapshot, reason, &landing, &report, &located, read_in_full),
        ..report
    };
    for w in &report.warnings {
        tracing::warn!(warning = %w, "data quality");
    }
    if report.status == "completed" {
        std::fs::write(dir.join("COMPLETE"), b"").map_err(io_err("write", &dir))?;
        if let Some(keep) = config.keep_raw {
            prune_raw(&config.out, keep, &spec.run_id)?;
        }
    }
    write_json_atomic(&config.out.report_path(&spec.run_id), &report)?;
    result.map(|_| report)
}

/// With `auto`: a reason to read everything when locating the changes the counts show would
/// cost about as many requests as reading every page.
fn too_many_changes(config: &ExtractConfig, snap: &Snapshot, landing: &Landing) -> Option<String> {
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

/// Locates what changed since the snapshot: page 1 of every status is landed; reads the pages
/// [`quick::round`] asks for, and every status it gives up on in full.
async fn locate_changes(
    crawl: &mut Crawl<'_>,
    snapshot: &Snapshot,
    statuses: &[ApplicationStatus],
    max_passes: u32,
    outcomes: &mut BTreeMap<String, crawl::StatusOutcome>,
    read_in_full: &mut BTreeMap<String, String>,
) -> Result<BTreeMap<String, quick::Located>, ExtractError> {
    let names: Vec<String> = statuses.iter().map(|s| s.to_string()).collect();
    let per_page = u64::from(MAX_APPLICATIONS_PER_PAGE);
    let mut asked = std::collections::HashSet::new();
    loop {
        let in_full = read_in_full.keys().cloned().collect();
        let latest = crawl.landing.latest_statuses();
        let landing = &*crawl.landing;
        let next = quick::round(snapshot, &names, &|s| landing.page_views(s, 1), &latest, &in_full, per_page);
        match next {
            quick::Round::Fetch(pages) => {
                let mut wanted = vec![];
                for (s, p) in pages {
                    if asked.insert((s.clone(), p)) {
                        wanted.push((ApplicationStatus::parse(&s), p));
                    } else {
                        // Asked and answered, yet not landed as a page: read the status in full.
                        read_in_full.insert(s.clone(), format!("page {p} could not be read as a page"));
                    }
                }
                crawl.pages(wanted, 1).await?;
            }
            quick::Round::ReadInFull(list) => {
                for (s, why) in list {
                    tracing::warn!(status = %s, reason = %why, "quick sync: reading the status in full");
                    let outcome = crawl.status(&ApplicationStatus::parse(&s), max_passes).await?;
                    outcomes.insert(s.clone(), outcome);
                    read_in_full.insert(s, why);
                }
            }
            quick::Round::Done(located) => {
                for (s, l) in &located {
                    let outcome =
                        crawl::StatusOutcome { passes: 1, converged: true, seen: l.row_count, row_count: l.row_count };
                    outcomes.insert(s.clone(), outcome);
                }
                return Ok(located);
            }
        }
    }
}

#[allow(clippy::too_many_arguments)] // the report's parts, once
fn sync_summary(
    config: &ExtractConfig,
    spec: &RunSpec,
    snapshot: Option<&Snapshot>,
    reason: String,
    landing: &Landing,
    report: &ExtractReport,
    located: &BTreeMap<String, quick::Located>,
    read_in_full: BTreeMap<String, String>,
) -> SyncSummary {
    let quick = spec.sync == SyncMode::Quick;
    let sum = |f: fn(&quick::Located) -> usize| located.values().map(|l| f(l) as u64).sum::<u64>();
    SyncSummary {
        requested: config.sync,
        mode: spec.sync,
        reason,
        base_run: spec.base_run.clone(),
        last_reconcile_at: snapshot.filter(|_| quick).and_then(|s| s.last_reconcile),
        pages_verified: report.applications.values().map(|s| s.pages_fetched).sum(),
        pages_full: config
            .statuses
            .iter()
            .map(|s| landing.page(s.as_str(), 1, 1).map_or(1, |p| p.page_count.max(1)))
            .sum(),
        counts_agree: report.status == "completed" && report.applications.values().all(|s| s.converged),
        read_in_full,
        entered: sum(|l| l.entered.len()),
        left: sum(|l| l.left.len()),
        kept: sum(|l| l.kept.len()),
    }
}

fn count_segments(dir: &std::path::Path) -> u32 {
    std::fs::read_dir(dir)
        .map(|es| {
            es.flatten()
                .filter_map(|e| {
                    let name = e.file_name().into_string().ok()?;
                    name.strip_prefix("part-")?.get(..4)?.parse::<u32>().ok()
                })
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

fn make_plan(
    config: &ExtractConfig,
    client: &Client,
    landing: &Landing,
    windows: &[(NaiveDate, NaiveDate)],
    first_pages: Duration,
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
    let pacing = client.pacer().config();
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
    }
}

#[allow(clippy::too_many_arguments)] // assembles the report from the run's parts, once
fn build_report(
    config: &ExtractConfig,
    spec: &RunSpec,
    landing: &Landing,
    outcomes: &BTreeMap<String, crawl::StatusOutcome>,
    status: String,
    error: Option<String>,
    invocation: u32,
    resumed: bool,
    requests: MetricsSnapshot,
    unreported: u32,
    durations_ms: BTreeMap<String, u64>,
    warnings: Vec<String>,
) -> ExtractReport {
    let mut applications = BTreeMap::new();
    for s in &config.statuses {
        let key = s.to_string();
        let outcome = outcomes.get(&key);
        let rows = landing.observations.values().filter(|o| o.app.status == *s).count() as u64;
        let recovered = landing.observations.values().filter(|o| o.app.status == *s && o.first_pass > 1).count() as u64;

        applications.insert(
            key.clone(),
            StatusSummary {
                row_count: outcome.map_or(0, |o| o.row_count),
                seen: outcome.map_or(0, |o| o.seen),
                rows,
                pages_fetched: landing.pages_fetched(&key),
                passes: outcome.map_or(0, |o| o.passes),
                recovered: if outcome.is_some_and(|o| o.passes > 1) { recovered } else { 0 },
                converged: outcome.is_some_and(|o| o.converged),
                kept: 0,
            },
        );
    }
    let content_rows = landing.content();
    ExtractReport {
        run_id: spec.run_id.clone(),
        status,
        started_at: spec.created_at,
        finished_at: Utc::now(),
        invocations: invocation,
        resumed,
        requests,
        unreported_invocations: unreported,
        applications,
        applications_total: landing.observations.len() as u64,
        content: ContentSummary {
            from: Some(spec.from),
            to: Some(spec.to),
            windows: landing.windows.len() as u64,
            days: content_rows.iter().filter(|r| r.metric == Metric::Views).count() as u64,
            invalid_answers: landing.invalid_windows.values().map(|n| u64::from(*n)).sum(),
        },
        durations_ms,
        warnings,
        error,
        raw_dir: config.out.raw_dir(&spec.run_id),
        sync: SyncSummary::default(),
    }
}

/// What a run extracted, read back from its raw landing: the input of transform and load.
#[derive(Debug)]
pub struct Extracted {
    pub spec: RunSpec,
    /// Latest observation of each application, by id.
    pub applications: Vec<Observation>,
    /// One row per (metric, date).
    pub content: Vec<ContentRow>,
    pub complete: bool,
    /// A quick run's locations: the applications it kept from the warehouse unread.
    pub quick: Option<QuickLanding>,
}

/// Reads a run's landing back, without calling the API.
pub fn read_extracted(out: &OutDir, run_id: &str) -> Result<Extracted, ExtractError> {
    let dir = out.raw_dir(run_id);
    let spec: RunSpec = std::fs::read(dir.join("run.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(|| ExtractError::NoSuchRun(run_id.to_owned()))?;
    let landing = Landing::from_records(&raw::read_run(&dir)?);
    Ok(Extracted {
        spec,
        applications: landing.applications().into_iter().cloned().collect(),
        content: landing.content(),
        complete: dir.join("COMPLETE").exists(),
        quick: read_quick(out, run_id)?,
    })
}
