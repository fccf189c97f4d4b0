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

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use chrono::Utc;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::action::ActionReport;
use crate::api::{ApiError, Client, Transport};
use crate::extract::ExtractError;
use crate::out::OutDir;
use crate::sync::{Sharing, StageLog};
use crate::{exit, Error};

use super::batch::{BatchOptions, Batcher, OrgWarehouse};
use super::job::Job;
use super::observe::{Lineage, LineageEvent};
use super::report::{ActionsOutcome, FleetReport, OrgReport, SyncOutcome};
use super::status::{read_status, write_status};

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
    /// The fleet's `--out`.
    pub out: PathBuf,
    /// Load into one fleet warehouse under `out`, in these batches; `None`: each organization
    /// into its own warehouse (`--warehouse per-org`).
    pub batches: Option<BatchOptions>,
}

/// Runs every job concurrently; `stop` is the process's Ctrl-C/SIGTERM flag.
pub async fn run(jobs: Vec<Job>, options: &RunOptions, stop: CancellationToken) -> Result<FleetReport, Error> {
    let started = Instant::now();
    // Every organization's client has the command line's timeouts: the shared transport takes
    // them from the first.
    let transport = match jobs.first() {
        Some(job) => Transport::new(job.client.connect_timeout, job.client.request_timeout)?,
        None => return Ok(FleetReport::new(vec![], started.elapsed())),
    };
    let loads = Arc::new(Semaphore::new(options.max_loads.max(1)));
    let names: Vec<String> = jobs.iter().map(|j| j.name.clone()).collect();
    // The fleet warehouse: the fleet's `--out` is locked for the run (its organizations' own
    // directories each have their own lock, as ever), and one thread writes it.
    let fleet = match &options.batches {
        Some(batches) => {
            let out = OutDir::new(&options.out);
            let lock = out.lock("fleet run")?;
            let batches = batches.clone();
            let names = names.clone();
            let batcher =
                crate::sync::blocking("fleet warehouse", move || Batcher::start(&out, batches, names)).await?;
            Some((lock, batcher))
        }
        None => None,
    };
    let mut tasks = tokio::task::JoinSet::new();
    let in_flight = in_flight_limit(jobs.len());
    if in_flight < jobs.len() {
        tracing::info!(
            organizations = jobs.len(),
            in_flight,
            "the process's open-file limit allows this many organizations in flight at once; the others wait for a slot"
        );
    }
    let slots = Arc::new(Semaphore::new(in_flight));
    // Shared, not copied per organization: the options hold the list of every organization
    // (`metrics_scope`), and a copy each made the fleet's memory grow with the square of its
    // size (about 3 GB of the 6 GB at 10,000 organizations, from a heap profile).
    let options = Arc::new(options.clone());
    for (i, job) in jobs.into_iter().enumerate() {
        let (transport, loads, stop, options) = (transport.clone(), loads.clone(), stop.clone(), options.clone());
        let shared = fleet.as_ref().map(|(_, b)| {
            b.handle(&job.name, &job.sync.load.out, job.sync.load.lake.clone(), job.sync.actions.is_some())
        });
        let slots = slots.clone();
        tasks.spawn(async move {
            let _slot = slots.acquire_owned().await;
            (i, run_org(job, &transport, &loads, shared, stop, &options).await)
        });
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
                ..OrgReport::empty(name, SyncOutcome::Failed, exit::FAILED, now)
            })
        })
        .collect();
    let mut report = FleetReport::new(reports, started.elapsed());
    if let Some((lock, batcher)) = fleet {
        // The last batch and the last publish.
        let finished = crate::sync::blocking("fleet warehouse", move || batcher.finish()).await;
        drop(lock);
        if let Err(e) = finished {
            tracing::error!(error = %e.report(), "the fleet warehouse's last publish failed; the loaded data is in the writer's file and the next run publishes it");
            report.set_warehouse_error(e.report());
        }
    }
    // The report is the run's record: a metrics file that cannot be written costs the metrics,
    // not the report.
    if let Some(path) = &options.metrics_file {
        if let Err(e) = super::observe::write_metrics(path, &report.organizations, &options.metrics_scope) {
            tracing::warn!(path = %path.display(), error = %e.report(), "cannot write the metrics file; the fleet report follows");
        }
    }
    Ok(report)
}

/// Open files the process keeps for itself (the fleet warehouse, its export, logs).
const RESERVED_FILES: usize = 256;
/// Open files an organization in flight can hold at once: its lock, its landing segment while it
/// extracts, a connection while a request is in flight, and a state file being replaced.
const FILES_PER_ORGANIZATION: usize = 4;

