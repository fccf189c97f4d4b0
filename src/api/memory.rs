//! The pacer's memory between processes: one small JSON file per service and key, kept before
//! every request goes out and read when a client starts, so that the next process on the key
//! keeps the service's rules from where this one stopped.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::key::{fnv1a, ApiKey};
use crate::out::{write_atomic_with, OutError};

/// The pacer's memory of the latest requests, in wall-clock milliseconds since the Unix epoch:
/// what a later process needs to keep the per-key rules across a restart (see
/// [`Pacer::restore`](super::Pacer::restore)).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct PacingMemory {
    /// When the latest request went out.
    pub last_request_ms: Option<i64>,
    /// When the latest payout mark went out.
    pub last_mark_ms: Option<i64>,
    /// The requests counted in the current cap window, oldest first.
    #[serde(default)]
    pub window_ms: Vec<i64>,
}

impl PacingMemory {
    /// Reads a memory file; a missing or unreadable one is no memory (one that cannot be parsed
    /// is logged). A memory rewritten in place ([`PacingMemory::write`]) could be read in the
    /// middle of a rewrite by a reader that holds no lock on `--out` (this crate's readers all
    /// do): it is read until two reads agree, a few times at most.
    pub(crate) fn read(path: &Path) -> Option<Self> {
        let mut read = crate::out::read_json(path);
        for _ in 0..3 {
            let again = crate::out::read_json(path);
            let agree = matches!((&read, &again), (Ok(a), Ok(b)) if a == b);
            read = again;
            if agree {
                break;
            }
        }
        match read {
            Ok(m) => m,
            Err(crate::out::ReadJsonError::Io(_)) => None,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "ignoring an unreadable pacing state file");
                None
            }
        }
    }

    /// Writes it for the next process. With a cap window it is replaced whole (a temporary file
    /// renamed over the old one) and synced to disk first: without the sync, a power loss can
    /// leave an empty file on some file systems, and the next process would start a whole cap
    /// window afresh. Without a cap window (`--hourly-cap 0`, or a window emptied) it holds only
    /// when the last requests went out, which no restart after a power loss comes soon enough to
    /// need, and it is rewritten in place when it can be ([`overwrite_in_place`]), else replaced
    /// unsynced: a fleet without a cap writes it before every request of every organization, and
    /// a rename over the old file frees an inode and makes ext4 start writing the new one back
    /// at once, each time. Either way a killed process leaves the old memory or the new one
    /// whole.
    pub(crate) fn write(&self, path: &Path) -> Result<(), OutError> {
        let bytes = self.padded();
        if self.window_ms.is_empty() {
            match overwrite_in_place(path, &bytes) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                // Replaced whole instead, which reports its own error if there is one.
                Err(e) => {
                    tracing::debug!(path = %path.display(), error = %e, "cannot rewrite the pacing state in place")
                }
            }
        }
        write_atomic_with(path, &bytes, !self.window_ms.is_empty())
    }

    /// The memory as JSON, padded with spaces (which JSON allows after a value) to a multiple of
    /// [`MEMORY_BLOCK`] bytes, so that the next memory without a cap window has the same length
    /// and can be written over it in place.
    fn padded(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec(self).unwrap_or_default();
        let len = bytes.len().div_ceil(MEMORY_BLOCK).max(1) * MEMORY_BLOCK;
        bytes.resize(len, b' ');
        bytes
    }
}

/// The length a memory file is padded to a multiple of: a memory without a cap window (two
/// times) fits in one, so its rewrites keep the file's length.
const MEMORY_BLOCK: usize = 256;

