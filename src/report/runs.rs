//! What an output directory knows that its data does not: runs that did not bring the data up to
//! date, and a run in progress. The page's banner is made of these and the data's own freshness
//! ([`super::health::Health`]).
//!
//! Sources, for one organization's directory (its own `--out`, or `OUT/orgs/NAME` of a fleet):
//! - its stage ledger ([`crate::sync::stages`]): a stage that failed, was not reached, is
//!   unknown, or is pending with its command's process no longer holding the lock (killed); a
//!   load whose run never reached the readers' snapshot that the page reads, once the command
//!   that publishes it no longer runs; an extract that finished and was not loaded;
//! - the fleet's status file of the organization (`fleet status`);
//! - its raw runs: a newer one that did not finish its extract, or finished it and was not loaded
//!   (one organization's directory; a fleet's organizations' runs are loaded by the fleet, and
//!   its ledger tells).
//!
//! **Races.** A command may start or end while the page is made. The ledger is read before the
//! locks are probed and again after the data is read, and a problem that rests on the probe (a
//! pending stage taken for a dead command, a load taken for unpublished) counts only when the
//! first read held it too: a command that started after the probe is never taken for a dead one.
//! The publisher's lock is probed before the data is read, so a fleet that publishes and ends in
//! between is not taken for one that never published.

use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::data;
use super::health::{ProblemKind, RunProblem};
use super::rows::RunHealth;
use super::RunState;
use crate::out::{holder_pid, Holder, OutDir};
use crate::sync::stages::{self, Stage, StageEntry, StageState, Stages};

/// What the output directory knows that the data does not.
#[derive(Default)]
pub(super) struct Findings {
    /// Runs that did not bring the data up to date.
    pub problems: Vec<RunProblem>,
    /// Who holds the directory now (a run in progress), when another process does.
    pub running: Option<String>,
}

/// The look at an organization's directory taken before its data is read.
pub(super) struct Look {
    out: OutDir,
    /// A fleet's organization: its loads reach readers when the fleet publishes.
    fleet: bool,
    /// The command writing the page holds the directory's lock itself (`run`, the demo), and
    /// recorded how it ended first.
    locked_here: bool,
    /// The ledger as it was before the probe.
    before: Result<Stages, stages::Unreadable>,
    holder: Holder,
    /// Who holds the lock of the command that publishes the organization's loads to readers: the
    /// fleet's, or the organization's own.
    publisher: Holder,
}

/// Reads the ledger and probes the locks of `org`'s directory, before its data is read: `None`
/// where the report knows of no directory (a lake read from elsewhere).
pub(super) fn look(state: &RunState, org: Option<&str>) -> Option<Look> {
    let (out, locked_here, fleet) = match (state, org) {
        (RunState::Own { out, locked_here }, _) => (out.clone(), *locked_here, None),
        (RunState::Fleet(dir), Some(org)) => {
            (OutDir::new(crate::fleet::status::org_dir(dir, org)), false, Some(OutDir::new(dir)))
        }
        _ => return None,
    };
    let before = stages::read(&out);
    let holder = if locked_here { Holder::Free } else { probe(&out, before.as_ref().ok()) };
    let publisher = match &fleet {
        Some(fleet) => fleet.lock_holder(),
        None => holder.clone(),
    };
    Some(Look { out, fleet: fleet.is_some(), locked_here, before, holder, publisher })
}

/// Who holds `out`'s lock. A holder that names the process of a pending stage is looked at again
/// a moment later: another report's look takes the lock for an instant and leaves the last
/// holder's words in the file, which must not make a dead command read as running.
fn probe(out: &OutDir, ledger: Option<&Stages>) -> Holder {
    let holder = out.lock_holder();
    let Holder::Held(text) = &holder else { return holder };
    let pending =
        |pid| ledger.is_some_and(|l| l.values().any(|e| e.state == StageState::Pending && e.pid == Some(pid)));
    match holder_pid(text) {
        Some(pid) if pending(pid) => {
            std::thread::sleep(Duration::from_millis(30));
            out.lock_holder()
        }
        _ => holder,
    }
}

