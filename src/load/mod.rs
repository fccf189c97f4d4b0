//! Load: a run's tables into the DuckDB warehouse, in one transaction, then exported to Parquet.
//!
//! 1. The previous state is read from the warehouse: all content, and the applications outside
//!    the run's scope (a run narrowed by `--statuses` or `--campaign-id` leaves the others).
//! 2. Transform builds every frame from the merged input. Content is upserted by (metric, date):
//!    this run's days replace the loaded ones.
//! 3. The frames are staged as Parquet files. Inside one transaction, every table is rebuilt
//!    from them under a new name and swapped in. The status history (SCD2) is updated, and the
//!    run is recorded in `runs`. A crash before `COMMIT` leaves the previous warehouse as it was.
//! 4. After the commit, every table is exported from DuckDB to `OUT/parquet/<table>/` (zstd,
//!    statistics, `content_daily` and `wow_deltas` partitioned by year). Each export goes to a
//!    fresh directory, then the table's path, a symlink, is switched to it with one rename. So a
//!    reader never sees a partial table. An export a crash interrupted is redone by the next load
//!    (`runs.parquet_exported`), so Parquet and DuckDB converge.
//!
//! 5. The warehouse is published to readers as a snapshot (see [`warehouse`]: one writer, many
//!    readers).
//!
//! Loading the same run twice leaves every table as it was. A run whose landing holds fewer
//! applications or days than its extract reported is refused, so a damaged landing never
//! replaces good tables.

pub mod fleet;
pub mod lake;
mod readback;
pub mod warehouse;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use duckdb::OptionalExt;
use polars::prelude::{ParquetCompression, ParquetWriter};
use serde::Serialize;
use thiserror::Error;

use crate::extract::{read_extracted, ContentRow, ExtractError, ExtractReport, Extracted, Observation};

use crate::out::{io_err, OutDir, OutError};
use crate::transform::{self, TransformError};

