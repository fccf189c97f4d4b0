//! A run's bookkeeping in `OUT/raw/<run_id>/`: its request (`run.json`), which unfinished run
//! the next invocation resumes, the counters of its invocations, its completion mark, and the
//! pruning of old landings. `run.json` is read here only, for the extract and the load alike.
//!
//! A run directory holds `run.json` (written first), the raw segments, `invocations/NNNN.json`
//! (each invocation's request counters), a quick run's `quick.json`, the closing check's
//! `closing.json`, and `COMPLETE` once the extract finished.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

use super::landing::{ContentRow, Landing, Observation};
use super::quick::{self, Snapshot};
use super::{raw, ExtractConfig, ExtractError, SyncMode};
use crate::api::MetricsSnapshot;
use crate::out::{io_err, write_atomic, write_json_atomic, OutDir, OutError};

const SPEC_FILE: &str = "run.json";
const COMPLETE_FILE: &str = "COMPLETE";
const QUICK_FILE: &str = "quick.json";
const CLOSING_FILE: &str = "closing.json";

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

impl RunSpec {
    /// A new run's request: `mode` is `quick` or `full`; a quick one rests on `snapshot`.
    pub fn new(config: &ExtractConfig, base_url: String, mode: SyncMode, snapshot: Option<&Snapshot>) -> Self {
        let (from, to) = content_range(config, Utc::now().date_naive());
        let quick = mode == SyncMode::Quick;
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

    /// Whether `config` asks for what this run asked for: the same service, scope and windows;
    /// explicit dates must match, default ones take the run's.
    fn same_request(&self, config: &ExtractConfig, base_url: &str) -> bool {
        self.base_url == base_url
            && self.statuses == config.statuses.iter().map(|s| s.to_string()).collect::<Vec<_>>()
            && self.campaign_id == config.campaign_id
            && self.window_days == config.window_days
            && config.from.is_none_or(|f| f == self.from)
            && config.to.is_none_or(|t| t == self.to)
    }

    /// Whether a sync starting in `mode` may continue this run: a quick run only on the same
    /// snapshot; a full run as it began, unless this sync asks for quick (`--sync quick`).
    fn same_mode(&self, config: &ExtractConfig, mode: SyncMode, snapshot: Option<&Snapshot>) -> bool {
        let quick = mode == SyncMode::Quick;
        match self.sync {
            SyncMode::Quick => quick && snapshot.map(|s| &s.base_run) == self.base_run.as_ref(),
            _ => config.sync != SyncMode::Quick || !quick,
        }
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

/// Reads the request of the run in `dir`; `None` when it has none or it is unreadable.
fn read_spec_in(dir: &Path) -> Option<RunSpec> {
    crate::out::read_json(&dir.join(SPEC_FILE)).ok().flatten()
}

/// Reads a run's request.
pub fn read_spec(out: &OutDir, run_id: &str) -> Result<RunSpec, ExtractError> {
    read_spec_in(&out.raw_dir(run_id)).ok_or_else(|| ExtractError::NoSuchRun(run_id.to_owned()))
}

/// Whether `run_id` names a raw run: its directory holds its request.
pub fn exists(out: &OutDir, run_id: &str) -> bool {
    out.raw_dir(run_id).join(SPEC_FILE).exists()
}

/// Writes a run's request, which starts the run (or changes its mode, before any page past
/// the first ones is landed).
pub(crate) fn write_spec(out: &OutDir, spec: &RunSpec) -> Result<(), OutError> {
    write_json_atomic(&out.raw_dir(&spec.run_id).join(SPEC_FILE), spec)
}

fn is_complete(dir: &Path) -> bool {
    dir.join(COMPLETE_FILE).exists()
}

/// The raw landings with a request, oldest first: by creation time (run ids only resolve
/// seconds), then name.
fn runs_oldest_first(out: &OutDir) -> Vec<(PathBuf, Option<RunSpec>)> {
    let Ok(entries) = std::fs::read_dir(out.raw_root()) else { return vec![] };
    let mut runs: Vec<(PathBuf, Option<RunSpec>)> =
        entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()).map(|d| (d.clone(), read_spec_in(&d))).collect();
    runs.sort_by_cached_key(|(d, spec)| (spec.as_ref().map(|s| s.created_at), d.clone()));
    runs
}

/// The newest raw run's directory, when that run did not finish extracting.
fn unfinished_dir(out: &OutDir) -> Option<PathBuf> {
    let dir = runs_oldest_first(out).into_iter().rev().map(|(d, _)| d).find(|d| d.join(SPEC_FILE).exists())?;
    (!is_complete(&dir)).then_some(dir)
}

/// The id of the newest raw run when it did not finish extracting: the next run with the same
/// request resumes it.
pub fn unfinished_run(out: &OutDir) -> Option<String> {
    Some(unfinished_dir(out)?.file_name()?.to_string_lossy().into_owned())
}

/// The newest raw run that finished extracting.
pub fn latest_complete_run(out: &OutDir) -> Option<String> {
    let mut runs: Vec<(DateTime<Utc>, String)> = vec![];
    for entry in std::fs::read_dir(out.raw_root()).into_iter().flatten().flatten() {
        let dir = entry.path();
        if is_complete(&dir) {
            if let Some(spec) = read_spec_in(&dir) {
                runs.push((spec.created_at, spec.run_id));
            }
        }
    }
    runs.into_iter().max().map(|(_, id)| id)
}

/// The unfinished run a sync starting in `mode` continues, if any: `--fresh` never continues,
/// and an unfinished run that asked for something else is left for a new one.
pub(crate) fn resumable(
    config: &ExtractConfig,
    base_url: &str,
    mode: SyncMode,
    snapshot: Option<&Snapshot>,
) -> Option<RunSpec> {
    if config.fresh {
        return None;
    }
    let spec = read_spec_in(&unfinished_dir(&config.out)?)?;
    if !spec.same_request(config, base_url) {
        tracing::warn!(run_id = %spec.run_id, "an unfinished run asked for something else; starting a new run");
        return None;
    }
    spec.same_mode(config, mode, snapshot).then_some(spec)
}

/// Removes raw directories without a `run.json`: a run killed while it wrote its spec, before
/// it could land anything. The caller holds the lock, so no other run is starting.
pub(crate) fn remove_unstarted(out: &OutDir) -> Result<(), OutError> {
    let Ok(entries) = std::fs::read_dir(out.raw_root()) else { return Ok(()) };
    for dir in entries.flatten().map(|e| e.path()).filter(|p| p.is_dir() && !p.join(SPEC_FILE).exists()) {
        std::fs::remove_dir_all(&dir).map_err(io_err("remove", &dir))?;
        tracing::info!(dir = %dir.display(), "removed the raw directory of a run killed before it started");
    }
    Ok(())
}

/// Marks a run's extract finished (the load takes only such runs), then keeps only the newest
/// `keep_raw` landings, if given.
pub(crate) fn complete(out: &OutDir, run_id: &str, keep_raw: Option<usize>) -> Result<(), OutError> {
    write_atomic(&out.raw_dir(run_id).join(COMPLETE_FILE), b"")?;
    match keep_raw {
        Some(keep) => prune_raw(out, keep, run_id),
        None => Ok(()),
    }
}

/// Deletes all but the newest `keep` runs' raw landings (never `current`).
fn prune_raw(out: &OutDir, keep: usize, current: &str) -> Result<(), OutError> {
    let dirs = runs_oldest_first(out);
    let excess = dirs.len().saturating_sub(keep.max(1));
    for (d, _) in dirs.into_iter().take(excess) {
        if d.file_name().and_then(|n| n.to_str()) != Some(current) {
            std::fs::remove_dir_all(&d).map_err(io_err("remove", &d))?;
            tracing::info!(dir = %d.display(), "pruned old raw landing");
        }
    }
    Ok(())
}

/// The number of this invocation of a run: one more than any that landed a record or began a
/// segment.
pub(crate) fn next_invocation(dir: &Path, landing: &Landing) -> u32 {
    let segments = std::fs::read_dir(dir)
        .map(|es| {
            es.flatten()
                .filter_map(|e| {
                    let name = e.file_name().into_string().ok()?;
                    name.strip_prefix("part-")?.get(..4)?.parse::<u32>().ok()
                })
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0);
    landing.max_invocation.max(segments) + 1
}

fn invocation_path(out: &OutDir, run_id: &str, invocation: u32) -> PathBuf {
    out.invocation_file(run_id, invocation)
}

/// Records this invocation's request counters, then sums every invocation's: the run's
/// requests, and how many earlier invocations reported none (killed).
pub(crate) fn record_requests(
    out: &OutDir,
    run_id: &str,
    invocation: u32,
    metrics: &MetricsSnapshot,
) -> Result<(MetricsSnapshot, u32), OutError> {
    write_json_atomic(&invocation_path(out, run_id, invocation), metrics)?;
    let mut total = MetricsSnapshot::default();
    let mut missing = 0;
    for n in 1..invocation {
        match crate::out::read_json::<MetricsSnapshot>(&invocation_path(out, run_id, n)).ok().flatten() {
            Some(m) => total.merge(&m),
            None => missing += 1,
        }
    }
    total.merge(metrics);
    Ok((total, missing))
}

/// A quick run's locations, `raw/<run>/quick.json`: what the load takes from the warehouse.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QuickLanding {
    pub base_run: String,
    pub located: BTreeMap<String, quick::Located>,
    /// The statuses read in full instead, and why. Written once the locating is done (and again
    /// after the closing check): a resumed invocation takes both as they are, not locating again
    /// over pages that later requests have changed the meaning of.
    #[serde(default)]
    pub read_in_full: BTreeMap<String, String>,
}

impl QuickLanding {
    /// The applications kept from the warehouse unread, over every status.
    pub fn kept(&self) -> impl Iterator<Item = i64> + '_ {
        self.located.values().flat_map(|l| l.kept.iter().copied())
    }
}

/// Removes a run's `quick.json`: a run that turned full (`auto` falling back) has no locations.
pub(crate) fn remove_quick(out: &OutDir, run_id: &str) -> Result<(), OutError> {
    let path = out.raw_dir(run_id).join(QUICK_FILE);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err("remove", &path)(e)),
        _ => Ok(()),
    }
}

