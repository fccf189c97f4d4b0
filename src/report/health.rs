//! How an organization's data stands, shown at the top of its page: fresh, stale, failed,
//! interrupted, unknown or never synced, from the last runs' rows (`run_health`) and what the
//! output directory records of the commands since ([`super::runs`]).

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::data::{ago, stamp};
use super::rows::RunHealth;

/// How the organization's data stands, shown at the top of its page. Ordered worst first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthState {
    /// A command that should have refreshed the data failed (its stage is on record, and no later
    /// command redid it), a run it extracted was not loaded or not published, or the last loaded
    /// run did not complete.
    Failed,
    /// A command started and did not end (killed, out of memory, the machine lost) and nothing
    /// holds the output directory now, or a run was stopped (Ctrl-C, a budget): a rerun resumes.
    Interrupted,
    /// A command has not ended, and whether it still runs cannot be told (the lock cannot be
    /// probed), or its record cannot be read.
    Unknown,
    /// The last sync finished longer ago than `--stale-after`.
    Stale,
    /// Nothing loaded yet.
    Never,
    /// A run holds the output directory now (its lock): the data is the last finished sync's.
    Running,
    Fresh,
}

impl HealthState {
    /// Every state, worst first.
    pub const ALL: [HealthState; 7] = [
        HealthState::Failed,
        HealthState::Interrupted,
        HealthState::Unknown,
        HealthState::Stale,
        HealthState::Never,
        HealthState::Running,
        HealthState::Fresh,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HealthState::Failed => "failed",
            HealthState::Interrupted => "interrupted",
            HealthState::Unknown => "unknown",
            HealthState::Stale => "stale",
            HealthState::Never => "never synced",
            HealthState::Running => "running",
            HealthState::Fresh => "fresh",
        }
    }

    /// The state as a CSS class name: `never-synced`.
    pub fn css_class(self) -> String {
        self.as_str().replace(' ', "-")
    }

    /// Whether a monitor can leave it alone: fresh data, or a run in progress over fresh data (or
    /// a first sync in progress). Anything else makes `creator-etl report` exit 7.
    pub fn is_healthy(self) -> bool {
        matches!(self, HealthState::Fresh | HealthState::Running)
    }
}

/// What kind of trouble a [`RunProblem`] is, worst first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProblemKind {
    Failed,
    Interrupted,
    Unknown,
}

impl ProblemKind {
    fn state(self) -> HealthState {
        match self {
            ProblemKind::Failed => HealthState::Failed,
            ProblemKind::Interrupted => HealthState::Interrupted,
            ProblemKind::Unknown => HealthState::Unknown,
        }
    }
}

/// A run that did not bring the data up to date, as the output directory tells (its stage
/// ledger, its raw runs, the fleet's status file).
#[derive(Clone, Debug, Serialize)]
pub struct RunProblem {
    pub kind: ProblemKind,
    pub at: Option<DateTime<Utc>>,
    pub what: String,
}

/// The health of one organization: its state and the sentences that explain it.
#[derive(Clone, Debug, Serialize)]
pub struct Health {
    pub state: HealthState,
    pub headline: String,
    pub notes: Vec<String>,
    pub last_synced_at: Option<DateTime<Utc>>,
}

