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
//! OUT/state/.<file>.swap             a rewritten state file's previous version, which its next
//!                                    write reuses (`rewrite_atomic_with`)
//! ```
//!
//! The lock is an OS advisory lock (`flock`), so a killed run never leaves a stale lock behind.
//! Every file a reader may open is written to a temporary name and renamed into place, or, for
//! the state files rewritten many times a run (the stage ledger, the pacer's memory, a fleet
//! member's status), written into its swap and exchanged with it ([`rewrite_atomic_with`]).

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

/// [`write_atomic_with`] for a file rewritten many times (a stage ledger, a pacer's memory, an
/// organization's status): the bytes go into the file's swap, `.NAME.swap` beside it, which is
/// then exchanged with the file in one step (Linux `renameat2` with `RENAME_EXCHANGE`). A reader
/// sees the old file or the new one whole, as with a rename, and a killed write leaves the file
/// as it was. The swap then holds the old version, and the next write reuses it: a rewrite
/// allocates and frees no inode. That is what a rename's temporary file costs most, on a file
/// system without a journal especially (ext4 then skips over inodes freed in the last minutes
/// when it allocates one), and a fleet rewrites these files about twenty times per organization
/// and run.
///
/// The first write (no file yet), a swap held by another writer or by a reader ([`read_whole`]
/// locks what it reads), one that is linked elsewhere or not a plain file, and a file system
/// without the exchange all take the rename.
pub fn rewrite_atomic_with(path: &Path, bytes: &[u8], sync: bool) -> Result<(), OutError> {
    #[cfg(target_os = "linux")]
    if let Some(done) = exchange_into_place(path, bytes, sync) {
        return done;
    }
    write_atomic_with(path, bytes, sync)
}

/// [`rewrite_atomic_with`]'s exchange: `None` when the rename must be taken instead.
#[cfg(target_os = "linux")]
fn exchange_into_place(path: &Path, bytes: &[u8], sync: bool) -> Option<Result<(), OutError>> {
    use std::os::unix::fs::MetadataExt;
    let name = path.file_name()?.to_str()?;
    if !fs::symlink_metadata(path).ok()?.file_type().is_file() {
        return None;
    }
    let swap = path.with_file_name(format!(".{name}.swap"));
    let mut f = OpenOptions::new().write(true).create(true).truncate(false).open(&swap).ok()?;
    // Another writer, or a reader that opened this version before it was exchanged out, holds
    // the swap: the rename, with a file of its own.
    f.try_lock().ok()?;
    // The swap must still be the file opened (a writer may have exchanged it into place since),
    // and no other name may share it (its old content would change under that name).
    let (opened, named) = (f.metadata().ok()?, fs::symlink_metadata(&swap).ok()?);
    if opened.ino() != named.ino() || opened.dev() != named.dev() || opened.nlink() != 1 {
        return None;
    }
    let written = f.set_len(0).and_then(|()| f.write_all(bytes)).and_then(|()| if sync { f.sync_all() } else { Ok(()) });
    if let Err(e) = written {
        // The file is untouched; the swap is only ever read by its next write, which empties it.
        return Some(Err(io_err("write", &swap)(e)));
    }
    let cwd = rustix::fs::CWD;
    match rustix::fs::renameat_with(cwd, &swap, cwd, path, rustix::fs::RenameFlags::EXCHANGE) {
        Ok(()) => Some(Ok(())),
        // No exchange here (a file system without it): the swap is renamed into place instead.
        Err(_) => Some(fs::rename(&swap, path).map_err(io_err("rename into place", path))),
    }
}

