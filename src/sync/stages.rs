//! The stage ledger, `OUT/state/stages.json`: how far the commands that bring an output directory
//! up to date got, stage by stage, so that the report never calls data fresh when the run that
//! should have refreshed it died or failed.
//!
//! A command that does stages (`run`, `extract`, `load`, `actions apply`, and `fleet run` for each
//! organization, in the organization's directory) marks every stage it is about to do *pending*
//! before its first step, then each one *done* as it completes it, or *failed* with the error
//! where it failed: the stage the command was in ([`StageLog::enter`]), never a guess from the
//! error's type. A stage's entry is replaced only by a command that does that stage again, so a
//! failure, or a run killed in the middle, stays on the record until a later command redoes that
//! stage; a command that does other stages cannot clear it (a `load` without `--lake` leaves a
//! failed lake push failed).
//!
//! Read back ([`read`]), an entry says one of: done (with the raw run it extracted or loaded);
//! failed (with the error); not reached (its command failed in an earlier stage); or pending: a
//! command in progress if it still holds the directory's lock, else one that did not end
//! (killed, out of memory, the machine lost).
//!
//! Writes are atomic (a temporary file renamed into place). A ledger that cannot be written is a
//! warning: the command's own outcome stands.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::out::OutDir;
use crate::{exit, Error};

/// A stage of bringing an output directory up to date, in pipeline order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// The crawl into the raw landing (`extract`, `run`).
    Extract,
    /// The transform and the warehouse load, and its preflight (`load`, `run`).
    Load,
    /// The shared lake: the restore from it and the push to it (`load --lake`, `run --lake`).
    Lake,
    /// The reviewed corrections: their checks, the intents in the lake, the sends (`actions
    /// apply`, `run --actions`).
    Actions,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Extract => "extract",
            Stage::Load => "load",
            Stage::Lake => "lake",
            Stage::Actions => "actions",
        }
    }

    /// The commands that redo the stage, for the page's hint.
    pub fn redone_by(self) -> &'static str {
        match self {
            Stage::Extract => "`creator-etl run` or `extract`",
            Stage::Load => "`creator-etl run` or `load`",
            Stage::Lake => "`creator-etl run --lake` or `load --lake`",
            Stage::Actions => "`creator-etl run --actions` or `actions apply`",
        }
    }
}

/// Where a stage's entry stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StageState {
    /// Marked by a command before its first step; replaced when the command completes or fails
    /// the stage.
    Pending,
    Done,
    Failed,
    /// The command failed in an earlier stage and never started this one.
    #[serde(rename = "not_reached")]
    NotReached,
}

/// One stage's entry: what the last command that did the stage made of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageEntry {
    pub state: StageState,
    /// The command (`run`, `load`, `fleet run`, …).
    pub command: String,
    /// When that command started: with `command`, which entries one command wrote.
    pub started_at: DateTime<Utc>,
    /// When the stage was done or failed.
    #[serde(default)]
    pub ended_at: Option<DateTime<Utc>>,
    /// The raw run the stage extracted or loaded.
    #[serde(default)]
    pub run_id: Option<String>,
    /// Why it failed, as [`Error::recorded`] keeps it.
    #[serde(default)]
    pub error: Option<String>,
    /// The failure was a stop (Ctrl-C, SIGTERM, a budget: exit 130); a rerun resumes.
    #[serde(default)]
    pub interrupted: bool,
}

/// The ledger's file: an entry per stage that some command did.
pub type Stages = BTreeMap<Stage, StageEntry>;

/// The ledger's file in an output directory.
pub fn ledger_path(out: &OutDir) -> PathBuf {
    out.state_dir().join("stages.json")
}

/// How an earlier release recorded the last `run` (`OUT/state/last-run.json`): read once, when
/// there is no ledger yet, so that a failure it recorded is not forgotten by an upgrade.
fn legacy_path(out: &OutDir) -> PathBuf {
    out.state_dir().join("last-run.json")
}

/// Why the ledger could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable {
    pub path: PathBuf,
    pub why: String,
    /// When the file was last written.
    pub written: Option<DateTime<Utc>>,
}

/// Reads an output directory's ledger: empty when no command recorded stages there yet.
pub fn read(out: &OutDir) -> Result<Stages, Unreadable> {
    let path = ledger_path(out);
    let unreadable = |why: String| Unreadable {
        written: std::fs::metadata(&path).and_then(|m| m.modified()).ok().map(DateTime::<Utc>::from),
        path: path.clone(),
        why,
    };
    match crate::out::read_json::<Stages>(&path) {
        Ok(Some(stages)) => Ok(stages),
        Ok(None) => Ok(read_legacy(&legacy_path(out))),
        Err(e) => Err(unreadable(e.to_string())),
    }
}

