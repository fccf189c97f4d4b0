//! Load: a run's tables into the DuckDB warehouse, in one transaction, then exported to Parquet
//! and published to readers. Its parts, in the order they build on each other:
//!
//! - [`catalog`]: every table and view, declared once (DDL, migrations, keys, partitions, the
//!   lists of exported, lake and fleet tables, the data dictionary);
//! - [`warehouse`]: the DuckDB files (the writer's and the readers' snapshot), their schema and
//!   migrations, and reading values back;
//! - [`prepare`]: the previous state read back, merged with the run, checked and transformed;
//! - [`commit`]: the one commit of a batch of prepared runs into a warehouse (one organization's
//!   load is a batch of one);
//! - [`parquet`]: the Parquet tree's export;
//! - [`lake`]: the shared Delta lake;
//! - [`fleet_warehouse`]: the fleet warehouse, every organization of a fleet in one DuckDB file,
//!   loaded in batches through [`commit`].
//!
//! One organization's load ([`run`]):
//! 1. the previous state is read and merged with the run, checked and transformed;
//! 2. the frames are staged as Parquet files, and in one transaction every table is rebuilt from
//!    them, the status history (SCD2) updated and the run recorded in `runs`; a crash before the
//!    commit leaves the previous warehouse as it was;
//! 3. every table is exported to `OUT/parquet/<table>/`, each switched into place atomically; an
//!    export a crash interrupted is redone by the next load;
//! 4. the warehouse is published to readers as a snapshot.
//!
//! Loading the same run twice leaves every table as it was. A run whose landing holds fewer
//! applications or days than its extract reported is refused, so a damaged landing never
//! replaces good tables.

pub mod catalog;
pub(crate) mod commit;
pub(crate) mod fingerprint;
pub mod fleet_warehouse;
pub mod lake;
pub mod parquet;
pub(crate) mod prepare;
pub mod warehouse;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use serde::Serialize;
use thiserror::Error;

use crate::extract::{read_extracted, ExtractError, ExtractReport, Extracted};
use crate::out::{OutDir, OutError};
use crate::transform::TransformError;
pub use prepare::{LoadTimings, QualityReport};

#[derive(Debug, Error)]
pub enum LoadError {
    #[error("warehouse: cannot {context}")]
    Db {
        context: String,
        #[source]
        source: duckdb::Error,
    },
    /// A value read back from the warehouse that is not of the column's type or not one of the
    /// values creator-etl writes there. The run stops before it changes anything.
    #[error("warehouse: `{table}.{column}` {problem}; nothing was loaded and the warehouse is as it was. Correct or delete that row in the writer's warehouse{}, then rerun", in_file(.warehouse))]
    Unreadable { table: String, column: String, problem: String, warehouse: Option<String> },
    #[error("the warehouse has schema version {found}, newer than this creator-etl supports ({supported}); upgrade creator-etl")]
    NewerSchema { found: i32, supported: i32 },
    #[error(
        "raw run `{0}` did not finish extracting; rerun `creator-etl extract` to complete it, or load another run"
    )]
    Incomplete(String),
    #[error("no completed raw run in `{0}`; run `creator-etl extract` or `creator-etl run` first")]
    NoRuns(String),
    #[error("cannot write `{path}`")]
    Parquet {
        path: String,
        #[source]
        source: polars::prelude::PolarsError,
    },
    #[error("cannot stage the batch's `{table}`")]
    Stage {
        table: String,
        #[source]
        source: polars::prelude::PolarsError,
    },
    #[error("warehouse: the batch's `{table}` has {duplicates} rows that repeat a key ({key}) of another (a bug): nothing of the batch is loaded")]
    DuplicateKeys { table: String, key: String, duplicates: i64 },
    /// Something creator-etl should never do (a bug): the message says what.
    #[error("warehouse: {0} (a bug)")]
    Bug(String),
    #[error("data-quality checks failed under `--strict`: {0}")]
    Strict(String),
    #[error("the warehouse `{path}` is held by another process ({holder}); close it (readers use the snapshot `{snapshot}`), then rerun")]
    Locked { path: String, holder: String, snapshot: String },
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

/// ` `PATH``, the file a message names, when it is known.
fn in_file(path: &Option<String>) -> String {
    match path {
        Some(p) => format!(" `{p}`"),
        None => String::new(),
    }
}

