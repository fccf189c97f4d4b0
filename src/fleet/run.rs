//! `fleet run`: every selected organization concurrently, each with its own client, pacer, raw
//! landing, resume state and lock under `OUT/orgs/<name>/`, and one report for the fleet.
//!
//! Extracts mostly wait for their pacers, so they all run at once; transform, load and lake
//! commits are CPU-heavy and hold a permit of a semaphore of `--max-loads`. A fault in one
//! organization ends that organization's sync only: its error is in its row of the report.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::{watch, Semaphore};

use crate::action::{ActionConfig, Reviewed};
use crate::api::{stopped, Client, ClientConfig, Transport};
use crate::extract::ExtractConfig;
use crate::load::LoadConfig;
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

/// One organization's row of the fleet report.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OrgReport {
    pub name: String,
    pub outcome: Outcome,
    /// Why it is incomplete, or what failed.
    pub error: Option<String>,
    /// The exit code this organization's sync alone would have given (`run`'s codes).
    pub exit_code: u8,
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

/// What `fleet run` prints on stdout.
#[derive(Debug, Serialize)]
pub struct FleetReport {
    pub organizations: Vec<OrgReport>,
    /// Organizations per outcome.
    pub outcomes: BTreeMap<Outcome, usize>,
    pub duration_ms: u64,
    pub exit_code: u8,
}

impl FleetReport {
    fn new(organizations: Vec<OrgReport>, duration: Duration) -> Self {
        let mut outcomes = BTreeMap::new();
        for o in &organizations {
            *outcomes.entry(o.outcome).or_insert(0) += 1;
        }
        let exit_code = exit_code(&organizations);
        FleetReport { organizations, outcomes, duration_ms: duration.as_millis() as u64, exit_code }
    }

    /// The human summary table, for stderr.
    pub fn summary(&self) -> String {
        let mut out = format!(
            "{:<24} {:<11} {:<5} {:>9} {:>8} {:>5} {:>9} {:>9}  error\n",
            "organization", "outcome", "sync", "apps", "requests", "429s", "wait_s", "took_s"
        );
        for o in &self.organizations {
            out.push_str(&format!(
                "{:<24} {:<11} {:<5} {:>9} {:>8} {:>5} {:>9.1} {:>9.1}  {}\n",
                o.name,
                o.outcome.as_str(),
                o.sync.map_or("-", |m| m.as_str()),
                o.applications,
                o.requests,
                o.rate_limited,
                o.wait_ms as f64 / 1000.0,
                o.duration_ms as f64 / 1000.0,
                o.error.as_deref().unwrap_or("")
            ));
        }
        let counts: Vec<String> = self.outcomes.iter().map(|(k, v)| format!("{v} {}", k.as_str())).collect();
        out.push_str(&format!(
            "fleet: {} organizations: {} in {:.1} s\n",
            self.organizations.len(),
            counts.join(", "),
            self.duration_ms as f64 / 1000.0
        ));
        out
    }
}

/// 130 when interrupted; 0 when none failed (budget stops included: they resume next run);
/// when all failed, their common code (4 every key refused, 5 every `--out` locked) or 1;
/// otherwise [`SOME_FAILED`].
pub fn exit_code(orgs: &[OrgReport]) -> u8 {
    if orgs.iter().any(|o| o.outcome == Outcome::Interrupted) {
        return exit::INTERRUPTED;
    }
    let failed: Vec<&OrgReport> = orgs.iter().filter(|o| o.outcome == Outcome::Failed).collect();
    if failed.is_empty() {
        exit::OK
    } else if failed.len() < orgs.len() {
        SOME_FAILED
    } else if failed.iter().all(|o| o.exit_code == failed[0].exit_code) && failed[0].exit_code != exit::OK {
        failed[0].exit_code
    } else {
        exit::FAILED
    }
}

/// What `fleet status` and the next run read about an organization's last syncs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct OrgStatus {
    pub last_run_at: Option<DateTime<Utc>>,
    pub last_outcome: Option<Outcome>,
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

