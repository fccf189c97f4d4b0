//! The API client: one operation per endpoint, each sent through one loop of attempts.
//!
//! Every request goes through [`Client::attempts`], which, attempt after attempt,
//! 1. counts it against the request budget and waits for a slot from the shared [`Pacer`],
//! 2. sends it once and reads the whole answer ([`Transport::send`]),
//! 3. tells the pacer and the counters what came back,
//! 4. has the answer judged ([`judge`]): accepted, retried after a wait, or failed for good.
//!
//! Writes are retried too: the update is idempotent (the same body twice leaves the same sale),
//! and a repeated payout mark is answered "already paid", which [`Client::mark_credit_payout`]
//! reports as [`MarkOutcome::AlreadyPaid`].
//!
//! The key travels only in the `Authorization` header, marked sensitive. URLs in errors and logs
//! carry the path and query, which never hold the key.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use chrono::{NaiveDate, Utc};
use reqwest::header::HeaderValue;
use reqwest::{Method, Url};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::config::ClientConfig;
use super::error::ApiError;
use super::memory::MemoryFile;
use super::metrics::{Metrics, MetricsSnapshot};
use super::models::*;
use super::operations::*;
use super::pacing::{Dispatch, Pacer};
use super::retry::{judge, Attempt, RetryPolicy, Verdict};
use super::send::{Answer, Transport};

struct Inner {
    transport: Transport,
    base: Url,
    auth: HeaderValue,
    pacer: Arc<Pacer>,
    retry: RetryPolicy,
    metrics: Metrics,
    max_body: usize,
    /// Where the pacer's memory is kept between processes.
    memory: Option<MemoryFile>,
    /// At most this many requests (attempts), and how many were started.
    budget: Option<(u64, AtomicU64)>,
    /// Raised when the budget's last unit is taken: requests still waiting for the pacer give up.
    budget_spent: CancellationToken,
    /// Attempts sent and not yet answered: what a stop lets finish
    /// ([`Client::stop_after_in_flight`]).
    in_flight: watch::Sender<usize>,
}

/// Counts an attempt in [`Inner::in_flight`] while it lives, also when its future is dropped.
struct InFlight<'a>(&'a watch::Sender<usize>);

impl<'a> InFlight<'a> {
    fn start(count: &'a watch::Sender<usize>) -> Self {
        count.send_modify(|n| *n += 1);
        InFlight(count)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// The API client. Cheap to clone; clones share the connection pool, pacer and counters.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    /// A stop request (Ctrl-C) that interrupts waiting for the pacer or a backoff.
    stop: Option<CancellationToken>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.inner.base.as_str())
            .field("pacing", self.inner.pacer.config())
            .field("retry", &self.inner.retry)
            .finish_non_exhaustive()
    }
}

/// A 2xx answer, decoded when it could be.
struct Accepted<T> {
    fetched: Fetched<Option<T>>,
    unreadable: Option<String>,
}

/// What the attempts of one request came to, and whether any of them lost its answer.
struct Attempts<T> {
    result: Result<Accepted<T>, ApiError>,
    lost: bool,
}

/// One request, as every attempt sends it.
struct Request<'a> {
    endpoint: Endpoint,
    method: Method,
    path: &'a str,
    query: Vec<(String, String)>,
    body: Option<Vec<u8>>,
    write: bool,
}

impl Client {
    pub fn new(config: ClientConfig) -> Result<Self, ApiError> {
        let transport = Transport::new(config.connect_timeout, config.request_timeout)?;
        Self::with_transport(config, &transport)
    }

    /// A client on a shared [`Transport`]: many organizations' clients (a fleet) share one
    /// connection pool and TLS setup, while each keeps its own key, pacer and counters.
    /// The transport's timeouts apply, not `config`'s.
    pub fn with_transport(config: ClientConfig, transport: &Transport) -> Result<Self, ApiError> {
        let mut base = config.base_url.clone();
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let mut auth = HeaderValue::from_str(&format!("Bearer {}", config.api_key.expose()))
            .map_err(|_| ApiError::Setup("the API key is not a valid header value".into()))?;
        auth.set_sensitive(true);
        let pacer = Pacer::shared(base.as_str(), &config.api_key, config.pacing.clone());
        let memory = config.pacing_memory.map(MemoryFile::new);
        if let Some(remembered) = memory.as_ref().and_then(MemoryFile::read) {
            pacer.restore(&remembered);
        }
        Ok(Client {
            inner: Arc::new(Inner {
                transport: transport.clone(),
                base,
                auth,
                pacer,
                retry: config.retry,
                metrics: Metrics::default(),
                max_body: config.max_body_bytes,
                memory,
                budget: config.max_requests.map(|max| (max, AtomicU64::new(0))),
                budget_spent: CancellationToken::new(),
                in_flight: watch::Sender::new(0),
            }),
            stop: None,
        })
    }

