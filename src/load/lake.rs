//! The shared lake: every warehouse table as a Delta table under `--lake URL`
//! (`file:///path` or `s3://bucket/prefix`), written with delta-rs so that many processes and
//! engines can share it.
//!
//! A load first goes into the DuckDB warehouse as always (one organization per `--out`). Then
//! each table's rows of that organization are staged as Parquet by DuckDB, read back as Arrow,
//! and committed to `<lake>/<table>` as one Delta overwrite with the predicate
//! `organization = '<org>'`: exactly that organization's rows are replaced, atomically, and
//! every other organization's rows stay. Tables are partitioned by `organization` (and
//! `content_daily` and `wow_deltas` also by `year`), so organizations' commits touch disjoint
//! files. `action_journal` is committed first (what an actions stage sent reaches the lake before
//! anything else) and `runs` last: its row for a run is the marker that the organization's sync
//! is complete. A run on an `--out` without the organization's state restores it from these
//! tables ([`crate::sync`]).
//!
//! The overwrite is written with delta-rs's writer and transaction API, without a query engine:
//! the new files are written (partitioned, with statistics), and one commit removes the
//! organization's files of the snapshot it read and adds the new ones ([`commit_table`]).
//!
//! Concurrency is Delta's own: commits are atomic and a commit lands only on the version it read
//! (on S3 through conditional writes). A commit that conflicts (two writers creating a table,
//! or the same organization at once) is retried on a fresh snapshot by the policy [`CONFLICTS`];
//! after that the load fails (exit 1) and the table keeps its last committed version.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use deltalake::arrow::record_batch::RecordBatch;
use deltalake::kernel::engine::arrow_conversion::TryFromArrow;
use deltalake::kernel::transaction::{CommitBuilder, CommitConflictError, CommitProperties, TransactionError};
use deltalake::kernel::{normalize_for_delta, Action, MetadataExt, StructField, StructType};
use deltalake::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use deltalake::protocol::{DeltaOperation, SaveMode};
use deltalake::writer::{DeltaWriter, RecordBatchWriter};
use deltalake::{DeltaTable, DeltaTableError};
use serde::Serialize;

use super::{catalog, warehouse, LoadError};
use crate::api::RetryPolicy;
use crate::out::{io_err, OutDir};

/// How a table's commit that conflicts with another writer's is retried, on a fresh snapshot:
/// the client's retry policy ([`RetryPolicy`]: exponential backoff with equal jitter), at most 10
/// attempts in all and no new one after 60 s, the first backoff 100 ms, the longest 3.2 s.
pub const CONFLICTS: RetryPolicy = RetryPolicy {
    max_attempts: 10,
    deadline: Duration::from_secs(60),
    base_backoff: Duration::from_millis(100),
    max_backoff: Duration::from_millis(3200),
};

/// Immediate retries of one table's commit after losing the race to other organizations'
/// commits (which leave this organization's files as they were). A lost race usually means
/// another writer landed; this bounds a pathological stream of writers, or a store that keeps
/// refusing the write.
const REBASES: u32 = 1_000;

/// Where the lake is and whose rows a load replaces.
#[derive(Clone, Debug)]
pub struct LakeConfig {
    /// `file:///…` or `s3://…`, without a trailing slash.
    pub url: String,
    /// The organization's slug: the value of every row's `organization` column.
    pub org: String,
    /// Commit to an `s3://` lake whose endpoint failed the conditional-write probe
    /// ([`check_conditional_writes`]).
    pub unconditional_writes_ok: bool,
}