#[derive(Debug, Error)]
pub enum LoadError {
    #[error("warehouse: cannot {context}: {message}")]
    Db { context: String, message: String },
    /// A value read back from the warehouse that is not of the column's type or not one of the
    /// values creator-etl writes there. The run stops before it changes anything.
    #[error("warehouse: `{table}.{column}` {problem}; nothing was loaded and the warehouse is as it was. Correct or delete that row in the writer's warehouse (`OUT/state/warehouse.duckdb`), then rerun")]
    Unreadable { table: String, column: String, problem: String },
    #[error("the warehouse has schema version {found}, newer than this creator-etl supports ({supported}); upgrade creator-etl")]
    NewerSchema { found: i32, supported: i32 },
    #[error(
        "raw run `{0}` did not finish extracting; rerun `creator-etl extract` to complete it, or load another run"
    )]
    Incomplete(String),
    #[error("no completed raw run in `{0}`; run `creator-etl extract` or `creator-etl run` first")]
    NoRuns(String),
    #[error("cannot write `{path}`: {message}")]
    Parquet { path: String, message: String },
    #[error("data-quality checks failed under `--strict`: {0}")]
    Strict(String),
    #[error("the warehouse `{path}` is held by another process ({holder}); close it (readers use the snapshot `warehouse.duckdb`), then rerun")]
    Locked { path: String, holder: String },
    #[error("data quality: {0}")]
    Quality(String),
    /// A warehouse of the other kind: one organization's where a fleet's was expected, or the
    /// other way round.
    #[error("warehouse: {0}")]
    Kind(String),
    #[error("lake: {0}")]
    Lake(String),
    #[error("refusing to load run `{run_id}`: its landing holds {found} {what}, but its extract reported {reported}; the raw files under `raw/{run_id}/` are incomplete, so the warehouse keeps its previous data. Run `creator-etl extract --fresh` (or `run`) to fetch it again")]
    Shrunk { run_id: String, what: &'static str, found: u64, reported: u64 },
    #[error("refusing to load run `{run_id}`: its run report `{path}` {problem}, so its landing cannot be checked against what the extract reported; the warehouse keeps its previous data. Run `creator-etl extract --fresh` (or `run`) to fetch it again")]
    Report { run_id: String, path: String, problem: String },
    #[error("quick run `{run_id}` holds only what changed since run `{base}`, but the warehouse has loaded `{latest}` since; run `creator-etl run --sync full` (or extract again) instead of loading it")]
    StaleQuick { run_id: String, base: String, latest: String },
    #[error(transparent)]
    Transform(#[from] TransformError),
    #[error(transparent)]
    Extract(#[from] ExtractError),
    #[error(transparent)]
    Out(#[from] OutError),
}

impl LoadError {
    pub(crate) fn db(context: impl Into<String>, e: duckdb::Error) -> Self {
        LoadError::Db { context: context.into(), message: e.to_string() }
    }
}

/// How long a replaced Parquet version stays for readers, by default (`--parquet-grace-s`).
pub const DEFAULT_PARQUET_GRACE: std::time::Duration = std::time::Duration::from_secs(3600);

/// A validated load request.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    pub out: OutDir,
    pub cohort_edges: Vec<i64>,
    /// Fail the load when a data-quality check finds a problem.
    pub strict: bool,
    /// How long a Parquet version stays after it stops being current.
    pub parquet_grace: std::time::Duration,
    /// Also commit every table to this Delta Lake, as this organization ([`lake`]).
    pub lake: Option<lake::LakeConfig>,
}

/// Data-quality findings of a load; fatal only with `--strict`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct QualityReport {
    /// Days whose API `last` differs from the loaded `current` of seven days earlier.
    pub last_mismatches: u64,
    /// Windows whose `total`/`last_total` are not the sums of their points.
    pub total_mismatches: u64,
    /// Keys that occurred twice in the run's data (kept once).
    pub duplicate_keys: u64,
    /// Applications whose status changed since the previous load.
    pub status_changes: u64,
    pub findings: Vec<String>,
}

/// What a load did; stored in the `runs` ledger.
#[derive(Clone, Debug, Serialize)]
pub struct LoadReport {
    pub run_id: String,
    pub warehouse: PathBuf,
    pub parquet_dir: PathBuf,
    pub rows: BTreeMap<String, u64>,
    pub quality: QualityReport,
    /// Milliseconds per step: `read_state`, `transform`, `stage`, `transaction`, `export`, `total`.
    pub stages_ms: BTreeMap<String, u64>,
    /// With `--lake`: what was committed there (after the actions, in `run`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lake: Option<lake::LakeReport>,
}

/// `WHERE` clause of the applications a run does not cover, which the load keeps.
fn out_of_scope(statuses: &[String], campaign_id: Option<i64>) -> Option<String> {
    warehouse::scope_filter(statuses, campaign_id).map(|f| format!("NOT ({f})"))
}

/// Adds the warehouse's applications matching `filter` that the run did not see itself.
fn add_from_warehouse(conn: &duckdb::Connection, apps: &mut Vec<Observation>, filter: &str) -> Result<(), LoadError> {
    let seen: std::collections::HashSet<i64> = apps.iter().map(|o| o.app.id).collect();
    apps.extend(warehouse::applications_where(conn, filter)?.into_iter().filter(|o| !seen.contains(&o.app.id)));
    Ok(())
}

/// Merges this run's content over the loaded content: the run wins per (metric, date).
fn merge_content(previous: Vec<ContentRow>, new: &[ContentRow]) -> Vec<ContentRow> {
    let mut by_key: BTreeMap<(crate::extract::Metric, chrono::NaiveDate), ContentRow> =
        previous.into_iter().map(|r| ((r.metric, r.date), r)).collect();
    for r in new {
        by_key.insert((r.metric, r.date), r.clone());
    }
    by_key.into_values().collect()
}

/// Checks the run's content: `last` against the loaded `current` a week earlier, and the
/// repeated totals against the sums of their windows.
fn check_quality(
    merged: &[ContentRow],
    new: &[ContentRow],
    windows: &[(chrono::NaiveDate, chrono::NaiveDate)],
) -> QualityReport {
    let mut q = QualityReport::default();
    let current: std::collections::HashMap<_, _> = merged.iter().map(|r| ((r.metric, r.date), r.current)).collect();
    for r in new {
        if let Some(c) = current.get(&(r.metric, r.last_date)) {
            if *c != r.last {
                q.last_mismatches += 1;
            }
        }
    }
    for (start, end) in windows {
        for metric in [crate::extract::Metric::Views, crate::extract::Metric::Likes] {
            let pts: Vec<&ContentRow> =
                new.iter().filter(|r| r.metric == metric && r.date >= *start && r.date <= *end).collect();
            // `check_sums` ran first, so these sums cannot overflow; saturating keeps that local.
            let (sum, last_sum): (i64, i64) =
                pts.iter().fold((0, 0), |(a, b), r| (a.saturating_add(r.current), b.saturating_add(r.last)));
            if pts.iter().any(|r| r.total != sum || r.last_total != last_sum) {
                q.total_mismatches += 1;
            }
        }
    }
    if q.last_mismatches > 0 {
        q.findings.push(format!("{} days: the API's `last` differs from the loaded `current` of seven days earlier (the service revised them)", q.last_mismatches));
    }
    if q.total_mismatches > 0 {
        q.findings.push(format!("{} windows: `total`/`last_total` are not the sums of their days", q.total_mismatches));
    }
    q
}

/// Writes every frame to the Parquet file `path(table)` names (uncompressed: DuckDB reads it
/// back at once).
pub(crate) fn stage(frames: &mut transform::Frames, path: impl Fn(&str) -> PathBuf) -> Result<(), LoadError> {
    for (name, df) in frames.tables_mut() {
        write_parquet(&path(name), df)?;
    }
    Ok(())
}

/// Writes a staged frame as an uncompressed Parquet file (read back at once), creating its
/// directory.
pub(crate) fn write_parquet(path: &Path, df: &mut polars::prelude::DataFrame) -> Result<(), LoadError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io_err("create", dir))?;
    }
    let file = std::fs::File::create(path).map_err(io_err("create", path))?;
    ParquetWriter::new(file)
        .with_compression(ParquetCompression::Uncompressed)
        .finish(df)
        .map_err(|e| LoadError::Parquet { path: path.display().to_string(), message: e.to_string() })?;
    Ok(())
}

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
    conn.execute("UPDATE runs SET parquet_exported = true WHERE run_id = ?", [run_id])
        .map_err(|e| LoadError::db("record the export", e))?;
    Ok(())
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
    let root = out.root().join("parquet");
    std::fs::create_dir_all(&root).map_err(io_err("create", &root))?;
    for (i, table) in warehouse::exported_tables().into_iter().enumerate() {
        let version = root.join(format!(".{table}-{run_id}-{}", crate::out::new_run_id()));
        let partition = matches!(table, "content_daily" | "wow_deltas");
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
            let select = format!("SELECT *{year} FROM {table}{filter} ORDER BY {key}{}", warehouse::order_by(table));
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
            warehouse::exported_tables().iter().filter_map(|t| std::fs::read_link(root.join(t)).ok()).collect();
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
        export_parquet(conn, out, &run_id, grace)?;
        conn.execute("UPDATE runs SET parquet_exported = true", [])
            .map_err(|e| LoadError::db("record the export", e))?;
    }
    Ok(())
}

