//! The API key: read from the environment or a file, and never shown.
//!
//! [`ApiKey`] has no `Display`, and its `Debug` prints a fixed placeholder, so a key cannot reach
//! a log line, an error or a report by accident. The only way to the text is
//! [`ApiKey::expose`], used when building the `Authorization` header (which is itself marked
//! sensitive, so HTTP-level debug output redacts it too).

use std::fmt;
use std::path::Path;

use thiserror::Error;

/// Environment variable that holds the key.
pub const API_KEY_ENV: &str = "CREATOR_API_KEY";

#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ApiKey(String);

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// Why no usable key could be read. Messages name the source, never the key.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum KeyError {
    #[error("no API key: set `CREATOR_API_KEY` or pass `--api-key-file PATH`")]
    Missing,
    #[error("cannot read API key file `{path}`: {reason}")]
    Unreadable { path: String, reason: String },
    #[error("API key from {source_name} is empty")]
    Empty { source_name: String },
    #[error("API key from {source_name} contains whitespace or control characters")]
    Malformed { source_name: String },
}

impl ApiKey {
    /// Validates a key's text: non-empty after trimming, no inner whitespace or control bytes.
    pub fn new(raw: &str, source_name: &str) -> Result<Self, KeyError> {
        let key = raw.trim();
        if key.is_empty() {
            return Err(KeyError::Empty { source_name: source_name.into() });
        }
        if key.chars().any(|c| c.is_whitespace() || c.is_control()) || !key.is_ascii() {
            return Err(KeyError::Malformed { source_name: source_name.into() });
        }
        Ok(ApiKey(key.to_owned()))
    }

    /// Reads the key: `--api-key-file` wins over `CREATOR_API_KEY` when both are given.
    pub fn resolve(file: Option<&Path>, env_value: Option<&str>) -> Result<Self, KeyError> {
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| KeyError::Unreadable { path: path.display().to_string(), reason: e.kind().to_string() })?;
            return ApiKey::new(&text, &format!("file `{}`", path.display()));
        }
        match env_value {
            Some(v) => ApiKey::new(v, &format!("`{API_KEY_ENV}`")),
            None => Err(KeyError::Missing),
        }
    }

    /// The key's text, for the `Authorization` header only.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// A short, non-reversible tag that tells keys apart in reports, pacing files and the
    /// action journal.
    pub fn fingerprint(&self) -> String {
        // 32 bits of FNV-1a: stable across runs and platforms, and far too few to recover a key.
        format!("key-{:08x}", fnv1a(self.0.as_bytes()))
    }
}

/// FNV-1a, 32 bits: a stable hash for names and tags (not for security).
pub(crate) fn fnv1a(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_key() {
        let k = ApiKey::new("sekrit-123", "test").unwrap();
        assert!(!format!("{k:?}").contains("sekrit"));
        assert!(!k.fingerprint().contains("sekrit"));
    }

    #[test]
    fn file_wins_and_is_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("key");
        std::fs::write(&p, "from-file\n").unwrap();
        assert_eq!(ApiKey::resolve(Some(&p), Some("from-env")).unwrap().expose(), "from-file");
        assert_eq!(ApiKey::resolve(None, Some(" from-env ")).unwrap().expose(), "from-env");
        assert_eq!(ApiKey::resolve(None, None), Err(KeyError::Missing));
        assert!(matches!(ApiKey::resolve(None, Some("a b")), Err(KeyError::Malformed { .. })));
        assert!(matches!(ApiKey::resolve(None, Some("  ")), Err(KeyError::Empty { .. })));
        let missing = dir.path().join("nope");
        assert!(matches!(ApiKey::resolve(Some(&missing), None), Err(KeyError::Unreadable { .. })));
    }
}
