//! The HTTP client: one `reqwest::Client`, paced, with retries decided in one place.
//!
//! Every operation goes through [`Client::execute`], which
//! 1. waits for a slot from the shared [`Pacer`],
//! 2. sends once, reads the whole body and decodes it into the expected type,
//! 3. classifies the outcome: success; retryable (429, 5xx, timeouts, connection errors, a body
//!    that is not the JSON it should be); or final (401, 403, 404, 422 and other 4xx),
//! 4. on a retryable outcome waits (exponential backoff with jitter, or for a 429 as long as the
//!    server asks, whichever of `Retry-After`, `retry_after` and `reset_time` is longest) and
//!    tries again, up to `max_attempts` and within the overall deadline.
//!
//! Writes are retried too: the update is idempotent (the same body twice leaves the same sale),
//! and a repeated payout mark is answered "already paid", which [`Client::mark_credit_payout`]
//! reports as [`MarkOutcome::AlreadyPaid`].
//!
//! The key travels only in the `Authorization` header, marked sensitive. URLs in errors and logs
//! carry the path and query, which never hold the key.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, NaiveDate, Utc};
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER, USER_AGENT};
use reqwest::{Method, Url};
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::error::{snippet, ApiError};
use super::key::ApiKey;
use super::metrics::{Metrics, MetricsSnapshot};
use super::models::*;
use super::pacing::{Pacer, PacingConfig, PacingMemory, RequestClass};
use tokio::sync::watch;

/// The real service's base URL (VENDOR_NOTES).
pub const DEFAULT_BASE_URL: &str = "https://api.growi.io/api/public/v1";

/// Largest page the applications list serves.
pub const MAX_APPLICATIONS_PER_PAGE: u32 = 100;
/// Largest page the payouts list serves.
pub const MAX_PAYOUTS_PER_PAGE: u32 = 40;
/// `limit` that asks the statistics endpoint for every day of the range.
pub const CONTENT_LIMIT_ALL: u32 = 10_000;

/// How failures are retried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts per request, the first included.
    pub max_attempts: u32,
    /// No retry starts once this much time has passed since the first attempt.
    pub deadline: Duration,
    /// First backoff; doubles per attempt, with jitter, up to `max_backoff`.
    pub base_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 6,
            // Long enough to sit out one hourly-cap reset.
            deadline: Duration::from_secs(65 * 60),
            base_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The backoff before attempt `attempt + 1`: half fixed, half random ("equal jitter").
    fn backoff(&self, attempt: u32) -> Duration {
        let exp = self.base_backoff.saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
        let capped = exp.min(self.max_backoff);
        let half = capped / 2;
        half + half.mul_f64(fastrand::f64())
    }
}

/// Everything needed to talk to the service.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    pub base_url: Url,
    pub api_key: ApiKey,
    pub pacing: PacingConfig,
    pub retry: RetryPolicy,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    /// Largest response body read ([`MAX_BODY_BYTES`]).
    pub max_body_bytes: usize,
    /// A file that keeps the pacer's memory between processes ([`ClientConfig::pacing_memory_in`]).
    pub pacing_memory: Option<PathBuf>,
    /// Send at most this many requests (retries included); later ones end with
    /// [`ApiError::Interrupted`], as a stop does ([`Client::budget_spent`]).
    pub max_requests: Option<u64>,
}

impl ClientConfig {
    /// Keeps the pacer's memory (latest request, latest payout mark, cap window) in `dir`, one
    /// file per service and key, so that the next process on this key keeps the service's rules
    /// from where this one stopped. The service is its base URL without a trailing slash, as
    /// the client uses it with or without one.
    pub fn pacing_memory_in(mut self, dir: &Path) -> Self {
        let service = self.base_url.as_str().trim_end_matches('/');
        let id = super::key::fnv1a(format!("{service}|{}", self.api_key.fingerprint()).as_bytes());
        self.pacing_memory = Some(dir.join(format!("pacing-{id:08x}.json")));
        self
    }

