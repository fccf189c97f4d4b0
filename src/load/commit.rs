//! The one commit of a load, over the catalog: a batch of prepared runs written into a warehouse
//! in one transaction. One organization's load is a batch of one into its own warehouse; a fleet
//! loads batches of its organizations into the fleet warehouse ([`super::fleet_warehouse`]).
//!
//! 1. The batch's frames are staged as Parquet: one file per table (a fleet's with each member's
//!    `organization`, stacked; a member whose frame has another schema gets a file of its own).
//!    In a fleet warehouse, a member's frame whose fingerprint ([`super::fingerprint`]) is the
//!    one its last load recorded is not staged: its rows are in the warehouse already.
//! 2. In one transaction, every frame table's rows are replaced: one organization's table is
//!    rebuilt under a new name from its file and swapped in; a fleet's members' rows are deleted
//!    and inserted from the batch's files, whose keys the staging checked (the fleet warehouse
//!    declares none on these tables: see [`super::catalog`]), for the members whose rows
//!    changed, and the members' fingerprints recorded (`frame_fingerprints`). Then the status
//!    history (SCD type 2), its keys checked, and a `runs` row per member. In a fleet
//!    warehouse, the history's step runs only for the members that are neither *settled* (every
//!    application has exactly one open history row, of its status, as read with the
//!    applications that a quick or narrowed sync's load keeps: the step would change nothing;
//!    the tests' builds run it anyway and check that) nor *fresh* (nothing loaded before, and no
//!    history row found when the warehouse opened: their applications' first rows are inserted
//!    as they are). The rows per table that the report and the ledger give are the staged ones for
//!    the frame tables (the transaction leaves exactly those, or keeps them), counted for the
//!    history.
//!
//! The transaction is `duckdb::Transaction`'s: any error, and a crash before the commit, leave
//! every member's rows as they were.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use duckdb::Connection;

use super::catalog::{self, Shape, Table};
use super::prepare::{LoadTimings, QualityReport};
use super::warehouse::{self, sql_list, sql_literal};
use super::LoadError;
use crate::extract::{ExtractReport, RunSpec};
use crate::progress::Laps;

/// A member of a batch, prepared: what the commit writes for it.
pub(crate) struct Ready {
    /// The organization, in a fleet warehouse; `None` in one organization's.
    pub org: Option<String>,
    pub spec: RunSpec,
    /// The frames to stage; one organization's load drops them once staged (a million
    /// applications are not held through the transaction).
    pub frames: Option<crate::transform::Frames>,
    pub quality: QualityReport,
    pub report: Option<ExtractReport>,
    /// `read_state` and `transform`, the member's own.
    pub timings: LoadTimings,
    /// In a fleet warehouse, its frame tables' fingerprints as its last load wrote them
    /// (`frame_fingerprints`, by table): a table whose frame has the same is not written again.
    /// `None`: not known (every table is written).
    pub loaded_fingerprints: Option<BTreeMap<String, String>>,
    /// In a fleet warehouse, the statuses of the organization's open rows of the status history
    /// before this load, when they were read (with the applications a quick or narrowed load
    /// keeps). A member whose every application has one open row, of its status, is *settled*:
    /// the history's step would change none of its rows, and is not run for it ([`stage`]).
    pub open_statuses: Option<warehouse::OpenStatuses>,
    /// In a fleet warehouse, the organization has no loaded run, so no rows in its data tables
    /// or history (a run's rows commit with its `runs` row; an organization whose history rows
    /// were written by something else, found when the warehouse opened, is not fresh): its
    /// history is its applications' first rows, and their first sightings are theirs.
    ///
    /// This, [`Ready::open_statuses`] and [`Ready::loaded_fingerprints`] are read before the
    /// batch's commit, the fleet's next batch's while the one before commits: they stay true
    /// because an organization loads once per fleet run, so it is never in two batches at once,
    /// and a write of its rows drops those read ahead ([`super::fleet_warehouse`]).
    pub fresh: bool,
}

/// What the commit made of a member: its quality (with the status changes it recorded), its
/// rows per table, and its timings (with the batch's staging and transaction).
pub(crate) struct Committed {
    pub quality: QualityReport,
    pub rows: BTreeMap<String, u64>,
    pub timings: LoadTimings,
    /// The exported tables whose rows of the member the transaction changed (in one
    /// organization's warehouse, every one).
    pub changed: BTreeSet<&'static str>,
}

/// The batch's staged files, per table, and how long the staging took.
pub(crate) struct Staged {
    files: BTreeMap<&'static str, Vec<PathBuf>>,
    /// Each member's rows per frame table, in the batch's order: what the transaction leaves of
    /// the member in that table (it replaces the member's rows with exactly these, or keeps
    /// them when they are these already).
    rows: Vec<warehouse::RowCounts>,
    /// Per frame table, the members (their places in the batch) whose rows the transaction
    /// replaces: the others' rows are their frames already ([`Ready::loaded_fingerprints`]).
    replaced: BTreeMap<&'static str, Vec<usize>>,
    /// Each member's frames' fingerprints, by table (a fleet warehouse's; none for a table
    /// written every time, [`ALWAYS_WRITTEN`]).
    fingerprints: Vec<BTreeMap<&'static str, String>>,
    /// Whether each member is settled ([`Ready::open_statuses`]): every row of its
    /// `applications` frame has one open history row, of its status.
    settled: Vec<bool>,
    ms: u64,
}

