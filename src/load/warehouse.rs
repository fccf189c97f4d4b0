//! The DuckDB warehouse: schema and migrations, reading the previous state, swapping in a run's
//! tables in one transaction, the status history (SCD2), the runs ledger, and the Parquet export.
//!
//! **One writer, many readers.** DuckDB lets one process open a file for writing, and no process
//! read it meanwhile (and a reader blocks the writer). So the writer and the readers use
//! different files:
//! - `OUT/state/warehouse.duckdb` is the writer's, opened only by creator-etl's writing commands
//!   (which hold the `--out` lock) and, for a moment, by `actions plan`;
//! - `OUT/warehouse.duckdb` is the readers' snapshot: after every load and every actions run, the
//!   writer checkpoints its file and copies it there, by a rename. A notebook, a `duckdb` shell
//!   or `creator-etl query` holding the snapshot open never blocks a load; it keeps the snapshot
//!   it opened (the old file stays readable until it closes), and sees the new one when it
//!   reconnects. Changes made to the snapshot are overwritten by the next publish.
//!
//! A writer that finds its file held (a plan reading it) retries for a few seconds, then gives
//! up naming the process that holds it (exit 5). Writing commands open the file before they
//! send any request, so a run learns this before its extract spends the hour's budget.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use duckdb::{params, Connection};

pub use super::readback::{
    applications_where, content, content_cursor, latest_run, scope_filter, snapshot, sync_scope,
};
use super::LoadError;
use crate::out::OutDir;

/// The schema this version writes. Older warehouses are migrated in place by [`migrate`].
pub const SCHEMA_VERSION: i32 = 4;

/// Tables replaced wholesale by each load, with their DDL (primary keys included).
pub const TABLES: [(&str, &str); 6] = [
    (
        "applications",
        "id BIGINT PRIMARY KEY, status VARCHAR NOT NULL, campaign_id BIGINT NOT NULL, campaign_name VARCHAR, \
         user_id BIGINT NOT NULL, creator_name VARCHAR, email VARCHAR, signup_source VARCHAR, \
         applied_at TIMESTAMPTZ NOT NULL, account_count BIGINT NOT NULL, total_monthly_posts BIGINT NOT NULL, \
         first_seen_at TIMESTAMPTZ NOT NULL, last_seen_at TIMESTAMPTZ NOT NULL",
    ),
    (
        "connected_accounts",
        "application_id BIGINT NOT NULL, account_id BIGINT NOT NULL, provider VARCHAR, username VARCHAR, \
         monthly_post_count BIGINT NOT NULL, PRIMARY KEY (application_id, account_id)",
    ),
    (
        "content_daily",
        "metric VARCHAR NOT NULL, date DATE NOT NULL, last_date DATE NOT NULL, current BIGINT NOT NULL, \
         last BIGINT NOT NULL, PRIMARY KEY (metric, date)",
    ),
    (
        "wow_deltas",
        "metric VARCHAR NOT NULL, date DATE NOT NULL, current BIGINT NOT NULL, last BIGINT NOT NULL, \
         delta BIGINT NOT NULL, pct_change DOUBLE, current_7d BIGINT, last_7d BIGINT, delta_7d BIGINT, \
         pct_change_7d DOUBLE, PRIMARY KEY (metric, date)",
    ),
    (
        "weekly_totals",
        "metric VARCHAR NOT NULL, week_start DATE NOT NULL, total BIGINT NOT NULL, previous_total BIGINT, \
         delta BIGINT, pct_change DOUBLE, complete BOOLEAN NOT NULL, PRIMARY KEY (metric, week_start)",
    ),
    (
        "post_count_cohorts",
        "applied_month DATE NOT NULL, bucket VARCHAR NOT NULL, bucket_min BIGINT, bucket_max BIGINT, \
         status VARCHAR NOT NULL, applications BIGINT NOT NULL, creators BIGINT NOT NULL, accounts BIGINT NOT NULL, \
         total_monthly_posts BIGINT NOT NULL, PRIMARY KEY (applied_month, bucket, status)",
    ),
];

