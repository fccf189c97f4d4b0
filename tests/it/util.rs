//! Helpers: an emulator on its own runtime, clients, raw HTTP, the real binary, and reading back
//! what it wrote (its report, the warehouse, the files under `--out`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use creator_etl::api::models::SaleStatus;
use creator_etl::api::{ApiKey, Client, ClientConfig, PacingConfig, RetryPolicy};
use creator_etl::emulator::{Emulator, EmulatorConfig, EmulatorState, MAIN_ORG};
use serde::de::DeserializeOwned;

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

/// The main organization's sales that an update can correct (not storefront, not cancelled),
/// in the emulator's order.
pub fn updatable_sales(emu: &TestEmu) -> Vec<i64> {
    emu.state
        .sales()
        .into_iter()
        .filter(|s| s.org == MAIN_ORG && s.updatable() && s.status != SaleStatus::Cancelled)
        .map(|s| s.id)
        .collect()
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

/// The real binary, run in a directory with the arguments in the order given. Its environment
/// is clean of what a developer's shell may hold (API key, base URL, `--out`, lake, log level,
/// the allocator's `MIMALLOC_` settings), with pacing off (`CREATOR_MIN_INTERVAL_MS=0`,
/// `CREATOR_HOURLY_CAP=0`); `key` and `env` add variables on top.
///
/// `Bin::new(dir).args(["extract"]).emu(&emu).out(&out).key(FULL_KEY).expect(0)`
pub struct Bin {
    dir: PathBuf,
    args: Vec<String>,
    envs: Vec<(String, String)>,
}

impl Bin {
    pub fn new(dir: &Path) -> Bin {
        Bin { dir: dir.to_owned(), args: vec![], envs: vec![] }
    }

    /// Appends arguments.
    pub fn args<S: AsRef<str>>(mut self, args: impl IntoIterator<Item = S>) -> Bin {
        self.args.extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Appends `--base-url` of the emulator.
    pub fn emu(self, emu: &TestEmu) -> Bin {
        let url = emu.base_url.clone();
        self.args(["--base-url", &url])
    }

    /// Appends `--out DIR`.
    pub fn out(self, out: &Path) -> Bin {
        self.args(["--out", out.to_str().unwrap()])
    }

    /// Sets `CREATOR_API_KEY`.
    pub fn key(self, key: &str) -> Bin {
        self.env("CREATOR_API_KEY", key)
    }

    /// Sets an environment variable.
    pub fn env(mut self, k: &str, v: &str) -> Bin {
        self.envs.push((k.to_owned(), v.to_owned()));
        self
    }

    /// Sets environment variables.
    pub fn envs<K: AsRef<str>, V: AsRef<str>>(self, envs: impl IntoIterator<Item = (K, V)>) -> Bin {
        envs.into_iter().fold(self, |b, (k, v)| b.env(k.as_ref(), v.as_ref()))
    }

    /// The arguments, as `show` and `assert_exit` take them.
    pub fn argv(&self) -> Vec<&str> {
        self.args.iter().map(String::as_str).collect()
    }

    /// Runs the binary to its end.
    pub fn run(&self) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_creator-etl"));
        cmd.current_dir(&self.dir).args(&self.args);
        for var in ["CREATOR_API_KEY", "CREATOR_API_BASE_URL", "CREATOR_ETL_OUT", "CREATOR_ETL_LAKE", "RUST_LOG"] {
            cmd.env_remove(var);
        }
        // The allocator's settings (mimalloc reads its names in any case): the defaults unless a
        // test sets them.
        for (var, _) in std::env::vars_os() {
            if var.to_str().is_some_and(|v| v.to_ascii_uppercase().starts_with("MIMALLOC_")) {
                cmd.env_remove(var);
            }
        }
        cmd.env("CREATOR_MIN_INTERVAL_MS", "0").env("CREATOR_HOURLY_CAP", "0");
        cmd.envs(self.envs.iter().map(|(k, v)| (k, v)));
        cmd.output().unwrap()
    }

    /// Runs the binary and asserts its exit code, printing everything on failure.
    #[track_caller]
    pub fn expect(&self, code: i32) -> Output {
        let o = self.run();
        assert_exit(&self.argv(), &o, code);
        o
    }
}

/// Runs the real binary in `dir` with a clean API environment plus `envs` (see [`Bin`]).
pub fn run_bin(dir: &Path, args: &[&str], envs: &[(&str, &str)]) -> Output {
    Bin::new(dir).args(args).envs(envs.iter().copied()).run()
}

/// The JSON report a command printed on stdout; panics with the whole output when it is not.
#[track_caller]
pub fn report<T: DeserializeOwned>(o: &Output) -> T {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("report on stdout ({e}):\n{}", show(&[], o)))
}

/// The DuckDB warehouse of an `--out` directory.
pub fn db(out: &Path) -> duckdb::Connection {
    duckdb::Connection::open(out.join("warehouse.duckdb")).unwrap_or_else(|e| panic!("{}: {e}", out.display()))
}

/// The one integer a query answers (a count, say).
#[track_caller]
pub fn count(c: &duckdb::Connection, sql: &str) -> i64 {
    c.query_row(sql, [], |r| r.get(0)).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Every file under `dir`, sorted, not following symbolic links to directories.
pub fn files(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                walk(&p, found);
            } else if p.is_file() {
                found.push(p);
            }
        }
    }
    let mut found = vec![];
    walk(dir, &mut found);
    found.sort();
    found
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
