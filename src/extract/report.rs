//! The run report, `OUT/runs/<run_id>.json`: what a run fetched, verified and found, assembled
//! from its landing once the invocation ends, whatever the outcome.

use std::collections::BTreeMap;
use std::path::PathBuf;

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

use super::crawl::StatusOutcome;
use super::landing::{Landing, Metric};
use super::quick::{self, Snapshot};
use super::runs::{ClosingCheck, RunSpec};
use super::{ExtractConfig, SyncMode};
use crate::api::MetricsSnapshot;

/// How an invocation of a run ended; the report's `status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Everything is landed: the run can be loaded.
    Completed,
    /// `--plan-only`: page 1 of every status, nothing more.
    Planned,
    /// Stopped (Ctrl-C, a budget); the next run resumes.
    Interrupted,
    Failed,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Completed => "completed",
            RunStatus::Planned => "planned",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Failed => "failed",
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for RunStatus {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for RunStatus {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
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
    /// Windows the service has no statistics for: both series empty (a new organization).
    #[serde(default)]
    pub empty_windows: u64,
    /// The first day of the first such window: the content cursor stops before it, so the next
    /// run asks for those days again (a service whose statistics lag answers them later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_empty_day: Option<NaiveDate>,
}

/// The run report, `OUT/runs/<run_id>.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ExtractReport {
    pub run_id: String,
    /// `completed`, `planned` (`--plan-only`), `interrupted` or `failed`.
    pub status: RunStatus,
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
    pub durations_ms: ExtractTimings,
    pub warnings: Vec<String>,
    pub error: Option<String>,
    pub raw_dir: PathBuf,
    /// Quick or full, and what it verified.
    #[serde(default)]
    pub sync: SyncSummary,
    /// The run's closing check, when it has one (see the extract's manual page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closing_check: Option<ClosingCheck>,
}

/// What an invocation found besides its landing, for the report.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    /// How each status's crawl ended.
    pub outcomes: BTreeMap<String, StatusOutcome>,
    /// A quick sync's locations per status.
    pub located: BTreeMap<String, quick::Located>,
    /// Statuses a quick sync read in full, and why.
    pub read_in_full: BTreeMap<String, String>,
    pub warnings: Vec<String>,
    pub durations_ms: ExtractTimings,
    pub closing_check: Option<ClosingCheck>,
}

/// Milliseconds per step of an extract (`durations_ms`), each when this invocation got to it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtractTimings {
    /// Paging the applications of every status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applications: Option<u64>,
    /// The content statistics' windows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<u64>,
    /// The whole invocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extract: Option<u64>,
}

/// What the report says of the invocation itself.
#[derive(Debug)]
pub(crate) struct Invocation {
    pub number: u32,
    pub resumed: bool,
    pub status: RunStatus,
    pub error: Option<String>,
    /// Every invocation's requests, and how many reported none.
    pub requests: MetricsSnapshot,
    pub unreported: u32,
}

/// Assembles the report of a run from its landing and what this invocation found.
pub(crate) fn build(
    config: &ExtractConfig,
    spec: &RunSpec,
    snapshot: Option<&Snapshot>,
    reason: String,
    landing: &Landing,
    invocation: Invocation,
    findings: Findings,
) -> ExtractReport {
    let Findings { outcomes, located, read_in_full, mut warnings, durations_ms, closing_check } = findings;
    let mut applications = BTreeMap::new();
    for s in &config.statuses {
        let key = s.to_string();
        let outcome = outcomes.get(&key);
        let rows = landing.observations.values().filter(|o| o.app.status == *s).count() as u64;
        let recovered = landing.observations.values().filter(|o| o.app.status == *s && o.first_pass > 1).count() as u64;
        let kept = located.get(&key).map_or(0, |l| l.kept.len() as u64);
        applications.insert(
            key.clone(),
            StatusSummary {
                row_count: outcome.map_or(0, |o| o.row_count),
                seen: outcome.map_or(0, |o| o.seen),
                rows: rows + kept,
                pages_fetched: landing.pages_fetched(&key),
                passes: outcome.map_or(0, |o| o.passes),
                recovered: if outcome.is_some_and(|o| o.passes > 1) { recovered } else { 0 },
                converged: outcome.is_some_and(|o| o.converged),
                kept,
            },
        );
    }
    let kept: u64 = applications.values().map(|s| s.kept).sum();
    let empty = landing.empty_windows();
    warnings.extend(no_statistics_warning(&empty, landing.windows.len()));
    let content_rows = landing.content();
    let content = ContentSummary {
        from: Some(spec.from),
        to: Some(spec.to),
        windows: landing.windows.len() as u64,
        days: content_rows.iter().filter(|r| r.metric == Metric::Views).count() as u64,
        invalid_answers: landing.invalid_windows.values().map(|n| u64::from(*n)).sum(),
        empty_windows: empty.len() as u64,
        first_empty_day: empty.iter().map(|(start, _)| *start).min(),
    };
    let sync =
        sync_summary(config, spec, snapshot, reason, landing, invocation.status, &applications, &located, read_in_full);
    ExtractReport {
        run_id: spec.run_id.clone(),
        status: invocation.status,
        started_at: spec.created_at,
        finished_at: Utc::now(),
        invocations: invocation.number,
        resumed: invocation.resumed,
        requests: invocation.requests,
        unreported_invocations: invocation.unreported,
        applications,
        applications_total: landing.observations.len() as u64 + kept,
        content,
        durations_ms,
        warnings,
        error: invocation.error,
        raw_dir: config.out.raw_dir(&spec.run_id),
        closing_check,
        sync,
    }
}