/// An earlier release's record of the last `run`, as ledger entries: its failure, at the stage
/// it named (`sync`: the preflight, extract or load, which `load` redid).
fn read_legacy(path: &Path) -> Stages {
    #[derive(Deserialize)]
    struct LastRun {
        finished_at: DateTime<Utc>,
        error: Option<String>,
        stage: Option<String>,
    }
    let mut stages = Stages::new();
    let Ok(Some(last)) = crate::out::read_json::<LastRun>(path) else { return stages };
    if let Some(error) = last.error {
        let stage = match last.stage.as_deref() {
            Some("lake") => Stage::Lake,
            Some("actions") => Stage::Actions,
            _ => Stage::Load,
        };
        stages.insert(
            stage,
            StageEntry {
                state: StageState::Failed,
                command: "run".into(),
                started_at: last.finished_at,
                ended_at: Some(last.finished_at),
                run_id: None,
                error: Some(error),
                interrupted: false,
            },
        );
    }
    stages
}

/// A command's stages as it goes: marks them in the ledger of its output directory. The command
/// holds the directory's lock.
#[derive(Debug)]
pub struct StageLog {
    path: Option<PathBuf>,
    legacy: Option<PathBuf>,
    command: String,
    started_at: DateTime<Utc>,
    state: Mutex<Progress>,
}

#[derive(Debug)]
struct Progress {
    stages: Stages,
    /// The stage the command is in: where a failure happened.
    current: Option<Stage>,
}

impl StageLog {
    /// Marks `stages` pending for `command`, starting now, and writes the ledger.
    pub fn begin(out: &OutDir, command: &str, stages: &[Stage]) -> StageLog {
        let mut existing = read(out).unwrap_or_else(|e| {
            tracing::warn!(path = %e.path.display(), why = %e.why, "the stage ledger cannot be read; this command starts a new one");
            Stages::new()
        });
        let started_at = Utc::now();
        for &stage in stages {
            existing.insert(
                stage,
                StageEntry {
                    state: StageState::Pending,
                    command: command.to_owned(),
                    started_at,
                    ended_at: None,
                    run_id: None,
                    error: None,
                    interrupted: false,
                },
            );
        }
        let log = StageLog {
            path: Some(ledger_path(out)),
            legacy: Some(legacy_path(out)),
            command: command.to_owned(),
            started_at,
            state: Mutex::new(Progress { stages: existing, current: stages.first().copied() }),
        };
        log.write(&log.lock().stages);
        log
    }

