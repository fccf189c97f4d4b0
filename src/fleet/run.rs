//! `fleet run`: every selected organization concurrently, each with its own client, pacer, raw
//! landing, resume state and lock under `OUT/orgs/<name>/`, and one report for the fleet.
//!
//! Extracts mostly wait for their pacers, so they all run at once; transform, load and lake
//! commits are CPU-heavy and hold a permit of a semaphore of `--max-loads`. A fault in one
//! organization ends that organization's sync only: its error is in its row of the report.
//!
//! Each organization's row has two outcomes: its sync (extract, load, lake commit), which alone
//! decides `last_success_at`, and its actions stage when it has an actions file. Fresh data whose
//! corrections were held or stopped is a completed sync with an actions outcome that says so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::sync::{watch, Semaphore};

use crate::action::{ActionConfig, ActionError, ActionReport, Reviewed};
use crate::api::{stopped, ApiError, Client, ClientConfig, Transport};
use crate::extract::{ExtractConfig, ExtractError};
use crate::load::{LoadConfig, LoadError};
use crate::out::OutError;
use crate::{exit, Error};

use super::observe::{Lineage, LineageEvent};

/// Exit code of a fleet run in which some organizations failed and others completed.
pub const SOME_FAILED: u8 = 6;

/// One organization's sync, validated before anything is sent.
#[derive(Clone, Debug)]
pub struct Job {
    pub name: String,
    /// With the run's `--max-requests-per-org` as its `max_requests`.
    pub client: ClientConfig,
    pub extract: ExtractConfig,
    pub load: LoadConfig,
    pub actions: Option<(ActionConfig, Reviewed)>,
}

/// What the whole fleet run was asked for.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// At most this many transforms, loads and lake commits at once.
    pub max_loads: usize,
    /// Per organization: at most this long, then it stops and resumes next time.
    pub max_duration: Option<Duration>,
    pub metrics_file: Option<PathBuf>,
    /// The organizations whose series the metrics file keeps from earlier runs when this run
    /// does not sync them (`--only`): the fleet file's organizations in this `--shard`, all of
    /// them without one. Series of other organizations are dropped.
    pub metrics_scope: Vec<String>,
    pub lineage: Option<Lineage>,
}

/// How an organization's sync ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Completed,
    /// Stopped by its budget (`--max-requests-per-org`, `--max-duration`); resumes next run.
    Incomplete,
    Failed,
    /// Stopped by Ctrl-C or SIGTERM; resumes next run.
    Interrupted,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Incomplete => "incomplete",
            Outcome::Failed => "failed",
            Outcome::Interrupted => "interrupted",
        }
    }
}

/// How an organization's actions stage ended (after a sync that loaded its data).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionsOutcome {
    /// Every approved row was applied, a no-op, or applied before.
    Completed,
    /// Some approved rows did not succeed (`failed`, `failed_transient`, `in_doubt`,
    /// `not_sent`): `run`'s exit 3. The rows need attention, or go out again on the next run.
    Held,
    /// Stopped by the organization's budget; the rows not sent go out on the next run.
    Incomplete,
    /// Stopped by Ctrl-C or SIGTERM; the rows not sent go out on the next run.
    Interrupted,
    /// The key was refused on a write (401/403): `run`'s exit 4.
    Failed,
}

impl ActionsOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ActionsOutcome::Completed => "completed",
            ActionsOutcome::Held => "held",
            ActionsOutcome::Incomplete => "incomplete",
            ActionsOutcome::Interrupted => "interrupted",
            ActionsOutcome::Failed => "failed",
        }
    }
}