/// The extract report of a raw run (`OUT/runs/<run_id>.json`), which the load checks the run's
/// landing against. A completed run always has one: a missing or unreadable report is an error,
/// never a load without the check.
pub fn extract_report(out: &OutDir, run_id: &str) -> Result<ExtractReport, LoadError> {
    if !crate::extract::runs::exists(out, run_id) {
        return Err(ExtractError::NoSuchRun(run_id.to_owned()).into());
    }
    let path = out.report_path(run_id);
    let problem = match crate::out::read_json(&path) {
        Ok(Some(report)) => return Ok(report),
        Ok(None) => "is missing".to_owned(),
        Err(crate::out::ReadJsonError::Parse(e)) => format!("is not a readable run report ({e})"),
        Err(e) => e.to_string(),
    };
    Err(LoadError::Report { run_id: run_id.to_owned(), path: path.display().to_string(), problem })
}

/// The newest raw run that finished extracting.
pub fn latest_complete_run(out: &OutDir) -> Result<String, LoadError> {
    crate::extract::latest_complete_run(out).ok_or_else(|| LoadError::NoRuns(out.raw_root().display().to_string()))
}

/// Removes what killed loads left: staging directories and half-copied snapshots. The caller
/// holds the lock, so no other load is using them.
fn clean_leftovers(out: &OutDir) {
    let staging = out.root().join(".staging");
    if staging.exists() {
        if let Err(e) = std::fs::remove_dir_all(&staging) {
            tracing::warn!(path = %staging.display(), error = %e, "cannot remove leftover staging files");
        }
    }
    warehouse::clean_publish_leftovers(out);
}

/// Loads a raw run into the warehouse and the Parquet tree. The caller holds the lock.
pub fn run(config: &LoadConfig, run_id: &str, extract_report: Option<&ExtractReport>) -> Result<LoadReport, LoadError> {
    let extracted = read_checked(&config.out, run_id, extract_report)?;
    load_extracted(config, extracted, extract_report)
}

