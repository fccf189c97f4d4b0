//! The fleet warehouse: every organization of a fleet in one DuckDB file, with the lake's
//! schema (every table has `organization`), loaded in batches.
//!
//! `fleet run` keeps it under the fleet's `--out` as any warehouse is kept: the writer's file
//! `OUT/state/warehouse.duckdb`, published to readers as `OUT/warehouse.duckdb`, and one Parquet
//! tree `OUT/parquet/<table>/seg-<label>.parquet` in segments of organizations ([`super::parquet`]). What must stay an organization's own stays
//! under `OUT/orgs/<name>/`: its raw landing, resume state, lock, pacing memory and action
//! journal.
//!
//! - **Reading one organization.** [`FleetWarehouse::with_org`] shadows every table with a
//!   temporary view of that organization's rows, without the `organization` column, so the
//!   one-organization readers (the quick sync's snapshot, the content cursor, the load's previous
//!   state) read it unchanged.
//! - **Loading a batch.** [`FleetWarehouse::load`] reads the members' previous rows with one
//!   query per table ([`warehouse::load_rows`]), merges each member with its own as a
//!   one-organization load does and transforms the whole batch at once ([`super::prepare`]), then
//!   commits them all through the load's one commit
//!   ([`super::commit`]): per table, the members' rows deleted and the batch's inserted, their
//!   keys checked first, for the members whose rows of it changed (by their fingerprints,
//!   `frame_fingerprints`); then the status history (SCD2) and one `runs` row per member. A member
//!   that fails its preparation (a data-quality failure under `--strict`, an unreadable row)
//!   fails alone; a transaction that fails is retried member by member, so one member's error
//!   never costs the others their load. A crash before the commit leaves every member as it
//!   was: each resumes and converges on the next run.
//! - **Publishing.** [`FleetWarehouse::publish`] exports the Parquet tree and publishes the
//!   snapshot, for all the batches loaded since the last publish; the caller decides how often.
//!   Only the tables whose rows changed are exported, each for the organizations whose rows of
//!   it changed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use duckdb::Connection;

use super::catalog::{self, Shape};
use super::commit::{self, Ready, Staged};
use super::parquet::{export_tables, mark_exported, Dirty, Export, Segments};
use super::prepare::{merge, transform_batch, Merged};
use super::warehouse::{self, sql_list, sql_literal};
use super::{LoadError, LoadReport};
use crate::extract::{ExtractReport, Extracted};
use crate::out::OutDir;

/// DuckDB's threads while the fleet warehouse loads batches ([`FleetWarehouse::read_batch`]).
const BATCH_THREADS: usize = 1;