#[allow(clippy::too_many_arguments)] // the summary's parts, once
fn sync_summary(
    config: &ExtractConfig,
    spec: &RunSpec,
    snapshot: Option<&Snapshot>,
    reason: String,
    landing: &Landing,
    status: RunStatus,
    applications: &BTreeMap<String, StatusSummary>,
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
        pages_verified: applications.values().map(|s| s.pages_fetched).sum(),
        pages_full: config
            .statuses
            .iter()
            .map(|s| landing.page(s.as_str(), 1, 1).map_or(1, |p| p.page_count.max(1)))
            .sum(),
        counts_agree: status == RunStatus::Completed && applications.values().all(|s| s.converged),
        read_in_full,
        entered: sum(|l| l.entered.len()),
        left: sum(|l| l.left.len()),
        kept: sum(|l| l.kept.len()),
    }
}

/// The warning for windows the service has no statistics for (both series empty), which load
/// as no rows: the consecutive ones as one range.
fn no_statistics_warning(empty: &[(NaiveDate, NaiveDate)], windows: usize) -> Option<String> {
    let mut ranges: Vec<(NaiveDate, NaiveDate)> = vec![];
    for &(start, end) in empty {
        match ranges.last_mut() {
            Some(last) if last.1.succ_opt() == Some(start) => last.1 = end,
            _ => ranges.push((start, end)),
        }
    }
    let list: Vec<String> = ranges.iter().map(|(a, b)| format!("{a}..{b}")).collect();
    (!empty.is_empty()).then(|| {
        format!(
            "content: no content statistics for {} ({} of {windows} windows): the service answered both series empty, as it does for an organization without content yet; these days are loaded as no rows",
            list.join(", "),
            empty.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_reads_and_writes_the_strings_of_every_report() {
        for (status, text) in [
            (RunStatus::Completed, "completed"),
            (RunStatus::Planned, "planned"),
            (RunStatus::Interrupted, "interrupted"),
            (RunStatus::Failed, "failed"),
        ] {
            assert_eq!(serde_json::to_string(&status).unwrap(), format!("\"{text}\""));
            assert_eq!(serde_json::from_str::<RunStatus>(&format!("\"{text}\"")).unwrap(), status);
            assert_eq!(status, text);
            assert_eq!(status.to_string(), text);
        }
        assert!(serde_json::from_str::<RunStatus>("\"done\"").is_err());
    }

    #[test]
    fn a_report_written_before_the_enum_still_reads() {
        let old = serde_json::json!({
            "run_id": "20240101T000000Z-0001", "status": "completed",
            "started_at": "2024-01-01T00:00:00Z", "finished_at": "2024-01-01T00:01:00Z",
            "invocations": 1, "resumed": false, "requests": MetricsSnapshot::default(), "unreported_invocations": 0,
            "applications": {}, "applications_total": 0,
            "content": {"from": "2023-01-01", "to": "2024-01-01", "windows": 5, "days": 366, "invalid_answers": 0},
            "durations_ms": {}, "warnings": [], "error": null, "raw_dir": "/out/raw/20240101T000000Z-0001"
        });
        let report: ExtractReport = serde_json::from_value(old).unwrap();
        assert_eq!(report.status, RunStatus::Completed);
        assert_eq!(report.content.empty_windows, 0);
        assert_eq!(serde_json::to_value(&report).unwrap()["status"], "completed");
    }

    #[test]
    fn windows_without_statistics_are_named_as_ranges() {
        let d = |s: &str| NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap();
        assert_eq!(no_statistics_warning(&[], 3), None);
        let empty = [
            (d("2024-01-01"), d("2024-01-10")),
            (d("2024-01-11"), d("2024-01-20")),
            (d("2024-02-01"), d("2024-02-10")),
        ];
        let w = no_statistics_warning(&empty, 5).unwrap();
        assert!(
            w.starts_with(
                "content: no content statistics for 2024-01-01..2024-01-20, 2024-02-01..2024-02-10 (3 of 5 windows)"
            ),
            "{w}"
        );
    }
}
