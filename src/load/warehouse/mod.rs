//! The DuckDB warehouse's files and schema: opening the writer's file (and migrating it, one
//! organization's or a fleet's, as the [catalog](super::catalog) has it), publishing it to
//! readers, reading it read-only, and the SQL helpers the load shares. Reading values back is
//! [`readback`]'s.
//!
//! **One writer, many readers.** DuckDB lets one process open a file for writing, and no process
//! read it meanwhile (and a reader blocks the writer). So the writer and the readers use
//! different files ([`OutDir::writer_warehouse`], [`OutDir::warehouse`]):
//! - the writer's, opened only by creator-etl's writing commands (which hold the `--out` lock)
//!   and, for a moment, by `actions plan`;
//! - the readers' snapshot: after every load and every actions run, the writer checkpoints its
//!   file and copies it there, by a rename. A notebook, a `duckdb` shell or `creator-etl query`
//!   holding the snapshot open never blocks a load; it keeps the snapshot it opened (the old
//!   file stays readable until it closes), and sees the new one when it reconnects. Changes made
//!   to the snapshot are overwritten by the next publish.
//!
//! A writer that finds its file held (a plan reading it) retries for a few seconds, then gives
//! up naming the process that holds it (exit 5). Writing commands open the file before they
//! send any request, so a run learns this before its extract spends the hour's budget.

mod readback;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use duckdb::Connection;

pub use readback::{
    applications_where, content, content_cursor, in_scope, latest_run, load_rows, previous_rows, scope_filter,
    snapshot, sync_scope, LoadRows, OpenStatuses, PreviousRows,
};

use super::catalog::{self, Shape, ORGANIZATION};
use super::LoadError;
use crate::out::OutDir;

/// How long a writer waits for a reader of its own file (an `actions plan`) to let go.
const WRITER_WAIT: Duration = Duration::from_secs(5);

/// Opens (creating) one organization's writer's warehouse and brings its schema up to date. A
/// warehouse of the layout before the reader snapshot (only the readers' file) is adopted by
/// copying it. The caller holds the `--out` lock.
pub fn open_writer(out: &OutDir) -> Result<Connection, LoadError> {
    open_writer_of(out, Shape::One)
}

/// [`open_writer`] for a warehouse of `shape`: one organization's, or a fleet's.
pub fn open_writer_of(out: &OutDir, shape: Shape) -> Result<Connection, LoadError> {
    let path = out.writer_warehouse();
    let legacy = out.warehouse();
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
                Some(holder) => {
                    let snapshot = out.warehouse().display().to_string();
                    return Err(LoadError::Locked { path: path.display().to_string(), holder, snapshot });
                }
                None => return Err(LoadError::db(format!("open `{}`", path.display()), e)),
            },
        }
    };
    no_downloads(&conn).map_err(|e| LoadError::db("configure the connection", e))?;
    migrate(&conn, shape)?;
    Ok(conn)
}

