//! One invocation of an extract, in two steps: [`begin`] opens the run (new or resumed), lands
//! page 1 of every status and makes the [`Plan`]; the caller shows the plan; then
//! [`Extraction::finish`] crawls the rest and writes the report. Whatever ends the invocation
//! (completion, `--plan-only`, an error, a stop), the landing and the report are saved first.

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use chrono::{NaiveDate, Utc};
use tokio_util::sync::CancellationToken;

use super::crawl::{Crawl, StatusOutcome};
use super::landing::{self, Landing};
use super::plan::{self, Plan};
use super::quick::{self, Snapshot};
use super::raw::{self, RawWriter};
use super::report::{self, ExtractReport, Findings, Invocation, RunStatus};
use super::runs::{self, ClosingCheck, Extracted, QuickLanding, RunSpec};
use super::{ExtractConfig, ExtractError, SyncMode};
use crate::api::models::ApplicationStatus;
use crate::api::{Client, MAX_APPLICATIONS_PER_PAGE};
use crate::out::write_json_atomic;
use crate::progress::Progress;

/// A run under way: page 1 of every status is landed and the plan is made.
pub struct Extraction<'a> {
    plan: Plan,
    run: Run<'a>,
}

/// What an invocation works with, from opening the run to its report.
struct Run<'a> {
    config: &'a ExtractConfig,
    client: &'a Client,
    stop: CancellationToken,
    snapshot: Option<&'a Snapshot>,
    spec: RunSpec,
    resumed: bool,
    /// Why the run reads the applications in its mode.
    reason: String,
    landing: Landing,
    writer: RawWriter,
    invocation: u32,
    progress: Progress,
    started: Instant,
    /// When page 1 of every status began: the applications' duration counts from there.
    applications_started: Instant,
    windows: Vec<(NaiveDate, NaiveDate)>,
    findings: Findings,
}

/// Opens a run and lands page 1 of every status: enough for the plan. The caller holds the lock
/// on the output directory. `snapshot` is the previous sync's lists: what a quick sync compares
/// with (see [`plan::choose_mode`]), and what the closing check looks for in any mode. On failure
/// or interruption the landing and the report are saved before the error is returned, and the
/// next run resumes.
pub async fn begin<'a>(
    config: &'a ExtractConfig,
    client: &'a Client,
    stop: CancellationToken,
    snapshot: Option<&'a Snapshot>,
) -> Result<Extraction<'a>, ExtractError> {
    let mut run = Run::open(config, client, stop, snapshot)?;
    match run.first_pages().await {
        Ok(plan) => Ok(Extraction { plan, run }),
        Err(e) => Err(run.conclude(Err(e), false).expect_err("a failed step fails the run")),
    }
}

impl Extraction<'_> {
    /// What is left to request, how long it should take, and the sync mode.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Crawls what the plan left (nothing with `--plan-only`) and writes the report. On failure
    /// or interruption the landing and the report are saved before the error is returned.
    pub async fn finish(self) -> Result<ExtractReport, ExtractError> {
        self.end(false).await.map(|(report, _)| report)
    }

    /// [`Extraction::finish`], with what the landing holds when the run completed, as this
    /// invocation holds it in memory: the same records' data as [`runs::read_extracted`] reads
    /// back from disk (the landing is built record by record as they are written, and a resumed
    /// run's from the records read back), so that a load that follows at once need not read
    /// and parse the landing again. `None` unless the run completed.
    pub async fn finish_landed(self) -> Result<(ExtractReport, Option<Extracted>), ExtractError> {
        self.end(true).await
    }

    /// Crawls and concludes; `hand_over`: with what the landing holds.
    async fn end(self, hand_over: bool) -> Result<(ExtractReport, Option<Extracted>), ExtractError> {
        let Extraction { plan, mut run } = self;
        tracing::info!(
            requests = plan.application_requests + plan.content_requests,
            estimated_s = plan.estimated_s,
            "plan"
        );
        let result = if run.config.plan_only { Ok(RunStatus::Planned) } else { run.crawl().await };
        run.conclude(result, hand_over)
    }
}

