//! Command-line interface: the clap definitions (their doc comments are the `--help` text), and
//! their validation into typed configuration before any I/O. Validation reports every problem at
//! once.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use chrono::NaiveDate;
use clap::{Args, Parser, Subcommand, ValueEnum};
use reqwest::Url;

use crate::action::journal::Scope;
use crate::action::{ActionConfig, ActionKind, Reviewed};
use crate::api::models::ApplicationStatus;
use crate::api::{ApiKey, ClientConfig, PacingConfig, RetryPolicy, API_KEY_ENV, DEFAULT_BASE_URL};
use crate::emulator::{EmulatorConfig, FaultConfig, GenConfig, Keys, RatePolicy};
use crate::extract::ExtractConfig;
use crate::load::LoadConfig;
use crate::out::OutDir;
use crate::query::lake::LakeSource;
use crate::query::{Format, QueryConfig, Source};
use crate::Error;

#[derive(Debug, Parser)]
#[command(
    name = "creator-etl",
    version,
    about = "Extract a creator-marketing service's data into Parquet and DuckDB, and replay reviewed corrections",
    after_help = "The API key is read from the CREATOR_API_KEY environment variable or --api-key-file, never from a flag.\nExit codes: 0 ok, 1 failed, 2 usage/config/input error, 3 some action rows failed, 4 key rejected (401/403), 5 --out locked, 130 interrupted."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

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

    /// More log detail (-v debug, -vv trace); `RUST_LOG` overrides
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,

    /// Less log detail (-q warnings only, -qq errors only)
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "verbose")]
    pub quiet: u8,

    /// Rate policy: minimum milliseconds between two requests with the same key (0: none).
    /// The client keeps to it; the emulator enforces it
    #[arg(long, global = true, env = "CREATOR_MIN_INTERVAL_MS", default_value_t = 2000, value_name = "MS")]
    pub min_interval_ms: u64,

    /// Rate policy: at most N requests per key in each cap window (0: no cap)
    #[arg(long, global = true, env = "CREATOR_HOURLY_CAP", default_value_t = 40, value_name = "N")]
    pub hourly_cap: u32,

    /// Rate policy: length of the cap window in seconds
    #[arg(long, global = true, env = "CREATOR_CAP_WINDOW_S", default_value_t = 3600, value_name = "S")]
    pub cap_window_s: u64,

    /// Attempts per request, the first included, before a retryable failure is final
    #[arg(long, global = true, default_value_t = 6, value_name = "N")]
    pub max_attempts: u32,

    /// No retry starts once this many seconds have passed since a request's first attempt
    #[arg(long, global = true, default_value_t = 3900, value_name = "S")]
    pub deadline_s: u64,

    /// Timeout of one HTTP attempt, in seconds
    #[arg(long, global = true, default_value_t = 60, value_name = "S")]
    pub timeout_s: u64,

    /// Allow an `http://` base URL to a host other than this machine (the key would travel in
    /// clear text)
    #[arg(long, global = true)]
    pub allow_insecure_http: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check the API key and connectivity with one request; prints a JSON report
    Check,
    /// Serve the emulator of the API on this machine; prints its base URL on stdout
    Emulator(EmulatorArgs),
    /// Crawl every application and the content statistics into the raw landing; resumes an
    /// unfinished run; prints the run report on stdout
    Extract(ExtractArgs),
    /// Transform a raw run and load it into the DuckDB warehouse and Parquet, without calling
    /// the API; prints the load report on stdout
    Load(LoadArgs),
    /// Extract, transform and load in one go, then optionally apply reviewed actions: the
    /// command to schedule
    Run(RunArgs),
    /// Replay approved rows of a reviewed CSV (sale corrections, payout markings), exactly once
    #[command(subcommand)]
    Actions(ActionsCommand),
    /// Run a named query (`queries/`) or a SQL file against the warehouse, read-only
    Query(QueryArgs),
    /// The whole product on this machine: an in-process emulator, `run`, the example actions,
    /// and a summary (writes only into an empty directory or an earlier demo's)
    Demo(DemoArgs),
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Applications of the emulated organization
    #[arg(long, default_value_t = 5000)]
    pub applications: usize,
    /// Seed of the emulated data (the example reviewed CSV matches seed 42)
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

