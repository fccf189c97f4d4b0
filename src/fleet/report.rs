//! The fleet report: each organization's row, and the fleet's exit code.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::exit::{self, SOME_FAILED};

/// How an organization's sync ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncOutcome {
    Completed,
    /// Stopped by its budget (`--max-requests-per-org`, `--max-duration`); resumes next run.
    Incomplete,
    Failed,
    /// Stopped by Ctrl-C or SIGTERM; resumes next run.
    Interrupted,
}

impl SyncOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            SyncOutcome::Completed => "completed",
            SyncOutcome::Incomplete => "incomplete",
            SyncOutcome::Failed => "failed",
            SyncOutcome::Interrupted => "interrupted",
        }
    }
}

/// How an organization's actions stage ended (after a sync that loaded its data).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionsOutcome {
    /// Every approved row was applied, a no-op, or applied before.
    Completed,
    /// Some approved rows did not succeed (`failed`, `failed_transient`, `in_doubt`,
    /// `not_sent`): `run`'s exit 3. The rows need attention, or go out again on the next run.
    Held,
    /// Stopped by the organization's budget; the rows not sent go out on the next run.
    Incomplete,
    /// Stopped by Ctrl-C or SIGTERM; the rows not sent go out on the next run.
    Interrupted,
    /// The key was refused on a write (401/403): `run`'s exit 4.
    Failed,
}

impl ActionsOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ActionsOutcome::Completed => "completed",
            ActionsOutcome::Held => "held",
            ActionsOutcome::Incomplete => "incomplete",
            ActionsOutcome::Interrupted => "interrupted",
            ActionsOutcome::Failed => "failed",
        }
    }
}

/// One organization's row of the fleet report.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OrgReport {
    pub name: String,
    /// How its sync (extract, load, lake commit) ended.
    pub outcome: SyncOutcome,
    /// Why the sync is incomplete, or what failed.
    pub error: Option<String>,
    /// The exit code this organization's run alone would have given (`run`'s codes): its sync's
    /// when that did not complete, else its actions stage's.
    pub exit_code: u8,
    /// How its actions stage ended; `None` without an actions file, or when its sync did not
    /// get to them.
    #[serde(default)]
    pub actions: Option<ActionsOutcome>,
    /// The exit code of its actions stage alone (`run`'s: 0, 3, 4 or 130).
    #[serde(default)]
    pub actions_exit_code: Option<u8>,
    /// Why its actions did not all succeed: the rows that need attention, or what stopped them.
    #[serde(default)]
    pub actions_error: Option<String>,
    /// Rows of its reviewed file per outcome (`applied`, `in_doubt`, …).
    #[serde(default)]
    pub actions_rows: BTreeMap<crate::action::RowOutcome, u64>,
    pub run_id: Option<String>,
    /// Applications in scope (completed syncs), a quick sync's kept ones included.
    pub applications: u64,
    /// `quick` or `full` (completed syncs; see `--sync`).
    pub sync: Option<crate::extract::SyncMode>,
    /// Rows loaded per table (completed syncs).
    pub rows: BTreeMap<String, u64>,
    pub requests: u64,
    pub rate_limited: u64,
    pub retries: u64,
    /// Time spent waiting for the pacer and in retry backoff.
    pub wait_ms: u64,
    pub duration_ms: u64,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// An unfinished extract is saved and the next run resumes it.
    pub resumable: bool,
    /// Its last completed sync, this run's or an earlier one's.
    pub last_success_at: Option<DateTime<Utc>>,
}

impl OrgReport {
    /// Approved rows of its actions stage that did not succeed.
    pub fn actions_held_rows(&self) -> u64 {
        self.actions_rows.iter().filter(|(o, _)| o.is_failure()).map(|(_, n)| n).sum()
    }
}

/// What `fleet run` prints on stdout.
#[derive(Debug, Serialize)]
pub struct FleetReport {
    pub organizations: Vec<OrgReport>,
    /// Organizations per sync outcome.
    pub outcomes: BTreeMap<SyncOutcome, usize>,
    /// Organizations per actions outcome (those with an actions stage).
    pub actions_outcomes: BTreeMap<ActionsOutcome, usize>,
    pub duration_ms: u64,
    pub exit_code: u8,
    /// Why the fleet warehouse's last publish failed, when it did: the loads are committed in
    /// the writer's file, and readers see them after the next publish.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warehouse_error: Option<String>,
}

impl FleetReport {
    /// Records a failed last publish of the fleet warehouse: the run then exits 1, unless an
    /// organization's outcome already gave it another code.
    pub(crate) fn set_warehouse_error(&mut self, error: String) {
        self.warehouse_error = Some(error);
        if self.exit_code == crate::exit::OK {
            self.exit_code = crate::exit::FAILED;
        }
    }

    pub(crate) fn new(organizations: Vec<OrgReport>, duration: Duration) -> Self {
        let mut outcomes = BTreeMap::new();
        let mut actions_outcomes = BTreeMap::new();
        for o in &organizations {
            *outcomes.entry(o.outcome).or_insert(0) += 1;
            if let Some(a) = o.actions {
                *actions_outcomes.entry(a).or_insert(0) += 1;
            }
        }
        let exit_code = exit_code(&organizations);
        FleetReport {
            organizations,
            outcomes,
            actions_outcomes,
            duration_ms: duration.as_millis() as u64,
            exit_code,
            warehouse_error: None,
        }
    }