/// What the look and the data say together.
pub(super) fn findings(look: Option<Look>, runs: &[RunHealth]) -> Findings {
    let Some(look) = look else { return Findings::default() };
    let loaded_at = runs.first().and_then(|r| r.finished_at);
    let newer = |at: DateTime<Utc>| loaded_at.is_none_or(|l| at > l);
    let loaded: Vec<&str> = runs.iter().map(|r| r.run_id.as_str()).collect();
    let mut found = Findings::default();
    found.problems.extend(fleet_failure(look.out.root(), newer));
    found.problems.extend(ledger_problems(&look, &loaded));
    // While a run holds the directory, an unfinished raw run is most likely its own. A fleet's
    // organization's raw runs go into the fleet warehouse in batches: its ledger tells whether
    // they were loaded and published.
    if !matches!(look.holder, Holder::Held(_)) && !look.fleet {
        let unknown = matches!(look.holder, Holder::Unknown(_));
        found.problems.extend(raw_run_not_loaded(&look.out, runs, newer, unknown));
    }
    found.running = match (&look.holder, &look.publisher) {
        (Holder::Held(h), _) => Some(h.clone()),
        (_, Holder::Held(h)) if look.fleet => Some(h.clone()),
        _ => None,
    };
    found
}

/// The command that redoes `stage` in this directory, for the page's hint.
fn redone_by(look: &Look, stage: Stage) -> &'static str {
    if look.fleet {
        "`creator-etl fleet run`"
    } else {
        stage.redone_by()
    }
}

