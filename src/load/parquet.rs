//! The Parquet tree, `OUT/parquet/<table>`: every exported table (the catalog's) written by
//! DuckDB after a load's commit (zstd, statistics, ordered by the table's key; `content_daily`
//! and `wow_deltas` partitioned by `year`, a fleet warehouse's tables by `organization` first).
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
    /// A fleet warehouse, partitioned by `organization` first: with `Some(orgs)`, only these
    /// organizations' partitions are written, and every other organization's files of the
    /// current version are hard-linked into the new one (their rows have not changed since it
    /// was exported); with `None`, every organization is written.
    Keyed(Option<&'a std::collections::BTreeSet<String>>),
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
    let keyed = matches!(export, Export::Keyed(_));
    let run_id = label;
    let root = out.parquet_dir();
    std::fs::create_dir_all(&root).map_err(io_err("create", &root))?;
    for (i, t) in catalog::TABLES.into_iter().filter(|t| t.exported).enumerate() {
        let table = t.name;
        let version = root.join(format!(".{table}-{run_id}-{}", crate::out::new_run_id()));
        let partition = t.by_year;
        // A partitioned export writes into the version directory itself.
        let target = if partition || keyed { version.clone() } else { version.join("data.parquet") };
        if !(partition || keyed) {
            std::fs::create_dir_all(&version).map_err(io_err("create", &version))?;
        }
        let year = if partition { ", year(date) AS year" } else { "" };
        let key = if keyed { "organization, " } else { "" };
        // The current version, when only some organizations are written: the others' files
        // are linked from it.
        let link = root.join(table);
        let current = match export {
            Export::Keyed(Some(orgs)) => std::fs::read_link(&link).ok().map(|v| (root.join(v), orgs)),
            _ => None,
        };
        let only = match &current {
            Some((_, orgs)) => {
                format!(" WHERE organization IN ({})", warehouse::sql_list(&orgs.iter().cloned().collect::<Vec<_>>()))
            }
            None => String::new(),
        };
        let options = match (keyed, partition) {
            (true, true) => "FORMAT parquet, COMPRESSION zstd, PARTITION_BY (organization, year)",
            (true, false) => "FORMAT parquet, COMPRESSION zstd, PARTITION_BY (organization)",
            (false, true) => "FORMAT parquet, COMPRESSION zstd, PARTITION_BY (year)",
            (false, false) => "FORMAT parquet, COMPRESSION zstd",
        };
        let path = warehouse::sql_literal(&target.display().to_string());
        // The table's rows (`filter`: of some organizations) into the new version.
        let copy = |filter: &str| {
            let select = format!("SELECT *{year} FROM {table}{filter} ORDER BY {key}{}", t.order_by());
            conn.execute_batch(&format!("COPY ({select}) TO {path} ({options});"))
                .map_err(|e| LoadError::db(format!("export `{table}` to Parquet"), e))
        };
        copy(&only)?;
        if let Some((current, orgs)) = &current {
            std::fs::create_dir_all(&version).map_err(io_err("create", &version))?;
            if let Err(e) = link_unchanged(current, &version, orgs) {
                // A current version that cannot be read or linked (removed by hand, or a file
                // system without hard links): this table is exported whole instead.
                tracing::warn!(table, error = %e, "cannot reuse the current Parquet version's files; exporting the table whole");
                std::fs::remove_dir_all(&version).map_err(io_err("remove", &version))?;
                copy("")?;
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

/// Hard-links into `version` the partitions `organization=<name>/` of `current` whose
/// organization is not in `written`, files and folders as they are.
fn link_unchanged(
    current: &Path,
    version: &Path,
    written: &std::collections::BTreeSet<String>,
) -> Result<(), LoadError> {
    fn link_tree(from: &Path, to: &Path) -> Result<(), LoadError> {
        std::fs::create_dir_all(to).map_err(io_err("create", to))?;
        for entry in std::fs::read_dir(from).map_err(io_err("read", from))? {
            let entry = entry.map_err(io_err("read", from))?;
            let (source, target) = (entry.path(), to.join(entry.file_name()));
            if entry.file_type().map_err(io_err("read", &source))?.is_dir() {
                link_tree(&source, &target)?;
            } else {
                std::fs::hard_link(&source, &target).map_err(io_err("link", &target))?;
            }
        }
        Ok(())
    }
    for entry in std::fs::read_dir(current).map_err(io_err("read", current))? {
        let entry = entry.map_err(io_err("read", current))?;
        let name = entry.file_name();
        let Some(org) = name.to_str().and_then(|n| n.strip_prefix("organization=")) else { continue };
        if !written.contains(org) && entry.path().is_dir() {
            link_tree(&entry.path(), &version.join(&name))?;
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
