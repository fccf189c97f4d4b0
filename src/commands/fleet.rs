//! `creator-etl fleet run|status`: many organizations from one fleet file.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use reqwest::Url;
use serde::Serialize;

use super::extract::SyncArgs;
use super::load::checked_lake;
use super::{duration_flag, print_json, GlobalArgs, ReportNote};
use crate::fleet::batch::BatchOptions;
use crate::fleet::job::{Defaults, Job};
use crate::fleet::observe::Lineage;
use crate::fleet::run::RunOptions;
use crate::fleet::{Check, Organization};
use crate::load::fleet_warehouse::BatchConfig;
use crate::{exit, Error};

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
    /// Only these organizations, comma-separated names; an unknown name exits 2
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
    /// organization under its name; the fleet warehouse (or each organization's, with
    /// `--warehouse per-org`) stays the source its rows are committed from
    #[arg(long, env = "CREATOR_ETL_LAKE", value_name = "URL")]
    pub lake: Option<String>,
    /// Accept an `s3://` lake whose endpoint ignores conditional writes (`If-None-Match`), which
    /// the first commit probes: two writers could then both commit one Delta version and lose one
    #[arg(long, env = "CREATOR_ETL_LAKE_UNSAFE_NO_CONDITIONAL_WRITES")]
    pub lake_unsafe_no_conditional_writes: bool,
    /// Where the organizations' data goes: `fleet`, one warehouse for the whole fleet at
    /// `OUT/warehouse.duckdb` (every table with `organization`), loaded in batches; or
    /// `per-org`, a warehouse per organization under `OUT/orgs/<name>/`
    #[arg(long, value_enum, default_value_t = WarehouseKind::Fleet, value_name = "KIND")]
    pub warehouse: WarehouseKind,
    /// With `--warehouse fleet`: a batch loads at most N organizations…
    #[arg(long, default_value_t = crate::fleet::batch::DEFAULT_BATCH_SIZE, value_name = "N")]
    pub batch_size: usize,
    /// …and closes at the latest this long (`2s`, `500ms`) after its first organization's extract finished (at once when no other organization can join it)
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    pub batch_wait: String,
    /// With `--warehouse fleet`: publish the readers' snapshot and the Parquet tree after a
    /// batch once the oldest load not yet published is this old, and always when the run ends
    #[arg(long, default_value = "30s", value_name = "DURATION")]
    pub publish_every: String,
    /// At most N transforms, loads and lake commits at once (they use CPU; extracts only wait);
    /// with `--warehouse per-org`
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
    /// Bucket edges of monthly posts for `post_count_cohorts`, comma-separated, increasing: the
    /// default gives the buckets `0`, `1-4`, `5-12`, `13-30`, `31+`, plus `no_accounts`
    #[arg(long, value_delimiter = ',', default_value = crate::transform::DEFAULT_COHORT_EDGES_FLAG, value_name = "LIST")]
    pub cohort_edges: Vec<i64>,
    #[command(flatten)]
    pub sync: SyncArgs,
    /// With `--warehouse fleet`: do not write the HTML report (`OUT/report/index.html`, the
    /// overview, and the pages of the organizations whose data or health changed) after the run
    #[arg(long)]
    pub no_report: bool,
    /// Write per-organization metrics here in the Prometheus textfile-collector format
    #[arg(long, value_name = "PATH")]
    pub metrics_file: Option<PathBuf>,
    /// POST OpenLineage run events (START, then COMPLETE, ABORT or FAIL) to this URL
    #[arg(long, value_name = "URL", conflicts_with = "openlineage_file")]
    pub openlineage_url: Option<String>,
    /// Append OpenLineage run events to this file, one JSON object per line
    #[arg(long, value_name = "PATH")]
    pub openlineage_file: Option<PathBuf>,
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
        let batch_wait = batch_duration("--batch-wait", &self.batch_wait, &mut problems);
        let publish_every = batch_duration("--publish-every", &self.publish_every, &mut problems);
        if !(1..=10_000).contains(&self.batch_size) {
            problems.push("`--batch-size` must be between 1 and 10000".into());
        }
        if self.warehouse == WarehouseKind::PerOrg
            && crate::load::warehouse::holds_fleet_warehouse(&crate::out::OutDir::new(&global.out))
        {
            problems.push(format!(
                "`{}` holds a fleet warehouse: sync it with `--warehouse fleet` (a per-organization run would leave it behind)",
                global.out.display()
            ));
        }
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
        let defaults = Defaults {
            out: global.out.clone(),
            client: global.client_settings(),
            max_requests_per_org: self.max_requests_per_org,
            lake,
            lake_unsafe_no_conditional_writes: self.lake_unsafe_no_conditional_writes,
            sync: sync.0,
            reconcile_every: sync.1,
            cohort_edges: self.cohort_edges.clone(),
            strict: self.strict,
        };
        let mut jobs = vec![];
        for org in &selected {
            match crate::fleet::job::job(org, &defaults) {
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
            out: global.out.clone(),
            batches: (self.warehouse == WarehouseKind::Fleet).then(|| BatchOptions {
                size: self.batch_size,
                wait: batch_wait.unwrap_or(crate::fleet::batch::DEFAULT_BATCH_WAIT),
                publish_every: publish_every.unwrap_or(crate::fleet::batch::DEFAULT_PUBLISH_EVERY),
                config: BatchConfig {
                    cohort_edges: self.cohort_edges.clone(),
                    strict: self.strict,
                    parquet_grace: crate::load::DEFAULT_PARQUET_GRACE,
                },
            }),
        };
        Ok((jobs, options))
    }
}