pub(crate) fn write_quick(out: &OutDir, run_id: &str, quick: &QuickLanding) -> Result<(), OutError> {
    write_json_atomic(&out.raw_dir(run_id).join(QUICK_FILE), quick)
}

/// The closing check of a run (see the extract's manual page): why it ran, how far it got, and
/// the statuses it read again. Kept as `raw/<run>/closing.json` while the run goes on, so a
/// resumed invocation continues it and a finished one is not made again.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClosingCheck {
    pub reason: String,
    /// Statuses probed so far, in the check's order.
    pub probed: u32,
    /// The status being read again, and the pass that reads it, when an invocation ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reading: Option<(String, u32)>,
    /// Status → why it was read again.
    pub read_again: BTreeMap<String, String>,
    pub done: bool,
    /// Applications of the previous lists still on no page read (and not kept) when the check
    /// was done: gone from the scope, or moved into a status whose count another application's
    /// leaving held still; this sync drops them, and a later one finds them where they are.
    #[serde(default)]
    pub still_missing: u64,
    /// Up to ten of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub still_missing_ids: Vec<i64>,
}

/// Saves the run's closing check, `raw/<run>/closing.json`.
pub(crate) fn write_closing(out: &OutDir, run_id: &str, check: &ClosingCheck) -> Result<(), OutError> {
    write_json_atomic(&out.raw_dir(run_id).join(CLOSING_FILE), check)
}

