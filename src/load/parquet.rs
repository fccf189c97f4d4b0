//! The Parquet tree, `OUT/parquet/<table>`: every exported table (the catalog's) written by
//! DuckDB after a load's commit (zstd, statistics, ordered by the table's key). One
//! organization's `content_daily` and `wow_deltas` are partitioned by `year` (`year=2026/…`).
//!
//! A fleet warehouse's tables are written in *segments*: files `seg-<label>.parquet`, each with
//! the rows of at most [`SEGMENT_ORGANIZATIONS`] organizations, ordered by `organization` then
//! the key, `organization` (and for the year-partitioned tables `year`) a column of the files,
//! so a reader sees the same columns as before and a filter on `organization` skips the other
//! organizations' row groups. A publish writes new segments of a table for the organizations
//! loaded since the last publish and the others that shared a segment with one of them, and
//! hard-links every other segment from the current version: a publish costs what changed, and
//! at most a segment's worth more for each changed organization. DuckDB's partitioned writer, a
//! folder per organization before, cost about 3 ms of CPU a file (5 s or more for a thousand
//! organizations); one file costs a tenth of that.
//!
//! Each export goes to a fresh version directory, then the table's path, a symlink, is switched
//! to it with one rename: a reader never sees a partial table. A version that stops being
//! current is kept for a grace period (`--parquet-grace-s`) for readers that listed its files just
//! before. An export a crash interrupted is redone by the next load (`runs.parquet_exported`), so
//! Parquet and DuckDB converge.

use std::path::{Path, PathBuf};

use duckdb::OptionalExt;

use super::{catalog, warehouse, LoadError};
use crate::out::{io_err, OutDir};

/// Exports every table to `OUT/parquet/<table>/`, each switched into place atomically. A version
/// that stops being current is kept for `grace` after that (a `.retired` file in it marks the
/// moment), so a reader that listed its files just before the switch can still open
/// them; the first export after the grace period removes it.
pub fn export_parquet(
    conn: &duckdb::Connection,
    out: &OutDir,
    run_id: &str,
    grace: std::time::Duration,
) -> Result<(), LoadError> {
    export_tables(conn, out, run_id, grace, Export::Whole)?;
    mark_exported(conn, Some(run_id))
}

/// Records in `runs` that the tree holds the runs' rows: `run_id`'s, or every run not yet marked.
pub(crate) fn mark_exported(conn: &duckdb::Connection, run_id: Option<&str>) -> Result<(), LoadError> {
    let done = match run_id {
        Some(run) => conn.execute("UPDATE runs SET parquet_exported = true WHERE run_id = ?", [run]),
        None => conn.execute("UPDATE runs SET parquet_exported = true WHERE NOT parquet_exported", []),
    };
    done.map(|_| ()).map_err(|e| LoadError::db("record the export", e))
}

/// What [`export_tables`] exports.
pub(crate) enum Export<'a> {
    /// One organization's warehouse: every table, whole.
    Whole,
    /// A fleet warehouse, in segments: per table, the organizations `dirty` (whose rows of it
    /// changed since the last publish) and those sharing a segment with them are written into a
    /// new segment; the other segments of the current version are hard-linked (their rows have
    /// not changed since). A table with no dirty organization keeps its current version.
    /// `segments` remembers which organizations each current segment holds (read from the files
    /// when a table is not in it), and is updated.
    Segments { dirty: &'a Dirty, segments: &'a mut Segments },
}

/// The organizations whose rows changed since the last export, per exported table.
pub type Dirty = std::collections::BTreeMap<&'static str, std::collections::BTreeSet<String>>;

/// The organizations of each segment file of a version of a table.
pub type Members = std::collections::BTreeMap<String, std::collections::BTreeSet<String>>;

/// The [`Members`] of each table's current version.
pub type Segments = std::collections::BTreeMap<String, Members>;

/// The name of a segment file of an export labelled `label`.
fn segment_file(label: &str) -> String {
    format!("seg-{label}.parquet")
}

/// Whether a file is a segment.
fn is_segment(name: &str) -> bool {
    name.starts_with("seg-") && name.ends_with(".parquet")
}

