//! The fleet warehouse: every organization of a fleet in one DuckDB file, with the lake's
//! schema (every table has `organization`), loaded in batches.
//!
//! `fleet run` keeps it under the fleet's `--out` as any warehouse is kept: the writer's file
//! `OUT/state/warehouse.duckdb`, published to readers as `OUT/warehouse.duckdb`, and one Parquet
//! tree `OUT/parquet/<table>/organization=<name>/…`. What must stay an organization's own stays
//! under `OUT/orgs/<name>/`: its raw landing, resume state, lock, pacing memory and action
//! journal.
//!
//! - **Reading one organization.** [`FleetWarehouse::with_org`] shadows every table with a
//!   temporary view of that organization's rows, without the `organization` column, so the
//!   one-organization readers (the quick sync's snapshot, the content cursor, the load's previous
//!   state) read it unchanged.
//! - **Loading a batch.** [`FleetWarehouse::load`] prepares each member as a one-organization
//!   load does (previous state, checks, transform), stages its frames as Parquet, and replaces
//!   every member's rows in one transaction: per table, `DELETE … WHERE organization IN (…)`
//!   and one `INSERT` of the staged files; then the status history (SCD2) and one `runs` row per
//!   member. A member that fails its preparation (a data-quality failure under `--strict`, an
//!   unreadable row) fails alone; a transaction that fails is retried member by member, so one
//!   member's error never costs the others their load. A crash before `COMMIT` leaves every
//!   member as it was: each resumes and converges on the next run.
//! - **Publishing.** [`FleetWarehouse::publish`] exports the Parquet tree and publishes the
//!   snapshot, for all the batches loaded since the last publish; the caller decides how often.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use duckdb::Connection;

use super::warehouse::{self, sql_list, sql_literal, TABLES};
use super::{export_tables, prepare, record_runs, write_parquet, Export, Laps, LoadError, LoadReport, RunRow};
use crate::extract::{ExtractReport, Extracted};
use crate::out::OutDir;

/// The schema version of a fleet warehouse this version writes.
/// Version 2: the data tables and the status history declare no primary key (their keys are
/// checked per batch instead, [`check_keys`]): DuckDB maintained the key's index at every
/// batch's commit, which took 10 times the batch's own writes once the tables were large.
pub const FLEET_SCHEMA_VERSION: i32 = 2;

/// Why one organization's command refuses a fleet warehouse.
pub const NOT_ONE_ORGANIZATION: &str = "this is a fleet's warehouse (every table keyed by `organization`), written by \
     `fleet run --warehouse fleet`; read it with `creator-etl query --org NAME`, and sync its organizations with \
     `fleet run --warehouse fleet`";

/// Whether `out` holds a fleet warehouse (its writer's file). A file that cannot be opened
/// (held by its writer) is checked by its readers' snapshot; `false` when neither can be read.
pub fn holds_fleet_warehouse(out: &OutDir) -> bool {
    [warehouse::writer_path(out), warehouse::published_path(out)].iter().filter(|p| p.is_file()).any(|path| {
        duckdb::Config::default()
            .access_mode(duckdb::AccessMode::ReadOnly)
            .and_then(|c| Connection::open_with_flags(path, c))
            .ok()
            .is_some_and(|c| is_fleet(&c).unwrap_or(false))
    })
}

/// The marker of a fleet warehouse: its schema versions (one organization's warehouse has
/// `schema_version`).
const MARKER: &str = "fleet_schema_version";

/// The tables of a fleet warehouse beyond [`TABLES`], with their DDL.
const OWN_TABLES: [(&str, &str); 3] = [
    (
        "application_status_history",
        "organization VARCHAR NOT NULL, id BIGINT NOT NULL, status VARCHAR NOT NULL, \
         valid_from TIMESTAMPTZ NOT NULL, valid_to TIMESTAMPTZ, PRIMARY KEY (organization, id, valid_from)",
    ),
    (
        "runs",
        "organization VARCHAR NOT NULL, run_id VARCHAR NOT NULL, started_at TIMESTAMPTZ, finished_at TIMESTAMPTZ, \
         status VARCHAR NOT NULL, extract_ms BIGINT, transform_ms BIGINT, load_ms BIGINT, requests BIGINT, \
         retries BIGINT, rate_limited BIGINT, pacing_wait_ms BIGINT, rows_json VARCHAR, warnings_json VARCHAR, \
         status_changes BIGINT, parquet_exported BOOLEAN NOT NULL DEFAULT false, report_json VARCHAR, \
         warnings BIGINT, sync_mode VARCHAR, sync_scope VARCHAR, pages_verified BIGINT, \
         last_reconcile_at TIMESTAMPTZ, counts_agree BOOLEAN, PRIMARY KEY (organization, run_id)",
    ),
    (
        "action_results",
        "organization VARCHAR NOT NULL, run_id VARCHAR NOT NULL, file VARCHAR NOT NULL, line BIGINT NOT NULL, \
         row_id VARCHAR, action VARCHAR NOT NULL, target VARCHAR NOT NULL, approved BOOLEAN NOT NULL, \
         outcome VARCHAR NOT NULL, http_status INTEGER, message VARCHAR, fingerprint VARCHAR NOT NULL, \
         reviewer VARCHAR, finished_at TIMESTAMPTZ NOT NULL, PRIMARY KEY (organization, run_id, line)",
    ),
];

/// Every table of a fleet warehouse, by name.
pub fn tables() -> Vec<&'static str> {
    TABLES.iter().chain(&OWN_TABLES).map(|(n, _)| *n).collect()
}

/// One organization's table DDL keyed by organization: `organization` first, and first in the
/// primary key.
fn keyed(ddl: &str) -> String {
    // `id BIGINT PRIMARY KEY, …`: the key moves to a constraint of its own.
    let ddl = match ddl.find(" PRIMARY KEY,") {
        Some(at) => {
            let column = ddl[..at].split_whitespace().next().unwrap_or_default();
            format!("{} NOT NULL,{}, PRIMARY KEY ({column})", &ddl[..at], &ddl[at + " PRIMARY KEY,".len()..])
        }
        None => ddl.to_owned(),
    };
    format!("organization VARCHAR NOT NULL, {}", ddl.replace("PRIMARY KEY (", "PRIMARY KEY (organization, "))
}

/// A data table of a fleet warehouse (one of [`TABLES`], or the status history): [`keyed`]'s
/// columns, without the primary key constraint, and the key's columns.
fn unconstrained(keyed: &str) -> (&str, &str) {
    match keyed.rsplit_once(", PRIMARY KEY (") {
        Some((columns, key)) => (columns, key.trim_end_matches(')')),
        None => (keyed, ""),
    }
}