/// Checks, once per process and lake, that an `s3://` lake's endpoint refuses a second
/// create-if-absent write of one object. Delta's commits on object storage are atomic only
/// through that (`If-None-Match: *`): on an endpoint that ignores it, two writers can both
/// commit one version, and one commit's rows are lost. A scratch object under
/// `<lake>/_creator_etl_probe/` is written twice with the store Delta commits through, then
/// removed. `file://` lakes need no probe.
pub async fn check_conditional_writes(lake: &LakeConfig) -> Result<(), LoadError> {
    use deltalake::logstore::object_store::{self, ObjectStoreExt, PutMode, PutOptions, PutPayload};
    static PASSED: std::sync::OnceLock<std::sync::Mutex<std::collections::HashSet<String>>> =
        std::sync::OnceLock::new();
    if !lake.url.starts_with("s3://") || lake.unconditional_writes_ok {
        return Ok(());
    }
    let passed = PASSED.get_or_init(Default::default);
    if passed.lock().unwrap_or_else(|e| e.into_inner()).contains(&lake.url) {
        return Ok(());
    }
    let endpoint = std::env::var("AWS_ENDPOINT_URL").map_or_else(|_| "AWS S3".to_owned(), |e| format!("`{e}`"));
    let failed = |what: &str, e: &dyn std::fmt::Display| {
        LoadError::Lake(format!(
            "cannot check that the object store of `{}` ({endpoint}) honours conditional writes: {what}: {e}",
            lake.url
        ))
    };
    deltalake::aws::register_handlers(None);
    let url = format!("{}/_creator_etl_probe", lake.url);
    let parsed = reqwest::Url::parse(&url).map_err(|e| failed("the URL", &e))?;
    let table = deltalake::DeltaTableBuilder::from_url(parsed)
        .and_then(|b| b.build())
        .map_err(|e| failed("open the store", &e))?;
    let store = table.object_store();
    let path = deltalake::Path::from(format!("probe-{}-{:016x}", std::process::id(), fastrand::u64(..)));
    let create = || PutOptions { mode: PutMode::Create, ..PutOptions::default() };
    store
        .put_opts(&path, PutPayload::from_static(b"creator-etl conditional write probe"), create())
        .await
        .map_err(|e| failed("write a scratch object", &e))?;
    let second = store.put_opts(&path, PutPayload::from_static(b"second"), create()).await;
    if let Err(e) = store.delete(&path).await {
        tracing::warn!(path = %path, error = %e, "cannot remove the conditional-write probe's scratch object");
    }
    match second {
        Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => {
            passed.lock().unwrap_or_else(|e| e.into_inner()).insert(lake.url.clone());
            Ok(())
        }
        Ok(_) => Err(LoadError::Lake(format!(
            "the object store of `{}` ({endpoint}) accepted a second create-if-absent write of one object: it ignores conditional writes (`If-None-Match`), so two writers could both commit one Delta version and one commit would be lost. Use a store that honours them (AWS S3 does), or accept the risk with `--lake-unsafe-no-conditional-writes`",
            lake.url
        ))),
        Err(e) => Err(failed("the second write", &e)),
    }
}

/// What a lake commit did; part of the load report.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LakeReport {
    pub url: String,
    pub organization: String,
    /// The Delta version each table is at after this load's commit.
    pub versions: BTreeMap<String, u64>,
    /// Rows of this organization written per table.
    pub rows: BTreeMap<String, u64>,
    /// Commits retried after a conflict.
    pub conflicts_retried: u32,
}

impl LakeReport {
    /// Adds a later commit's tables (of the same organizations' sync) to this report.
    pub fn absorb(&mut self, later: LakeReport) {
        self.versions.extend(later.versions);
        self.rows.extend(later.rows);
        self.conflicts_retried += later.conflicts_retried;
    }
}

/// The action journal's lake table: what was sent, per organization, so that a run on a fresh
/// `--out` restores it and sends nothing twice (the restore of [`crate::sync`]).
pub const JOURNAL: &str = catalog::JOURNAL;

/// Partition columns of a table in the lake (the catalog's).
pub fn partition_columns(table: &str) -> Vec<&'static str> {
    catalog::table(table).map_or_else(|| vec![catalog::ORGANIZATION], |t| t.partitions())
}

/// A valid organization slug: lowercase letters, digits, `-` and `_`, starting with a letter or
/// digit, at most 63 characters. It is also a partition value and a predicate literal, so
/// nothing else may appear in it.
pub fn valid_org(org: &str) -> bool {
    let mut chars = org.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && org.len() <= 63
}

/// Stages this organization's rows of `tables` as Parquet under `dir` (DuckDB, from the
/// writer's warehouse). The caller holds the `--out` lock.
pub fn stage(out: &OutDir, org: &str, dir: &Path, tables: &[&str]) -> Result<(), LoadError> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(io_err("create", dir))?;
    let conn = warehouse::open_writer(out)?;
    for &table in tables {
        stage_table(&conn, org, table, dir)?;
    }
    Ok(())
}