/// One organization's row of the fleet report.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OrgReport {
    pub name: String,
    /// How its sync (extract, load, lake commit) ended.
    pub outcome: Outcome,
    /// Why the sync is incomplete, or what failed.
    pub error: Option<String>,
    /// The exit code this organization's run alone would have given (`run`'s codes): its sync's
    /// when that did not complete, else its actions stage's.
    pub exit_code: u8,
    /// How its actions stage ended; `None` without an actions file, or when its sync did not
    /// get to them.
    #[serde(default)]
    pub actions: Option<ActionsOutcome>,
    /// The exit code of its actions stage alone (`run`'s: 0, 3, 4 or 130).
    #[serde(default)]
    pub actions_exit_code: Option<u8>,
    /// Why its actions did not all succeed: the rows that need attention, or what stopped them.
    #[serde(default)]
    pub actions_error: Option<String>,
    /// Rows of its reviewed file per outcome (`applied`, `in_doubt`, …).
    #[serde(default)]
    pub actions_rows: BTreeMap<crate::action::Outcome, u64>,
    pub run_id: Option<String>,
    /// Applications in scope (completed syncs), a quick sync's kept ones included.
    pub applications: u64,
    /// `quick` or `full` (completed syncs; see `--sync`).
    pub sync: Option<crate::extract::SyncMode>,
    /// Rows loaded per table (completed syncs).
    pub rows: BTreeMap<String, u64>,
    pub requests: u64,
    pub rate_limited: u64,
    pub retries: u64,
    /// Time spent waiting for the pacer and in retry backoff.
    pub wait_ms: u64,
    pub duration_ms: u64,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// An unfinished extract is saved and the next run resumes it.
    pub resumable: bool,
    /// Its last completed sync, this run's or an earlier one's.
    pub last_success_at: Option<DateTime<Utc>>,
}

impl OrgReport {
    /// Approved rows of its actions stage that did not succeed.
    pub fn actions_held_rows(&self) -> u64 {
        self.actions_rows.iter().filter(|(o, _)| o.is_failure()).map(|(_, n)| n).sum()
    }
}

/// What `fleet run` prints on stdout.
#[derive(Debug, Serialize)]
pub struct FleetReport {
    pub organizations: Vec<OrgReport>,
    /// Organizations per sync outcome.
    pub outcomes: BTreeMap<Outcome, usize>,
    /// Organizations per actions outcome (those with an actions stage).
    pub actions_outcomes: BTreeMap<ActionsOutcome, usize>,
    pub duration_ms: u64,
    pub exit_code: u8,
}

impl FleetReport {
    fn new(organizations: Vec<OrgReport>, duration: Duration) -> Self {
        let mut outcomes = BTreeMap::new();
        let mut actions_outcomes = BTreeMap::new();
        for o in &organizations {
            *outcomes.entry(o.outcome).or_insert(0) += 1;
            if let Some(a) = o.actions {
                *actions_outcomes.entry(a).or_insert(0) += 1;
            }
        }
        let exit_code = exit_code(&organizations);
        FleetReport { organizations, outcomes, actions_outcomes, duration_ms: duration.as_millis() as u64, exit_code }
    }

    /// The human summary table, for stderr.
    pub fn summary(&self) -> String {
        let mut out = format!(
            "{:<24} {:<11} {:<11} {:<5} {:>9} {:>8} {:>5} {:>9} {:>9}  error\n",
            "organization", "outcome", "actions", "sync", "apps", "requests", "429s", "wait_s", "took_s"
        );
        for o in &self.organizations {
            // The sync's error, else the first line of the actions' (their summary).
            let error = o.error.clone().or_else(|| {
                o.actions_error.as_deref().map(|e| format!("actions: {}", e.lines().next().unwrap_or_default()))
            });
            out.push_str(&format!(
                "{:<24} {:<11} {:<11} {:<5} {:>9} {:>8} {:>5} {:>9.1} {:>9.1}  {}\n",
                o.name,
                o.outcome.as_str(),
                o.actions.map_or("-", ActionsOutcome::as_str),
                o.sync.map_or("-", |m| m.as_str()),
                o.applications,
                o.requests,
                o.rate_limited,
                o.wait_ms as f64 / 1000.0,
                o.duration_ms as f64 / 1000.0,
                error.unwrap_or_default()
            ));
        }
        let counts: Vec<String> = self.outcomes.iter().map(|(k, v)| format!("{v} {}", k.as_str())).collect();
        let actions: Vec<String> = self.actions_outcomes.iter().map(|(k, v)| format!("{v} {}", k.as_str())).collect();
        let actions = if actions.is_empty() { String::new() } else { format!("; actions: {}", actions.join(", ")) };
        out.push_str(&format!(
            "fleet: {} organizations: {}{actions} in {:.1} s\n",
            self.organizations.len(),
            counts.join(", "),
            self.duration_ms as f64 / 1000.0
        ));
        out
    }
}

