//! The Parquet tree, `OUT/parquet/<table>`: every exported table (the catalog's) written by
//! DuckDB after a load's commit (zstd, statistics, ordered by the table's key). One
//! organization's `content_daily` and `wow_deltas` are partitioned by `year` (`year=2026/…`).
//!
//! A fleet warehouse's tables are written in [`BUCKETS`] files each, `part-NN-of-64-K.parquet`,
//! every organization's rows in one bucket (a stable hash of its name), ordered by `organization`
//! then the key, with `organization` (and for the year-partitioned tables `year`) as columns of
//! the files: a reader sees the same columns as before, and a filter on `organization` skips the
//! row groups of the others. A partition per organization cost DuckDB's writer about 0.7 ms a
//! file, 5 s or more for a thousand organizations; 64 files a table cost a tenth of that, and a
//! later export still writes only the buckets whose organizations changed.
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
    /// A fleet warehouse, in [`BUCKETS`] files a table: with `Some(orgs)`, only the buckets of
    /// these organizations are written, and the other buckets' files of the current version are
    /// hard-linked into the new one (their rows have not changed since it was exported); with
    /// `None`, every bucket is written.
    Keyed(Option<&'a std::collections::BTreeSet<String>>),
}

/// The number of files a fleet warehouse's table is written in.
pub const BUCKETS: u32 = 64;

/// An organization's bucket, in SQL, of the text expression `org`: MD5, so that it never changes
/// with the DuckDB version (a later export links the buckets it does not write).
fn bucket_sql(org: &str) -> String {
    format!("CAST(md5_number({org}) % {BUCKETS} AS INTEGER)")
}

/// The `k`-th file of bucket `b`.
fn bucket_file(b: u32, k: usize) -> String {
    format!("part-{b:02}-of-{BUCKETS}-{k}.parquet")
}

/// The bucket of a file [`bucket_file`] named, if it is one.
fn bucket_of_file(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("part-")?.strip_suffix(".parquet")?;
    let (b, rest) = rest.split_once("-of-")?;
    let (of, k) = rest.split_once('-')?;
    (of == BUCKETS.to_string() && k.parse::<usize>().is_ok()).then_some(())?;
    b.parse().ok().filter(|b| *b < BUCKETS)
}

/// The buckets of the organizations `orgs`.
pub(crate) fn buckets_of(
    conn: &duckdb::Connection,
    orgs: &std::collections::BTreeSet<String>,
) -> Result<Vec<u32>, LoadError> {
    if orgs.is_empty() {
        return Ok(vec![]);
    }
    let list = warehouse::sql_list(&orgs.iter().cloned().collect::<Vec<_>>());
    let sql = format!("SELECT DISTINCT {} FROM unnest([{list}]) AS t(o) ORDER BY 1", bucket_sql("o"));
    let failed = |e| LoadError::db("compute the organizations' Parquet buckets", e);
    let mut stmt = conn.prepare(&sql).map_err(failed)?;
    let buckets = stmt.query_map([], |r| r.get::<_, i32>(0)).map_err(failed)?.collect::<Result<Vec<_>, _>>();
    Ok(buckets.map_err(failed)?.into_iter().map(|b| b as u32).collect())
}