/// The tables whose keys are checked per batch instead of declared, with their DDL (as
/// [`keyed`] gives it) and key.
fn unconstrained_tables() -> Vec<(&'static str, String, String)> {
    TABLES
        .iter()
        .map(|(name, ddl)| (*name, keyed(ddl)))
        .chain(std::iter::once((OWN_TABLES[0].0, OWN_TABLES[0].1.to_owned())))
        .map(|(name, ddl)| {
            let (columns, key) = unconstrained(&ddl);
            (name, columns.to_owned(), key.to_owned())
        })
        .collect()
}

/// Checks that the rows of `source` (one table's rows of a batch) have no duplicate key;
/// `table` is the table they are for.
fn check_keys(conn: &Connection, table: &str, source: &str) -> Result<(), LoadError> {
    let Some((_, _, key)) = unconstrained_tables().into_iter().find(|(name, ..)| *name == table) else {
        return Ok(());
    };
    let duplicates: i64 = conn
        .query_row(&format!("SELECT count(*) - count(DISTINCT ({key})) FROM {source}"), [], |r| r.get(0))
        .map_err(|e| LoadError::db(format!("check the keys of `{table}`"), e))?;
    if duplicates != 0 {
        return Err(LoadError::Db {
            context: format!("load the batch's `{table}`"),
            message: format!(
                "{duplicates} rows repeat a key ({key}) of another (a bug): nothing of the batch is loaded"
            ),
        });
    }
    Ok(())
}

/// Whether the warehouse `conn` is a fleet's.
pub fn is_fleet(conn: &Connection) -> Result<bool, LoadError> {
    warehouse::has_table(conn, MARKER)
}

/// Brings a fleet warehouse to [`FLEET_SCHEMA_VERSION`]; refuses one organization's warehouse.
pub fn migrate(conn: &Connection) -> Result<i32, LoadError> {
    if warehouse::has_table(conn, "schema_version")? {
        return Err(LoadError::Kind(
            "this is one organization's warehouse, not a fleet's: `fleet run --warehouse fleet` keeps its warehouse \
             under its own `--out` (give it a directory of its own, or `--warehouse per-org` to keep one warehouse per \
             organization)"
                .into(),
        ));
    }
    conn.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {MARKER} (version INTEGER NOT NULL, applied_at TIMESTAMPTZ NOT NULL);"
    ))
    .map_err(|e| LoadError::db(format!("create `{MARKER}`"), e))?;
    let current: i32 = conn
        .query_row(&format!("SELECT coalesce(max(version), 0) FROM {MARKER}"), [], |r| r.get(0))
        .map_err(|e| LoadError::db("read the schema version", e))?;
    if current > FLEET_SCHEMA_VERSION {
        return Err(LoadError::NewerSchema { found: current, supported: FLEET_SCHEMA_VERSION });
    }
    if current < FLEET_SCHEMA_VERSION {
        let mut batch = String::from("BEGIN TRANSACTION;\n");
        // A version-1 warehouse's data tables are rebuilt without their key constraint.
        for (name, columns, _) in unconstrained_tables() {
            if current == 1 {
                batch.push_str(&format!(
                    "CREATE TABLE {name}__v2 ({columns});\nINSERT INTO {name}__v2 BY NAME SELECT * FROM {name};\n\
                     DROP TABLE {name};\nALTER TABLE {name}__v2 RENAME TO {name};\n"
                ));
            } else {
                batch.push_str(&format!("CREATE TABLE IF NOT EXISTS {name} ({columns});\n"));
            }
        }
        for (name, ddl) in &OWN_TABLES[1..] {
            batch.push_str(&format!("CREATE TABLE IF NOT EXISTS {name} ({ddl});\n"));
        }
        batch.push_str(&format!("INSERT INTO {MARKER} VALUES ({FLEET_SCHEMA_VERSION}, now());\nCOMMIT;"));
        if let Err(e) = conn.execute_batch(&batch) {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(LoadError::db("create the fleet warehouse's tables", e));
        }
    }
    Ok(FLEET_SCHEMA_VERSION)
}

/// One member's outcome of a batch: its name, and its load's report or error.
pub type Outcome = (String, Result<LoadReport, LoadError>);

/// One organization's extracted run, for a batch.
pub struct Member {
    pub org: String,
    pub extracted: Extracted,
    pub report: Option<ExtractReport>,
    /// The lake the organization's rows are committed to after its batch's load.
    pub lake: Option<super::lake::LakeConfig>,
    /// It has an actions stage after its load (its lake `runs` row waits for it).
    pub actions: bool,
}

/// What every member of a fleet's batches is loaded with.
#[derive(Clone, Debug)]
pub struct BatchConfig {
    pub cohort_edges: Vec<i64>,
    /// A member whose data-quality checks find a problem fails (alone).
    pub strict: bool,
    /// How long a replaced Parquet version stays for readers.
    pub parquet_grace: Duration,
}

/// A member prepared and staged: what the batch's transaction writes.
struct Ready {
    org: String,
    frames: crate::transform::Frames,
    spec: crate::extract::RunSpec,
    quality: super::QualityReport,
    report: Option<ExtractReport>,
    laps: BTreeMap<String, u64>,
}

/// The fleet's writer warehouse, held open across batches. The caller holds the fleet's
/// `--out` lock.
pub struct FleetWarehouse {
    out: OutDir,
    conn: Option<Connection>,
    /// A second connection to the warehouse whose temporary views show one organization's rows
    /// ([`FleetWarehouse::with_org`]); dropped whenever `conn` is.
    reader: Option<Connection>,
    /// The organizations whose rows the reader's group tables hold ([`FleetWarehouse::gather`]);
    /// emptied by every write.
    group: BTreeSet<String>,
    grace: Duration,
    /// Loads since the last publish (or an export a crash interrupted).
    unpublished: bool,
    /// The organizations whose rows changed since the Parquet tree's last export: the next
    /// export writes only theirs.
    dirty: BTreeSet<String>,
    /// The organizations with a loaded run.
    loaded: BTreeSet<String>,
}