/// The fleet's exit code:
/// - 130 when Ctrl-C or SIGTERM stopped any organization, in its sync or its actions;
/// - when no sync failed: 3 when some organization's actions did not all succeed (rows held, a
///   key refused on writes), else 0 (budget stops resume, and count as neither);
/// - [`SOME_FAILED`] when some syncs failed and others did not;
/// - when every sync failed: 4 when every key was refused, 5 when every `--out` or warehouse
///   was held by another process, else 1.
pub fn exit_code(orgs: &[OrgReport]) -> u8 {
    let interrupted =
        |o: &&OrgReport| o.outcome == Outcome::Interrupted || o.actions == Some(ActionsOutcome::Interrupted);
    if orgs.iter().any(|o| interrupted(&o)) {
        return exit::INTERRUPTED;
    }
    let failed: Vec<&OrgReport> = orgs.iter().filter(|o| o.outcome == Outcome::Failed).collect();
    if failed.is_empty() {
        let held = orgs.iter().any(|o| matches!(o.actions, Some(ActionsOutcome::Held | ActionsOutcome::Failed)));
        return if held { exit::ACTIONS_FAILED } else { exit::OK };
    }
    if failed.len() < orgs.len() {
        return SOME_FAILED;
    }
    let common = failed[0].exit_code;
    if [exit::AUTH, exit::LOCKED].contains(&common) && failed.iter().all(|o| o.exit_code == common) {
        common
    } else {
        exit::FAILED
    }
}

/// What `fleet status` and the next run read about an organization's last syncs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct OrgStatus {
    pub last_run_at: Option<DateTime<Utc>>,
    pub last_outcome: Option<Outcome>,
    /// How the last run's actions stage ended, when it had one.
    #[serde(default)]
    pub last_actions: Option<ActionsOutcome>,
    pub last_success_at: Option<DateTime<Utc>>,
    pub last_success_run_id: Option<String>,
    pub last_error: Option<String>,
    pub last_error_at: Option<DateTime<Utc>>,
    /// The last run's report row.
    pub last_run: Option<OrgReport>,
}

/// An organization's directory under the fleet's `--out`.
pub fn org_dir(out: &Path, name: &str) -> PathBuf {
    out.join("orgs").join(name)
}

/// The organization's status file, `OUT/orgs/<name>/state/fleet-status.json`.
pub fn status_path(org_out: &Path) -> PathBuf {
    org_out.join("state").join("fleet-status.json")
}

/// An organization's status file: the empty status when it never ran. When the file cannot be
/// read, or is not a status as a whole (a torn write, an edit, a field this release does not
/// know), what can be read of it field by field, and why the rest could not.
pub fn read_status(org_out: &Path) -> (OrgStatus, Option<String>) {
    let path = status_path(org_out);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (OrgStatus::default(), None),
        Err(e) => return (OrgStatus::default(), Some(format!("cannot read `{}`: {e}", path.display()))),
    };
    match serde_json::from_slice::<OrgStatus>(&bytes) {
        Ok(st) => (st, None),
        Err(e) => (salvage(&bytes), Some(format!("`{}` is not a valid fleet status: {e}", path.display()))),
    }
}

