//! Restoring one organization's state from the shared lake into an `--out` that lacks it (a
//! fresh volume, another shard, or one the lake has moved past).

use std::collections::BTreeSet;

use serde::Serialize;

use super::blocking;
use crate::Error;

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
    /// Only the action journal and the actions' results were merged (the lake's `runs` held
    /// nothing new); the data was left as it was.
    pub journal_only: bool,
}

/// The run ids of `runs` and of `action_journal` in the writer's warehouse in `out` (blocking:
/// DuckDB); none without one.
fn local_run_ids(out: &crate::out::OutDir) -> Result<[BTreeSet<String>; 2], Error> {
    use crate::load::warehouse;
    if !out.writer_warehouse().exists() && !out.warehouse().exists() {
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
/// does not have it. `None` when there is nothing to restore. The caller holds the `--out` lock.
/// `known_runs`, when given, are the organization's loaded runs (a fleet warehouse holds them,
/// not `out`'s): they replace `out`'s `runs` in the comparison.
///
/// Whether the data is restored is decided by `runs` alone: when `out` has loaded no run while
/// the lake's `runs` has rows of the organization, or when the lake's `runs` lists a run that
/// `out` does not know (another `--out` synced the organization since: shards changed and
/// changed back). The lake's rows then replace the warehouse's tables and ledger. The journal
/// and the actions' results are always merged (a row of either kept), so no record of a write
/// is lost; when only they hold runs that `out` does not know (another `--out` sent actions, or
/// this one's intents reached the lake and its push did not), only they are merged and the
/// warehouse's data is left as it is.
///
/// Columns are matched by name, and by the names a column had before a rename: a lake file
/// written at an older schema restores with the columns it lacks as the warehouse's migrations
/// leave them (their fill or default, else NULL), and a column this version does not know is
/// left out. It all happens in one transaction, so a restore that fails leaves
/// the warehouse as it was, and the next run restores again.
pub async fn restore_from_lake(
    out: &crate::out::OutDir,
    lake: &crate::load::lake::LakeConfig,
    known_runs: Option<BTreeSet<String>>,
) -> Result<Option<RestoreReport>, Error> {
    use crate::load::lake::JOURNAL;
    use crate::query::lake::{resolve_tables, LakeSource};
    // Every run with a lake commits to it afterwards: a store that cannot hold its commits is
    // refused before anything is read or sent.
    crate::load::lake::check_conditional_writes(lake).await?;
    let o = out.clone();
    let [local_runs, local_journal] = blocking("restore check", move || local_run_ids(&o)).await?;
    let local_runs = known_runs.unwrap_or(local_runs);
    let cache = out.lake_restore_dir();
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
    let first = ["runs", JOURNAL];
    let marks = resolve_tables(&source, &first, true).await.map_err(failed)?;
    let lake_tables = marks.tables.clone();
    let had_runs = !local_runs.is_empty();
    let (unseen_runs, unseen_journal) =
        blocking("restore check", move || -> Result<(BTreeSet<String>, BTreeSet<String>), Error> {
            let mut unseen = (BTreeSet::new(), BTreeSet::new());
            for t in &lake_tables {
                if t.table == "runs" {
                    unseen.0 = lake_run_ids(t)?.difference(&local_runs).cloned().collect();
                } else {
                    unseen.1 = lake_run_ids(t)?.difference(&local_journal).cloned().collect();
                }
            }
            Ok(unseen)
        })
        .await?;
    let (tables, why): (Vec<&'static str>, String) = if let Some(last) = unseen_runs.last() {
        let mut tables = crate::load::catalog::committed_tables();
        tables.retain(|t| !first.contains(t));
        let why = if !had_runs {
            "`--out` held no loaded run of the organization".to_owned()
        } else {
            format!(
                "the lake holds {} run(s) of the organization that `--out` does not know (the last `{last}`): another `--out` synced it since",
                unseen_runs.len()
            )
        };
        (tables, why)
    } else if let Some(last) = unseen_journal.last() {
        (
            vec!["action_results"],
            format!(
                "the lake's action journal holds {} run(s) of the organization that `--out` does not know (the last `{last}`): another `--out` sent its actions, or this one's last push did not reach the lake",
                unseen_journal.len()
            ),
        )
    } else {
        return Ok(None);
    };
    let journal_only = unseen_runs.is_empty();
    let mut snapshot = resolve_tables(&source, &tables, true).await.map_err(failed)?;
    snapshot.tables.extend(marks.tables.into_iter().filter(|t| !journal_only || t.table == JOURNAL));
    let (o, tables) = (out.clone(), snapshot.tables);
    let mut report = blocking("restore", move || restore_tables(&o, &tables)).await?;
    report.url = lake.url.clone();
    report.organization = lake.org.clone();
    tracing::warn!(
        organization = %lake.org,
        out = %out.root().display(),
        runs = report.rows.get("runs").copied().unwrap_or_default(),
        journal = report.rows.get(crate::load::lake::JOURNAL).copied().unwrap_or_default(),
        "{why}: {}",
        if journal_only {
            "merged the lake's action journal and actions' results into the warehouse"
        } else {
            "restored its warehouse, runs ledger and action journal from the lake"
        }
    );
    report.why = why;
    report.journal_only = journal_only;
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
        journal_only: false,
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
            let catalog = crate::load::catalog::table(t.table);
            // Each catalog column: from the files' column of that name, or of a name it had
            // before a rename (an older release wrote it so), else what fills it (a migration's
            // fill, or its default); where the files hold NULL because they were written
            // before the column existed, the same fill. A NOT NULL column added with a fill or a
            // default so restores from an older release's files, and a renamed one keeps its
            // values.
            let shape = crate::load::catalog::Shape::One;
            let (mut names, mut values) = (vec![], vec![]);
            for c in catalog.iter().flat_map(|t| t.columns.iter()) {
                // A default stands in only for a NOT NULL column: a nullable one's NULLs may be its own.
                let fill = crate::load::catalog::fill_of(shape, t.table, c.name).or(c.default.filter(|_| !c.nullable));
                // The files' columns first, newest name first, then the fill.
                let mut parts: Vec<String> = std::iter::once(c.name)
                    .chain(crate::load::catalog::former_names(shape, t.table, c.name))
                    .filter(|n| in_lake.iter().any(|l| l == n))
                    .map(ident)
                    .chain(fill.map(str::to_owned))
                    .collect();
                let value = match parts.len() {
                    0 => continue,
                    1 => parts.remove(0),
                    _ => format!("coalesce({})", parts.join(", ")),
                };
                names.push(ident(c.name));
                values.push(value);
            }
            let rows = conn
                .execute(
                    &format!(
                        "INSERT OR IGNORE INTO {} ({}) SELECT {} FROM {source}",
                        t.table,
                        names.join(", "),
                        values.join(", ")
                    ),
                    [],
                )
                .map_err(|e| LoadError::db(format!("restore `{}` from the lake", t.table), e))?;
            report.rows.insert(t.table.to_owned(), rows as u64);
            report.versions.insert(t.table.to_owned(), t.version);
        }
        // The fills are in each insert's select (above): nothing is left to update.
        Ok(())
    };
    let tx = conn.unchecked_transaction().map_err(|e| LoadError::db("restore from the lake", e))?;
    insert(&mut report)?;
    tx.commit().map_err(|e| LoadError::db("restore from the lake", e))?;
    warehouse::publish(conn, out)?;
    Ok(report)
}
