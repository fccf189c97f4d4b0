//! The stage ledger, `OUT/state/stages.json`: how far the commands that bring an output directory
//! up to date got, stage by stage, so that the report never calls data fresh when the run that
//! should have refreshed it died or failed.
//!
//! A command that does stages (`run`, `extract`, `load`, `actions apply`, and `fleet run` for each
//! organization, in the organization's directory) marks every stage it is about to do *pending*
//! before its first step, records each stage as it *enters* it, then marks it *done* as it
//! completes it, or *failed* with the error where it failed: the stage the command was in
//! ([`StageLog::enter`]), never a guess from the error's type. A stage's entry is replaced only by
//! a command that does that stage again, so a failure, or a run killed in the middle, stays on the
//! record until a later command redoes that stage; a command that does other stages cannot clear
//! it (a `load` without `--lake` leaves a failed lake push failed).
//!
//! Read back ([`read`]), an entry says one of: done (with the raw run it extracted or loaded);
//! failed (with the error); not reached (its command failed in an earlier stage); unknown (the
//! ledger could not be read, and the stage was on it); or pending: a command in progress if its
//! process (the entry's pid) still holds the directory's lock, else one that did not end (killed,
//! out of memory, the machine lost), in the stage it entered last.
//!
//! Writes are atomic (a temporary file renamed into place). The marks a command makes before its
//! first step and when it ends are synced to disk; those in between are not (a power loss can
//! only make a finished stage read as interrupted, never the other way round). A ledger that
//! cannot be written is a warning: the command's own outcome stands. One that cannot be read is
//! kept aside, and the stages it held read as unknown until redone.

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
    pub const ALL: [Stage; 4] = [Stage::Extract, Stage::Load, Stage::Lake, Stage::Actions];

    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Extract => "extract",
            Stage::Load => "load",
            Stage::Lake => "lake",
            Stage::Actions => "actions",
        }
    }

    /// The commands that redo the stage in one organization's directory, for the page's hint.
    pub fn redone_by(self) -> &'static str {
        match self {
            Stage::Extract => "`creator-etl run` or `extract`",
            Stage::Load => "`creator-etl run` or `load`",
            Stage::Lake => "`creator-etl run --lake` or `load --lake`",
            Stage::Actions => "`creator-etl run --actions` or a complete `actions apply`",
        }
    }
}

/// Where a stage's entry stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageState {
    /// Marked by a command before its first step; replaced when the command completes or fails
    /// the stage.
    Pending,
    Done,
    Failed,
    /// The command failed in an earlier stage and never started this one.
    NotReached,
    /// The ledger could not be read, and held this stage: how it last ended is unknown.
    Unknown,
}

/// One stage's entry: what the last command that did the stage made of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageEntry {
    pub state: StageState,
    /// The command (`run`, `load`, `fleet run`, …).
    pub command: String,
    /// When that command started: with `command`, which entries one command wrote.
    pub started_at: DateTime<Utc>,
    /// The process that ran the command: while a pending entry's process holds the directory's
    /// lock, the command is in progress; once another does (or none), it did not end.
    #[serde(default)]
    pub pid: Option<u32>,
    /// When the command entered the stage: of a command that did not end, the pending stage it
    /// entered last is the one it reached.
    #[serde(default)]
    pub entered_at: Option<DateTime<Utc>>,
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

impl StageEntry {
    /// Whether `other` was written by the same command (the same invocation).
    pub fn same_command(&self, other: &StageEntry) -> bool {
        self.command == other.command && self.started_at == other.started_at
    }
}

/// The ledger's file: an entry per stage that some command did.
pub type Stages = BTreeMap<Stage, StageEntry>;

/// The ledger's file in an output directory.
pub fn ledger_path(out: &OutDir) -> PathBuf {
    out.stages_file()
}

/// How an earlier release recorded the last `run` (`OUT/state/last-run.json`): read once, when
/// there is no ledger yet, so that a failure it recorded is not forgotten by an upgrade.
fn legacy_path(out: &OutDir) -> PathBuf {
    out.legacy_last_run_file()
}

/// Why the ledger could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable {
    pub path: PathBuf,
    pub why: String,
    /// When the file was last written.
    pub written: Option<DateTime<Utc>>,
    /// The stages its text names: what it may have held.
    pub stages: Vec<Stage>,
}

/// Reads an output directory's ledger: empty when no command recorded stages there yet.
pub fn read(out: &OutDir) -> Result<Stages, Unreadable> {
    let path = ledger_path(out);
    match crate::out::read_json::<Stages>(&path) {
        Ok(Some(stages)) => Ok(stages),
        Ok(None) => read_legacy(&legacy_path(out)),
        Err(e) => Err(unreadable(&path, e.to_string())),
    }
}