#[cfg(test)]
impl Staged {
    /// Whether each member is settled, in the batch's order.
    pub(crate) fn settled(&self) -> &[bool] {
        &self.settled
    }
}

/// The frame table written at every load, whatever its fingerprint: its rows are written with
/// their first sightings from the status history ([`with_first_sightings`]), so they need not be
/// its frame's.
const ALWAYS_WRITTEN: &str = "applications";

/// The staged `applications` rows (`source`) as they are written: each one's `first_seen_at`
/// the earliest of its frame's (the observation's) and the start of the application's first
/// status in `application_status_history` as it stands before the load (in a fleet warehouse,
/// the organizations `orgs`', an SQL list, each application's history its organization's).
///
/// The history's step ([`record_history`]) then opens rows only at an application's
/// `last_seen_at`, which is its frame's `first_seen_at` (the same observation), and closes rows
/// without moving where they start: the earliest start it leaves is the one read here, so the
/// rows are written once, not written and then updated.
fn with_first_sightings(source: &str, shape: Shape, orgs: &str) -> String {
    let (group, only, on) = match shape {
        Shape::Fleet => {
            ("organization, ", format!("WHERE organization IN ({orgs}) "), "s.organization = f.organization AND ")
        }
        Shape::One => ("", String::new(), ""),
    };
    format!(
        "(SELECT s.* REPLACE (CASE WHEN f.first < s.first_seen_at THEN f.first ELSE s.first_seen_at END AS first_seen_at) \
         FROM {source} AS s LEFT JOIN \
         (SELECT {group}id, min(valid_from) AS first FROM application_status_history {only}GROUP BY {group}id) AS f \
         ON {on}s.id = f.id)"
    )
}