/// Why a JSON file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadJsonError {
    #[error("cannot be read ({0})")]
    Io(#[source] std::io::Error),
    #[error("is not readable ({0})")]
    Parse(#[source] serde_json::Error),
}

/// Reads a file whole, one version of it. A file rewritten through its swap
/// ([`rewrite_atomic_with`]) hands its old inode to a later rewrite, so a reader that opened it
/// just before a rewrite could read a following one half-done. The reader holds a shared lock on
/// the file while it reads, and a writer writes only into a swap it holds exclusively (else it
/// renames a file of its own into place): a version is never rewritten under a reader.
pub fn read_whole(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut file = File::open(path)?;
    // A file system without locks still reads (as every file was read before the swaps).
    let _ = file.lock_shared();
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Reads a JSON file written by [`write_json_atomic`]: `Ok(None)` when it does not exist.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, ReadJsonError> {
    match read_whole(path) {
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
    write_atomic_with(path, &json_bytes(value), sync)
}

/// [`write_json_atomic_with`] for a file rewritten many times ([`rewrite_atomic_with`]).
pub fn rewrite_json_atomic_with<T: serde::Serialize>(path: &Path, value: &T, sync: bool) -> Result<(), OutError> {
    rewrite_atomic_with(path, &json_bytes(value), sync)
}

fn json_bytes<T: serde::Serialize>(value: &T) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(value).expect("reports serialise");
    bytes.push(b'\n');
    bytes
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

    #[cfg(target_os = "linux")]
    #[test]
    fn a_rewritten_file_is_exchanged_with_its_swap_and_allocates_no_inode() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("state/stages.json");
        let swap = dir.path().join("state/.stages.json.swap");
        let ino = |p: &Path| fs::metadata(p).unwrap().ino();
        rewrite_atomic_with(&p, b"one", false).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"one");
        assert!(!swap.exists(), "a first write is renamed into place and leaves no swap");
        rewrite_atomic_with(&p, b"two, longer", true).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two, longer");
        assert_eq!(fs::read(&swap).unwrap(), b"one", "the swap holds the previous version");
        let inodes = [ino(&p), ino(&swap)];
        for n in 3..10 {
            rewrite_atomic_with(&p, format!("{n}").as_bytes(), n % 2 == 0).unwrap();
            assert_eq!(fs::read(&p).unwrap(), format!("{n}").as_bytes());
        }
        let mut now = [ino(&p), ino(&swap)];
        now.sort_unstable();
        let mut before = inodes;
        before.sort_unstable();
        assert_eq!(now, before, "later writes reuse the two inodes");
        assert_eq!(fs::read_dir(dir.path().join("state")).unwrap().count(), 2, "the file and its swap, nothing else");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_swap_in_use_or_linked_elsewhere_is_left_alone_and_the_file_still_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pacing.json");
        let swap = dir.path().join(".pacing.json.swap");
        rewrite_atomic_with(&p, b"one", false).unwrap();
        rewrite_atomic_with(&p, b"two", false).unwrap();
        // Another writer holds the swap: this one renames its own temporary file.
        let held = File::options().write(true).open(&swap).unwrap();
        held.lock().unwrap();
        rewrite_atomic_with(&p, b"three", false).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"three");
        assert_eq!(fs::read(&swap).unwrap(), b"one", "the held swap was not written");
        drop(held);
        // A swap with another name (a hard link a backup made, say) keeps its content there.
        let kept = dir.path().join("backup.json");
        fs::hard_link(&swap, &kept).unwrap();
        rewrite_atomic_with(&p, b"four", false).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"four");
        assert_eq!(fs::read(&kept).unwrap(), b"one", "the other name's content is untouched");
        // A symbolic link in the file's place is replaced, as a rename does, never written through.
        let target = dir.path().join("elsewhere.json");
        fs::write(&target, b"theirs").unwrap();
        let linked = dir.path().join("linked.json");
        std::os::unix::fs::symlink(&target, &linked).unwrap();
        rewrite_atomic_with(&linked, b"ours", false).unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"theirs");
        assert_eq!(fs::read(&linked).unwrap(), b"ours");
        assert!(!fs::symlink_metadata(&linked).unwrap().file_type().is_symlink());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_reader_never_sees_a_rewrite_half_done() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("stages.json");
        // Versions of different lengths: a torn read is a prefix, or one version's bytes over another's.
        let version = |k: usize| serde_json::to_vec(&vec![k; 20 + 700 * (k % 4)]).unwrap();
        rewrite_atomic_with(&p, &version(0), false).unwrap();
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (p, done) = (p.clone(), done.clone());
            std::thread::spawn(move || {
                let mut k = 1;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    rewrite_atomic_with(&p, &version(k), false).unwrap();
                    k += 1;
                }
                k
            })
        };
        for _ in 0..3000 {
            let read: Vec<usize> = read_json(&p).unwrap().expect("the file is always there");
            let k = read[0];
            assert_eq!(read, serde_json::from_slice::<Vec<usize>>(&version(k)).unwrap(), "a whole version");
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(writer.join().unwrap() > 1, "the writer wrote while the reader read");
    }
}
