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
use crate::api::{
    ApiKey, ClientConfig, ClientSettings, PacingConfig, API_KEY_ENV, DEFAULT_BASE_URL, DEFAULT_CAP_WINDOW,
    DEFAULT_DEADLINE, DEFAULT_HOURLY_CAP, DEFAULT_MAX_ATTEMPTS, DEFAULT_MIN_INTERVAL, DEFAULT_REQUEST_TIMEOUT,
};
use crate::emulator::{EmulatorConfig, FaultConfig, GenConfig, Keys, OrgPolicy, RatePolicy};
use crate::extract::{ExtractConfig, SyncMode};
use crate::fleet::observe::Lineage;
use crate::fleet::run::{Job, RunOptions};
use crate::fleet::{Check, Organization};
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
    after_help = "The API key is read from the CREATOR_API_KEY environment variable or --api-key-file, never from a flag.\nExit codes: 0 ok, 1 failed, 2 usage/config/input error, 3 some action rows failed, 4 key rejected (401/403), 5 --out locked, 6 some fleet organizations failed, 130 interrupted."
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

    /// No retry starts once this many seconds have passed since a request's first attempt
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
    /// Sync many organizations from one fleet file, each with its own key and budget
    #[command(subcommand)]
    Fleet(FleetCommand),
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process; boxing buys nothing
pub enum FleetCommand {
    /// Sync every organization of the fleet file concurrently, each under `OUT/orgs/<name>/`;
    /// prints the fleet report as JSON on stdout and a summary table on stderr
    Run(FleetRunArgs),
    /// Show each organization's last successful sync, last error, and whether a run is resumable
    Status(FleetSelect),
}

/// Which organizations of a fleet file a command takes.
#[derive(Debug, Args)]
pub struct FleetSelect {
    /// The fleet file (TOML; see `examples/fleet.toml`)
    #[arg(long, env = "CREATOR_ETL_FLEET", value_name = "FILE")]
    pub config: PathBuf,
    /// Only these organizations, comma-separated names
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub only: Vec<String>,
    /// Only the organizations of shard INDEX of COUNT (INDEX from 0), by a stable hash of their
    /// names: COUNT processes with INDEX 0..COUNT cover the fleet exactly once
    #[arg(long, value_name = "INDEX/COUNT")]
    pub shard: Option<String>,
}

impl FleetSelect {
    /// Reads and validates the fleet file as far as `check` asks, then selects its
    /// organizations, in file order; every problem at once.
    pub fn select(&self, check: Check) -> Result<Vec<Organization>, Error> {
        self.select_in_shard(check).map(|(selected, _)| selected)
    }

    /// The selected organizations, and the names of every organization of the file in the
    /// `--shard` (all of them without one), whatever `--only` says: the organizations whose
    /// metrics this process keeps.
    pub fn select_in_shard(&self, check: Check) -> Result<(Vec<Organization>, Vec<String>), Error> {
        let mut problems = vec![];
        let shard = self
            .shard
            .as_deref()
            .map(crate::fleet::Shard::parse)
            .transpose()
            .map_err(|e| problems.push(e))
            .ok()
            .flatten();
        let fleet = match crate::fleet::load(&self.config, check) {
            Ok(f) => Some(f),
            Err(p) => {
                let file = self.config.display();
                problems.extend(p.into_iter().map(|p| format!("{file}: {p}")));
                None
            }
        };
        let Some(fleet) = fleet.filter(|_| problems.is_empty()) else { return Err(Error::Config(problems)) };
        let only = (!self.only.is_empty()).then_some(self.only.as_slice());
        let selected = fleet.select(only, shard).map_err(Error::Config)?.into_iter().cloned().collect();
        let in_shard = fleet.select(None, shard).map_err(Error::Config)?.into_iter().map(|o| o.name.clone()).collect();
        Ok((selected, in_shard))
    }
}

