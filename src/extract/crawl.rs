//! The requests of an extract: pages of applications per status and pass, and content windows.
//! Every response is landed and fed to the [`Landing`] before the next decision is made.

use std::sync::Arc;

use chrono::NaiveDate;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::landing::{validate_content, Landing, Read};
use super::raw::{RawRecord, RawWriter};
use super::ExtractError;
use crate::api::models::ApplicationStatus;
use crate::api::{ApplicationsQuery, Client, Fetched, CONTENT_LIMIT_ALL};
use crate::progress::Progress;

/// Validation failures of one window before it is given up as truncated.
pub const CONTENT_TRIES: u32 = 3;

/// What the crawl functions share.
pub struct Crawl<'a> {
    pub client: &'a Client,
    pub writer: &'a mut RawWriter,
    pub landing: &'a mut Landing,
    pub invocation: u32,
    pub campaign_id: Option<i64>,
    pub concurrency: usize,
    pub stop: CancellationToken,
    pub progress: &'a Progress,
}

/// How one status's crawl ended.
#[derive(Clone, Debug)]
pub struct StatusOutcome {
    pub passes: u32,
    pub converged: bool,
    /// Rows of the status seen in the last pass, and the service's count at its end.
    pub seen: u64,
    pub row_count: u64,
}

impl StatusOutcome {
    /// A status a quick sync located: one pass, its count accounted for.
    pub fn located(row_count: u64) -> Self {
        StatusOutcome { passes: 1, converged: true, seen: row_count, row_count }
    }
}