/// Order of each table's rows in the Parquet export (its key).
pub fn order_by(table: &str) -> &'static str {
    match table {
        "applications" => "id",
        "connected_accounts" => "application_id, account_id",
        "content_daily" | "wow_deltas" => "metric, date",
        "weekly_totals" => "metric, week_start",
        "post_count_cohorts" => "applied_month, bucket, status",
        "application_status_history" => "id, valid_from",
        _ => "run_id",
    }
}

const V1: &str = "
CREATE TABLE IF NOT EXISTS application_status_history (
    id BIGINT NOT NULL, status VARCHAR NOT NULL, valid_from TIMESTAMPTZ NOT NULL, valid_to TIMESTAMPTZ,
    PRIMARY KEY (id, valid_from));
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR PRIMARY KEY, started_at TIMESTAMPTZ, finished_at TIMESTAMPTZ, status VARCHAR NOT NULL,
    extract_ms BIGINT, transform_ms BIGINT, load_ms BIGINT, requests BIGINT, retries BIGINT, rate_limited BIGINT,
    pacing_wait_ms BIGINT, rows_json VARCHAR, warnings_json VARCHAR, status_changes BIGINT,
    parquet_exported BOOLEAN NOT NULL DEFAULT false, report_json VARCHAR);
";

/// Version 2: the actions journal (one row per sent action and run), every row's result, a
/// warning count in `runs` (queries need not parse `warnings_json`), and `cohort_acceptance`
/// with sizes and pending counts ([`VIEWS`]).
const V2: &str = "
ALTER TABLE runs ADD COLUMN IF NOT EXISTS warnings BIGINT;
UPDATE runs SET warnings = 0 WHERE warnings IS NULL;
CREATE TABLE IF NOT EXISTS action_journal (
    fingerprint VARCHAR NOT NULL, run_id VARCHAR NOT NULL, file VARCHAR NOT NULL, line BIGINT NOT NULL,
    row_id VARCHAR, action VARCHAR NOT NULL, target VARCHAR NOT NULL, body_json VARCHAR NOT NULL,
    outcome VARCHAR NOT NULL, http_status INTEGER, message VARCHAR, response_excerpt VARCHAR,
    intent_at TIMESTAMPTZ NOT NULL, outcome_at TIMESTAMPTZ,
    PRIMARY KEY (fingerprint, run_id));
CREATE TABLE IF NOT EXISTS action_results (
    run_id VARCHAR NOT NULL, file VARCHAR NOT NULL, line BIGINT NOT NULL, row_id VARCHAR, action VARCHAR NOT NULL,
    target VARCHAR NOT NULL, approved BOOLEAN NOT NULL, outcome VARCHAR NOT NULL, http_status INTEGER,
    message VARCHAR, fingerprint VARCHAR NOT NULL, reviewer VARCHAR, finished_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (run_id, line));
";

/// Version 3: the journal's scope (the service and the key's fingerprint a row was sent to).
/// Rows written before have none, and count for every scope.
const V3: &str = "
ALTER TABLE action_journal ADD COLUMN IF NOT EXISTS service VARCHAR;
ALTER TABLE action_journal ADD COLUMN IF NOT EXISTS key_fingerprint VARCHAR;
";

/// Version 4: how each run read the applications (quick sync): its mode, scope, the pages it
/// verified, the last full sync (reconcile) it relies on, and whether every count agreed. Runs
/// loaded before were full syncs.
const V4: &str = "
ALTER TABLE runs ADD COLUMN IF NOT EXISTS sync_mode VARCHAR;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS sync_scope VARCHAR;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS pages_verified BIGINT;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS last_reconcile_at TIMESTAMPTZ;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS counts_agree BOOLEAN;
UPDATE runs SET sync_mode = 'full' WHERE sync_mode IS NULL;
";

/// The views over the tables, as of the current schema (version 2 on): `cohort_acceptance`, which
/// `queries/cohort_acceptance.sql` reads, with sizes, pending counts and the acceptance rate
/// accepted / (accepted + rejected). The lake readers make them over their tables too.
pub const VIEWS: &str = include_str!("views.sql");

/// Acceptance rate per post-count bucket, as schema version 1 had it.
const COHORT_ACCEPTANCE: &str = "
CREATE OR REPLACE VIEW cohort_acceptance AS
SELECT bucket, bucket_min, bucket_max,
       CAST(coalesce(sum(applications) FILTER (WHERE status = 'accepted'), 0) AS BIGINT) AS accepted,
       CAST(coalesce(sum(applications) FILTER (WHERE status = 'rejected'), 0) AS BIGINT) AS rejected,
       CAST(sum(applications) FILTER (WHERE status = 'accepted') AS DOUBLE)
         / nullif(sum(applications) FILTER (WHERE status IN ('accepted', 'rejected')), 0) AS acceptance_rate
