//! How a failure is told: every command's exit code, documented in the manual, in one place,
//! and an error with its causes.

/// Success.
pub const OK: u8 = 0;
/// The run failed.
pub const FAILED: u8 = 1;
/// Usage, configuration or input-file error; nothing was sent.
pub const USAGE: u8 = 2;
/// Finished, but some action rows failed.
pub const ACTIONS_FAILED: u8 = 3;
/// The API key was rejected (401) or lacks rights (403).
pub const AUTH: u8 = 4;
/// Another run holds the lock on `--out`, or another process holds the writer's warehouse.
pub const LOCKED: u8 = 5;
/// A fleet run in which some organizations failed and others completed.
pub const SOME_FAILED: u8 = 6;
/// `report`: the pages are written, and some organization is not fresh: failed, interrupted,
/// unknown, stale or never synced.
pub const NOT_FRESH: u8 = 7;
/// Interrupted by Ctrl-C or SIGTERM; progress is saved and a rerun resumes.
pub const INTERRUPTED: u8 = 130;

/// An error with its causes, `a: b: c`, each said once (a cause whose text the message already
/// holds is not repeated).
pub fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}
