//! The output directory (`--out`): its layout, the lock that keeps two runs from interleaving,
//! atomic file writes, and run ids.
//!
//! Layout ([`OutDir`] is the one place that joins these names):
//! ```text
//! OUT/.lock                          held by the running command (OS file lock)
//! OUT/raw/<run_id>/run.json          what the run was asked to do
//! OUT/raw/<run_id>/part-NNNN.jsonl.gz  every response as received, one segment per invocation
//! OUT/raw/<run_id>/invocations/NNNN.json  request counters of each invocation
//! OUT/raw/<run_id>/COMPLETE          present once the extract finished
//! OUT/runs/<run_id>.json             the run report
//! OUT/state/pacing-<id>.json         the pacer's memory per service and key (times only; the
//!                                    client names it in the directory `state_dir` gives it)
//! OUT/state/stages.json              the stage ledger: how far the last commands got
//! OUT/state/warehouse.duckdb         the writer's warehouse (see `load::warehouse`)
//! OUT/state/fleet-status.json        an organization's status in a fleet (`fleet status`)
//! OUT/warehouse.duckdb               the readers' snapshot, replaced by a rename
//! OUT/parquet/<table>                symlink to the table's current version directory
//! OUT/actions/<run_id>-results.csv   an actions run's results
//! OUT/report/index.html              the HTML report (`report/org/<name>.html` per organization)
//! OUT/orgs/<name>/                   a fleet's organization's own directory, laid out as this
//! OUT/.staging/                      a load's staged files (removed by the next load)
//! OUT/.lake-staging/ .lake-intents/  the lake push's and the actions intents' staged files
//! OUT/.lake-restore/                 the lake's files cached for a restore
//! OUT/.demo, OUT/examples/           a demo's mark and its reviewed CSV
//! OUT/lake-cache/                    an `s3://` lake's files, cached by `query --lake`, `report --lake`
//! OUT/.publish-<pid>                 a publish's copy of the writer's warehouse, before its rename
//! ```
//!
//! The lock is an OS advisory lock (`flock`), so a killed run never leaves a stale lock behind.
//! Every file a reader may open is written to a temporary name and renamed into place, but for
//! the pacer's memory without a cap window, which only the commands on `--out` read (under its
//! lock) and which is rewritten in place (see `api::memory`).

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use chrono::Utc;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum OutError {
    #[error(
        "another run holds the lock on `{out}`: {holder}; wait for it to finish, or check that it is still running"
    )]
    Locked { out: String, holder: String },
    #[error("raw landing `{path}` is corrupt at line {line}: {reason}; the run cannot be loaded from it: move the file aside and run `creator-etl extract --fresh`")]
    Corrupt { path: String, line: usize, reason: String },
    #[error("cannot {action} `{path}`")]
    Io {
        action: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
}

pub(crate) fn io_err(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> OutError {
    let path = path.display().to_string();
    move |source| OutError::Io { action, path, source }
}

/// The name prefix of a publish's copy of the warehouse, under `OUT`.
const PUBLISHING: &str = ".publish-";

/// The output directory.
#[derive(Clone, Debug)]
pub struct OutDir {
    root: PathBuf,
}

/// The warehouse's file name, of the writer's and the readers' alike.
const WAREHOUSE_FILE: &str = "warehouse.duckdb";

/// Whether a command holds an output directory's lock now ([`OutDir::lock_holder`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    Free,
    /// Held: what the holder recorded (`run ID (pid N, since T)`).
    Held(String),
    /// The probe could not tell, and why.
    Unknown(String),
}

/// Held while a command writes to the output directory; released on drop or process exit.
#[derive(Debug)]
pub struct OutLock {
    _file: File,
}

impl OutDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        OutDir { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn raw_root(&self) -> PathBuf {
        self.root.join("raw")
    }

    pub fn raw_dir(&self, run_id: &str) -> PathBuf {
        self.raw_root().join(run_id)
    }

    /// The request counters of one invocation of a raw run's extract.
    pub fn invocation_file(&self, run_id: &str, invocation: u32) -> PathBuf {
        self.raw_dir(run_id).join("invocations").join(format!("{invocation:04}.json"))
    }

    /// Where `query --lake` and `report --lake` cache an `s3://` lake's files.
    pub fn lake_cache_dir(&self) -> PathBuf {
        self.root.join("lake-cache")
    }