/// Writes the batch, staged by [`stage`], into the warehouse of `shape` through `conn` in one
/// transaction. Returns each member's outcome, in the batch's order; a failure is the whole
/// batch's.
pub(crate) fn write(
    conn: &Connection,
    shape: Shape,
    batch: &[&Ready],
    staged: &Staged,
) -> Result<Vec<Committed>, LoadError> {
    let mut laps = Laps::start();
    // The transaction's parts, for the debug log.
    let mut split = Laps::start();
    let orgs: Vec<String> = batch.iter().filter_map(|r| r.org.clone()).collect();
    let tx = conn.unchecked_transaction().map_err(|e| LoadError::db("begin the load's transaction", e))?;
    // The tests' builds check that the fresh members have no history row indeed.
    #[cfg(debug_assertions)]
    assert_fresh(&tx, batch)?;
    let is_fresh = |r: &Ready| r.fresh && shape == Shape::Fleet;
    let mut sql = String::new();
    for t in catalog::frames() {
        let replaced = staged.replaced.get(t.name).map_or(&[][..], Vec::as_slice);
        if replaced.is_empty() {
            continue;
        }
        let files: Vec<String> =
            staged.files.get(t.name).into_iter().flatten().map(|f| sql_literal(&f.display().to_string())).collect();
        if files.is_empty() {
            return Err(LoadError::Bug(format!("the batch's `{}` rows to replace were not staged", t.name)));
        }
        let source = format!("read_parquet([{}], union_by_name = true, hive_partitioning = false)", files.join(", "));
        let members: Vec<&Ready> = replaced.iter().filter_map(|&i| batch.get(i).copied()).collect();
        let replaced = sql_list(&members.iter().filter_map(|r| r.org.clone()).collect::<Vec<_>>());
        // The first sightings of the members with a history (none of a fresh one's is older).
        let with_history: Vec<String> = members.iter().filter(|r| !is_fresh(r)).filter_map(|r| r.org.clone()).collect();
        let source = match t.name == ALWAYS_WRITTEN && (shape == Shape::One || !with_history.is_empty()) {
            true => with_first_sightings(&source, shape, &sql_list(&with_history)),
            false => source,
        };
        sql.push_str(&replace_rows(t, shape, &source, &replaced));
    }
    if shape == Shape::Fleet {
        sql.push_str(&record_fingerprints(&orgs, &staged.fingerprints));
    }
    // (The staged rows' keys were checked by `stage`.)
    let sql_ms = split.lap();
    tx.execute_batch(&sql).map_err(|e| LoadError::db("load the run's tables", e))?;
    let tables_ms = split.lap();
    // The status history: in one organization's warehouse, its step; in a fleet warehouse, the
    // step for the members neither settled (it would change none of their rows) nor fresh
    // (whose history is its applications' first rows, inserted as they are).
    if shape == Shape::Fleet && staged.settled.len() != batch.len() {
        return Err(LoadError::Bug("the batch's members were not all found settled or not".into()));
    }
    let members_where = |keep: &dyn Fn(&Ready, bool) -> bool| -> Vec<String> {
        batch.iter().zip(&staged.settled).filter(|(r, s)| keep(r, **s)).filter_map(|(r, _)| r.org.clone()).collect()
    };
    let stepped = members_where(&|r, settled| !settled && !is_fresh(r));
    let fresh = members_where(&|r, _| is_fresh(r));
    let (changes, mut history_changed) = match shape {
        Shape::Fleet if stepped.is_empty() => Default::default(),
        _ => record_history(&tx, shape, &stepped)?,
    };
    if !fresh.is_empty() {
        open_first_rows(&tx, &fresh)?;
        // Those with an application have rows opened: its staged applications are its rows.
        let opened = batch
            .iter()
            .zip(&staged.rows)
            .filter(|(r, rows)| is_fresh(r) && rows.get(ALWAYS_WRITTEN).is_some_and(|n| *n > 0));
        history_changed.extend(opened.map(|(r, _)| r.org.clone()));
    }
    // The tests' builds run the step for the settled members too, and check that it changes
    // nothing.
    #[cfg(debug_assertions)]
    if shape == Shape::Fleet {
        let settled = members_where(&|r, settled| settled && !is_fresh(r));
        if !settled.is_empty() {
            let (changes, touched) = record_history(&tx, shape, &settled)?;
            assert!(changes.is_empty() && touched.is_empty(), "settled members' history changed: {touched:?}");
        }
    }
    let history_ms = split.lap();
    let history =
        catalog::TABLES.into_iter().find(|t| t.role == catalog::Role::History).expect("the catalog has the history");
    // A fresh member's history rows have its applications' keys, checked when staged; the
    // tests' builds check them here too.
    let checked = if cfg!(debug_assertions) { members_where(&|r, settled| !settled || is_fresh(r)) } else { stepped };
    if shape == Shape::Fleet && !checked.is_empty() {
        let list = sql_list(&checked);
        check_keys(&tx, history, &format!("(SELECT * FROM {} WHERE organization IN ({list}))", history.name))?;
    }
    let history_keys_ms = split.lap();
    // The frame tables' rows are the staged ones; the other exported tables are counted.
    let counted: Vec<&str> =
        catalog::TABLES.iter().filter(|t| t.exported && t.role != catalog::Role::Frame).map(|t| t.name).collect();
    let scope = (shape == Shape::Fleet).then_some(orgs.as_slice());
    let mut rows = warehouse::row_counts(&tx, scope, &counted)?;
    if staged.rows.len() != batch.len() {
        return Err(LoadError::Bug("the batch's staged rows were not counted for every member".into()));
    }
    for (r, frames) in batch.iter().zip(&staged.rows) {
        rows.entry(r.org.clone()).or_default().extend(frames.iter().map(|(t, n)| (t.clone(), *n)));
    }
    // The tests' builds count the frame tables too, and check that the staged rows are theirs.
    #[cfg(debug_assertions)]
    {
        let frames: Vec<&str> = catalog::frames().map(|t| t.name).collect();
        for (org, counts) in warehouse::row_counts(&tx, scope, &frames)? {
            for (table, n) in counts {
                let staged = rows.get(&org).and_then(|r| r.get(&table));
                assert_eq!(staged, Some(&n), "{org:?}'s rows of `{table}`: staged against counted");
            }
        }
    }
    let counts_ms = split.lap();
    let transaction_so_far = laps.lap();
    let mut committed: Vec<Committed> = vec![];
    for (i, r) in batch.iter().enumerate() {
        let mut quality = r.quality.clone();
        quality.set_status_changes(changes.get(&r.org).copied().unwrap_or(0));
        let timings = LoadTimings { stage: staged.ms, transaction: transaction_so_far, ..r.timings.clone() };
        let rows = rows.remove(&r.org).ok_or_else(|| LoadError::Bug("a member's rows were not counted".into()))?;
        let mut changed: BTreeSet<&'static str> =
            staged.replaced.iter().filter(|(_, members)| members.contains(&i)).map(|(t, _)| *t).collect();
        if shape == Shape::One || history_changed.contains(&r.org) {
            changed.insert(history.name);
        }
        committed.push(Committed { quality, rows, timings, changed });
    }
    let runs: Vec<RunRow> = batch
        .iter()
        .zip(&committed)
        .map(|(r, c)| RunRow {
            org: r.org.as_deref(),
            spec: &r.spec,
            report: r.report.as_ref(),
            rows: &c.rows,
            quality: &c.quality,
            timings: &c.timings,
        })
        .collect();
    record_runs(&tx, &runs)?;
    let runs_ms = split.lap();
    crate::out::crash_point(match shape {
        Shape::One => "load-before-commit",
        Shape::Fleet => "fleet-load-before-commit",
    });
    tx.commit().map_err(|e| LoadError::db("commit the load", e))?;
    let commit_ms = split.lap();
    let transaction_ms = transaction_so_far + laps.lap();
    tracing::debug!(
        members = batch.len(),
        sql_ms,
        tables_ms,
        history_ms,
        history_keys_ms,
        counts_ms,
        runs_ms,
        commit_ms,
        "transaction stages (ms; sql_ms: the transaction begun, the statements built)"
    );
    Ok(committed
        .into_iter()
        .map(|mut c| {
            c.timings.transaction = transaction_ms;
            c
        })
        .collect())
}

/// The statements that replace a frame table's rows with `source`'s (the staged files): in one
/// organization's warehouse the table rebuilt under a new name and swapped in; in a fleet
/// warehouse, the members' (`orgs`, an SQL list) rows deleted and the batch's inserted.
fn replace_rows(t: &Table, shape: Shape, source: &str, orgs: &str) -> String {
    let name = t.name;
    match shape {
        Shape::One => format!(
            "DROP TABLE IF EXISTS {name}__new;\n{}INSERT INTO {name}__new BY NAME SELECT * FROM {source};\n\
             DROP TABLE {name};\nALTER TABLE {name}__new RENAME TO {name};\n",
            t.create_sql(shape, &format!("{name}__new"))
        ),
        Shape::Fleet => format!(
            "DELETE FROM {name} WHERE organization IN ({orgs});\nINSERT INTO {name} BY NAME SELECT * FROM {source};\n"
        ),
    }
}