impl<'a> Run<'a> {
    /// Continues the unfinished run with the same request, or starts a new one.
    fn open(
        config: &'a ExtractConfig,
        client: &'a Client,
        stop: CancellationToken,
        snapshot: Option<&'a Snapshot>,
    ) -> Result<Self, ExtractError> {
        let base_url = client.base_url().to_string();
        let (mode, mut reason) = plan::choose_mode(config, snapshot, Utc::now());
        let resumed = runs::resumable(config, &base_url, mode, snapshot);
        if resumed.as_ref().is_some_and(|spec| spec.sync != SyncMode::Quick && mode == SyncMode::Quick) {
            reason = "continuing an unfinished full sync".into();
        }
        // From here on, the spec's mode is the run's.
        let spec = match &resumed {
            Some(spec) => spec.clone(),
            None => {
                let spec = RunSpec::new(config, base_url, mode, snapshot);
                runs::remove_unstarted(&config.out)?;
                runs::write_spec(&config.out, &spec)?;
                spec
            }
        };
        let dir = config.out.raw_dir(&spec.run_id);
        let recovered = raw::recover_partials(&dir)?;
        let landing = Landing::from_records(&raw::read_run(&dir)?);
        let invocation = runs::next_invocation(&dir, &landing);
        if resumed.is_some() {
            tracing::info!(
                run_id = %spec.run_id,
                invocation,
                landed = landing.next_seq,
                recovered,
                "resuming an unfinished run"
            );
        } else {
            tracing::info!(run_id = %spec.run_id, from = %spec.from, to = %spec.to, "starting a run");
        }
        Ok(Run {
            writer: RawWriter::create(&dir, invocation)?,
            progress: Progress::new(config.progress_bars),
            started: Instant::now(),
            applications_started: Instant::now(),
            windows: landing::windows(spec.from, spec.to, spec.window_days),
            resumed: resumed.is_some(),
            config,
            client,
            stop,
            snapshot,
            spec,
            reason,
            landing,
            invocation,
            findings: Findings::default(),
        })
    }