FROM post_count_cohorts
GROUP BY bucket, bucket_min, bucket_max
ORDER BY bucket_min NULLS FIRST;
";

/// The writer's file.
pub fn writer_path(out: &OutDir) -> PathBuf {
    out.state_dir().join("warehouse.duckdb")
}

/// The readers' snapshot.
pub fn published_path(out: &OutDir) -> PathBuf {
    out.root().join("warehouse.duckdb")
}

/// How long a writer waits for a reader of its own file (an `actions plan`) to let go.
const WRITER_WAIT: Duration = Duration::from_secs(5);

/// Opens (creating) the writer's warehouse and brings its schema to [`SCHEMA_VERSION`]. A
/// warehouse of the layout before the reader snapshot (only `OUT/warehouse.duckdb`) is adopted
/// by copying it. The caller holds the `--out` lock.
pub fn open_writer(out: &OutDir) -> Result<Connection, LoadError> {
    open_writer_with(out, migrate)
}

/// [`open_writer`] with the schema `migrate` brings the file to: one organization's, or a
/// fleet's ([`super::fleet`]).
pub(crate) fn open_writer_with(
    out: &OutDir,
    migrate: fn(&Connection) -> Result<i32, LoadError>,
) -> Result<Connection, LoadError> {
    let path = writer_path(out);
    let legacy = published_path(out);
    std::fs::create_dir_all(out.state_dir()).map_err(crate::out::io_err("create", &out.state_dir()))?;
    if !path.exists() && legacy.exists() {
        // Each file is copied aside and renamed into place, the database file last: a crash
        // part-way leaves no writer file, and the next command adopts again.
        for suffix in [".wal", ""] {
            let from = PathBuf::from(format!("{}{suffix}", legacy.display()));
            if from.exists() {
                let to = PathBuf::from(format!("{}{suffix}", path.display()));
                let tmp = PathBuf::from(format!("{}.adopting", to.display()));
                std::fs::copy(&from, &tmp).map_err(crate::out::io_err("adopt the warehouse", &from))?;
                std::fs::rename(&tmp, &to).map_err(crate::out::io_err("adopt the warehouse", &to))?;
            }
        }
        tracing::info!(from = %legacy.display(), to = %path.display(), "the writer now keeps its own warehouse file; readers use the snapshot");
    }
    let started = Instant::now();
    let conn = loop {
        match Connection::open(&path) {
            Ok(c) => break c,
            Err(e) => match lock_holder(&e) {
                Some(_) if started.elapsed() < WRITER_WAIT => std::thread::sleep(Duration::from_millis(200)),
                Some(holder) => return Err(LoadError::Locked { path: path.display().to_string(), holder }),
                None => return Err(LoadError::db(format!("open `{}`", path.display()), e)),
            },
        }
    };
    no_downloads(&conn).map_err(|e| LoadError::db("configure the connection", e))?;
    migrate(&conn)?;
    Ok(conn)
}

/// Checks that the writer's warehouse can be opened for writing, and migrates it: what a run
/// does before it spends any request.
///
/// Returns the open connection for the preflight's other reads, so that DuckDB starts once;
/// `None` for a first load.
pub fn check_writable(out: &OutDir) -> Result<Option<Connection>, LoadError> {
    if !writer_path(out).exists() && !published_path(out).exists() {
        // A first load: no file that anyone could hold, and no DuckDB to start for it.
        std::fs::create_dir_all(out.state_dir()).map_err(crate::out::io_err("create", &out.state_dir()))?;
        return Ok(None);
    }
    open_writer(out).map(Some)
}

