//! Runs a parsed command line: validate, then act. Returns the exit code of a run that finished,
//! or an [`Error`] whose [`exit_code`](Error::exit_code) says how it failed.

use std::collections::BTreeSet;
use std::io::Write;

use serde::Serialize;

use crate::api::models::ApplicationStatus;
use crate::api::{ApiError, ApplicationsQuery, Client, MetricsSnapshot};
use tokio::sync::watch;

use crate::action::{ActionConfig, ActionReport, Reviewed};
use crate::cli::{
    validate_both, ActionsArgs, ActionsCommand, Cli, Command, EmulatorArgs, ExtractArgs, FleetCommand, FleetRunArgs,
    FleetSelect, GlobalArgs, LoadArgs, QueryArgs, RunArgs,
};
use crate::emulator::Emulator;
use crate::extract::{ExtractConfig, ExtractReport, SyncMode};
use crate::load::{LoadConfig, LoadReport};
use crate::{exit, Error};

pub async fn run(cli: Cli) -> Result<u8, Error> {
    match &cli.command {
        Command::Check => check(&cli.global).await,
        Command::Emulator(args) => emulator(args, &cli.global).await,
        Command::Extract(args) => extract(args, &cli.global).await,
        Command::Load(args) => load(args, &cli.global).await,
        Command::Run(args) => run_all(args, &cli.global).await,
        Command::Actions(ActionsCommand::Plan(args)) => actions_plan(args, &cli.global),
        Command::Actions(ActionsCommand::Apply(args)) => actions_apply(args, &cli.global).await,
        Command::Query(args) => query(args, &cli.global).await,
        Command::Fleet(FleetCommand::Run(args)) => fleet_run(args, &cli.global).await,
        Command::Fleet(FleetCommand::Status(args)) => fleet_status(args, &cli.global),
        Command::Demo(args) => {
            crate::demo::run(&crate::demo::DemoConfig::new(&cli.global, args.applications, args.seed)?).await
        }
    }
}

/// A stop flag raised by the first Ctrl-C or SIGTERM; a second one exits at once.
pub(crate) fn stop_signal() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_shutdown().await;
        tracing::warn!("stopping after the requests in flight; press Ctrl-C again to quit at once");
        let _ = tx.send(true);
        wait_for_shutdown().await;
        std::process::exit(i32::from(exit::INTERRUPTED));
    });
    rx
}

/// The client and the stop of a command that reads: Ctrl-C or SIGTERM ends the client's waits
/// and starts no new request, and the stop reaches the crawl once the requests in flight have
/// answered and landed ([`Client::stop_after_in_flight`]).
fn stop_after_in_flight(client: Client) -> (Client, watch::Receiver<bool>) {
    let signal = stop_signal();
    let stop = client.stop_after_in_flight(signal.clone());
    (client.with_stop(signal), stop)
}

/// Runs `work` on a blocking thread (DuckDB and Polars work synchronously); `what` names it if
/// the thread itself fails.
async fn blocking<T, E>(what: &str, work: impl FnOnce() -> Result<T, E> + Send + 'static) -> Result<T, Error>
where
    T: Send + 'static,
    E: Into<Error> + Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Error::Io {
            context: format!("the {what} task failed"),
            source: std::io::Error::other(e.to_string()),
        })?
        .map_err(Into::into)
}

/// Loads on a blocking thread.
async fn load_blocking(config: LoadConfig, run_id: String, report: Option<ExtractReport>) -> Result<LoadReport, Error> {
    blocking("load", move || crate::load::run(&config, &run_id, report.as_ref())).await
}

async fn load(args: &LoadArgs, global: &GlobalArgs) -> Result<u8, Error> {
    let config = args.options.config(global)?;
    let _lock = config.out.lock("load")?;
    let run_id = match &args.from_raw {
        Some(id) => id.clone(),
        None => crate::load::latest_complete_run(&config.out)?,
    };
    let report = crate::load::extract_report(&config.out, &run_id)?;
    let (lake, out) = (config.lake.clone(), config.out.clone());
    let mut loaded = load_blocking(config, run_id, Some(report)).await?;
    if let Some(lake) = &lake {
        loaded.lake = Some(push_to_lake(&out, lake).await?);
    }
    print_json(&loaded)?;
    Ok(exit::OK)
}

