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
    /// is logged).
    pub(crate) fn read(path: &Path) -> Option<Self> {
        match crate::out::read_json(path) {
            Ok(m) => m,
            Err(crate::out::ReadJsonError::Io(_)) => None,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "ignoring an unreadable pacing state file");
                None
            }
        }
    }

    /// Writes it atomically: a temporary file renamed over the old one, so a killed process
    /// leaves the old memory or the new one whole. It is synced to disk first when it holds a cap
    /// window: without the sync, a power loss can leave an empty file on some file systems, and
    /// the next process would start a whole cap window afresh. Without a cap window it holds only
    /// when the last requests went out, which no restart after a power loss comes soon enough to
    /// need, so it is not synced (a fleet writes it before every request of every organization).
    pub(crate) fn write(&self, path: &Path) -> Result<(), OutError> {
        write_atomic_with(path, &serde_json::to_vec(self).unwrap_or_default(), !self.window_ms.is_empty())
    }
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
}