/// The organizations of each segment of the version `dir`, read from the files (their
/// `organization` column only). `None` when `dir` is not a version in segments (none yet, or the
/// layout of an older creator-etl: a folder per organization).
fn read_segments(conn: &duckdb::Connection, dir: &Path) -> Result<Option<Members>, LoadError> {
    let Some(files) = segment_files(dir) else { return Ok(None) };
    let mut segments: Members = files.iter().map(|f| (f.clone(), Default::default())).collect();
    if files.is_empty() {
        return Ok(Some(segments));
    }
    let list: Vec<String> = files.iter().map(|f| warehouse::sql_literal(&dir.join(f).display().to_string())).collect();
    let sql = format!(
        "SELECT DISTINCT filename, organization FROM read_parquet([{}], filename = true, hive_partitioning = false)",
        list.join(", ")
    );
    let failed = |e| LoadError::db(format!("read the organizations of the Parquet segments in `{}`", dir.display()), e);
    let mut stmt = conn.prepare(&sql).map_err(failed)?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))).map_err(failed)?;
    for row in rows {
        let (file, org) = row.map_err(failed)?;
        let name = Path::new(&file).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or(file);
        segments.entry(name).or_default().insert(org);
    }
    Ok(Some(segments))
}

/// The segment files of the version `dir`; `None` when it is not a version in segments (none,
/// or the layout of an older creator-etl).
fn segment_files(dir: &Path) -> Option<Vec<String>> {
    let entries = std::fs::read_dir(dir).ok()?;
    let mut files = vec![];
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        if !is_segment(&name) {
            return None;
        }
        files.push(name);
    }
    Some(files)
}

/// [`export_parquet`]'s work: every table to a fresh version directory, switched into place.
/// `label` names the version directories.
pub(crate) fn export_tables(
    conn: &duckdb::Connection,
    out: &OutDir,
    label: &str,
    grace: std::time::Duration,
    mut export: Export,
) -> Result<(), LoadError> {
    let run_id = label;
    let root = out.parquet_dir();
    std::fs::create_dir_all(&root).map_err(io_err("create", &root))?;
    let mut exported = 0;
    for t in catalog::TABLES.into_iter().filter(|t| t.exported) {
        let table = t.name;
        let started = std::time::Instant::now();
        let version = root.join(format!(".{table}-{run_id}-{}", crate::out::new_run_id()));
        let link = root.join(table);
        let written = match &mut export {
            Export::Whole => {
                export_whole(conn, t, &version)?;
                None
            }
            Export::Segments { dirty, segments } => {
                let current = std::fs::read_link(&link).ok().map(|v| root.join(v));
                let empty = std::collections::BTreeSet::new();
                let dirty = dirty.get(table).unwrap_or(&empty);
                // No organization's rows of it changed, and its current version is in segments:
                // that version holds them. (One in an older layout, or gone, is exported whole.)
                if dirty.is_empty() && current.as_deref().and_then(segment_files).is_some() {
                    continue;
                }
                // Forgotten until the switch: an error on the way leaves the files to say.
                let known = match (segments.remove(table), &current) {
                    (Some(known), Some(_)) => Some(known),
                    (_, Some(current)) => read_segments(conn, current).unwrap_or_else(|e| {
                        // A segment DuckDB cannot read (damaged by hand, or by a power loss):
                        // the table is exported whole, which replaces it.
                        tracing::warn!(table, error = %crate::exit::with_causes(&e), "cannot read the current Parquet version's segments; exporting the table whole");
                        None
                    }),
                    (_, None) => None,
                };
                Some(export_segments(conn, t, &version, label, dirty, current.as_deref(), known)?)
            }
        };
        // Switch the table's path to the new version: one rename of a symlink.
        let tmp_link = root.join(format!(".{table}.link-{run_id}"));
        let _ = std::fs::remove_file(&tmp_link);
        let rel = version.file_name().expect("version dir has a name");
        std::os::unix::fs::symlink(rel, &tmp_link).map_err(io_err("link", &tmp_link))?;
        let old = std::fs::read_link(&link).ok();
        if link.is_dir() && !link.is_symlink() {
            std::fs::remove_dir_all(&link).map_err(io_err("remove", &link))?;
        }
        std::fs::rename(&tmp_link, &link).map_err(io_err("switch", &link))?;
        if let Some(old) = old {
            retire(&root.join(old));
        }
        if let (Export::Segments { segments, .. }, Some(written)) = (&mut export, written) {
            segments.insert(table.to_owned(), written);
        }
        tracing::debug!(table, ms = started.elapsed().as_millis() as u64, "table exported to Parquet");
        exported += 1;
        if exported == 1 {
            crate::out::crash_point("export-after-first-table");
        }
    }
    clean_versions(&root, grace);
    Ok(())
}