/// Commits the organization's rows of every table to the lake ([`crate::load::lake`]): staged by
/// DuckDB on a blocking thread, committed by delta-rs here.
async fn push_to_lake(
    out: &crate::out::OutDir,
    lake: &crate::load::lake::LakeConfig,
) -> Result<crate::load::lake::LakeReport, Error> {
    let staged = out.root().join(".lake-staging");
    let (o, org, dir) = (out.clone(), lake.org.clone(), staged.clone());
    blocking("lake staging", move || crate::load::lake::stage(&o, &org, &dir)).await?;
    let report = crate::load::lake::commit(lake, &staged).await?;
    let _ = std::fs::remove_dir_all(&staged);
    Ok(report)
}

/// What `run` prints: every stage's report.
#[derive(Debug, Serialize)]
pub struct RunReport {
    pub extract: ExtractReport,
    pub load: LoadReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actions: Option<ActionReport>,
    /// With `--lake`: the organization's state this run restored from the lake, because its
    /// `--out` did not have it (no loaded run, or fewer than the lake).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restored: Option<RestoreReport>,
}

impl RunReport {
    /// The exit code of a finished run: the actions stage's, if any.
    fn exit_code(&self) -> u8 {
        self.actions.as_ref().map_or(exit::OK, actions_exit_code)
    }
}

/// Extract, transform and load, then apply the reviewed actions if given. The caller validated
/// everything and holds the lock. With `loads`, the CPU-heavy transform, load and lake commit
/// each hold one of its permits (a fleet bounds them; its extracts only wait).
pub async fn pipeline(
    client: &Client,
    config: &ExtractConfig,
    load_config: LoadConfig,
    actions: Option<(ActionConfig, Reviewed)>,
    stop: watch::Receiver<bool>,
    loads: Option<&tokio::sync::Semaphore>,
) -> Result<RunReport, Error> {
    let permit = || async {
        match loads {
            Some(s) => s.acquire().await.ok(),
            None => None,
        }
    };
    // An `--out` without the organization's state (a fresh volume, another shard, or one the
    // lake has moved past) first takes it from the lake: its journal decides what the actions
    // send, its `applications` and `runs` what the quick sync compares with.
    let restored = match &load_config.lake {
        Some(lake) => {
            let _held = permit().await;
            restore_from_lake(&load_config.out, lake).await?
        }
        None => None,
    };
    // Before the extract spends any request: the warehouse must be writable (a reader holding
    // the writer's file is reported now, exit 5, not after an hour of requests), and an actions
    // file must pass its guards.
    let writable = load_config.out.clone();
    let checked_actions = actions.clone();
    let held = permit().await;
    let extract_config = config.clone();
    let snapshot = blocking("preflight", move || -> Result<_, Error> {
        let writer = match &checked_actions {
            // The journal lives in the writer's warehouse: opening it checks both.
            Some((config, reviewed)) => {
                crate::action::preflight(config, reviewed)?;
                None
            }
            None => crate::load::warehouse::check_writable(&writable)?,
        };
        read_previous(&extract_config, writer.as_ref())
    })
    .await?;
    drop(held);
    let (config, snapshot) = snapshot;
    let begun = crate::extract::begin(&config, client, stop.clone(), snapshot.as_ref()).await?;
    // A fleet's organizations plan at once, so there the plan is only logged (the extract's
    // `plan` line), never printed interleaved.
    if loads.is_none() {
        eprintln!("{}", begun.plan());
    }
    let extracted = begun.finish().await?;
    let lake = load_config.lake.clone();
    let out = load_config.out.clone();
    let held = permit().await;
    let mut loaded = load_blocking(load_config, extracted.run_id.clone(), Some(extracted.clone())).await?;
    drop(held);
    let actions = match actions {
        Some((action_config, reviewed)) => {
            let begun = crate::action::begin(&action_config, &reviewed)?;
            if let Some(lake) = lake.as_ref().filter(|_| begun.to_send() > 0) {
                // The intents reach the lake before the first row is sent: a run on another
                // `--out` then finds them even if this one dies with its `--out`.
                let staged = out.root().join(".lake-intents");
                let _ = std::fs::remove_dir_all(&staged);
                begun.with_intents(&action_config, &reviewed, |conn| {
                    Ok(crate::load::lake::stage_table(conn, &lake.org, crate::load::lake::JOURNAL, &staged)?)
                })?;
                let _held = permit().await;
                let committed = crate::load::lake::commit_tables(lake, &staged, &[crate::load::lake::JOURNAL])
                    .await
                    .map_err(|e| {
                        crate::load::LoadError::Lake(format!(
                            "cannot record the actions' intents in the lake before sending them, so nothing was sent: {e}"
                        ))
                    })?;
                let _ = std::fs::remove_dir_all(&staged);
                tracing::info!(organization = %lake.org, rows = begun.to_send(), version = ?committed.versions.get(crate::load::lake::JOURNAL), "the actions' intents are in the lake's journal");
            }
            Some(crate::action::send_all(begun, &action_config, &reviewed, client, stop).await?)
        }
        None => None,
    };
    // The lake gets the actions' results and outcomes too, and its `runs` row last: the sync is
    // complete.
    if let Some(lake) = &lake {
        let _held = permit().await;
        loaded.lake = Some(push_to_lake(&out, lake).await?);
    }
    Ok(RunReport { extract: extracted, load: loaded, actions, restored })
}