/// The fields of a damaged status file that still read on their own.
fn salvage(bytes: &[u8]) -> OrgStatus {
    let Ok(serde_json::Value::Object(map)) = serde_json::from_slice(bytes) else { return OrgStatus::default() };
    fn field<T: DeserializeOwned>(map: &serde_json::Map<String, serde_json::Value>, name: &str) -> Option<T> {
        map.get(name).cloned().and_then(|v| serde_json::from_value(v).ok())
    }
    OrgStatus {
        last_run_at: field(&map, "last_run_at"),
        last_outcome: field(&map, "last_outcome"),
        last_actions: field(&map, "last_actions"),
        last_success_at: field(&map, "last_success_at"),
        last_success_run_id: field(&map, "last_success_run_id"),
        last_error: field(&map, "last_error"),
        last_error_at: field(&map, "last_error_at"),
        last_run: field(&map, "last_run"),
    }
}

/// Records the run in the organization's status file, and its last success in the report. The
/// caller holds the organization's lock. A status file that cannot be read is never overwritten
/// silently: it is kept aside (`fleet-status.json.corrupt-<time>`), with a warning, and what
/// could be read of it is carried over; if it cannot be kept aside, it is left as it is.
fn write_status(org_out: &Path, report: &mut OrgReport) {
    let path = status_path(org_out);
    let (mut st, problem) = read_status(org_out);
    if let Some(problem) = problem {
        let aside =
            path.with_file_name(format!("fleet-status.json.corrupt-{}", Utc::now().format("%Y%m%dT%H%M%S%.3fZ")));
        if let Err(e) = std::fs::rename(&path, &aside) {
            tracing::warn!(organization = %report.name, %problem, error = %e, "the organization's fleet status cannot be read, nor kept aside; it is left as it is, and this run is not recorded in it");
            report.last_success_at = st.last_success_at.max(success_of(report));
            return;
        }
        tracing::warn!(
            organization = %report.name,
            %problem,
            kept_aside = %aside.display(),
            last_success_at = ?st.last_success_at,
            "the organization's fleet status cannot be read; it is kept aside, and what could be read of it carries over"
        );
    }
    st.last_run_at = Some(report.finished_at);
    st.last_outcome = Some(report.outcome);
    st.last_actions = report.actions;
    match report.outcome {
        Outcome::Completed => {
            st.last_success_at = Some(report.finished_at);
            st.last_success_run_id.clone_from(&report.run_id);
        }
        _ => {
            st.last_error.clone_from(&report.error);
            st.last_error_at = Some(report.finished_at);
        }
    }
    report.last_success_at = st.last_success_at;
    st.last_run = Some(report.clone());
    if let Err(e) = crate::out::write_json_atomic(&path, &st) {
        tracing::warn!(organization = %report.name, error = %e, "cannot keep the organization's fleet status");
    }
}

/// This run's success time, when its sync completed.
fn success_of(report: &OrgReport) -> Option<DateTime<Utc>> {
    (report.outcome == Outcome::Completed).then_some(report.finished_at)
}

/// Runs every job concurrently; `stop` is the process's Ctrl-C/SIGTERM flag.
pub async fn run(jobs: Vec<Job>, options: &RunOptions, stop: watch::Receiver<bool>) -> Result<FleetReport, Error> {
    let started = Instant::now();
    // Every organization's client has the command line's timeouts: the shared transport takes
    // them from the first.
    let transport = match jobs.first() {
        Some(job) => Transport::new(job.client.connect_timeout, job.client.request_timeout)?,
        None => return Ok(FleetReport::new(vec![], started.elapsed())),
    };
    let loads = Arc::new(Semaphore::new(options.max_loads.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    let names: Vec<String> = jobs.iter().map(|j| j.name.clone()).collect();
    for (i, job) in jobs.into_iter().enumerate() {
        let (transport, loads, stop, options) = (transport.clone(), loads.clone(), stop.clone(), options.clone());
        tasks.spawn(async move { (i, run_org(job, &transport, &loads, stop, &options).await) });
    }
    let mut reports: Vec<Option<OrgReport>> = vec![None; names.len()];
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok((i, report)) => reports[i] = Some(report),
            Err(e) => tracing::error!(error = %e, "an organization's task failed"),
        }
    }
    let now = Utc::now();
    let reports: Vec<OrgReport> = reports
        .into_iter()
        .zip(names)
        .map(|(r, name)| {
            r.unwrap_or_else(|| OrgReport {
                error: Some("its task ended without a report (a bug): see the log".into()),
                ..empty_report(name, Outcome::Failed, exit::FAILED, now)
            })
        })
        .collect();
    let report = FleetReport::new(reports, started.elapsed());
    // The report is the run's record: a metrics file that cannot be written costs the metrics,
    // not the report.
    if let Some(path) = &options.metrics_file {
        if let Err(e) = super::observe::write_metrics(path, &report.organizations, &options.metrics_scope) {
            tracing::warn!(path = %path.display(), error = %e.report(), "cannot write the metrics file; the fleet report follows");
        }
    }
    Ok(report)
}

