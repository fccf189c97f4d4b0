//! Steps 1 and 2 of a load: an organization's previous state read back (through its own
//! warehouse, or its views of the fleet warehouse), merged with the run, checked, and
//! transformed into the frames the commit writes. Nothing is written here.
//!
//! Content is upserted by (metric, date): the run's days replace the loaded ones. A run narrowed
//! by `--statuses` or `--campaign-id` keeps the warehouse's other applications; a quick run keeps
//! those it did not read again, and loads only on top of the run it was a difference from.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;

use super::{warehouse, LoadError};
use crate::extract::{ContentRow, Extracted, Observation};
use crate::progress::Laps;
use crate::transform;

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

/// The applications of the warehouse a load keeps (those its run did not read itself).
pub(crate) enum Keep<'a> {
    /// Those outside the run's scope (`--statuses`, `--campaign-id`).
    OutOfScope { statuses: &'a [String], campaign_id: Option<i64> },
    /// These (a quick run's kept applications).
    Ids(&'a std::collections::HashSet<i64>),
}

/// Where a load reads an organization's previous state: its warehouse (or its views of a
/// fleet warehouse), or its rows read with its batch's ([`warehouse::LoadRows`]). Both give the
/// same values.
pub(crate) trait PreviousState {
    /// The loaded content.
    fn content(&mut self) -> Result<Vec<ContentRow>, LoadError>;
    /// The run loaded last.
    fn latest_run(&mut self) -> Result<Option<String>, LoadError>;
    /// The loaded applications (with their accounts) that `keep` names, sorted by id.
    fn applications(&mut self, keep: &Keep<'_>) -> Result<Vec<Observation>, LoadError>;
}

impl PreviousState for &duckdb::Connection {
    fn content(&mut self) -> Result<Vec<ContentRow>, LoadError> {
        warehouse::content(self)
    }

    fn latest_run(&mut self) -> Result<Option<String>, LoadError> {
        warehouse::latest_run(self)
    }

    fn applications(&mut self, keep: &Keep<'_>) -> Result<Vec<Observation>, LoadError> {
        let filter = match keep {
            Keep::OutOfScope { statuses, campaign_id } => match warehouse::scope_filter(statuses, *campaign_id) {
                Some(f) => format!("NOT ({f})"),
                None => return Ok(vec![]),
            },
            Keep::Ids(ids) if ids.is_empty() => return Ok(vec![]),
            Keep::Ids(ids) => format!("id IN ({})", ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")),
        };
        warehouse::applications_where(self, &filter)
    }
}

impl PreviousState for warehouse::LoadRows {
    fn content(&mut self) -> Result<Vec<ContentRow>, LoadError> {
        Ok(self.take_content())
    }

    fn latest_run(&mut self) -> Result<Option<String>, LoadError> {
        Ok(warehouse::LoadRows::latest_run(self))
    }

    fn applications(&mut self, keep: &Keep<'_>) -> Result<Vec<Observation>, LoadError> {
        let kept = match keep {
            // `scope_filter`'s rule, negated, in Rust (`in_scope`).
            Keep::OutOfScope { statuses, campaign_id } => self.applications_if(|o| {
                !warehouse::in_scope(statuses, *campaign_id, o.app.status.as_str(), o.app.campaign_id)
            }),
            Keep::Ids(ids) => self.applications_if(|o| ids.contains(&o.app.id)),
        };
        // Never an empty list in place of rows not read: the load would drop them.
        kept.ok_or_else(|| LoadError::Bug("the organization's applications were not read with its batch's rows".into()))
    }
}

/// Whether a run of this scope keeps applications of the warehouse outside it.
pub(crate) fn keeps_out_of_scope(statuses: &[String], campaign_id: Option<i64>) -> bool {
    warehouse::scope_filter(statuses, campaign_id).is_some()
}

/// Whether [`merge`] reads loaded applications for this run: a quick run's kept ones, or
/// those outside a narrowed run's scope.
pub(crate) fn keeps_loaded_applications(extracted: &Extracted) -> bool {
    extracted.quick.as_ref().is_some_and(|q| q.kept().next().is_some())
        || keeps_out_of_scope(&extracted.spec.statuses, extracted.spec.campaign_id)
}

/// Adds the warehouse's applications that `keep` names and the run did not see itself.
fn add_from_warehouse(
    previous: &mut dyn PreviousState,
    apps: &mut Vec<Observation>,
    keep: &Keep<'_>,
) -> Result<(), LoadError> {
    let seen: std::collections::HashSet<i64> = apps.iter().map(|o| o.app.id).collect();
    apps.extend(previous.applications(keep)?.into_iter().filter(|o| !seen.contains(&o.app.id)));
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

/// Milliseconds per step of a load, as its report gives them (`stages_ms`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LoadTimings {
    /// Reading the previous state.
    pub read_state: u64,
    /// Every Polars frame.
    pub transform: u64,
    /// The frames as Parquet for DuckDB (a fleet's: its batch's).
    pub stage: u64,
    /// The transaction: the tables, the history, the ledger, the commit (a fleet's: its batch's).
    pub transaction: u64,
    /// The Parquet export (one organization's load; a fleet exports at its publish).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub export: Option<u64>,
    /// The readers' snapshot (one organization's load).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub publish: Option<u64>,
    pub total: u64,
}

impl LoadTimings {
    /// Every step's time, summed: the total.
    pub fn sum(&self) -> u64 {
        self.read_state
            + self.transform
            + self.stage
            + self.transaction
            + self.export.unwrap_or(0)
            + self.publish.unwrap_or(0)
    }
}

/// A run merged with the warehouse's previous state, checked and transformed: what a load
/// writes in its transaction.
pub(crate) struct Prepared {
    pub spec: crate::extract::RunSpec,
    pub frames: transform::Frames,
    pub quality: QualityReport,
    /// `read_state` and `transform`.
    pub timings: LoadTimings,
}

/// A run merged with the warehouse's previous state and checked: what the transform takes.
pub(crate) struct Merged {
    pub spec: crate::extract::RunSpec,
    /// The applications, sorted by id, one row each.
    apps: Vec<Observation>,
    content: Vec<ContentRow>,
    pub quality: QualityReport,
    /// `read_state`.
    pub timings: LoadTimings,
}

/// Step 1 of a load: the previous state read from `previous` (`None`: the organization has
/// nothing loaded, so nothing is read), merged with the run and checked. Nothing is written.
/// `laps` started when the load did: `read_state` is the time since, the warehouse's opening
/// (and a fleet member's views, or its share of its batch's read) included.
pub(crate) fn merge(
    mut previous: Option<&mut dyn PreviousState>,
    extracted: Extracted,
    mut laps: Laps,
) -> Result<Merged, LoadError> {
    let mut timings = LoadTimings::default();
    let Extracted { spec, applications: mut apps, content, quick, .. } = extracted;
    let run_id = spec.run_id.as_str();
    let loaded_content = match previous.as_deref_mut() {
        Some(previous) => previous.content()?,
        None => vec![],
    };
    let merged_content = merge_content(loaded_content, &content);
    if let (true, Some(previous)) = (keeps_out_of_scope(&spec.statuses, spec.campaign_id), previous.as_deref_mut()) {
        add_from_warehouse(
            previous,
            &mut apps,
            &Keep::OutOfScope { statuses: &spec.statuses, campaign_id: spec.campaign_id },
        )?;
    }
    if let Some(quick) = &quick {
        // A quick run is a difference from the warehouse's state at its snapshot: it loads on
        // top of exactly that state (or again on its own).
        let latest = match previous.as_deref_mut() {
            Some(previous) => previous.latest_run()?,
            None => None,
        };
        if latest.as_deref() != Some(quick.base_run.as_str()) && latest.as_deref() != Some(run_id) {
            return Err(LoadError::StaleQuick {
                run_id: run_id.to_owned(),
                base: quick.base_run.clone(),
                latest: latest.unwrap_or_else(|| "none".into()),
            });
        }
        let kept: std::collections::HashSet<i64> = quick.kept().collect();
        if let (false, Some(previous)) = (kept.is_empty(), previous) {
            add_from_warehouse(previous, &mut apps, &Keep::Ids(&kept))?;
        }
    }
    apps.sort_by_key(|o| o.app.id);
    timings.read_state = laps.lap();
    transform::check_sums(&apps, &merged_content).map_err(LoadError::Quality)?;
    let windows = crate::extract::landing::windows(spec.from, spec.to, spec.window_days);
    let mut quality = check_quality(&merged_content, &content, &windows);
    quality.duplicate_keys = apps.windows(2).filter(|w| w[0].app.id == w[1].app.id).count() as u64;
    apps.dedup_by_key(|o| o.app.id);
    if quality.duplicate_keys > 0 {
        quality.findings.push(format!("{} duplicate application ids (kept once)", quality.duplicate_keys));
    }
    Ok(Merged { spec, apps, content: merged_content, quality, timings })
}

/// Steps 1 and 2 of one organization's load: [`merge`], then its transform.
pub(crate) fn prepare(
    conn: &duckdb::Connection,
    extracted: Extracted,
    cohort_edges: &[i64],
    laps: Laps,
) -> Result<Prepared, LoadError> {
    let mut prepared = transform_batch(vec![merge(Some(&mut { conn }), extracted, laps)?], cohort_edges);
    prepared.pop().expect("one member in, one out")
}

/// Step 2 of a batch's load: every member's frames from one transform of the whole batch
/// ([`transform::run_batch`]), each member's transform time its share of the batch's. If the
/// batch's transform fails, each member is transformed alone, so an error is its own member's.
pub(crate) fn transform_batch(batch: Vec<Merged>, cohort_edges: &[i64]) -> Vec<Result<Prepared, LoadError>> {
    let started = Instant::now();
    let inputs: Vec<transform::Input> =
        batch.iter().map(|m| transform::Input { apps: &m.apps, content: &m.content }).collect();
    // A panic is a bug of some member's data or of the transform: each member is then
    // transformed alone, and one that panics again fails alone.
    let caught = |what: &str, work: &mut dyn FnMut() -> Result<Vec<transform::Frames>, transform::TransformError>| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
            .unwrap_or_else(|panic| Err(transform::TransformError::Panicked(super::panicked(what, panic).to_string())))
    };
    let together = match batch.len() > 1 {
        true => match caught("transform the batch", &mut || transform::run_batch(&inputs, cohort_edges)) {
            Ok(frames) => Some(frames),
            Err(e) => {
                tracing::warn!(members = batch.len(), error = %e, "the batch's transform failed; transforming its members one by one");
                None
            }
        },
        false => None,
    };
    drop(inputs);
    match together {
        Some(frames) => {
            let share = started.elapsed().as_millis() as u64 / batch.len().max(1) as u64;
            batch
                .into_iter()
                .zip(frames)
                .map(|(m, frames)| {
                    let timings = LoadTimings { transform: share, ..m.timings };
                    Ok(Prepared { spec: m.spec, frames, quality: m.quality, timings })
                })
                .collect()
        }
        None => batch
            .into_iter()
            .map(|m| {
                let started = Instant::now();
                let input = transform::Input { apps: &m.apps, content: &m.content };
                let frames = caught("transform the organization's frames", &mut || {
                    transform::run_batch(&[input], cohort_edges)
                })?
                .pop()
                .expect("one member in, one out");
                let timings = LoadTimings { transform: started.elapsed().as_millis() as u64, ..m.timings };
                Ok(Prepared { spec: m.spec, frames, quality: m.quality, timings })
            })
            .collect(),
    }
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