impl Health {
    /// `problems`: what the output directory knows that the data does not (the newest heads the
    /// page, the others follow as notes); `running`: who holds the output directory's lock now
    /// (another process), if anyone.
    pub fn of(
        runs: &[RunHealth],
        problems: &[RunProblem],
        running: Option<&str>,
        now: DateTime<Utc>,
        stale_after: std::time::Duration,
    ) -> Health {
        let last = runs.first();
        let last_synced_at = last.and_then(|r| r.finished_at);
        let mut notes = vec![];
        // The worst problem heads the page, the newest of those (one with no time counts as
        // newest); the others are said below it.
        let mut problems: Vec<&RunProblem> = problems.iter().collect();
        problems.sort_by_key(|p| (p.kind, std::cmp::Reverse((p.at.is_none(), p.at))));
        let (first, others) = match problems.split_first() {
            Some((first, others)) => (Some(*first), others),
            None => (None, &[][..]),
        };
        for p in others {
            notes.push(format!("Also: {}{}.", p.what, at(p.at)));
        }
        if let Some(r) = last {
            if let Some(w) = r.warnings.filter(|w| *w > 0) {
                notes.push(format!("The last loaded run reported {w} warning{}.", plural(w)));
            }
            if r.counts_agree == Some(false) {
                notes.push(
                    "The last loaded run's counts did not all agree with the service's totals; a full sync reconciles them."
                        .into(),
                );
            }
            if let Some(n) = r.rate_limited.filter(|n| *n > 0) {
                notes.push(format!("The last loaded run was answered 429 (rate limited) {n} time{}.", plural(n)));
            }
        }
        let completed = last.is_none_or(|r| r.status == "completed" || r.status == "loaded");
        let age = last_synced_at.map(|t| since(now, t));
        let (state, headline) = match (first, last_synced_at) {
            (Some(p), _) => {
                let state = p.kind.state();
                let word = match p.kind {
                    ProblemKind::Failed => "Failed",
                    ProblemKind::Interrupted => "Interrupted",
                    ProblemKind::Unknown => "Unknown",
                };
                (
                    state,
                    format!(
                        "{word}: {}{}. {}",
                        p.what,
                        at(p.at),
                        match last_synced_at {
                            Some(t) => format!("The data below is from the sync that finished {}.", stamp(t)),
                            None => "Nothing has been loaded yet.".into(),
                        }
                    ),
                )
            }
            (None, _) if !completed => (
                HealthState::Failed,
                format!("Failed: the last loaded run ended `{}`.", last.map_or("", |r| r.status.as_str())),
            ),
            (None, None) => (
                HealthState::Never,
                "Never synced: no run has been loaded yet, so there is nothing to show. Run `creator-etl run`.".into(),
            ),
            (None, Some(t)) => {
                let age = since(now, t);
                let mode = last.map_or("full", RunHealth::mode);
                if age > stale_after {
                    (
                        HealthState::Stale,
                        format!(
                            "Stale: the last sync finished {}, {} before this page was made (more than {}).",
                            stamp(t),
                            ago(age),
                            humantime::format_duration(stale_after)
                        ),
                    )
                } else {
                    (
                        HealthState::Fresh,
                        format!(
                            "Fresh: last synced {}, {} before this page was made, a {mode} sync.",
                            stamp(t),
                            ago(age)
                        ),
                    )
                }
            }
        };
        // A run in progress: the page says so, but never instead of a failure or of data
        // older than `--stale-after`.
        let (state, headline) = match (running, state) {
            (Some(holder), HealthState::Fresh | HealthState::Never) => (
                HealthState::Running,
                format!(
                    "Running: {holder} holds the output directory now. {}",
                    match (last_synced_at, age) {
                        (Some(t), Some(a)) => format!(
                            "The data below is from the sync that finished {}, {} before this page was made.",
                            stamp(t),
                            ago(a)
                        ),
                        _ => "Nothing has been loaded yet.".into(),
                    }
                ),
            ),
            (Some(holder), state) => {
                notes.insert(0, format!("A run holds the output directory now: {holder}."));
                (state, headline)
            }
            (None, state) => (state, headline),
        };
        Health { state, headline, notes, last_synced_at }
    }
}

/// ` (TIME)`, when a problem's time is known.
fn at(t: Option<DateTime<Utc>>) -> String {
    t.map_or_else(String::new, |t| format!(" ({})", stamp(t)))
}

/// How long before `now` a time was; nothing for a time after it (a clock set back).
fn since(now: DateTime<Utc>, t: DateTime<Utc>) -> std::time::Duration {
    (now - t).to_std().unwrap_or(std::time::Duration::ZERO)
}