impl FleetWarehouse {
    /// Opens (creating) the fleet warehouse under `out` and brings its schema up to date.
    pub fn open(out: &OutDir, grace: Duration) -> Result<Self, LoadError> {
        let mut w = FleetWarehouse {
            out: out.clone(),
            conn: None,
            reader: None,
            group: BTreeSet::new(),
            grace,
            unpublished: false,
            dirty: BTreeSet::new(),
            loaded: BTreeSet::new(),
        };
        super::clean_leftovers(out);
        // A publish killed after its export, or a snapshot missing or older than the writer's
        // file or its WAL: the readers are behind. (Read before DuckDB opens the file.)
        let modified = |p: PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let writer = warehouse::writer_path(out);
        let written = modified(writer.clone()).max(modified(PathBuf::from(format!("{}.wal", writer.display()))));
        let behind = match (written, modified(warehouse::published_path(out))) {
            (Some(written), Some(published)) => written > published,
            (Some(_), None) => true,
            (None, _) => false,
        };
        let conn = w.conn()?;
        // A crash between a batch's commit and the publish (or during an export) left the
        // readers behind too: those organizations' runs are not marked exported.
        let read = |e| LoadError::db("read `runs`", e);
        let mut stmt =
            conn.prepare("SELECT DISTINCT organization FROM runs WHERE NOT parquet_exported").map_err(read)?;
        let unexported: BTreeSet<String> =
            stmt.query_map([], |r| r.get(0)).map_err(read)?.collect::<Result<_, _>>().map_err(read)?;
        drop(stmt);
        w.unpublished = !unexported.is_empty() || behind;
        w.dirty = unexported;
        w.loaded = w.organizations()?;
        Ok(w)
    }

    /// The open connection, reopened after a publish closed it.
    fn conn(&mut self) -> Result<&Connection, LoadError> {
        if self.conn.is_none() {
            let conn = warehouse::open_writer_with(&self.out, migrate)?;
            // A batch's changes reach the file at the next publish's checkpoint, not at each
            // commit: DuckDB's automatic checkpoint (after 16 MB of log) rewrote the tables'
            // changed row groups every batch or two, about a second each at 1,000 organizations.
            // The log is synced at every commit as before.
            conn.execute_batch("SET checkpoint_threshold = '4GB';")
                .map_err(|e| LoadError::db("configure the fleet warehouse", e))?;
            self.conn = Some(conn);
        }
        Ok(self.conn.as_ref().expect("opened above"))
    }

    /// The organizations with a loaded run.
    pub fn organizations(&mut self) -> Result<BTreeSet<String>, LoadError> {
        let conn = self.conn()?;
        let mut stmt =
            conn.prepare("SELECT DISTINCT organization FROM runs").map_err(|e| LoadError::db("read `runs`", e))?;
        let orgs = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(|e| LoadError::db("read `runs`", e))?
            .collect::<Result<BTreeSet<_>, _>>()
            .map_err(|e| LoadError::db("read `runs`", e))?;
        Ok(orgs)
    }

    /// Closes the connections (the reader first): the next use reopens the file.
    fn close(&mut self) -> Option<Connection> {
        self.reader = None;
        self.group.clear();
        self.conn.take()
    }

    /// The fleet warehouse's database, as a quoted SQL name: the reader's temporary tables and
    /// views are in the temporary database, whose schema is also `main`, so the warehouse's
    /// tables are named with their database.
    fn database(&mut self) -> Result<String, LoadError> {
        let name: String = self
            .conn()?
            .query_row("SELECT current_database()", [], |r| r.get(0))
            .map_err(|e| LoadError::db("read the database's name", e))?;
        Ok(format!("\"{}\"", name.replace('"', "\"\"")))
    }

    /// The reader connection, made on first use: every table is shadowed by a temporary view of
    /// the rows of the organization named by the connection's variable `creator_etl_org`,
    /// without `organization`. Temporary views and variables are the connection's own, so the
    /// writer's connection never sees them.
    fn reader(&mut self) -> Result<&Connection, LoadError> {
        if self.reader.is_none() {
            let failed = |e| LoadError::db("open the fleet warehouse's reader", e);
            let db = self.database()?;
            let reader = self.conn()?.try_clone().map_err(failed)?;
            let mut views = String::new();
            for t in tables() {
                views.push_str(&format!(
                    "CREATE TEMP TABLE group_{t} AS SELECT * FROM {db}.main.{t} LIMIT 0;\n\
                     CREATE TEMP VIEW {t} AS SELECT * EXCLUDE (organization) FROM temp.main.group_{t} \
                     WHERE organization = getvariable('creator_etl_org');\n"
                ));
            }
            reader.execute_batch(&views).map_err(failed)?;
            self.reader = Some(reader);
            self.group.clear();
        }
        Ok(self.reader.as_ref().expect("made above"))
    }

    /// Copies the rows of the organizations `orgs` of every table into the reader's group
    /// tables, with one scan of each table: the reads of each of them then scan their group's
    /// rows, not the fleet's. Every write empties the group, so a group never holds rows older
    /// than the warehouse's.
    pub fn gather(&mut self, orgs: &[String]) -> Result<(), LoadError> {
        let db = self.database()?;
        let list = sql_list(orgs);
        let mut sql = String::new();
        for t in tables() {
            sql.push_str(&format!(
                "DELETE FROM temp.main.group_{t};\n\
                 INSERT INTO temp.main.group_{t} SELECT * FROM {db}.main.{t} WHERE organization IN ({list});\n"
            ));
        }
        self.group.clear();
        let gathered = self.reader()?.execute_batch(&sql);
        if let Err(e) = gathered {
            self.reader = None;
            return Err(LoadError::db("read the organizations' rows", e));
        }
        self.group.extend(orgs.iter().cloned());
        Ok(())
    }

    /// Whether organization `org`'s rows are in the reader's group.
    pub fn gathered(&self, org: &str) -> bool {
        self.group.contains(org)
    }