/// The process holding a DuckDB file, from DuckDB's lock error, when that is the error.
fn lock_holder(e: &duckdb::Error) -> Option<String> {
    let text = e.to_string();
    let at = text.find("Conflicting lock is held in")?;
    let rest = &text[at + "Conflicting lock is held in".len()..];
    let holder = rest.split(". See also").next().unwrap_or(rest).trim().trim_end_matches('.');
    let pid = holder.split("(PID ").nth(1).and_then(|p| p.split(')').next()).and_then(|p| p.parse::<u32>().ok());
    let command = pid.and_then(|p| std::fs::read(format!("/proc/{p}/cmdline")).ok()).map(|c| {
        let args: Vec<String> =
            c.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        args.join(" ").chars().take(160).collect::<String>()
    });
    Some(match command {
        Some(cmd) if !cmd.is_empty() => format!("{holder}: `{cmd}`"),
        _ => holder.to_owned(),
    })
}

/// Checkpoints the writer's warehouse, closes it, and publishes it as the readers' snapshot
/// (`OUT/warehouse.duckdb`) with one rename. Readers holding the old snapshot keep it until they
/// reconnect.
pub fn publish(conn: Connection, out: &OutDir) -> Result<(), LoadError> {
    conn.execute_batch("CHECKPOINT;").map_err(|e| LoadError::db("checkpoint the warehouse", e))?;
    drop(conn);
    let from = writer_path(out);
    let to = published_path(out);
    let tmp = out.root().join(format!(".warehouse.duckdb.publish-{}", std::process::id()));
    let io = crate::out::io_err;
    std::fs::copy(&from, &tmp).map_err(io("copy the warehouse for readers", &from))?;
    std::fs::File::open(&tmp).and_then(|f| f.sync_all()).map_err(io("sync", &tmp))?;
    // A WAL beside the old snapshot (someone opened it for writing) must not replay into the new.
    let wal = PathBuf::from(format!("{}.wal", to.display()));
    if wal.exists() {
        std::fs::remove_file(&wal).map_err(io("remove", &wal))?;
    }
    std::fs::rename(&tmp, &to).map_err(io("publish", &to))?;
    Ok(())
}

/// Removes snapshot copies that a killed publish left behind. The caller holds the lock.
pub fn clean_publish_leftovers(out: &OutDir) {
    if let Ok(entries) = std::fs::read_dir(out.root()) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(".warehouse.duckdb.publish-") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Opens the freshest warehouse read-only: the writer's file, or, while a running command holds
/// it, the readers' snapshot (the note says so). `None` when there is neither.
pub fn open_latest_read_only(out: &OutDir) -> Result<Option<(Connection, Option<String>)>, LoadError> {
    let read_only = |path: &Path| {
        duckdb::Config::default()
            .access_mode(duckdb::AccessMode::ReadOnly)
            .and_then(|c| Connection::open_with_flags(path, c))
    };
    let writer = writer_path(out);
    let published = published_path(out);
    if writer.exists() {
        match read_only(&writer) {
            Ok(c) => return Ok(Some((c, None))),
            Err(e) => match lock_holder(&e) {
                Some(holder) if published.exists() => {
                    let note = format!(
                        "a running command is writing the warehouse; this reads the snapshot published after the last command ({holder})"
                    );
                    let c = read_only(&published)
                        .map_err(|e| LoadError::db(format!("open `{}` read-only", published.display()), e))?;
                    return Ok(Some((c, Some(note))));
                }
                _ => return Err(LoadError::db(format!("open `{}` read-only", writer.display()), e)),
            },
        }
    }
    if !published.exists() {
        return Ok(None);
    }
    let c = read_only(&published).map_err(|e| LoadError::db(format!("open `{}` read-only", published.display()), e))?;
    Ok(Some((c, None)))
}

/// Opens (creating) a warehouse file and brings its schema to [`SCHEMA_VERSION`] (unit tests;
/// commands use [`open_writer`]).
#[cfg(test)]
pub(crate) fn open(path: &Path) -> Result<Connection, LoadError> {
    let conn = Connection::open(path).map_err(|e| LoadError::db(format!("open `{}`", path.display()), e))?;
    no_downloads(&conn).map_err(|e| LoadError::db("configure the connection", e))?;
    migrate(&conn)?;
    Ok(conn)
}

/// Forbids DuckDB to download extensions at run time: a scheduled job must not fetch code, and
/// offline it would only fail later with a network error. The bundled DuckDB has no ICU, so it
/// has no session time zone: TIMESTAMPTZ values are UTC throughout, which is what the tables mean.
pub fn no_downloads(conn: &Connection) -> duckdb::Result<()> {
    conn.execute_batch("SET autoinstall_known_extensions = false;")
}

/// Applies every migration above the warehouse's version, each in its own transaction.
pub fn migrate(conn: &Connection) -> Result<i32, LoadError> {
    if super::fleet::is_fleet(conn)? {
        return Err(LoadError::Kind(super::fleet::NOT_ONE_ORGANIZATION.into()));
    }
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, applied_at TIMESTAMPTZ NOT NULL);",
    )
    .map_err(|e| LoadError::db("create `schema_version`", e))?;
    let current: i32 = conn
        .query_row("SELECT coalesce(max(version), 0) FROM schema_version", [], |r| r.get(0))
        .map_err(|e| LoadError::db("read the schema version", e))?;
    if current > SCHEMA_VERSION {
        return Err(LoadError::NewerSchema { found: current, supported: SCHEMA_VERSION });
    }
    let migrations: [(i32, &str); 4] = [(1, V1), (2, V2), (3, V3), (4, V4)];
    for (version, sql) in migrations.iter().filter(|(v, _)| *v > current) {
        let mut batch = format!("BEGIN TRANSACTION;\n{sql}\n");
        if *version == 1 {
            for (name, ddl) in TABLES {
                batch.push_str(&format!("CREATE TABLE IF NOT EXISTS {name} ({ddl});\n"));
            }
            batch.push_str(COHORT_ACCEPTANCE);
        }
        if *version == 2 {
            batch.push_str(VIEWS);
        }
        batch.push_str(&format!("INSERT INTO schema_version VALUES ({version}, now());\nCOMMIT;"));
        if let Err(e) = conn.execute_batch(&batch) {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(LoadError::db(format!("migrate to schema version {version}"), e));
        }
        tracing::info!(version, "warehouse schema migrated");
    }
    Ok(SCHEMA_VERSION)
}

