//! One organization's sync: the layer the `run` command, the demo and the fleet (once per
//! organization) call. It owns the preflight, the quick sync's snapshot, extract, transform and
//! load, the reviewed actions, the lake push, and the exit-code policy of a finished sync.

mod restore;
pub mod stages;

use futures_util::future::BoxFuture;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::action::{ActionConfig, ActionReport, Reviewed};
use crate::api::Client;
use crate::extract::{ExtractConfig, ExtractReport, Extracted, Snapshot};
use crate::load::{LoadConfig, LoadReport};
use crate::{exit, Error};

pub use restore::{restore_from_lake, RestoreReport};
pub use stages::{Stage, StageLog};

/// What one organization's sync does, validated before anything is sent.
#[derive(Clone, Debug)]
pub struct SyncJob {
    pub extract: ExtractConfig,
    pub load: LoadConfig,
    /// The reviewed corrections to apply after the load, if any.
    pub actions: Option<(ActionConfig, Reviewed)>,
}

/// What one organization's sync did: every stage's report (what `run` prints).
#[derive(Debug, Serialize)]
pub struct SyncReport {
    pub extract: ExtractReport,
    pub load: LoadReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actions: Option<ActionReport>,
    /// With `--lake`: the organization's state this run restored from the lake, because its
    /// `--out` did not have it (no loaded run, or fewer than the lake).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restored: Option<RestoreReport>,
}

impl SyncReport {
    /// The exit code of a finished run: the actions stage's, if any.
    pub fn exit_code(&self) -> u8 {
        self.actions.as_ref().map_or(exit::OK, actions_code)
    }
}

/// A warehouse that many organizations' syncs share (a fleet's), through one organization's
/// handle: it reads the organization's previous state, and loads its extracted run together
/// with other organizations' runs.
pub trait SharedWarehouse: Send + Sync {
    /// What [`read_previous`] reads from an organization's own warehouse: the quick sync's
    /// snapshot and the content cursor.
    fn previous(&self, config: ExtractConfig) -> BoxFuture<'_, Result<(ExtractConfig, Option<Snapshot>), Error>>;
    /// Loads the organization's extracted run (its landing, checked against `report`: `landed`
    /// when the extract hands it over from memory, else read back);
    /// resolves when the batch it joined has committed, and with a lake, when the batch's lake
    /// commit has landed. Marks the load done in `log` at the warehouse's commit, so that a
    /// failure after it is the lake stage's.
    fn load<'a>(
        &'a self,
        report: ExtractReport,
        landed: Option<Extracted>,
        log: &'a StageLog,
    ) -> BoxFuture<'a, Result<LoadReport, Error>>;
    /// Takes the actions' results of the organization's own warehouse (where its journal is).
    fn record_actions(&self) -> BoxFuture<'_, Result<(), Error>>;
    /// The organization's runs that the shared warehouse has loaded: what a restore from the
    /// lake compares with.
    fn known_runs(&self) -> BoxFuture<'_, Result<std::collections::BTreeSet<String>, Error>>;
    /// Takes what a restore from the lake wrote into the organization's own warehouse: every
    /// table, or (`everything` false) its actions' results alone.
    fn take_restored(&self, everything: bool) -> BoxFuture<'_, Result<(), Error>>;
    /// Bounds the organizations' own CPU- and store-heavy steps outside the shared warehouse
    /// (the restore check against the lake, their actions' lake commits).
    fn limit(&self) -> &tokio::sync::Semaphore;
    /// Stages the organization's rows of the named lake tables (`action_results`, `runs`) from
    /// the shared warehouse under `dir`, for its lake commit after its actions.
    fn stage_for_lake(&self, tables: Vec<&'static str>, dir: std::path::PathBuf) -> BoxFuture<'_, Result<(), Error>>;
}