    /// Runs `read` on organization `org`'s rows, through the reader connection's views (the
    /// one-organization readers read them unchanged): of its group's tables, gathered now if
    /// it is not in the current group. One statement per call: the views are made once per
    /// connection.
    pub fn with_org<T>(
        &mut self,
        org: &str,
        read: impl FnOnce(&Connection) -> Result<T, LoadError>,
    ) -> Result<T, LoadError> {
        if !self.group.contains(org) {
            self.gather(&[org.to_owned()])?;
        }
        let reader = self.reader()?;
        let result = match reader.execute_batch(&format!("SET VARIABLE creator_etl_org = {};", sql_literal(org))) {
            Ok(()) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read(reader)))
                .unwrap_or_else(|panic| Err(panicked(&format!("read organization `{org}`'s rows"), panic))),
            Err(e) => Err(LoadError::db(format!("read organization `{org}`'s rows"), e)),
        };
        // A read that failed may have left the reader in a failed transaction: it is made again.
        if result.is_err() {
            self.reader = None;
            self.group.clear();
        }
        result
    }

    /// Loads a batch: every member prepared and staged, then all of them in one transaction.
    /// Returns each member's outcome, in the order given; a member's error is its own.
    pub fn load(&mut self, members: Vec<Member>, config: &BatchConfig) -> Vec<Outcome> {
        let order: Vec<String> = members.iter().map(|m| m.org.clone()).collect();
        let mut outcomes: BTreeMap<String, Result<LoadReport, LoadError>> = BTreeMap::new();
        let mut ready = vec![];
        // Every member's previous rows in one scan per table (a member that cannot be gathered
        // with the others is read alone, and fails alone).
        if let Err(e) = self.gather(&order) {
            tracing::warn!(error = %e, "cannot read the batch's previous rows together; reading them one by one");
        }
        for Member { org, extracted, report, .. } in members {
            let mut laps = Laps::start();
            let prepared = self.with_org(&org, |conn| prepare(conn, extracted, &config.cohort_edges, &mut laps));
            let staged = prepared.and_then(|p| {
                if config.strict && p.quality.fails_strict() {
                    return Err(LoadError::Strict(p.quality.findings.join("; ")));
                }
                Ok(Ready {
                    org: org.clone(),
                    frames: p.frames,
                    spec: p.spec,
                    quality: p.quality,
                    report,
                    laps: laps.stages_ms,
                })
            });
            match staged {
                Ok(r) => ready.push(r),
                Err(e) => {
                    outcomes.insert(org, Err(e));
                }
            }
        }
        // Where a batch's time goes, summed over its members: the per-organization cost.
        let mut stages: BTreeMap<&str, u64> = BTreeMap::new();
        for (stage, ms) in ready.iter().flat_map(|r| &r.laps) {
            *stages.entry(stage.as_str()).or_default() += ms;
        }
        let stages = format!("{stages:?}");
        let started = std::time::Instant::now();
        // A directory of its own: batches (and the lake's staging) overlap in time.
        match crate::out::unique_dir(&self.out.root().join(".staging"), "batch-") {
            Ok(staging) => {
                for (org, outcome) in self.commit(ready, &staging) {
                    outcomes.insert(org, outcome);
                }
                if let Err(e) = std::fs::remove_dir_all(&staging) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        tracing::warn!(path = %staging.display(), error = %e, "cannot remove a batch's staged files");
                    }
                }
            }
            Err(e) => {
                let e = e.to_string();
                for r in ready {
                    outcomes.insert(r.org, Err(LoadError::Kind(format!("cannot stage the batch: {e}"))));
                }
            }
        }
        tracing::debug!(members = order.len(), stages = %stages, commit_ms = started.elapsed().as_millis() as u64, "batch stages (ms, summed over members)");
        order
            .into_iter()
            .map(|org| {
                let outcome = outcomes.remove(&org).unwrap_or_else(|| {
                    Err(LoadError::Kind(format!("organization `{org}` was given twice in one batch")))
                });
                (org, outcome)
            })
            .collect()
    }

    /// Commits the ready members in one transaction; if it fails, each member alone.
    fn commit(&mut self, ready: Vec<Ready>, staging: &Path) -> Vec<Outcome> {
        if ready.is_empty() {
            return vec![];
        }
        self.group.clear();
        let committed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.commit_all(&ready, staging)))
            .unwrap_or_else(|panic| Err(panicked("load the batch", panic)));
        if committed.is_err() {
            // A failed statement can leave the connection unusable (DuckDB invalidates a
            // database after some errors): the next attempt reopens the file.
            self.close();
        }
        match committed {
            Ok(reports) => reports,
            Err(e) if ready.len() == 1 => vec![(ready[0].org.clone(), Err(e))],
            Err(e) => {
                tracing::warn!(error = %e, members = ready.len(), "a batch's load failed; loading its members one by one");
                ready.into_iter().flat_map(|r| self.commit(vec![r], staging)).collect()
            }
        }
    }

    fn commit_all(&mut self, ready: &[Ready], staging: &Path) -> Result<Vec<Outcome>, LoadError> {
        let mut laps = Laps::start();
        let published = warehouse::published_path(&self.out);
        let parquet_dir = self.out.root().join("parquet");
        let orgs: Vec<String> = ready.iter().map(|r| r.org.clone()).collect();
        // A batch's attempt, or one member's after the batch failed: a directory of its own.
        let dir = staging.join(if let [one] = ready { one.org.as_str() } else { "batch" });
        let files = stage_batch(ready, &dir)?;
        laps.lap("stage");
        let conn = self.conn()?;
        let list = sql_list(&orgs);
        let mut sql = String::from("BEGIN TRANSACTION;\n");
        for (table, _) in TABLES {
            let files: Vec<String> =
                files.get(table).into_iter().flatten().map(|f| sql_literal(&f.display().to_string())).collect();
            let source =
                format!("read_parquet([{}], union_by_name = true, hive_partitioning = false)", files.join(", "));
            check_keys(conn, table, &source)?;
            sql.push_str(&format!(
                "DELETE FROM {table} WHERE organization IN ({list});\nINSERT INTO {table} BY NAME SELECT * FROM {source};\n"
            ));
        }
        laps.lap("check_keys");
        if let Err(e) = conn.execute_batch(&sql) {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(LoadError::db("load the batch's tables", e));
        }
        laps.lap("insert");
        let result = (|| {
            let changes = warehouse::record_history_of(conn, &orgs)?;
            let history = format!("(SELECT * FROM application_status_history WHERE organization IN ({list}))");
            check_keys(conn, "application_status_history", &history)?;
            laps.lap("history");
            let rows = row_counts_of(conn, &orgs)?;
            laps.lap("count");
            let mut reports = vec![];
            for r in ready {
                let mut quality = r.quality.clone();
                quality.set_status_changes(changes.get(&r.org).copied().unwrap_or(0));
                let rows = rows.get(&r.org).cloned().unwrap_or_default();
                reports.push((r.org.clone(), quality, rows));
            }
            let runs: Vec<RunRow> = ready
                .iter()
                .zip(&reports)
                .map(|(r, (_, quality, rows))| RunRow {
                    org: Some(&r.org),
                    spec: &r.spec,
                    report: r.report.as_ref(),
                    rows,
                    quality,
                    stages_ms: &r.laps,
                })
                .collect();
            record_runs(conn, &runs)?;
            laps.lap("record");
            crate::out::crash_point("fleet-load-before-commit");
            conn.execute_batch("COMMIT;").map_err(|e| LoadError::db("commit the batch", e))?;
            laps.lap("commit");
            Ok(reports)
        })();
        let reports = match result {
            Ok(reports) => reports,
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(e);
            }
        };
        self.unpublished = true;
        self.dirty.extend(orgs.iter().cloned());
        self.loaded.extend(orgs);
        tracing::debug!(stages = ?laps.stages_ms, "batch staged and committed (ms)");
        let stage_ms = laps.stages_ms.get("stage").copied().unwrap_or_default();
        let transaction_ms: u64 = laps.stages_ms.values().sum::<u64>() - stage_ms;
        Ok(reports
            .into_iter()
            .zip(ready)
            .map(|((org, quality, rows), r)| {
                for f in &quality.findings {
                    tracing::warn!(organization = %org, finding = %f, "data quality");
                }
                let mut stages_ms = r.laps.clone();
                stages_ms.insert("stage".into(), stage_ms);
                stages_ms.insert("transaction".into(), transaction_ms);
                stages_ms.insert("total".into(), stages_ms.values().sum());
                let report = LoadReport {
                    run_id: r.spec.run_id.clone(),
                    warehouse: published.clone(),
                    parquet_dir: parquet_dir.clone(),
                    rows,
                    quality,
                    stages_ms,
                    lake: None,
                };
                (org, Ok(report))
            })
            .collect())
    }

    /// Takes an organization's own warehouse (`own`, from a fleet run with
    /// `--warehouse per-org`, or restored from the lake) into the fleet warehouse when the
    /// fleet warehouse has no run of it: its tables, history, ledger and actions' results, so
    /// that its quick sync and its history go on from there. Returns whether it did.
    pub fn adopt(&mut self, org: &str, own: &OutDir) -> Result<bool, LoadError> {
        if self.loaded.contains(org) || !warehouse::writer_path(own).exists() {
            return Ok(false);
        }
        // An older creator-etl may have written it: bring it to this version's schema first.
        drop(warehouse::open_writer(own)?);
        let copied = self.copy_from(org, own, &tables())?;
        if copied {
            self.loaded.insert(org.to_owned());
            // Its readers must move too: the snapshot they read stays as it was.
            tracing::warn!(
                organization = %org,
                from = %warehouse::writer_path(own).display(),
                "the organization's own warehouse was taken into the fleet warehouse; its own snapshot `{}` is no longer updated: read `{}` (with `query --org {org}`, or `CREATOR_ETL_ORG={org}` in the notebooks)",
                warehouse::published_path(own).display(),
                warehouse::published_path(&self.out).display()
            );
        }
        Ok(copied)
    }

    /// Whether organization `org` has a loaded run in the fleet warehouse (after
    /// [`FleetWarehouse::adopt`]).
    pub fn has_loaded(&self, org: &str) -> bool {
        self.loaded.contains(org)
    }

    /// The runs of organization `org` the fleet warehouse has loaded (after taking its own
    /// warehouse in, [`FleetWarehouse::adopt`]): what a restore from the lake compares with.
    pub fn known_runs(&mut self, org: &str, own: &OutDir) -> Result<BTreeSet<String>, LoadError> {
        self.adopt(org, own)?;
        let conn = self.conn()?;
        let read = |e| LoadError::db("read `runs`", e);
        let mut stmt = conn.prepare("SELECT run_id FROM runs WHERE organization = ?").map_err(read)?;
        let runs = stmt
            .query_map([org], |r| r.get::<_, String>(0))
            .map_err(read)?
            .collect::<Result<BTreeSet<_>, _>>()
            .map_err(read)?;
        Ok(runs)
    }

    /// Takes what a restore from the lake wrote into the organization's own warehouse: every
    /// table (`everything`: the lake held runs the fleet warehouse did not know), or its
    /// actions' results alone (the lake's journal was ahead).
    pub fn take_restored(&mut self, org: &str, own: &OutDir, everything: bool) -> Result<(), LoadError> {
        if !everything {
            return self.record_actions(org, own);
        }
        if self.copy_from(org, own, &tables())? {
            self.loaded.insert(org.to_owned());
        }
        Ok(())
    }

    /// Stages the rows of `orgs` of the named lake tables under `dir`, for one lake commit per
    /// table ([`super::lake::commit_organizations`]).
    pub fn stage_lake(
        &mut self,
        orgs: &[String],
        tables: &[&str],
        dir: &Path,
    ) -> Result<BTreeMap<String, BTreeMap<String, u64>>, LoadError> {
        let conn = self.conn()?;
        super::lake::stage_organizations(conn, orgs, tables, dir)
    }

    /// A new directory of its own for a batch's staged lake files (batches overlap in time),
    /// cleaned up by the next open if a crash leaves it.
    pub fn lake_staging(&self) -> Result<PathBuf, LoadError> {
        Ok(crate::out::unique_dir(&self.out.root().join(".staging"), "lake-")?)
    }

    /// Copies the organization's actions' results from its own warehouse (where its journal
    /// is) after an actions stage: they replace its rows of `action_results`.
    pub fn record_actions(&mut self, org: &str, own: &OutDir) -> Result<(), LoadError> {
        self.copy_from(org, own, &["action_results"]).map(|_| ())
    }

    /// Replaces the organization's rows of `tables` with those of its own warehouse, in one
    /// transaction. `false` (nothing changed) when its own warehouse has loaded no run and the
    /// copy is of every table.
    fn copy_from(&mut self, org: &str, own: &OutDir, copied: &[&str]) -> Result<bool, LoadError> {
        let path = sql_literal(&warehouse::writer_path(own).display().to_string());
        let org_literal = sql_literal(org);
        self.group.clear();
        let conn = self.conn()?;
        conn.execute_batch(&format!("ATTACH {path} AS own_warehouse (READ_ONLY);"))
            .map_err(|e| LoadError::db(format!("open organization `{org}`'s own warehouse"), e))?;
        let result = (|| {
            if copied.contains(&"runs") {
                let runs: i64 = conn
                    .query_row("SELECT count(*) FROM own_warehouse.runs", [], |r| r.get(0))
                    .map_err(|e| LoadError::db("read its `runs`", e))?;
                if runs == 0 {
                    return Ok(false);
                }
            }
            let mut sql = String::from("BEGIN TRANSACTION;\n");
            for t in copied {
                sql.push_str(&format!(
                    "DELETE FROM {t} WHERE organization = {org_literal};\n\
                     INSERT INTO {t} BY NAME SELECT {org_literal} AS organization, * FROM own_warehouse.{t};\n"
                ));
            }
            if copied.contains(&"runs") {
                // Its rows are not in the fleet's Parquet tree yet (a crash before the publish
                // leaves this for the next one).
                sql.push_str(&format!(
                    "UPDATE runs SET parquet_exported = false WHERE organization = {org_literal};\n"
                ));
            }
            sql.push_str("COMMIT;");
            if let Err(e) = conn.execute_batch(&sql) {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(LoadError::db(format!("copy organization `{org}`'s own warehouse"), e));
            }
            Ok(true)
        })();
        let detached = conn.execute_batch("DETACH own_warehouse;");
        let copied = result?;
        detached.map_err(|e| LoadError::db("close the organization's own warehouse", e))?;
        if copied {
            self.unpublished = true;
            self.dirty.insert(org.to_owned());
        }
        Ok(copied)
    }

    /// Whether loads are waiting for [`FleetWarehouse::publish`].
    pub fn unpublished(&self) -> bool {
        self.unpublished
    }

    /// Exports the Parquet tree and publishes the readers' snapshot, with one rename each, if
    /// anything was loaded since the last publish.
    pub fn publish(&mut self) -> Result<(), LoadError> {
        if !self.unpublished {
            return Ok(());
        }
        let (out, grace) = (self.out.clone(), self.grace);
        // Only the organizations whose rows changed are written; the others' files are linked
        // from the current version. Nothing changed (a snapshot behind, alone): no export.
        let dirty = std::mem::take(&mut self.dirty);
        if !dirty.is_empty() {
            let exported = self.conn().and_then(|conn| {
                let label = format!("fleet-{}", crate::out::new_run_id());
                export_tables(conn, &out, &label, grace, Export::Keyed(Some(&dirty)))?;
                conn.execute("UPDATE runs SET parquet_exported = true WHERE NOT parquet_exported", [])
                    .map_err(|e| LoadError::db("record the export", e))
            });
            if let Err(e) = exported {
                self.dirty.extend(dirty);
                return Err(e);
            }
        }
        self.conn()?;
        crate::out::crash_point("fleet-publish-before-snapshot");
        let conn = self.close().expect("opened above");
        warehouse::publish(conn, &out)?;
        self.unpublished = false;
        Ok(())
    }
}