    pub fn new(base_url: Url, api_key: ApiKey) -> Self {
        ClientConfig {
            base_url,
            api_key,
            pacing: PacingConfig::default(),
            retry: RetryPolicy::default(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            max_body_bytes: MAX_BODY_BYTES,
            pacing_memory: None,
            max_requests: None,
        }
    }
}

/// The operations of the API, as named in counters and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    ListApplications,
    Content24h,
    UpdateSale,
    MarkCreditPayout,
    ListCreatorPayouts,
}

impl Endpoint {
    pub fn name(self) -> &'static str {
        match self {
            Endpoint::ListApplications => "list_applications",
            Endpoint::Content24h => "content_24h",
            Endpoint::UpdateSale => "update_sale",
            Endpoint::MarkCreditPayout => "mark_credit_payout",
            Endpoint::ListCreatorPayouts => "list_creator_payouts",
        }
    }

    fn class(self) -> RequestClass {
        match self {
            Endpoint::MarkCreditPayout => RequestClass::MarkPayout,
            _ => RequestClass::General,
        }
    }
}

/// A decoded response together with what was received, for raw landing and diagnosis.
#[derive(Clone, Debug)]
pub struct Fetched<T> {
    pub value: T,
    /// The body exactly as received.
    pub raw: Bytes,
    pub status: u16,
    pub endpoint: Endpoint,
    /// Path relative to the base URL, e.g. `campaign_applications`.
    pub path: String,
    /// Query parameters as sent (the key is never among them).
    pub query: Vec<(String, String)>,
    pub received_at: DateTime<Utc>,
    pub attempts: u32,
}

/// Query of `GET /campaign_applications`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplicationsQuery {
    pub status: ApplicationStatus,
    pub campaign_id: Option<i64>,
    pub page: u64,
    pub per_page: u32,
}

impl ApplicationsQuery {
    /// Page `page` of a status, 100 rows a page.
    pub fn page(status: ApplicationStatus, page: u64) -> Self {
        ApplicationsQuery { status, campaign_id: None, page, per_page: MAX_APPLICATIONS_PER_PAGE }
    }
}

/// Query of `GET /stats/creator_payouts`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PayoutsQuery {
    pub start_date: NaiveDate,
    pub end_date: NaiveDate,
    pub credits_only: bool,
    /// Snake-case status, e.g. `due`.
    pub status: Option<String>,
    pub campaign_id: Option<i64>,
    pub creator_id: Option<i64>,
    pub page: u64,
    /// At most 40; larger values are lowered to 40.
    pub per_page: u32,
}

/// What a payout mark achieved.
#[derive(Clone, Debug)]
pub enum MarkOutcome {
    /// The service answered 2xx: the payout is now paid externally.
    Marked(Box<Written<MarkPayoutResponse>>),
    /// It already was: the service refused with "current status is paid_externally", which the
    /// contract says to treat as a successful no-op. `resent` says an earlier attempt of this
    /// request got no answer: then the earlier attempt is what marked it.
    AlreadyPaid { status: u16, message: String, resent: bool },
}

/// The answer to a write (`PATCH`, `POST`) that the service accepted: any 2xx ends its retries,
/// whatever its body, because the write took effect.
#[derive(Clone, Debug)]
pub struct Written<T> {
    pub status: u16,
    /// The decoded body; `None` when it was not the expected JSON or was cut short.
    pub value: Option<T>,
    /// Why the body could not be read or decoded, when it could not.
    pub unreadable: Option<String>,
    /// The body as received (possibly cut short).
    pub raw: Bytes,
    pub attempts: u32,
    /// An earlier attempt got no answer (a lost connection or a 5xx): this answer is to a re-send.
    pub resent: bool,
}

/// A write that the service did not accept, and whether it may have taken effect anyway.
#[derive(Debug)]
pub struct WriteError {
    pub error: ApiError,
    /// Some attempt's answer was lost (the connection failed or a 5xx came back): the service may
    /// have applied the write before the failure.
    pub in_doubt: bool,
}

/// Largest response body the client reads (16 MiB). The API's biggest answers, 100 applications
/// or a 3,650-day statistics window, are well under 2 MiB.
pub const MAX_BODY_BYTES: usize = 16 << 20;

/// Largest `row_count` the client believes (10 million applications): a larger one would have
/// the crawl plan more pages than any organization has.
pub const MAX_ROW_COUNT: u64 = 10_000_000;