#[derive(Debug, Args)]
pub struct QueryArgs {
    /// A named query (wow_latest, weekly_trend, cohort_acceptance, cohort_by_month, pending_queue,
    /// status_changes, action_outcomes, run_health) or the path of a .sql file
    #[arg(value_name = "NAME|FILE")]
    pub query: String,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// A parameter the query declares, as NAME=VALUE (repeatable), e.g. `--param days=30`
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// Query this Delta Lake's current snapshot (`file:///path` or `s3://bucket/prefix`) instead
    /// of the warehouse; an `s3://` lake's files are cached under `OUT/lake-cache/`
    #[arg(long, env = "CREATOR_ETL_LAKE", value_name = "URL")]
    pub lake: Option<String>,
    /// With `--lake`: only this organization's rows, with the warehouse's columns
    #[arg(long, value_name = "NAME")]
    pub org: Option<String>,
}

impl QueryArgs {
    pub fn config(&self, global: &GlobalArgs) -> Result<QueryConfig, Error> {
        let source = match (&self.lake, &self.org) {
            (None, None) => Source::Warehouse(global.out.join("warehouse.duckdb")),
            (None, Some(_)) => {
                return Err(Error::Config(
                    vec!["`--org` picks an organization in a lake; it goes with `--lake`".into()],
                ))
            }
            (Some(url), org) => {
                let mut problems = vec![];
                match checked_lake(url, org.as_deref(), &mut problems) {
                    Some(url) if problems.is_empty() => {
                        Source::Lake(LakeSource { url, org: org.clone(), cache: global.out.join("lake-cache") })
                    }
                    _ => return Err(Error::Config(problems)),
                }
            }
        };
        Ok(QueryConfig::new(source, &self.query, &self.params, self.format)?)
    }
}

/// Checks `--lake URL` and, when given, `--org NAME`: the URL as the lake code takes it, or the
/// problems added.
fn checked_lake(url: &str, org: Option<&str>, problems: &mut Vec<String>) -> Option<String> {
    if let Some(org) = org.filter(|o| !crate::load::lake::valid_org(o)) {
        problems.push(format!(
            "`--org` `{org}` is not a slug: lowercase letters, digits, `-` and `_`, at most 63 characters"
        ));
    }
    lake_url(url).map_err(|e| problems.push(e)).ok()
}

#[derive(Debug, Subcommand)]
pub enum ActionsCommand {
    /// Validate the whole file and print what `apply` would do; sends nothing
    Plan(ActionsArgs),
    /// Validate the whole file, then send its approved rows once each; prints a JSON report on
    /// stdout and a summary on stderr
    Apply(ActionsArgs),
}

#[derive(Debug, Args)]
pub struct ActionsArgs {
    /// The reviewed CSV
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    #[command(flatten)]
    pub guards: ActionGuards,
}

/// Limits on what an actions run may send.
#[derive(Debug, Args)]
pub struct ActionGuards {
    /// Refuse (sending nothing) when more than N rows would be sent
    #[arg(long, value_name = "N")]
    pub max_rows: Option<usize>,
    /// Send only rows of this action
    #[arg(long, value_enum, value_name = "ACTION")]
    pub only: Option<ActionKind>,
    /// Send again rows that failed for good (404, 422) or ended in doubt in an earlier run
    #[arg(long)]
    pub retry_failed: bool,
}