/// What a run restored from the lake into an `--out` that did not have its organization's
/// state.
#[derive(Clone, Debug, Serialize)]
pub struct RestoreReport {
    pub url: String,
    pub organization: String,
    /// The Delta version each restored table was read at.
    pub versions: std::collections::BTreeMap<String, u64>,
    /// Rows restored per table.
    pub rows: std::collections::BTreeMap<String, u64>,
    /// Why: the `--out` held no loaded run, or the lake holds runs it has not loaded.
    pub why: String,
}

/// The run ids of `runs` and of `action_journal` in the writer's warehouse in `out` (blocking:
/// DuckDB); none without one.
fn local_run_ids(out: &crate::out::OutDir) -> Result<[BTreeSet<String>; 2], Error> {
    use crate::load::warehouse;
    if !warehouse::writer_path(out).exists() && !warehouse::published_path(out).exists() {
        return Ok(Default::default());
    }
    let conn = warehouse::open_writer(out)?;
    let ids = |table: &str| -> Result<BTreeSet<String>, Error> {
        let read = |e: duckdb::Error| crate::load::LoadError::db(format!("read `{table}`"), e);
        let mut stmt = conn.prepare(&format!("SELECT DISTINCT run_id FROM {table}")).map_err(read)?;
        let ids = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .and_then(|rows| rows.collect::<Result<BTreeSet<_>, _>>())
            .map_err(read)?;
        Ok(ids)
    };
    Ok([ids("runs")?, ids(crate::load::lake::JOURNAL)?])
}

/// The run ids in a lake table's files of one organization (blocking: DuckDB in memory).
fn lake_run_ids(t: &crate::query::lake::TableFiles) -> Result<BTreeSet<String>, Error> {
    let read = |e: duckdb::Error| crate::load::LoadError::db(format!("read the lake's `{}`", t.table), e);
    if t.files.is_empty() {
        return Ok(BTreeSet::new());
    }
    let conn = duckdb::Connection::open_in_memory().map_err(read)?;
    crate::load::warehouse::no_downloads(&conn).map_err(read)?;
    let list: Vec<String> =
        t.files.iter().map(|f| format!("'{}'", f.display().to_string().replace('\'', "''"))).collect();
    let mut stmt = conn
        .prepare(&format!("SELECT DISTINCT run_id FROM read_parquet([{}], union_by_name = true)", list.join(", ")))
        .map_err(read)?;
    let ids = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .and_then(|rows| rows.collect::<Result<BTreeSet<_>, _>>())
        .map_err(read)?;
    Ok(ids)
}