/// What the organization's stage ledger says is not done (see the module's notes).
fn ledger_problems(look: &Look, loaded: &[&str]) -> Vec<RunProblem> {
    let stages = match stages::read(&look.out) {
        Ok(stages) => stages,
        Err(e) => {
            return vec![RunProblem {
                kind: ProblemKind::Unknown,
                at: e.written,
                what: format!("how the last command ended is unknown: `{}` {}", e.path.display(), e.why),
            }]
        }
    };
    // An entry the ledger held before the locks were probed, as it is now.
    let seen_before =
        |stage: &Stage, entry: &StageEntry| look.before.as_ref().is_ok_and(|b| b.get(stage) == Some(entry));
    let of_command = |entry: &StageEntry, state: StageState| -> Vec<&str> {
        stages.iter().filter(|(_, e)| e.state == state && e.same_command(entry)).map(|(s, _)| s.as_str()).collect()
    };
    let list = |names: Vec<&str>| match names.as_slice() {
        [one] => format!("its {one} stage"),
        many => format!("its {} stages", many.join(", ")),
    };
    let mut problems = vec![];
    for (stage, entry) in &stages {
        let command = format!("`creator-etl {}` (started {})", entry.command, data::stamp(entry.started_at));
        let hint = redone_by(look, *stage);
        match entry.state {
            StageState::Failed => {
                let how = if entry.interrupted { "was stopped" } else { "failed" };
                let missed = of_command(entry, StageState::NotReached);
                problems.push(RunProblem {
                    kind: if entry.interrupted { ProblemKind::Interrupted } else { ProblemKind::Failed },
                    at: entry.ended_at.or(Some(entry.started_at)),
                    what: format!(
                        "{command} {how} in its {} stage: {}{}; {hint} redoes it",
                        stage.as_str(),
                        super::shorten(entry.error.as_deref().map_or("no message was recorded", |e| e)),
                        if missed.is_empty() { String::new() } else { format!("; it did not reach {}", list(missed)) },
                    ),
                });
            }
            StageState::NotReached => {
                // Said with its command's failure, while that stands.
                if stages.values().any(|e| e.state == StageState::Failed && e.same_command(entry)) {
                    continue;
                }
                problems.push(RunProblem {
                    kind: ProblemKind::Failed,
                    at: entry.ended_at.or(Some(entry.started_at)),
                    what: format!(
                        "{command} did not reach its {} stage: it failed before it; {hint} redoes it",
                        stage.as_str()
                    ),
                });
            }
            StageState::Unknown => problems.push(RunProblem {
                kind: ProblemKind::Unknown,
                at: entry.ended_at.or(Some(entry.started_at)),
                what: format!(
                    "the {} stage: {}; {hint} redoes it",
                    stage.as_str(),
                    entry.error.as_deref().map_or("how it last ended is unknown", |e| e)
                ),
            }),
            StageState::Pending => {
                if look.locked_here || !seen_before(stage, entry) {
                    continue;
                }
                // The stage it reached: the pending one it entered last (or, if it entered
                // none, its first); the command's other pending stages follow from it.
                let pending: Vec<(&Stage, &StageEntry)> =
                    stages.iter().filter(|(_, e)| e.state == StageState::Pending && e.same_command(entry)).collect();
                let reached =
                    pending.iter().max_by_key(|(s, e)| (e.entered_at, std::cmp::Reverse(**s))).map(|(s, _)| **s);
                if reached != Some(*stage) {
                    continue;
                }
                let others: Vec<&str> = pending.iter().filter(|(s, _)| *s != stage).map(|(s, _)| s.as_str()).collect();
                let others =
                    if others.is_empty() { String::new() } else { format!(", and did not end {}", list(others)) };
                let in_stage = if entry.entered_at.is_some() {
                    format!("in its {} stage", stage.as_str())
                } else {
                    "before its first step".to_owned()
                };
                match &look.holder {
                    // Its own process still holds the directory: in progress.
                    Holder::Held(h) if holder_pid(h).is_some() && holder_pid(h) == entry.pid => {}
                    Holder::Held(_) | Holder::Free => problems.push(RunProblem {
                        kind: ProblemKind::Interrupted,
                        at: Some(entry.started_at),
                        what: format!(
                            "{command} did not end: it stopped {in_stage}{others} (killed, out of memory, or its machine went down); {hint} redoes it"
                        ),
                    }),
                    Holder::Unknown(why) => problems.push(RunProblem {
                        kind: ProblemKind::Unknown,
                        at: Some(entry.started_at),
                        what: format!(
                            "{command} has not ended {}, and whether it still runs cannot be told: {why}",
                            list(vec![stage.as_str()])
                        ),
                    }),
                }
            }
            StageState::Done if *stage == Stage::Load => {
                // Only the publisher's loads reach the snapshot this page reads: in a fleet, the
                // fleet run's (a hand-run `run` in its directory loads its own warehouse).
                let Some(run) = entry.run_id.as_deref().filter(|r| !loaded.contains(r)) else { continue };
                if (look.fleet && entry.command != "fleet run") || !seen_before(stage, entry) {
                    continue;
                }
                let at = entry.ended_at.or(Some(entry.started_at));
                match &look.publisher {
                    // Committed, and published when the run in progress publishes.
                    Holder::Held(_) => {}
                    Holder::Free => problems.push(RunProblem {
                        kind: ProblemKind::Failed,
                        at,
                        what: format!(
                            "run {run} was loaded by {command} but never reached the readers' snapshot this page reads: the command ended before its publish (killed, or the publish failed); the next `creator-etl {}` publishes it",
                            entry.command
                        ),
                    }),
                    Holder::Unknown(why) => problems.push(RunProblem {
                        kind: ProblemKind::Unknown,
                        at,
                        what: format!(
                            "run {run} was loaded by {command} and has not reached the readers' snapshot yet, and whether that command still runs cannot be told: {why}"
                        ),
                    }),
                }
            }
            StageState::Done if *stage == Stage::Extract => {
                // An extract that finished after which another run was loaded (`load --from-raw`
                // of an older one): its own data never reached the warehouse.
                let Some(run) = entry.run_id.as_deref().filter(|r| !loaded.contains(r)) else { continue };
                let load = stages.get(&Stage::Load);
                let loaded_other =
                    load.is_some_and(|l| l.state == StageState::Done && l.run_id.as_deref() != Some(run));
                if loaded_other && !look.fleet {
                    problems.push(RunProblem {
                        kind: ProblemKind::Failed,
                        at: entry.ended_at.or(Some(entry.started_at)),
                        what: format!(
                            "run {run} finished its extract but was not loaded (another run was loaded after it); `creator-etl load --from-raw {run}` loads it"
                        ),
                    });
                }
            }
            StageState::Done => {}
        }
    }
    problems
}