impl ActionGuards {
    /// Validates an actions request: the guards and the whole file, before any I/O elsewhere.
    pub fn config(&self, file: &std::path::Path, global: &GlobalArgs) -> Result<(ActionConfig, Reviewed), Error> {
        if self.max_rows == Some(0) {
            return Err(Error::Config(vec!["`--max-rows` must be at least 1".into()]));
        }
        let reviewed = crate::action::read(file)?;
        // The journal's scope: the service and the key's fingerprint. Without a key (a plan), the
        // scope is the service alone; `apply` reports the missing key itself.
        let service = Url::parse(&global.base_url).map_or_else(|_| global.base_url.clone(), |u| u.to_string());
        let key = ApiKey::resolve(global.api_key_file.as_deref(), std::env::var(API_KEY_ENV).ok().as_deref()).ok();
        let config = ActionConfig {
            out: OutDir::new(&global.out),
            file: file.to_path_buf(),
            max_rows: self.max_rows,
            only: self.only,
            retry_failed: self.retry_failed,
            scope: Scope::new(&service, key.map(|k| k.fingerprint())),
        };
        Ok((config, reviewed))
    }
}

#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Raw run to load [default: the newest run that finished extracting]
    #[arg(long, value_name = "RUN_ID")]
    pub from_raw: Option<String>,
    #[command(flatten)]
    pub options: LoadOptions,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub extract: ExtractArgs,
    #[command(flatten)]
    pub options: LoadOptions,
    /// After the load, apply this reviewed CSV (validated before anything is fetched)
    #[arg(long, value_name = "FILE")]
    pub actions: Option<PathBuf>,
    #[command(flatten)]
    pub guards: ActionGuards,
}

#[derive(Debug, Args)]
pub struct LoadOptions {
    /// Bucket edges of monthly posts for `post_count_cohorts`, comma-separated, increasing
    #[arg(long, value_delimiter = ',', default_value = "1,5,13,31", value_name = "LIST")]
    pub cohort_edges: Vec<i64>,
    /// Fail the load when a data-quality check finds a problem (otherwise it is recorded)
    #[arg(long)]
    pub strict: bool,
    /// Seconds a Parquet version is kept after a newer one replaces it, for readers that listed
    /// its files just before
    #[arg(long, default_value_t = 3600, value_name = "S")]
    pub parquet_grace_s: u64,
    /// Also write every table to this Delta Lake (`file:///path` or `s3://bucket/prefix`),
    /// replacing only `--org`'s rows
    #[arg(long, env = "CREATOR_ETL_LAKE", value_name = "URL")]
    pub lake: Option<String>,
    /// The organization whose data this is, a slug (`acme`, `brand-2`); required with `--lake`
    #[arg(long, value_name = "NAME")]
    pub org: Option<String>,
}

impl LoadOptions {
    pub fn config(&self, global: &GlobalArgs) -> Result<LoadConfig, Error> {
        let mut problems = vec![];
        if let Err(e) = crate::transform::buckets(&self.cohort_edges) {
            problems.push(format!("`--cohort-edges`: {e}"));
        }
        let lake = match (&self.lake, &self.org) {
            (None, None) => None,
            (None, Some(_)) => {
                problems.push("`--org` names the organization in a lake; it goes with `--lake`".into());
                None
            }
            (Some(_), None) => {
                problems.push("`--lake` needs `--org NAME`: the organization whose rows this load replaces".into());
                None
            }
            (Some(url), Some(org)) => checked_lake(url, Some(org), &mut problems)
                .map(|url| crate::load::lake::LakeConfig { url, org: org.clone() }),
        };
        if !problems.is_empty() {
            return Err(Error::Config(problems));
        }
        Ok(LoadConfig {
            out: OutDir::new(&global.out),
            cohort_edges: self.cohort_edges.clone(),
            strict: self.strict,
            parquet_grace: Duration::from_secs(self.parquet_grace_s),
            lake,
        })
    }
}