struct Inner {
    /// Reads: follows redirects (cross-host ones drop the `Authorization` header).
    http: reqwest::Client,
    /// Writes: never follows a redirect, so a write is sent only where it was addressed.
    http_write: reqwest::Client,
    base: Url,
    auth: HeaderValue,
    pacer: Arc<Pacer>,
    retry: RetryPolicy,
    metrics: Metrics,
    max_body: usize,
    /// Where the pacer's memory is kept between processes, and a lock that orders its writes.
    memory_file: Option<PathBuf>,
    memory_lock: Mutex<()>,
    /// At most this many requests (attempts), and how many were started.
    budget: Option<(u64, AtomicU64)>,
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

/// HTTP connection pools for reads and writes, shareable by many [`Client`]s.
#[derive(Clone, Debug)]
pub struct Transport {
    http: reqwest::Client,
    http_write: reqwest::Client,
}

impl Transport {
    pub fn new(connect_timeout: Duration, request_timeout: Duration) -> Result<Self, ApiError> {
        let builder = || reqwest::Client::builder().connect_timeout(connect_timeout).timeout(request_timeout);
        let http = builder().build().map_err(|e| ApiError::Setup(e.to_string()))?;
        let http_write = builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ApiError::Setup(e.to_string()))?;
        Ok(Transport { http, http_write })
    }
}

/// The API client. Cheap to clone; clones share the connection pool, pacer and counters.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    /// A stop request (Ctrl-C) that interrupts waiting for the pacer or a backoff.
    stop: Option<watch::Receiver<bool>>,
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