/// Reads a raw run's landing back for a load: refused when the run did not finish extracting,
/// or when its landing holds fewer applications or days than its extract reported.
pub fn read_checked(
    out: &OutDir,
    run_id: &str,
    extract_report: Option<&ExtractReport>,
) -> Result<Extracted, LoadError> {
    let extracted = read_extracted(out, run_id)?;
    if !extracted.complete {
        return Err(LoadError::Incomplete(run_id.to_owned()));
    }
    if let Some(report) = extract_report {
        let days = extracted.content.iter().filter(|r| r.metric == crate::extract::Metric::Views).count() as u64;
        // A quick run's kept applications are in the warehouse, not in its landing.
        let kept = extracted.quick.as_ref().map_or(0, |q| q.kept().count());
        let found = [
            ("applications", (extracted.applications.len() + kept) as u64, report.applications_total),
            ("days of content", days, report.content.days),
        ];
        if let Some((what, found, reported)) = found.into_iter().find(|(_, f, r)| f < r) {
            return Err(LoadError::Shrunk { run_id: run_id.to_owned(), what, found, reported });
        }
    }
    Ok(extracted)
}

/// Milliseconds per step of a load, as the report gives them.
pub(crate) struct Laps {
    at: Instant,
    pub stages_ms: BTreeMap<String, u64>,
}

impl Laps {
    pub(crate) fn start() -> Self {
        Laps { at: Instant::now(), stages_ms: BTreeMap::new() }
    }

    /// Records the time since the last lap as `name`.
    pub(crate) fn lap(&mut self, name: &str) {
        self.stages_ms.insert(name.to_owned(), self.at.elapsed().as_millis() as u64);
        self.at = Instant::now();
    }
}

/// A run merged with the warehouse's previous state, checked and transformed: what a load
/// writes in its transaction.
pub(crate) struct Prepared {
    pub spec: crate::extract::RunSpec,
    pub frames: transform::Frames,
    pub quality: QualityReport,
}

/// Steps 1 and 2 of a load: the previous state read through `conn` (a warehouse, or one
/// organization's views of a fleet warehouse), merged with the run, checked and transformed.
/// Nothing is written.
pub(crate) fn prepare(
    conn: &duckdb::Connection,
    extracted: Extracted,
    cohort_edges: &[i64],
    laps: &mut Laps,
) -> Result<Prepared, LoadError> {
    let Extracted { spec, applications: mut apps, content, quick, .. } = extracted;
    let run_id = spec.run_id.as_str();
    let merged_content = merge_content(warehouse::content(conn)?, &content);
    if let Some(keep) = out_of_scope(&spec.statuses, spec.campaign_id) {
        add_from_warehouse(conn, &mut apps, &keep)?;
    }
    if let Some(quick) = &quick {
        // A quick run is a difference from the warehouse's state at its snapshot: it loads on
        // top of exactly that state (or again on its own).
        let latest = warehouse::latest_run(conn)?;
        if latest.as_deref() != Some(quick.base_run.as_str()) && latest.as_deref() != Some(run_id) {
            return Err(LoadError::StaleQuick {
                run_id: run_id.to_owned(),
                base: quick.base_run.clone(),
                latest: latest.unwrap_or_else(|| "none".into()),
            });
        }
        let kept: Vec<String> = quick.kept().map(|id| id.to_string()).collect();
        if !kept.is_empty() {
            add_from_warehouse(conn, &mut apps, &format!("id IN ({})", kept.join(",")))?;
        }
    }
    apps.sort_by_key(|o| o.app.id);
    laps.lap("read_state");
    transform::check_sums(&apps, &merged_content).map_err(LoadError::Quality)?;
    let windows = crate::extract::landing::windows(spec.from, spec.to, spec.window_days);
    let mut quality = check_quality(&merged_content, &content, &windows);
    quality.duplicate_keys = apps.windows(2).filter(|w| w[0].app.id == w[1].app.id).count() as u64;
    apps.dedup_by_key(|o| o.app.id);
    if quality.duplicate_keys > 0 {
        quality.findings.push(format!("{} duplicate application ids (kept once)", quality.duplicate_keys));
    }
    let frames = transform::run(&apps, &merged_content, cohort_edges)?;
    laps.lap("transform");
    Ok(Prepared { spec, frames, quality })
}

impl QualityReport {
    /// Records the applications whose status the load found changed, with a finding when any.
    pub(crate) fn set_status_changes(&mut self, changes: u64) {
        self.status_changes = changes;
        if changes > 0 {
            self.findings.push(format!("{changes} applications changed status since the previous load"));
        }
    }

