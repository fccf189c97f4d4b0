//! One file per subcommand: each turns its arguments into a config (reading the files, keys and
//! environment it names), calls the library, and prints. The arguments every command shares are
//! here.

pub mod actions;
pub mod check;
pub mod demo;
pub mod emulator;
pub mod extract;
pub mod fleet;
pub mod load;
pub mod query;
pub mod report;
pub mod run;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::api::{
    ApiError, ApiKey, Client, ClientConfig, ClientSettings, PacingConfig, API_KEY_ENV, DEFAULT_BASE_URL,
    DEFAULT_CAP_WINDOW, DEFAULT_DEADLINE, DEFAULT_HOURLY_CAP, DEFAULT_MAX_ATTEMPTS, DEFAULT_MIN_INTERVAL,
    DEFAULT_REQUEST_TIMEOUT,
};
use crate::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Options every command accepts, before or after its name.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Base URL of the API, ending in the version segment `v1`
    #[arg(long, global = true, env = "CREATOR_API_BASE_URL", default_value = DEFAULT_BASE_URL, value_name = "URL")]
    pub base_url: String,

    /// Read the API key from this file instead of `CREATOR_API_KEY`
    #[arg(long, global = true, value_name = "PATH")]
    pub api_key_file: Option<PathBuf>,

    /// Output directory: raw landing, Parquet, warehouse, run reports
    #[arg(long, global = true, env = "CREATOR_ETL_OUT", default_value = "./data", value_name = "DIR")]
    pub out: PathBuf,

    /// Log format on stderr
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// More log detail than the default `info` (-v debug, -vv trace); `RUST_LOG` overrides
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Less log detail than the default `info` (-q warnings only, -qq errors only)
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "verbose")]
    pub quiet: u8,

    /// Rate policy: minimum milliseconds between two requests with the same key (0: none).
    /// The client keeps to it; the emulator enforces it
    #[arg(long, global = true, env = "CREATOR_MIN_INTERVAL_MS", default_value_t = DEFAULT_MIN_INTERVAL.as_millis() as u64, value_name = "MS")]
    pub min_interval_ms: u64,

    /// Rate policy: at most N requests per key in each cap window (0: no cap)
    #[arg(long, global = true, env = "CREATOR_HOURLY_CAP", default_value_t = DEFAULT_HOURLY_CAP, value_name = "N")]
    pub hourly_cap: u32,

    /// Rate policy: length of the cap window in seconds
    #[arg(long, global = true, env = "CREATOR_CAP_WINDOW_S", default_value_t = DEFAULT_CAP_WINDOW.as_secs(), value_name = "S")]
    pub cap_window_s: u64,

    /// Attempts per request, the first included, before a retryable failure is final
    #[arg(long, global = true, default_value_t = DEFAULT_MAX_ATTEMPTS, value_name = "N")]
    pub max_attempts: u32,

    /// No retry starts once this many seconds have passed since a request's first attempt (the
    /// default covers one hourly reset of the cap)
    #[arg(long, global = true, default_value_t = DEFAULT_DEADLINE.as_secs(), value_name = "S")]
    pub deadline_s: u64,

    /// Timeout of one HTTP attempt, in seconds
    #[arg(long, global = true, default_value_t = DEFAULT_REQUEST_TIMEOUT.as_secs(), value_name = "S")]
    pub timeout_s: u64,

    /// Allow an `http://` base URL to a host other than this machine (the key would travel in
    /// clear text)
    #[arg(long, global = true)]
    pub allow_insecure_http: bool,
}

/// The client and the stop of a command that reads: Ctrl-C or SIGTERM ends the client's waits
/// and starts no new request, and the stop reaches the crawl once the requests in flight have
/// answered and landed ([`Client::stop_after_in_flight`]).
pub(crate) fn stop_after_in_flight(client: Client) -> (Client, CancellationToken) {
    let signal = crate::stop::stop_signal();
    let stop = client.stop_after_in_flight(signal.clone());
    (client.with_stop(signal), stop)
}

/// A duration flag's value, or a problem naming the flag.
pub(crate) fn duration_flag(flag: &str, text: &str, problems: &mut Vec<String>) -> Option<Duration> {
    let parsed = parse_duration(text);
    if parsed.is_none() {
        problems.push(format!("`{flag}` `{text}` is not a duration such as `90s`, `15m` or `2h`"));
    }
    parsed
}

/// Parses a positive duration: `90` (seconds), or a number with a unit, as `90s`, `15m`, `2h`
/// (and humantime's other units and forms, such as `1h 30m`).
pub(crate) fn parse_duration(text: &str) -> Option<Duration> {
    parse_duration_or_zero(text).filter(|d| !d.is_zero())
}

/// [`parse_duration`], zero allowed (`0`, `0s`).
pub(crate) fn parse_duration_or_zero(text: &str) -> Option<Duration> {
    let t = text.trim();
    match t.parse::<u64>() {
        Ok(secs) => Some(Duration::from_secs(secs)),
        Err(_) => humantime::parse_duration(t).ok(),
    }
}