/// When a file was last written.
fn modified_at(path: &Path) -> Option<DateTime<Utc>> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok().map(DateTime::<Utc>::from)
}

/// The newest raw run of an output directory, when it is newer than the last load and did not
/// finish its extract (unless it only planned: `extract --plan-only`), or finished it and was not
/// loaded. `unknown`: whether a command holds the directory cannot be told, so an unfinished run
/// may be in progress.
fn raw_run_not_loaded(
    out: &OutDir,
    loaded: &[RunHealth],
    newer: impl Fn(DateTime<Utc>) -> bool,
    unknown: bool,
) -> Option<RunProblem> {
    use crate::extract::runs;
    if let Some(id) = runs::unfinished_run(out) {
        let at = runs::read_spec(out, &id).ok().map(|s| s.created_at);
        let planned = crate::out::read_json::<serde_json::Value>(&out.report_path(&id))
            .ok()
            .flatten()
            .is_some_and(|r| r["status"] == "planned");
        if at.is_none_or(&newer) && !planned {
            return Some(if unknown {
                RunProblem {
                    kind: ProblemKind::Unknown,
                    at,
                    what: format!(
                        "run {id} has not finished its extract, and whether a command still runs it cannot be told (the directory's lock cannot be probed)"
                    ),
                }
            } else {
                RunProblem {
                    kind: ProblemKind::Failed,
                    at,
                    what: format!(
                        "run {id} did not finish its extract (it failed or was interrupted); the next run resumes it"
                    ),
                }
            });
        }
    }
    let id = runs::latest_complete_run(out)?;
    if loaded.iter().any(|r| r.run_id == id) {
        return None;
    }
    let at = runs::read_spec(out, &id).ok().map(|s| s.created_at)?;
    newer(at).then(|| RunProblem {
        kind: ProblemKind::Failed,
        at: Some(at),
        what: format!("run {id} finished its extract but was not loaded (`creator-etl load` loads it)"),
    })
}

/// An organization's fleet status file (`OUT/orgs/NAME/state/fleet-status.json`), when its last
/// run after the last load did not complete.
fn fleet_failure(org_out: &Path, newer: impl Fn(DateTime<Utc>) -> bool) -> Option<RunProblem> {
    use crate::fleet::report::SyncOutcome;
    let (status, problem) = crate::fleet::status::read_status(org_out);
    if let Some(problem) = problem {
        // What the last run did is unknown: say so, rather than guess.
        tracing::warn!(%problem, "an organization's fleet status cannot be read");
        if status.last_outcome.is_none_or(|o| o != SyncOutcome::Completed) {
            // When: the run it recorded, or else when the file was last written.
            let written = modified_at(&crate::fleet::status::status_path(org_out));
            let at = status.last_run_at.or(written);
            return at.is_none_or(&newer).then(|| RunProblem {
                kind: ProblemKind::Unknown,
                at,
                what: format!("how its last run ended is unknown, its fleet status cannot be read: {problem}"),
            });
        }
    }
    let outcome = status.last_outcome.filter(|o| *o != SyncOutcome::Completed)?;
    let at = status.last_error_at.or(status.last_run_at);
    if !at.is_none_or(newer) {
        return None;
    }
    let error = status.last_error.as_deref().map_or_else(String::new, super::shorten);
    Some(RunProblem {
        kind: match outcome {
            SyncOutcome::Interrupted | SyncOutcome::Incomplete => ProblemKind::Interrupted,
            _ => ProblemKind::Failed,
        },
        at,
        what: format!(
            "the fleet's last run of it ended {}{}",
            outcome.as_str(),
            if error.is_empty() { String::new() } else { format!(": {error}") }
        ),
    })
}