impl Crawl<'_> {
    /// Lands an answer, then feeds it to the landing with `read`, its body as this crawl read
    /// it (the landing parses the body again without it).
    fn land<T>(
        &mut self,
        f: &Fetched<T>,
        pass: Option<u32>,
        window: Option<(NaiveDate, NaiveDate)>,
        problem: Option<String>,
        read: Option<Read>,
    ) -> Result<(), ExtractError> {
        let rec = RawRecord {
            seq: self.landing.next_seq,
            invocation: self.invocation,
            endpoint: f.endpoint.name().to_owned(),
            path: f.path.clone(),
            query: f.query.iter().cloned().collect(),
            received_at: f.received_at,
            status: f.status,
            attempts: f.attempts,
            pass,
            window,
            valid: problem.is_none(),
            problem,
            body: String::from_utf8_lossy(&f.raw).into_owned(),
        };
        self.writer.write(&rec)?;
        self.landing.ingest_read(&rec, read);
        Ok(())
    }

    fn query(&self, status: &ApplicationStatus, page: u64) -> ApplicationsQuery {
        ApplicationsQuery { campaign_id: self.campaign_id, ..ApplicationsQuery::page(status.clone(), page) }
    }

    /// Fetches and lands page 1 of a pass of each status, those not landed yet, all at once.
    pub async fn first_pages(&mut self, wanted: &[(ApplicationStatus, u32)]) -> Result<(), ExtractError> {
        let missing: Vec<(ApplicationStatus, u64, u32)> = wanted
            .iter()
            .filter(|(status, pass)| self.landing.page(status.as_str(), *pass, 1).is_none())
            .map(|(status, pass)| (status.clone(), 1, *pass))
            .collect();
        self.pages(missing).await
    }

    /// The pass of a status that a crawl continues: the last one landed, or the first.
    pub fn current_pass(&self, status: &ApplicationStatus) -> u32 {
        self.landing.last_pass(status.as_str()).unwrap_or(1)
    }

    fn landed_pages(&self, status: &ApplicationStatus, pass: u32) -> u64 {
        self.landing.pages.get(&(status.as_str().to_owned(), pass)).map_or(0, |m| m.len() as u64)
    }

    /// Crawls a status to the end: every page of the current pass, then further passes while the
    /// rows seen disagree with the service's count, or the count moved during the pass, up to
    /// `max_passes`.
    pub async fn status(&mut self, status: &ApplicationStatus, max_passes: u32) -> Result<StatusOutcome, ExtractError> {
        let mut pass = self.current_pass(status);
        loop {
            self.first_pages(&[(status.clone(), pass)]).await?;
            let missing = self.missing_pages(status, pass);
            self.pages(missing).await?;
            let check = self.landing.pass_check(status.as_str(), pass);
            let (seen, row_count) = (check.seen, check.row_count);
            if seen == row_count && !check.count_moved {
                return Ok(StatusOutcome { passes: pass, converged: true, seen, row_count });
            }
            if pass >= max_passes {
                return Ok(StatusOutcome { passes: pass, converged: false, seen, row_count });
            }
            tracing::info!(
                status = %status,
                pass,
                seen,
                row_count,
                count_moved = check.count_moved,
                "the list changed while paging; crawling the status again"
            );
            pass += 1;
        }
    }

    /// Page 1 of a status again, as a probe of its count: landed (its rows are observations) but
    /// part of no pass, so a resumed run never continues it. The service's count and the rows,
    /// `(applied_at in µs, id)`, newest first.
    pub async fn probe(&mut self, status: &ApplicationStatus) -> Result<(u64, Vec<(i64, i64)>), ExtractError> {
        let fetched = self
            .client
            .list_applications(&self.query(status, 1))
            .await
            .map_err(|e| ExtractError::api(format!("applications `{status}` page 1 (closing check)"), e))?;
        let rows = fetched.value.data.iter().map(|a| (a.applied_at.timestamp_micros(), a.id)).collect();
        let row_count = fetched.value.meta.row_count;
        let (page, fetched) = fetched.take_value();
        self.land(&fetched, None, None, None, Some(Read::Page(page)))?;
        Ok((row_count, rows))
    }

    /// The pages a status's pass still lacks, page 1 landed: in the pass's direction (see
    /// [`Crawl::status`]).
    pub fn missing_pages(&self, status: &ApplicationStatus, pass: u32) -> Vec<(ApplicationStatus, u64, u32)> {
        let page_count = self.landing.page_count(status.as_str(), pass);
        let mut missing: Vec<u64> =
            (2..=page_count).filter(|p| self.landing.page(status.as_str(), pass, *p).is_none()).collect();
        // Alternate direction: a forward pass can miss rows that rows leaving the status pull
        // up; a backward pass can miss rows that new rows push down. Together they cover both.
        if pass.is_multiple_of(2) {
            missing.reverse();
        }
        self.progress.set(&format!("{status} pages"), self.landed_pages(status, pass), page_count.max(1));
        missing.into_iter().map(|p| (status.clone(), p, pass)).collect()
    }

    /// Fetches and lands pages, each `(status, page, pass)`, up to `concurrency` at once, in any
    /// order.
    pub async fn pages(&mut self, wanted: Vec<(ApplicationStatus, u64, u32)>) -> Result<(), ExtractError> {
        let jobs: Vec<BoxFuture<_>> = wanted
            .into_iter()
            .map(|(s, p, pass)| {
                let (client, q) = (self.client.clone(), self.query(&s, p));
                async move {
                    let r = client.list_applications(&q).await;
                    (s, p, pass, r)
                }
                .boxed()
            })
            .collect();
        let mut answers = Ahead::start(jobs, self.concurrency, self.stop.clone());
        while let Some(((status, page, pass, result), _slot)) = answers.next().await {
            let fetched = match result {
                Ok(fetched) => fetched,
                Err(e) => {
                    answers.error(ExtractError::api(format!("applications `{status}` page {page}"), e));
                    continue;
                }
            };
            let (rows, page_count) = (fetched.value.data.len(), fetched.value.meta.page_count.max(1));
            let (page_read, fetched) = fetched.take_value();
            self.land(&fetched, Some(pass), None, None, Some(Read::Page(page_read)))?;
            let bar = format!("{status} pages");
            if page == 1 {
                self.progress.set(&bar, self.landed_pages(&status, pass), page_count);
            } else {
                self.progress.inc(&bar, &format!("{rows} rows, {} retries", self.client.metrics().retries));
            }
        }
        answers.end()
    }

    /// Fetches every window not landed yet, validating each; a window that stays truncated
    /// after [`CONTENT_TRIES`] answers fails the run (its answers are landed for diagnosis).
    pub async fn content(&mut self, windows: &[(NaiveDate, NaiveDate)]) -> Result<u64, ExtractError> {
        let missing: Vec<(NaiveDate, NaiveDate)> =
            windows.iter().copied().filter(|w| !self.landing.windows.contains_key(w)).collect();
        self.progress.set("content windows", (windows.len() - missing.len()) as u64, windows.len() as u64);
        let jobs: Vec<BoxFuture<_>> = missing
            .into_iter()
            .map(|w| {
                let client = self.client.clone();
                async move {
                    let mut tries = vec![];
                    for _ in 0..CONTENT_TRIES {
                        match client.content_24h(w.0, w.1, CONTENT_LIMIT_ALL).await {
                            Ok(f) => {
                                let verdict = validate_content(&f.value, w.0, w.1);
                                let ok = verdict.is_ok();
                                tries.push((f, verdict));
                                if ok {
                                    break;
                                }
                            }
                            Err(e) => return (w, tries, Some(e)),
                        }
                    }
                    (w, tries, None)
                }
                .boxed()
            })
            .collect();
        let mut answers = Ahead::start(jobs, self.concurrency, self.stop.clone());
        let mut retried = 0;
        while let Some(((w, tries, error), _slot)) = answers.next().await {
            let mut last_problem = None;
            retried += tries.len().saturating_sub(1) as u64;
            for (f, verdict) in tries {
                let problem = verdict.as_ref().err().cloned();
                if problem.is_some() {
                    tracing::warn!(window = %format!("{}..{}", w.0, w.1), problem = problem.as_deref(), "invalid content answer");
                }
                self.land(&f, None, Some(w), problem.clone(), verdict.ok().map(Read::Content))?;
                last_problem = problem;
            }
            if let Some(e) = error {
                answers.error(ExtractError::api(format!("content {}..{}", w.0, w.1), e));
                continue;
            }
            if let Some(problem) = last_problem {
                answers.error(ExtractError::Truncated { start: w.0, end: w.1, tries: CONTENT_TRIES, problem });
                continue;
            }
            self.progress.inc("content windows", "");
        }
        answers.end()?;
        Ok(retried)
    }
}