/// Checks that the rows of `source` (a table's rows of a batch) repeat no key of the fleet
/// warehouse's table `t`, whose key is checked rather than declared.
fn check_keys(conn: &Connection, t: &Table, source: &str) -> Result<(), LoadError> {
    if t.fleet != Some(catalog::FleetKey::Checked) {
        return Ok(());
    }
    let key = t.key_of(Shape::Fleet).join(", ");
    let duplicates: i64 = conn
        .query_row(&format!("SELECT count(*) - count(DISTINCT ({key})) FROM {source}"), [], |r| r.get(0))
        .map_err(|e| LoadError::db(format!("check the keys of `{}`", t.name), e))?;
    if duplicates != 0 {
        return Err(LoadError::DuplicateKeys { table: t.name.to_owned(), key, duplicates });
    }
    Ok(())
}

/// Checks that a staged frame of table `t` (with `organization`) repeats no key of the fleet
/// warehouse's table, whose key is checked rather than declared: as [`check_keys`] does in
/// SQL, on the preparing thread rather than in the writer's transaction.
fn check_frame_keys(t: &Table, df: &polars::prelude::DataFrame) -> Result<(), LoadError> {
    if t.fleet != Some(catalog::FleetKey::Checked) {
        return Ok(());
    }
    let key = t.key_of(Shape::Fleet);
    // Each row's key as bytes (equal keys, equal bytes), counted in a set: no groups are built
    // and no rows gathered, as a `unique` would.
    let rows = df
        .select_to_vec(key.iter().copied())
        .and_then(|columns| polars::chunked_array::ops::row_encode::encode_rows_unordered(&columns))
        .map_err(|source| LoadError::Stage { table: t.name.to_owned(), source })?;
    let mut seen = polars::polars_utils::aliases::PlHashSet::with_capacity_and_hasher(rows.len(), Default::default());
    let duplicates = rows.iter().filter(|row| !seen.insert(*row)).count();
    if duplicates != 0 {
        return Err(LoadError::DuplicateKeys {
            table: t.name.to_owned(),
            key: key.join(", "),
            duplicates: duplicates as i64,
        });
    }
    Ok(())
}

/// Stages the batch's frames under `dir` for one insert per table: each table's frames, with
/// `organization` in a fleet warehouse, stacked into `dir/<table>.parquet`, and a file of its own
/// (`dir/<table>/<org>.parquet`) for a member whose frame does not have the first member's
/// schema. In a fleet warehouse, each file's keys are checked ([`check_frame_keys`]): a key
/// held twice is [`LoadError::DuplicateKeys`]. In a fleet warehouse, each member's frames are
/// fingerprinted ([`super::fingerprint`]), and a frame whose fingerprint is the one its last
/// load recorded ([`Ready::loaded_fingerprints`]) is not staged: its rows are in the warehouse
/// already, and the transaction keeps them. The members keep their frames (Polars shares
/// their buffers; a fleet's batch that fails is written again member by member), unless the
/// caller drops them.
pub(crate) fn stage(batch: &[&Ready], shape: Shape, dir: &Path) -> Result<Staged, LoadError> {
    let mut laps = Laps::start();
    let _ = std::fs::remove_dir_all(dir);
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut files: BTreeMap<&'static str, Vec<PathBuf>> = BTreeMap::new();
        let mut rows: Vec<warehouse::RowCounts> = vec![warehouse::RowCounts::new(); batch.len()];
        let mut replaced: BTreeMap<&'static str, Vec<usize>> = BTreeMap::new();
        let mut fingerprints: Vec<BTreeMap<&'static str, String>> = vec![BTreeMap::new(); batch.len()];
        let mut settled = vec![false; batch.len()];
        // Where the staging's time goes, for the debug log: fingerprints, stacking, key checks,
        // writing.
        let (mut split, mut fingerprint_us, mut stack_ms, mut check_ms, mut write_ms) = (Laps::start(), 0, 0, 0, 0);
        let polars = |table: &'static str| {
            move |source: polars::prelude::PolarsError| LoadError::Stage { table: table.to_owned(), source }
        };
        for t in catalog::frames() {
            let table = t.name;
            let mut stacked: Option<polars::prelude::DataFrame> = None;
            let mut own: Vec<(String, polars::prelude::DataFrame)> = vec![];
            for (i, r) in batch.iter().enumerate() {
                // Its own file's name, should its frame not stack with the others'.
                let name = match &r.org {
                    Some(org) => org.clone(),
                    None => format!("member-{i}"),
                };
                let frame = r
                    .frames
                    .as_ref()
                    .and_then(|f| f.tables().into_iter().find(|(name, _)| *name == table).map(|(_, df)| df));
                let Some(frame) = frame else {
                    return Err(LoadError::Bug(format!("the batch has no `{table}` frame to stage")));
                };
                rows[i].insert(table.to_owned(), frame.height() as u64);
                if shape == Shape::Fleet && table == ALWAYS_WRITTEN {
                    settled[i] = r.open_statuses.as_ref().is_some_and(|open| history_settled(frame, open));
                }
                if shape == Shape::Fleet && table != ALWAYS_WRITTEN {
                    let started = std::time::Instant::now();
                    let fingerprint = super::fingerprint::fingerprint(frame);
                    fingerprint_us += started.elapsed().as_micros() as u64;
                    if let Some(fingerprint) = fingerprint {
                        let loaded = r.loaded_fingerprints.as_ref().and_then(|l| l.get(table));
                        let unchanged = loaded == Some(&fingerprint);
                        fingerprints[i].insert(table, fingerprint);
                        if unchanged {
                            continue;
                        }
                    }
                }
                replaced.entry(table).or_default().push(i);
                let mut df = frame.clone();
                if shape == Shape::Fleet {
                    let Some(org) = r.org.as_deref() else {
                        return Err(LoadError::Bug(
                            "a fleet warehouse's batch has a member without an organization".into(),
                        ));
                    };
                    let height = df.height();
                    df.with_column(polars::prelude::Column::new(catalog::ORGANIZATION.into(), vec![org; height]))
                        .map_err(polars(table))?;
                }
                match &mut stacked {
                    None => stacked = Some(df),
                    // Stacked only on the same schema: a failed stack can leave the batch's
                    // frame with part of the member's columns appended.
                    Some(b) if b.schema() == df.schema() => {
                        b.vstack_mut(&df).map_err(polars(table))?;
                    }
                    Some(_) => own.push((name, df)),
                }
            }
            let mut written: Vec<(PathBuf, polars::prelude::DataFrame)> = vec![];
            if let Some(mut b) = stacked {
                b.rechunk_mut();
                written.push((dir.join(format!("{table}.parquet")), b));
            }
            written.extend(own.into_iter().map(|(org, df)| (dir.join(table).join(format!("{org}.parquet")), df)));
            stack_ms += split.lap();
            if shape == Shape::Fleet {
                // Each file holds whole organizations, and the key starts with `organization`:
                // a key held twice is held twice within one file.
                for (_, df) in &written {
                    check_frame_keys(t, df)?;
                }
            }
            check_ms += split.lap();
            for (path, mut df) in written {
                write_parquet(&path, &mut df)?;
                files.entry(table).or_default().push(path);
            }
            write_ms += split.lap();
        }
        let fingerprint_ms = fingerprint_us / 1000;
        let stack_ms = stack_ms.saturating_sub(fingerprint_ms);
        let kept: usize = batch.len() * catalog::frames().count() - replaced.values().map(Vec::len).sum::<usize>();
        tracing::debug!(
            members = batch.len(),
            kept,
            settled = settled.iter().filter(|s| **s).count(),
            fingerprint_ms,
            stack_ms,
            check_ms,
            write_ms,
            "staging stages (ms; kept: members' tables whose rows are loaded already; settled: members whose history stays)"
        );
        Ok(Staged { files, rows, replaced, fingerprints, settled, ms: laps.lap() })
    }))
    .unwrap_or_else(|panic| Err(super::panicked("stage the batch's tables", panic)))
}

