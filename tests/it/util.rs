//! Helpers: an emulator on its own runtime, clients, raw HTTP, and the real binary.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use creator_etl::api::{ApiKey, Client, ClientConfig, PacingConfig, RetryPolicy};
use creator_etl::emulator::{Emulator, EmulatorConfig, EmulatorState};

pub const FULL_KEY: &str = "emu-full-key";
pub const READ_ONLY_KEY: &str = "emu-read-only-key";
pub const OTHER_ORG_KEY: &str = "emu-other-org-key";

/// An emulator serving on 127.0.0.1:0 from a runtime of its own, so that synchronous tests can
/// run the binary against it. Dropping it stops the server.
pub struct TestEmu {
    pub base_url: String,
    pub state: Arc<EmulatorState>,
    emu: Option<Emulator>,
    rt: Option<tokio::runtime::Runtime>,
}

impl TestEmu {
    pub fn start(config: EmulatorConfig) -> TestEmu {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let emu = rt.block_on(Emulator::start(&config, "127.0.0.1:0".parse().unwrap())).unwrap();
        TestEmu { base_url: emu.base_url.clone(), state: emu.state.clone(), emu: Some(emu), rt: Some(rt) }
    }
}

impl Drop for TestEmu {
    fn drop(&mut self) {
        drop(self.emu.take());
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Starts an emulator on the current runtime (async tests).
pub async fn emulator(config: EmulatorConfig) -> Emulator {
    Emulator::start(&config, "127.0.0.1:0".parse().unwrap()).await.unwrap()
}

/// A client with the given key and pacing, and quick retries.
pub fn client(base_url: &str, key: &str, pacing: PacingConfig) -> Client {
    client_with(base_url, key, pacing, 4)
}

pub fn client_with(base_url: &str, key: &str, pacing: PacingConfig, max_attempts: u32) -> Client {
    let mut cfg = ClientConfig::new(base_url.parse().unwrap(), ApiKey::new(key, "test").unwrap());
    cfg.pacing = pacing;
    cfg.retry = RetryPolicy {
        max_attempts,
        base_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(200),
        ..RetryPolicy::default()
    };
    cfg.request_timeout = Duration::from_secs(5);
    Client::new(cfg).unwrap()
}

/// Pacing that never waits.
pub fn fast() -> PacingConfig {
    PacingConfig::unlimited()
}

/// One raw HTTP request, bypassing the client: what any HTTP client would see.
pub async fn raw(method: &str, url: &str, key: Option<&str>, body: Option<&str>) -> (u16, serde_json::Value) {
    let http = reqwest::Client::new();
    let mut req = http.request(method.parse().unwrap(), url);
    if let Some(k) = key {
        req = req.header("Authorization", format!("Bearer {k}"));
    }
    if let Some(b) = body {
        req = req.header("Content-Type", "application/json").body(b.to_owned());
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)))
}

/// Runs the real binary in `dir` with a clean API environment plus `envs`.
pub fn run_bin(dir: &Path, args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_creator-etl"));
    cmd.current_dir(dir).args(args);
    for var in ["CREATOR_API_KEY", "CREATOR_API_BASE_URL", "CREATOR_ETL_OUT", "CREATOR_ETL_LAKE", "RUST_LOG"] {
        cmd.env_remove(var);
    }
    cmd.env("CREATOR_MIN_INTERVAL_MS", "0").env("CREATOR_HOURLY_CAP", "0");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// Starts the real binary in the background with the full key, no pacing and its output
/// discarded: a process for a test to kill.
pub fn spawn_bin(args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_creator-etl"))
        .args(args)
        .env("CREATOR_API_KEY", FULL_KEY)
        .env("CREATOR_MIN_INTERVAL_MS", "0")
        .env("CREATOR_HOURLY_CAP", "0")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// Formats a finished process for assertion messages.
pub fn show(args: &[&str], out: &Output) -> String {
    format!(
        "args: {args:?}\nstatus: {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Asserts the exit code, printing everything on failure.
#[track_caller]
pub fn assert_exit(args: &[&str], out: &Output, code: i32) {
    assert_eq!(out.status.code(), Some(code), "{}", show(args, out));
}