    /// The crawl's view of this run.
    fn crawler(&mut self) -> Crawl<'_> {
        Crawl {
            client: self.client,
            writer: &mut self.writer,
            landing: &mut self.landing,
            invocation: self.invocation,
            campaign_id: self.spec.campaign_id,
            concurrency: self.config.concurrency,
            stop: self.stop.clone(),
            progress: &self.progress,
        }
    }

    /// Lands page 1 of every status; with `auto`, falls back to a full sync when locating the
    /// changes would cost as much; then plans.
    async fn first_pages(&mut self) -> Result<Plan, ExtractError> {
        self.applications_started = Instant::now();
        let config = self.config;
        let mut crawl = self.crawler();
        let passes: Vec<(ApplicationStatus, u32)> =
            config.statuses.iter().map(|s| (s.clone(), crawl.current_pass(s))).collect();
        crawl.first_pages(&passes).await?;
        if self.spec.sync == SyncMode::Quick && self.config.sync == SyncMode::Auto {
            if let Some(why) = self.snapshot.and_then(|snap| plan::too_many_changes(self.config, snap, &self.landing)) {
                self.reason = why;
                self.spec.sync = SyncMode::Full;
                self.spec.base_run = None;
                // A resumed quick run may have saved its locations: a full run loads none.
                runs::remove_quick(&self.config.out, &self.spec.run_id)?;
                runs::write_spec(&self.config.out, &self.spec)?;
            }
        }
        let mode = (self.spec.sync, self.reason.clone());
        let pacing = self.client.pacer().config();
        let first_pages = self.applications_started.elapsed();
        Ok(plan::make_plan(self.config, pacing, &self.landing, &self.windows, first_pages, mode))
    }

    /// Everything past the first pages: a quick sync's locating, every status not read yet, then
    /// the content windows.
    async fn crawl(&mut self) -> Result<RunStatus, ExtractError> {
        let (config, spec, snapshot) = (self.config, self.spec.clone(), self.snapshot);
        let (t, windows) = (self.applications_started, self.windows.clone());
        let mut findings = std::mem::take(&mut self.findings);
        let mut crawl = self.crawler();
        let result = async {
            // What `quick.json` holds, once this invocation wrote or took it.
            let mut saved_quick: Option<QuickLanding> = None;
            if let (SyncMode::Quick, Some(snap)) = (spec.sync, snapshot) {
                let saved = match runs::read_quick(&config.out, &spec.run_id) {
                    Ok(saved) => saved,
                    // Unreadable: located again.
                    Err(ExtractError::NoSuchRun(_)) => None,
                    Err(e) => return Err(e),
                };
                // Every page it located from must be in the landing (a power loss can take
                // records the file outlived), else it is located again.
                let landed_all = |l: &QuickLanding| {
                    l.located.iter().all(|(s, loc)| crawl.landing.page_views(s, 1).len() as u64 >= loc.pages_read)
                };
                match saved {
                    // Located by an earlier invocation: taken as it was.
                    Some(landed) if landed.base_run == snap.base_run && landed_all(&landed) => {
                        saved_quick = Some(landed.clone());
                        for (s, l) in &landed.located {
                            // One the closing check read again has its own pass to report.
                            let outcome = match crawl.landing.last_pass(s) {
                                Some(pass) if pass > 1 => {
                                    crawl.status(&ApplicationStatus::parse(s), spec.max_passes).await?
                                }
                                _ => StatusOutcome::located(l.row_count),
                            };
                            findings.outcomes.insert(s.clone(), outcome);
                        }
                        (findings.located, findings.read_in_full) = (landed.located, landed.read_in_full);
                    }
                    _ => {
                        findings.located =
                            locate_changes(&mut crawl, snap, &config.statuses, spec.max_passes, &mut findings).await?;
                        write_quick(&config.out, &spec.run_id, snap, &findings, &mut saved_quick)?;
                    }
                }
            }
            let unread: Vec<&ApplicationStatus> =
                config.statuses.iter().filter(|s| !findings.outcomes.contains_key(s.as_str())).collect();
            // The current pass of every unread status in one stream of requests, so the in-flight
            // limit stays full across statuses; then each status is checked, and crawled again
            // while it has not converged.
            let passes: Vec<(ApplicationStatus, u32)> =
                unread.iter().map(|s| ((*s).clone(), crawl.current_pass(s))).collect();
            crawl.first_pages(&passes).await?;
            let wanted = passes.iter().flat_map(|(status, pass)| crawl.missing_pages(status, *pass)).collect();
            crawl.pages(wanted).await?;
            for status in unread {
                let outcome = crawl.status(status, spec.max_passes).await?;
                findings.outcomes.insert(status.to_string(), outcome);
            }
            close(&mut crawl, &config.out, &spec.run_id, snapshot, &config.statuses, spec.max_passes, &mut findings)
                .await?;
            for (status, outcome) in findings.outcomes.iter().filter(|(_, o)| !o.converged) {
                let what = if outcome.seen == outcome.row_count {
                    format!("its count moved during each of {} passes", outcome.passes)
                } else {
                    format!(
                        "{} rows seen after {} passes, but the service reports {}",
                        outcome.seen, outcome.passes, outcome.row_count
                    )
                };
                findings.warnings.push(format!(
                    "status `{status}`: {what}: the list changed while paging; the next run picks up the difference"
                ));
            }
            if let (SyncMode::Quick, Some(snap)) = (spec.sync, snapshot) {
                // Again after the closing check, if that changed what it holds.
                write_quick(&config.out, &spec.run_id, snap, &findings, &mut saved_quick)?;
            }
            for (status, why) in &findings.read_in_full {
                findings.warnings.push(format!("quick sync: status `{status}` was read in full: {why}"));
            }
            findings.durations_ms.applications = Some(t.elapsed().as_millis() as u64);
            let t = Instant::now();
            crawl.content(&windows).await?;
            findings.durations_ms.content = Some(t.elapsed().as_millis() as u64);
            Ok(RunStatus::Completed)
        }
        .await;
        self.findings = findings;
        result
    }

    /// Ends the invocation: saves the landing and its request counters, writes the report, and
    /// marks a completed run; then returns the report and, for a completed run, what its landing
    /// holds ([`Extraction::finish_landed`]), or the error that ended the run.
    fn conclude(
        self,
        result: Result<RunStatus, ExtractError>,
        hand_over: bool,
    ) -> Result<(ExtractReport, Option<Extracted>), ExtractError> {
        let Run {
            config,
            client,
            snapshot,
            spec,
            resumed,
            reason,
            landing,
            writer,
            invocation,
            progress,
            started,
            mut findings,
            ..
        } = self;
        progress.finish();
        // A segment whose write failed stays partial (the next run recovers it): the run's own
        // error, that write's, is the one reported.
        if let Err(e) = writer.finish() {
            match &result {
                Ok(_) => return Err(e.into()),
                // Logged now: on a full disk the report's own writes below may fail too, and
                // their error would replace this one.
                Err(crawl) => tracing::error!(
                    error = %crate::exit::with_causes(crawl),
                    segment = %crate::exit::with_causes(&e),
                    "the run failed; its landing segment stays partial and the next run recovers it"
                ),
            }
        }
        let (requests, unreported) = runs::record_requests(&config.out, &spec.run_id, invocation, &client.metrics())?;
        findings.durations_ms.extract = Some(started.elapsed().as_millis() as u64);
        let (status, error) = match &result {
            Ok(s) => (*s, None),
            // The run report says the same of a stop and a spent budget: the next run resumes.
            Err(ExtractError::Interrupted | ExtractError::BudgetSpent { .. }) => {
                (RunStatus::Interrupted, Some(ExtractError::Interrupted.to_string()))
            }
            Err(e) => (RunStatus::Failed, Some(e.to_string())),
        };
        let invocation = Invocation { number: invocation, resumed, status, error, requests, unreported };
        let report = report::build(config, &spec, snapshot, reason, &landing, invocation, findings);
        for w in &report.warnings {
            tracing::warn!(warning = %w, "data quality");
        }
        let completed = report.status == RunStatus::Completed;
        if completed {
            runs::complete(&config.out, &spec.run_id, config.keep_raw)?;
        }
        write_json_atomic(&config.out.report_path(&spec.run_id), &report)?;
        result?;
        // A landing that cannot be handed over (its `quick.json` unreadable) is read back by the
        // load, which reports why.
        let landed =
            (completed && hand_over).then(|| Extracted::from_landing(&config.out, spec, landing, true).ok()).flatten();
        Ok((report, landed))
    }
}