    /// The copy of the writer's warehouse that a publish by process `pid` renames into place.
    pub fn publishing_file(&self, pid: u32) -> PathBuf {
        self.root.join(format!("{PUBLISHING}{pid}"))
    }

    /// Whether a file directly under `OUT` named `name` is a copy that a killed publish left (this
    /// release's, or an earlier one's `.warehouse.duckdb.publish-N`).
    pub fn is_publish_leftover(name: &str) -> bool {
        name.starts_with(PUBLISHING) || (name.starts_with('.') && name.contains(".duckdb.publish-"))
    }

    pub fn runs_dir(&self) -> PathBuf {
        self.root.join("runs")
    }

    pub fn report_path(&self, run_id: &str) -> PathBuf {
        self.runs_dir().join(format!("{run_id}.json"))
    }

    pub fn state_dir(&self) -> PathBuf {
        self.root.join("state")
    }

    fn lock_file(&self) -> PathBuf {
        self.root.join(".lock")
    }

    /// The writer's warehouse: opened only by creator-etl's writing commands.
    pub fn writer_warehouse(&self) -> PathBuf {
        self.state_dir().join(WAREHOUSE_FILE)
    }

    /// The readers' snapshot of the warehouse, replaced by a rename at each publish.
    pub fn warehouse(&self) -> PathBuf {
        self.root.join(WAREHOUSE_FILE)
    }

    /// The Parquet tree: a symlink per table to its current version.
    pub fn parquet_dir(&self) -> PathBuf {
        self.root.join("parquet")
    }

    /// Where loads stage their files; what is left here after a crash is removed by the next.
    pub fn staging_dir(&self) -> PathBuf {
        self.root.join(".staging")
    }

    /// Where the lake push stages the organization's tables.
    pub fn lake_staging_dir(&self) -> PathBuf {
        self.root.join(".lake-staging")
    }

    /// Where the actions stage their intents for the lake before sending.
    pub fn lake_intents_dir(&self) -> PathBuf {
        self.root.join(".lake-intents")
    }

    /// Where a restore caches the lake's files.
    pub fn lake_restore_dir(&self) -> PathBuf {
        self.root.join(".lake-restore")
    }

    /// The actions runs' results files.
    pub fn actions_dir(&self) -> PathBuf {
        self.root.join("actions")
    }

    /// An actions run's results file.
    pub fn results_csv(&self, run_id: &str) -> PathBuf {
        self.actions_dir().join(format!("{run_id}-results.csv"))
    }

    /// The HTML report's directory (`index.html`, `org/<name>.html`).
    pub fn report_dir(&self) -> PathBuf {
        self.root.join("report")
    }

    /// A fleet's organizations' directories.
    pub fn orgs_dir(&self) -> PathBuf {
        self.root.join("orgs")
    }

    /// A fleet's organization's own directory.
    pub fn org(&self, name: &str) -> OutDir {
        OutDir::new(self.orgs_dir().join(name))
    }

    /// An organization's status in a fleet (`fleet status`).
    pub fn fleet_status_file(&self) -> PathBuf {
        self.state_dir().join("fleet-status.json")
    }

    /// The stage ledger ([`crate::sync::stages`]).
    pub fn stages_file(&self) -> PathBuf {
        self.state_dir().join("stages.json")
    }

    /// The mark of a directory the demo made (`creator-etl demo` writes only into such a one, or
    /// an empty one).
    pub fn demo_mark(&self) -> PathBuf {
        self.root.join(".demo")
    }

    /// The demo's reviewed CSV, written where the demo's summary tells the user to plan it.
    pub fn demo_reviewed_csv(&self) -> PathBuf {
        self.root.join("examples").join("reviewed.csv")
    }

    /// Where an earlier release recorded how the last `run` ended.
    pub fn legacy_last_run_file(&self) -> PathBuf {
        self.state_dir().join("last-run.json")
    }

