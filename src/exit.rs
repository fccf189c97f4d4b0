//! Exit codes, documented in the README: every command's, in one place.

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