/// Saves a quick run's locations and the statuses it read in full (`quick.json`), unless
/// `saved` (what the file holds, as this invocation wrote or read it) says the same already;
/// then `saved` is what the file holds.
fn write_quick(
    out: &crate::out::OutDir,
    run_id: &str,
    snap: &Snapshot,
    findings: &Findings,
    saved: &mut Option<QuickLanding>,
) -> Result<(), ExtractError> {
    let landed = QuickLanding {
        base_run: snap.base_run.clone(),
        located: findings.located.clone(),
        read_in_full: findings.read_in_full.clone(),
    };
    if saved.as_ref() != Some(&landed) {
        runs::write_quick(out, run_id, &landed)?;
        *saved = Some(landed);
    }
    Ok(())
}

/// Locates what changed since the snapshot: page 1 of every status is landed; reads the pages
/// [`quick::round`] asks for, and every status it gives up on in full.
async fn locate_changes(
    crawl: &mut Crawl<'_>,
    snapshot: &Snapshot,
    statuses: &[ApplicationStatus],
    max_passes: u32,
    findings: &mut Findings,
) -> Result<BTreeMap<String, quick::Located>, ExtractError> {
    let names: Vec<String> = statuses.iter().map(|s| s.to_string()).collect();
    let per_page = u64::from(MAX_APPLICATIONS_PER_PAGE);
    let mut asked = HashSet::new();
    // A status with a second pass was read in full by an earlier invocation of this run (while
    // locating, or by the closing check): its pages of the first pass no longer locate it.
    for s in statuses {
        if crawl.landing.last_pass(s.as_str()).is_some_and(|p| p > 1) {
            let outcome = crawl.status(s, max_passes).await?;
            findings.outcomes.insert(s.to_string(), outcome);
            findings.read_in_full.insert(s.to_string(), "read in full by an earlier invocation of this run".into());
        }
    }
    loop {
        let in_full = findings.read_in_full.keys().cloned().collect();
        let latest = crawl.landing.latest_statuses();
        let landing = &*crawl.landing;
        let next = quick::round(snapshot, &names, &|s| landing.page_views(s, 1), &latest, &in_full, per_page);
        match next {
            quick::Round::Fetch(pages) => {
                let mut wanted = vec![];
                for (s, p) in pages {
                    if asked.insert((s.clone(), p)) {
                        wanted.push((ApplicationStatus::parse(&s), p, 1));
                    } else {
                        // Asked and answered, yet not landed as a page: read the status in full.
                        findings.read_in_full.insert(s.clone(), format!("page {p} could not be read as a page"));
                    }
                }
                crawl.pages(wanted).await?;
            }
            quick::Round::ReadInFull(list) => {
                for (s, why) in list {
                    tracing::warn!(status = %s, reason = %why, "quick sync: reading the status in full");
                    let outcome = crawl.status(&ApplicationStatus::parse(&s), max_passes).await?;
                    findings.outcomes.insert(s.clone(), outcome);
                    findings.read_in_full.insert(s, why);
                }
            }
            quick::Round::Done(located) => {
                for (s, l) in &located {
                    findings.outcomes.insert(s.clone(), StatusOutcome::located(l.row_count));
                }
                return Ok(located);
            }
        }
    }
}