/// How a sync shares the machine with other organizations' syncs.
#[derive(Clone, Copy, Default)]
pub enum Sharing<'a> {
    /// Alone (`run`, the demo): its own warehouse, and its plan printed.
    #[default]
    Alone,
    /// One of a fleet's, with its own warehouse: the CPU-heavy transform, load and lake commit
    /// each hold a permit of the semaphore (the fleet bounds them; its extracts only wait).
    OwnWarehouse(&'a tokio::sync::Semaphore),
    /// One of a fleet's, loaded into the fleet's warehouse.
    Shared(&'a dyn SharedWarehouse),
}

impl SyncJob {
    /// The stages this sync does, in order: what its [`StageLog`] marks pending before it starts.
    pub fn stages(&self) -> Vec<Stage> {
        let mut stages = vec![Stage::Extract, Stage::Load];
        if self.load.lake.is_some() {
            stages.push(Stage::Lake);
        }
        if self.actions.is_some() {
            stages.push(Stage::Actions);
        }
        stages
    }
}

/// One organization's sync: restore from the lake if `--out` lacks the organization's state, the
/// preflight, extract, transform and load, the reviewed actions if given, and the lake push. The
/// caller validated everything and holds the `--out` lock. `log` learns the stage the sync is in
/// as it goes, and each stage it completes (the caller marks a failure with [`StageLog::fail`]).
pub async fn run(
    job: SyncJob,
    client: &Client,
    stop: CancellationToken,
    sharing: Sharing<'_>,
    log: &StageLog,
) -> Result<SyncReport, Error> {
    let SyncJob { extract: config, load: load_config, actions } = job;
    let config = &config;
    let (loads, shared) = match sharing {
        Sharing::Alone => (None, None),
        Sharing::OwnWarehouse(loads) => (Some(loads), None),
        Sharing::Shared(w) => (Some(w.limit()), Some(w)),
    };
    let permit = || async {
        match loads {
            Some(s) => s.acquire().await.ok(),
            None => None,
        }
    };
    // An `--out` without the organization's state (a fresh volume, another shard, or one the
    // lake has moved past) first takes it from the lake: its journal decides what the actions
    // send, its `applications` and `runs` what the quick sync compares with.
    if load_config.lake.is_some() {
        log.enter(Stage::Lake);
    }
    let restored = match (&load_config.lake, shared) {
        (Some(lake), None) => {
            let _held = permit().await;
            restore::restore_from_lake(&load_config.out, lake, None).await?
        }
        // A fleet warehouse holds the organization's data, its own state the journal: the
        // restore compares the lake's runs with the fleet warehouse's, restores into its own
        // warehouse as ever, and the fleet warehouse takes what was restored from there.
        (Some(lake), Some(w)) => {
            let _held = permit().await;
            let known = w.known_runs().await?;
            let restored = restore::restore_from_lake(&load_config.out, lake, Some(known)).await?;
            if let Some(r) = &restored {
                w.take_restored(!r.journal_only).await?;
            }
            restored
        }
        (None, _) => None,
    };
    // Before the extract spends any request: the warehouse must be writable (a reader holding
    // the writer's file is reported now, exit 5, not after an hour of requests), and an actions
    // file must pass its guards.
    let writable = load_config.out.clone();
    let checked_actions = actions.clone();
    // The actions' checks open the journal in the writer's warehouse, and so check the load's
    // too: a failure there is the actions stage's.
    log.enter(if actions.is_some() { Stage::Actions } else { Stage::Load });
    let extract_config = config.clone();
    let snapshot = match shared {
        None => {
            let _held = permit().await;
            blocking("preflight", move || -> Result<_, Error> {
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
            .await?
        }
        Some(w) => {
            // The journal stays in the organization's own warehouse; its data is the fleet's.
            if let Some((config, reviewed)) = checked_actions {
                let _held = permit().await;
                blocking("preflight", move || crate::action::preflight(&config, &reviewed)).await?;
            }
            // The writer's thread answers the organizations one at a time, reading the next
            // ones' previous rows with each read: asked without a permit, so that a fleet's
            // organizations all ask at once and start their extracts as soon as answered.
            w.previous(extract_config).await?
        }
    };
    let (config, snapshot) = snapshot;
    log.enter(Stage::Extract);
    let begun = crate::extract::begin(&config, client, stop.clone(), snapshot.as_ref()).await?;
    // A fleet's organizations plan at once, so there the plan is only logged (the extract's
    // `plan` line), never printed interleaved.
    if matches!(sharing, Sharing::Alone) {
        eprintln!("{}", begun.plan());
    }
    // What the landing holds comes along from memory: the load does not read it back.
    let (extracted, landed) = begun.finish_landed().await?;
    log.done_then_enter(Stage::Extract, Some(&extracted.run_id), Stage::Load);
    let lake = load_config.lake.clone();
    let out = load_config.out.clone();
    let mut loaded = match shared {
        None => {
            // A landing handed over waits for a load's place in memory only if one is free now:
            // in a fleet of organizations' own warehouses, one that waits is read back at its
            // turn, so that no more landings are held than loads run at once.
            let (_held, landed) = match loads.map(tokio::sync::Semaphore::try_acquire) {
                Some(Ok(held)) => (Some(held), landed),
                Some(Err(_)) => {
                    // Freed now, not when the sync ends (a binding lives to the end of its scope).
                    drop(landed);
                    (permit().await, None)
                }
                None => (None, landed),
            };
            load_blocking(load_config, extracted.run_id.clone(), Some(extracted.clone()), landed).await?
        }
        Some(w) => w.load(extracted.clone(), landed, log).await?,
    };
    log.done(Stage::Load, Some(&extracted.run_id));
    if shared.is_some() && lake.is_some() && actions.is_none() {
        // A fleet warehouse commits its batch to the lake before the load resolves; an
        // organization with actions gets its `runs` row there after them, below.
        log.done(Stage::Lake, Some(&extracted.run_id));
    }
    let actions = match actions {
        Some((action_config, reviewed)) => {
            log.enter(Stage::Actions);
            let begun = crate::action::begin(&action_config, &reviewed)?;
            if let Some(lake) = lake.as_ref().filter(|_| begun.to_send() > 0) {
                // The intents reach the lake before the first row is sent: a run on another
                // `--out` then finds them even if this one dies with its `--out`.
                let staged = out.lake_intents_dir();
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
            let report = crate::action::send_all(begun, &action_config, &reviewed, client, stop).await?;
            if let Some(w) = shared {
                w.record_actions().await?;
            }
            log.actions_ended(&report, action_config.only.is_some());
            Some(report)
        }
        None => None,
    };
    // The lake gets the actions' results and outcomes too, and its `runs` row last: the sync is
    // complete. In a fleet warehouse, the organization's batch committed its data and `runs` row
    // with the load; what the actions added (the journal, in its own warehouse, and their
    // results) follows.
    if lake.is_some() {
        log.enter(Stage::Lake);
    }
    match (&lake, shared) {
        (Some(lake), None) => {
            let _held = permit().await;
            loaded.lake = Some(push_to_lake(&out, lake, &crate::load::catalog::committed_tables(), None).await?);
        }
        (Some(lake), Some(w)) if actions.is_some() => {
            // The journal from the organization's own warehouse, then its actions' results and
            // its `runs` row (the completion marker) from the shared one.
            let _held = permit().await;
            let from_shared: (&dyn SharedWarehouse, &[&'static str]) = (w, &["action_results", "runs"]);
            let pushed = push_to_lake(&out, lake, &[crate::load::lake::JOURNAL], Some(from_shared)).await?;
            if let Some(report) = &mut loaded.lake {
                report.absorb(pushed);
            }
        }
        _ => {}
    }
    if lake.is_some() {
        log.done(Stage::Lake, Some(&extracted.run_id));
    }
    Ok(SyncReport { extract: extracted, load: loaded, actions, restored })
}

/// Runs `work` on a blocking thread (DuckDB and Polars work synchronously); `what` names it if
/// the thread itself fails.
pub(crate) async fn blocking<T, E>(what: &str, work: impl FnOnce() -> Result<T, E> + Send + 'static) -> Result<T, Error>
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

/// Loads on a blocking thread: `landed`, what the extract just landed, from memory, else the
/// landing read back ([`crate::load::read_checked`]).
pub(crate) async fn load_blocking(
    config: LoadConfig,
    run_id: String,
    report: Option<ExtractReport>,
    landed: Option<Extracted>,
) -> Result<LoadReport, Error> {
    blocking("load", move || crate::load::run(&config, &run_id, report.as_ref(), landed)).await
}

/// Commits the organization's rows of `tables` (of [`crate::load::catalog::committed_tables`], in
/// its order) from its warehouse in `out` to the lake ([`crate::load::lake`]), then those of
/// `shared`'s tables from a shared warehouse: staged by DuckDB on a blocking thread (or the
/// shared warehouse's), committed by delta-rs here.
pub async fn push_to_lake(
    out: &crate::out::OutDir,
    lake: &crate::load::lake::LakeConfig,
    tables: &[&'static str],
    shared: Option<(&dyn SharedWarehouse, &[&'static str])>,
) -> Result<crate::load::lake::LakeReport, Error> {
    let staged = out.lake_staging_dir();
    let (o, org, dir, staged_tables) = (out.clone(), lake.org.clone(), staged.clone(), tables.to_vec());
    blocking("lake staging", move || crate::load::lake::stage(&o, &org, &dir, &staged_tables)).await?;
    let mut committed = tables.to_vec();
    if let Some((w, shared_tables)) = shared {
        w.stage_for_lake(shared_tables.to_vec(), staged.clone()).await?;
        committed.extend(shared_tables);
    }
    let report = crate::load::lake::commit_tables(lake, &staged, &committed).await?;
    let _ = std::fs::remove_dir_all(&staged);
    Ok(report)
}

/// What a sync takes from the warehouse before it sends anything (blocking: DuckDB): the
/// previous sync's lists (a quick sync compares with them; a full one's closing check looks for
/// what vanished from them), and the last content day loaded, where incremental content starts. Read from `writer` when the caller has
/// it open, else from the freshest file read-only. The extract config comes back with the cursor.
pub fn read_previous(
    config: &ExtractConfig,
    writer: Option<&duckdb::Connection>,
) -> Result<(ExtractConfig, Option<Snapshot>), Error> {
    match writer {
        Some(conn) => Ok(read_previous_from(conn, config)?),
        None => match crate::load::warehouse::open_latest_read_only(&config.out)? {
            Some((conn, _)) => Ok(read_previous_from(&conn, config)?),
            None => Ok((config.clone(), None)),
        },
    }
}

/// [`read_previous`] from the warehouse `conn` (or one organization's views of a fleet's).
pub fn read_previous_from(
    conn: &duckdb::Connection,
    config: &ExtractConfig,
) -> Result<(ExtractConfig, Option<Snapshot>), crate::load::LoadError> {
    previous_with(
        config,
        |statuses, campaign| crate::load::warehouse::snapshot(conn, statuses, campaign),
        || crate::load::warehouse::content_cursor(conn),
    )
}

/// [`read_previous`] from an organization's rows of a fleet warehouse, read with other
/// organizations' ([`crate::load::warehouse::previous_rows`]); `conn` names the warehouse in an
/// error.
pub fn previous_from_rows(
    rows: &crate::load::warehouse::PreviousRows,
    conn: &duckdb::Connection,
    config: &ExtractConfig,
) -> Result<(ExtractConfig, Option<Snapshot>), crate::load::LoadError> {
    previous_with(config, |statuses, campaign| Ok(rows.snapshot(statuses, campaign)), || rows.content_cursor(conn))
}

/// What a sync reads before its first request, given how to read the snapshot and the cursor:
/// the previous sync's lists (a quick sync compares with them; a full one only checks that
/// nothing of them vanished unseen, see the extract's closing check), and the last content day
/// loaded unless `--from` names where content starts.
fn previous_with(
    config: &ExtractConfig,
    snapshot: impl FnOnce(&[String], Option<i64>) -> Result<Option<Snapshot>, crate::load::LoadError>,
    cursor: impl FnOnce() -> Result<Option<chrono::NaiveDate>, crate::load::LoadError>,
) -> Result<(ExtractConfig, Option<Snapshot>), crate::load::LoadError> {
    let statuses: Vec<String> = config.statuses.iter().map(|s| s.to_string()).collect();
    let snapshot = snapshot(&statuses, config.campaign_id)?;
    // With `--from`, the content starts there: the ledger's cursor is not read, so a damaged
    // ledger row never stops a run that names its range.
    let content_cursor = match config.from {
        Some(_) => None,
        None => cursor()?,
    };
    Ok((ExtractConfig { content_cursor, ..config.clone() }, snapshot))
}

/// The exit code of an actions run: 4 when the key was refused, 130 when interrupted, 3 when any
/// approved row did not succeed, 0 otherwise.
pub fn actions_code(report: &ActionReport) -> u8 {
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