/// The run's closing check so far; `None` when it has not begun. An unreadable file (a version
/// that wrote none, or damage) is taken as not begun: the check is made again.
pub(crate) fn read_closing(out: &OutDir, run_id: &str) -> Result<Option<ClosingCheck>, ExtractError> {
    let path = out.raw_dir(run_id).join(CLOSING_FILE);
    match crate::out::read_json(&path) {
        Ok(check) => Ok(check),
        Err(crate::out::ReadJsonError::Io(e)) => Err(io_err("read", &path)(e).into()),
        Err(crate::out::ReadJsonError::Parse(_)) => Ok(None),
    }
}

/// Reads a run's `quick.json`; `None` for a full run.
pub fn read_quick(out: &OutDir, run_id: &str) -> Result<Option<QuickLanding>, ExtractError> {
    let path = out.raw_dir(run_id).join(QUICK_FILE);
    match crate::out::read_json(&path) {
        Ok(quick) => Ok(quick),
        Err(crate::out::ReadJsonError::Io(e)) => Err(io_err("read", &path)(e).into()),
        Err(crate::out::ReadJsonError::Parse(_)) => Err(ExtractError::NoSuchRun(run_id.to_owned())),
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
    let spec = read_spec(out, run_id)?;
    let landing = Landing::from_records(&raw::read_run(&dir)?);
    Extracted::from_landing(out, spec, landing, is_complete(&dir))
}

impl Extracted {
    /// About how many bytes it holds in memory (its applications with their text and accounts,
    /// its days of content, a quick run's kept ids; not the allocator's overhead): what a fleet
    /// counts of the landings that wait for their load.
    pub fn approximate_bytes(&self) -> usize {
        use std::mem::size_of;
        let applications: usize = self.applications.iter().map(Observation::approximate_bytes).sum();
        let kept = self.quick.as_ref().map_or(0, |q| q.kept().count() * size_of::<i64>());
        applications + self.content.len() * size_of::<ContentRow>() + kept
    }

    /// What `landing` holds, for a load, whether read back ([`read_extracted`]) or as the
    /// invocation that landed it holds it: one conversion for both, which takes the landing so
    /// that its applications are not held twice. `complete`: the run's `COMPLETE` mark is written.
    pub(crate) fn from_landing(
        out: &OutDir,
        spec: RunSpec,
        landing: Landing,
        complete: bool,
    ) -> Result<Extracted, ExtractError> {
        let quick = read_quick(out, &spec.run_id)?;
        let content = landing.content();
        Ok(Extracted { spec, applications: landing.into_applications(), content, complete, quick })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extract::quick::Snapshot;

    fn config(out: &Path) -> ExtractConfig {
        ExtractConfig::defaults(OutDir::new(out))
    }

    fn snapshot(base_run: &str) -> Snapshot {
        Snapshot { base_run: base_run.to_owned(), ..Snapshot::default() }
    }

    fn start(out: &OutDir, spec: &RunSpec) {
        write_spec(out, spec).unwrap();
    }

    const URL: &str = "http://service/api";

    #[test]
    fn an_unfinished_run_with_the_same_request_is_resumed_and_a_complete_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let c = config(dir.path());
        assert_eq!(resumable(&c, URL, SyncMode::Full, None), None, "nothing to resume");
        let spec = RunSpec::new(&c, URL.into(), SyncMode::Full, None);
        start(&c.out, &spec);
        assert_eq!(unfinished_run(&c.out).as_deref(), Some(spec.run_id.as_str()));
        assert_eq!(resumable(&c, URL, SyncMode::Full, None), Some(spec.clone()));
        assert_eq!(resumable(&ExtractConfig { fresh: true, ..c.clone() }, URL, SyncMode::Full, None), None);
        assert_eq!(resumable(&c, "http://other/api", SyncMode::Full, None), None, "another service");
        let narrower = ExtractConfig { statuses: c.statuses[..2].to_vec(), ..c.clone() };
        assert_eq!(resumable(&narrower, URL, SyncMode::Full, None), None, "another scope");
        let other_to = ExtractConfig { to: Some(spec.to - chrono::Duration::days(1)), ..c.clone() };
        assert_eq!(resumable(&other_to, URL, SyncMode::Full, None), None, "other explicit dates");
        let same_to = ExtractConfig { to: Some(spec.to), ..c.clone() };
        assert!(resumable(&same_to, URL, SyncMode::Full, None).is_some(), "the same explicit dates");

        complete(&c.out, &spec.run_id, None).unwrap();
        assert_eq!(unfinished_run(&c.out), None);
        assert_eq!(resumable(&c, URL, SyncMode::Full, None), None);
        assert_eq!(latest_complete_run(&c.out).as_deref(), Some(spec.run_id.as_str()));
        assert_eq!(read_spec(&c.out, &spec.run_id).unwrap(), spec);
    }

    #[test]
    fn the_mode_decides_which_unfinished_run_continues() {
        let dir = tempfile::tempdir().unwrap();
        let c = config(dir.path());
        let (snap, other) = (snapshot("r1"), snapshot("r2"));
        let quick = RunSpec::new(&c, URL.into(), SyncMode::Quick, Some(&snap));
        assert_eq!(quick.base_run.as_deref(), Some("r1"));
        start(&c.out, &quick);
        assert!(resumable(&c, URL, SyncMode::Quick, Some(&snap)).is_some(), "quick on the same snapshot");
        assert_eq!(resumable(&c, URL, SyncMode::Quick, Some(&other)), None, "quick on another snapshot");
        assert_eq!(resumable(&c, URL, SyncMode::Full, None), None, "a full sync never continues a quick one");

        let dir = tempfile::tempdir().unwrap();
        let c = config(dir.path());
        start(&c.out, &RunSpec::new(&c, URL.into(), SyncMode::Full, None));
        assert!(resumable(&c, URL, SyncMode::Full, None).is_some());
        assert!(resumable(&c, URL, SyncMode::Quick, Some(&snap)).is_some(), "`auto` finishes the full sync");
        let asked_quick = ExtractConfig { sync: SyncMode::Quick, ..c.clone() };
        assert_eq!(resumable(&asked_quick, URL, SyncMode::Quick, Some(&snap)), None, "`--sync quick` starts anew");
    }

    #[test]
    fn old_run_specs_read_as_full_and_unstarted_runs_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let out = OutDir::new(dir.path());
        let old = r#"{"run_id":"20240101T000000Z-0001","created_at":"2024-01-01T00:00:00Z","base_url":"u",
            "statuses":["accepted"],"campaign_id":null,"max_passes":3,"from":"2023-01-01","to":"2024-01-01",
            "window_days":90}"#;
        let run_dir = out.raw_dir("20240101T000000Z-0001");
        std::fs::create_dir_all(&run_dir).unwrap();
        std::fs::write(run_dir.join(SPEC_FILE), old).unwrap();
        let spec = read_spec(&out, "20240101T000000Z-0001").unwrap();
        assert_eq!((spec.sync, spec.base_run), (SyncMode::Full, None));
        assert!(matches!(read_spec(&out, "nope"), Err(ExtractError::NoSuchRun(_))));

        std::fs::create_dir_all(out.raw_dir("killed")).unwrap();
        remove_unstarted(&out).unwrap();
        assert!(!out.raw_dir("killed").exists());
        assert!(exists(&out, "20240101T000000Z-0001"));
    }

    #[test]
    fn pruning_keeps_the_newest_runs_and_the_current_one() {
        let dir = tempfile::tempdir().unwrap();
        let c = config(dir.path());
        let ids: Vec<String> = (0..4)
            .map(|i| {
                let spec = RunSpec {
                    created_at: Utc::now() + chrono::Duration::seconds(i),
                    run_id: format!("run-{i}"),
                    ..RunSpec::new(&c, URL.into(), SyncMode::Full, None)
                };
                start(&c.out, &spec);
                spec.run_id
            })
            .collect();
        complete(&c.out, &ids[3], Some(2)).unwrap();
        let left: Vec<bool> = ids.iter().map(|id| c.out.raw_dir(id).exists()).collect();
        assert_eq!(left, [false, false, true, true]);
    }

    #[test]
    fn requests_add_up_over_invocations_and_killed_ones_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let out = OutDir::new(dir.path());
        let one = MetricsSnapshot { requests_total: 5, ..MetricsSnapshot::default() };
        record_requests(&out, "r", 1, &one).unwrap();
        let three = MetricsSnapshot { requests_total: 7, ..MetricsSnapshot::default() };
        let (total, unreported) = record_requests(&out, "r", 3, &three).unwrap();
        assert_eq!((total.requests_total, unreported), (12, 1), "invocation 2 was killed");
    }
}