/// The closing check, once every status is read or located. A list can change after it was read
/// while another is still read: an application that moved from an unread page of one status into
/// a status already read is on no page read. The check is made once a run (its progress is kept
/// in `closing.json`, so a resumed invocation continues it and never makes it twice) when that
/// may have happened:
/// - an application of the previous sync's lists was seen nowhere and not kept
///   ([`quick::vanished`]): it left the scope, or moved so;
/// - or two pages of a status reported different counts (the lists changed during the run; a
///   rise can hide a departure, so any change counts).
///
/// It reads page 1 of every status again as a probe ([`Crawl::probe`]), one status after another
/// in their lifecycle order ([`ApplicationStatus::KNOWN`]). A status whose count rose since page 1
/// of its last pass by more than the applications newer than that page's newest (arrivals, which
/// the probe lands) had an application move into it after it was read: it is read in full again,
/// as a new pass, before the next status is probed. A count that fell needs nothing: what left
/// was seen before it left (it keeps that status when it went to a status already probed). One
/// round is enough: once the statuses are read, every application in scope was seen or kept,
/// and a move during the check leaves it a move behind, not missing (unless it had already
/// moved once, unseen, in the run). Costs nothing when the lists held still and nothing
/// vanished.
async fn close(
    crawl: &mut Crawl<'_>,
    out: &crate::out::OutDir,
    run_id: &str,
    snapshot: Option<&Snapshot>,
    statuses: &[ApplicationStatus],
    max_passes: u32,
    findings: &mut Findings,
) -> Result<(), ExtractError> {
    // The applications of the previous lists seen nowhere and not kept, so far.
    let vanished = |crawl: &Crawl<'_>, findings: &Findings| -> Vec<(String, i64)> {
        let Some(snap) = snapshot else { return vec![] };
        let names: Vec<String> = statuses.iter().map(|s| s.to_string()).collect();
        let kept: HashSet<i64> = findings.located.values().flat_map(|l| l.kept.iter().copied()).collect();
        quick::vanished(snap, &names, &crawl.landing.latest_statuses(), &kept)
    };
    let mut check = match runs::read_closing(out, run_id)? {
        Some(check) => check,
        None => {
            let reason = match vanished(crawl, findings).into_iter().next() {
                Some((from, id)) => format!("application {id} left `{from}` and is on none of the pages read"),
                None if crawl.landing.any_count_moved() => "a count moved while the lists were read".to_owned(),
                None => return Ok(()),
            };
            ClosingCheck { reason, ..ClosingCheck::default() }
        }
    };
    let mut order = statuses.to_vec();
    order.sort_by_key(|s| ApplicationStatus::KNOWN.iter().position(|k| k == s).unwrap_or(usize::MAX));
    while !check.done {
        runs::write_closing(out, run_id, &check)?;
        findings.closing_check = Some(check.clone());
        let Some(status) = order.get(check.probed as usize) else {
            let missing: Vec<i64> = vanished(crawl, findings).into_iter().map(|(_, id)| id).collect();
            check.still_missing = missing.len() as u64;
            check.still_missing_ids = missing.into_iter().take(10).collect();
            check.done = true;
            runs::write_closing(out, run_id, &check)?;
            break;
        };
        let reading = check.reading.clone().filter(|(s, _)| s == status.as_str());
        let pass = if let Some((_, pass)) = reading {
            pass
        } else {
            // What the status was when its last pass began: its count and its newest row.
            let page1 = crawl.landing.page(status.as_str(), crawl.current_pass(status), 1);
            let was = page1.map_or(0, |p| p.row_count);
            let newest = page1.and_then(|p| p.applied_at.first().copied()).unwrap_or(i64::MIN);
            let (now, rows) = crawl.probe(status).await?;
            let arrived = rows.iter().take_while(|(at, _)| *at > newest).count() as u64;
            if now <= was + arrived {
                check.probed += 1;
                continue;
            }
            let why = format!(
                "{}; the count of `{status}` rose from {was} to {now} after it was read, {arrived} of it new applications",
                check.reason
            );
            tracing::info!(status = %status, reason = %why, "closing check: reading the status again");
            check.read_again.insert(status.to_string(), why);
            let pass = crawl.current_pass(status) + 1;
            check.reading = Some((status.to_string(), pass));
            runs::write_closing(out, run_id, &check)?;
            findings.closing_check = Some(check.clone());
            pass
        };
        // A new pass of the status, begun by this invocation or an earlier one.
        crawl.first_pages(&[(status.clone(), pass)]).await?;
        let outcome = crawl.status(status, max_passes).await?;
        findings.outcomes.insert(status.to_string(), outcome);
        check.reading = None;
        check.probed += 1;
    }
    for (status, why) in &check.read_again {
        // A located status read again keeps, as kept, only what no page showed (below).
        if findings.located.contains_key(status) {
            findings.read_in_full.insert(status.clone(), why.clone());
        }
    }
    // A row kept from the snapshot and seen again (on a probe, or in a status read again) is the
    // service's as seen; one seen nowhere stays kept, with the status the warehouse has.
    let latest = crawl.landing.latest_statuses();
    for l in findings.located.values_mut() {
        l.kept.retain(|id| !latest.contains_key(id));
    }
    findings.closing_check = Some(check);
    Ok(())
}