/// Stages the members' frames under `dir` for one `INSERT` per table: each table's frames, with
/// an `organization` column, concatenated into `dir/<table>.parquet`, and a file of its own
/// (`dir/<table>/<org>.parquet`) for a member whose frame does not have the first member's
/// schema. Returns each table's files.
fn stage_batch(ready: &[Ready], dir: &Path) -> Result<BTreeMap<&'static str, Vec<PathBuf>>, LoadError> {
    let _ = std::fs::remove_dir_all(dir);
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut files: BTreeMap<&'static str, Vec<PathBuf>> = BTreeMap::new();
        let polars = |table: &'static str| {
            move |e: polars::prelude::PolarsError| LoadError::Db {
                context: format!("stage the batch's `{table}`"),
                message: e.to_string(),
            }
        };
        for (table, _) in TABLES.iter() {
            let mut batch: Option<polars::prelude::DataFrame> = None;
            let mut own: Vec<(&str, polars::prelude::DataFrame)> = vec![];
            for r in ready {
                let Some((_, frame)) = r.frames.tables().into_iter().find(|(name, _)| name == table) else {
                    return Err(LoadError::Db {
                        context: format!("stage the batch's `{table}`"),
                        message: "the transform made no such table (a bug)".into(),
                    });
                };
                let mut df = frame.clone();
                let height = df.height();
                df.with_column(polars::prelude::Column::new("organization".into(), vec![r.org.as_str(); height]))
                    .map_err(polars(table))?;
                match &mut batch {
                    None => batch = Some(df),
                    // Stacked only on the same schema: a failed stack can leave the batch's
                    // frame with part of the member's columns appended.
                    Some(b) if b.schema() == df.schema() => {
                        b.vstack_mut(&df).map_err(polars(table))?;
                    }
                    Some(_) => own.push((r.org.as_str(), df)),
                }
            }
            let mut frames: Vec<(PathBuf, polars::prelude::DataFrame)> = vec![];
            if let Some(mut b) = batch {
                b.rechunk_mut();
                frames.push((dir.join(format!("{table}.parquet")), b));
            }
            frames.extend(own.into_iter().map(|(org, df)| (dir.join(table).join(format!("{org}.parquet")), df)));
            for (path, mut df) in frames {
                write_parquet(&path, &mut df)?;
                files.entry(table).or_default().push(path);
            }
        }
        Ok(files)
    }))
    .unwrap_or_else(|panic| Err(panicked("stage the batch's tables", panic)))
}