fn plural(n: i64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use serde_json::Value;

    use crate::report::data::{Answer, Answers};

    fn answers(runs: Vec<Value>) -> Vec<RunHealth> {
        let rows = runs.into_iter().map(|v| v.as_object().unwrap().clone()).collect();
        let mut a = Answers::default();
        a.0.insert("run_health", Answer { params: BTreeMap::new(), aggregate: None, rows });
        super::super::rows::Typed::of(&a).unwrap().run_health
    }

    #[test]
    fn health_is_fresh_stale_failed_or_never() {
        let now: DateTime<Utc> = "2026-11-25T12:00:00Z".parse().unwrap();
        let day = std::time::Duration::from_secs(26 * 3600);
        let run = |at: &str, status: &str| {
            serde_json::json!({"run_id": "r1", "started_at": null, "finished_at": at, "status": status,
                               "duration_s": 1.0, "requests": 7, "retries": 0, "rate_limited": 0, "pacing_wait_s": 0.0,
                               "status_changes": 0, "warnings": 2, "parquet_exported": true, "sync_mode": "quick",
                               "pages_verified": 3, "counts_agree": false, "last_reconcile_at": null})
        };
        let h = Health::of(&answers(vec![run("2026-11-25T09:59:59.5+00:00", "completed")]), &[], None, now, day);
        assert_eq!(h.state, HealthState::Fresh);
        assert!(
            h.headline.contains("2 h 0 min before this page") && h.headline.contains("quick sync"),
            "{}",
            h.headline
        );
        assert_eq!(h.notes.len(), 2, "warnings and disagreeing counts: {:?}", h.notes);
        let h = Health::of(&answers(vec![run("2026-11-23T10:00:00+00:00", "completed")]), &[], None, now, day);
        assert_eq!(h.state, HealthState::Stale);
        assert!(
            h.headline.contains("2 days 2 h before") && h.headline.contains("(more than 1day 2h)"),
            "{}",
            h.headline
        );
        let failed = RunProblem { kind: ProblemKind::Failed, at: Some(now), what: "run x did not finish".into() };
        let h = Health::of(
            &answers(vec![run("2026-11-25T10:00:00+00:00", "completed")]),
            std::slice::from_ref(&failed),
            None,
            now,
            day,
        );
        assert_eq!(h.state, HealthState::Failed);
        assert!(
            h.headline.starts_with("Failed: run x did not finish (2026-11-25 12:00 UTC). The data below"),
            "{}",
            h.headline
        );
        let h = Health::of(&answers(vec![run("2026-11-25T10:00:00+00:00", "failed")]), &[], None, now, day);
        assert_eq!(h.state, HealthState::Failed);
        let h = Health::of(&answers(vec![]), &[], None, now, day);
        assert_eq!(h.state, HealthState::Never);
        assert_eq!(h.last_synced_at, None);
        let h = Health::of(
            &answers(vec![run("2026-11-23T10:00:00+00:00", "completed")]),
            &[],
            Some("run 20261125T110000Z-1 (pid 7, since 2026-11-25T11:00:00Z)"),
            now,
            day,
        );
        assert_eq!(h.state, HealthState::Stale, "a run in progress does not hide old data");
        assert!(
            h.notes[0].starts_with("A run holds the output directory now: run 20261125T110000Z-1"),
            "{:?}",
            h.notes
        );
        let holder = Some("run 20261125T110000Z-1 (pid 7, since 2026-11-25T11:00:00Z)");
        let fresh = answers(vec![run("2026-11-25T10:00:00+00:00", "completed")]);
        let h = Health::of(&fresh, &[], holder, now, day);
        assert_eq!(h.state, HealthState::Running);
        assert!(h.headline.starts_with("Running: run 20261125T110000Z-1 (pid 7"), "{}", h.headline);
        let h = Health::of(&fresh, std::slice::from_ref(&failed), holder, now, day);
        assert_eq!(h.state, HealthState::Failed, "nor an earlier failure");
        // A killed run reads interrupted; the older of two problems follows as a note.
        let killed = RunProblem {
            kind: ProblemKind::Interrupted,
            at: Some(now - chrono::Duration::hours(1)),
            what: "`creator-etl run` started and did not end".into(),
        };
        let h = Health::of(&fresh, std::slice::from_ref(&killed), None, now, day);
        assert_eq!(h.state, HealthState::Interrupted);
        assert!(h.headline.starts_with("Interrupted: `creator-etl run` started and did not end"), "{}", h.headline);
        let h = Health::of(&fresh, &[killed, failed], None, now, day);
        assert_eq!(h.state, HealthState::Failed, "the worst heads the page");
        assert!(h.notes[0].starts_with("Also: `creator-etl run` started and did not end"), "{:?}", h.notes);
    }
}