/// One organization's table into `version`: one file, or partitioned by `year`.
fn export_whole(conn: &duckdb::Connection, t: &catalog::Table, version: &Path) -> Result<(), LoadError> {
    let table = t.name;
    let (target, year, options) = match t.by_year {
        true => {
            (version.to_path_buf(), ", year(date) AS year", "FORMAT parquet, COMPRESSION zstd, PARTITION_BY (year)")
        }
        false => {
            std::fs::create_dir_all(version).map_err(io_err("create", version))?;
            (version.join("data.parquet"), "", "FORMAT parquet, COMPRESSION zstd")
        }
    };
    let path = warehouse::sql_literal(&target.display().to_string());
    let select = format!("SELECT *{year} FROM {table} ORDER BY {}", t.order_by());
    conn.execute_batch(&format!("COPY ({select}) TO {path} ({options});"))
        .map_err(|e| LoadError::db(format!("export `{table}` to Parquet"), e))
}

/// The most organizations a segment holds: a changed organization costs the rewrite of at
/// most this many organizations' rows, and a whole export of N organizations N / this many COPYs.
pub const SEGMENT_ORGANIZATIONS: usize = 256;

/// A fleet warehouse's table into `version` in segments: the organizations with rows among the
/// `dirty` ones and those sharing a current segment with one of them (every organization of the
/// table when `known`, the current segments, is `None`) written into new segments of at most
/// [`SEGMENT_ORGANIZATIONS`] each, and the other current segments hard-linked from `current`.
/// No segment is empty. Returns the new version's segments.
fn export_segments(
    conn: &duckdb::Connection,
    t: &catalog::Table,
    version: &Path,
    label: &str,
    dirty: &std::collections::BTreeSet<String>,
    current: Option<&Path>,
    known: Option<Members>,
) -> Result<Members, LoadError> {
    let table = t.name;
    std::fs::create_dir_all(version).map_err(io_err("create", version))?;
    let mut kept = Members::new();
    // The organizations to write: `None`, every one of the table.
    let mut rewrite: Option<std::collections::BTreeSet<String>> = None;
    if let (Some(known), Some(current)) = (known, current) {
        let mut touched = dirty.clone();
        for (file, orgs) in known {
            if orgs.is_empty() {
                continue;
            }
            if orgs.is_disjoint(dirty) {
                kept.insert(file, orgs);
            } else {
                touched.extend(orgs);
            }
        }
        let linked = kept.keys().try_for_each(|file| {
            let target = version.join(file);
            std::fs::hard_link(current.join(file), &target).map_err(io_err("link", &target))
        });
        match linked {
            Ok(()) => rewrite = Some(touched),
            Err(e) => {
                // A current version that cannot be linked (removed by hand, or a file system
                // without hard links): this table is exported whole instead.
                tracing::warn!(table, error = %e, "cannot reuse the current Parquet version's files; exporting the table whole");
                std::fs::remove_dir_all(version).map_err(io_err("remove", version))?;
                std::fs::create_dir_all(version).map_err(io_err("create", version))?;
                kept.clear();
            }
        }
    }
    if rewrite.as_ref().is_some_and(|orgs| orgs.is_empty()) {
        return Ok(kept);
    }
    // The organizations with rows, of those to write: the segments' exact members.
    let with_rows: Vec<String> = {
        let filter = match &rewrite {
            Some(orgs) => {
                format!(" WHERE organization IN ({})", warehouse::sql_list(&orgs.iter().cloned().collect::<Vec<_>>()))
            }
            None => String::new(),
        };
        let failed = |e| LoadError::db(format!("read the organizations of `{table}`"), e);
        let mut stmt =
            conn.prepare(&format!("SELECT DISTINCT organization FROM {table}{filter} ORDER BY 1")).map_err(failed)?;
        let orgs = stmt.query_map([], |r| r.get::<_, String>(0)).map_err(failed)?.collect::<Result<_, _>>();
        orgs.map_err(failed)?
    };
    let year = if t.by_year { ", year(date) AS year" } else { "" };
    // When every organization of the table is written, a segment's members are all those
    // between its first and last (`with_rows` is all of them, in DuckDB's order, and this
    // connection is the file's one writer: no row comes between the two statements): a range
    // filter costs less than a list of 256 names tested on every row of every segment's scan.
    let every = rewrite.is_none();
    for (i, chunk) in with_rows.chunks(SEGMENT_ORGANIZATIONS).enumerate() {
        // A name no segment of the version has (a linked one included).
        let file = std::iter::repeat_with(|| segment_file(&format!("{label}-{}-{i}", crate::out::new_run_id())))
            .find(|f| !version.join(f).exists())
            .expect("an unused name");
        let path = warehouse::sql_literal(&version.join(&file).display().to_string());
        let members = match (every, chunk) {
            (true, [first, .., last]) => {
                format!("organization BETWEEN {} AND {}", warehouse::sql_literal(first), warehouse::sql_literal(last))
            }
            _ => format!("organization IN ({})", warehouse::sql_list(chunk)),
        };
        let select = format!("SELECT *{year} FROM {table} WHERE {members} ORDER BY organization, {}", t.order_by());
        conn.execute_batch(&format!("COPY ({select}) TO {path} (FORMAT parquet, COMPRESSION zstd);"))
            .map_err(|e| LoadError::db(format!("export `{table}` to Parquet"), e))?;
        kept.insert(file, chunk.iter().cloned().collect());
    }
    Ok(kept)
}