/// Where a fleet's data goes (`--warehouse`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WarehouseKind {
    /// One warehouse for the fleet, loaded in batches
    Fleet,
    /// One warehouse per organization
    PerOrg,
}

/// A batching duration flag: `500ms`, `2s`, or a number of seconds; zero is allowed.
fn batch_duration(flag: &str, text: &str, problems: &mut Vec<String>) -> Option<std::time::Duration> {
    let parsed = super::parse_duration_or_zero(text);
    if parsed.is_none() {
        problems.push(format!("`{flag}` `{text}` is not a duration such as `500ms`, `2s` or `1m`"));
    }
    parsed
}

pub async fn run(args: &FleetRunArgs, global: &GlobalArgs) -> Result<u8, Error> {
    let (jobs, options) = args.config(global)?;
    if jobs.is_empty() {
        return Err(Error::Config(vec!["no organization selected: check `--only` and `--shard`".into()]));
    }
    let stop = crate::stop::stop_signal();
    let mut report = crate::fleet::run::run(jobs, &options, stop.clone()).await?;
    // Once the fleet warehouse is published and the fleet's lock let go: a fleet warehouse that
    // was never published (every first sync failed) still gets an overview of the status files.
    // Not after Ctrl-C or SIGTERM: the fleet was asked to stop; the next report shows it.
    let note = match (&options.batches, args.no_report) {
        (Some(_), false) if stop.is_cancelled() => {
            tracing::info!("stopped: no HTML report this run; the next `fleet run` or `creator-etl report` writes it");
            None
        }
        (Some(_), false) => {
            let out = crate::out::OutDir::new(&global.out);
            let config = crate::report::ReportConfig::after_fleet_run(&out, stop.clone());
            Some(ReportNote::write(config).await)
        }
        _ => None,
    };
    // A report stopped by Ctrl-C or SIGTERM is an interrupted run, unless the fleet's own
    // outcome already failed.
    if note.as_ref().is_some_and(|n| n.interrupted) && report.exit_code == crate::exit::OK {
        report.exit_code = crate::exit::INTERRUPTED;
    }
    eprint!("{}", report.summary());
    print_json(&FleetRunOutput { fleet: &report, report: note })?;
    Ok(report.exit_code)
}

/// What `fleet run` prints: the fleet report, and the HTML report's note (or why it could not be
/// written: the fleet's outcome and exit code stand either way).
#[derive(Serialize)]
struct FleetRunOutput<'a> {
    #[serde(flatten)]
    fleet: &'a crate::fleet::report::FleetReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    report: Option<ReportNote>,
}

/// One organization's line of `fleet status`.
#[derive(Debug, Serialize)]
pub struct FleetStatusRow {
    pub name: String,
    pub dir: std::path::PathBuf,
    #[serde(flatten)]
    pub status: crate::fleet::status::OrgStatus,
    /// The raw run the next sync resumes, if any.
    pub resumable_run: Option<String>,
    /// Why the status file could not be read as a whole, when it could not.
    pub status_error: Option<String>,
}

/// `fleet status`: reads the fleet file alone (no key, no actions file: it sends nothing) and
/// each organization's status file. A status file that cannot be read is shown with what could
/// be read of it, and why the rest could not (`status_error`, and a warning).
pub fn status(args: &FleetSelect, global: &GlobalArgs) -> Result<u8, Error> {
    let rows: Vec<FleetStatusRow> = args
        .select(crate::fleet::Check::FileOnly)?
        .into_iter()
        .map(|org| {
            let name = org.name;
            let dir = crate::fleet::status::org_dir(&global.out, &name);
            let (status, status_error) = crate::fleet::status::read_status(&dir);
            if let Some(problem) = &status_error {
                tracing::warn!(organization = %name, %problem, "the organization's fleet status cannot be read as a whole; showing what could be read");
            }
            let resumable_run = crate::extract::unfinished_run(&crate::out::OutDir::new(&dir));
            FleetStatusRow { name, dir, status, resumable_run, status_error }
        })
        .collect();
    let when = |t: Option<chrono::DateTime<chrono::Utc>>| {
        t.map_or("never".to_owned(), |t| t.format("%Y-%m-%d %H:%M:%SZ").to_string())
    };
    let mut table = format!(
        "{:<24} {:<21} {:<12} {:<12} {:<9} last error\n",
        "organization", "last success", "last outcome", "last actions", "resumable"
    );
    for r in &rows {
        table.push_str(&format!(
            "{:<24} {:<21} {:<12} {:<12} {:<9} {}\n",
            r.name,
            when(r.status.last_success_at),
            r.status.last_outcome.map_or("-", |o| o.as_str()),
            r.status.last_actions.map_or("-", |o| o.as_str()),
            if r.resumable_run.is_some() { "yes" } else { "no" },
            r.status_error.as_deref().or(r.status.last_error.as_deref()).unwrap_or("")
        ));
    }
    eprint!("{table}");
    print_json(&rows)?;
    Ok(exit::OK)
}