    /// This client, whose waits (for the pacer, between retries) end with
    /// [`ApiError::Interrupted`] once `stop` is raised. A request already sent is not cut off.
    pub fn with_stop(&self, stop: CancellationToken) -> Client {
        Client { inner: self.inner.clone(), stop: Some(stop) }
    }

    /// A stop that follows `stop` once none of this client's requests is in flight. Give `stop`
    /// to the client ([`Client::with_stop`]) and the returned one to the code that awaits its
    /// requests (an extract's crawl): a stop then ends the waits for the pacer and starts no new
    /// request, while the requests already sent are answered (or time out) and handed over
    /// before that code sees the stop.
    ///
    /// The returned stop also follows `stop` when `stop` is cancelled after the code is done, so
    /// cancel it (or let the process end) to end the watcher.
    pub fn stop_after_in_flight(&self, stop: CancellationToken) -> CancellationToken {
        let after = CancellationToken::new();
        let mut in_flight = self.inner.in_flight.subscribe();
        let raise = after.clone();
        tokio::spawn(async move {
            stop.cancelled().await;
            let _ = in_flight.wait_for(|n| *n == 0).await;
            raise.cancel();
        });
        after
    }

    /// `error` (a stop or a spent budget), once none of this client's other requests is in
    /// flight: a caller that stops at the first error has the answers of those requests first.
    async fn after_in_flight(&self, error: ApiError) -> ApiError {
        let mut in_flight = self.inner.in_flight.subscribe();
        let _ = in_flight.wait_for(|n| *n == 0).await;
        error
    }