/// Restores the organization's state from the lake into the writer's warehouse when `out`
/// does not have it: when `out` has loaded no run while the lake's `runs` or `action_journal`
/// has rows of the organization, or when either lists a run that `out` does not know (another
/// `--out` synced the organization, or sent its actions, since: shards changed and changed
/// back). `None` when there is nothing to restore. The caller holds the `--out` lock.
///
/// The lake's rows replace the warehouse's tables and ledger; the journal and the actions'
/// results are merged (a row of either kept), so no record of a write is lost. Columns are
/// matched by name: a lake file written at an older schema restores with the missing columns
/// NULL (as the warehouse's migrations leave them), and a column this version does not know is
/// left out. It all happens in one transaction, so a restore that fails leaves the warehouse as
/// it was, and the next run restores again.
async fn restore_from_lake(
    out: &crate::out::OutDir,
    lake: &crate::load::lake::LakeConfig,
) -> Result<Option<RestoreReport>, Error> {
    use crate::query::lake::{resolve_tables, LakeSource};
    let o = out.clone();
    let [local_runs, local_journal] = blocking("restore check", move || local_run_ids(&o)).await?;
    let cache = out.root().join(".lake-restore");
    let source =
        LakeSource { url: lake.url.clone(), org: Some(lake.org.clone()), cache: cache.clone(), at_versions: None };
    let failed = |e: crate::query::QueryError| {
        crate::load::LoadError::Lake(format!(
            "cannot read organization `{}`'s state from the lake `{}`, which a run reads before it sends anything (to restore `{}` if it is empty or behind): {e}",
            lake.org,
            lake.url,
            out.root().display()
        ))
    };
    // `runs` and the journal first: with neither there is nothing to restore. (A run that died
    // after its actions' intents reached the lake, before its `runs` row, left only the journal.)
    // `runs` is committed last by every writer, so the tables read after it hold at least the
    // syncs it lists.
    let first = ["runs", crate::load::lake::JOURNAL];
    let marks = resolve_tables(&source, &first, true).await.map_err(failed)?;
    let why = if local_runs.is_empty() {
        if marks.tables.iter().all(|t| t.files.is_empty()) {
            return Ok(None);
        }
        "`--out` held no loaded run of the organization".to_owned()
    } else {
        let lake_tables = marks.tables.clone();
        let unseen = blocking("restore check", move || -> Result<BTreeSet<String>, Error> {
            let mut unseen = BTreeSet::new();
            for t in &lake_tables {
                let local = if t.table == "runs" { &local_runs } else { &local_journal };
                unseen.extend(lake_run_ids(t)?.difference(local).cloned());
            }
            Ok(unseen)
        })
        .await?;
        match unseen.last() {
            None => return Ok(None),
            Some(last) => format!(
                "the lake holds {} run(s) of the organization that `--out` does not know (the last `{last}`): another `--out` synced it or sent its actions since",
                unseen.len()
            ),
        }
    };
    let mut others = crate::load::lake::committed_tables();
    others.retain(|t| !first.contains(t));
    let mut snapshot = resolve_tables(&source, &others, true).await.map_err(failed)?;
    snapshot.tables.extend(marks.tables);
    let (o, tables) = (out.clone(), snapshot.tables);
    let mut report = blocking("restore", move || restore_tables(&o, &tables)).await?;
    report.url = lake.url.clone();
    report.organization = lake.org.clone();
    tracing::warn!(
        organization = %lake.org,
        out = %out.root().display(),
        runs = report.rows.get("runs").copied().unwrap_or_default(),
        journal = report.rows.get(crate::load::lake::JOURNAL).copied().unwrap_or_default(),
        "{why}: restored its warehouse, runs ledger and action journal from the lake"
    );
    report.why = why;
    Ok(Some(report))
}