/// How many organizations may be in flight at once: all of them, unless the process's
/// open-file limit (its soft limit, from `/proc/self/limits`) is too low for them all, when
/// the others wait for a slot instead of failing with "Too many open files". At least 16.
fn in_flight_limit(organizations: usize) -> usize {
    let soft = std::fs::read_to_string("/proc/self/limits").ok().and_then(|text| {
        let line = text.lines().find(|l| l.starts_with("Max open files"))?;
        line.split_whitespace().nth(3)?.parse::<usize>().ok()
    });
    match soft {
        Some(limit) => {
            (limit.saturating_sub(RESERVED_FILES) / FILES_PER_ORGANIZATION).max(16).min(organizations.max(1))
        }
        None => organizations.max(1),
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

/// Records an actions stage's end in the organization's row.
fn record_actions(report: &mut OrgReport, actions: &ActionReport, stop: impl FnOnce() -> Stop) {
    let code = crate::sync::actions_code(actions);
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
    shared: Option<OrgWarehouse>,
    global: CancellationToken,
    options: &RunOptions,
) -> OrgReport {
    let started = Instant::now();
    let started_at = Utc::now();
    let org_out = job.sync.extract.out.root().to_path_buf();
    let fleet_warehouse = options.batches.as_ref().map(|_| OutDir::new(&options.out).warehouse());
    let lineage = options.lineage.as_ref().map(|sink| (sink, LineageEvent::new(&job, fleet_warehouse.as_deref())));
    if let Some((sink, event)) = &lineage {
        sink.emit(&event.start(started_at)).await;
    }
    // The organization's own stop: a child of the process's, which its `--max-duration` also
    // cancels. The deadline's cause is set before it cancels, so whoever sees the stop can read
    // why; a stop without a cause set is the process's.
    let org_stop = global.child_token();
    let deadline = options.max_duration;
    let cause = Arc::new(OnceLock::new());
    let cause_task = {
        let cause = cause.clone();
        let (global, org_stop) = (global.clone(), org_stop.clone());
        tokio::spawn(async move {
            let why = tokio::select! {
                _ = global.cancelled() => StopCause::Signal,
                _ = async {
                    match deadline {
                        Some(d) => tokio::time::sleep(d).await,
                        None => std::future::pending().await,
                    }
                } => StopCause::Deadline,
            };
            let _ = cause.set(why);
            org_stop.cancel();
        })
    };
    // The status file is written under the organization's lock; a run that cannot take it
    // records nothing there (the holder's run will).
    let (lock, client, outcome) = match job.sync.extract.out.lock("fleet run") {
        Err(e) => (None, None, Err(Error::from(e))),
        Ok(lock) => match Client::with_transport(job.client.clone(), transport) {
            Err(e) => (Some(lock), None, Err(Error::from(e))),
            Ok(client) => {
                // A stop ends the waits for the pacer and starts no request; the pipeline sees it
                // once the requests in flight have answered and landed.
                let client = client.with_stop(org_stop.clone());
                let stop = client.stop_after_in_flight(org_stop.clone());
                let sharing = match &shared {
                    Some(w) => Sharing::Shared(w),
                    None => Sharing::OwnWarehouse(loads),
                };
                // The organization's stage ledger, in its own directory: the report reads a
                // killed fleet run's organizations as interrupted, not fresh.
                let log = StageLog::begin(&job.sync.extract.out, "fleet run", &job.sync.stages());
                let outcome = crate::sync::run(job.sync.clone(), &client, stop, sharing, &log).await;
                match &outcome {
                    Ok(_) => log.finish(),
                    Err(e) => log.fail(e),
                }
                (Some(lock), Some(client), outcome)
            }
        },
    };
    cause_task.abort();
    let stop_cause = cause.get().copied().or_else(|| global.is_cancelled().then_some(StopCause::Signal));
    // The sync is over: this ends the organization's watcher of its requests in flight.
    org_stop.cancel();
    let mut report = OrgReport::empty(job.name.clone(), SyncOutcome::Completed, exit::OK, started_at);
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
            report.error = Some(e.recorded());
            report.outcome = SyncOutcome::Failed;
            if code == exit::INTERRUPTED {
                match stop_of(stop_cause, spent_budget(&e), options, "the next run resumes") {
                    Stop::Signal => report.outcome = SyncOutcome::Interrupted,
                    Stop::Budget(why) => {
                        report.outcome = SyncOutcome::Incomplete;
                        report.error = Some(why);
                    }
                    Stop::Unknown => {}
                }
            }
        }
    }
    report.resumable =
        report.outcome != SyncOutcome::Completed && crate::extract::unfinished_run(&job.sync.extract.out).is_some();
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