/// One member's result of a batch: its name, and its load's report or error.
pub type MemberResult = (String, Result<LoadReport, LoadError>);

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
    /// The organizations whose rows changed since the Parquet tree's last export, per table:
    /// the next export writes only the segments that hold them.
    dirty: Dirty,
    /// The organizations with a loaded run.
    loaded: BTreeSet<String>,
    /// Organizations with status history rows but no loaded run, found when the warehouse
    /// opened (nothing creator-etl writes leaves one; one written by something else): their
    /// first load is not *fresh* ([`Ready::fresh`]) and gets the history's whole step.
    history_unloaded: BTreeSet<String>,
    /// The organizations of each segment of the Parquet tree's current version, per table (read
    /// from the files for a table not in it).
    segments: Segments,
    /// Organizations' previous rows read with another's ([`FleetWarehouse::previous`]), until
    /// they ask for them; a write of an organization's rows drops its entry.
    previous: BTreeMap<String, warehouse::PreviousRows>,
    /// The previous rows organizations' loads merge with, read ahead while the writer had
    /// nothing else to do ([`FleetWarehouse::read_ahead`]), until their batch takes them; a
    /// write of an organization's rows, or the end of its sync, drops its entry.
    ahead: BTreeMap<String, warehouse::LoadRows>,
    /// About how many bytes `ahead` holds ([`warehouse::LoadRows::approximate_bytes`]).
    ahead_bytes: usize,
    /// A read ahead failed: the run reads no more ahead (each batch reads its own rows).
    ahead_failed: bool,
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
            dirty: Dirty::new(),
            loaded: BTreeSet::new(),
            history_unloaded: BTreeSet::new(),
            segments: Segments::new(),
            previous: BTreeMap::new(),
            ahead: BTreeMap::new(),
            ahead_bytes: 0,
            ahead_failed: false,
        };
        super::clean_leftovers(out);
        // A publish killed after its export, or a snapshot missing or older than the writer's
        // file or its WAL: the readers are behind. (Read before DuckDB opens the file.)
        let modified = |p: PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let writer = out.writer_warehouse();
        let written = modified(writer.clone()).max(modified(PathBuf::from(format!("{}.wal", writer.display()))));
        let behind = match (written, modified(out.warehouse())) {
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
        w.mark_dirty(&unexported);
        w.loaded = w.organizations()?;
        w.history_unloaded = w.history_unloaded()?;
        Ok(w)
    }

    /// The organizations with status history rows and no loaded run (one scan of the history).
    fn history_unloaded(&mut self) -> Result<BTreeSet<String>, LoadError> {
        let conn = self.conn()?;
        let read = |e| LoadError::db("read `application_status_history`", e);
        let mut stmt = conn
            .prepare(
                "SELECT DISTINCT organization FROM application_status_history EXCEPT SELECT organization FROM runs",
            )
            .map_err(read)?;
        let orgs: BTreeSet<String> =
            stmt.query_map([], |r| r.get(0)).map_err(read)?.collect::<Result<_, _>>().map_err(read)?;
        if !orgs.is_empty() {
            tracing::warn!(organizations = orgs.len(), "organizations without a loaded run have status history rows; their first loads record their history by the whole step");
        }
        Ok(orgs)
    }

    /// Marks every exported table of the organizations `orgs` as changed since the last export.
    fn mark_dirty<'a>(&mut self, orgs: impl IntoIterator<Item = &'a String> + Clone) {
        for table in catalog::exported() {
            self.dirty.entry(table).or_default().extend(orgs.clone().into_iter().cloned());
        }
    }

    /// The open connection, reopened after a publish closed it.
    fn conn(&mut self) -> Result<&Connection, LoadError> {
        if self.conn.is_none() {
            let conn = warehouse::open_writer_of(&self.out, Shape::Fleet)?;
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
            for t in catalog::fleet_tables() {
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
        for t in catalog::fleet_tables() {
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

    /// Runs `read` on organization `org`'s previous rows (its ledger and applications: what a
    /// sync reads before its first request) and the writer's connection. Rows not read yet are
    /// read with those of `next` (the organizations that will ask next, whose rows are not held
    /// already: [`FleetWarehouse::holds_previous`]) in one query per table, and kept until they
    /// ask. If that read fails, or `org`'s rows hold a value it cannot read,
    /// `alone` reads `org`'s state through its views instead, as one organization's warehouse is
    /// read: another organization's damaged rows never fail it, and its own fail only where
    /// reading them alone would.
    pub fn previous<T>(
        &mut self,
        org: &str,
        next: &[String],
        read: impl FnOnce(&warehouse::PreviousRows, &Connection) -> Result<T, LoadError>,
        alone: impl FnOnce(&Connection) -> Result<T, LoadError>,
    ) -> Result<T, LoadError> {
        if !self.previous.contains_key(org) {
            let asked: Vec<String> = std::iter::once(org.to_owned())
                .chain(next.iter().filter(|n| *n != org && !self.previous.contains_key(*n)).cloned())
                .collect();
            // A warehouse that cannot be opened fails the organization, as before any read.
            self.conn()?;
            match self
                .read_together("read the organizations' previous states", |conn| warehouse::previous_rows(conn, &asked))
            {
                Ok(rows) => self.previous.extend(rows),
                Err(e) => {
                    tracing::warn!(organization = %org, error = %crate::exit::with_causes(&e), "cannot read the organizations' previous states together; reading this one's alone");
                }
            }
        }
        match self.previous.remove(org) {
            // Read with the others, and readable: computed from its rows.
            Some(rows) if !rows.damaged => {
                let conn = self.conn()?;
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read(&rows, conn))).unwrap_or_else(|panic| {
                    Err(super::panicked(&format!("read organization `{org}`'s previous state"), panic))
                })
            }
            // A damaged value, or a read of the batch that failed: the one-organization readers,
            // through its views, read what its sync needs and name what they cannot read.
            rows => {
                if rows.is_some() {
                    tracing::warn!(organization = %org, "a value of the organization's previous rows cannot be read together with the others'; reading them alone");
                }
                self.with_org(org, alone)
            }
        }
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
                .unwrap_or_else(|panic| Err(super::panicked(&format!("read organization `{org}`'s rows"), panic))),
            Err(e) => Err(LoadError::db(format!("read organization `{org}`'s rows"), e)),
        };
        // A read that failed may have left the reader in a failed transaction: it is made again.
        if result.is_err() {
            self.reader = None;
            self.group.clear();
        }
        result
    }

    /// The previous rows of the batch's members `orgs` that their load merges with
    /// ([`warehouse::load_rows`]), the applications of `apps_of` included. None if that read
    /// fails: each member is then read alone through its views.
    fn read_load_rows(&mut self, orgs: &[String], apps_of: &[String]) -> BTreeMap<String, warehouse::LoadRows> {
        self.read_together("read the batch's previous rows", |conn| warehouse::load_rows(conn, orgs, apps_of))
            .unwrap_or_else(|e| {
                tracing::warn!(error = %crate::exit::with_causes(&e), "cannot read the batch's previous rows together; reading them one by one");
                BTreeMap::new()
            })
    }

    /// Runs `read`, a read of many organizations' rows, on the writer's connection; a panic is
    /// its error (`what` it was doing). An error closes the connection: a failed statement (or
    /// a panic) can leave it unusable, and the next use reopens it.
    fn read_together<T>(
        &mut self,
        what: &str,
        read: impl FnOnce(&Connection) -> Result<T, LoadError>,
    ) -> Result<T, LoadError> {
        let result = self.conn().and_then(|conn| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read(conn)))
                .unwrap_or_else(|panic| Err(super::panicked(what, panic)))
        });
        if result.is_err() {
            self.close();
        }
        result
    }

    /// Loads a batch: every member prepared, then all of them committed in one transaction.
    /// Returns each member's result, in the order given; a member's error is its own. The
    /// fleet's writer runs the three steps apart ([`FleetWarehouse::read_batch`],
    /// [`prepare_batch`] on a thread of its own, [`FleetWarehouse::commit_batch`]), so that a
    /// batch is prepared while the one before it commits.
    pub fn load(&mut self, members: Vec<Member>, config: &BatchConfig) -> Vec<MemberResult> {
        let read = self.read_batch(members);
        self.commit_batch(prepare_batch(read, config))
    }

    /// Step 1 of a batch's load, on the writer's connection: every member's previous rows
    /// read with one query per table, split by organization ([`warehouse::load_rows`]). A
    /// member whose rows cannot be read so is read and merged alone through its views (and
    /// fails alone). A member with no loaded run has no rows in any table (a run's rows and its
    /// `runs` row commit together): nothing to read. Also makes the batch's staging directory.
    pub fn read_batch(&mut self, members: Vec<Member>) -> BatchRead {
        // One DuckDB thread for the batches' statements, until the publish: they are small and
        // run while the preparing thread's Polars and the organizations' tasks want the cores
        // too, and with DuckDB's own worker thread the writer spent CPU handing it tasks (the
        // scheduler's locks were about 5 % of a fleet's samples; BENCHMARKS.md, "The 7-day sums
        // in one pass, and one DuckDB thread for the batches"). The previous states read before
        // the first batch, and the publish's export and checkpoint, keep one thread per core.
        if let Err(e) = self.conn().and_then(|c| {
            c.execute_batch(&format!("SET threads = {BATCH_THREADS};"))
                .map_err(|e| LoadError::db("configure the fleet warehouse", e))
        }) {
            tracing::debug!(error = %crate::exit::with_causes(&e), "cannot set the batch's DuckDB threads");
        }
        let order: Vec<String> = members.iter().map(|m| m.org.clone()).collect();
        let with_state: Vec<String> = order.iter().filter(|org| self.loaded.contains(*org)).cloned().collect();
        let apps_of: Vec<String> = members
            .iter()
            .filter(|m| self.loaded.contains(&m.org) && super::prepare::keeps_loaded_applications(&m.extracted))
            .map(|m| m.org.clone())
            .collect();
        let started = std::time::Instant::now();
        // Those read ahead are taken (but those read without the applications their load keeps);
        // the others' rows are read now.
        let mut previous: BTreeMap<String, warehouse::LoadRows> = BTreeMap::new();
        for org in &with_state {
            if let Some(rows) = self.take_ahead(org) {
                if rows.has_applications() || !apps_of.contains(org) {
                    previous.insert(org.clone(), rows);
                }
            }
        }
        let to_read: Vec<String> = with_state.iter().filter(|org| !previous.contains_key(*org)).cloned().collect();
        if !to_read.is_empty() {
            let apps_of: Vec<String> = apps_of.into_iter().filter(|org| !previous.contains_key(org)).collect();
            previous.extend(self.read_load_rows(&to_read, &apps_of));
        }
        // Each member's share of the batch's read, in its `read_state`.
        let share = started.elapsed().as_millis() as u64 / with_state.len().max(1) as u64;
        let mut read = BatchRead {
            order,
            results: BTreeMap::new(),
            merged: vec![],
            to_merge: vec![],
            fresh: BTreeSet::new(),
            share,
            // A directory of its own: batches (and the lake's staging) overlap in time.
            staging: crate::out::unique_dir(&self.out.staging_dir(), "batch-"),
        };
        let mut alone: Vec<Member> = vec![];
        for member in members {
            match (self.loaded.contains(&member.org), previous.remove(&member.org)) {
                (true, Some(rows)) if !rows.damaged => read.to_merge.push((member, Some(rows))),
                (true, rows) => {
                    if rows.is_some() {
                        tracing::warn!(organization = %member.org, "a value of the organization's previous rows cannot be read together with the others'; reading them alone");
                    }
                    alone.push(member);
                }
                (false, _) => {
                    if !self.history_unloaded.contains(&member.org) {
                        read.fresh.insert(member.org.clone());
                    }
                    read.to_merge.push((member, None))
                }
            }
        }
        // Those read alone, through their views, of their rows gathered together (one scan per
        // table); a failed read empties the reader's group, so the ones left are gathered again.
        let names: Vec<String> = alone.iter().map(|m| m.org.clone()).collect();
        for (i, Member { org, extracted, report, .. }) in alone.into_iter().enumerate() {
            if !self.group.contains(&org) && names.len() - i > 1 {
                if let Err(e) = self.gather(&names[i..]) {
                    tracing::warn!(error = %crate::exit::with_causes(&e), "cannot gather the previous rows of the members read alone together; each one's are gathered alone");
                }
            }
            let laps = crate::progress::Laps::start();
            match self.with_org(&org, |conn| merge(Some(&mut { conn }), extracted, laps)) {
                Ok(m) => read.merged.push((org, report, m)),
                Err(e) => {
                    read.results.insert(org, Err(e));
                }
            }
        }
        read
    }

    /// Step 3 of a batch's load, on the writer's connection: the prepared members committed in
    /// one transaction (if it fails, each member alone). Returns each member's result, in the
    /// batch's order.
    pub fn commit_batch(&mut self, prepared: PreparedBatch) -> Vec<MemberResult> {
        let PreparedBatch { order, mut results, ready, staged, alone, staging } = prepared;
        // Where a batch's time goes, summed over its members: the per-organization cost.
        let (read_state, transform) =
            ready.iter().fold((0, 0), |(a, b), (_, r)| (a + r.timings.read_state, b + r.timings.transform));
        let started = std::time::Instant::now();
        match staging {
            Ok(staging) => {
                let committed = match alone {
                    true => self.commit_each(ready, &staging),
                    false => self.commit(ready, &staging, staged),
                };
                for (org, result) in committed {
                    results.insert(org, result);
                }
                if let Err(e) = std::fs::remove_dir_all(&staging) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        tracing::warn!(path = %staging.display(), error = %e, "cannot remove a batch's staged files");
                    }
                }
            }
            Err(e) => {
                // Each member fails with the same I/O error (its kind and message; an
                // `io::Error` cannot be cloned).
                for (org, _) in ready {
                    let each = match &e {
                        crate::out::OutError::Io { action, path, source } => crate::out::OutError::Io {
                            action,
                            path: path.clone(),
                            source: std::io::Error::new(source.kind(), source.to_string()),
                        },
                        other => crate::out::OutError::Io {
                            action: "stage the batch in",
                            path: self.out.staging_dir().display().to_string(),
                            source: std::io::Error::other(other.to_string()),
                        },
                    };
                    results.insert(org, Err(LoadError::Out(each)));
                }
            }
        }
        // The batch's staging and transaction (every member's report has the batch's).
        let (stage, transaction) = results
            .values()
            .find_map(|r| r.as_ref().ok())
            .map_or((0, 0), |r| (r.stages_ms.stage, r.stages_ms.transaction));
        tracing::debug!(
            members = order.len(),
            read_state,
            transform,
            commit_ms = started.elapsed().as_millis() as u64,
            stage,
            transaction,
            "batch stages (ms; read_state and transform summed over members)"
        );
        order
            .into_iter()
            .map(|org| {
                let result = results.remove(&org).unwrap_or_else(|| {
                    Err(LoadError::Bug(format!("organization `{org}` was given twice in one batch")))
                });
                (org, result)
            })
            .collect()
    }

    /// Commits the ready members (with their names) in one transaction; if it fails, each member
    /// alone.
    /// `staged`: the batch's files, staged as it was prepared (`None`: staged here).
    fn commit(&mut self, ready: Vec<(String, Ready)>, staging: &Path, staged: Option<Staged>) -> Vec<MemberResult> {
        if ready.is_empty() {
            return vec![];
        }
        self.group.clear();
        let committed =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.commit_all(&ready, staging, staged)))
                .unwrap_or_else(|panic| Err(super::panicked("load the batch", panic)));
        if committed.is_err() {
            // A failed statement can leave the connection unusable (DuckDB invalidates a
            // database after some errors): the next attempt reopens the file.
            self.close();
        }
        match committed {
            Ok(reports) => reports,
            Err(e) if ready.len() == 1 => vec![(ready[0].0.clone(), Err(e))],
            Err(e) => {
                tracing::warn!(error = %crate::exit::with_causes(&e), members = ready.len(), "a batch's load failed; loading its members one by one");
                self.commit_each(ready, staging)
            }
        }
    }

    /// Commits each member alone (each staged again on its own): a failure is its own.
    fn commit_each(&mut self, ready: Vec<(String, Ready)>, staging: &Path) -> Vec<MemberResult> {
        ready.into_iter().flat_map(|r| self.commit(vec![r], staging, None)).collect()
    }

    fn commit_all(
        &mut self,
        named: &[(String, Ready)],
        staging: &Path,
        staged: Option<Staged>,
    ) -> Result<Vec<MemberResult>, LoadError> {
        let orgs: Vec<String> = named.iter().map(|(org, _)| org.clone()).collect();
        let ready: Vec<&Ready> = named.iter().map(|(_, r)| r).collect();
        for org in &orgs {
            self.forget_held(org);
        }
        let staged = match staged {
            Some(staged) => staged,
            None => commit::stage(&ready, Shape::Fleet, &staged_dir(staging, &orgs))?,
        };
        let conn = self.conn()?;
        let committed = commit::write(conn, Shape::Fleet, &ready, &staged)?;
        self.unpublished = true;
        for (c, org) in committed.iter().zip(&orgs) {
            for table in &c.changed {
                self.dirty.entry(table).or_default().insert(org.clone());
            }
        }
        self.loaded.extend(orgs);
        let (published, parquet_dir) = (self.out.warehouse(), self.out.parquet_dir());
        Ok(committed
            .into_iter()
            .zip(named)
            .map(|(c, (org, r))| {
                let org = org.clone();
                for f in &c.quality.findings {
                    tracing::warn!(organization = %org, finding = %f, "data quality");
                }
                let mut stages_ms = c.timings;
                stages_ms.total = stages_ms.sum();
                let report = LoadReport {
                    run_id: r.spec.run_id.clone(),
                    warehouse: published.clone(),
                    parquet_dir: parquet_dir.clone(),
                    rows: c.rows,
                    quality: c.quality,
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
        if self.loaded.contains(org) || !own.writer_warehouse().exists() {
            return Ok(false);
        }
        // An older creator-etl may have written it: bring it to this version's schema first.
        drop(warehouse::open_writer(own)?);
        let copied = self.copy_from(org, own, &catalog::fleet_tables())?;
        if copied {
            self.loaded.insert(org.to_owned());
            // Its readers must move too: the snapshot they read stays as it was.
            tracing::warn!(
                organization = %org,
                from = %own.writer_warehouse().display(),
                "the organization's own warehouse was taken into the fleet warehouse; its own snapshot `{}` is no longer updated: read `{}` (with `query --org {org}`, or `CREATOR_ETL_ORG={org}` in the notebooks)",
                own.warehouse().display(),
                self.out.warehouse().display()
            );
        }
        Ok(copied)
    }

    /// Whether organization `org` has a loaded run in the fleet warehouse (after
    /// [`FleetWarehouse::adopt`]).
    pub fn has_loaded(&self, org: &str) -> bool {
        self.loaded.contains(org)
    }

    /// Whether organization `org`'s previous rows are held, read with another's
    /// ([`FleetWarehouse::previous`]) and not asked for yet.
    pub fn holds_previous(&self, org: &str) -> bool {
        self.previous.contains_key(org)
    }

    /// How many organizations' previous rows are held ([`FleetWarehouse::holds_previous`]).
    pub fn previous_held(&self) -> usize {
        self.previous.len()
    }

    /// Reads the previous rows that the loads of `orgs` will merge with (their ledger,
    /// content and fingerprints, and the applications of those marked `true`: the loads that
    /// keep loaded applications; with one query per table, as a batch reads its members'), and
    /// holds them until their batch takes them ([`FleetWarehouse::read_batch`]) or they are let
    /// go ([`FleetWarehouse::forget_held`]): the writer reads ahead while it has nothing else to do.
    /// Organizations with nothing loaded, and those held already, are skipped. A read that
    /// fails holds nothing and ends reading ahead for the run: each batch then reads its own.
    /// Returns how many were read.
    pub fn read_ahead(&mut self, orgs: &[(String, bool)]) -> usize {
        let wanted: Vec<&(String, bool)> =
            orgs.iter().filter(|(org, _)| self.loaded.contains(org) && !self.ahead.contains_key(org)).collect();
        if wanted.is_empty() || self.ahead_failed {
            return 0;
        }
        let names: Vec<String> = wanted.iter().map(|(org, _)| org.clone()).collect();
        let apps_of: Vec<String> = wanted.iter().filter(|(_, apps)| *apps).map(|(org, _)| org.clone()).collect();
        let rows = self.read_together("read the organizations' previous rows ahead", |conn| {
            warehouse::load_rows(conn, &names, &apps_of)
        });
        match rows {
            Ok(rows) => {
                self.ahead_bytes += rows.values().map(warehouse::LoadRows::approximate_bytes).sum::<usize>();
                self.ahead.extend(rows);
                names.len()
            }
            Err(e) => {
                self.ahead_failed = true;
                tracing::warn!(error = %crate::exit::with_causes(&e), "cannot read the organizations' previous rows ahead; this run reads no more ahead, and each batch reads its own");
                0
            }
        }
    }

    /// How many organizations' previous rows are read ahead and held
    /// ([`FleetWarehouse::read_ahead`]), and about how many bytes they hold.
    pub fn held_ahead(&self) -> (usize, usize) {
        (self.ahead.len(), self.ahead_bytes)
    }

    /// Takes organization `org`'s rows read ahead.
    fn take_ahead(&mut self, org: &str) -> Option<warehouse::LoadRows> {
        let rows = self.ahead.remove(org)?;
        self.ahead_bytes = self.ahead_bytes.saturating_sub(rows.approximate_bytes());
        Some(rows)
    }

    /// Drops what is held of organization `org`'s rows: before a write of them, and when its
    /// sync has ended (rows read with another's or ahead that it never took: its sync failed
    /// before it asked, or before its load).
    pub fn forget_held(&mut self, org: &str) {
        self.previous.remove(org);
        self.take_ahead(org);
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
        if self.copy_from(org, own, &catalog::fleet_tables())? {
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
        Ok(crate::out::unique_dir(&self.out.staging_dir(), "lake-")?)
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
        let path = sql_literal(&own.writer_warehouse().display().to_string());
        let org_literal = sql_literal(org);
        self.group.clear();
        self.forget_held(org);
        let conn = self.conn()?;
        conn.execute_batch(&format!("ATTACH {path} AS own_warehouse (READ_ONLY);"))
            .map_err(|e| LoadError::db(format!("open organization `{org}`'s own warehouse"), e))?;
        let result = (|| -> Result<bool, LoadError> {
            if copied.contains(&"runs") {
                let runs: i64 = conn
                    .query_row("SELECT count(*) FROM own_warehouse.runs", [], |r| r.get(0))
                    .map_err(|e| LoadError::db("read its `runs`", e))?;
                if runs == 0 {
                    return Ok(false);
                }
            }
            let mut sql = String::new();
            for t in copied {
                sql.push_str(&format!(
                    "DELETE FROM {t} WHERE organization = {org_literal};\n\
                     INSERT INTO {t} BY NAME SELECT {org_literal} AS organization, * FROM own_warehouse.{t};\n"
                ));
            }
            if catalog::frames().any(|t| copied.contains(&t.name)) {
                // Its frame tables' rows are no longer what its last load's fingerprints say (a
                // restore from the lake over rows it had loaded): its next load writes every table.
                sql.push_str(&format!("DELETE FROM {} WHERE organization = {org_literal};\n", catalog::FINGERPRINTS));
            }
            if copied.contains(&"runs") {
                // Its rows are not in the fleet's Parquet tree yet (a crash before the publish
                // leaves this for the next one).
                sql.push_str(&format!(
                    "UPDATE runs SET parquet_exported = false WHERE organization = {org_literal};\n"
                ));
            }
            let failed = |e| LoadError::db(format!("copy organization `{org}`'s own warehouse"), e);
            let tx = conn.unchecked_transaction().map_err(failed)?;
            tx.execute_batch(&sql).map_err(failed)?;
            tx.commit().map_err(failed)?;
            Ok(true)
        })();
        let detached = conn.execute_batch("DETACH own_warehouse;");
        let copied = result?;
        detached.map_err(|e| LoadError::db("close the organization's own warehouse", e))?;
        if copied {
            self.unpublished = true;
            self.mark_dirty(&[org.to_owned()]);
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
        let changed: BTreeSet<&String> = dirty.values().flatten().collect();
        let changed = changed.len();
        let started = std::time::Instant::now();
        // The export and the checkpoint get DuckDB's default threads (one per core) back from
        // the batches' one ([`FleetWarehouse::read_batch`]); a connection opened now has them.
        if let Some(Err(e)) = self.conn.as_ref().map(|c| c.execute_batch("RESET threads;")) {
            tracing::debug!(error = %e, "cannot reset the fleet warehouse's DuckDB threads");
        }
        if changed > 0 {
            let mut segments = std::mem::take(&mut self.segments);
            let exported = self.conn().and_then(|conn| {
                let label = format!("fleet-{}", crate::out::new_run_id());
                export_tables(conn, &out, &label, grace, Export::Segments { dirty: &dirty, segments: &mut segments })?;
                mark_exported(conn, None)
            });
            self.segments = segments;
            if let Err(e) = exported {
                for (table, orgs) in dirty {
                    self.dirty.entry(table).or_default().extend(orgs);
                }
                return Err(e);
            }
        }
        self.conn()?;
        let exported_ms = started.elapsed().as_millis() as u64;
        crate::out::crash_point("fleet-publish-before-snapshot");
        let conn = self.close().expect("opened above");
        warehouse::publish(conn, &out)?;
        self.unpublished = false;
        tracing::debug!(
            organizations = changed,
            tables = dirty.values().filter(|orgs| !orgs.is_empty()).count(),
            export_ms = exported_ms,
            snapshot_ms = started.elapsed().as_millis() as u64 - exported_ms,
            "publish stages"
        );
        Ok(())
    }
}

/// Where a batch's attempt stages its files under the batch's directory: one member's after
/// the batch failed, a directory of its own.
fn staged_dir(staging: &Path, orgs: &[String]) -> PathBuf {
    staging.join(match orgs {
        [one] => one.as_str(),
        _ => "batch",
    })
}

/// A batch's members with their previous rows ([`FleetWarehouse::read_batch`]): what
/// [`prepare_batch`] prepares without the warehouse.
pub struct BatchRead {
    /// The members' names, in the order given.
    order: Vec<String>,
    /// Members that failed already.
    results: BTreeMap<String, Result<LoadReport, LoadError>>,
    /// Members merged already (read alone through their views).
    merged: Vec<(String, Option<ExtractReport>, Merged)>,
    /// The members to merge, each with its previous rows (`None`: it has nothing loaded).
    to_merge: Vec<(Member, Option<warehouse::LoadRows>)>,
    /// The members that are fresh ([`Ready::fresh`]).
    fresh: BTreeSet<String>,
    /// Each member's share of the batch's read, in milliseconds.
    share: u64,
    /// The batch's staging directory.
    staging: Result<PathBuf, crate::out::OutError>,
}

impl BatchRead {
    /// The members' names, in the order given.
    pub fn organizations(&self) -> &[String] {
        &self.order
    }

    /// The batch's staging directory (made by [`FleetWarehouse::read_batch`], removed by
    /// [`FleetWarehouse::commit_batch`]).
    pub fn staging_dir(&self) -> Option<PathBuf> {
        self.staging.as_ref().ok().cloned()
    }
}

/// A batch merged, checked, transformed and staged ([`prepare_batch`]): what
/// [`FleetWarehouse::commit_batch`] commits.
pub struct PreparedBatch {
    order: Vec<String>,
    results: BTreeMap<String, Result<LoadReport, LoadError>>,
    ready: Vec<(String, Ready)>,
    /// The ready members' files, staged together (`None`: that failed, and the commit stages
    /// them again).
    staged: Option<Staged>,
    /// A member's rows repeat a key: staging the batch together would fail again, so its
    /// members are committed one by one (the one with the repeated key fails alone).
    alone: bool,
    staging: Result<PathBuf, crate::out::OutError>,
}

#[cfg(test)]
impl PreparedBatch {
    /// The ready members found settled when staged ([`Ready::open_statuses`]).
    fn settled(&self) -> Vec<&str> {
        let settled = self.staged.as_ref().map_or(&[][..], Staged::settled);
        self.ready.iter().zip(settled).filter(|(_, s)| **s).map(|((org, _), _)| org.as_str()).collect()
    }
}

/// Step 2 of a batch's load, without the warehouse (the fleet's writer runs it on a thread of
/// its own while it commits the batch before): each member merged with its previous rows and
/// checked, the whole batch transformed at once ([`super::prepare`]), and the ready members'
/// frames staged as Parquet files under the batch's directory.
pub fn prepare_batch(read: BatchRead, config: &BatchConfig) -> PreparedBatch {
    let BatchRead { order, mut results, mut merged, to_merge, fresh, share, staging } = read;
    // What each member's last load wrote of its frames (those read alone have none: every
    // table of theirs is written).
    let mut loaded_fingerprints: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    // And their applications' open history rows, when read (a load that keeps loaded
    // applications reads them).
    let mut open_statuses: BTreeMap<String, warehouse::OpenStatuses> = BTreeMap::new();
    for (Member { org, extracted, report, .. }, rows) in to_merge {
        let laps = crate::progress::Laps::start();
        let result = match rows {
            Some(mut rows) => {
                loaded_fingerprints.insert(org.clone(), rows.take_fingerprints());
                if let Some(open) = rows.take_open_statuses() {
                    open_statuses.insert(org.clone(), open);
                }
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| merge(Some(&mut rows), extracted, laps)))
                    .unwrap_or_else(|panic| {
                        Err(super::panicked(&format!("merge organization `{org}`'s run with its rows"), panic))
                    })
                    .map(|mut m| {
                        m.timings.read_state += share;
                        m
                    })
            }
            None => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| merge(None, extracted, laps)))
                .unwrap_or_else(|panic| Err(super::panicked(&format!("read organization `{org}`'s run"), panic))),
        };
        match result {
            Ok(m) => merged.push((org, report, m)),
            Err(e) => {
                results.insert(org, Err(e));
            }
        }
    }
    // One transform for the whole batch.
    let mut ready: Vec<(String, Ready)> = vec![];
    let (names, merged): (Vec<(String, Option<ExtractReport>)>, Vec<Merged>) =
        merged.into_iter().map(|(org, report, m)| ((org, report), m)).unzip();
    for ((org, report), prepared) in names.into_iter().zip(transform_batch(merged, &config.cohort_edges)) {
        let prepared = prepared.and_then(|p| {
            if config.strict && p.quality.fails_strict() {
                return Err(LoadError::Strict(p.quality.findings.join("; ")));
            }
            Ok(Ready {
                org: Some(org.clone()),
                frames: Some(p.frames),
                spec: p.spec,
                quality: p.quality,
                report,
                timings: p.timings,
                loaded_fingerprints: loaded_fingerprints.remove(&org),
                open_statuses: open_statuses.remove(&org),
                fresh: fresh.contains(&org),
            })
        });
        match prepared {
            Ok(r) => ready.push((org, r)),
            Err(e) => {
                results.insert(org, Err(e));
            }
        }
    }
    let (staged, alone) = stage_ready(&ready, &staging);
    PreparedBatch { order, results, ready, staged, alone, staging }
}

/// Stages the ready members' frames together under the batch's directory: the files, or
/// `None` when that failed (the commit stages them again), and whether the members must be
/// committed one by one (a member's rows repeat a key: staging them together fails again).
fn stage_ready(ready: &[(String, Ready)], staging: &Result<PathBuf, crate::out::OutError>) -> (Option<Staged>, bool) {
    let Ok(dir) = staging else { return (None, false) };
    if ready.is_empty() {
        return (None, false);
    }
    let orgs: Vec<String> = ready.iter().map(|(org, _)| org.clone()).collect();
    let members: Vec<&Ready> = ready.iter().map(|(_, r)| r).collect();
    match commit::stage(&members, Shape::Fleet, &staged_dir(dir, &orgs)) {
        Ok(staged) => (Some(staged), false),
        Err(e @ LoadError::DuplicateKeys { .. }) => {
            tracing::warn!(error = %crate::exit::with_causes(&e), "a member's rows repeat a key; committing the batch's members one by one");
            (None, true)
        }
        Err(e) => {
            tracing::warn!(error = %crate::exit::with_causes(&e), "cannot stage the batch's frames; staging them again at the commit");
            (None, false)
        }
    }
}

#[cfg(test)]
mod tests;