#[derive(Debug, Args)]
pub struct FleetRunArgs {
    #[command(flatten)]
    pub select: FleetSelect,
    /// Also write one shared Delta Lake (`file:///path` or `s3://bucket/prefix`), each
    /// organization under its name; each keeps its own warehouse
    #[arg(long, env = "CREATOR_ETL_LAKE", value_name = "URL")]
    pub lake: Option<String>,
    /// Accept an `s3://` lake whose endpoint ignores conditional writes (`If-None-Match`), which
    /// the first commit probes: two writers could then both commit one Delta version and lose one
    #[arg(long, env = "CREATOR_ETL_LAKE_UNSAFE_NO_CONDITIONAL_WRITES")]
    pub lake_unsafe_no_conditional_writes: bool,
    /// At most N transforms, loads and lake commits at once (they use CPU; extracts only wait)
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub max_loads: usize,
    /// Per organization, send at most N requests, then keep what was fetched and resume next run
    #[arg(long, value_name = "N")]
    pub max_requests_per_org: Option<u64>,
    /// Per organization, run at most this long (`90s`, `15m`, `2h`), then keep what was fetched
    /// and resume next run
    #[arg(long, value_name = "DURATION")]
    pub max_duration: Option<String>,
    /// Fail an organization's load when a data-quality check finds a problem
    #[arg(long)]
    pub strict: bool,
    /// Bucket edges of monthly posts for `post_count_cohorts`, comma-separated, increasing
    #[arg(long, value_delimiter = ',', default_value = "1,5,13,31", value_name = "LIST")]
    pub cohort_edges: Vec<i64>,
    #[command(flatten)]
    pub sync: SyncArgs,
    /// Write per-organization metrics here in the Prometheus textfile-collector format
    #[arg(long, value_name = "PATH")]
    pub metrics_file: Option<PathBuf>,
    /// POST OpenLineage run events (START, COMPLETE, FAIL) to this URL
    #[arg(long, value_name = "URL", conflicts_with = "openlineage_file")]
    pub openlineage_url: Option<String>,
    /// Append OpenLineage run events to this file, one JSON object per line
    #[arg(long, value_name = "PATH")]
    pub openlineage_file: Option<PathBuf>,
}

/// How a sync reads the applications: `run`, `extract` and `fleet run` share these.
#[derive(Debug, Args)]
pub struct SyncArgs {
    /// `quick`: page 1 of each status, then only the pages that locate what changed since the
    /// last sync; `full`: every page (a reconcile); `auto`: quick within `--reconcile-every` of
    /// the last full sync, full otherwise
    #[arg(long, default_value_t = SyncMode::Auto, value_name = "MODE")]
    pub sync: SyncMode,
    /// With `--sync auto`: a full sync when the last one finished this long ago (`90m`, `24h`)
    #[arg(long, default_value = "24h", value_name = "DURATION")]
    pub reconcile_every: String,
}

impl SyncArgs {
    /// The mode and the reconcile interval; a problem is added for a bad duration.
    fn parse(&self, problems: &mut Vec<String>) -> (SyncMode, Duration) {
        let every = duration_flag("--reconcile-every", &self.reconcile_every, problems);
        (self.sync, every.unwrap_or(crate::extract::DEFAULT_RECONCILE_EVERY))
    }
}

/// A duration flag's value, or a problem naming the flag.
fn duration_flag(flag: &str, text: &str, problems: &mut Vec<String>) -> Option<Duration> {
    let parsed = parse_duration(text);
    if parsed.is_none() {
        problems.push(format!("`{flag}` `{text}` is not a duration such as `90s`, `15m` or `2h`"));
    }
    parsed
}