#[derive(Debug, Args)]
pub struct ExtractArgs {
    /// Statuses to crawl, comma-separated [default: all six]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub statuses: Vec<String>,
    /// Only applications to this campaign
    #[arg(long, value_name = "ID")]
    pub campaign_id: Option<i64>,
    /// Requests in flight at once; the pacer still spaces their starts
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub concurrency: usize,
    /// Crawls of a status while its rows disagree with the service's count (drift)
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub max_passes: u32,
    /// First day of content statistics (YYYY-MM-DD, UTC) [default: last extracted day minus
    /// --lookback-days, or --since-days ago on the first run]
    #[arg(long, value_name = "DATE")]
    pub from: Option<String>,
    /// Last day of content statistics (YYYY-MM-DD, UTC) [default: today; later days are lowered to today]
    #[arg(long, value_name = "DATE")]
    pub to: Option<String>,
    /// Days per content request
    #[arg(long, default_value_t = 90, value_name = "N")]
    pub window_days: u32,
    /// Days before the last extracted day that are fetched again, because recent days still change
    #[arg(long, default_value_t = 7, value_name = "N")]
    pub lookback_days: u32,
    /// How far back the first run goes
    #[arg(long, default_value_t = 365, value_name = "N")]
    pub since_days: u32,
    /// Print the plan after page 1 of each status (at most one request per status), then stop
    #[arg(long)]
    pub plan_only: bool,
    /// After a completed run, keep only the newest N raw landings
    #[arg(long, value_name = "N")]
    pub keep_raw: Option<usize>,
    /// Start a new run even if an unfinished one could be resumed
    #[arg(long)]
    pub fresh: bool,
}

fn parse_day(flag: &str, value: &Option<String>, problems: &mut Vec<String>) -> Option<NaiveDate> {
    let v = value.as_ref()?;
    match NaiveDate::parse_from_str(v, "%Y-%m-%d") {
        Ok(d) => Some(d),
        Err(_) => {
            problems.push(format!("`{flag}` `{v}` is not a YYYY-MM-DD date"));
            None
        }
    }
}