/// A load step that panicked (a bug), as an error of that member or batch alone.
fn panicked(what: &str, panic: Box<dyn std::any::Any + Send>) -> LoadError {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into());
    LoadError::Db { context: format!("{what} (it panicked, a bug; see the log)"), message }
}

/// Rows per table of each of `orgs`, for the reports and the ledger; every table is named for
/// every organization.
fn row_counts_of(conn: &Connection, orgs: &[String]) -> Result<BTreeMap<String, BTreeMap<String, u64>>, LoadError> {
    let mut out: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let list = sql_list(orgs);
    for table in TABLES.iter().map(|(n, _)| *n).chain(["application_status_history"]) {
        for org in orgs {
            out.entry(org.clone()).or_default().insert(table.to_owned(), 0);
        }
        let failed = |e| LoadError::db(format!("count `{table}`"), e);
        let mut stmt = conn
            .prepare(&format!(
                "SELECT organization, count(*) FROM {table} WHERE organization IN ({list}) GROUP BY organization"
            ))
            .map_err(failed)?;
        let counts = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))).map_err(failed)?;
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
    use crate::api::models::{Application, ApplicationStatus, ConnectedAccount, Provider, SignupSource};
    use crate::extract::{ContentRow, Metric, Observation, RunSpec, SyncMode};
    use chrono::{DateTime, Duration as Days, NaiveDate, Utc};

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    /// A complete full run of `apps` (id, status) and `days` of content ending 2026-11-01, each
    /// value offset by `bias` so that organizations differ.
    fn run(run_id: &str, apps: &[(i64, ApplicationStatus)], days: i64, bias: i64) -> Extracted {
        let to = NaiveDate::from_ymd_opt(2026, 11, 1).unwrap();
        let from = to - Days::days(days - 1);
        let observed = at("2026-11-02T00:00:00Z") + Days::seconds(bias);
        let applications = apps
            .iter()
            .map(|(id, status)| Observation {
                seq: 0,
                first_pass: 1,
                observed_at: observed,
                app: Application {
                    id: *id,
                    status: status.clone(),
                    campaign_id: 1,
                    campaign_name: "Spring".into(),
                    user_id: id * 10,
                    creator_name: format!("creator {id}"),
                    email: None,
                    signup_source: SignupSource::Marketplace,
                    connected_accounts: vec![ConnectedAccount {
                        id: id * 100,
                        provider: Provider::TikTok,
                        username: None,
                        monthly_post_count: id % 7 + bias,
                    }],
                    applied_at: at("2026-06-01T00:00:00Z") + Days::days(*id),
                },
            })
            .collect();
        let mut content = vec![];
        let mut day = from;
        while day <= to {
            for metric in [Metric::Views, Metric::Likes] {
                content.push(ContentRow {
                    metric,
                    date: day,
                    last_date: day - Days::days(7),
                    current: 100 + bias,
                    last: 90 + bias,
                    total: 0,
                    last_total: 0,
                });
            }
            day += Days::days(1);
        }
        // The windows' totals are the sums of their days, as the service sends them.
        for metric in [Metric::Views, Metric::Likes] {
            let (total, last_total) =
                content.iter().filter(|r| r.metric == metric).fold((0, 0), |(a, b), r| (a + r.current, b + r.last));
            for r in content.iter_mut().filter(|r| r.metric == metric) {
                r.total = total;
                r.last_total = last_total;
            }
        }
        Extracted {
            spec: RunSpec {
                run_id: run_id.into(),
                created_at: observed,
                base_url: "test".into(),
                statuses: ApplicationStatus::KNOWN.iter().map(|s| s.to_string()).collect(),
                campaign_id: None,
                max_passes: 1,
                from,
                to,
                window_days: days as u32,
                sync: SyncMode::Full,
                base_run: None,
            },
            applications,
            content,
            complete: true,
            quick: None,
        }
    }

    fn config(strict: bool) -> BatchConfig {
        BatchConfig {
            cohort_edges: crate::transform::DEFAULT_COHORT_EDGES.to_vec(),
            strict,
            parquet_grace: Duration::from_secs(3600),
        }
    }

    fn member(org: &str, extracted: Extracted) -> Member {
        Member { org: org.into(), extracted, report: None, lake: None, actions: false }
    }

    fn count(conn: &Connection, sql: &str) -> i64 {
        conn.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    /// A `--out` whose path has `key=value` folders (`organization=` among them) loads each
    /// member under its own name: the name never comes from a path.
    #[test]
    fn an_out_path_with_partition_like_folders_loads_each_member_as_itself() {
        let dir = tempfile::tempdir().unwrap();
        let out = OutDir::new(dir.path().join("organization=main").join("env=prod"));
        let mut w = FleetWarehouse::open(&out, Duration::from_secs(3600)).unwrap();
        use ApplicationStatus::Pending;
        let outcomes = w.load(
            vec![member("a", run("r1", &[(1, Pending)], 7, 0)), member("b", run("r1", &[(2, Pending)], 7, 1))],
            &config(false),
        );
        assert!(
            outcomes.iter().all(|(_, r)| r.is_ok()),
            "{:?}",
            outcomes.iter().map(|(_, r)| r.as_ref().err()).collect::<Vec<_>>()
        );
        let conn = w.conn().unwrap();
        assert_eq!(count(conn, "SELECT count(*) FROM applications WHERE organization = 'a' AND id = 1"), 1);
        assert_eq!(count(conn, "SELECT count(*) FROM applications WHERE organization = 'b' AND id = 2"), 1);
        assert_eq!(count(conn, "SELECT count(DISTINCT organization) FROM content_daily"), 2);
        // One organization's load reads its staged files the same way.
        let single = super::super::LoadConfig {
            out: OutDir::new(dir.path().join("single").join("env=prod")),
            cohort_edges: crate::transform::DEFAULT_COHORT_EDGES.to_vec(),
            strict: false,
            parquet_grace: Duration::from_secs(3600),
            lake: None,
        };
        let report = super::super::load_extracted(&single, run("r1", &[(1, Pending)], 7, 0), None).unwrap();
        assert_eq!(report.rows["applications"], 1);
    }

    #[test]
    fn keyed_tables_put_the_organization_first_in_the_key() {
        assert_eq!(
            keyed("id BIGINT PRIMARY KEY, status VARCHAR NOT NULL"),
            "organization VARCHAR NOT NULL, id BIGINT NOT NULL, status VARCHAR NOT NULL, PRIMARY KEY (organization, id)"
        );
        assert_eq!(
            keyed("metric VARCHAR NOT NULL, date DATE NOT NULL, PRIMARY KEY (metric, date)"),
            "organization VARCHAR NOT NULL, metric VARCHAR NOT NULL, date DATE NOT NULL, PRIMARY KEY (organization, metric, date)"
        );
    }

    /// A version-1 fleet warehouse (keys declared) is rebuilt without the data tables' key
    /// constraints, its rows kept; a batch whose rows repeat a key is refused by the check that
    /// replaces them.
    #[test]
    fn version_1_is_migrated_and_keys_are_checked_per_batch() {
        let conn = Connection::open_in_memory().unwrap();
        let mut v1 = format!("CREATE TABLE {MARKER} (version INTEGER NOT NULL, applied_at TIMESTAMPTZ NOT NULL);\n");
        for (name, ddl) in TABLES {
            v1.push_str(&format!("CREATE TABLE {name} ({});\n", keyed(ddl)));
        }
        for (name, ddl) in OWN_TABLES {
            v1.push_str(&format!("CREATE TABLE {name} ({ddl});\n"));
        }
        v1.push_str(&format!(
            "INSERT INTO {MARKER} VALUES (1, now());\n\
             INSERT INTO application_status_history VALUES ('a', 1, 'pending', now(), NULL);"
        ));
        conn.execute_batch(&v1).unwrap();
        assert_eq!(migrate(&conn).unwrap(), 2);
        let kept: i64 = conn.query_row("SELECT count(*) FROM application_status_history", [], |r| r.get(0)).unwrap();
        assert_eq!(kept, 1);
        let version: i32 = conn.query_row(&format!("SELECT max(version) FROM {MARKER}"), [], |r| r.get(0)).unwrap();
        assert_eq!(version, 2);
        // No constraint any more: the check is what refuses a repeated key.
        conn.execute_batch("INSERT INTO application_status_history SELECT * FROM application_status_history").unwrap();
        let source = "(SELECT * FROM application_status_history)";
        let refused = check_keys(&conn, "application_status_history", source).unwrap_err();
        assert!(refused.to_string().contains("repeat a key"), "{refused}");
        check_keys(&conn, "application_status_history", "(SELECT DISTINCT * FROM application_status_history)").unwrap();
        // A new warehouse is made at version 2 at once.
        let fresh = Connection::open_in_memory().unwrap();
        assert_eq!(migrate(&fresh).unwrap(), 2);
        assert_eq!(migrate(&fresh).unwrap(), 2, "again: nothing to do");
    }

    /// Two organizations in one batch, then one of them again: each holds exactly its own rows,
    /// reads back through its views as one organization's warehouse, and the other's rows, history
    /// and ledger are untouched.
    #[test]
    fn a_batch_replaces_exactly_its_members_rows() {
        let dir = tempfile::tempdir().unwrap();
        let out = OutDir::new(dir.path());
        let mut w = FleetWarehouse::open(&out, Duration::from_secs(3600)).unwrap();
        use ApplicationStatus::{Accepted, Pending, Rejected};
        let outcomes = w.load(
            vec![
                member("acme", run("r1", &[(1, Pending), (2, Accepted)], 14, 0)),
                member("0042", run("r1", &[(1, Rejected), (3, Pending), (4, Pending)], 21, 5)),
            ],
            &config(false),
        );
        let names: Vec<&str> = outcomes.iter().map(|(o, _)| o.as_str()).collect();
        assert_eq!(names, ["acme", "0042"], "outcomes come back in the members' order");
        let reports: BTreeMap<String, LoadReport> =
            outcomes.into_iter().map(|(o, r)| (o, r.expect("loaded"))).collect();
        assert_eq!(reports["acme"].rows["applications"], 2);
        assert_eq!(reports["0042"].rows["applications"], 3);
        assert_eq!(reports["0042"].rows["content_daily"], 42);
        assert_eq!(w.organizations().unwrap(), ["0042".to_owned(), "acme".to_owned()].into());
        // The organization's name is text, never a number read from its path.
        let conn = w.conn().unwrap();
        assert_eq!(count(conn, "SELECT count(*) FROM applications WHERE organization = '0042'"), 3);
        let views = w
            .with_org("acme", |c| {
                Ok((
                    warehouse::applications_where(c, "true")?.len(),
                    warehouse::content(c)?.len(),
                    warehouse::latest_run(c)?,
                ))
            })
            .unwrap();
        assert_eq!(views, (2, 28, Some("r1".to_owned())));
        // Views are gone after the read: the tables have every organization again.
        assert_eq!(count(w.conn().unwrap(), "SELECT count(DISTINCT organization) FROM applications"), 2);

        // acme again, one application changed status and one gone: only acme's rows move.
        let outcomes = w.load(vec![member("acme", run("r2", &[(1, Accepted)], 14, 1))], &config(false));
        let report = outcomes.into_iter().next().unwrap().1.expect("loaded");
        assert_eq!(report.quality.status_changes, 1);
        let conn = w.conn().unwrap();
        assert_eq!(count(conn, "SELECT count(*) FROM applications WHERE organization = 'acme'"), 1);
        assert_eq!(count(conn, "SELECT count(*) FROM applications WHERE organization = '0042'"), 3);
        assert_eq!(
            count(conn, "SELECT count(*) FROM application_status_history WHERE organization = 'acme' AND id = 1"),
            2,
            "acme's application 1: pending, then accepted"
        );
        assert_eq!(count(conn, "SELECT count(*) FROM application_status_history WHERE organization = '0042'"), 3);
        assert_eq!(count(conn, "SELECT count(*) FROM runs WHERE organization = 'acme'"), 2);
        assert_eq!(count(conn, "SELECT count(*) FROM runs WHERE organization = '0042'"), 1);
        // Loading the same run again changes nothing.
        let again = w.load(vec![member("acme", run("r2", &[(1, Accepted)], 14, 1))], &config(false));
        assert_eq!(again[0].1.as_ref().unwrap().rows, report.rows);
        assert_eq!(count(w.conn().unwrap(), "SELECT count(*) FROM runs WHERE organization = 'acme'"), 2);
    }

    /// Under `--strict`, a member whose content fails the checks fails alone: the others of its
    /// batch load, and its own rows stay as they were.
    #[test]
    fn a_failing_member_fails_alone() {
        let dir = tempfile::tempdir().unwrap();
        let out = OutDir::new(dir.path());
        let mut w = FleetWarehouse::open(&out, Duration::from_secs(3600)).unwrap();
        use ApplicationStatus::Pending;
        w.load(vec![member("bad", run("r1", &[(1, Pending)], 7, 0))], &config(true)).pop().unwrap().1.unwrap();
        let mut broken = run("r2", &[(1, Pending), (2, Pending)], 7, 0);
        broken.content[0].total += 1; // a window whose total is not the sum of its days
        let outcomes =
            w.load(vec![member("good", run("r1", &[(5, Pending)], 7, 2)), member("bad", broken)], &config(true));
        assert!(outcomes[0].1.is_ok(), "{:?}", outcomes[0].1.as_ref().err().map(|e| e.to_string()));
        assert!(matches!(outcomes[1].1, Err(LoadError::Strict(_))), "{:?}", outcomes[1].1.as_ref().err());
        let conn = w.conn().unwrap();
        assert_eq!(count(conn, "SELECT count(*) FROM applications WHERE organization = 'good'"), 1);
        assert_eq!(count(conn, "SELECT count(*) FROM applications WHERE organization = 'bad'"), 1, "as it was");
        assert_eq!(count(conn, "SELECT count(*) FROM runs WHERE organization = 'bad'"), 1);
    }

    /// The publish writes one Parquet tree partitioned by organization and the readers'
    /// snapshot; one organization's warehouse refuses to open a fleet's and the other way round.
    #[test]
    fn the_publish_writes_a_tree_by_organization_and_the_kinds_are_kept_apart() {
        let dir = tempfile::tempdir().unwrap();
        let out = OutDir::new(dir.path());
        let mut w = FleetWarehouse::open(&out, Duration::from_secs(3600)).unwrap();
        use ApplicationStatus::Pending;
        w.load(
            vec![member("a", run("r1", &[(1, Pending)], 7, 0)), member("b", run("r1", &[(2, Pending)], 7, 1))],
            &config(false),
        );
        assert!(w.unpublished());
        w.publish().unwrap();
        assert!(!w.unpublished());
        for org in ["a", "b"] {
            let part = dir.path().join("parquet/applications").join(format!("organization={org}"));
            assert!(part.is_dir(), "{}", part.display());
        }
        assert!(dir.path().join("parquet/content_daily/organization=a/year=2026").is_dir());
        let snapshot = Connection::open(warehouse::published_path(&out)).unwrap();
        assert_eq!(count(&snapshot, "SELECT count(*) FROM applications"), 2);
        drop(snapshot);
        // After the publish the writer reopens for the next batch.
        w.load(vec![member("a", run("r2", &[(1, Pending), (3, Pending)], 7, 0))], &config(false));
        assert_eq!(count(w.conn().unwrap(), "SELECT count(*) FROM applications"), 3);
        drop(w);
        let err = warehouse::open_writer(&out).unwrap_err();
        assert!(matches!(err, LoadError::Kind(_)), "{err}");
        let single = tempfile::tempdir().unwrap();
        drop(warehouse::open_writer(&OutDir::new(single.path())).unwrap());
        let err = FleetWarehouse::open(&OutDir::new(single.path()), Duration::ZERO).err().expect("refused");
        assert!(matches!(err, LoadError::Kind(_)), "{err}");
    }
}