/// The statements that replace every table from the staged Parquet files and record history,
/// to run inside one transaction. Each table is built under a new name and swapped in, so a
/// reader or a crash sees either the old table or the new one.
pub fn swap_in_sql(staging: &Path) -> String {
    let mut sql = String::new();
    for (name, ddl) in TABLES {
        let file = staging.join(format!("{name}.parquet"));
        let file = file.display().to_string().replace('\'', "''");
        sql.push_str(&format!(
            "DROP TABLE IF EXISTS {name}__new;\n\
             CREATE TABLE {name}__new ({ddl});\n\
             INSERT INTO {name}__new BY NAME SELECT * FROM read_parquet('{file}', hive_partitioning = false);\n\
             DROP TABLE {name};\n\
             ALTER TABLE {name}__new RENAME TO {name};\n"
        ));
    }
    sql
}

/// SCD2 on `application_status_history`: close the current row of every application whose
/// status changed and open a new one; first sightings open a row. Returns the changes.
pub fn record_history(conn: &Connection) -> Result<u64, LoadError> {
    let [close, open, first] = history_statements(None);
    let changed = conn
        .execute(&close, params![])
        .map_err(|e| LoadError::db("close changed statuses in `application_status_history`", e))?;
    conn.execute_batch(&format!("{open};\n{first};"))
        .map_err(|e| LoadError::db("open statuses in `application_status_history`", e))?;
    Ok(changed as u64)
}

/// [`record_history`] in a fleet warehouse, for the organizations `orgs` only, each
/// application's history its organization's. Returns the changes per organization.
pub fn record_history_of(
    conn: &Connection,
    orgs: &[String],
) -> Result<std::collections::BTreeMap<String, u64>, LoadError> {
    let [close, open, first] = history_statements(Some(&sql_list(orgs)));
    let failed = |e| LoadError::db("close changed statuses in `application_status_history`", e);
    let mut stmt = conn.prepare(&format!("{close} RETURNING h.organization")).map_err(failed)?;
    let mut changed = std::collections::BTreeMap::new();
    for org in stmt.query_map([], |r| r.get::<_, String>(0)).map_err(failed)? {
        *changed.entry(org.map_err(failed)?).or_insert(0) += 1;
    }
    conn.execute_batch(&format!("{open};\n{first};"))
        .map_err(|e| LoadError::db("open statuses in `application_status_history`", e))?;
    Ok(changed)
}