impl ExtractArgs {
    /// Validates the extract request.
    pub fn config(&self, global: &GlobalArgs) -> Result<ExtractConfig, Error> {
        let mut problems = vec![];
        let statuses = if self.statuses.is_empty() {
            ApplicationStatus::KNOWN.to_vec()
        } else {
            let mut v = vec![];
            for s in &self.statuses {
                let parsed = ApplicationStatus::parse(s.trim());
                if !parsed.is_known() {
                    problems.push(format!(
                        "`--statuses`: `{s}` is not a status; allowed: {}",
                        ApplicationStatus::known_list()
                    ));
                } else if !v.contains(&parsed) {
                    v.push(parsed);
                }
            }
            v
        };
        if !(1..=64).contains(&self.concurrency) {
            problems.push("`--concurrency` must be between 1 and 64".into());
        }
        if !(1..=10).contains(&self.max_passes) {
            problems.push("`--max-passes` must be between 1 and 10".into());
        }
        if !(1..=3650).contains(&self.window_days) {
            problems.push("`--window-days` must be between 1 and 3650".into());
        }
        let from = parse_day("--from", &self.from, &mut problems);
        let to = parse_day("--to", &self.to, &mut problems);
        if let (Some(f), Some(t)) = (from, to) {
            if f > t {
                problems.push(format!("`--from` {f} is after `--to` {t}"));
            }
        }
        if self.keep_raw == Some(0) {
            problems.push("`--keep-raw` must be at least 1".into());
        }
        if !problems.is_empty() {
            return Err(Error::Config(problems));
        }
        Ok(ExtractConfig {
            out: OutDir::new(&global.out),
            statuses,
            campaign_id: self.campaign_id,
            concurrency: self.concurrency,
            max_passes: self.max_passes,
            from,
            to,
            window_days: self.window_days,
            lookback_days: self.lookback_days,
            since_days: self.since_days,
            plan_only: self.plan_only,
            keep_raw: self.keep_raw,
            fresh: self.fresh,
            progress_bars: global.quiet == 0,
        })
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

#[derive(Debug, Args)]
pub struct EmulatorArgs {
    /// Address to listen on
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Port to listen on (0 picks a free port)
    #[arg(long, default_value_t = 8787)]
    pub port: u16,
    /// Seed of the generated data
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Applications of the main organization
    #[arg(long, default_value_t = 2000)]
    pub applications: usize,
    /// Updatable affiliate sales of the main organization (ids from 7001)
    #[arg(long, default_value_t = 16)]
    pub sales: usize,
    /// The emulator's today (YYYY-MM-DD): the last day with statistics [default: today, UTC]
    #[arg(long, value_name = "DATE")]
    pub today: Option<String>,
    /// Years of daily statistics before today
    #[arg(long, default_value_t = 6)]
    pub content_years: u32,
    /// Probability (0 to 1) that a request gets an injected fault
    #[arg(long, default_value_t = 0.0)]
    pub fault_rate: f64,
    /// Delay of the "slow response" fault, in milliseconds
    #[arg(long, default_value_t = 1500)]
    pub slow_ms: u64,
    /// Latency added to every request, in milliseconds
    #[arg(long, default_value_t = 0)]
    pub latency_ms: u64,
    /// Add applications and move pending ones to other statuses while clients page
    #[arg(long)]
    pub drift: bool,
    /// Serve introspection routes (request counts, writes, violations, drift) under /__admin
    #[arg(long)]
    pub admin: bool,
    /// Full-access key of the main organization
    #[arg(long, default_value = "emu-full-key")]
    pub full_key: String,
    /// Read-only key of the main organization
    #[arg(long, default_value = "emu-read-only-key")]
    pub read_only_key: String,
    /// Full-access key of the other organization
    #[arg(long, default_value = "emu-other-org-key")]
    pub other_org_key: String,
}

impl GlobalArgs {
    fn pacing(&self) -> PacingConfig {
        PacingConfig {
            min_interval: Duration::from_millis(self.min_interval_ms),
            hourly_cap: (self.hourly_cap > 0).then_some(self.hourly_cap),
            cap_window: Duration::from_secs(self.cap_window_s),
        }
    }

    fn pacing_problems(&self, problems: &mut Vec<String>) {
        if self.cap_window_s == 0 {
            problems.push("`--cap-window-s` must be at least 1".into());
        }
    }

    /// Validates the client's settings: base URL, key, pacing, retries.
    pub fn client_config(&self) -> Result<ClientConfig, Error> {
        let mut problems = vec![];
        let url = match Url::parse(&self.base_url) {
            Ok(u) if !u.username().is_empty() || u.password().is_some() => {
                problems.push(
                    "`--base-url` must not hold a user name or password (`user:pass@`); the key is the only credential"
                        .into(),
                );
                None
            }
            Ok(u) if u.scheme() == "http" && u.host().is_some() && !is_loopback(&u) && !self.allow_insecure_http => {
                problems.push(format!(
                    "`--base-url` `{}` is plain http to another machine: the API key would travel in clear text; use https, or pass `--allow-insecure-http` if the network is trusted",
                    self.base_url
                ));
                None
            }
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Some(u),
            Ok(_) => {
                problems.push(format!("`--base-url` `{}` must be an http(s) URL with a host", self.base_url));
                None
            }
            Err(e) => {
                problems.push(format!("`--base-url` `{}` is not a URL: {e}", self.base_url));
                None
            }
        };
        let env_key = std::env::var(API_KEY_ENV).ok();
        let key = match ApiKey::resolve(self.api_key_file.as_deref(), env_key.as_deref()) {
            Ok(k) => Some(k),
            Err(e) => {
                problems.push(e.to_string());
                None
            }
        };
        self.pacing_problems(&mut problems);
        if self.max_attempts == 0 {
            problems.push("`--max-attempts` must be at least 1".into());
        }
        if self.timeout_s == 0 {
            problems.push("`--timeout-s` must be at least 1".into());
        }
        match (url, key) {
            (Some(url), Some(key)) if problems.is_empty() => Ok(ClientConfig {
                pacing: self.pacing(),
                retry: RetryPolicy {
                    max_attempts: self.max_attempts,
                    deadline: Duration::from_secs(self.deadline_s),
                    ..RetryPolicy::default()
                },
                request_timeout: Duration::from_secs(self.timeout_s),
                ..ClientConfig::new(url, key)
            }),
            _ => Err(Error::Config(problems)),
        }
    }
}

/// A lake URL, checked: `file:///absolute/path` or `s3://bucket/prefix`, without a trailing slash.
fn lake_url(raw: &str) -> Result<String, String> {
    let bad = |why: &str| format!("`--lake` `{raw}` {why}; use `file:///absolute/path` or `s3://bucket/prefix`");
    let url = Url::parse(raw).map_err(|e| bad(&format!("is not a URL ({e})")))?;
    match url.scheme() {
        "file" if url.path().len() > 1 && url.host_str().is_none_or(str::is_empty) => {}
        "s3" if url.host_str().is_some_and(|h| !h.is_empty()) => {}
        "file" | "s3" => return Err(bad("has no path or bucket")),
        other => return Err(bad(&format!("has the scheme `{other}`"))),
    }
    if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
        return Err(bad("must not carry a query, a fragment or credentials"));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// `localhost`, 127.0.0.0/8 or ::1: plain http there never leaves the machine.
fn is_loopback(u: &Url) -> bool {
    let Some(host) = u.host_str() else { return false };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

impl EmulatorArgs {
    /// Validates the emulator's settings; the global rate flags are the policy it enforces.
    pub fn config(&self, global: &GlobalArgs) -> Result<(EmulatorConfig, SocketAddr), Error> {
        let mut problems = vec![];
        let today = match &self.today {
            None => chrono::Utc::now().date_naive(),
            Some(s) => NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap_or_else(|_| {
                problems.push(format!("`--today` `{s}` is not a YYYY-MM-DD date"));
                chrono::Utc::now().date_naive()
            }),
        };
        if !(0.0..=1.0).contains(&self.fault_rate) {
            problems.push(format!("`--fault-rate` {} must be between 0 and 1", self.fault_rate));
        }
        let keys = [&self.full_key, &self.read_only_key, &self.other_org_key];
        if keys.iter().any(|k| k.is_empty() || k.chars().any(char::is_whitespace)) {
            problems.push("emulator keys must be non-empty and without whitespace".into());
        }
        if keys[0] == keys[1] || keys[0] == keys[2] || keys[1] == keys[2] {
            problems.push("the three emulator keys must differ".into());
        }
        global.pacing_problems(&mut problems);
        if !problems.is_empty() {
            return Err(Error::Config(problems));
        }
        let pacing = global.pacing();
        let config = EmulatorConfig {
            data: GenConfig {
                seed: self.seed,
                applications: self.applications,
                sales: self.sales,
                today,
                content_years: self.content_years,
            },
            keys: Keys {
                full: self.full_key.clone(),
                read_only: self.read_only_key.clone(),
                other_org: self.other_org_key.clone(),
            },
            rate: RatePolicy {
                min_interval: pacing.min_interval,
                hourly_cap: pacing.hourly_cap,
                cap_window: pacing.cap_window,
            },
            faults: FaultConfig {
                rate: self.fault_rate,
                slow: Duration::from_millis(self.slow_ms),
                kinds: vec![],
                lost: vec![],
            },
            latency: Duration::from_millis(self.latency_ms),
            drift: self.drift,
            admin: self.admin,
        };
        Ok((config, SocketAddr::new(self.host, self.port)))
    }
}