/// Requests run on a task of their own, so that they make progress while the crawl lands an
/// answer, and a new one starts as soon as a slot is free. A slot is held from a request's start
/// until its answer is landed (the crawl drops the [`Slot`] after landing): at most `limit` jobs
/// are in flight or answered and not yet landed, so a killed process loses at most the answers
/// of `limit` jobs (a content window's job keeps its refused answers until its last try).
/// Answers come in the order they finish. Once `stop` is raised (which the client raises after
/// its requests in flight have answered, see [`Client::stop_after_in_flight`]) no further job
/// starts, and every answer that came is handed over before the channel closes. Dropping it (a
/// failed step) drops the requests in flight.
///
/// It also keeps how the step is ending: the crawl hands it the errors of the answers
/// ([`Ahead::error`]) and takes the step's result from it ([`Ahead::end`]).
struct Ahead<T> {
    answers: mpsc::Receiver<(T, Slot)>,
    task: JoinHandle<()>,
    jobs: usize,
    answered: usize,
    /// A stop or a spent budget an answer met: the answers still on their way come, and are
    /// landed. The client lets no new request out (a stop also ends its waits for the pacer and
    /// between retries; a spent budget ends the waits of requests not yet counted in it, and a
    /// retry it would refuse fails without its wait).
    stopped: Option<ExtractError>,
    /// Any other error: the step ends once the answers already here are landed.
    failed: Option<ExtractError>,
}

/// A request's place in the in-flight limit, held until its answer is landed.
type Slot = tokio::sync::OwnedSemaphorePermit;

impl<T: Send + 'static> Ahead<T> {
    fn start(jobs: Vec<BoxFuture<'static, T>>, limit: usize, stop: CancellationToken) -> Self {
        let limit = limit.max(1);
        let count = jobs.len();
        // Every answer waiting holds a slot: the channel never holds more than `limit`.
        let (tx, answers) = mpsc::channel(limit);
        let task = tokio::spawn(async move {
            let slots = Arc::new(Semaphore::new(limit));
            let mut jobs = jobs.into_iter().peekable();
            let mut running = FuturesUnordered::new();
            loop {
                let more = jobs.peek().is_some() && !stop.is_cancelled();
                if !more && running.is_empty() {
                    break;
                }
                tokio::select! {
                    slot = slots.clone().acquire_owned(), if more => {
                        let (Ok(slot), Some(job)) = (slot, jobs.next()) else { break };
                        running.push(job.map(|answer| (answer, slot)));
                    }
                    Some(answer) = running.next(), if !running.is_empty() => {
                        if tx.send(answer).await.is_err() {
                            break;
                        }
                    }
                    // Look at `more` again: no job starts after a stop.
                    _ = stop.cancelled(), if more => {}
                }
            }
        });
        Ahead { answers, task, jobs: count, answered: 0, stopped: None, failed: None }
    }

    /// The next answer with its slot (drop it once the answer is landed), or `None` once every
    /// job started has answered; once the step is failing, only the answers already here.
    async fn next(&mut self) -> Option<(T, Slot)> {
        let next = match self.failed {
            Some(_) => self.answers.try_recv().ok(),
            None => self.answers.recv().await,
        };
        match next {
            Some(_) => self.answered += 1,
            // The task ends early only by a panic in a request: raise it here, where it would
            // have been raised before, rather than read the missing answers as none.
            None if self.failed.is_none() => {
                if let Err(e) = (&mut self.task).await {
                    if e.is_panic() {
                        std::panic::resume_unwind(e.into_panic());
                    }
                }
            }
            None => {}
        }
        next
    }

    /// An answer's error: see [`Ahead::stopped`] and [`Ahead::failed`].
    fn error(&mut self, e: ExtractError) {
        match e {
            ExtractError::Interrupted | ExtractError::BudgetSpent { .. } => self.stopped.get_or_insert(e),
            e => self.failed.get_or_insert(e),
        };
    }

    /// The step's error, if any; else an interruption when a stop kept some job from starting.
    fn end(mut self) -> Result<(), ExtractError> {
        match (self.failed.take(), self.stopped.take()) {
            (Some(e), _) | (None, Some(e)) => Err(e),
            (None, None) if self.answered < self.jobs => Err(ExtractError::Interrupted),
            (None, None) => Ok(()),
        }
    }
}

impl<T> Drop for Ahead<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}