/// Checks that the writer's warehouse can be opened for writing, and migrates it: what a run
/// does before it spends any request.
///
/// Returns the open connection for the preflight's other reads, so that DuckDB starts once;
/// `None` for a first load.
pub fn check_writable(out: &OutDir) -> Result<Option<Connection>, LoadError> {
    if !out.writer_warehouse().exists() && !out.warehouse().exists() {
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

/// Checkpoints the writer's warehouse, closes it, and publishes it as the readers' snapshot with
/// one rename. Readers holding the old snapshot keep it until they reconnect.
pub fn publish(conn: Connection, out: &OutDir) -> Result<(), LoadError> {
    conn.execute_batch("CHECKPOINT;").map_err(|e| LoadError::db("checkpoint the warehouse", e))?;
    drop(conn);
    let from = out.writer_warehouse();
    let to = out.warehouse();
    let tmp = out.publishing_file(std::process::id());
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
            let name = e.file_name().to_string_lossy().into_owned();
            if OutDir::is_publish_leftover(&name) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Opens a DuckDB file read-only.
fn open_read_only(path: &Path) -> duckdb::Result<Connection> {
    duckdb::Config::default()
        .access_mode(duckdb::AccessMode::ReadOnly)
        .and_then(|c| Connection::open_with_flags(path, c))
}

/// Opens the freshest warehouse read-only: the writer's file, or, while a running command holds
/// it, the readers' snapshot (the note says so). `None` when there is neither.
pub fn open_latest_read_only(out: &OutDir) -> Result<Option<(Connection, Option<String>)>, LoadError> {
    let writer = out.writer_warehouse();
    let published = out.warehouse();
    if writer.exists() {
        match open_read_only(&writer) {
            Ok(c) => return Ok(Some((c, None))),
            Err(e) => match lock_holder(&e) {
                Some(holder) if published.exists() => {
                    let note = format!(
                        "a running command is writing the warehouse; this reads the snapshot published after the last command ({holder})"
                    );
                    let c = open_read_only(&published)
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
    let c = open_read_only(&published)
        .map_err(|e| LoadError::db(format!("open `{}` read-only", published.display()), e))?;
    Ok(Some((c, None)))
}

/// Opens (creating) a warehouse file of `shape` and brings its schema up to date (unit tests;
/// commands use [`open_writer`]).
#[cfg(test)]
pub(crate) fn open(path: &Path, shape: Shape) -> Result<Connection, LoadError> {
    let conn = Connection::open(path).map_err(|e| LoadError::db(format!("open `{}`", path.display()), e))?;
    no_downloads(&conn).map_err(|e| LoadError::db("configure the connection", e))?;
    migrate(&conn, shape)?;
    Ok(conn)
}

/// Forbids DuckDB to download extensions at run time: a scheduled job must not fetch code, and
/// offline it would only fail later with a network error. The bundled DuckDB has no ICU, so it
/// has no session time zone: TIMESTAMPTZ values are UTC throughout, which is what the tables mean.
pub fn no_downloads(conn: &Connection) -> duckdb::Result<()> {
    conn.execute_batch("SET autoinstall_known_extensions = false;")
}

/// Whether the warehouse `conn` is a fleet's.
pub fn is_fleet(conn: &Connection) -> Result<bool, LoadError> {
    has_table(conn, Shape::Fleet.version_table())
}

/// Whether `out` holds a fleet warehouse (its writer's file). A file that cannot be opened
/// (held by its writer) is checked by its readers' snapshot; `false` when neither can be read.
pub fn holds_fleet_warehouse(out: &OutDir) -> bool {
    [out.writer_warehouse(), out.warehouse()]
        .iter()
        .filter(|p| p.is_file())
        .any(|path| open_read_only(path).ok().is_some_and(|c| is_fleet(&c).unwrap_or(false)))
}

/// Why one organization's command refuses a fleet warehouse.
pub const NOT_ONE_ORGANIZATION: &str = "this is a fleet's warehouse (every table keyed by `organization`), written by \
     `fleet run --warehouse fleet`; read it with `creator-etl query --org NAME`, and sync its organizations with \
     `fleet run --warehouse fleet`";

/// Why `fleet run --warehouse fleet` refuses one organization's warehouse.
const NOT_A_FLEET: &str = "this is one organization's warehouse, not a fleet's: `fleet run --warehouse fleet` keeps its \
     warehouse under its own `--out` (give it a directory of its own, or `--warehouse per-org` to keep one warehouse per \
     organization)";

/// Brings a warehouse of `shape` to the catalog's version: a new one is made whole as the
/// catalog has it; an older one gets each later migration's steps, each version in its own
/// transaction. A warehouse of the other shape, or of a newer version, is refused.
pub fn migrate(conn: &Connection, shape: Shape) -> Result<i32, LoadError> {
    let other = match shape {
        Shape::One => Shape::Fleet,
        Shape::Fleet => Shape::One,
    };
    if has_table(conn, other.version_table())? {
        return Err(LoadError::Kind(if shape == Shape::One { NOT_ONE_ORGANIZATION } else { NOT_A_FLEET }.into()));
    }
    let marker = shape.version_table();
    let target = shape.version();
    let current: i32 = if has_table(conn, marker)? {
        conn.query_row(&format!("SELECT coalesce(max(version), 0) FROM {marker}"), [], |r| r.get(0))
            .map_err(|e| LoadError::db("read the schema version", e))?
    } else {
        0
    };
    if current > target {
        return Err(LoadError::NewerSchema { found: current, supported: target });
    }
    let in_transaction = |sql: &str, what: String| -> Result<(), LoadError> {
        let tx = conn.unchecked_transaction().map_err(|e| LoadError::db(what.clone(), e))?;
        tx.execute_batch(sql).map_err(|e| LoadError::db(what.clone(), e))?;
        tx.commit().map_err(|e| LoadError::db(what, e))
    };
    if current == 0 && !has_any_table(conn, shape)? {
        in_transaction(&catalog::create_all_sql(shape), "create the warehouse's tables".into())?;
        return Ok(target);
    }
    // The version table is made with the first migration, in its transaction: a failed
    // migration leaves no version table to mark the file as one it is not.
    let mut version_table = Some(catalog::create_version_table_sql(shape));
    for (version, steps) in shape.migrations().iter().filter(|(v, _)| *v > current) {
        let what = format!("migrate to schema version {version}");
        let tx = conn.unchecked_transaction().map_err(|e| LoadError::db(what.clone(), e))?;
        // The columns as they are inside this migration's transaction, before its steps.
        let mut columns: Vec<(String, String)> = vec![];
        let mut stmt = tx
            .prepare("SELECT table_name, column_name FROM duckdb_columns() WHERE schema_name = 'main'")
            .map_err(|e| LoadError::db(what.clone(), e))?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).map_err(|e| LoadError::db(what.clone(), e))?;
        for row in rows {
            columns.push(row.map_err(|e| LoadError::db(what.clone(), e))?);
        }
        drop(stmt);
        let has = |table: &str, column: &str| columns.iter().any(|(t, c)| t == table && c == column);
        let sql = version_table.take().unwrap_or_default() + &catalog::migration_sql(shape, *version, steps, &has);
        tx.execute_batch(&sql).map_err(|e| LoadError::db(what.clone(), e))?;
        tx.commit().map_err(|e| LoadError::db(what, e))?;
        tracing::info!(version, "warehouse schema migrated");
    }
    Ok(target)
}

/// Whether the warehouse has any of `shape`'s tables: one without its version table but with
/// tables is an old one to migrate, never made anew over them.
fn has_any_table(conn: &Connection, shape: Shape) -> Result<bool, LoadError> {
    for t in catalog::tables_of(shape) {
        if has_table(conn, t.name)? {
            return Ok(true);
        }
    }
    Ok(false)
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
/// selects: see [`Rows`]. `hidden` are the columns of `source` that are not the table's own (the
/// lake's partition columns), `organization` among them.
pub fn organization_select(source: &str, rows: Rows<'_>, hidden: &[&str]) -> String {
    match rows {
        Rows::Of(org) => {
            format!("SELECT * EXCLUDE ({}) FROM {source} WHERE organization = {}", hidden.join(", "), sql_literal(org))
        }
        Rows::Every => format!("SELECT * FROM {source}"),
        Rows::Keyed => {
            let columns = match hidden.iter().filter(|c| **c != ORGANIZATION).copied().collect::<Vec<_>>() {
                other if other.is_empty() => "*".to_owned(),
                other => format!("* EXCLUDE ({})", other.join(", ")),
            };
            format!(
                "SELECT {columns} FROM {source} WHERE getvariable('{ORGS_VARIABLE}') IS NULL \
                 OR list_contains(getvariable('{ORGS_VARIABLE}'), organization)"
            )
        }
    }
}

/// The connection variable that lists the organizations a [`Rows::Keyed`] view shows (a list
/// of names; every organization while it is unset).
pub const ORGS_VARIABLE: &str = "creator_etl_orgs";

/// The statement that makes [`Rows::Keyed`] views show the organizations `orgs`.
pub fn keyed_to(orgs: &[String]) -> String {
    format!("SET VARIABLE {ORGS_VARIABLE} = [{}]::VARCHAR[];", sql_list(orgs))
}

/// Which rows of a table of many organizations a view shows.
#[derive(Clone, Copy, Debug)]
pub enum Rows<'a> {
    /// Every organization's, with `organization` and every other column of the source (a SQL
    /// file read without `--org`).
    Every,
    /// One organization's, with one organization's columns (a SQL file read with `--org`).
    Of(&'a str),
    /// The table's columns and `organization`, of the organizations the connection's variable
    /// [`ORGS_VARIABLE`] lists ([`keyed_to`]), or of every one: what the named queries read,
    /// written with `organization` as a key, so that one query answers for many organizations.
    Keyed,
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

/// Rows per table, one table's row counts by name.
pub type RowCounts = std::collections::BTreeMap<String, u64>;

/// Rows per table of `tables`, for the report and the ledger: of one organization's warehouse
/// (`orgs` `None`: keyed `None`), or of each of `orgs` in a fleet warehouse (keyed by
/// organization; every table named for every one of them, with 0 where it has no rows).
pub fn row_counts(
    conn: &Connection,
    orgs: Option<&[String]>,
    tables: &[&str],
) -> Result<std::collections::BTreeMap<Option<String>, RowCounts>, LoadError> {
    use std::collections::BTreeMap;
    let mut out: BTreeMap<Option<String>, RowCounts> = BTreeMap::new();
    for &table in tables {
        let failed = |e| LoadError::db(format!("count `{table}`"), e);
        let sql = match orgs {
            Some(orgs) => {
                for org in orgs {
                    out.entry(Some(org.clone())).or_default().insert(table.to_owned(), 0);
                }
                format!(
                    "SELECT organization, count(*) FROM {table} WHERE organization IN ({}) GROUP BY organization",
                    sql_list(orgs)
                )
            }
            None => format!("SELECT CAST(NULL AS VARCHAR) AS organization, count(*) FROM {table}"),
        };
        let mut stmt = conn.prepare(&sql).map_err(failed)?;
        let counts =
            stmt.query_map([], |r| Ok((r.get::<_, Option<String>>(0)?, r.get::<_, i64>(1)?))).map_err(failed)?;
        for c in counts {
            let (org, n) = c.map_err(failed)?;
            out.entry(org).or_default().insert(table.to_owned(), n as u64);
        }
    }
    Ok(out)
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
        let conn = open(&path, Shape::One).unwrap();
        let versions: i64 = conn.query_row("SELECT count(*) FROM schema_version", [], |r| r.get(0)).unwrap();
        assert_eq!(versions, i64::from(Shape::One.version()), "one row per migration");
        drop(conn);
        let conn = open(&path, Shape::One).unwrap();
        let versions: i64 = conn.query_row("SELECT count(*) FROM schema_version", [], |r| r.get(0)).unwrap();
        assert_eq!(versions, i64::from(Shape::One.version()), "opening again migrates nothing");
        for t in catalog::tables_of(Shape::One) {
            conn.query_row(&format!("SELECT count(*) FROM {}", t.name), [], |r| r.get::<_, i64>(0)).unwrap();
        }
        conn.query_row("SELECT count(*) FROM cohort_acceptance", [], |r| r.get::<_, i64>(0)).unwrap();
    }

    /// A warehouse written by the version-1 creator-etl (before the actions journal) gains the
    /// journal tables in place, keeping its data.
    #[test]
    fn a_version_1_warehouse_upgrades_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.duckdb");
        let conn = open(&path, Shape::One).unwrap();
        conn.execute_batch(
            "DROP TABLE action_journal; DROP TABLE action_results; DELETE FROM schema_version WHERE version >= 2;
             INSERT INTO runs (run_id, status) VALUES ('old-run', 'completed');",
        )
        .unwrap();
        drop(conn);
        let conn = open(&path, Shape::One).unwrap();
        let version: i32 = conn.query_row("SELECT max(version) FROM schema_version", [], |r| r.get(0)).unwrap();
        assert_eq!(version, Shape::One.version());
        conn.query_row("SELECT count(*) FROM action_journal", [], |r| r.get::<_, i64>(0)).unwrap();
        let kept: i64 = conn.query_row("SELECT count(*) FROM runs WHERE run_id = 'old-run'", [], |r| r.get(0)).unwrap();
        assert_eq!(kept, 1);
    }

    /// A warehouse holding one application (with an account) and one content day of each metric,
    /// with a date before 1970 and a timestamp with microseconds.
    fn planted() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(&dir.path().join("w.duckdb"), Shape::One).unwrap();
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
        let conn = open(&path, Shape::One).unwrap();
        conn.execute_batch("INSERT INTO schema_version VALUES (99, now());").unwrap();
        drop(conn);
        let err = open(&path, Shape::One).unwrap_err();
        assert!(matches!(err, LoadError::NewerSchema { found: 99, .. }), "{err}");
        assert!(err.to_string().contains("upgrade creator-etl"));
    }
}