/// A file that cannot be read: why, when it was written, and the stages its text names.
fn unreadable(path: &Path, why: String) -> Unreadable {
    let text = std::fs::read(path).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
    Unreadable {
        written: std::fs::metadata(path).and_then(|m| m.modified()).ok().map(DateTime::<Utc>::from),
        path: path.to_owned(),
        why,
        stages: Stage::ALL.into_iter().filter(|s| text.contains(&format!("\"{}\"", s.as_str()))).collect(),
    }
}

/// An earlier release's record of the last `run`, as ledger entries: its failure, at the stage
/// it named (`sync`: the preflight, extract or load, which `load` redid).
fn read_legacy(path: &Path) -> Result<Stages, Unreadable> {
    #[derive(Deserialize)]
    struct LastRun {
        finished_at: DateTime<Utc>,
        error: Option<String>,
        stage: Option<String>,
    }
    let mut stages = Stages::new();
    let last = match crate::out::read_json::<LastRun>(path) {
        Ok(Some(last)) => last,
        Ok(None) => return Ok(stages),
        // It recorded a failure of a stage whose name cannot be read: the load's, as the
        // earlier release took it by default.
        Err(e) => return Err(Unreadable { stages: vec![Stage::Load], ..unreadable(path, e.to_string()) }),
    };
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
                pid: None,
                entered_at: None,
                ended_at: Some(last.finished_at),
                run_id: None,
                error: Some(error),
                interrupted: false,
            },
        );
    }
    Ok(stages)
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
    /// The entries this command replaced when it began.
    before: Stages,
    /// The stage the command is in: where a failure happened.
    current: Option<Stage>,
}

/// Whether a write of the ledger is synced to disk.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sync {
    /// The marks before the first step and at the end.
    Synced,
    /// The marks in between.
    Unsynced,
}

impl StageLog {
    /// Marks `stages` pending for `command`, starting now, and writes the ledger. A ledger that
    /// cannot be read is kept aside (`stages.json.unreadable-<time>`), and the other stages its
    /// text names read as unknown until redone.
    pub fn begin(out: &OutDir, command: &str, stages: &[Stage]) -> StageLog {
        let started_at = Utc::now();
        let mut existing = read(out).unwrap_or_else(|e| {
            let aside = e.path.with_file_name(format!(
                "{}.unreadable-{}",
                e.path.file_name().and_then(|n| n.to_str()).unwrap_or("stages.json"),
                started_at.format("%Y%m%dT%H%M%S%.3fZ")
            ));
            let kept = std::fs::rename(&e.path, &aside).is_ok();
            tracing::warn!(path = %e.path.display(), why = %e.why, kept_aside = kept.then(|| aside.display().to_string()), "the stage ledger cannot be read; the stages it held read as unknown until redone");
            let why = format!(
                "how it last ended is unknown: the stage ledger `{}` could not be read ({}){}",
                e.path.display(),
                e.why,
                if kept { format!("; it is kept as `{}`", aside.display()) } else { String::new() }
            );
            e.stages
                .iter()
                .map(|&stage| {
                    let entry = StageEntry {
                        state: StageState::Unknown,
                        command: command.to_owned(),
                        started_at,
                        pid: None,
                        entered_at: None,
                        ended_at: Some(started_at),
                        run_id: None,
                        error: Some(why.clone()),
                        interrupted: false,
                    };
                    (stage, entry)
                })
                .collect()
        });
        let mut before = Stages::new();
        for &stage in stages {
            let entry = StageEntry {
                state: StageState::Pending,
                command: command.to_owned(),
                started_at,
                pid: Some(std::process::id()),
                entered_at: None,
                ended_at: None,
                run_id: None,
                error: None,
                interrupted: false,
            };
            if let Some(old) = existing.insert(stage, entry) {
                before.insert(stage, old);
            }
        }
        let log = StageLog {
            path: Some(ledger_path(out)),
            legacy: Some(legacy_path(out)),
            command: command.to_owned(),
            started_at,
            state: Mutex::new(Progress { stages: existing, before, current: stages.first().copied() }),
        };
        log.write(&log.lock().stages, Sync::Synced);
        log
    }