/// One attempt's failure, and whether another attempt may fix it.
struct Failure {
    error: ApiError,
    retryable: bool,
    /// Set for a 429, or a 5xx with `Retry-After`: the pacer already blocks for this long, so no
    /// extra backoff is added.
    server_wait: Option<Duration>,
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

/// Resolves when a stop (Ctrl-C, SIGTERM) is requested; never when the sender is gone.
pub async fn stopped(mut rx: watch::Receiver<bool>) {
    loop {
        if *rx.borrow_and_update() {
            return;
        }
        if rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
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
        let (http, http_write) = (transport.http.clone(), transport.http_write.clone());
        let pacer = Pacer::shared(base.as_str(), &config.api_key, config.pacing.clone());
        if let Some(memory) = config.pacing_memory.as_deref().and_then(read_memory) {
            pacer.restore(&memory);
        }
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                http_write,
                base,
                auth,
                pacer,
                retry: config.retry,
                metrics: Metrics::default(),
                max_body: config.max_body_bytes,
                memory_file: config.pacing_memory,
                memory_lock: Mutex::new(()),
                budget: config.max_requests.map(|max| (max, AtomicU64::new(0))),
                in_flight: watch::Sender::new(0),
            }),
            stop: None,
        })
    }

    /// This client, whose waits (for the pacer, between retries) end with
    /// [`ApiError::Interrupted`] once `stop` is raised. A request already sent is not cut off.
    pub fn with_stop(&self, stop: watch::Receiver<bool>) -> Client {
        Client { inner: self.inner.clone(), stop: Some(stop) }
    }

    /// A stop that follows `stop` once none of this client's requests is in flight. Give `stop`
    /// to the client ([`Client::with_stop`]) and the returned one to the code that awaits its
    /// requests (an extract's crawl): a stop then ends the waits for the pacer and starts no new
    /// request, while the requests already sent are answered (or time out) and handed over
    /// before that code sees the stop.
    pub fn stop_after_in_flight(&self, stop: watch::Receiver<bool>) -> watch::Receiver<bool> {
        let (tx, rx) = watch::channel(false);
        let mut in_flight = self.inner.in_flight.subscribe();
        tokio::spawn(async move {
            tokio::select! {
                _ = stopped(stop) => {}
                // Nobody listens any more.
                _ = tx.closed() => return,
            }
            tokio::select! {
                _ = in_flight.wait_for(|n| *n == 0) => {}
                _ = tx.closed() => return,
            }
            let _ = tx.send(true);
        });
        rx
    }

    /// `error` (an interruption), once none of this client's other requests is in flight: a
    /// caller that stops at the first error has the answers of those requests first.
    async fn after_in_flight(&self, error: ApiError) -> ApiError {
        let mut in_flight = self.inner.in_flight.subscribe();
        let _ = in_flight.wait_for(|n| *n == 0).await;
        error
    }

    /// Whether a request was refused because `max_requests` were sent.
    pub fn budget_spent(&self) -> bool {
        self.inner.budget.as_ref().is_some_and(|(max, used)| used.load(Ordering::SeqCst) > *max)
    }

    /// Counters of every request this client and its clones made.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.inner.metrics.snapshot()
    }

    pub fn pacer(&self) -> &Pacer {
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
            self.execute(Endpoint::ListApplications, Method::GET, "campaign_applications", query, None).await?;
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
        self.execute(Endpoint::Content24h, Method::GET, "stats/content_24h_data", query, None).await
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
        self.execute(Endpoint::ListCreatorPayouts, Method::GET, "stats/creator_payouts", query, None).await
    }

    /// Sends a read with pacing and retries, and decodes the answer; a 2xx whose body is not the
    /// expected JSON is retried.
    async fn execute<T: DeserializeOwned>(
        &self,
        endpoint: Endpoint,
        method: Method,
        path: &str,
        query: Vec<(String, String)>,
        body: Option<Vec<u8>>,
    ) -> Result<Fetched<T>, ApiError> {
        let accepted = self.attempts::<T>(endpoint, method, path, query, body, false).await.result?;
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
        let Attempts { result, lost } = self.attempts::<T>(endpoint, method, path, vec![], Some(body), true).await;
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
            Some(rx) => tokio::select! {
                v = wait => Ok(v),
                _ = stopped(rx.clone()) => Err(ApiError::Interrupted { url: url.to_owned() }),
            },
        }
    }

    /// Keeps the pacer's memory for the next process, before the request goes out (a process
    /// killed right after sending still leaves it). Failing to keep it is logged, not fatal.
    fn remember(&self) {
        let Some(path) = &self.inner.memory_file else { return };
        let _order = self.inner.memory_lock.lock().unwrap_or_else(|e| e.into_inner());
        let memory = self.inner.pacer.memory();
        let write = || -> std::io::Result<()> {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
            std::fs::write(&tmp, serde_json::to_vec(&memory).unwrap_or_default())?;
            std::fs::rename(&tmp, path)
        };
        if let Err(e) = write() {
            tracing::warn!(path = %path.display(), error = %e, "cannot keep the pacing state for the next run");
        }
    }

    /// The attempts of one request: pacing, sending, classifying and retrying.
    async fn attempts<T: DeserializeOwned>(
        &self,
        endpoint: Endpoint,
        method: Method,
        path: &str,
        query: Vec<(String, String)>,
        body: Option<Vec<u8>>,
        write: bool,
    ) -> Attempts<T> {
        let inner = &*self.inner;
        let url = match self.url(path, &query) {
            Ok(u) => u,
            Err(e) => return Attempts { result: Err(e), lost: false },
        };
        let shown = url.to_string();
        let span = tracing::debug_span!("request", endpoint = endpoint.name(), method = %method, url = %shown);
        let _guard = span.enter();
        let started = Instant::now();
        let policy = &inner.retry;
        let mut attempt = 0u32;
        let mut lost = false;
        loop {
            attempt += 1;
            if let Some((max, used)) = &inner.budget {
                if used.fetch_add(1, Ordering::SeqCst) >= *max {
                    tracing::debug!(max, "request budget spent");
                    let error = self.after_in_flight(ApiError::Interrupted { url: shown.clone() }).await;
                    return Attempts { result: Err(error), lost };
                }
            }
            let dispatch = match self.interruptible(inner.pacer.acquire(endpoint.class()), &shown).await {
                Ok(d) => d,
                Err(e) => return Attempts { result: Err(self.after_in_flight(e).await), lost },
            };
            // In flight from here until its answer is read. A stop raised before this point sends
            // nothing: a waiter for the requests in flight ([`Client::stop_after_in_flight`])
            // either counts this one or was preceded by the stop that this check sees.
            let flight = InFlight::start(&inner.in_flight);
            if self.stop.as_ref().is_some_and(|stop| *stop.borrow()) {
                // Nothing goes out: the slot and its cap-window place are given back.
                inner.pacer.refused(&dispatch);
                inner.pacer.unanswered(&dispatch);
                drop(flight);
                let error = self.after_in_flight(ApiError::Interrupted { url: shown.clone() }).await;
                return Attempts { result: Err(error), lost };
            }
            inner.metrics.paced(dispatch.waited);
            self.remember();
            let sent_at = dispatch.at;
            let outcome = self.send_once(&method, &url, body.as_deref(), write).await;
            let sent = body.as_ref().map_or(0, Vec::len);
            let failure = match outcome {
                Err(e) => {
                    if inner.pacer.unanswered(&dispatch) {
                        self.remember();
                    }
                    inner.metrics.response(endpoint.name(), None, sent, 0);
                    let reason = transport_reason(&e);
                    tracing::debug!(attempt, elapsed_ms = sent_at.elapsed().as_millis() as u64, %reason, "transport error");
                    lost |= write;
                    Failure {
                        error: ApiError::Transport { url: shown.clone(), attempts: attempt, reason },
                        retryable: true,
                        server_wait: None,
                    }
                }
                Ok(Answer { status, headers, raw, cut, headers_at }) => {
                    if inner.pacer.answered(&dispatch, endpoint.name(), headers_at - dispatch.at) {
                        // The next process counts mark spacing from this answer.
                        self.remember();
                    }
                    inner.metrics.response(endpoint.name(), Some(status), sent, raw.len());
                    tracing::debug!(
                        attempt,
                        status,
                        bytes = raw.len(),
                        elapsed_ms = sent_at.elapsed().as_millis() as u64,
                        "response"
                    );
                    if status == 429 {
                        inner.pacer.refused(&dispatch);
                    }
                    let accepted = (200..300).contains(&status);
                    match &cut {
                        // A body cut short is a lost answer, unless it is a write's 2xx (the write
                        // took effect): a read is asked again, and a refusal's garbled message
                        // cannot be read, so a write is sent again too.
                        Some(BodyCut::Interrupted(reason)) if !(write && accepted) => {
                            lost |= write;
                            let reason = format!("the {status} answer's body was cut short: {reason}");
                            let error = ApiError::Transport { url: shown.clone(), attempts: attempt, reason };
                            Failure { error, retryable: true, server_wait: None }
                        }
                        Some(BodyCut::TooLarge) if !write => {
                            let error = ApiError::TooLarge { url: shown, limit: inner.max_body };
                            return Attempts { result: Err(error), lost };
                        }
                        _ if accepted => {
                            let decoded = match &cut {
                                Some(c) => Err(c.describe(inner.max_body)),
                                None => serde_json::from_slice::<T>(&raw).map_err(|e| e.to_string()),
                            };
                            let accepted = |value: Option<T>, unreadable: Option<String>, raw: Bytes| Attempts {
                                result: Ok(Accepted {
                                    fetched: Fetched {
                                        value,
                                        raw,
                                        status,
                                        endpoint,
                                        path: path.to_owned(),
                                        query: query.clone(),
                                        received_at: Utc::now(),
                                        attempts: attempt,
                                    },
                                    unreadable,
                                }),
                                lost,
                            };
                            match decoded {
                                Ok(value) => return accepted(Some(value), None, raw),
                                // The write took effect: its answer only failed to arrive whole.
                                Err(reason) if write => return accepted(None, Some(reason), raw),
                                Err(reason) => Failure {
                                    error: ApiError::Decode {
                                        url: shown.clone(),
                                        status,
                                        attempts: attempt,
                                        reason,
                                        snippet: snippet(&raw, 120),
                                    },
                                    retryable: true,
                                    server_wait: None,
                                },
                            }
                        }
                        _ => {
                            lost |= write && status >= 500;
                            match self.classify(&method, &shown, status, &headers, &raw, attempt) {
                                Ok(f) => f,
                                Err(e) => return Attempts { result: Err(e), lost },
                            }
                        }
                    }
                }
            };
            drop(flight);
            if !failure.retryable || attempt >= policy.max_attempts {
                return Attempts { result: Err(failure.error), lost };
            }
            let delay = if failure.server_wait.is_some() { Duration::ZERO } else { policy.backoff(attempt) };
            let resume_in = delay.max(failure.server_wait.unwrap_or_default());
            if started.elapsed() + resume_in > policy.deadline {
                let error = ApiError::Deadline {
                    url: shown,
                    attempts: attempt,
                    deadline_s: policy.deadline.as_secs(),
                    last: failure.error.to_string(),
                };
                return Attempts { result: Err(error), lost };
            }
            tracing::warn!(
                endpoint = endpoint.name(),
                attempt,
                retry_in_ms = resume_in.as_millis() as u64,
                error = %failure.error,
                "retrying"
            );
            inner.metrics.retry(delay);
            if let Err(e) = self.interruptible(tokio::time::sleep(delay), &shown).await {
                return Attempts { result: Err(self.after_in_flight(e).await), lost };
            }
        }
    }

    /// Maps a non-2xx answer to a final error or a retryable failure.
    fn classify(
        &self,
        method: &Method,
        url: &str,
        status: u16,
        headers: &HeaderMap,
        raw: &[u8],
        attempt: u32,
    ) -> Result<Failure, ApiError> {
        let body: ErrorBody = serde_json::from_slice(raw).unwrap_or_default();
        let message = body.text().unwrap_or_else(|| {
            let s = snippet(raw, 120);
            if s.trim().is_empty() {
                reqwest::StatusCode::from_u16(status)
                    .ok()
                    .and_then(|s| s.canonical_reason())
                    .unwrap_or("no message")
                    .to_owned()
            } else {
                s
            }
        });
        let url = url.to_owned();
        match status {
            401 => Err(ApiError::Unauthorized { url, message }),
            403 => Err(ApiError::Forbidden { method: method.to_string(), url, message }),
            404 => Err(ApiError::NotFound { url, message }),
            422 => Err(ApiError::Unprocessable { url, message }),
            429 => {
                let wait = rate_limit_wait(headers, &body, Utc::now());
                self.inner.pacer.block_for(wait);
                if body.reset_time.is_none() {
                    // Not the hourly cap: the spacing rule, which the pacer meant to keep.
                    self.inner.pacer.widen_margin();
                }
                Ok(Failure {
                    error: ApiError::RateLimited { url, attempts: attempt, message },
                    retryable: true,
                    server_wait: Some(wait),
                })
            }
            s if s >= 500 => {
                // A 503 (or any 5xx) that says when to come back is honoured like a 429.
                let server_wait = server_wait_hint(headers, &body, Utc::now()).map(|w| w + WAIT_MARGIN);
                if let Some(wait) = server_wait {
                    self.inner.pacer.block_for(wait);
                }
                Ok(Failure {
                    error: ApiError::Server { url, status, attempts: attempt, message },
                    retryable: true,
                    server_wait,
                })
            }
            300..=399 => Err(ApiError::Redirected {
                method: method.to_string(),
                url,
                status,
                location: headers
                    .get(reqwest::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("nowhere")
                    .chars()
                    .take(200)
                    .collect(),
            }),
            _ => Err(ApiError::Rejected { url, status, message }),
        }
    }

    /// One attempt. `Err` when no answer (status line) arrived; a body cut short after the status
    /// is an [`Answer`] with [`Answer::cut`] set.
    async fn send_once(
        &self,
        method: &Method,
        url: &Url,
        body: Option<&[u8]>,
        write: bool,
    ) -> Result<Answer, reqwest::Error> {
        let inner = &*self.inner;
        let http = if write { &inner.http_write } else { &inner.http };
        let mut req = http
            .request(method.clone(), url.clone())
            .header(AUTHORIZATION, inner.auth.clone())
            .header(ACCEPT, "application/json")
            // The service's own usage example sends it on GETs too.
            .header(CONTENT_TYPE, "application/json")
            .header(USER_AGENT, concat!("creator-etl/", env!("CARGO_PKG_VERSION")));
        if let Some(b) = body {
            req = req.body(b.to_vec());
        }
        let mut resp = req.send().await?;
        let headers_at = Instant::now();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let limit = inner.max_body;
        let mut raw = bytes::BytesMut::new();
        let mut cut = None;
        if resp.content_length().is_some_and(|n| n > limit as u64) {
            cut = Some(BodyCut::TooLarge);
        } else {
            loop {
                match resp.chunk().await {
                    Ok(Some(chunk)) if raw.len() + chunk.len() > limit => {
                        raw.extend_from_slice(&chunk[..limit - raw.len()]);
                        cut = Some(BodyCut::TooLarge);
                        break;
                    }
                    Ok(Some(chunk)) => raw.extend_from_slice(&chunk),
                    Ok(None) => break,
                    Err(e) => {
                        cut = Some(BodyCut::Interrupted(transport_reason(&e)));
                        break;
                    }
                }
            }
        }
        Ok(Answer { status, headers, raw: raw.freeze(), cut, headers_at })
    }
}