    /// The human summary table, for stderr.
    pub fn summary(&self) -> String {
        let mut out = format!(
            "{:<24} {:<11} {:<11} {:<5} {:>9} {:>8} {:>5} {:>9} {:>9}  error\n",
            "organization", "outcome", "actions", "sync", "apps", "requests", "429s", "wait_s", "took_s"
        );
        for o in &self.organizations {
            // The sync's error, else the first line of the actions' (their summary).
            let error = o.error.clone().or_else(|| {
                o.actions_error.as_deref().map(|e| format!("actions: {}", e.lines().next().unwrap_or_default()))
            });
            out.push_str(&format!(
                "{:<24} {:<11} {:<11} {:<5} {:>9} {:>8} {:>5} {:>9.1} {:>9.1}  {}\n",
                o.name,
                o.outcome.as_str(),
                o.actions.map_or("-", ActionsOutcome::as_str),
                o.sync.map_or("-", |m| m.as_str()),
                o.applications,
                o.requests,
                o.rate_limited,
                o.wait_ms as f64 / 1000.0,
                o.duration_ms as f64 / 1000.0,
                error.unwrap_or_default()
            ));
        }
        let counts: Vec<String> = self.outcomes.iter().map(|(k, v)| format!("{v} {}", k.as_str())).collect();
        let actions: Vec<String> = self.actions_outcomes.iter().map(|(k, v)| format!("{v} {}", k.as_str())).collect();
        let actions = if actions.is_empty() { String::new() } else { format!("; actions: {}", actions.join(", ")) };
        out.push_str(&format!(
            "fleet: {} organizations: {}{actions} in {:.1} s\n",
            self.organizations.len(),
            counts.join(", "),
            self.duration_ms as f64 / 1000.0
        ));
        out
    }
}

/// The fleet's exit code:
/// - 130 when Ctrl-C or SIGTERM stopped any organization, in its sync or its actions;
/// - when no sync failed: 3 when some organization's actions did not all succeed (rows held, a
///   key refused on writes), else 0 (budget stops resume, and count as neither);
/// - [`SOME_FAILED`] when some syncs failed and others did not;
/// - when every sync failed: 4 when every key was refused, 5 when every `--out` or warehouse
///   was held by another process, else 1.
pub fn exit_code(orgs: &[OrgReport]) -> u8 {
    let interrupted =
        |o: &&OrgReport| o.outcome == SyncOutcome::Interrupted || o.actions == Some(ActionsOutcome::Interrupted);
    if orgs.iter().any(|o| interrupted(&o)) {
        return exit::INTERRUPTED;
    }
    let failed: Vec<&OrgReport> = orgs.iter().filter(|o| o.outcome == SyncOutcome::Failed).collect();
    if failed.is_empty() {
        let held = orgs.iter().any(|o| matches!(o.actions, Some(ActionsOutcome::Held | ActionsOutcome::Failed)));
        return if held { exit::ACTIONS_FAILED } else { exit::OK };
    }
    if failed.len() < orgs.len() {
        return SOME_FAILED;
    }
    let common = failed[0].exit_code;
    if [exit::AUTH, exit::LOCKED].contains(&common) && failed.iter().all(|o| o.exit_code == common) {
        common
    } else {
        exit::FAILED
    }
}

impl OrgReport {
    /// The row of an organization whose sync has not done anything yet.
    pub fn empty(name: String, outcome: SyncOutcome, exit_code: u8, at: DateTime<Utc>) -> OrgReport {
        OrgReport {
            name,
            outcome,
            error: None,
            exit_code,
            actions: None,
            actions_exit_code: None,
            actions_error: None,
            actions_rows: BTreeMap::new(),
            run_id: None,
            applications: 0,
            sync: None,
            rows: BTreeMap::new(),
            requests: 0,
            rate_limited: 0,
            retries: 0,
            wait_ms: 0,
            duration_ms: 0,
            started_at: at,
            finished_at: at,
            resumable: false,
            last_success_at: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn org(outcome: SyncOutcome, exit_code: u8, actions: Option<ActionsOutcome>) -> OrgReport {
        OrgReport { actions, ..OrgReport::empty("o".into(), outcome, exit_code, Utc::now()) }
    }

    #[test]
    fn the_fleet_exit_code() {
        use ActionsOutcome as A;
        use SyncOutcome::*;
        let cases: [(Vec<OrgReport>, u8); 11] = [
            (vec![org(Completed, 0, None), org(Incomplete, 130, None)], 0),
            (vec![org(Completed, 0, Some(A::Completed)), org(Completed, 130, Some(A::Incomplete))], 0),
            (vec![org(Completed, 3, Some(A::Held)), org(Completed, 0, None)], 3),
            (vec![org(Completed, 4, Some(A::Failed))], 3),
            (vec![org(Completed, 3, Some(A::Held)), org(Failed, 1, None)], SOME_FAILED),
            (vec![org(Failed, 1, None), org(Incomplete, 130, None)], SOME_FAILED),
            (vec![org(Completed, 130, Some(A::Interrupted)), org(Failed, 4, None)], 130),
            (vec![org(Failed, 4, None), org(Failed, 4, None)], 4),
            (vec![org(Failed, 5, None), org(Failed, 5, None)], 5),
            (vec![org(Failed, 4, None), org(Failed, 5, None)], 1),
            // A common code other than 4 or 5 is no claim about the whole fleet: 1.
            (vec![org(Failed, 2, None), org(Failed, 2, None)], 1),
        ];
        for (i, (orgs, want)) in cases.iter().enumerate() {
            assert_eq!(exit_code(orgs), *want, "case {i}");
        }
    }
}