/// Inserts each table's lake files into the writer's warehouse, by column name, in one
/// transaction, and publishes the warehouse (blocking: DuckDB).
fn restore_tables(out: &crate::out::OutDir, tables: &[crate::query::lake::TableFiles]) -> Result<RestoreReport, Error> {
    use crate::load::{warehouse, LoadError};
    let conn = warehouse::open_writer(out)?;
    let quote = |s: &str| format!("'{}'", s.replace('\'', "''"));
    let ident = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let columns = |sql: &str, what: &str| -> Result<Vec<String>, LoadError> {
        let mut stmt = conn.prepare(sql).map_err(|e| LoadError::db(format!("read the columns of {what}"), e))?;
        let names = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(|e| LoadError::db(format!("read the columns of {what}"), e))?;
        Ok(names)
    };
    let mut report = RestoreReport {
        url: String::new(),
        organization: String::new(),
        versions: Default::default(),
        rows: Default::default(),
        why: String::new(),
    };
    let insert = |report: &mut RestoreReport| -> Result<(), LoadError> {
        for t in tables {
            // What the lake holds of the organization is its state; a record of a write is
            // never dropped.
            let merged = [crate::load::lake::JOURNAL, "action_results"].contains(&t.table);
            if !merged {
                conn.execute(&format!("DELETE FROM {}", t.table), [])
                    .map_err(|e| LoadError::db(format!("restore `{}` from the lake", t.table), e))?;
            }
            if t.files.is_empty() {
                continue;
            }
            let files: Vec<String> = t.files.iter().map(|f| quote(&f.display().to_string())).collect();
            // Partition values are in the paths, not in the files: the files hold exactly the
            // warehouse's columns (of the schema they were written at).
            let source = format!("read_parquet([{}], union_by_name = true)", files.join(", "));
            let in_lake = columns(&format!("SELECT column_name FROM (DESCRIBE SELECT * FROM {source})"), t.table)?;
            let in_warehouse = columns(
                &format!(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = {} ORDER BY ordinal_position",
                    quote(t.table)
                ),
                t.table,
            )?;
            let common: Vec<String> = in_warehouse.iter().filter(|c| in_lake.contains(c)).map(|c| ident(c)).collect();
            let list = common.join(", ");
            let rows = conn
                .execute(&format!("INSERT OR IGNORE INTO {} ({list}) SELECT {list} FROM {source}", t.table), [])
                .map_err(|e| LoadError::db(format!("restore `{}` from the lake", t.table), e))?;
            report.rows.insert(t.table.to_owned(), rows as u64);
            report.versions.insert(t.table.to_owned(), t.version);
        }
        // What the warehouse's migrations give rows written before their columns existed.
        conn.execute_batch(
            "UPDATE runs SET warnings = 0 WHERE warnings IS NULL;\n\
             UPDATE runs SET sync_mode = 'full' WHERE sync_mode IS NULL;",
        )
        .map_err(|e| LoadError::db("restore `runs` from the lake", e))
    };
    conn.execute_batch("BEGIN TRANSACTION").map_err(|e| LoadError::db("restore from the lake", e))?;
    if let Err(e) = insert(&mut report) {
        let _ = conn.execute_batch("ROLLBACK");
        return Err(e.into());
    }
    conn.execute_batch("COMMIT").map_err(|e| LoadError::db("restore from the lake", e))?;
    warehouse::publish(conn, out)?;
    Ok(report)
}

/// What a sync takes from the warehouse before it sends anything (blocking: DuckDB): the
/// previous sync's lists, for a quick sync (a full sync compares with nothing), and the last
/// content day loaded, where incremental content starts. Read from `writer` when the caller has
/// it open, else from the freshest file read-only. The extract config comes back with the cursor.
fn read_previous(
    config: &ExtractConfig,
    writer: Option<&duckdb::Connection>,
) -> Result<(ExtractConfig, Option<crate::extract::Snapshot>), Error> {
    let statuses: Vec<String> = config.statuses.iter().map(|s| s.to_string()).collect();
    let read = |conn: &duckdb::Connection| -> Result<_, Error> {
        let snapshot = match config.sync {
            SyncMode::Full => None,
            _ => crate::load::warehouse::snapshot(conn, &statuses, config.campaign_id)?,
        };
        Ok((crate::load::warehouse::content_cursor(conn)?, snapshot))
    };
    let (content_cursor, snapshot) = match writer {
        Some(conn) => read(conn)?,
        None => match crate::load::warehouse::open_latest_read_only(&config.out)? {
            Some((conn, _)) => read(&conn)?,
            None => (None, None),
        },
    };
    Ok((ExtractConfig { content_cursor, ..config.clone() }, snapshot))
}