/// Whether a member's `applications` frame leaves its status history as it is: every row's
/// application has one open history row (`open`, as read before the load), of the row's status.
/// The history's step ([`record_history`]) then closes none (no status differs) and opens none
/// (every application has an open row). A frame that cannot be read so is not settled.
fn history_settled(frame: &polars::prelude::DataFrame, open: &warehouse::OpenStatuses) -> bool {
    let (Ok(ids), Ok(statuses)) = (frame.column("id"), frame.column("status")) else { return false };
    let (Ok(ids), Ok(statuses)) = (ids.i64(), statuses.str()) else { return false };
    ids.len() == statuses.len()
        && ids.iter().zip(statuses.iter()).all(|(id, status)| match (id, status) {
            (Some(id), Some(status)) => open.get(&id).is_some_and(|o| o.as_deref() == Some(status)),
            _ => false,
        })
}

/// Writes a staged frame as an uncompressed Parquet file (read back at once), creating its
/// directory.
pub(crate) fn write_parquet(path: &Path, df: &mut polars::prelude::DataFrame) -> Result<(), LoadError> {
    use polars::prelude::{ParquetCompression, ParquetWriter};
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(crate::out::io_err("create", dir))?;
    }
    let file = std::fs::File::create(path).map_err(crate::out::io_err("create", path))?;
    ParquetWriter::new(file)
        .with_compression(ParquetCompression::Uncompressed)
        .finish(df)
        .map_err(|source| LoadError::Parquet { path: path.display().to_string(), source })?;
    Ok(())
}