/// Parses `90`, `90s`, `15m` or `2h`.
fn parse_duration(text: &str) -> Option<Duration> {
    let t = text.trim();
    let (n, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let n: u64 = n.parse().ok()?;
    let secs = match unit {
        "s" => n,
        "m" => n.checked_mul(60)?,
        "h" => n.checked_mul(3600)?,
        _ => return None,
    };
    (secs > 0).then(|| Duration::from_secs(secs))
}

impl FleetRunArgs {
    /// Validates the whole fleet run: the file, the flags, every organization's client, extract,
    /// load and actions, before anything is sent.
    pub fn config(&self, global: &GlobalArgs) -> Result<(Vec<Job>, RunOptions), Error> {
        let env = |var: &str| std::env::var(var).ok();
        let (selected, in_shard) = self.select.select_in_shard(Check::Sync(&env))?;
        let mut problems = vec![];
        if let Err(e) = crate::transform::buckets(&self.cohort_edges) {
            problems.push(format!("`--cohort-edges`: {e}"));
        }
        if !(1..=64).contains(&self.max_loads) {
            problems.push("`--max-loads` must be between 1 and 64".into());
        }
        if self.max_requests_per_org == Some(0) {
            problems.push("`--max-requests-per-org` must be at least 1".into());
        }
        let max_duration = self.max_duration.as_deref().and_then(|d| duration_flag("--max-duration", d, &mut problems));
        let lake = self.lake.as_deref().and_then(|url| checked_lake(url, None, &mut problems));
        let sync = self.sync.parse(&mut problems);
        let lineage = match (&self.openlineage_url, &self.openlineage_file) {
            (Some(url), _) => match Url::parse(url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => Some(Lineage::url(u)?),
                _ => {
                    problems.push(format!(
                        "`--openlineage-url` `{}` must be an http(s) URL",
                        crate::fleet::observe::shown_url(url)
                    ));
                    None
                }
            },
            (None, Some(path)) => Some(Lineage::file(path.clone())),
            (None, None) => None,
        };
        let mut jobs = vec![];
        for org in &selected {
            match self.job(org, global, lake.as_deref(), sync) {
                Ok(job) => jobs.push(job),
                Err(p) => problems.extend(p),
            }
        }
        if !problems.is_empty() {
            return Err(Error::Config(problems));
        }
        let options = RunOptions {
            max_loads: self.max_loads,
            max_duration,
            metrics_file: self.metrics_file.clone(),
            metrics_scope: in_shard,
            lineage,
        };
        Ok((jobs, options))
    }

    /// One organization's sync, its settings over the command line's.
    fn job(
        &self,
        org: &Organization,
        global: &GlobalArgs,
        lake: Option<&str>,
        (sync, reconcile_every): (SyncMode, Duration),
    ) -> Result<Job, Vec<String>> {
        let at = format!("organization `{}`", org.name);
        let s = &org.settings;
        let out = OutDir::new(crate::fleet::run::org_dir(&global.out, &org.name));
        // Thousands of organizations make this machine late: space from answers (see
        // `PacingConfig::wait_for_answers`), so lateness never costs a 429.
        let mut pacing = PacingConfig { wait_for_answers: true, ..global.pacing() };
        if let Some(ms) = s.min_interval_ms {
            pacing.min_interval = Duration::from_millis(ms);
        }
        if let Some(cap) = s.hourly_cap {
            pacing.hourly_cap = (cap > 0).then_some(cap.min(u64::from(u32::MAX)) as u32);
        }
        let base_url = s.base_url.as_deref().unwrap_or(&global.base_url);
        let mut problems = vec![];
        // The fleet file was read for a sync ([`Check::Sync`]), so every key is there.
        let key = org.key.clone().ok_or_else(|| format!("{at}: its key was not read"));
        let settings = ClientSettings { base_url: base_url.to_owned(), pacing, ..global.client_settings() };
        let client =
            settings.config(&format!("{at}: base URL"), key).map_err(|p| problems.extend(p)).ok().map(|c| {
                ClientConfig { max_requests: self.max_requests_per_org, ..c.pacing_memory_in(&out.state_dir()) }
            });
        let actions = s.actions.as_ref().and_then(|file| match crate::action::read(file) {
            Ok(reviewed) => {
                let config = ActionConfig {
                    out: out.clone(),
                    file: file.clone(),
                    max_rows: None,
                    only: None,
                    retry_failed: false,
                    scope: Scope::new(base_url, org.key.as_ref().map(ApiKey::fingerprint)),
                };
                Some((config, reviewed))
            }
            Err(e) => {
                problems.push(format!("{at}: {e}"));
                None
            }
        });
        let Some(client) = client.filter(|_| problems.is_empty()) else { return Err(problems) };
        let defaults = ExtractConfig::defaults(out.clone());
        let extract = ExtractConfig {
            statuses: s.statuses.clone().unwrap_or(defaults.statuses.clone()),
            campaign_id: s.campaign_id,
            lookback_days: s.lookback_days.map_or(defaults.lookback_days, |d| d as u32),
            since_days: s.since_days.map_or(defaults.since_days, |d| d as u32),
            sync,
            reconcile_every,
            ..defaults
        };
        let load = LoadConfig {
            out,
            cohort_edges: self.cohort_edges.clone(),
            strict: self.strict,
            parquet_grace: crate::load::DEFAULT_PARQUET_GRACE,
            lake: lake.map(|url| crate::load::lake::LakeConfig {
                url: url.to_owned(),
                org: org.name.clone(),
                unconditional_writes_ok: self.lake_unsafe_no_conditional_writes,
            }),
        };
        Ok(Job { name: org.name.clone(), client, extract, load, actions })
    }
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
    /// With `--lake`: read every table at the versions in this report (the JSON that `load
    /// --lake` or `run --lake` printed: its `lake.versions`), which is exactly that sync's data
    #[arg(long, value_name = "FILE")]
    pub at_versions: Option<PathBuf>,
}

impl QueryArgs {
    pub fn config(&self, global: &GlobalArgs) -> Result<QueryConfig, Error> {
        if self.lake.is_none() && self.at_versions.is_some() {
            return Err(Error::Config(vec![
                "`--at-versions` reads a lake at given versions; it goes with `--lake`".into()
            ]));
        }
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
                        let at_versions =
                            self.at_versions.as_deref().map(crate::query::lake::versions_of_report).transpose()?;
                        Source::Lake(LakeSource {
                            url,
                            org: org.clone(),
                            cache: global.out.join("lake-cache"),
                            at_versions,
                        })
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
        let key = ApiKey::resolve(global.api_key_file.as_deref(), std::env::var(API_KEY_ENV).ok().as_deref()).ok();
        let config = ActionConfig {
            out: OutDir::new(&global.out),
            file: file.to_path_buf(),
            max_rows: self.max_rows,
            only: self.only,
            retry_failed: self.retry_failed,
            scope: Scope::new(&global.base_url, key.map(|k| k.fingerprint())),
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
    #[arg(long, default_value_t = crate::load::DEFAULT_PARQUET_GRACE.as_secs(), value_name = "S")]
    pub parquet_grace_s: u64,
    /// Also write every table to this Delta Lake (`file:///path` or `s3://bucket/prefix`),
    /// replacing only `--org`'s rows
    #[arg(long, env = "CREATOR_ETL_LAKE", value_name = "URL")]
    pub lake: Option<String>,
    /// The organization whose data this is, a slug (`acme`, `brand-2`); required with `--lake`
    #[arg(long, value_name = "NAME")]
    pub org: Option<String>,
    /// Accept an `s3://` lake whose endpoint ignores conditional writes (`If-None-Match`), which
    /// the first commit probes: two writers could then both commit one Delta version and lose one
    #[arg(long, env = "CREATOR_ETL_LAKE_UNSAFE_NO_CONDITIONAL_WRITES")]
    pub lake_unsafe_no_conditional_writes: bool,
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
            (Some(url), Some(org)) => {
                checked_lake(url, Some(org), &mut problems).map(|url| crate::load::lake::LakeConfig {
                    url,
                    org: org.clone(),
                    unconditional_writes_ok: self.lake_unsafe_no_conditional_writes,
                })
            }
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
    #[arg(long, default_value_t = crate::extract::DEFAULT_CONCURRENCY, value_name = "N")]
    pub concurrency: usize,
    /// Crawls of a status while its rows disagree with the service's count (drift)
    #[arg(long, default_value_t = crate::extract::DEFAULT_MAX_PASSES, value_name = "N")]
    pub max_passes: u32,
    /// First day of content statistics (YYYY-MM-DD, UTC) [default: last loaded day minus
    /// --lookback-days, or --since-days ago on the first run]
    #[arg(long, value_name = "DATE")]
    pub from: Option<String>,
    /// Last day of content statistics (YYYY-MM-DD, UTC) [default: today; later days are lowered to today]
    #[arg(long, value_name = "DATE")]
    pub to: Option<String>,
    /// Days per content request
    #[arg(long, default_value_t = crate::extract::DEFAULT_WINDOW_DAYS, value_name = "N")]
    pub window_days: u32,
    /// Days before the last loaded day that are fetched again, because recent days still change
    #[arg(long, default_value_t = crate::extract::DEFAULT_LOOKBACK_DAYS, value_name = "N")]
    pub lookback_days: u32,
    /// How far back the first run goes
    #[arg(long, default_value_t = crate::extract::DEFAULT_SINCE_DAYS, value_name = "N")]
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
    #[command(flatten)]
    pub sync: SyncArgs,
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
            let (known, unknown) = ApplicationStatus::parse_known(self.statuses.iter().map(String::as_str));
            for s in unknown {
                problems
                    .push(format!("`--statuses`: `{s}` is not a status; allowed: {}", ApplicationStatus::known_list()));
            }
            known
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
        let (sync, reconcile_every) = self.sync.parse(&mut problems);
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
            sync,
            reconcile_every,
            // Read from the warehouse's ledger just before the extract.
            content_cursor: None,
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
    /// Also serve N numbered organizations (fleets), organization k with the key `emu-org-<k>-key`
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub organizations: u32,
    /// Applications of each numbered organization
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub org_applications: usize,
    /// A numbered organization's own policy, `K:SETTING,...` (repeatable), with settings
    /// `min_interval_ms=MS`, `hourly_cap=N`, `cap_window_s=S`, `fault_rate=P`, `revoked` and
    /// `skewed_totals` (content totals off by one: a data-quality finding);
    /// e.g. `--org-policy 3:hourly_cap=5,fault_rate=0.5`
    #[arg(long = "org-policy", value_name = "K:SETTINGS")]
    pub org_policies: Vec<String>,
}

/// Parses one `--org-policy K:SETTING,...` onto the emulator's own rate policy.
fn org_policy(spec: &str, base: &RatePolicy, organizations: u32) -> Result<(u32, OrgPolicy), String> {
    let bad = |why: String| format!("`--org-policy` `{spec}`: {why}");
    let (k, settings) = spec.split_once(':').ok_or_else(|| bad("expected `K:SETTING,...`".into()))?;
    let k: u32 = k.trim().parse().map_err(|_| bad(format!("`{k}` is not an organization number")))?;
    if !(1..=organizations).contains(&k) {
        return Err(bad(format!("organization {k} is not served (`--organizations {organizations}`)")));
    }
    let mut policy = OrgPolicy::default();
    let mut rate = base.clone();
    for setting in settings.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, value) = setting.split_once('=').unwrap_or((setting, ""));
        let number = || value.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0);
        match (name, number()) {
            ("revoked", _) if value.is_empty() => policy.revoked = true,
            ("skewed_totals", _) if value.is_empty() => policy.skewed_totals = true,
            ("min_interval_ms", Some(v)) => rate.min_interval = Duration::from_millis(v as u64),
            ("hourly_cap", Some(v)) => rate.hourly_cap = (v >= 1.0).then_some(v as u32),
            ("cap_window_s", Some(v)) if v >= 1.0 => rate.cap_window = Duration::from_secs(v as u64),
            ("fault_rate", Some(v)) if v <= 1.0 => policy.fault_rate = Some(v),
            _ => return Err(bad(format!("`{setting}` is not one of min_interval_ms=MS, hourly_cap=N, cap_window_s=S, fault_rate=P (0 to 1), revoked, skewed_totals"))),
        }
    }
    policy.rate = Some(rate);
    Ok((k, policy))
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

    fn pacing_problems(&self, problems: &mut Vec<String>) {
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

    /// Validates the client's settings: base URL, key, pacing, retries.
    pub fn client_config(&self) -> Result<ClientConfig, Error> {
        let env_key = std::env::var(API_KEY_ENV).ok();
        let key = ApiKey::resolve(self.api_key_file.as_deref(), env_key.as_deref()).map_err(|e| e.to_string());
        self.client_settings().config("`--base-url`", key).map_err(Error::Config)
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
        let pacing = global.pacing();
        let rate = RatePolicy {
            min_interval: pacing.min_interval,
            hourly_cap: pacing.hourly_cap,
            cap_window: pacing.cap_window,
        };
        let mut org_policies = std::collections::BTreeMap::new();
        for spec in &self.org_policies {
            match org_policy(spec, &rate, self.organizations) {
                Ok((k, p)) => {
                    org_policies.insert(k, p);
                }
                Err(e) => problems.push(e),
            }
        }
        if !problems.is_empty() {
            return Err(Error::Config(problems));
        }
        let config = EmulatorConfig {
            data: GenConfig {
                seed: self.seed,
                applications: self.applications,
                sales: self.sales,
                today,
                content_years: self.content_years,
                organizations: self.organizations,
                org_applications: self.org_applications,
            },
            keys: Keys {
                full: self.full_key.clone(),
                read_only: self.read_only_key.clone(),
                other_org: self.other_org_key.clone(),
            },
            rate,
            faults: FaultConfig {
                rate: self.fault_rate,
                slow: Duration::from_millis(self.slow_ms),
                kinds: vec![],
                lost: vec![],
            },
            latency: Duration::from_millis(self.latency_ms),
            drift: self.drift,
            admin: self.admin,
            org_policies,
        };
        Ok((config, SocketAddr::new(self.host, self.port)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn org_policies_and_durations_parse() {
        let base = RatePolicy {
            min_interval: Duration::from_millis(2000),
            hourly_cap: Some(40),
            cap_window: Duration::from_secs(3600),
        };
        let (k, p) = org_policy("3:hourly_cap=5,fault_rate=0.5,skewed_totals", &base, 4).unwrap();
        assert_eq!(k, 3);
        let rate = p.rate.unwrap();
        assert_eq!((rate.hourly_cap, rate.min_interval), (Some(5), Duration::from_millis(2000)));
        assert_eq!(p.fault_rate, Some(0.5));
        assert!(p.skewed_totals && !p.revoked);
        let (_, p) = org_policy("1:revoked,min_interval_ms=100,hourly_cap=0", &base, 1).unwrap();
        assert!(p.revoked);
        assert_eq!(p.rate.unwrap().hourly_cap, None);
        for (bad, why) in [
            ("5:revoked", "organization 5 is not served"),
            ("x:revoked", "not an organization number"),
            ("1:fault_rate=2", "`fault_rate=2` is not one of"),
            ("1:colour=red", "`colour=red` is not one of"),
            ("revoked", "expected `K:SETTING,...`"),
        ] {
            let e = org_policy(bad, &base, 4).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert_eq!(parse_duration("90"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("15m"), Some(Duration::from_secs(900)));
        assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
        for bad in ["0s", "soon", "1d", "-5m", ""] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