/// An HTTP answer as received, and when its headers arrived (for the pacer).
struct Answer {
    status: u16,
    headers: HeaderMap,
    raw: Bytes,
    /// Why the body is not whole, when it is not.
    cut: Option<BodyCut>,
    headers_at: Instant,
}

/// Why an answer's body is incomplete.
enum BodyCut {
    /// The connection failed after the status line.
    Interrupted(String),
    /// It is larger than the client reads.
    TooLarge,
}

impl BodyCut {
    fn describe(&self, limit: usize) -> String {
        match self {
            BodyCut::Interrupted(reason) => format!("the body was cut short: {reason}"),
            BodyCut::TooLarge => format!("the body is larger than the {limit}-byte limit"),
        }
    }
}

/// Checks a page's `meta` against itself and the request: the page count must follow from the
/// row count and the page size, and the page must not hold more rows than its size.
fn check_page(page: &ApplicationsPage, asked_per_page: u32) -> Result<(), String> {
    let m = &page.meta;
    let per_page = m.per_page.unwrap_or(u64::from(asked_per_page));
    if per_page == 0 || per_page > u64::from(MAX_APPLICATIONS_PER_PAGE) {
        return Err(format!("`per_page` {per_page} is outside 1..={MAX_APPLICATIONS_PER_PAGE}"));
    }
    if m.row_count > MAX_ROW_COUNT {
        return Err(format!("`row_count` {} is above the {MAX_ROW_COUNT} this client believes", m.row_count));
    }
    let expected = m.row_count.div_ceil(per_page);
    // An empty list may be reported as one empty page.
    if m.page_count != expected && !(m.row_count == 0 && m.page_count == 1) {
        return Err(format!(
            "`page_count` {} disagrees with `row_count` {} at `per_page` {per_page} (expected {expected})",
            m.page_count, m.row_count
        ));
    }
    if page.data.len() as u64 > per_page {
        return Err(format!("the page holds {} rows, more than `per_page` {per_page}", page.data.len()));
    }
    Ok(())
}