/// SCD2 on `application_status_history`: close the current row of every application whose
/// status changed and open a new one; first sightings open a row (the rows of `applications`
/// carry their first sightings as written: [`with_first_sightings`]). In a fleet warehouse,
/// only the organizations `orgs`, each application's history its organization's. Returns the
/// changes per organization (`None` for one organization's warehouse), and the organizations
/// whose history rows it closed or opened.
fn record_history(
    conn: &Connection,
    shape: Shape,
    orgs: &[String],
) -> Result<(StatusChanges, BTreeSet<Option<String>>), LoadError> {
    // In a fleet warehouse, each side of every join is restricted to the batch's organizations,
    // though the join's `organization` equality implies it for one side: DuckDB then scans the
    // batch's rows of that table, not the whole fleet's.
    let (key, scope, org_column) = match shape {
        Shape::Fleet => {
            let list = sql_list(orgs);
            (
                format!("h.organization IN ({list}) AND h.organization = a.organization AND "),
                format!("a.organization IN ({list}) AND "),
                "a.organization, ",
            )
        }
        Shape::One => (String::new(), String::new(), ""),
    };
    let returning = if shape == Shape::Fleet { "h.organization" } else { "CAST(NULL AS VARCHAR)" };
    let opened = if shape == Shape::Fleet { "organization" } else { "CAST(NULL AS VARCHAR)" };
    let close = format!(
        "UPDATE application_status_history AS h SET valid_to = a.last_seen_at FROM applications AS a \
         WHERE {scope}{key}h.id = a.id AND h.valid_to IS NULL AND h.status <> a.status AND a.last_seen_at > h.valid_from \
         RETURNING {returning}"
    );
    let open = format!(
        "INSERT INTO application_status_history \
         SELECT {org_column}a.id, a.status, a.last_seen_at, NULL FROM applications AS a \
         WHERE {scope}NOT EXISTS (SELECT 1 FROM application_status_history AS h WHERE {key}h.id = a.id AND h.valid_to IS NULL) \
         RETURNING {opened}"
    );
    let mut laps = Laps::start();
    let failed = |e| LoadError::db("close changed statuses in `application_status_history`", e);
    let mut stmt = conn.prepare(&close).map_err(failed)?;
    let mut changed = BTreeMap::new();
    for org in stmt.query_map([], |r| r.get::<_, Option<String>>(0)).map_err(failed)? {
        *changed.entry(org.map_err(failed)?).or_insert(0) += 1;
    }
    drop(stmt);
    let close_ms = laps.lap();
    let mut touched: BTreeSet<Option<String>> = changed.keys().cloned().collect();
    let failed = |e| LoadError::db("open statuses in `application_status_history`", e);
    let mut stmt = conn.prepare(&open).map_err(failed)?;
    for org in stmt.query_map([], |r| r.get::<_, Option<String>>(0)).map_err(failed)? {
        touched.insert(org.map_err(failed)?);
    }
    drop(stmt);
    tracing::debug!(close_ms, open_ms = laps.lap(), "history stages (ms)");
    Ok((changed, touched))
}

/// Checks that the batch's fresh members ([`Ready::fresh`]) have no row of
/// `application_status_history`: the tests' builds do, in the load's transaction.
#[cfg(debug_assertions)]
fn assert_fresh(conn: &Connection, batch: &[&Ready]) -> Result<(), LoadError> {
    let fresh: Vec<String> = batch.iter().filter(|r| r.fresh).filter_map(|r| r.org.clone()).collect();
    if fresh.is_empty() {
        return Ok(());
    }
    let rows: i64 = conn
        .query_row(
            &format!("SELECT count(*) FROM application_status_history WHERE organization IN ({})", sql_list(&fresh)),
            [],
            |r| r.get(0),
        )
        .map_err(|e| LoadError::db("read `application_status_history`", e))?;
    assert_eq!(rows, 0, "a fresh member has history rows");
    Ok(())
}

/// Opens the first history row of every application of the fresh organizations `orgs` (in a
/// fleet warehouse; they have no history row, [`Ready::fresh`]): what [`record_history`]'s
/// step does for them, without looking for rows to close or rows already open.
fn open_first_rows(conn: &Connection, orgs: &[String]) -> Result<(), LoadError> {
    conn.execute_batch(&format!(
        "INSERT INTO application_status_history \
         SELECT organization, id, status, last_seen_at, NULL FROM applications WHERE organization IN ({});",
        sql_list(orgs)
    ))
    .map_err(|e| LoadError::db("open statuses in `application_status_history`", e))
}

/// The statements that record the batch's members' (`orgs`, in the batch's order) frames'
/// fingerprints in `frame_fingerprints`, each member's replacing its own.
fn record_fingerprints(orgs: &[String], fingerprints: &[BTreeMap<&'static str, String>]) -> String {
    let table = catalog::FINGERPRINTS;
    let mut sql = format!("DELETE FROM {table} WHERE organization IN ({});\n", sql_list(orgs));
    let rows: Vec<String> = orgs
        .iter()
        .zip(fingerprints)
        .flat_map(|(org, fps)| {
            fps.iter().map(move |(t, fp)| format!("({}, {}, {})", sql_literal(org), sql_literal(t), sql_literal(fp)))
        })
        .collect();
    if !rows.is_empty() {
        sql.push_str(&format!(
            "INSERT INTO {table} (organization, table_name, fingerprint) VALUES {};\n",
            rows.join(", ")
        ));
    }
    sql
}

/// The status changes [`record_history`] recorded, per organization (`None`: one
/// organization's warehouse).
type StatusChanges = BTreeMap<Option<String>, u64>;

/// One run's row of the `runs` ledger, for [`record_runs`].
pub(crate) struct RunRow<'a> {
    /// The organization, in a fleet warehouse; `None` in one organization's.
    pub org: Option<&'a str>,
    pub spec: &'a RunSpec,
    pub report: Option<&'a ExtractReport>,
    pub rows: &'a BTreeMap<String, u64>,
    pub quality: &'a QualityReport,
    pub timings: &'a LoadTimings,
}

