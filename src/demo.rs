//! `creator-etl demo`: the whole product on one machine, in about a minute.
//!
//! Starts the emulator in-process on 127.0.0.1:0 (seeded, with a 50 ms spacing policy; the
//! client keeps 60 ms) and runs the same pipeline as `creator-etl run` (extract, transform, load).
//! Then, as a brand would in its dashboard, it decides some pending applications, and runs
//! again: incrementally, recording the status changes. The second run also applies the example
//! reviewed CSV (`examples/reviewed.csv`, compiled in). Last, a summary with the next commands.
//!
//! The demo only writes into an output directory that is empty or was made by a demo (marked by
//! `OUT/.demo`), so it can never mix emulator data into a real warehouse.

use std::time::Duration;

use crate::action::ActionConfig;
use crate::api::{ApiKey, Client, ClientConfig, PacingConfig};
use crate::emulator::{Emulator, EmulatorConfig, RatePolicy};
use crate::extract::ExtractConfig;
use crate::load::LoadConfig;
use crate::out::OutDir;
use crate::query::{self, Format, QueryConfig};
use crate::stop::stop_signal;
use crate::sync::{StageLog, SyncJob, SyncReport};
use crate::transform::DEFAULT_COHORT_EDGES;
use crate::{exit, Error};

/// The example reviewed file, written into the demo's output and applied.
pub const EXAMPLE_REVIEWED_CSV: &str = include_str!("../examples/reviewed.csv");

/// The spacing the demo's emulator enforces.
const DEMO_SPACING: Duration = Duration::from_millis(50);
/// The client's spacing: a little more than the policy, because at 50 ms the pacer's built-in
/// margin (1/50 of the interval) is below the timing jitter of a busy machine.
const CLIENT_SPACING: Duration = Duration::from_millis(60);

/// What a demo needs from its command line.
#[derive(Clone, Debug)]
pub struct DemoConfig {
    pub out: OutDir,
    pub applications: usize,
    pub seed: u64,
    pub progress_bars: bool,
}

impl DemoConfig {
    /// Checks the demo's settings; `out` must be empty or an earlier demo's.
    pub fn new(out: OutDir, applications: usize, seed: u64, progress_bars: bool) -> Result<Self, Error> {
        if applications == 0 {
            return Err(Error::Config(vec!["`--applications` must be at least 1".into()]));
        }
        let root = out.root();
        let used = [out.warehouse(), out.raw_root(), out.parquet_dir(), out.actions_dir()].iter().any(|p| p.exists());
        if used && !out.demo_mark().exists() {
            return Err(Error::Config(vec![format!(
                "`{}` holds data that a demo did not make; the demo writes emulator data only into an empty \
                 directory or an earlier demo's. Pass `--out` with another directory",
                root.display()
            )]));
        }
        Ok(DemoConfig { out, applications, seed, progress_bars })
    }
}

/// Runs the demo; the summary goes to stdout.
pub async fn run(config: &DemoConfig) -> Result<u8, Error> {
    let root = config.out.root().to_path_buf();
    let _lock = config.out.lock("demo")?;
    crate::out::write_atomic(&config.out.demo_mark(), b"made by `creator-etl demo`\n")?;

    let mut emu_config = EmulatorConfig::for_tests(config.applications);
    emu_config.data.seed = config.seed;
    emu_config.rate =
        RatePolicy { min_interval: DEMO_SPACING, hourly_cap: None, cap_window: Duration::from_secs(3600) };
    let addr = "127.0.0.1:0".parse().expect("a valid address");
    let emu =
        Emulator::start(&emu_config, addr).await.map_err(|source| Error::Bind { addr: addr.to_string(), source })?;
    eprintln!("demo: emulator serving {} applications at {}", config.applications, emu.base_url);

    let key = ApiKey::new(&emu_config.keys.full, "the demo").map_err(Error::Key)?;
    let mut client_config = ClientConfig::new(emu.base_url.parse().expect("the emulator's URL parses"), key);
    client_config.pacing = PacingConfig { min_interval: CLIENT_SPACING, hourly_cap: None, ..PacingConfig::unlimited() };

    let extract = ExtractConfig {
        concurrency: 4,
        keep_raw: Some(3),
        progress_bars: config.progress_bars,
        // Every demo serves new data: a reconcile, not a difference from the last demo's.
        sync: crate::extract::SyncMode::Full,
        ..ExtractConfig::defaults(config.out.clone())
    };
    let load = LoadConfig {
        out: config.out.clone(),
        cohort_edges: DEFAULT_COHORT_EDGES.to_vec(),
        strict: false,
        parquet_grace: crate::load::DEFAULT_PARQUET_GRACE,
        lake: None,
    };
    let reviewed_path = config.out.demo_reviewed_csv();
    crate::out::write_atomic(&reviewed_path, EXAMPLE_REVIEWED_CSV.as_bytes())?;
    let reviewed = crate::action::read(&reviewed_path)?;
    let actions = ActionConfig {
        out: config.out.clone(),
        file: reviewed_path,
        max_rows: None,
        only: None,
        retry_failed: false,
        scope: crate::action::journal::Scope::new(&emu.base_url, Some(client_config.api_key.fingerprint())),
    };

    let stop = stop_signal();
    // A client per run, so each run's report counts its own requests; they share the pacer.
    let job = SyncJob { extract, load, actions: None };
    let log = StageLog::begin(&config.out, "demo", &job.stages());
    let first = crate::sync::run(
        job.clone(),
        &Client::new(client_config.clone())?,
        stop.clone(),
        crate::sync::Sharing::Alone,
        &log,
    )
    .await
    .inspect_err(|e| log.fail(e))?;
    log.finish();
    // Between two scheduled runs, the brand decides some pending applications in its dashboard.
    // The second run is incremental and records the changes in the status history.
    let decided = decide_pending(&emu, 24);
    eprintln!(
        "demo: first run loaded {} applications; the brand then decided {decided} pending ones; running again",
        first.extract.applications_total
    );
    let client = Client::new(client_config)?;
    let job = SyncJob { actions: Some((actions, reviewed)), ..job };
    let log = StageLog::begin(&config.out, "demo", &job.stages());
    let report =
        crate::sync::run(job, &client, stop, crate::sync::Sharing::Alone, &log).await.inspect_err(|e| log.fail(e))?;
    log.finish();
    emu.stop().await;
    let page = crate::report::write(crate::report::ReportConfig::after_sync(&config.out)).await;
    // As in `run`: the data is loaded whether or not its page could be written.
    let page = match page {
        Ok(page) => Some(page.path),
        Err(e) => {
            tracing::warn!(error = %e.report(), "the HTML report could not be written");
            None
        }
    };
    println!("{}", summary(&report, &root, page.as_deref())?);
    // The example file holds failures on purpose (a cancelled sale, a foreign sale, …): the demo
    // succeeds when every row ended as the example expects, which the tests check.
    Ok(exit::OK)
}