    /// The findings `--strict` fails a load on (status changes are not among them).
    pub(crate) fn fails_strict(&self) -> bool {
        self.last_mismatches > 0 || self.total_mismatches > 0 || self.duplicate_keys > 0
    }
}

/// Loads extracted data (read from a landing, or built by a benchmark). It takes the data, so
/// that a million applications are not held twice.
pub fn load_extracted(
    config: &LoadConfig,
    extracted: Extracted,
    extract_report: Option<&ExtractReport>,
) -> Result<LoadReport, LoadError> {
    let started = Instant::now();
    let mut laps = Laps::start();
    let conn = warehouse::open_writer(&config.out)?;
    clean_leftovers(&config.out);
    finish_interrupted_export(&conn, &config.out, config.parquet_grace)?;
    let Prepared { spec, mut frames, mut quality } = prepare(&conn, extracted, &config.cohort_edges, &mut laps)?;
    let run_id = spec.run_id.as_str();
    let staging = config.out.root().join(".staging").join(run_id);
    stage(&mut frames, |name| staging.join(format!("{name}.parquet")))?;
    drop(frames);
    laps.lap("stage");
    let mut sql = String::from("BEGIN TRANSACTION;\n");
    sql.push_str(&warehouse::swap_in_sql(&staging));
    if let Err(e) = conn.execute_batch(&sql) {
        let _ = conn.execute_batch("ROLLBACK");
        return Err(LoadError::db("load the run's tables", e));
    }
    let result = (|| {
        quality.set_status_changes(warehouse::record_history(&conn)?);
        if config.strict && quality.fails_strict() {
            return Err(LoadError::Strict(quality.findings.join("; ")));
        }
        let rows = warehouse::row_counts(&conn)?;
        let run = RunRow {
            org: None,
            spec: &spec,
            report: extract_report,
            rows: &rows,
            quality: &quality,
            stages_ms: &laps.stages_ms,
        };
        record_runs(&conn, &[run])?;
        crate::out::crash_point("load-before-commit");
        conn.execute_batch("COMMIT;").map_err(|e| LoadError::db("commit the load", e))?;
        Ok(rows)
    })();
    let rows = match result {
        Ok(rows) => rows,
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(e);
        }
    };
    laps.lap("transaction");
    let _ = std::fs::remove_dir_all(&staging);
    let _ = staging.parent().map(std::fs::remove_dir);
    export_parquet(&conn, &config.out, run_id, config.parquet_grace)?;
    laps.lap("export");
    warehouse::publish(conn, &config.out)?;
    laps.lap("publish");
    let mut stages_ms = laps.stages_ms;
    stages_ms.insert("total".to_owned(), started.elapsed().as_millis() as u64);
    for f in &quality.findings {
        tracing::warn!(finding = %f, "data quality");
    }
    Ok(LoadReport {
        run_id: run_id.to_owned(),
        warehouse: warehouse::published_path(&config.out),
        parquet_dir: config.out.root().join("parquet"),
        rows,
        quality,
        stages_ms,
        lake: None,
    })
}

/// One run's row of the `runs` ledger, for [`record_runs`].
pub(crate) struct RunRow<'a> {
    /// The organization, in a fleet warehouse; `None` in one organization's.
    pub org: Option<&'a str>,
    pub spec: &'a crate::extract::RunSpec,
    pub report: Option<&'a ExtractReport>,
    pub rows: &'a BTreeMap<String, u64>,
    pub quality: &'a QualityReport,
    pub stages_ms: &'a BTreeMap<String, u64>,
}