async fn run_all(args: &RunArgs, global: &GlobalArgs) -> Result<u8, Error> {
    let (client_config, (config, load_config)) =
        validate_both(global.client_config(), validate_both(args.extract.config(global), args.options.config(global)))?;
    if config.plan_only {
        return Err(Error::Config(vec!["`--plan-only` belongs to `creator-etl extract`".into()]));
    }
    // The reviewed file is validated before anything is fetched.
    let actions = args.actions.as_deref().map(|file| args.guards.config(file, global)).transpose()?;
    let client = Client::new(client_config.pacing_memory_in(&config.out.state_dir()))?;
    let _lock = config.out.lock("run")?;
    let (client, stop) = stop_after_in_flight(client);
    let report = pipeline(&client, &config, load_config, actions, stop, None).await?;
    print_json(&report)?;
    Ok(report.exit_code())
}

async fn fleet_run(args: &FleetRunArgs, global: &GlobalArgs) -> Result<u8, Error> {
    let (jobs, options) = args.config(global)?;
    if jobs.is_empty() {
        return Err(Error::Config(vec!["no organization selected: check `--only` and `--shard`".into()]));
    }
    let report = crate::fleet::run::run(jobs, &options, stop_signal()).await?;
    eprint!("{}", report.summary());
    print_json(&report)?;
    Ok(report.exit_code)
}

/// One organization's line of `fleet status`.
#[derive(Debug, Serialize)]
pub struct FleetStatusRow {
    pub name: String,
    pub dir: std::path::PathBuf,
    #[serde(flatten)]
    pub status: crate::fleet::run::OrgStatus,
    /// The raw run the next sync resumes, if any.
    pub resumable_run: Option<String>,
    /// Why the status file could not be read as a whole, when it could not.
    pub status_error: Option<String>,
}