/// Stages this organization's rows of one table from `conn` as `dir/<table>.parquet`.
pub fn stage_table(conn: &duckdb::Connection, org: &str, table: &str, dir: &Path) -> Result<(), LoadError> {
    std::fs::create_dir_all(dir).map_err(io_err("create", dir))?;
    let year = if partition_columns(table).contains(&"year") { ", year(date) AS year" } else { "" };
    let file = warehouse::sql_literal(&dir.join(format!("{table}.parquet")).display().to_string());
    conn.execute_batch(&format!(
        "COPY (SELECT {} AS organization, *{year} FROM {table}) TO {file} (FORMAT parquet);",
        warehouse::sql_literal(org)
    ))
    .map_err(|e| LoadError::db(format!("stage `{table}` for the lake"), e))
}

/// Stages the rows of the organizations `orgs` of the named tables of a fleet warehouse (where
/// every table has `organization`), each table as `dir/<table>.parquet`, for
/// [`commit_organizations`]; returns the rows staged per organization and table. The action
/// journal is not a fleet warehouse's: it stays in each organization's own state and is
/// committed from there.
pub fn stage_organizations(
    conn: &duckdb::Connection,
    orgs: &[String],
    tables: &[&str],
    dir: &Path,
) -> Result<BTreeMap<String, BTreeMap<String, u64>>, LoadError> {
    std::fs::create_dir_all(dir).map_err(io_err("create", dir))?;
    let list = warehouse::sql_list(orgs);
    let mut rows: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for &table in tables {
        let failed = |e| LoadError::db(format!("stage `{table}` for the lake"), e);
        let year = if partition_columns(table).contains(&"year") { ", year(date) AS year" } else { "" };
        let file = warehouse::sql_literal(&dir.join(format!("{table}.parquet")).display().to_string());
        conn.execute_batch(&format!(
            "COPY (SELECT *{year} FROM {table} WHERE organization IN ({list})) TO {file} (FORMAT parquet);"
        ))
        .map_err(failed)?;
        for org in orgs {
            rows.entry(org.clone()).or_default().insert(table.to_owned(), 0);
        }
        let mut stmt = conn
            .prepare(&format!("SELECT organization, count(*) FROM read_parquet({file}) GROUP BY organization"))
            .map_err(failed)?;
        let counts = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))).map_err(failed)?;
        for c in counts {
            let (org, n) = c.map_err(failed)?;
            rows.entry(org).or_default().insert(table.to_owned(), n as u64);
        }
    }
    Ok(rows)
}