/// Records runs in the `runs` ledger, with one statement (all of one warehouse kind: every row
/// with an organization, or none): DuckDB inserts many rows at once for about the cost of one.
///
/// Loading the run the warehouse holds again rebuilds the same tables: its ledger row stays as
/// the first load wrote it (when it finished, what it found, what it rests on). Loading an
/// older run replaces its row, since the warehouse then holds that run's data.
pub(crate) fn record_runs(conn: &duckdb::Connection, runs: &[RunRow]) -> Result<(), LoadError> {
    let Some(first) = runs.first() else { return Ok(()) };
    let keyed = first.org.is_some();
    let read = |e| LoadError::db("read `runs`", e);
    // The latest run of each organization (of the warehouse, in one organization's).
    let latest: BTreeMap<String, String> = if keyed {
        let orgs: Vec<String> = runs.iter().filter_map(|r| r.org.map(str::to_owned)).collect();
        let mut stmt = conn
            .prepare(&format!(
                "SELECT organization, arg_max(run_id, finished_at) FROM runs WHERE organization IN ({}) GROUP BY 1",
                warehouse::sql_list(&orgs)
            ))
            .map_err(read)?;
        // An organization whose runs all lack `finished_at` has no latest run (NULL).
        let latest: Vec<(String, Option<String>)> = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?)))
            .map_err(read)?
            .collect::<Result<_, _>>()
            .map_err(read)?;
        latest.into_iter().filter_map(|(org, run)| Some((org, run?))).collect()
    } else {
        warehouse::latest_run(conn)?.map(|run| (String::new(), run)).into_iter().collect()
    };
    let (org_column, org_param) = if keyed { ("organization, ", "?, ") } else { ("", "") };
    let row = format!(
        "({org_param}?, ?::TIMESTAMPTZ, now(), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, false, ?, ?, ?, ?, ?, \
         CASE WHEN ? = 'full' THEN now() ELSE ?::TIMESTAMPTZ END, ?)"
    );
    let mut values: Vec<Box<dyn duckdb::ToSql>> = vec![];
    let mut recorded = 0;
    for run in runs {
        let RunRow { org, spec, report, rows, quality, stages_ms } = *run;
        if latest.get(org.unwrap_or_default()).map(String::as_str) == Some(spec.run_id.as_str()) {
            continue;
        }
        let transform_ms = stages_ms.get("transform").copied().unwrap_or_default();
        let load_ms: u64 = stages_ms.iter().filter(|(k, _)| *k != "transform").map(|(_, v)| v).sum();
        let json = |v: serde_json::Value| v.to_string();
        let requests = report.map(|r| &r.requests);
        let warnings: Vec<String> = report
            .map(|r| r.warnings.clone())
            .unwrap_or_default()
            .into_iter()
            .chain(quality.findings.clone())
            .collect();
        if let Some(org) = org {
            values.push(Box::new(org.to_owned()));
        }
        recorded += 1;
        values.extend::<[Box<dyn duckdb::ToSql>; 21]>([
            Box::new(spec.run_id.clone()),
            Box::new(report.map(|r| r.started_at.to_rfc3339())),
            Box::new(report.map_or("loaded", |r| r.status.as_str()).to_owned()),
            Box::new(report.and_then(|r| r.durations_ms.get("extract").copied()).map(|v| v as i64)),
            Box::new(transform_ms as i64),
            Box::new(load_ms as i64),
            Box::new(requests.map(|m| m.requests_total as i64)),
            Box::new(requests.map(|m| m.retries as i64)),
            Box::new(requests.map(|m| m.rate_limited as i64)),
            Box::new(requests.map(|m| m.pacing_wait_ms as i64)),
            Box::new(json(serde_json::json!(rows))),
            Box::new(json(serde_json::json!(warnings))),
            Box::new(quality.status_changes as i64),
            Box::new(report.map(|r| serde_json::to_string(r).unwrap_or_default())),
            Box::new(warnings.len() as i64),
            Box::new(spec.sync.as_str().to_owned()),
            Box::new(warehouse::sync_scope(&spec.statuses, spec.campaign_id)),
            Box::new(report.map(|r| r.sync.pages_verified as i64)),
            Box::new(spec.sync.as_str().to_owned()),
            Box::new(report.and_then(|r| r.sync.last_reconcile_at).map(|t| t.to_rfc3339())),
            Box::new(report.map(|r| r.sync.counts_agree)),
        ]);
    }
    if recorded == 0 {
        return Ok(());
    }
    let params: Vec<&dyn duckdb::ToSql> = values.iter().map(|b| b.as_ref()).collect();
    conn.execute(
        &format!(
            "INSERT OR REPLACE INTO runs ({org_column}run_id, started_at, finished_at, status, extract_ms, transform_ms, load_ms, \
             requests, retries, rate_limited, pacing_wait_ms, rows_json, warnings_json, status_changes, \
             parquet_exported, report_json, warnings, sync_mode, sync_scope, pages_verified, last_reconcile_at, \
             counts_agree) VALUES {}",
            vec![row; recorded].join(", ")
        ),
        params.as_slice(),
    )
    .map_err(|e| LoadError::db("record the runs in `runs`", e))?;
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
        let table = warehouse::exported_tables()[0];
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