/// `fleet status`: reads the fleet file alone (no key, no actions file: it sends nothing) and
/// each organization's status file. A status file that cannot be read is shown with what could
/// be read of it, and why the rest could not (`status_error`, and a warning).
fn fleet_status(args: &FleetSelect, global: &GlobalArgs) -> Result<u8, Error> {
    let rows: Vec<FleetStatusRow> = args
        .select(crate::fleet::Check::FileOnly)?
        .into_iter()
        .map(|org| {
            let name = org.name;
            let dir = crate::fleet::run::org_dir(&global.out, &name);
            let (status, status_error) = crate::fleet::run::read_status(&dir);
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

async fn query(args: &QueryArgs, global: &GlobalArgs) -> Result<u8, Error> {
    let config = args.config(global)?;
    let format = config.format;
    print_text(&crate::query::render(&crate::query::run(config).await?, format)?)?;
    Ok(exit::OK)
}

fn actions_plan(args: &ActionsArgs, global: &GlobalArgs) -> Result<u8, Error> {
    let (config, reviewed) = args.guards.config(&args.file, global)?;
    print_text(&crate::action::plan(&config, &reviewed)?)?;
    Ok(exit::OK)
}

async fn actions_apply(args: &ActionsArgs, global: &GlobalArgs) -> Result<u8, Error> {
    let (client_config, (config, reviewed)) =
        validate_both(global.client_config(), args.guards.config(&args.file, global))?;
    let client = Client::new(client_config.pacing_memory_in(&config.out.state_dir()))?;
    let _lock = config.out.lock("actions")?;
    let report = crate::action::apply(&config, &reviewed, &client, stop_signal()).await?;
    print_json(&report)?;
    Ok(actions_exit_code(&report))
}

/// Prints the summary of an actions run on stderr and picks its exit code: 4 when the key was
/// refused, 130 when interrupted, 3 when any approved row did not succeed.
pub(crate) fn actions_exit_code(report: &ActionReport) -> u8 {
    eprintln!("{}", crate::action::summary(report));
    if report.stopped_by_auth {
        eprintln!("error: {}", report.stopped.as_deref().unwrap_or("the API key was refused"));
    }
    actions_code(report)
}

/// The exit code of an actions run, without the summary.
pub(crate) fn actions_code(report: &ActionReport) -> u8 {
    if report.stopped_by_auth {
        exit::AUTH
    } else if report.stopped.is_some() {
        exit::INTERRUPTED
    } else if report.all_ok() {
        exit::OK
    } else {
        exit::ACTIONS_FAILED
    }
}

async fn extract(args: &ExtractArgs, global: &GlobalArgs) -> Result<u8, Error> {
    let (client_config, config) = validate_both(global.client_config(), args.config(global))?;
    let client = Client::new(client_config.pacing_memory_in(&config.out.state_dir()))?;
    let _lock = config.out.lock("extract")?;
    let extract_config = config.clone();
    let (config, snapshot) = blocking("warehouse", move || read_previous(&extract_config, None)).await?;
    let (client, stop) = stop_after_in_flight(client);
    let begun = crate::extract::begin(&config, &client, stop, snapshot.as_ref()).await?;
    eprintln!("{}", begun.plan());
    let report = begun.finish().await?;
    print_json(&report)?;
    Ok(exit::OK)
}

/// What `check` prints on stdout.
#[derive(Debug, Serialize)]
pub struct CheckReport {
    pub base_url: String,
    pub key: &'static str,
    /// Pending applications, from the list's `meta.row_count`.
    pub pending_applications: u64,
    pub requests: MetricsSnapshot,
}

async fn check(global: &GlobalArgs) -> Result<u8, Error> {
    let config = global.client_config()?;
    let client = Client::new(config)?;
    let page = client
        .list_applications(&ApplicationsQuery { per_page: 1, ..ApplicationsQuery::page(ApplicationStatus::Pending, 1) })
        .await?;
    let report = CheckReport {
        base_url: client.base_url().to_string(),
        key: "accepted",
        pending_applications: page.value.meta.row_count,
        requests: client.metrics(),
    };
    print_json(&report)?;
    Ok(exit::OK)
}

fn print_json<T: Serialize>(value: &T) -> Result<(), Error> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|e| Error::Api(ApiError::InvalidRequest(format!("cannot encode the report: {e}"))))?;
    text.push('\n');
    print_text(&text)
}

/// Writes data to stdout, where only data and reports go.
fn print_text(text: &str) -> Result<(), Error> {
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .map_err(|source| Error::Io { context: "cannot write to stdout".into(), source })
}

async fn emulator(args: &EmulatorArgs, global: &GlobalArgs) -> Result<u8, Error> {
    let (config, addr) = args.config(global)?;
    let emu = Emulator::start(&config, addr).await.map_err(|source| Error::Bind { addr: addr.to_string(), source })?;
    {
        // The base URL alone on stdout's first line, so scripts can use `--port 0`.
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", emu.base_url);
        let _ = out.flush();
    }
    eprintln!(
        "emulator serving {} applications at {}\n  full-access key:  {}\n  read-only key:    {}\n  other-org key:    {}\n  rate policy: {} ms spacing, {} requests per {} s (0: none); payout marks 2 s apart\n  press Ctrl-C to stop",
        config.data.applications,
        emu.base_url,
        config.keys.full,
        config.keys.read_only,
        config.keys.other_org,
        global.min_interval_ms,
        global.hourly_cap,
        global.cap_window_s,
    );
    if config.data.organizations > 0 {
        eprintln!(
            "  {} numbered organizations of {} applications: keys emu-org-1-key … emu-org-{}-key",
            config.data.organizations, config.data.org_applications, config.data.organizations
        );
    }
    wait_for_shutdown().await;
    tracing::info!("emulator stopping");
    emu.stop().await;
    Ok(exit::OK)
}

async fn wait_for_shutdown() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