/// [`export_parquet`]'s work: every table to a fresh version directory, switched into place.
/// `label` names the version directories.
pub(crate) fn export_tables(
    conn: &duckdb::Connection,
    out: &OutDir,
    label: &str,
    grace: std::time::Duration,
    export: Export,
) -> Result<(), LoadError> {
    let run_id = label;
    let root = out.parquet_dir();
    std::fs::create_dir_all(&root).map_err(io_err("create", &root))?;
    let dirty = match export {
        Export::Keyed(Some(orgs)) => Some(buckets_of(conn, orgs)?),
        _ => None,
    };
    for (i, t) in catalog::TABLES.into_iter().filter(|t| t.exported).enumerate() {
        let table = t.name;
        let version = root.join(format!(".{table}-{run_id}-{}", crate::out::new_run_id()));
        let link = root.join(table);
        match export {
            Export::Whole => export_whole(conn, t, &version)?,
            Export::Keyed(_) => {
                // The current version, when only some buckets are written: the others' files
                // are linked from it, if it is in buckets (not the layout of an older
                // creator-etl, nor one a hand has changed).
                let current = std::fs::read_link(&link).ok().map(|v| root.join(v)).filter(|v| in_buckets(v));
                match (&dirty, current) {
                    (Some(dirty), Some(current)) => {
                        export_buckets(conn, t, &version, Some(dirty))?;
                        if let Err(e) = link_unchanged(&current, &version, dirty) {
                            // A current version that cannot be read or linked (removed by hand,
                            // or a file system without hard links): this table is exported
                            // whole instead.
                            tracing::warn!(table, error = %e, "cannot reuse the current Parquet version's files; exporting the table whole");
                            std::fs::remove_dir_all(&version).map_err(io_err("remove", &version))?;
                            export_buckets(conn, t, &version, None)?;
                        }
                    }
                    _ => export_buckets(conn, t, &version, None)?,
                }
            }
        }
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
        if i == 0 {
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

/// A fleet warehouse's table into `version`, in buckets: `only` these buckets, or all of them.
/// Each bucket's rows are written by DuckDB's partitioned writer into `__bucket=N/`, then moved
/// to `part-NN-of-64-K.parquet` (a hidden column in a path would be a column to readers).
fn export_buckets(
    conn: &duckdb::Connection,
    t: &catalog::Table,
    version: &Path,
    only: Option<&[u32]>,
) -> Result<(), LoadError> {
    let table = t.name;
    std::fs::create_dir_all(version).map_err(io_err("create", version))?;
    let filter = match only {
        Some([]) => return Ok(()),
        Some(buckets) => {
            let list: Vec<String> = buckets.iter().map(u32::to_string).collect();
            format!(" WHERE {} IN ({})", bucket_sql("organization"), list.join(", "))
        }
        None => String::new(),
    };
    let year = if t.by_year { ", year(date) AS year" } else { "" };
    let staged = version.join(".buckets");
    let path = warehouse::sql_literal(&staged.display().to_string());
    let select = format!(
        "SELECT *{year}, {} AS __bucket FROM {table}{filter} ORDER BY organization, {}",
        bucket_sql("organization"),
        t.order_by()
    );
    conn.execute_batch(&format!(
        "COPY ({select}) TO {path} (FORMAT parquet, COMPRESSION zstd, PARTITION_BY (__bucket));"
    ))
    .map_err(|e| LoadError::db(format!("export `{table}` to Parquet"), e))?;
    if !staged.exists() {
        // No rows: no bucket, no file.
        return Ok(());
    }
    for entry in std::fs::read_dir(&staged).map_err(io_err("read", &staged))? {
        let entry = entry.map_err(io_err("read", &staged))?;
        let name = entry.file_name();
        let bucket = name.to_str().and_then(|n| n.strip_prefix("__bucket=")).and_then(|b| b.parse::<u32>().ok());
        let Some(bucket) = bucket else {
            return Err(LoadError::Bug(format!("an unexpected file `{}` in a Parquet export", entry.path().display())));
        };
        let mut files: Vec<PathBuf> = std::fs::read_dir(entry.path())
            .map_err(io_err("read", &entry.path()))?
            .map(|f| f.map(|f| f.path()))
            .collect::<Result<_, _>>()
            .map_err(io_err("read", &entry.path()))?;
        files.sort();
        for (k, file) in files.into_iter().enumerate() {
            let to = version.join(bucket_file(bucket, k));
            std::fs::rename(&file, &to).map_err(io_err("move", &to))?;
        }
    }
    std::fs::remove_dir_all(&staged).map_err(io_err("remove", &staged))?;
    Ok(())
}

/// Whether a version of a fleet warehouse's table is in buckets: every entry but dot-files is a
/// bucket's file.
fn in_buckets(version: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(version) else { return false };
    entries.flatten().all(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        name.starts_with('.') || bucket_of_file(&name).is_some()
    })
}

/// Hard-links into `version` the files of `current` whose bucket is not in `written`.
fn link_unchanged(current: &Path, version: &Path, written: &[u32]) -> Result<(), LoadError> {
    for entry in std::fs::read_dir(current).map_err(io_err("read", current))? {
        let entry = entry.map_err(io_err("read", current))?;
        let name = entry.file_name();
        let Some(bucket) = name.to_str().and_then(bucket_of_file) else { continue };
        if !written.contains(&bucket) {
            let target = version.join(&name);
            std::fs::hard_link(entry.path(), &target).map_err(io_err("link", &target))?;
        }
    }
    Ok(())
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

    /// Only files named as buckets of this bucket count are a bucketed version's: an older
    /// layout (a folder per organization) is exported whole, never linked from.
    #[test]
    fn bucket_files_are_recognised_and_nothing_else() {
        assert_eq!(bucket_of_file(&bucket_file(7, 0)), Some(7));
        assert_eq!(bucket_of_file(&bucket_file(63, 2)), Some(63));
        for other in [
            "part-07-of-32-0.parquet",
            "part-64-of-64-0.parquet",
            "data_0.parquet",
            "organization=a",
            "part-07-of-64.parquet",
        ] {
            assert_eq!(bucket_of_file(other), None, "{other}");
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(bucket_file(1, 0)), b"").unwrap();
        std::fs::write(dir.path().join(".retired"), b"").unwrap();
        assert!(in_buckets(dir.path()));
        std::fs::create_dir(dir.path().join("organization=a")).unwrap();
        assert!(!in_buckets(dir.path()));
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