fn read_batches(path: &Path) -> Result<Vec<RecordBatch>, LoadError> {
    let lake_err = |e: String| LoadError::Lake(format!("read `{}`: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(io_err("open", path))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| lake_err(e.to_string()))?;
    // Every column nullable, whatever the staged file declares: a table created from an
    // organization with no rows (DuckDB declares such a file's columns required) would otherwise
    // refuse the NULLs of the next organization's rows.
    let schema = std::sync::Arc::new(deltalake::arrow::datatypes::Schema::new_with_metadata(
        builder.schema().fields().iter().map(|f| f.as_ref().clone().with_nullable(true)).collect::<Vec<_>>(),
        builder.schema().metadata().clone(),
    ));
    let reader = builder.build().map_err(|e| lake_err(e.to_string()))?;
    let mut batches = reader
        .map(|b| b.and_then(|b| RecordBatch::try_new(schema.clone(), b.columns().to_vec())))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| lake_err(e.to_string()))?;
    // An empty table still commits: its schema creates the Delta table, and the overwrite
    // removes the organization's earlier rows.
    if batches.is_empty() {
        batches.push(RecordBatch::new_empty(schema));
    }
    Ok(batches)
}

/// Whether a failed commit lost a race and may succeed on a fresh snapshot.
fn is_conflict(e: &DeltaTableError) -> bool {
    matches!(
        e,
        DeltaTableError::VersionAlreadyExists(_)
            | DeltaTableError::Transaction {
                source: TransactionError::CommitConflict(_)
                    | TransactionError::MaxCommitAttempts(_)
                    | TransactionError::VersionAlreadyExists(_)
            }
    )
}

/// The lake's table schema with the staged columns it lacks added (nullable), or `None` when it
/// has them all: a newer creator-etl adds columns (quick sync's in `runs`) to an existing lake.
/// A staged column whose type differs from the table's is an error: the lake is never retyped.
fn merged_schema(table: &str, current: &StructType, staged: &StructType) -> Result<Option<StructType>, LoadError> {
    let mut added = vec![];
    // A required column of the table that the load writes (every staged column is nullable) is
    // declared nullable, so that no NULL lands in a column a reader takes as required.
    let relax = |f: &StructField| staged.field(f.name()).is_some() && !f.is_nullable();
    let relaxed = current.fields().any(relax);
    for field in staged.fields() {
        match current.field(field.name()) {
            Some(have) if have.data_type() == field.data_type() => {}
            Some(have) => {
                return Err(LoadError::Lake(format!(
                "the lake's `{table}` has column `{}` as {}, but this load writes it as {}; the lake is never retyped",
                field.name(),
                have.data_type(),
                field.data_type()
            )))
            }
            // A column the catalog has (a newer creator-etl's) is added; any other is a bug.
            None if lake_column(table, field.name()) => added.push(StructField { nullable: true, ..field.clone() }),
            None => {
                return Err(LoadError::Bug(format!(
                    "a load staged the column `{}` for the lake's `{table}`, which the table catalog does not have",
                    field.name()
                )))
            }
        }
    }
    if added.is_empty() && !relaxed {
        return Ok(None);
    }
    let fields = current.fields().map(|f| StructField { nullable: f.nullable || relax(f), ..f.clone() }).chain(added);
    StructType::try_new(fields).map(Some).map_err(|e| LoadError::Lake(format!("merge the schema of `{table}`: {e}")))
}

/// Whether the lake's `table` has the column `name` in the catalog (its own columns, and its
/// partition columns).
fn lake_column(table: &str, name: &str) -> bool {
    partition_columns(table).contains(&name) || catalog::table(table).is_some_and(|t| t.column(name).is_some())
}

/// The organizations' files in a snapshot: what an overwrite of their rows removes.
fn organization_files(state: &deltalake::table::state::DeltaTableState, orgs: &[String]) -> BTreeMap<String, Action> {
    state
        .log_data()
        .iter()
        .filter(|f| {
            f.partition_values_map()
                .get("organization")
                .is_some_and(|v| v.as_deref().is_some_and(|v| orgs.iter().any(|o| o == v)))
        })
        .map(|f| (f.path().into_owned(), Action::Remove(f.remove_action(true))))
        .collect()
}

/// Writes the batches as data files of the table (partitioned, with statistics); they are
/// invisible until a commit names them.
async fn write_files(
    url: &str,
    partition_by: Vec<String>,
    batches: &[RecordBatch],
) -> Result<Vec<Action>, DeltaTableError> {
    let mut writer = RecordBatchWriter::try_new(url, batches[0].schema(), Some(partition_by), None)?;
    for batch in batches {
        writer.write(batch.clone()).await?;
    }
    Ok(writer.flush().await?.into_iter().map(Action::Add).collect())
}

/// Replaces the rows of the organizations `orgs` (one, or a fleet's batch) of one table: one
/// Delta commit of the removal of their files and the addition of the new ones, retried on
/// conflict. `lake` gives the URL and the write policy; its `org` is not read.
///
/// Every attempt reads the latest snapshot and removes exactly the organizations' files in it,
/// and the commit refuses to land on any other version (delta-rs's own retry is off: it would
/// rebase the commit without re-reading which files are the organization's). A commit that lost
/// the race to another organization's (its files unchanged) is retried at once; one that lost to
/// a writer of the same organization is a conflict, retried by the policy [`CONFLICTS`].
async fn commit_table(
    lake: &LakeConfig,
    orgs: &[String],
    table: &str,
    batches: Vec<RecordBatch>,
    report: &mut LakeReport,
) -> Result<u64, LoadError> {
    let url = format!("{}/{table}", lake.url);
    let parsed = reqwest::Url::parse(&url).map_err(|e| LoadError::Lake(format!("`{url}` is not a URL: {e}")))?;
    // delta-rs opens a local table only where its directory exists.
    if let Ok(dir) = parsed.to_file_path() {
        std::fs::create_dir_all(&dir).map_err(io_err("create the lake table directory", &dir))?;
    }
    check_conditional_writes(lake).await?;
    let failed = |e: &dyn std::fmt::Display, tries: String| {
        LoadError::Lake(format!(
            "cannot commit `{table}` to `{url}`{tries}: {e}; the table keeps its last committed version"
        ))
    };
    // An error that is not a conflict can come after the commit landed (writing a checkpoint).
    let uncertain = |e: &dyn std::fmt::Display| {
        LoadError::Lake(format!(
            "cannot commit `{table}` to `{url}`: {e}; the commit may or may not have landed, and the next load replaces the organization's rows either way"
        ))
    };
    let staged = StructType::try_from_arrow(normalize_for_delta(&batches[0].schema()).as_ref())
        .map_err(|e| failed(&e, String::new()))?;
    let predicate = match orgs {
        [org] => format!("organization = {}", warehouse::sql_literal(org)),
        _ => format!("organization IN ({})", warehouse::sql_list(orgs)),
    };
    let partition_by: Vec<String> = partition_columns(table).iter().map(|c| c.to_string()).collect();
    // The new data files, written once: a retried commit names the same files.
    let mut adds: Option<Vec<Action>> = None;
    // The organization's files that the last failed attempt would have removed.
    let mut lost_with: Option<BTreeMap<String, Action>> = None;
    let (mut conflicts, mut rebases) = (0u32, 0u32);
    let started = std::time::Instant::now();
    loop {
        // The outer error is delta-rs's (a conflict is retried); the inner one is final.
        let result: Result<Result<u64, LoadError>, DeltaTableError> = async {
            let mut t = DeltaTable::try_from_url(parsed.clone()).await?;
            if t.version().is_none() {
                // Created empty in a commit of its own, so that every data commit reads a
                // snapshot: two creators racing only declare the same empty table twice.
                t = t
                    .create()
                    .with_columns(staged.fields().cloned())
                    .with_partition_columns(partition_by.clone())
                    .with_save_mode(SaveMode::Ignore)
                    // A creator that lost the race reloads and finds the table, instead of
                    // committing a second table declaration on top of the first.
                    .with_commit_properties(CommitProperties::default().with_max_retries(0))
                    .await?;
            }
            let state = t.snapshot()?;
            let partitioned = state.metadata().partition_columns();
            if *partitioned != partition_by {
                return Ok(Err(LoadError::Lake(format!(
                    "the lake's `{table}` is partitioned by {partitioned:?}, not by {partition_by:?} as creator-etl writes it; its organizations' rows cannot be replaced. Rewrite it partitioned by {partition_by:?}, or use a new lake"
                ))));
            }
            let removes = organization_files(state, orgs);
            // A commit reported as lost can have landed (on S3 a write retried after a 5xx that
            // stored it answers "already exists"): the snapshot then holds the new files.
            if let Some(written) = &adds {
                let landed: std::collections::HashSet<&str> =
                    written.iter().filter_map(|a| if let Action::Add(a) = a { Some(a.path.as_str()) } else { None }).collect();
                if !landed.is_empty() && removes.keys().any(|p| landed.contains(p.as_str())) {
                    if removes.keys().all(|p| landed.contains(p.as_str())) {
                        // The commit landed, its answer lost: this snapshot, the newest, holds
                        // exactly this load's files of the organizations (its own version or a
                        // later one, of other organizations' commits).
                        return Ok(version_of(state.version()));
                    }
                    return Ok(Err(LoadError::Lake(format!(
                        "the lake's `{table}` holds some of this load's files beside others of {}; nothing more is committed",
                        warehouse::sql_list(orgs)
                    ))));
                }
            }
            if let Some(before) = lost_with.take() {
                // The commit that won touched this organization's files: a real conflict.
                if before.keys().ne(removes.keys()) {
                    let source = TransactionError::CommitConflict(CommitConflictError::ConcurrentAppend);
                    return Err(DeltaTableError::Transaction { source });
                }
            }
            let mut actions = vec![];
            let schema = match merged_schema(table, &state.schema(), &staged) {
                Ok(schema) => schema,
                Err(e) => return Ok(Err(e)),
            };
            if let Some(schema) = schema {
                actions.push(Action::Metadata(state.metadata().clone().with_schema(&schema)?));
            }
            if adds.is_none() {
                adds = Some(write_files(&url, partition_by.clone(), &batches).await?);
            }
            actions.extend(removes.values().cloned());
            actions.extend(adds.iter().flatten().cloned());
            let operation = DeltaOperation::Write {
                mode: SaveMode::Overwrite,
                partition_by: Some(partition_by.clone()),
                predicate: Some(predicate.clone()),
            };
            let committed = CommitBuilder::from(CommitProperties::default().with_max_retries(0))
                .with_actions(actions)
                .build(Some(state), t.log_store(), operation)
                .await
                .inspect_err(|_| lost_with = Some(removes))?;
            Ok(version_of(committed.version()))
        }
        .await;
        match result {
            Ok(done) => return done,
            // Lost the race to another organization's commit: retry at once on the new snapshot
            // (each round lands one writer, so this ends).
            Err(e) if is_conflict(&e) && lost_with.is_some() && rebases < REBASES => rebases += 1,
            Err(e)
                if is_conflict(&e)
                    && conflicts + 1 < CONFLICTS.max_attempts
                    && started.elapsed() < CONFLICTS.deadline =>
            {
                conflicts += 1;
                lost_with = None;
                report.conflicts_retried += 1;
                let wait = CONFLICTS.backoff(conflicts);
                tracing::info!(table, attempt = conflicts, wait_ms = wait.as_millis() as u64, error = %crate::exit::with_causes(&e), "lake commit conflicted; retrying on a fresh snapshot");
                tokio::time::sleep(wait).await;
            }
            Err(e) if is_conflict(&e) => {
                return Err(failed(&e, format!(" after {} conflicting attempts", conflicts + 1)))
            }
            Err(e) => return Err(uncertain(&e)),
        }
    }
}

/// A Delta version as the report gives it: never a guess (a negative version is no version).
fn version_of(version: impl TryInto<u64> + Copy + std::fmt::Display) -> Result<u64, LoadError> {
    version
        .try_into()
        .map_err(|_| LoadError::Lake(format!("delta-rs gave the commit the version {version}, which is not a version")))
}

/// Commits this organization's rows of the named staged tables, one commit each, in order.
pub async fn commit_tables(lake: &LakeConfig, staged: &Path, tables: &[&str]) -> Result<LakeReport, LoadError> {
    commit_organizations(lake, std::slice::from_ref(&lake.org), staged, tables).await
}

/// Commits the rows of the organizations `orgs` of the named staged tables (each table's file
/// holds exactly their rows: [`stage_organizations`]), one commit per table, in order: a
/// fleet's batch of organizations costs one commit per table, and no table ever holds part of
/// the batch. `lake` gives the URL and the write policy; its `org` is not read. The report's
/// `organization` lists them.
pub async fn commit_organizations(
    lake: &LakeConfig,
    orgs: &[String],
    staged: &Path,
    tables: &[&str],
) -> Result<LakeReport, LoadError> {
    // S3 URLs are handled by delta-rs's AWS integration (standard AWS configuration).
    deltalake::aws::register_handlers(None);
    let mut report = LakeReport { url: lake.url.clone(), organization: orgs.join(","), ..Default::default() };
    for &table in tables {
        if table == "runs" {
            crate::out::crash_point("lake-before-runs");
        }
        let batches = read_batches(&staged.join(format!("{table}.parquet")))?;
        let rows = batches.iter().map(|b| b.num_rows() as u64).sum();
        let version = commit_table(lake, orgs, table, batches, &mut report).await?;
        report.rows.insert(table.to_owned(), rows);
        report.versions.insert(table.to_owned(), version);
        if table == "applications" {
            crate::out::crash_point("lake-after-first-table");
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_is_committed_last_and_every_table_is_partitioned_by_organization() {
        let t = catalog::lake_tables();
        assert_eq!(t.last(), Some(&"runs"), "the completion marker goes last");
        assert_eq!(t.len(), 9, "{t:?}");
        let committed = catalog::committed_tables();
        assert_eq!(committed.last(), Some(&"runs"), "the completion marker goes last");
        assert_eq!(committed.len(), 10, "the journal too: {committed:?}");
        assert_eq!(committed[0], JOURNAL, "what was sent is committed first");
        for table in committed {
            assert_eq!(partition_columns(table)[0], "organization");
        }
        assert_eq!(partition_columns("content_daily"), ["organization", "year"]);
    }

    #[test]
    fn organization_slugs() {
        for ok in ["acme", "brand-2", "a_b", "9lives"] {
            assert!(valid_org(ok), "{ok}");
        }
        // Also a partition value and a predicate literal: nothing that could escape either.
        for bad in ["", "Acme", "-x", "a b", "a'b", "a/b", "a=b", &"x".repeat(64)] {
            assert!(!valid_org(bad), "{bad}");
        }
    }
}