/// The SCD2 statements: close the changed, open the new, and carry the first sighting into
/// `applications.first_seen_at`. With `orgs` (an SQL list), only those organizations' rows of a
/// fleet warehouse, matched by organization.
fn history_statements(orgs: Option<&str>) -> [String; 3] {
    let (key, first_key, scope, org_column, group, only) = match orgs {
        Some(list) => (
            "h.organization = a.organization AND ",
            "a.organization = f.organization AND ",
            format!("a.organization IN ({list}) AND "),
            "a.organization, ",
            "organization, ",
            format!("WHERE organization IN ({list}) "),
        ),
        None => ("", "", String::new(), "", "", String::new()),
    };
    [
        format!(
            "UPDATE application_status_history AS h SET valid_to = a.last_seen_at FROM applications AS a \
             WHERE {scope}{key}h.id = a.id AND h.valid_to IS NULL AND h.status <> a.status AND a.last_seen_at > h.valid_from"
        ),
        format!(
            "INSERT INTO application_status_history \
             SELECT {org_column}a.id, a.status, a.last_seen_at, NULL FROM applications AS a \
             WHERE {scope}NOT EXISTS (SELECT 1 FROM application_status_history AS h WHERE {key}h.id = a.id AND h.valid_to IS NULL)"
        ),
        format!(
            "UPDATE applications AS a SET first_seen_at = f.first FROM \
             (SELECT {group}id, min(valid_from) AS first FROM application_status_history {only}GROUP BY {group}id) AS f \
             WHERE {first_key}a.id = f.id AND f.first < a.first_seen_at"
        ),
    ]
}

/// Whether the database `conn` has a table (or view) named `name`.
pub fn has_table(conn: &Connection, name: &str) -> Result<bool, LoadError> {
    // DuckDB's own catalog functions: `information_schema.tables` costs about 15 ms a query on
    // a connection with a few temporary views, and a fleet asks once per organization.
    conn.query_row(
        "SELECT (SELECT count(*) FROM duckdb_tables() WHERE table_name = $1) \
         + (SELECT count(*) FROM duckdb_views() WHERE view_name = $1 AND NOT internal) > 0",
        [name],
        |r| r.get(0),
    )
    .map_err(|e| LoadError::db("read the schema", e))
}

/// What a view over `source`, a table of many organizations (a fleet warehouse's, the lake's),
/// selects: with `org`, that organization's rows without the `hidden` columns (one
/// organization's columns); without, every row.
pub fn organization_select(source: &str, rows: Rows<'_>, hidden: &[&str]) -> String {
    match rows {
        Rows::Of(org) => {
            format!("SELECT * EXCLUDE ({}) FROM {source} WHERE organization = {}", hidden.join(", "), sql_literal(org))
        }
        Rows::Switched => format!(
            "SELECT * EXCLUDE ({}) FROM {source} WHERE organization = getvariable('{ORG_VARIABLE}')",
            hidden.join(", ")
        ),
        Rows::Every => format!("SELECT * FROM {source}"),
    }
}

/// The connection variable that names the organization a [`Rows::Switched`] view shows.
pub const ORG_VARIABLE: &str = "creator_etl_org";

/// Which rows of a table of many organizations a view shows.
#[derive(Clone, Copy, Debug)]
pub enum Rows<'a> {
    /// Every organization's, with `organization`.
    Every,
    /// One organization's, with one organization's columns.
    Of(&'a str),
    /// The organization the connection's variable [`ORG_VARIABLE`] names, with one
    /// organization's columns: one connection reads organization after organization.
    Switched,
}

impl<'a> Rows<'a> {
    /// One organization's rows, or every organization's.
    pub fn of(org: Option<&'a str>) -> Self {
        org.map_or(Rows::Every, Rows::Of)
    }
}

/// Names as an SQL list of string literals: `'a', 'b'`.
pub fn sql_list(names: &[String]) -> String {
    names.iter().map(|n| sql_literal(n)).collect::<Vec<_>>().join(", ")
}