    /// Who holds the directory's lock now (a run in progress): what it recorded. Finding out
    /// takes the lock for an instant (the only answer that holds across pid namespaces and
    /// network filesystems); [`lock`](Self::lock) waits a moment for a busy lock, so a run
    /// starting at that instant is not refused. The lock file is opened for writing, as an
    /// exclusive `flock` needs on NFS, and never created: with no lock file, no run holds it.
    pub fn lock_holder(&self) -> Holder {
        let path = self.lock_file();
        let mut file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Holder::Free,
            Err(e) => {
                return Holder::Unknown(format!("`{}` cannot be opened to look for its holder ({e})", path.display()))
            }
        };
        match file.try_lock() {
            Ok(()) => Holder::Free,
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                Holder::Held(if holder.is_empty() { "unknown run".into() } else { holder.to_owned() })
            }
            Err(std::fs::TryLockError::Error(e)) => {
                Holder::Unknown(format!("`{}` cannot be locked to look for its holder ({e})", path.display()))
            }
        }
    }

    /// Creates the directory and takes its lock, recording `who` (the run id) for a second
    /// command to report.
    pub fn lock(&self, who: &str) -> Result<OutLock, OutError> {
        fs::create_dir_all(&self.root).map_err(io_err("create", &self.root))?;
        let path = self.lock_file();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_err("open", &path))?;
        // A busy lock may be a report looking for a holder (`lock_holder`): it lets go at once.
        let mut tries = 0;
        let taken = loop {
            match file.try_lock() {
                Err(std::fs::TryLockError::WouldBlock) if tries < LOCK_TRIES => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(25));
                }
                other => break other,
            }
        };
        match taken {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(OutError::Locked {
                    out: self.root.display().to_string(),
                    holder: if holder.is_empty() { "unknown run".into() } else { holder.to_owned() },
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io_err("lock", &path)(e)),
        }
        let text =
            format!("run {who} (pid {}, since {})\n", std::process::id(), Utc::now().format("%Y-%m-%dT%H:%M:%SZ"));
        file.set_len(0).map_err(io_err("write", &path))?;
        file.seek(SeekFrom::Start(0)).map_err(io_err("write", &path))?;
        file.write_all(text.as_bytes()).map_err(io_err("write", &path))?;
        let _ = file.flush();
        Ok(OutLock { _file: file })
    }
}

/// How many times [`OutDir::lock`] tries a busy lock again, 25 ms apart, before it reports the
/// holder: a quarter of a second.
const LOCK_TRIES: u32 = 10;

/// The process id that a lock holder's description names: `(pid 123, …)` in this crate's lock
/// file, `(PID 123)` in DuckDB's lock error. Reports name a holder by this alone.
pub fn holder_pid(holder: &str) -> Option<u32> {
    let lower = holder.to_ascii_lowercase();
    let at = lower.find("(pid ")? + "(pid ".len();
    lower[at..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// Writes a file atomically: a temporary sibling, fsync, then rename over the target.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), OutError> {
    write_atomic_with(path, bytes, true)
}

/// [`write_atomic`], with the fsync only when `sync`: without it, a killed process leaves the old
/// file or the new one whole, and only a power loss can lose the new one.
pub fn write_atomic_with(path: &Path, bytes: &[u8], sync: bool) -> Result<(), OutError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id()
    ));
    {
        // The folder is made only when it is missing: most writes replace a file in place, and
        // a fleet makes thousands of them.
        let created = match File::create(&tmp) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                fs::create_dir_all(dir).map_err(io_err("create", dir))?;
                File::create(&tmp)
            }
            created => created,
        };
        let mut f = created.map_err(io_err("create", &tmp))?;
        f.write_all(bytes).map_err(io_err("write", &tmp))?;
        if sync {
            f.sync_all().map_err(io_err("sync", &tmp))?;
        }
    }
    fs::rename(&tmp, path).map_err(io_err("rename into place", path))
}

/// Why a JSON file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadJsonError {
    #[error("cannot be read ({0})")]
    Io(#[source] std::io::Error),
    #[error("is not readable ({0})")]
    Parse(#[source] serde_json::Error),
}

/// Reads a JSON file written by [`write_json_atomic`]: `Ok(None)` when it does not exist.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, ReadJsonError> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(ReadJsonError::Parse),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ReadJsonError::Io(e)),
    }
}

/// Writes a value as pretty JSON, atomically.
pub fn write_json_atomic<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), OutError> {
    write_json_atomic_with(path, value, true)
}

/// [`write_json_atomic`], with the fsync only when `sync` ([`write_atomic_with`]).
pub fn write_json_atomic_with<T: serde::Serialize>(path: &Path, value: &T, sync: bool) -> Result<(), OutError> {
    let mut bytes = serde_json::to_vec_pretty(value).expect("reports serialise");
    bytes.push(b'\n');
    write_atomic_with(path, &bytes, sync)
}