/// Records runs in the `runs` ledger (all of one warehouse kind: every row with an organization,
/// or none): appended to a temporary table of the connection ([`RUNS_STAGED`]), then inserted
/// with one statement, in the transaction of `conn`, if it has one.
///
/// Loading the run the warehouse holds again rebuilds the same tables: its ledger row stays as
/// the first load wrote it (when it finished, what it found, what it rests on). Loading an
/// older run replaces its row, since the warehouse then holds that run's data.
pub(crate) fn record_runs(conn: &Connection, runs: &[RunRow]) -> Result<(), LoadError> {
    let Some(first) = runs.first() else { return Ok(()) };
    let keyed = first.org.is_some();
    let read = |e| LoadError::db("read `runs`", e);
    // The latest run of each organization (of the warehouse, keyed `None`, in one organization's).
    let latest: BTreeMap<Option<String>, String> = if keyed {
        let orgs: Vec<String> = runs.iter().filter_map(|r| r.org.map(str::to_owned)).collect();
        let mut stmt = conn
            .prepare(&format!(
                "SELECT organization, arg_max(run_id, finished_at) FROM runs WHERE organization IN ({}) GROUP BY 1",
                sql_list(&orgs)
            ))
            .map_err(read)?;
        // An organization whose runs all lack `finished_at` has no latest run (NULL).
        let latest: Vec<(String, Option<String>)> = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?)))
            .map_err(read)?
            .collect::<Result<_, _>>()
            .map_err(read)?;
        latest.into_iter().filter_map(|(org, run)| Some((Some(org), run?))).collect()
    } else {
        warehouse::latest_run(conn)?.map(|run| (None, run)).into_iter().collect()
    };
    let mut staged: Vec<[Box<dyn duckdb::ToSql>; 22]> = vec![];
    for run in runs {
        let RunRow { org, spec, report, rows, quality, timings } = *run;
        if latest.get(&org.map(str::to_owned)).map(String::as_str) == Some(spec.run_id.as_str()) {
            continue;
        }
        // The load's own time before the transaction: reading the state, and in one
        // organization's warehouse its staging; a fleet member's staging is its batch's, not its own.
        let load_ms = timings.read_state + if org.is_none() { timings.stage } else { 0 };
        let json = |v: serde_json::Value| v.to_string();
        let requests = report.map(|r| &r.requests);
        let warnings: Vec<String> =
            report.map_or_else(Vec::new, |r| r.warnings.clone()).into_iter().chain(quality.findings.clone()).collect();
        staged.push([
            Box::new(org.map(str::to_owned)),
            Box::new(spec.run_id.clone()),
            Box::new(report.map(|r| r.started_at.to_rfc3339())),
            Box::new(report.map_or("loaded", |r| r.status.as_str()).to_owned()),
            Box::new(report.and_then(|r| r.durations_ms.extract).map(|v| v as i64)),
            Box::new(timings.transform as i64),
            Box::new(load_ms as i64),
            Box::new(requests.map(|m| m.requests_total as i64)),
            Box::new(requests.map(|m| m.retries as i64)),
            Box::new(requests.map(|m| m.rate_limited as i64)),
            Box::new(requests.map(|m| m.pacing_wait_ms as i64)),
            Box::new(json(serde_json::json!(rows))),
            Box::new(json(serde_json::json!(warnings))),
            Box::new(quality.status_changes as i64),
            Box::new(report.and_then(|r| serde_json::to_string(r).ok())),
            Box::new(warnings.len() as i64),
            Box::new(spec.sync.as_str().to_owned()),
            Box::new(warehouse::sync_scope(&spec.statuses, spec.campaign_id)),
            Box::new(report.map(|r| r.sync.pages_verified as i64)),
            Box::new(report.and_then(|r| r.sync.last_reconcile_at).map(|t| t.to_rfc3339())),
            Box::new(report.map(|r| r.sync.counts_agree)),
            // The row's place, so that the ledger keeps the order the runs were given in.
            Box::new(staged.len() as i64),
        ]);
    }
    if staged.is_empty() {
        return Ok(());
    }
    let staging = |e| LoadError::db("stage the runs for `runs`", e);
    conn.execute_batch(&format!(
        "CREATE TEMP TABLE IF NOT EXISTS {RUNS_STAGED} ({RUNS_STAGED_COLUMNS});\nDELETE FROM {RUNS_STAGED};"
    ))
    .map_err(staging)?;
    let mut appender = conn.appender(RUNS_STAGED).map_err(staging)?;
    for values in &staged {
        let params: Vec<&dyn duckdb::ToSql> = values.iter().map(|b| b.as_ref()).collect();
        appender.append_row(params.as_slice()).map_err(staging)?;
    }
    appender.flush().map_err(staging)?;
    drop(appender);
    // `finished_at` (and a full sync's `last_reconcile_at`) is `now()`: the transaction's time.
    let org_column = if keyed { "organization, " } else { "" };
    conn.execute_batch(&format!(
        "INSERT OR REPLACE INTO runs ({org_column}run_id, started_at, finished_at, status, extract_ms, transform_ms, load_ms, \
         requests, retries, rate_limited, pacing_wait_ms, rows_json, warnings_json, status_changes, \
         parquet_exported, report_json, warnings, sync_mode, sync_scope, pages_verified, last_reconcile_at, \
         counts_agree) \
         SELECT {org_column}run_id, started_at::TIMESTAMPTZ, now(), status, extract_ms, transform_ms, load_ms, \
         requests, retries, rate_limited, pacing_wait_ms, rows_json, warnings_json, status_changes, \
         false, report_json, warnings, sync_mode, sync_scope, pages_verified, \
         CASE WHEN sync_mode = 'full' THEN now() ELSE last_reconcile_at::TIMESTAMPTZ END, counts_agree \
         FROM {RUNS_STAGED} ORDER BY place;\nDELETE FROM {RUNS_STAGED};"
    ))
    .map_err(|e| LoadError::db("record the runs in `runs`", e))?;
    Ok(())
}

/// The connection's temporary table that [`record_runs`] appends a batch's `runs` rows to before
/// its one insert. A fleet's batch of 100 took 71 to 213 ms to record as one `VALUES` statement
/// of 2,200 bound parameters, and 19 to 73 ms so (BENCHMARKS.md, "The pacer's memory rewritten
/// in place, and the batch's `runs` rows appended").
const RUNS_STAGED: &str = "runs__staged";