/// Reads a pacer memory file; a missing or unreadable one is no memory.
fn read_memory(path: &Path) -> Option<PacingMemory> {
    let bytes = std::fs::read(path).ok()?;
    match serde_json::from_slice(&bytes) {
        Ok(m) => Some(m),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "ignoring an unreadable pacing state file");
            None
        }
    }
}

fn is_already_paid(e: &ApiError) -> bool {
    let four_xx = e.status().is_some_and(|s| (400..500).contains(&s) && s != 401 && s != 403 && s != 429);
    four_xx && e.server_message().is_some_and(|m| m.to_ascii_lowercase().contains("current status is paid_externally"))
}

/// The error and its causes, without the URL (already in the message) and never the headers.
fn transport_reason(e: &reqwest::Error) -> String {
    let mut parts = vec![];
    if e.is_timeout() {
        parts.push("timed out".to_owned());
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        parts.push(s.to_string());
        source = s.source();
    }
    if parts.is_empty() {
        parts.push(if e.is_body() { "response body interrupted".into() } else { "request failed".into() });
    }
    parts.dedup();
    parts.join(": ")
}

/// Added to a wait the server asked for: servers round to whole seconds, so a retry is never
/// sooner than allowed.
const WAIT_MARGIN: Duration = Duration::from_millis(50);