/// Retired versions past their grace period. A version that is not current and has no mark
/// (an interrupted export left it unlinked, or a crash or a failed write came between the
/// switch and its mark) is marked now: its grace period starts when it is first seen, never
/// from its creation, so no reader that listed it just before loses it.
fn clean_versions(root: &Path, grace: std::time::Duration) {
    if let Ok(entries) = std::fs::read_dir(root) {
        let live: Vec<PathBuf> =
            catalog::exported().iter().filter_map(|t| std::fs::read_link(root.join(t)).ok()).collect();
        for e in entries.flatten() {
            let (name, path) = (e.file_name(), e.path());
            let hidden = name.to_string_lossy().starts_with('.');
            if !hidden || live.iter().any(|l| l.as_os_str() == name) {
                continue;
            }
            if path.is_symlink() || !path.is_dir() {
                // A link an interrupted switch left behind: no reader follows it.
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let mark = path.join(RETIRED_MARK);
            match std::fs::metadata(&mark).and_then(|m| m.modified()) {
                Ok(at) if at.elapsed().is_ok_and(|age| age >= grace) => {
                    let _ = std::fs::remove_dir_all(&path);
                }
                Ok(_) => {}
                Err(_) => retire(&path),
            }
        }
    }
}

/// The file whose modification time says when a Parquet version stopped being current. A
/// dot-file, which Parquet readers skip.
const RETIRED_MARK: &str = ".retired";

/// Marks a version as replaced now, which starts its grace period. A mark that cannot be
/// written is a warning: the next export's clean-up marks the version when it finds it
/// unmarked, so it is never removed before a whole grace period.
fn retire(version: &Path) {
    let mark = version.join(RETIRED_MARK);
    if let Err(e) = std::fs::write(&mark, b"") {
        tracing::warn!(path = %mark.display(), error = %e, "cannot mark a replaced Parquet version; the next export marks it");
    }
}

/// Redoes the Parquet export of the last loaded run if a crash interrupted it.
pub fn finish_interrupted_export(
    conn: &duckdb::Connection,
    out: &OutDir,
    grace: std::time::Duration,
) -> Result<(), LoadError> {
    let pending: Option<String> = conn
        .query_row("SELECT run_id FROM runs WHERE NOT parquet_exported ORDER BY finished_at DESC LIMIT 1", [], |r| {
            r.get(0)
        })
        .optional()
        .map_err(|e| LoadError::db("read which export is unfinished from `runs`", e))?;
    if let Some(run_id) = pending {
        tracing::warn!(run_id = %run_id, "the last load's Parquet export was interrupted; exporting again");
        // The whole tree is this export's: every run before it is in it too.
        export_parquet(conn, out, &run_id, grace)?;
        mark_exported(conn, None)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only `seg-*.parquet` files make a version in segments: an older layout (a folder per
    /// organization) is exported whole, never linked from.
    #[test]
    fn only_segment_files_make_a_version_in_segments() {
        let conn = duckdb::Connection::open_in_memory().unwrap();
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_segments(&conn, &dir.path().join("none")).unwrap(), None);
        let file = dir.path().join(segment_file("a"));
        let path = warehouse::sql_literal(&file.display().to_string());
        conn.execute_batch(&format!("COPY (SELECT * FROM (VALUES ('x', 1), ('y', 2), ('x', 3)) AS t(organization, n)) TO {path} (FORMAT parquet);")).unwrap();
        std::fs::write(dir.path().join(".retired"), b"").unwrap();
        let segments = read_segments(&conn, dir.path()).unwrap().unwrap();
        assert_eq!(segments.len(), 1);
        assert_eq!(segments[&segment_file("a")], ["x".to_owned(), "y".to_owned()].into());
        std::fs::create_dir(dir.path().join("organization=a")).unwrap();
        assert_eq!(read_segments(&conn, dir.path()).unwrap(), None);
    }

    /// A whole export in segments (each a range of organizations) writes every row once, each
    /// organization in one segment, with names whose order is not what it looks (case,
    /// digits, a trailing space, a quote, a non-ASCII letter); a later export of a few changed organizations
    /// rewrites only their segments and links the rest, the rows still all there once.
    #[test]
    fn segments_hold_every_row_once_across_their_boundaries() {
        let conn = duckdb::Connection::open_in_memory().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let t = catalog::TABLES.iter().find(|t| t.name == "application_status_history").unwrap();
        let mut names: Vec<String> = (0..2 * SEGMENT_ORGANIZATIONS + 10).map(|i| format!("org-{i}")).collect();
        names.extend(["Org-B", "org-a", "org-\u{e4}", "it's", "org-1 ", "ORG"].map(String::from));
        conn.execute_batch(
            "CREATE TABLE application_status_history (organization VARCHAR, id BIGINT, valid_from BIGINT);",
        )
        .unwrap();
        let mut app = conn.appender("application_status_history").unwrap();
        for (i, org) in names.iter().enumerate() {
            for k in 0..3 {
                app.append_row(duckdb::params![org, (i * 10 + k) as i64, k as i64]).unwrap();
            }
        }
        drop(app);
        let rows = |from: &str| -> Vec<(String, i64, i64)> {
            let mut stmt =
                conn.prepare(&format!("SELECT organization, id, valid_from FROM {from} ORDER BY ALL")).unwrap();
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap().collect::<Result<_, _>>().unwrap()
        };
        let read = |version: &Path| {
            rows(&format!("read_parquet({})", warehouse::sql_literal(&version.join("*.parquet").display().to_string())))
        };
        let table = || rows("application_status_history");
        let first = dir.path().join("v1");
        let members = export_segments(&conn, t, &first, "a", &Default::default(), None, None).unwrap();
        assert_eq!(members.len(), names.len().div_ceil(SEGMENT_ORGANIZATIONS));
        let held: Vec<&String> = members.values().flatten().collect();
        assert_eq!(held.len(), names.len(), "each organization in one segment");
        assert_eq!(read(&first), table(), "every row once");
        assert_eq!(read_segments(&conn, &first).unwrap().unwrap(), members, "the segments hold what was said");
        // Two organizations change: one segment is rewritten (both are in it), the rest linked.
        conn.execute_batch(
            "UPDATE application_status_history SET valid_from = valid_from + 100 \
             WHERE organization IN ('org-1', 'org-10');",
        )
        .unwrap();
        let dirty = ["org-1".to_owned(), "org-10".to_owned()].into();
        let second = dir.path().join("v2");
        let again = export_segments(&conn, t, &second, "b", &dirty, Some(&first), Some(members.clone())).unwrap();
        assert_eq!(again.values().flatten().count(), names.len());
        assert_eq!(again.keys().filter(|f| members.contains_key(*f)).count(), members.len() - 1, "the others linked");
        assert_eq!(read(&second), table());
    }

    /// A version that is not current and carries no mark gets one and waits a whole grace
    /// period; a marked one past its grace is removed; a current one is never touched.
    #[test]
    fn unmarked_versions_start_their_grace_period_when_found() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let table = catalog::exported()[0];
        let (current, unmarked) = (format!(".{table}-b"), format!(".{table}-a"));
        for v in [&current, &unmarked] {
            std::fs::create_dir_all(root.join(v)).unwrap();
            std::fs::write(root.join(v).join("data.parquet"), b"x").unwrap();
        }
        std::os::unix::fs::symlink(&current, root.join(table)).unwrap();
        std::fs::write(root.join(&current).join(RETIRED_MARK), b"").unwrap();
        clean_versions(root, std::time::Duration::ZERO);
        assert!(root.join(&unmarked).join("data.parquet").exists(), "first seen unmarked: kept, and marked");
        assert!(root.join(&unmarked).join(RETIRED_MARK).exists());
        assert!(root.join(&current).exists(), "the current version stays, whatever its mark says");
        clean_versions(root, std::time::Duration::from_secs(3600));
        assert!(root.join(&unmarked).exists(), "within its grace period");
        clean_versions(root, std::time::Duration::ZERO);
        assert!(!root.join(&unmarked).exists(), "past its grace period");
        assert!(root.join(&current).join("data.parquet").exists());
    }
}