fn empty_report(name: String, outcome: Outcome, exit_code: u8, at: DateTime<Utc>) -> OrgReport {
    OrgReport {
        name,
        outcome,
        error: None,
        exit_code,
        actions: None,
        actions_exit_code: None,
        actions_error: None,
        actions_rows: BTreeMap::new(),
        run_id: None,
        applications: 0,
        sync: None,
        rows: BTreeMap::new(),
        requests: 0,
        rate_limited: 0,
        retries: 0,
        wait_ms: 0,
        duration_ms: 0,
        started_at: at,
        finished_at: at,
        resumable: false,
        last_success_at: None,
    }
}

/// Why an organization's own stop was raised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StopCause {
    Signal,
    Deadline,
}

/// What stopped a stage that ended with exit 130.
enum Stop {
    /// Ctrl-C or SIGTERM.
    Signal,
    /// The organization's request or time budget: the message says which.
    Budget(String),
    /// Nothing this run recorded.
    Unknown,
}

/// What stopped a stage: the organization's stop cause, and the request budget of `max` requests
/// when the stage ended on it.
fn stop_of(cause: Option<StopCause>, budget: Option<u64>, options: &RunOptions, next: &str) -> Stop {
    match (cause, budget) {
        (Some(StopCause::Signal), _) => Stop::Signal,
        (_, Some(max)) => Stop::Budget(format!("request budget of {max} spent (`--max-requests-per-org`); {next}")),
        (Some(StopCause::Deadline), None) => Stop::Budget(format!(
            "time budget of {} s spent (`--max-duration`); {next}",
            options.max_duration.unwrap_or_default().as_secs_f64()
        )),
        (None, None) => Stop::Unknown,
    }
}

/// The request budget an error says was spent, if it says so.
fn spent_budget(e: &Error) -> Option<u64> {
    match e {
        Error::Extract(ExtractError::BudgetSpent { max }) | Error::Api(ApiError::BudgetSpent { max, .. }) => Some(*max),
        _ => None,
    }
}

/// What the report, the status file and the lineage events say of a failure. A lock held by
/// another process is named by its pid only: the holder's description (for the warehouse file,
/// its command line, which may carry anything) stays on the terminal of a command that meets it.
fn recorded(e: &Error) -> String {
    let pid = |holder: &str| crate::out::holder_pid(holder).map_or("pid unknown".to_owned(), |p| format!("pid {p}"));
    match e {
        Error::Out(OutError::Locked { out, holder })
        | Error::Extract(ExtractError::Out(OutError::Locked { out, holder }))
        | Error::Action(ActionError::Out(OutError::Locked { out, holder })) => format!(
            "another run holds the lock on `{out}` ({}); wait for it to finish, or check that it is still running",
            pid(holder)
        ),
        Error::Load(LoadError::Locked { path, holder })
        | Error::Action(ActionError::Warehouse(LoadError::Locked { path, holder })) => format!(
            "the warehouse `{path}` is held by another process ({}); close it (readers use the snapshot `warehouse.duckdb`), then rerun",
            pid(holder)
        ),
        e if e.exit_code() == exit::LOCKED => {
            format!("another process holds this organization's files ({})", pid(&e.report()))
        }
        e => e.report(),
    }
}