/// Accepts or rejects the newest `n` pending applications in the emulator, as a brand would.
fn decide_pending(emu: &Emulator, n: usize) -> usize {
    use crate::api::models::ApplicationStatus;
    let pending = emu
        .state
        .applications(crate::emulator::MAIN_ORG)
        .into_iter()
        .filter(|a| a.status == ApplicationStatus::Pending);
    let mut decided = 0;
    for (i, app) in pending.take(n).enumerate() {
        let status = if i % 3 == 2 { ApplicationStatus::Rejected } else { ApplicationStatus::Accepted };
        decided += usize::from(emu.state.set_application_status(app.id, status));
    }
    decided
}

fn section(title: &str, body: &str) -> String {
    format!("\n== {title}\n{body}")
}

fn table(warehouse: &std::path::Path, name: &str, sql: &str) -> Result<String, Error> {
    let config = QueryConfig {
        source: query::Source::Warehouse { path: warehouse.to_path_buf(), org: None },
        name: name.to_owned(),
        sql: sql.to_owned(),
        params: vec![],
        format: Format::Table,
    };
    let reader = query::Reader::own(warehouse)?;
    Ok(query::render(&reader.run(None, &config)?, Format::Table)?)
}

fn summary(report: &SyncReport, root: &std::path::Path, page: Option<&std::path::Path>) -> Result<String, Error> {
    let warehouse = OutDir::new(root).warehouse();
    let mut s = format!(
        "creator-etl demo: two runs; the second made {} requests, holds {} applications and {} days of content, in {}",
        report.extract.requests.requests_total,
        report.extract.applications_total,
        report.extract.content.days,
        warehouse.display()
    );
    let rows: Vec<String> = report.load.rows.iter().map(|(t, n)| format!("  {t:<28} {n:>9}")).collect();
    s.push_str(&section("rows per table", &rows.join("\n")));
    s.push_str(&section(
        "biggest week-over-week movers (queries/movers.sql: 7-day sums, last 4 weeks; pct_change_7d a fraction)",
        &table(&warehouse, "movers", query::named("movers").expect("a named query"))?,
    ));
    s.push_str(&section(
        "acceptance by monthly-post-count bucket (queries/cohort_acceptance.sql)",
        &table(&warehouse, "cohort_acceptance", query::named("cohort_acceptance").expect("a named query"))?,
    ));
    let changes = query::named("status_changes").expect("a named query").trim().trim_end_matches(';');
    s.push_str(&section(
        &format!(
            "status changes recorded by the second run: {} (queries/status_changes.sql, first 6)",
            report.load.quality.status_changes
        ),
        &table(&warehouse, "status_changes", &format!("SELECT * FROM (\n{changes}\n) LIMIT 6"))?,
    ));
    if let Some(actions) = &report.actions {
        s.push_str(&section("actions replayed from examples/reviewed.csv", &crate::action::summary(actions)));
    }
    let page = match page {
        Some(page) => format!("  {}   # open it in a browser: every section, one file", page.display()),
        None => "  not written: see the warning above".to_owned(),
    };
    s.push_str(&section("report", &page));
    let out = root.display();
    let warehouse = warehouse.display();
    let reviewed = OutDir::new(root).demo_reviewed_csv();
    let reviewed = reviewed.display();
    s.push_str(&section(
        "next",
        &format!(
            "  creator-etl query wow_latest --out {out}                 # any of queries/*.sql
  creator-etl query run_health --out {out} --format json
  creator-etl report --out {out}                            # the HTML report again
  creator-etl actions plan {reviewed} --out {out}   # rerun: all already applied
  CREATOR_ETL_WAREHOUSE={warehouse} jupyter lab notebooks/
  duckdb {warehouse}                              # plain SQL

  against the real service (2 s between requests, 40 requests/hour by default):
  export CREATOR_API_KEY=...   # or --api-key-file PATH
  creator-etl check
  creator-etl run --out ./data --hourly-cap <your organization's cap>"
        ),
    ));
    Ok(s)
}