/// How long the server asked us to wait, if it said: the longest of the `Retry-After` header
/// (seconds or an HTTP date), the body's `retry_after` and `reset_time`, at most a day.
fn server_wait_hint(headers: &HeaderMap, body: &ErrorBody, now: DateTime<Utc>) -> Option<Duration> {
    let mut secs: Option<f64> = None;
    let mut take = |s: f64| {
        if s.is_finite() && s >= 0.0 {
            secs = Some(secs.map_or(s, |c: f64| c.max(s)));
        }
    };
    if let Some(v) = headers.get(RETRY_AFTER).and_then(|v| v.to_str().ok()) {
        let v = v.trim();
        if let Ok(n) = v.parse::<f64>() {
            take(n);
        } else if let Ok(t) = DateTime::parse_from_rfc2822(v) {
            take((t.with_timezone(&Utc) - now).num_milliseconds() as f64 / 1000.0);
        }
    }
    if let Some(n) = body.retry_after {
        take(n);
    }
    if let Some(t) = body.reset_time.as_deref().and_then(|t| DateTime::parse_from_rfc3339(t).ok()) {
        take((t.with_timezone(&Utc) - now).num_milliseconds() as f64 / 1000.0);
    }
    secs.map(|s| Duration::from_secs_f64(s.min(24.0 * 3600.0)))
}