    /// Counters of every request this client and its clones made.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.inner.metrics.snapshot()
    }

    pub(crate) fn pacer(&self) -> &Pacer {
        &self.inner.pacer
    }

    pub fn base_url(&self) -> &Url {
        &self.inner.base
    }

    /// `GET /campaign_applications`: one page of applications, newest first. A `meta` whose
    /// `page_count` disagrees with its `row_count` and page size is a protocol error.
    pub async fn list_applications(&self, q: &ApplicationsQuery) -> Result<Fetched<ApplicationsPage>, ApiError> {
        if q.page < 1 || q.per_page < 1 || q.per_page > MAX_APPLICATIONS_PER_PAGE {
            return Err(ApiError::InvalidRequest(format!(
                "page must be at least 1 and per_page between 1 and {MAX_APPLICATIONS_PER_PAGE}"
            )));
        }
        let mut query = vec![("status".to_owned(), q.status.to_string())];
        if let Some(c) = q.campaign_id {
            query.push(("campaign_id".into(), c.to_string()));
        }
        query.push(("page".into(), q.page.to_string()));
        query.push(("per_page".into(), q.per_page.to_string()));
        let fetched: Fetched<ApplicationsPage> =
            self.execute(Endpoint::ListApplications, "campaign_applications", query).await?;
        if let Err(reason) = check_page(&fetched.value, q.per_page) {
            return Err(ApiError::Protocol { url: self.url(&fetched.path, &fetched.query)?.to_string(), reason });
        }
        Ok(fetched)
    }

    /// `GET /stats/content_24h_data` for the days `start..=end` (dates sent as MM/DD/YYYY).
    pub async fn content_24h(
        &self,
        start: NaiveDate,
        end: NaiveDate,
        limit: u32,
    ) -> Result<Fetched<Content24hResponse>, ApiError> {
        let query = vec![
            ("start_date".to_owned(), start.format("%m/%d/%Y").to_string()),
            ("end_date".to_owned(), end.format("%m/%d/%Y").to_string()),
            ("limit".to_owned(), limit.to_string()),
        ];
        self.execute(Endpoint::Content24h, "stats/content_24h_data", query).await
    }

    /// `PATCH /affiliate_sales/{id}` with only the fields set in `update`. Any 2xx ends it.
    pub async fn update_sale(&self, id: i64, update: &SaleUpdate) -> Result<Written<SaleEnvelope>, WriteError> {
        let body = serde_json::to_vec(update)
            .map_err(|e| WriteError { error: ApiError::InvalidRequest(e.to_string()), in_doubt: false })?;
        let path = format!("affiliate_sales/{id}");
        self.execute_write(Endpoint::UpdateSale, Method::PATCH, &path, body).await
    }

    /// `POST /stats/mark_credit_payout`; "already paid externally" is a success.
    pub async fn mark_credit_payout(&self, uuid: &str) -> Result<MarkOutcome, WriteError> {
        let body = serde_json::to_vec(&MarkPayoutRequest { creator_payout_uuid: uuid.to_owned() })
            .map_err(|e| WriteError { error: ApiError::InvalidRequest(e.to_string()), in_doubt: false })?;
        match self.execute_write(Endpoint::MarkCreditPayout, Method::POST, "stats/mark_credit_payout", body).await {
            Ok(w) => Ok(MarkOutcome::Marked(Box::new(w))),
            Err(WriteError { error, in_doubt }) if is_already_paid(&error) => Ok(MarkOutcome::AlreadyPaid {
                status: error.status().unwrap_or_default(),
                message: error.server_message().unwrap_or_default().to_owned(),
                resent: in_doubt,
            }),
            Err(e) => Err(e),
        }
    }

    /// `GET /stats/creator_payouts` (dates sent as YYYY-MM-DD).
    pub async fn list_creator_payouts(&self, q: &PayoutsQuery) -> Result<Fetched<PayoutsPage>, ApiError> {
        let mut query = vec![
            ("start_date".to_owned(), q.start_date.format("%Y-%m-%d").to_string()),
            ("end_date".to_owned(), q.end_date.format("%Y-%m-%d").to_string()),
        ];
        if q.credits_only {
            query.push(("credits_only".into(), "true".into()));
        }
        if let Some(s) = &q.status {
            query.push(("status".into(), s.clone()));
        }
        if let Some(c) = q.campaign_id {
            query.push(("campaign_id".into(), c.to_string()));
        }
        if let Some(c) = q.creator_id {
            query.push(("creator_id".into(), c.to_string()));
        }
        query.push(("page".into(), q.page.max(1).to_string()));
        query.push(("per_page".into(), q.per_page.clamp(1, MAX_PAYOUTS_PER_PAGE).to_string()));
        self.execute(Endpoint::ListCreatorPayouts, "stats/creator_payouts", query).await
    }

    /// Sends a read (a `GET`) with pacing and retries, and decodes the answer; a 2xx whose body
    /// is not the expected JSON is retried.
    async fn execute<T: DeserializeOwned>(
        &self,
        endpoint: Endpoint,
        path: &str,
        query: Vec<(String, String)>,
    ) -> Result<Fetched<T>, ApiError> {
        let request = Request { endpoint, method: Method::GET, path, query, body: None, write: false };
        let accepted = self.attempts::<T>(&request).await.result?;
        let Fetched { value, raw, status, endpoint, path, query, received_at, attempts } = accepted.fetched;
        match value {
            Some(value) => Ok(Fetched { value, raw, status, endpoint, path, query, received_at, attempts }),
            None => Err(ApiError::InvalidRequest("a read ended without a decoded answer".into())),
        }
    }

    /// Sends a write with pacing and retries. The first 2xx ends it, decoded or not. An attempt
    /// whose answer was lost (transport error, 5xx) makes the write *in doubt*; it is sent
    /// again, which the API's writes allow: the same sale update leaves the same sale, and a
    /// second payout mark is refused as "already paid". The caller reads the re-send's answer
    /// knowing that ([`Written::resent`], [`WriteError::in_doubt`]).
    async fn execute_write<T: DeserializeOwned>(
        &self,
        endpoint: Endpoint,
        method: Method,
        path: &str,
        body: Vec<u8>,
    ) -> Result<Written<T>, WriteError> {
        let request = Request { endpoint, method, path, query: vec![], body: Some(body), write: true };
        let Attempts { result, lost } = self.attempts::<T>(&request).await;
        match result {
            Ok(Accepted { fetched, unreadable }) => Ok(Written {
                status: fetched.status,
                value: fetched.value,
                unreadable,
                raw: fetched.raw,
                attempts: fetched.attempts,
                resent: lost,
            }),
            Err(error) => Err(WriteError { error, in_doubt: lost }),
        }
    }

    /// The URL of a request: `path` under the base URL, with the query (which never holds the key).
    fn url(&self, path: &str, query: &[(String, String)]) -> Result<Url, ApiError> {
        let mut url = self.inner.base.join(path).map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query.iter());
        }
        Ok(url)
    }

    /// Waits for `wait` unless a stop is requested first.
    async fn interruptible<F: std::future::Future>(&self, wait: F, url: &str) -> Result<F::Output, ApiError> {
        match &self.stop {
            None => Ok(wait.await),
            Some(stop) => tokio::select! {
                v = wait => Ok(v),
                _ = stop.cancelled() => Err(ApiError::Interrupted { url: url.to_owned() }),
            },
        }
    }

    /// The attempts of one request: each is dispatched, sent, recorded and judged, until the
    /// judgement accepts the answer or gives up.
    async fn attempts<T: DeserializeOwned>(&self, request: &Request<'_>) -> Attempts<T> {
        let inner = &*self.inner;
        let url = match self.url(request.path, &request.query) {
            Ok(u) => u,
            Err(e) => return Attempts { result: Err(e), lost: false },
        };
        let shown = url.to_string();
        let span =
            tracing::debug_span!("request", endpoint = request.endpoint.name(), method = %request.method, url = %shown);
        let _guard = span.enter();
        let started = Instant::now();
        let mut lost = false;
        let mut number = 0;
        loop {
            number += 1;
            let (dispatch, flight) = match self.dispatch(request.endpoint, &shown).await {
                Ok(d) => d,
                Err(e) => return Attempts { result: Err(e), lost },
            };
            let body = request.body.as_deref();
            let outcome =
                inner.transport.send(&inner.auth, &request.method, &url, body, request.write, inner.max_body).await;
            self.record(request, &dispatch, &outcome, number);
            let attempt = Attempt {
                method: &request.method,
                url: &shown,
                write: request.write,
                number,
                elapsed: started.elapsed(),
                max_body: inner.max_body,
                now: Utc::now(),
            };
            let judgement = judge::<T>(&inner.retry, &attempt, outcome.as_ref().map_err(String::as_str));
            drop(flight);
            lost |= judgement.lost;
            if let Some(wait) = judgement.block_for {
                inner.pacer.block_for(wait);
            }
            if judgement.widen_margin {
                inner.pacer.widen_margin();
            }
            match judgement.verdict {
                Verdict::Accept(decoded) => {
                    let Ok(answer) = outcome else { unreachable!("only an answer that arrived is accepted") };
                    let (value, unreadable) = match decoded {
                        Ok(value) => (Some(value), None),
                        Err(reason) => (None, Some(reason)),
                    };
                    let fetched = Fetched {
                        value,
                        raw: answer.raw,
                        status: answer.status,
                        endpoint: request.endpoint,
                        path: request.path.to_owned(),
                        query: request.query.clone(),
                        received_at: Utc::now(),
                        attempts: number,
                    };
                    return Attempts { result: Ok(Accepted { fetched, unreadable }), lost };
                }
                Verdict::Fail(error) => return Attempts { result: Err(error), lost },
                Verdict::Retry { sleep, resume_in, why } => {
                    tracing::warn!(
                        endpoint = request.endpoint.name(),
                        attempt = number,
                        retry_in_ms = resume_in.as_millis() as u64,
                        error = %why,
                        "retrying"
                    );
                    // The retry would be refused by a spent budget: it fails now, not after a
                    // backoff that may last until a 429's reset.
                    if let Some(spent) = self.spent_budget(&shown) {
                        return Attempts { result: Err(self.after_in_flight(spent).await), lost };
                    }
                    inner.metrics.retry(sleep);
                    if let Err(e) = self.interruptible(tokio::time::sleep(sleep), &shown).await {
                        return Attempts { result: Err(self.after_in_flight(e).await), lost };
                    }
                }
            }
        }
    }

    /// The error of a request budget already spent, if it is.
    fn spent_budget(&self, shown: &str) -> Option<ApiError> {
        let (max, used) = self.inner.budget.as_ref()?;
        (used.load(Ordering::SeqCst) >= *max).then(|| ApiError::BudgetSpent { url: shown.to_owned(), max: *max })
    }

    /// Starts an attempt: waits for the pacer's slot, counts it against the request budget, and
    /// counts it in flight; keeps the pacer's memory before it goes out (a process killed right
    /// after sending still leaves it). A stop or a spent budget sends nothing.
    async fn dispatch(&self, endpoint: Endpoint, shown: &str) -> Result<(Dispatch, InFlight<'_>), ApiError> {
        let inner = &*self.inner;
        let spent = |max: u64| ApiError::BudgetSpent { url: shown.to_owned(), max };
        // A spent budget sends nothing and waits for nothing.
        if let Some(spent) = self.spent_budget(shown) {
            return Err(self.after_in_flight(spent).await);
        }
        let acquire = self.interruptible(inner.pacer.acquire(endpoint.class()), shown);
        let dispatch = match &inner.budget {
            None => acquire.await,
            // Waiting for a slot is not spending the budget: once other requests have spent it,
            // the wait ends (it may be for an hourly cap's window).
            Some((max, _)) => tokio::select! {
                d = acquire => d,
                _ = inner.budget_spent.cancelled() => Err(spent(*max)),
            },
        };
        let dispatch = match dispatch {
            Ok(d) => d,
            Err(e) => return Err(self.after_in_flight(e).await),
        };
        // Counted against the budget once it has its slot; the request that takes the last unit
        // ends the others' waits.
        if let Some((max, used)) = &inner.budget {
            let n = used.fetch_add(1, Ordering::SeqCst);
            if n + 1 >= *max {
                inner.budget_spent.cancel();
            }
            if n >= *max {
                tracing::debug!(max, "request budget spent");
                inner.pacer.refused(&dispatch);
                inner.pacer.unanswered(&dispatch);
                return Err(self.after_in_flight(spent(*max)).await);
            }
        }
        // In flight from here until its answer is read. A stop raised before this point sends
        // nothing: a waiter for the requests in flight ([`Client::stop_after_in_flight`])
        // either counts this one or was preceded by the stop that this check sees.
        let flight = InFlight::start(&inner.in_flight);
        if self.stop.as_ref().is_some_and(CancellationToken::is_cancelled) {
            // Nothing goes out: the slot and its cap-window place are given back.
            inner.pacer.refused(&dispatch);
            inner.pacer.unanswered(&dispatch);
            drop(flight);
            return Err(self.after_in_flight(ApiError::Interrupted { url: shown.to_owned() }).await);
        }
        inner.metrics.paced(dispatch.waited);
        self.remember();
        Ok((dispatch, flight))
    }

    /// Tells the pacer, the counters and the debug log what an attempt got back.
    fn record(&self, request: &Request<'_>, dispatch: &Dispatch, outcome: &Result<Answer, String>, number: u32) {
        let inner = &*self.inner;
        let name = request.endpoint.name();
        let sent = request.body.as_ref().map_or(0, Vec::len);
        let elapsed_ms = dispatch.at.elapsed().as_millis() as u64;
        match outcome {
            Err(reason) => {
                if inner.pacer.unanswered(dispatch) {
                    self.remember();
                }
                inner.metrics.response(name, None, sent, 0);
                tracing::debug!(attempt = number, elapsed_ms, %reason, "transport error");
            }
            Ok(answer) => {
                if inner.pacer.answered(dispatch, name, answer.headers_at - dispatch.at) {
                    // The next process counts mark spacing from this answer.
                    self.remember();
                }
                inner.metrics.response(name, Some(answer.status), sent, answer.raw.len());
                tracing::debug!(
                    attempt = number,
                    status = answer.status,
                    bytes = answer.raw.len(),
                    elapsed_ms,
                    "response"
                );
                if answer.status == 429 {
                    // The service did not count it: it leaves the cap window.
                    inner.pacer.refused(dispatch);
                }
            }
        }
    }

    /// Keeps the pacer's memory for the next process, when the client keeps one.
    fn remember(&self) {
        if let Some(memory) = &self.inner.memory {
            memory.keep(|| self.inner.pacer.memory());
        }
    }
}