fn status_path(org_out: &Path) -> PathBuf {
    org_out.join("state").join("fleet-status.json")
}

/// An organization's status file, or the empty status when it never ran.
pub fn read_status(org_out: &Path) -> OrgStatus {
    std::fs::read(status_path(org_out)).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
}

/// Records the run in the organization's status file, and its last success in the report.
fn write_status(org_out: &Path, report: &mut OrgReport) {
    let mut st = read_status(org_out);
    st.last_run_at = Some(report.finished_at);
    st.last_outcome = Some(report.outcome);
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
    if let Err(e) = crate::out::write_json_atomic(&status_path(org_out), &st) {
        tracing::warn!(organization = %report.name, error = %e, "cannot keep the organization's fleet status");
    }
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
    if let Some(path) = &options.metrics_file {
        super::observe::write_metrics(path, &report.organizations)?;
    }
    Ok(report)
}

fn empty_report(name: String, outcome: Outcome, exit_code: u8, at: DateTime<Utc>) -> OrgReport {
    OrgReport {
        name,
        outcome,
        error: None,
        exit_code,
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
    // The organization's own stop: the process's, or its `--max-duration`.
    let (tx, rx) = watch::channel(false);
    let deadline = options.max_duration;
    let cause = tokio::spawn(async move {
        let cause = tokio::select! {
            _ = stopped(global) => StopCause::Signal,
            _ = async {
                match deadline {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending().await,
                }
            } => StopCause::Deadline,
        };
        let _ = tx.send(true);
        cause
    });
    let (client, outcome) = match Client::with_transport(job.client.clone(), transport) {
        Err(e) => (None, Err(Error::from(e))),
        Ok(client) => {
            let outcome = match job.extract.out.lock("fleet run") {
                Err(e) => Err(Error::from(e)),
                Ok(_lock) => {
                    let (load, actions) = (job.load.clone(), job.actions.clone());
                    crate::app::pipeline(&client, &job.extract, load, actions, rx, Some(loads)).await
                }
            };
            (Some(client), outcome)
        }
    };
    let stop_cause = if cause.is_finished() {
        cause.await.ok()
    } else {
        cause.abort();
        None
    };
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
    // The exit code and message of what failed or stopped, if anything did.
    let stopped = match outcome {
        Ok(run) => {
            report.run_id = Some(run.extract.run_id.clone());
            report.applications = run.extract.applications_total;
            report.sync = Some(run.extract.sync.mode);
            report.rows = run.load.rows.clone();
            // The data is loaded; a stop or a failure can only have come in the actions.
            run.actions
                .as_ref()
                .map(|a| (crate::app::actions_code(a), crate::action::summary(a)))
                .filter(|(code, _)| *code != exit::OK)
        }
        Err(e) => Some((e.exit_code(), e.report())),
    };
    if let Some((code, message)) = stopped {
        report.exit_code = code;
        report.error = Some(message);
        report.outcome = Outcome::Failed;
        if code == exit::INTERRUPTED {
            let budget = client.as_ref().is_some_and(Client::budget_spent);
            match (stop_cause, budget) {
                (Some(StopCause::Signal), _) => report.outcome = Outcome::Interrupted,
                (_, true) => {
                    report.outcome = Outcome::Incomplete;
                    report.error = Some(format!(
                        "request budget of {} spent (`--max-requests-per-org`); the next run resumes",
                        job.client.max_requests.unwrap_or_default()
                    ));
                }
                (Some(StopCause::Deadline), _) => {
                    report.outcome = Outcome::Incomplete;
                    report.error = Some(format!(
                        "time budget of {} s spent (`--max-duration`); the next run resumes",
                        options.max_duration.unwrap_or_default().as_secs_f64()
                    ));
                }
                (None, false) => {}
            }
        }
    }
    report.resumable =
        report.outcome != Outcome::Completed && crate::extract::unfinished_run(&job.extract.out).is_some();
    write_status(&org_out, &mut report);
    if let Some((sink, event)) = &lineage {
        sink.emit(&event.end(&report)).await;
    }
    report
}