/// How long a 429 asks us to wait: what the server said ([`server_wait_hint`]), or 2 s when it
/// said nothing, plus a small margin.
pub fn rate_limit_wait(headers: &HeaderMap, body: &ErrorBody, now: DateTime<Utc>) -> Duration {
    server_wait_hint(headers, body, now).unwrap_or(Duration::from_secs(2)) + WAIT_MARGIN
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limit_wait_takes_the_longest_ask() {
        let now = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").unwrap().with_timezone(&Utc);
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static("3"));
        let body = ErrorBody { retry_after: Some(2.0), ..Default::default() };
        assert_eq!(rate_limit_wait(&h, &body, now), Duration::from_millis(3050));
        let body =
            ErrorBody { retry_after: Some(2.0), reset_time: Some("2026-01-01T00:10:00Z".into()), ..Default::default() };
        assert_eq!(rate_limit_wait(&h, &body, now), Duration::from_millis(600_050));
        h.insert(RETRY_AFTER, HeaderValue::from_static("Thu, 01 Jan 2026 00:20:00 GMT"));
        assert_eq!(rate_limit_wait(&h, &body, now), Duration::from_millis(1_200_050));
        assert_eq!(rate_limit_wait(&HeaderMap::new(), &ErrorBody::default(), now), Duration::from_millis(2050));
    }

    #[test]
    fn the_pacing_file_is_one_per_service_with_or_without_a_trailing_slash() {
        let key = ApiKey::new("k-1", "test").unwrap();
        let file = |url: &str| {
            ClientConfig::new(url.parse().unwrap(), key.clone())
                .pacing_memory_in(Path::new("/s"))
                .pacing_memory
                .unwrap()
        };
        assert_eq!(file("http://h:1/api/v1"), file("http://h:1/api/v1/"));
        assert_eq!(file("http://h:1"), file("http://h:1/"));
        assert_ne!(file("http://h:1/api/v1"), file("http://h:1/api/v2"));
        // The default service keeps the file name it always had.
        let old = crate::api::fnv1a(format!("{DEFAULT_BASE_URL}|{}", key.fingerprint()).as_bytes());
        assert_eq!(file(DEFAULT_BASE_URL), Path::new("/s").join(format!("pacing-{old:08x}.json")));
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RetryPolicy::default();
        for attempt in 1..10 {
            let b = p.backoff(attempt);
            assert!(b <= p.max_backoff);
            assert!(b >= (p.base_backoff * (1 << (attempt - 1))).min(p.max_backoff) / 2);
        }
    }

    #[test]
    fn already_paid_is_recognised_on_any_4xx() {
        let e = ApiError::Unprocessable {
            url: "u".into(),
            message: "Cannot mark payout as paid: current status is paid_externally".into(),
        };
        assert!(is_already_paid(&e));
        let e = ApiError::Rejected { url: "u".into(), status: 400, message: "current status is due".into() };
        assert!(!is_already_paid(&e));
    }
}