/// Both validations, with every problem of either reported together when both are usage
/// problems (exit 2: bad flags, a missing key, an invalid input file).
pub fn validate_both<A, B>(a: Result<A, Error>, b: Result<B, Error>) -> Result<(A, B), Error> {
    let problems = |e: Error| match e {
        Error::Config(p) => p,
        other => vec![other.report()],
    };
    match (a, b) {
        (Ok(a), Ok(b)) => Ok((a, b)),
        (Err(a), Err(b)) if a.exit_code() == crate::exit::USAGE && b.exit_code() == crate::exit::USAGE => {
            let mut p = problems(a);
            p.extend(problems(b));
            Err(Error::Config(p))
        }
        (Err(e), _) | (_, Err(e)) => Err(e),
    }
}

impl GlobalArgs {
    pub fn pacing(&self) -> PacingConfig {
        PacingConfig {
            min_interval: Duration::from_millis(self.min_interval_ms),
            hourly_cap: (self.hourly_cap > 0).then_some(self.hourly_cap),
            cap_window: Duration::from_secs(self.cap_window_s),
            wait_for_answers: false,
        }
    }

    pub(crate) fn pacing_problems(&self, problems: &mut Vec<String>) {
        problems.extend(crate::api::pacing_problem(&self.pacing()));
    }

    /// The client's settings as given, before they are checked.
    pub fn client_settings(&self) -> ClientSettings {
        ClientSettings {
            base_url: self.base_url.clone(),
            allow_insecure_http: self.allow_insecure_http,
            pacing: self.pacing(),
            max_attempts: self.max_attempts,
            deadline: Duration::from_secs(self.deadline_s),
            request_timeout: Duration::from_secs(self.timeout_s),
        }
    }

    /// Validates the client's settings: base URL, the key (from `--api-key-file` or
    /// `CREATOR_API_KEY`), pacing, retries.
    pub fn client_config(&self) -> Result<ClientConfig, Error> {
        let env_key = std::env::var(API_KEY_ENV).ok();
        let key = ApiKey::resolve(self.api_key_file.as_deref(), env_key.as_deref()).map_err(|e| e.to_string());
        self.client_settings().config("`--base-url`", key).map_err(Error::Config)
    }
}

pub(crate) fn print_json<T: Serialize>(value: &T) -> Result<(), Error> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|e| Error::Api(ApiError::InvalidRequest(format!("cannot encode the report: {e}"))))?;
    text.push('\n');
    print_text(&text)
}

/// Writes data to stdout, where only data and reports go.
pub(crate) fn print_text(text: &str) -> Result<(), Error> {
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .map_err(|source| Error::Io { context: "cannot write to stdout".into(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_reconcile_interval_flag_is_the_default() {
        let flag = parse_duration(crate::extract::DEFAULT_RECONCILE_EVERY_FLAG);
        assert_eq!(flag, Some(crate::extract::DEFAULT_RECONCILE_EVERY));
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("90"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("15m"), Some(Duration::from_secs(900)));
        assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1h 30m"), Some(Duration::from_secs(5400)));
        for bad in ["0s", "0", "soon", "-5m", "", "2 fortnights"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}

/// The HTML report a command wrote after its sync (`run`, `fleet run`), or why it could not be
/// written: the sync's outcome and exit code stand either way.
#[derive(serde::Serialize)]
pub(crate) struct ReportNote {
    #[serde(skip_serializing_if = "Option::is_none")]
    path: Option<std::path::PathBuf>,
    /// One organization's page: its health.
    #[serde(skip_serializing_if = "Option::is_none")]
    health: Option<crate::report::HealthState>,
    /// Several organizations' pages: how many were made, and kept from the last report because
    /// their data and health state had not changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pages_made: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pages_kept: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// How long writing it took.
    duration_ms: u64,
    /// A Ctrl-C or SIGTERM stopped it ([`crate::Error::Interrupted`]).
    #[serde(skip)]
    pub(crate) interrupted: bool,
}

impl ReportNote {
    /// Writes the report `config` asks for, and says how it went.
    pub(crate) async fn write(config: crate::report::ReportConfig) -> ReportNote {
        let started = std::time::Instant::now();
        let written = crate::report::write(config).await;
        let duration_ms = started.elapsed().as_millis() as u64;
        match written {
            Ok(s) => {
                tracing::info!(path = %s.path.display(), pages_made = s.pages_made, pages_kept = s.pages_kept, duration_ms, "report written");
                let many = s.pages.len() > 1 || s.pages.first().is_some_and(|p| p.organization.is_some());
                ReportNote {
                    health: if many { None } else { s.pages.first().map(|p| p.health) },
                    pages_made: many.then_some(s.pages_made),
                    pages_kept: many.then_some(s.pages_kept),
                    path: Some(s.path),
                    error: None,
                    duration_ms,
                    interrupted: false,
                }
            }
            Err(e) => {
                let error = e.report();
                let interrupted = matches!(e, Error::Interrupted(_));
                match interrupted {
                    true => tracing::warn!(%error, "the HTML report was stopped; the data is loaded"),
                    false => tracing::warn!(%error, "the HTML report could not be written; the data is loaded"),
                }
                ReportNote {
                    path: None,
                    health: None,
                    pages_made: None,
                    pages_kept: None,
                    error: Some(error),
                    duration_ms,
                    interrupted,
                }
            }
        }
    }
}