    /// A log that records nothing (a command that is only asked for a plan).
    pub fn none() -> StageLog {
        StageLog {
            path: None,
            legacy: None,
            command: String::new(),
            started_at: Utc::now(),
            state: Mutex::new(Progress { stages: Stages::new(), before: Stages::new(), current: None }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self, stages: &Stages, sync: Sync) {
        let Some(path) = &self.path else { return };
        if let Err(e) = crate::out::write_json_atomic_with(path, stages, sync == Sync::Synced) {
            tracing::warn!(error = %e, "the stage ledger cannot be written; the report may not know how this command ended");
            return;
        }
        if let Some(legacy) = &self.legacy {
            let _ = std::fs::remove_file(legacy);
        }
    }

    /// The command is now in `stage`: a failure from here on is that stage's, and if the
    /// command dies here, this is the stage it reached.
    pub fn enter(&self, stage: Stage) {
        let mut p = self.lock();
        if self.mark_entered(&mut p, stage) {
            self.write(&p.stages, Sync::Unsynced);
        }
    }

    /// Marks `done` done, with the raw run it extracted or loaded, and enters `next`
    /// ([`StageLog::done`], then [`StageLog::enter`]) in one write of the ledger: nothing
    /// happens between the two.
    pub fn done_then_enter(&self, done: Stage, run_id: Option<&str>, next: Stage) {
        let mut p = self.lock();
        let settled = self.mark_settled(&mut p, done, StageState::Done, run_id, None, false);
        let entered = self.mark_entered(&mut p, next);
        if settled || entered {
            self.write(&p.stages, Sync::Unsynced);
        }
    }

    /// Makes `stage` the current one, and records when this command entered it: whether the
    /// ledger changed (a stage that this command does and has not ended).
    fn mark_entered(&self, p: &mut Progress, stage: Stage) -> bool {
        p.current = Some(stage);
        if self.path.is_none() {
            return false;
        }
        match p.stages.get_mut(&stage) {
            Some(entry) if self.owns(entry) && entry.state == StageState::Pending => {
                entry.entered_at = Some(Utc::now());
                true
            }
            _ => false,
        }
    }

    /// The stage this command is in.
    pub fn current(&self) -> Option<Stage> {
        self.lock().current
    }

    /// Marks `stage` done, with the raw run it extracted or loaded.
    pub fn done(&self, stage: Stage, run_id: Option<&str>) {
        self.settle(stage, StageState::Done, run_id, None, false, Sync::Unsynced);
    }

    /// Marks `stage` failed, whatever stage the command is in (the actions' own outcome, say).
    pub fn failed(&self, stage: Stage, error: String, interrupted: bool) {
        self.settle(stage, StageState::Failed, None, Some(error), interrupted, Sync::Synced);
    }

    /// Marks how an actions stage ended. Rows held for attention (exit 3) leave it done: the
    /// report's corrections section shows them. A stop or a refused key that left rows unsent,
    /// or intents of an earlier run still open (in doubt: a write that may or may not have taken
    /// effect, in another file), leave it failed, until an apply resolves them. An apply of part
    /// of the file (`--only`) redoes only part of the stage: an earlier failure stands.
    pub fn actions_ended(&self, report: &crate::action::ActionReport, partial: bool) {
        if let Some(why) = &report.stopped {
            self.failed(
                Stage::Actions,
                format!("stopped before every row was sent ({why}); the rows not sent go out on the next apply"),
                !report.stopped_by_auth,
            );
        } else if !report.unresolved_intents.is_empty() {
            self.failed(
                Stage::Actions,
                format!(
                    "{} intent(s) of an earlier actions run are still open, their writes in doubt ({}); apply their files again to resolve them",
                    report.unresolved_intents.len(),
                    report.unresolved_intents.join("; ")
                ),
                false,
            );
        } else if partial {
            self.keep_earlier(Stage::Actions);
        } else {
            self.done(Stage::Actions, None);
        }
    }

    /// Puts back the entry `stage` had before this command began, unless that was done (or none):
    /// the command redid only part of the stage.
    fn keep_earlier(&self, stage: Stage) {
        let earlier = self.lock().before.get(&stage).cloned();
        match earlier {
            Some(entry) if entry.state != StageState::Done => {
                let mut p = self.lock();
                p.stages.insert(stage, entry);
                self.write(&p.stages, Sync::Synced);
            }
            _ => self.done(stage, None),
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
        let entered_at = p.stages.get(&stage).and_then(|e| e.entered_at);
        p.stages.insert(
            stage,
            StageEntry {
                state: StageState::Failed,
                command: self.command.clone(),
                started_at: self.started_at,
                pid: Some(std::process::id()),
                entered_at,
                ended_at: Some(now),
                run_id: None,
                error: Some(e.recorded()),
                interrupted: e.exit_code() == exit::INTERRUPTED,
            },
        );
        self.write(&p.stages, Sync::Synced);
    }

    /// The command completed: its stages still pending are done.
    pub fn finish(&self) {
        let mut p = self.lock();
        let now = Utc::now();
        for entry in p.stages.values_mut() {
            if self.owns(entry) && entry.state == StageState::Pending {
                entry.state = StageState::Done;
                entry.ended_at = Some(now);
            }
        }
        // Synced whether or not anything changed: the stages done on the way were not.
        self.write(&p.stages, Sync::Synced);
    }

    fn owns(&self, entry: &StageEntry) -> bool {
        entry.command == self.command && entry.started_at == self.started_at
    }

    fn settle(
        &self,
        stage: Stage,
        state: StageState,
        run_id: Option<&str>,
        error: Option<String>,
        interrupted: bool,
        sync: Sync,
    ) {
        let mut p = self.lock();
        if self.mark_settled(&mut p, stage, state, run_id, error, interrupted) {
            self.write(&p.stages, sync);
        }
    }

    /// Records how `stage` ended: whether the ledger changed. A stage marked done again by this
    /// command, with the same run, keeps its entry (a fleet's load is marked done at its
    /// batch's commit, and again when the sync has its answer).
    fn mark_settled(
        &self,
        p: &mut Progress,
        stage: Stage,
        state: StageState,
        run_id: Option<&str>,
        error: Option<String>,
        interrupted: bool,
    ) -> bool {
        if self.path.is_none() {
            return false;
        }
        let again = p.stages.get(&stage).is_some_and(|e| {
            self.owns(e) && state == StageState::Done && e.state == state && e.run_id.as_deref() == run_id
        });
        if again {
            return false;
        }
        let entered_at = p.stages.get(&stage).filter(|e| self.owns(e)).and_then(|e| e.entered_at);
        let entry = StageEntry {
            state,
            command: self.command.clone(),
            started_at: self.started_at,
            pid: Some(std::process::id()),
            entered_at,
            ended_at: Some(Utc::now()),
            run_id: run_id.map(str::to_owned),
            error,
            interrupted,
        };
        p.stages.insert(stage, entry);
        true
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
    fn a_stage_done_then_the_next_entered_is_one_write_and_a_repeated_done_none() {
        let dir = tempfile::tempdir().unwrap();
        let out = OutDir::new(dir.path());
        let written = || std::fs::metadata(ledger_path(&out)).unwrap().modified().unwrap();
        let inode = || std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(ledger_path(&out)).unwrap());
        let run = StageLog::begin(&out, "fleet run", &[Stage::Extract, Stage::Load, Stage::Lake]);
        run.enter(Stage::Extract);
        let before = inode();
        run.done_then_enter(Stage::Extract, Some("r1"), Stage::Load);
        assert_ne!(inode(), before, "written");
        let after = read(&out).unwrap();
        assert_eq!(
            (after[&Stage::Extract].state, after[&Stage::Extract].run_id.as_deref()),
            (StageState::Done, Some("r1"))
        );
        assert_eq!(after[&Stage::Load].state, StageState::Pending);
        assert!(after[&Stage::Load].entered_at.is_some(), "entered: a run killed now reached the load");
        assert_eq!(run.current(), Some(Stage::Load), "a failure now is the load's");

        run.done(Stage::Load, Some("r1"));
        let (once, at) = (read(&out).unwrap(), (inode(), written()));
        run.done(Stage::Load, Some("r1"));
        assert_eq!((inode(), written()), at, "the same mark again writes nothing");
        assert_eq!(read(&out).unwrap(), once);
        run.done(Stage::Load, Some("r2"));
        assert_eq!(read(&out).unwrap()[&Stage::Load].run_id.as_deref(), Some("r2"), "another run's is written");
        run.failed(Stage::Load, "x".into(), false);
        assert_eq!(read(&out).unwrap()[&Stage::Load].state, StageState::Failed, "a failure after it too");
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
        std::fs::write(ledger_path(&out), b"{\"load\": {\"state\": \"done\", \"lake\": ").unwrap();
        let bad = read(&out).unwrap_err();
        assert!(bad.why.contains("not readable"));
        assert_eq!(bad.stages, [Stage::Load, Stage::Lake], "what it may have held");
        // A command keeps it aside; the stages it held and the command does not redo are unknown.
        StageLog::begin(&out, "extract", &[Stage::Extract]).finish();
        let after = read(&out).unwrap();
        assert_eq!(after[&Stage::Lake].state, StageState::Unknown);
        assert!(after[&Stage::Lake].error.as_deref().unwrap().contains("is kept as"), "{:?}", after[&Stage::Lake]);
        assert_eq!(after[&Stage::Extract].state, StageState::Done);
        let aside = std::fs::read_dir(out.state_dir())
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("stages.json.unreadable-"));
        assert!(aside, "the unreadable ledger is kept");
    }
}