/// Records an actions stage's end in the organization's row.
fn record_actions(report: &mut OrgReport, actions: &ActionReport, stop: impl FnOnce() -> Stop) {
    let code = crate::app::actions_code(actions);
    report.actions_exit_code = Some(code);
    report.actions_rows = actions.outcomes.clone();
    let summary = crate::action::summary(actions);
    let (outcome, error) = match code {
        exit::OK => (ActionsOutcome::Completed, None),
        exit::AUTH => (ActionsOutcome::Failed, Some(summary)),
        exit::INTERRUPTED => match stop() {
            Stop::Signal => (ActionsOutcome::Interrupted, Some(summary)),
            Stop::Budget(why) => (ActionsOutcome::Incomplete, Some(format!("{why}\n{summary}"))),
            Stop::Unknown => (ActionsOutcome::Incomplete, Some(summary)),
        },
        _ => (ActionsOutcome::Held, Some(summary)),
    };
    report.actions = Some(outcome);
    report.actions_error = error;
    report.exit_code = code;
}

async fn run_org(
    job: Job,
    transport: &Transport,
    loads: &Semaphore,
    global: watch::Receiver<bool>,
    options: &RunOptions,
) -> OrgReport {
    let started = Instant::now();
    let started_at = Utc::now();
    let org_out = job.extract.out.root().to_path_buf();
    let lineage = options.lineage.as_ref().map(|sink| (sink, LineageEvent::new(&job)));
    if let Some((sink, event)) = &lineage {
        sink.emit(&event.start(started_at)).await;
    }
    // The organization's own stop: the process's, or its `--max-duration`. Its cause is set
    // before the stop is raised, so whoever sees the stop can read why.
    let (tx, rx) = watch::channel(false);
    let deadline = options.max_duration;
    let cause = Arc::new(OnceLock::new());
    let cause_task = {
        let cause = cause.clone();
        tokio::spawn(async move {
            let why = tokio::select! {
                _ = stopped(global) => StopCause::Signal,
                _ = async {
                    match deadline {
                        Some(d) => tokio::time::sleep(d).await,
                        None => std::future::pending().await,
                    }
                } => StopCause::Deadline,
            };
            let _ = cause.set(why);
            let _ = tx.send(true);
        })
    };
    // The status file is written under the organization's lock; a run that cannot take it
    // records nothing there (the holder's run will).
    let (lock, client, outcome) = match job.extract.out.lock("fleet run") {
        Err(e) => (None, None, Err(Error::from(e))),
        Ok(lock) => match Client::with_transport(job.client.clone(), transport) {
            Err(e) => (Some(lock), None, Err(Error::from(e))),
            Ok(client) => {
                // A stop ends the waits for the pacer and starts no request; the pipeline sees it
                // once the requests in flight have answered and landed.
                let client = client.with_stop(rx.clone());
                let stop = client.stop_after_in_flight(rx);
                let (load, actions) = (job.load.clone(), job.actions.clone());
                let outcome = crate::app::pipeline(&client, &job.extract, load, actions, stop, Some(loads)).await;
                (Some(lock), Some(client), outcome)
            }
        },
    };
    cause_task.abort();
    let stop_cause = cause.get().copied();
    let mut report = empty_report(job.name.clone(), Outcome::Completed, exit::OK, started_at);
    report.finished_at = Utc::now();
    report.duration_ms = started.elapsed().as_millis() as u64;
    if let Some(client) = &client {
        let m = client.metrics();
        report.requests = m.requests_total;
        report.rate_limited = m.rate_limited;
        report.retries = m.retries;
        report.wait_ms = m.pacing_wait_ms + m.backoff_wait_ms;
    }
    match outcome {
        Ok(run) => {
            // The data is loaded and committed: the sync completed, whatever its actions did.
            report.run_id = Some(run.extract.run_id.clone());
            report.applications = run.extract.applications_total;
            report.sync = Some(run.extract.sync.mode);
            report.rows = run.load.rows.clone();
            if let Some(actions) = &run.actions {
                let next = "the rows not sent go out on the next run";
                record_actions(&mut report, actions, || stop_of(stop_cause, actions.stopped_by_budget, options, next));
            }
        }
        Err(e) => {
            let code = e.exit_code();
            report.exit_code = code;
            report.error = Some(recorded(&e));
            report.outcome = Outcome::Failed;
            if code == exit::INTERRUPTED {
                match stop_of(stop_cause, spent_budget(&e), options, "the next run resumes") {
                    Stop::Signal => report.outcome = Outcome::Interrupted,
                    Stop::Budget(why) => {
                        report.outcome = Outcome::Incomplete;
                        report.error = Some(why);
                    }
                    Stop::Unknown => {}
                }
            }
        }
    }
    report.resumable =
        report.outcome != Outcome::Completed && crate::extract::unfinished_run(&job.extract.out).is_some();
    match &lock {
        Some(_) => write_status(&org_out, &mut report),
        None => report.last_success_at = read_status(&org_out).0.last_success_at,
    }
    drop(lock);
    if let Some((sink, event)) = &lineage {
        sink.emit(&event.end(&report)).await;
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn org(outcome: Outcome, exit_code: u8, actions: Option<ActionsOutcome>) -> OrgReport {
        OrgReport { actions, ..empty_report("o".into(), outcome, exit_code, Utc::now()) }
    }

    #[test]
    fn the_fleet_exit_code() {
        use ActionsOutcome as A;
        use Outcome::*;
        let cases: [(Vec<OrgReport>, u8); 11] = [
            (vec![org(Completed, 0, None), org(Incomplete, 130, None)], 0),
            (vec![org(Completed, 0, Some(A::Completed)), org(Completed, 130, Some(A::Incomplete))], 0),
            (vec![org(Completed, 3, Some(A::Held)), org(Completed, 0, None)], 3),
            (vec![org(Completed, 4, Some(A::Failed))], 3),
            (vec![org(Completed, 3, Some(A::Held)), org(Failed, 1, None)], SOME_FAILED),
            (vec![org(Failed, 1, None), org(Incomplete, 130, None)], SOME_FAILED),
            (vec![org(Completed, 130, Some(A::Interrupted)), org(Failed, 4, None)], 130),
            (vec![org(Failed, 4, None), org(Failed, 4, None)], 4),
            (vec![org(Failed, 5, None), org(Failed, 5, None)], 5),
            (vec![org(Failed, 4, None), org(Failed, 5, None)], 1),
            // A common code other than 4 or 5 is no claim about the whole fleet: 1.
            (vec![org(Failed, 2, None), org(Failed, 2, None)], 1),
        ];
        for (i, (orgs, want)) in cases.iter().enumerate() {
            assert_eq!(exit_code(orgs), *want, "case {i}");
        }
    }

    #[test]
    fn a_damaged_status_gives_what_it_can() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_status(dir.path()).1.is_none(), "no file: the empty status");
        let path = status_path(dir.path());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(
            &path,
            r#"{"last_outcome": "exploded", "last_success_at": "2026-01-02T03:04:05Z", "last_error": 7}"#,
        )
        .unwrap();
        let (st, problem) = read_status(dir.path());
        assert!(problem.unwrap().contains("fleet-status.json"));
        assert_eq!(st.last_success_at.unwrap().to_rfc3339(), "2026-01-02T03:04:05+00:00");
        assert!(st.last_outcome.is_none() && st.last_error.is_none());
        std::fs::write(&path, "{\"last_success_at\": \"2026-01-0").unwrap();
        let (st, problem) = read_status(dir.path());
        assert!(problem.is_some() && st.last_success_at.is_none());
    }
}