    /// A log that records nothing (a command that is only asked for a plan).
    pub fn none() -> StageLog {
        StageLog {
            path: None,
            legacy: None,
            command: String::new(),
            started_at: Utc::now(),
            state: Mutex::new(Progress { stages: Stages::new(), current: None }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self, stages: &Stages) {
        let Some(path) = &self.path else { return };
        if let Err(e) = crate::out::write_json_atomic(path, stages) {
            tracing::warn!(error = %e, "the stage ledger cannot be written; the report may not know how this command ended");
            return;
        }
        if let Some(legacy) = &self.legacy {
            let _ = std::fs::remove_file(legacy);
        }
    }

    /// The command is now in `stage`: a failure from here on is that stage's.
    pub fn enter(&self, stage: Stage) {
        self.lock().current = Some(stage);
    }

    /// The stage this command is in.
    pub fn current(&self) -> Option<Stage> {
        self.lock().current
    }

    /// Marks `stage` done, with the raw run it extracted or loaded.
    pub fn done(&self, stage: Stage, run_id: Option<&str>) {
        self.settle(stage, StageState::Done, run_id, None, false);
    }

    /// Marks `stage` failed, whatever stage the command is in (the actions' own outcome, say).
    pub fn failed(&self, stage: Stage, error: String, interrupted: bool) {
        self.settle(stage, StageState::Failed, None, Some(error), interrupted);
    }

    /// Marks how an actions stage ended: done, even with rows held for attention (the report's
    /// corrections section shows them); failed when a stop or a refused key left rows unsent,
    /// until an apply sends them.
    pub fn actions_ended(&self, report: &crate::action::ActionReport) {
        match &report.stopped {
            Some(why) => self.failed(
                Stage::Actions,
                format!("stopped before every row was sent ({why}); the rows not sent go out on the next apply"),
                !report.stopped_by_auth,
            ),
            None => self.done(Stage::Actions, None),
        }
    }

    /// Marks the stage the command was in failed with `e`, and its other stages still pending
    /// not reached.
    pub fn fail(&self, e: &Error) {
        if self.path.is_none() {
            return;
        }
        let mut p = self.lock();
        let Some(stage) = p.current else { return };
        let now = Utc::now();
        for entry in p.stages.values_mut() {
            if self.owns(entry) && entry.state == StageState::Pending {
                entry.state = StageState::NotReached;
                entry.ended_at = Some(now);
            }
        }
        p.stages.insert(
            stage,
            StageEntry {
                state: StageState::Failed,
                command: self.command.clone(),
                started_at: self.started_at,
                ended_at: Some(now),
                run_id: None,
                error: Some(e.recorded()),
                interrupted: e.exit_code() == exit::INTERRUPTED,
            },
        );
        self.write(&p.stages);
    }

    /// The command completed: its stages still pending are done.
    pub fn finish(&self) {
        let mut p = self.lock();
        let now = Utc::now();
        let mut changed = false;
        for entry in p.stages.values_mut() {
            if self.owns(entry) && entry.state == StageState::Pending {
                entry.state = StageState::Done;
                entry.ended_at = Some(now);
                changed = true;
            }
        }
        if changed {
            self.write(&p.stages);
        }
    }

    fn owns(&self, entry: &StageEntry) -> bool {
        entry.command == self.command && entry.started_at == self.started_at
    }

    fn settle(&self, stage: Stage, state: StageState, run_id: Option<&str>, error: Option<String>, interrupted: bool) {
        if self.path.is_none() {
            return;
        }
        let mut p = self.lock();
        let entry = StageEntry {
            state,
            command: self.command.clone(),
            started_at: self.started_at,
            ended_at: Some(Utc::now()),
            run_id: run_id.map(str::to_owned),
            error,
            interrupted,
        };
        p.stages.insert(stage, entry);
        self.write(&p.stages);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_is_replaced_only_by_a_command_that_does_it_again() {
        let dir = tempfile::tempdir().unwrap();
        let out = OutDir::new(dir.path());
        assert!(read(&out).unwrap().is_empty(), "no ledger yet");
        let run = StageLog::begin(&out, "run", &[Stage::Extract, Stage::Load, Stage::Lake]);
        let pending = read(&out).unwrap();
        assert!(pending.values().all(|e| e.state == StageState::Pending), "marked before the first step");
        run.enter(Stage::Extract);
        run.done(Stage::Extract, Some("r1"));
        run.enter(Stage::Load);
        run.done(Stage::Load, Some("r1"));
        run.enter(Stage::Lake);
        run.fail(&Error::Io {
            context: "cannot stage the lake's tables".into(),
            source: std::io::Error::other("disk full"),
        });
        let after = read(&out).unwrap();
        assert_eq!(after[&Stage::Load].run_id.as_deref(), Some("r1"));
        let lake = &after[&Stage::Lake];
        assert_eq!(lake.state, StageState::Failed, "the stage it was in, whatever the error's type");
        assert!(lake.error.as_deref().unwrap().contains("disk full"), "{lake:?}");

        // A load without the lake redoes the load, not the lake.
        let load = StageLog::begin(&out, "load", &[Stage::Load]);
        load.enter(Stage::Load);
        load.finish();
        let after = read(&out).unwrap();
        assert_eq!(after[&Stage::Lake].state, StageState::Failed);
        assert_eq!((after[&Stage::Load].state, after[&Stage::Load].command.as_str()), (StageState::Done, "load"));

        // A run that fails early did not reach its later stages.
        let run = StageLog::begin(&out, "run", &[Stage::Extract, Stage::Load, Stage::Lake]);
        run.enter(Stage::Extract);
        run.fail(&Error::Config(vec!["x".into()]));
        let after = read(&out).unwrap();
        assert_eq!(after[&Stage::Extract].state, StageState::Failed);
        assert_eq!(after[&Stage::Lake].state, StageState::NotReached);
        assert_eq!(after[&Stage::Lake].started_at, after[&Stage::Extract].started_at, "one command's entries");
    }

    #[test]
    fn an_earlier_release_record_of_a_failure_is_kept_and_a_bad_ledger_is_said() {
        let dir = tempfile::tempdir().unwrap();
        let out = OutDir::new(dir.path());
        std::fs::create_dir_all(out.state_dir()).unwrap();
        std::fs::write(
            legacy_path(&out),
            r#"{"finished_at": "2026-11-20T10:00:00Z", "error": "cannot commit `runs`", "stage": "lake"}"#,
        )
        .unwrap();
        let stages = read(&out).unwrap();
        assert_eq!(stages[&Stage::Lake].state, StageState::Failed);
        StageLog::begin(&out, "load", &[Stage::Load]).finish();
        assert!(!legacy_path(&out).exists(), "taken into the ledger");
        assert_eq!(read(&out).unwrap()[&Stage::Lake].state, StageState::Failed, "and still failed there");
        std::fs::write(ledger_path(&out), b"{\"load\": ").unwrap();
        assert!(read(&out).unwrap_err().why.contains("not readable"));
    }
}