/// [`RUNS_STAGED`]'s columns: `runs`' own as given (its times as text, cast by the insert), and
/// `place`, the row's order.
const RUNS_STAGED_COLUMNS: &str = "organization VARCHAR, run_id VARCHAR, started_at VARCHAR, status VARCHAR, \
     extract_ms BIGINT, transform_ms BIGINT, load_ms BIGINT, requests BIGINT, retries BIGINT, rate_limited BIGINT, \
     pacing_wait_ms BIGINT, rows_json VARCHAR, warnings_json VARCHAR, status_changes BIGINT, report_json VARCHAR, \
     warnings BIGINT, sync_mode VARCHAR, sync_scope VARCHAR, pages_verified BIGINT, last_reconcile_at VARCHAR, \
     counts_agree BOOLEAN, place BIGINT";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalogs_frames_are_the_transforms() {
        let frames = crate::transform::Frames::default();
        let made: Vec<&str> = frames.tables().iter().map(|(name, _)| *name).collect();
        let declared: Vec<&str> = catalog::frames().map(|t| t.name).collect();
        assert_eq!(made, declared);
        assert!(catalog::TABLES.iter().filter(|t| t.role == catalog::Role::Frame).all(|t| t.exported));
    }

    /// A member is settled only when every application of its frame has exactly one open history
    /// row, of the frame's status: a new application, a changed status, or an id with two open
    /// rows each leave it to the history's step.
    #[test]
    fn a_member_is_settled_only_when_every_application_has_its_status_open() {
        use polars::prelude::{Column, DataFrame};
        let frame = DataFrame::new_infer_height(vec![
            Column::new("id".into(), vec![1i64, 2]),
            Column::new("status".into(), vec!["accepted", "pending"]),
        ])
        .unwrap();
        let open = |rows: &[(i64, Option<&str>)]| -> warehouse::OpenStatuses {
            rows.iter().map(|(id, s)| (*id, s.map(str::to_owned))).collect()
        };
        // An application no longer listed keeps its open row: the step never closes it.
        assert!(history_settled(&frame, &open(&[(1, Some("accepted")), (2, Some("pending")), (3, Some("rejected"))])));
        assert!(!history_settled(&frame, &open(&[(1, Some("accepted"))])), "application 2 is new");
        assert!(!history_settled(&frame, &open(&[(1, Some("accepted")), (2, Some("accepted"))])), "2 changed");
        assert!(!history_settled(&frame, &open(&[(1, Some("accepted")), (2, None)])), "2 has two open rows");
        assert!(history_settled(&frame.head(Some(0)), &open(&[])), "no application: nothing to record");
        let no_status = DataFrame::new_infer_height(vec![Column::new("id".into(), vec![1i64])]).unwrap();
        assert!(!history_settled(&no_status, &open(&[(1, Some("accepted"))])));
    }

    /// A staged frame whose key repeats is refused before the transaction, as the SQL check does.
    #[test]
    fn a_staged_frames_key_held_twice_is_refused() {
        use polars::prelude::{Column, DataFrame};
        let t = catalog::table("applications").unwrap();
        assert_eq!(t.key_of(Shape::Fleet), ["organization", "id"]);
        let frame = |orgs: &[&str], ids: &[i64]| {
            DataFrame::new_infer_height(vec![
                Column::new("organization".into(), orgs.to_vec()),
                Column::new("id".into(), ids.to_vec()),
                Column::new("status".into(), vec!["approved"; ids.len()]),
            ])
            .unwrap()
        };
        check_frame_keys(t, &frame(&["a", "b", "a"], &[1, 1, 2])).expect("one row per key and organization");
        match check_frame_keys(t, &frame(&["a", "b", "a", "a"], &[1, 1, 2, 1])) {
            Err(LoadError::DuplicateKeys { table, key, duplicates }) => {
                assert_eq!((table.as_str(), key.as_str(), duplicates), ("applications", "organization, id", 1));
            }
            other => panic!("a duplicated key was not refused: {other:?}"),
        }
    }

    /// The fleet warehouse declares no key on its checked tables, so a row twice must be refused
    /// by the check before the batch's commit, with the table, the key and how many.
    #[test]
    fn a_checked_key_held_twice_is_refused_before_the_commit() {
        let conn = Connection::open_in_memory().unwrap();
        let history = catalog::table("application_status_history").unwrap();
        assert_eq!(history.fleet, Some(catalog::FleetKey::Checked));
        conn.execute_batch(&history.create_sql(Shape::Fleet, history.name)).unwrap();
        let insert = |org: &str| {
            format!(
                "INSERT INTO application_status_history (organization, id, status, valid_from, valid_to) \
                 VALUES ('{org}', 7, 'approved', TIMESTAMPTZ '2026-01-01 00:00:00+00', NULL);"
            )
        };
        conn.execute_batch(&insert("a")).unwrap();
        conn.execute_batch(&insert("b")).unwrap();
        check_keys(&conn, history, history.name).expect("one row per key and organization");
        conn.execute_batch(&insert("a")).unwrap();
        match check_keys(&conn, history, history.name) {
            Err(LoadError::DuplicateKeys { table, key, duplicates }) => {
                assert_eq!(table, "application_status_history");
                assert!(key.starts_with("organization, "), "{key}");
                assert_eq!(duplicates, 1);
            }
            other => panic!("a duplicated key was not refused: {other:?}"),
        }
    }
}
