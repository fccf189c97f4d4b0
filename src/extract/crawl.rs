//! The requests of an extract: pages of applications per status and pass, and content windows.
//! Every response is landed and fed to the [`Landing`] before the next decision is made.

use chrono::NaiveDate;
use futures_util::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;

use super::landing::{validate_content, Landing};
use super::raw::{RawRecord, RawWriter};
use super::ExtractError;
use crate::api::models::{ApplicationStatus, ApplicationsPage, Content24hResponse};
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

impl Crawl<'_> {
    fn land<T>(
        &mut self,
        f: &Fetched<T>,
        pass: Option<u32>,
        window: Option<(NaiveDate, NaiveDate)>,
        problem: Option<String>,
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
        self.landing.ingest(&rec);
        Ok(())
    }

    fn query(&self, status: &ApplicationStatus, page: u64) -> ApplicationsQuery {
        ApplicationsQuery { campaign_id: self.campaign_id, ..ApplicationsQuery::page(status.clone(), page) }
    }

    /// Fetches and lands page 1 of a pass unless it is landed already.
    pub async fn first_page(&mut self, status: &ApplicationStatus, pass: u32) -> Result<(), ExtractError> {
        if self.landing.page(status.as_str(), pass, 1).is_some() {
            return Ok(());
        }
        let q = self.query(status, 1);
        let fetched = tokio::select! {
            r = self.client.list_applications(&q) => r.map_err(|e| ExtractError::api(format!("applications `{status}` page 1"), e))?,
            _ = self.stop.cancelled() => return Err(ExtractError::Interrupted),
        };
        self.land(&fetched, Some(pass), None, None)?;
        self.progress.set(
            &format!("{status} pages"),
            self.landed_pages(status, pass),
            fetched.value.meta.page_count.max(1),
        );
        Ok(())
    }

    fn landed_pages(&self, status: &ApplicationStatus, pass: u32) -> u64 {
        self.landing.pages.get(&(status.as_str().to_owned(), pass)).map_or(0, |m| m.len() as u64)
    }

    /// Crawls a status to the end: every page of the current pass, then further passes while the
    /// rows seen disagree with the service's count, or the count moved during the pass, up to
    /// `max_passes`.
    pub async fn status(&mut self, status: &ApplicationStatus, max_passes: u32) -> Result<StatusOutcome, ExtractError> {
        let mut pass = self.landing.last_pass(status.as_str()).unwrap_or(1);
        loop {
            self.first_page(status, pass).await?;
            let page_count = self.landing.page_count(status.as_str(), pass);
            let mut missing: Vec<u64> =
                (2..=page_count).filter(|p| self.landing.page(status.as_str(), pass, *p).is_none()).collect();
            // Alternate direction: a forward pass can miss rows that rows leaving the status pull
            // up; a backward pass can miss rows that new rows push down. Together they cover both.
            if pass.is_multiple_of(2) {
                missing.reverse();
            }
            self.progress.set(&format!("{status} pages"), self.landed_pages(status, pass), page_count.max(1));
            self.pages(missing.into_iter().map(|p| (status.clone(), p)).collect(), pass).await?;
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

    /// Fetches and lands pages of one pass, up to `concurrency` at once, in any order.
    pub async fn pages(&mut self, wanted: Vec<(ApplicationStatus, u64)>, pass: u32) -> Result<(), ExtractError> {
        let client = self.client.clone();
        let queries: Vec<(ApplicationStatus, u64, ApplicationsQuery)> = wanted
            .into_iter()
            .map(|(s, p)| {
                let q = self.query(&s, p);
                (s, p, q)
            })
            .collect();
        let mut pages = futures_util::stream::iter(queries)
            .map(|(s, p, q)| {
                let client = client.clone();
                async move { (s, p, client.list_applications(&q).await) }.boxed()
            })
            .buffer_unordered(self.concurrency.max(1));
        loop {
            type Answer = (ApplicationStatus, u64, Result<Fetched<ApplicationsPage>, crate::api::ApiError>);
            let next: Option<Answer> = tokio::select! {
                n = pages.next() => n,
                _ = self.stop.cancelled() => return Err(ExtractError::Interrupted),
            };
            let Some((status, page, result)) = next else { break };
            let fetched = result.map_err(|e| ExtractError::api(format!("applications `{status}` page {page}"), e))?;
            let rows = fetched.value.data.len();
            self.land(&fetched, Some(pass), None, None)?;
            let note = format!("{rows} rows, {} retries", self.client.metrics().retries);
            self.progress.inc(&format!("{status} pages"), &note);
        }
        Ok(())
    }

    /// Fetches every window not landed yet, validating each; a window that stays truncated
    /// after [`CONTENT_TRIES`] answers fails the run (its answers are landed for diagnosis).
    pub async fn content(&mut self, windows: &[(NaiveDate, NaiveDate)]) -> Result<u64, ExtractError> {
        let missing: Vec<(NaiveDate, NaiveDate)> =
            windows.iter().copied().filter(|w| !self.landing.windows.contains_key(w)).collect();
        self.progress.set("content windows", (windows.len() - missing.len()) as u64, windows.len() as u64);
        let client = self.client.clone();
        let mut answers = futures_util::stream::iter(missing)
            .map(|w| {
                let client = client.clone();
                async move {
                    let mut tries = vec![];
                    for _ in 0..CONTENT_TRIES {
                        match client.content_24h(w.0, w.1, CONTENT_LIMIT_ALL).await {
                            Ok(f) => {
                                let verdict = validate_content(&f.value, w.0, w.1).map(|_| ());
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
            .buffer_unordered(self.concurrency.max(1));
        let mut retried = 0;
        loop {
            type Answer = (
                (NaiveDate, NaiveDate),
                Vec<(Fetched<Content24hResponse>, Result<(), String>)>,
                Option<crate::api::ApiError>,
            );
            let next: Option<Answer> = tokio::select! {
                n = answers.next() => n,
                _ = self.stop.cancelled() => return Err(ExtractError::Interrupted),
            };
            let Some((w, tries, error)) = next else { break };
            let mut last_problem = None;
            for (f, verdict) in &tries {
                let problem = verdict.clone().err();
                if problem.is_some() {
                    tracing::warn!(window = %format!("{}..{}", w.0, w.1), problem = problem.as_deref(), "invalid content answer");
                }
                self.land(f, None, Some(w), problem.clone())?;
                last_problem = problem;
            }
            retried += tries.len().saturating_sub(1) as u64;
            if let Some(e) = error {
                return Err(ExtractError::api(format!("content {}..{}", w.0, w.1), e));
            }
            if let Some(problem) = last_problem {
                return Err(ExtractError::Truncated { start: w.0, end: w.1, tries: CONTENT_TRIES, problem });
            }
            self.progress.inc("content windows", "");
        }
        Ok(retried)
    }
}