/// Aborts the process at a named point when `CREATOR_ETL_CRASH_AT` names it: how the
/// crash-safety tests die exactly between two writes. Never set in normal use.
pub fn crash_point(name: &str) {
    if std::env::var("CREATOR_ETL_CRASH_AT").is_ok_and(|v| v == name) {
        eprintln!("crash injected at `{name}`");
        std::process::abort();
    }
}

/// Makes a new directory under `parent` named `PREFIX` and a unique suffix (created exclusively,
/// so no two callers, in this process or another, ever get the same one), and returns it. The
/// caller removes it.
pub fn unique_dir(parent: &Path, prefix: &str) -> Result<PathBuf, OutError> {
    fs::create_dir_all(parent).map_err(io_err("create", parent))?;
    let dir =
        tempfile::Builder::new().prefix(prefix).tempdir_in(parent).map_err(io_err("create a directory in", parent))?;
    Ok(dir.keep())
}

/// A new run id: UTC time to the second, sortable, plus 4 random hex digits.
pub fn new_run_id() -> String {
    format!("{}-{:04x}", Utc::now().format("%Y%m%dT%H%M%SZ"), fastrand::u16(..))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_names_the_holder_and_a_dropped_lock_frees() {
        let dir = tempfile::tempdir().unwrap();
        let out = OutDir::new(dir.path().join("out"));
        let held = out.lock("run-a").unwrap();
        match out.lock("run-b") {
            Err(OutError::Locked { holder, .. }) => assert!(holder.contains("run-a"), "{holder}"),
            other => panic!("expected Locked, got {other:?}"),
        }
        drop(held);
        out.lock("run-c").unwrap();
    }

    #[test]
    fn the_holder_of_a_lock_is_seen_and_a_free_lock_stays_free() {
        let dir = tempfile::tempdir().unwrap();
        let out = OutDir::new(dir.path());
        assert_eq!(out.lock_holder(), Holder::Free, "no lock file");
        assert!(!dir.path().join(".lock").exists(), "the probe never creates the lock file");
        let lock = out.lock("run-a").unwrap();
        assert!(matches!(out.lock_holder(), Holder::Held(h) if h.contains("run run-a (pid")));
        drop(lock);
        assert_eq!(out.lock_holder(), Holder::Free);
        let _again = out.lock("run-b").unwrap();
    }

    #[test]
    fn a_lock_probe_that_cannot_tell_says_so() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let out = OutDir::new(dir.path());
        drop(out.lock("run-a").unwrap());
        let lock = dir.path().join(".lock");
        std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o444)).unwrap();
        // Root opens a read-only file for writing all the same: then the probe can tell.
        if std::fs::OpenOptions::new().write(true).open(&lock).is_err() {
            assert!(matches!(out.lock_holder(), Holder::Unknown(why) if why.contains(".lock")));
        }
        std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::remove_file(&lock).unwrap();
        std::fs::create_dir(&lock).unwrap();
        assert!(matches!(out.lock_holder(), Holder::Unknown(_)), "a directory in the lock's place");
    }

    #[test]
    fn a_lock_let_go_of_within_a_moment_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let out = OutDir::new(dir.path());
        let held = out.lock("a report's look").unwrap();
        let letting_go = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(60));
            drop(held);
        });
        assert!(out.lock("run-b").is_ok(), "a run waits out a moment's hold");
        letting_go.join().unwrap();
    }

    #[test]
    fn a_holder_is_named_by_its_pid() {
        assert_eq!(holder_pid("run fleet run (pid 4321, since 2026-01-01T00:00:00Z)"), Some(4321));
        let duckdb = "/usr/bin/python3 (PID 77) by user root: `python3 -c x --token=s3cret`";
        assert_eq!(holder_pid(duckdb), Some(77));
        assert_eq!(holder_pid("unknown run"), None);
    }

    #[test]
    fn unique_directories_never_collide() {
        let dir = tempfile::tempdir().unwrap();
        let made: std::collections::BTreeSet<PathBuf> =
            (0..200).map(|_| unique_dir(&dir.path().join(".staging"), "batch-").unwrap()).collect();
        assert_eq!(made.len(), 200);
        assert!(made.iter().all(|d| d.is_dir() && d.file_name().unwrap().to_str().unwrap().starts_with("batch-")));
    }

    #[test]
    fn atomic_write_replaces_whole_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::read_dir(dir.path().join("a")).unwrap().count(), 1, "no temporary left behind");
    }
}