/// A text as an SQL string literal, quotes doubled.
pub fn sql_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// Rows per table, for the report and the ledger.
pub fn row_counts(conn: &Connection) -> Result<std::collections::BTreeMap<String, u64>, LoadError> {
    let mut out = std::collections::BTreeMap::new();
    for name in TABLES.iter().map(|(n, _)| *n).chain(["application_status_history"]) {
        let n: i64 = conn
            .query_row(&format!("SELECT count(*) FROM {name}"), [], |r| r.get(0))
            .map_err(|e| LoadError::db(format!("count `{name}`"), e))?;
        out.insert(name.to_owned(), n as u64);
    }
    Ok(out)
}

/// Every table of the Parquet export: the replaced ones and the history.
pub fn exported_tables() -> Vec<&'static str> {
    TABLES.iter().map(|(n, _)| *n).chain(["application_status_history"]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::models::{ApplicationStatus, Provider, SignupSource};
    use crate::extract::Metric;
    use chrono::{DateTime, NaiveDate, Utc};

    #[test]
    fn migrations_bring_an_empty_warehouse_to_the_current_version_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.duckdb");
        let conn = open(&path).unwrap();
        let versions: i64 = conn.query_row("SELECT count(*) FROM schema_version", [], |r| r.get(0)).unwrap();
        assert_eq!(versions, i64::from(SCHEMA_VERSION), "one row per migration");
        drop(conn);
        let conn = open(&path).unwrap();
        let versions: i64 = conn.query_row("SELECT count(*) FROM schema_version", [], |r| r.get(0)).unwrap();
        assert_eq!(versions, i64::from(SCHEMA_VERSION), "opening again migrates nothing");
        for (name, _) in TABLES {
            conn.query_row(&format!("SELECT count(*) FROM {name}"), [], |r| r.get::<_, i64>(0)).unwrap();
        }
        conn.query_row("SELECT count(*) FROM cohort_acceptance", [], |r| r.get::<_, i64>(0)).unwrap();
    }

    /// A warehouse written by the version-1 creator-etl (before the actions journal) gains the
    /// journal tables in place, keeping its data.
    #[test]
    fn a_version_1_warehouse_upgrades_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.duckdb");
        let conn = open(&path).unwrap();
        conn.execute_batch(
            "DROP TABLE action_journal; DROP TABLE action_results; DELETE FROM schema_version WHERE version >= 2;
             INSERT INTO runs (run_id, status) VALUES ('old-run', 'completed');",
        )
        .unwrap();
        drop(conn);
        let conn = open(&path).unwrap();
        let version: i32 = conn.query_row("SELECT max(version) FROM schema_version", [], |r| r.get(0)).unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        conn.query_row("SELECT count(*) FROM action_journal", [], |r| r.get::<_, i64>(0)).unwrap();
        let kept: i64 = conn.query_row("SELECT count(*) FROM runs WHERE run_id = 'old-run'", [], |r| r.get(0)).unwrap();
        assert_eq!(kept, 1);
    }

    /// A warehouse holding one application (with an account) and one content day of each metric,
    /// with a date before 1970 and a timestamp with microseconds.
    fn planted() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("w.duckdb")).unwrap();
        conn.execute_batch(
            "INSERT INTO applications VALUES (7, 'on_hold', 3, 'Spring', 11, 'Ana', NULL, 'partner_portal', \
               '1969-12-31 23:59:59.123456+00', 1, 4, '2024-05-01 10:00:00+00', '2024-05-02 10:00:00.000001+00');
             INSERT INTO connected_accounts VALUES (7, 70, 'instagram', NULL, 4);
             INSERT INTO content_daily VALUES ('views', '1969-07-20', '1969-07-13', 5, 4), ('likes', '2024-02-29', '2024-02-22', 2, 1);
             INSERT INTO runs (run_id, finished_at, status, sync_mode, sync_scope) \
               VALUES ('r1', '2024-05-02 10:00:00.5+00', 'completed', 'full', 'statuses=on_hold;campaign=all');",
        )
        .unwrap();
        (dir, conn)
    }

    fn day(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    #[test]
    fn dates_timestamps_and_the_services_own_values_read_back_exactly() {
        let (_dir, conn) = planted();
        let content = content(&conn).unwrap();
        let views = content.iter().find(|r| r.metric == Metric::Views).unwrap();
        assert_eq!(
            (views.date, views.last_date, views.current, views.last),
            (day("1969-07-20"), day("1969-07-13"), 5, 4)
        );
        let likes = content.iter().find(|r| r.metric == Metric::Likes).unwrap();
        assert_eq!((likes.date, likes.last_date), (day("2024-02-29"), day("2024-02-22")));

        let apps = applications_where(&conn, "true").unwrap();
        assert_eq!(apps.len(), 1);
        let o = &apps[0];
        assert_eq!(o.observed_at, at("2024-05-02T10:00:00.000001Z"));
        assert_eq!(o.app.applied_at, at("1969-12-31T23:59:59.123456Z"));
        // Values the service sent and the client kept as text come back as that text.
        assert_eq!(o.app.status, ApplicationStatus::Other("on_hold".into()));
        assert_eq!(o.app.signup_source, SignupSource::Other("partner_portal".into()));
        assert_eq!(o.app.connected_accounts[0].provider, Provider::Other("instagram".into()));
        assert_eq!((o.app.email.as_deref(), o.app.connected_accounts[0].username.as_deref()), (None, None));

        let snap = snapshot(&conn, &["on_hold".to_owned()], None).unwrap().unwrap();
        assert_eq!(snap.last_reconcile, Some(at("2024-05-02T10:00:00.5Z")));
        assert_eq!(snap.list("on_hold"), &[(at("1969-12-31T23:59:59.123456Z").timestamp_micros(), 7)]);
    }

    /// Each damage is planted in a fresh warehouse. The read that meets it fails naming the
    /// table, the column and the value, instead of reading a default (1970-01-01, `views`, an
    /// empty text).
    #[test]
    fn an_unreadable_value_is_an_error_naming_table_column_and_value() {
        let content_of = |c: &Connection| content(c).map(|_| ());
        let apps_of = |c: &Connection| applications_where(c, "true").map(|_| ());
        let snapshot_of = |c: &Connection| snapshot(c, &["on_hold".to_owned()], None).map(|_| ());
        type Read = dyn Fn(&Connection) -> Result<(), LoadError>;
        let cases: [(&str, &Read, &str, &str, &str); 9] = [
            (
                "UPDATE content_daily SET metric = 'shares' WHERE metric = 'likes'",
                &content_of,
                "content_daily",
                "metric",
                "`shares`",
            ),
            (
                "UPDATE content_daily SET date = 'infinity' WHERE metric = 'views'",
                &content_of,
                "content_daily",
                "date",
                "`infinity`",
            ),
            (
                "UPDATE content_daily SET last_date = '-infinity' WHERE metric = 'views'",
                &content_of,
                "content_daily",
                "last_date",
                "`-infinity`",
            ),
            ("UPDATE applications SET applied_at = 'infinity'", &apps_of, "applications", "applied_at", "`infinity`"),
            (
                "UPDATE applications SET applied_at = 'infinity'",
                &snapshot_of,
                "applications",
                "applied_at",
                "`infinity`",
            ),
            ("UPDATE runs SET finished_at = '-infinity'", &snapshot_of, "runs", "finished_at", "`-infinity`"),
            ("UPDATE applications SET signup_source = NULL", &apps_of, "applications", "signup_source", "NULL"),
            ("UPDATE applications SET campaign_name = NULL", &apps_of, "applications", "campaign_name", "NULL"),
            ("UPDATE connected_accounts SET provider = NULL", &apps_of, "connected_accounts", "provider", "NULL"),
        ];
        for (damage, read, table, column, value) in cases {
            let (_dir, conn) = planted();
            conn.execute_batch(damage).unwrap();
            let err = read(&conn).expect_err(damage);
            let LoadError::Unreadable { table: t, column: c, .. } = &err else { panic!("{damage}: {err}") };
            assert_eq!((t.as_str(), c.as_str()), (table, column), "{damage}: {err}");
            let text = err.to_string();
            assert!(text.contains(&format!("`{table}.{column}`")) && text.contains(value), "{damage}: {text}");
        }
    }

    #[test]
    fn a_newer_warehouse_is_refused_with_a_clear_message() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.duckdb");
        let conn = open(&path).unwrap();
        conn.execute_batch("INSERT INTO schema_version VALUES (99, now());").unwrap();
        drop(conn);
        let err = open(&path).unwrap_err();
        assert!(matches!(err, LoadError::NewerSchema { found: 99, .. }), "{err}");
        assert!(err.to_string().contains("upgrade creator-etl"));
    }
}