impl LoadError {
    /// A DuckDB error, in what the warehouse could not do.
    pub(crate) fn db(context: impl Into<String>, source: duckdb::Error) -> Self {
        LoadError::Db { context: context.into(), source }
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

/// What a load did; stored in the `runs` ledger.
#[derive(Clone, Debug, Serialize)]
pub struct LoadReport {
    pub run_id: String,
    pub warehouse: PathBuf,
    pub parquet_dir: PathBuf,
    pub rows: BTreeMap<String, u64>,
    pub quality: QualityReport,
    /// Milliseconds per step: `read_state`, `transform`, `stage`, `transaction`, `export`,
    /// `publish`, `total`.
    pub stages_ms: LoadTimings,
    /// With `--lake`: what was committed there (after the actions, in `run`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lake: Option<lake::LakeReport>,
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
    let staging = out.staging_dir();
    if staging.exists() {
        if let Err(e) = std::fs::remove_dir_all(&staging) {
            tracing::warn!(path = %staging.display(), error = %e, "cannot remove leftover staging files");
        }
    }
    warehouse::clean_publish_leftovers(out);
}

/// Loads a raw run into the warehouse and the Parquet tree. The caller holds the lock.
pub fn run(
    config: &LoadConfig,
    run_id: &str,
    extract_report: Option<&ExtractReport>,
    landed: Option<Extracted>,
) -> Result<LoadReport, LoadError> {
    let extracted = read_checked(&config.out, run_id, extract_report, landed)?;
    load_extracted(config, extracted, extract_report)
}

/// A raw run's landing for a load: `landed` when the extract that just completed it hands it
/// over from memory ([`crate::extract::Extraction::finish_landed`]), else read back. Refused
/// when the run did not finish extracting, or when its landing holds fewer applications or days
/// than its extract reported.
pub fn read_checked(
    out: &OutDir,
    run_id: &str,
    extract_report: Option<&ExtractReport>,
    landed: Option<Extracted>,
) -> Result<Extracted, LoadError> {
    let extracted = match landed {
        Some(landed) => {
            // The tests' builds read the landing back too, and check that it holds the same.
            #[cfg(debug_assertions)]
            {
                let (read, held) = (format!("{:?}", read_extracted(out, run_id)?), format!("{landed:?}"));
                let at = read.bytes().zip(held.bytes()).position(|(a, b)| a != b).unwrap_or(read.len().min(held.len()));
                let near = |s: &str| s.get(at.saturating_sub(200)..(at + 200).min(s.len())).unwrap_or("").to_owned();
                assert!(
                    read == held,
                    "run {run_id}: the landing handed over from memory differs from the one read back at byte {at}:\n read back: …{}…\n in memory: …{}…",
                    near(&read),
                    near(&held)
                );
            }
            landed
        }
        None => read_extracted(out, run_id)?,
    };
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

/// Loads extracted data (read from a landing, or built by a benchmark): a batch of one into the
/// organization's own warehouse ([`commit`]), then the Parquet export and the publish. It takes
/// the data, so that a million applications are not held twice.
pub fn load_extracted(
    config: &LoadConfig,
    extracted: Extracted,
    extract_report: Option<&ExtractReport>,
) -> Result<LoadReport, LoadError> {
    let started = Instant::now();
    let laps = crate::progress::Laps::start();
    let conn = warehouse::open_writer(&config.out)?;
    clean_leftovers(&config.out);
    parquet::finish_interrupted_export(&conn, &config.out, config.parquet_grace)?;
    let prepared = prepare::prepare(&conn, extracted, &config.cohort_edges, laps)?;
    if config.strict && prepared.quality.fails_strict() {
        return Err(LoadError::Strict(prepared.quality.findings.join("; ")));
    }
    let run_id = prepared.spec.run_id.clone();
    let mut batch = [commit::Ready {
        org: None,
        spec: prepared.spec,
        frames: Some(prepared.frames),
        quality: prepared.quality,
        report: extract_report.cloned(),
        timings: prepared.timings,
        loaded_fingerprints: None,
        open_statuses: None,
        fresh: false,
    }];
    let staging = crate::out::unique_dir(&config.out.staging_dir(), "load-")?;
    let staged = commit::stage(&[&batch[0]], catalog::Shape::One, &staging)?;
    // Staged: the frames are not held through the transaction.
    batch[0].frames = None;
    let written = commit::write(&conn, catalog::Shape::One, &[&batch[0]], &staged);
    let _ = std::fs::remove_dir_all(&staging);
    // `.staging` itself, when no other command's leftovers are in it.
    let _ = std::fs::remove_dir(config.out.staging_dir());
    let commit::Committed { quality, rows, mut timings, .. } = written?.pop().expect("a batch of one");
    let mut laps = crate::progress::Laps::start();
    parquet::export_parquet(&conn, &config.out, &run_id, config.parquet_grace)?;
    timings.export = Some(laps.lap());
    warehouse::publish(conn, &config.out)?;
    timings.publish = Some(laps.lap());
    timings.total = started.elapsed().as_millis() as u64;
    for f in &quality.findings {
        tracing::warn!(finding = %f, "data quality");
    }
    Ok(LoadReport {
        run_id,
        warehouse: config.out.warehouse(),
        parquet_dir: config.out.parquet_dir(),
        rows,
        quality,
        stages_ms: timings,
        lake: None,
    })
}

/// A load step that panicked (a bug), as an error of that member or batch alone.
pub(crate) fn panicked(what: &str, panic: Box<dyn std::any::Any + Send>) -> LoadError {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into());
    LoadError::Bug(format!("{what} panicked (see the log): {message}"))
}