/// Writes `bytes` over the file at `path` in place, with one positioned write from its start,
/// when it is a plain file with exactly that length and no other name (else `Ok(false)`, and
/// nothing is written): no new file, no rename, no truncation. A symbolic link, or a file that a
/// copy of `--out` shares through a hard link, is replaced instead, as before. One write of at
/// most a page is never left half done by a killed process (a power loss can leave the file
/// unreadable, which is read as no memory).
fn overwrite_in_place(path: &Path, bytes: &[u8]) -> std::io::Result<bool> {
    use std::os::unix::fs::{FileExt, MetadataExt};
    if bytes.len() > 4096 {
        return Ok(false);
    }
    let named = match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_file() => m,
        Ok(_) => return Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let file = match std::fs::OpenOptions::new().write(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    // The file opened is the one looked at (not a link put in its place in between).
    let same = meta.dev() == named.dev() && meta.ino() == named.ino();
    if !same || !meta.is_file() || meta.nlink() != 1 || meta.len() != bytes.len() as u64 {
        return Ok(false);
    }
    file.write_all_at(bytes, 0)?;
    Ok(true)
}

/// The memory file of a service and key in `dir`. The service is its base URL without a trailing
/// slash, as the client uses it with or without one; the key is named by its fingerprint only.
pub(crate) fn file_in(dir: &Path, base_url: &str, key: &ApiKey) -> PathBuf {
    let service = base_url.trim_end_matches('/');
    let id = fnv1a(format!("{service}|{}", key.fingerprint()).as_bytes());
    dir.join(format!("pacing-{id:08x}.json"))
}

/// Where a client keeps its pacer's memory, and a lock that orders the writes of the client and
/// its clones, so that an older memory never replaces a newer one.
#[derive(Debug)]
pub(crate) struct MemoryFile {
    path: PathBuf,
    order: Mutex<()>,
}

impl MemoryFile {
    pub(crate) fn new(path: PathBuf) -> Self {
        MemoryFile { path, order: Mutex::new(()) }
    }

    /// What an earlier process remembered, if anything.
    pub(crate) fn read(&self) -> Option<PacingMemory> {
        PacingMemory::read(&self.path)
    }

    /// Keeps the pacer's memory for the next process, as `memory` reads it once this file's
    /// order is taken (so an older memory never replaces a newer one). Failing to keep it is
    /// logged, not fatal: the next process then starts without it, as a first one does.
    pub(crate) fn keep(&self, memory: impl FnOnce() -> PacingMemory) {
        let _order = self.order.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = memory().write(&self.path) {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot keep the pacing state for the next run");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::DEFAULT_BASE_URL;

    #[test]
    fn the_file_is_one_per_service_with_or_without_a_trailing_slash() {
        let key = ApiKey::new("k-1", "test").unwrap();
        let file = |url: &str| file_in(Path::new("/s"), url, &key);
        assert_eq!(file("http://h:1/api/v1"), file("http://h:1/api/v1/"));
        assert_eq!(file("http://h:1"), file("http://h:1/"));
        assert_ne!(file("http://h:1/api/v1"), file("http://h:1/api/v2"));
        assert_ne!(
            file("http://h:1/api/v1"),
            file_in(Path::new("/s"), "http://h:1/api/v1", &ApiKey::new("k-2", "t").unwrap())
        );
        // The default service keeps the file name it always had.
        let named = fnv1a(format!("{DEFAULT_BASE_URL}|{}", key.fingerprint()).as_bytes());
        assert_eq!(file(DEFAULT_BASE_URL), Path::new("/s").join(format!("pacing-{named:08x}.json")));
    }

    #[test]
    fn a_memory_survives_its_file_and_a_bad_file_is_no_memory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state").join("pacing-1.json");
        assert_eq!(PacingMemory::read(&path), None, "no file yet");
        let memory = PacingMemory { last_request_ms: Some(5), last_mark_ms: None, window_ms: vec![1, 5] };
        memory.write(&path).unwrap();
        assert_eq!(PacingMemory::read(&path), Some(memory));
        let names: Vec<_> =
            std::fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["pacing-1.json"], "no temporary file is left");
        std::fs::write(&path, b"{\"last_request_ms\":").unwrap();
        assert_eq!(PacingMemory::read(&path), None);
        // A file without the cap window is an empty window.
        std::fs::write(&path, b"{\"last_request_ms\":7,\"last_mark_ms\":null}").unwrap();
        assert_eq!(PacingMemory::read(&path).unwrap().window_ms, Vec::<i64>::new());
    }

    #[test]
    fn a_memory_without_a_cap_window_is_rewritten_in_place_and_one_with_a_window_replaced() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pacing-1.json");
        let inode = || std::fs::metadata(&path).unwrap().ino();
        let times =
            |last: i64| PacingMemory { last_request_ms: Some(last), last_mark_ms: Some(last - 1), window_ms: vec![] };
        // A file of an older creator-etl (unpadded): replaced once, then rewritten in place.
        std::fs::write(&path, b"{\"last_request_ms\":1}").unwrap();
        times(1_764_000_000_000).write(&path).unwrap();
        let first = inode();
        for last in [1_764_000_002_000, 1_764_000_004_000, 9] {
            times(last).write(&path).unwrap();
            assert_eq!(inode(), first, "rewritten in place");
            assert_eq!(PacingMemory::read(&path), Some(times(last)), "a shorter memory reads back whole");
        }
        assert_eq!(std::fs::metadata(&path).unwrap().len(), MEMORY_BLOCK as u64);
        // A cap window: replaced whole (and synced); a long one is longer than a block.
        let window = PacingMemory { window_ms: (0..100).map(|i| 1_764_000_000_000 + i).collect(), ..times(5) };
        window.write(&path).unwrap();
        assert_ne!(inode(), first, "replaced");
        assert_eq!(PacingMemory::read(&path), Some(window));
        // Back to no window: the length differs, so replaced once more, then in place again.
        times(6).write(&path).unwrap();
        let again = inode();
        times(7).write(&path).unwrap();
        assert_eq!(inode(), again);
        assert_eq!(PacingMemory::read(&path), Some(times(7)));
        // A file another name shares (a copy of `--out` made with hard links) is left to it.
        let copy = dir.path().join("copy.json");
        std::fs::hard_link(&path, &copy).unwrap();
        times(8).write(&path).unwrap();
        assert_ne!(inode(), again, "replaced, not written through the shared file");
        assert_eq!(PacingMemory::read(&copy), Some(times(7)));
        std::fs::remove_file(&copy).unwrap();
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["pacing-1.json"], "no temporary file is left");
    }
}
