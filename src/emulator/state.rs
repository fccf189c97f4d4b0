//! The emulator's live state: the data, the rate policy per key, fault and drift dice, and a
//! record of everything clients did (request counts, writes, rate-limit violations, drift events)
//! for tests to assert on.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;
use tokio::time::Instant;

use super::data::{self, Dataset, StoredPayout, StoredSale, MAIN_ORG};
pub use super::store::{DriftEvent, Store};
use crate::api::models::{Application, ApplicationStatus};
use crate::api::MARK_PAYOUT_MIN_INTERVAL;

/// Who is calling, decided from the bearer key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Caller {
    pub org: u32,
    pub read_only: bool,
    /// `full`, `read_only` or `other_org`: how logs and records name the key.
    pub role: &'static str,
}

/// The emulator's three keys.
#[derive(Clone, Debug)]
pub struct Keys {
    pub full: String,
    pub read_only: String,
    pub other_org: String,
}

impl Default for Keys {
    fn default() -> Self {
        Keys {
            full: "emu-full-key".into(),
            read_only: "emu-read-only-key".into(),
            other_org: "emu-other-org-key".into(),
        }
    }
}

/// The rate policy the emulator enforces, per key.
#[derive(Clone, Debug)]
pub struct RatePolicy {
    /// API-wide spacing; zero disables it.
    pub min_interval: Duration,
    /// Requests allowed per window; `None` disables the cap.
    pub hourly_cap: Option<u32>,
    pub cap_window: Duration,
}

/// How a numbered organization's key differs from the emulator's own policy.
#[derive(Clone, Debug, Default)]
pub struct OrgPolicy {
    /// Its own rate policy instead of the emulator's.
    pub rate: Option<RatePolicy>,
    /// Its own fault rate (the kinds stay the emulator's).
    pub fault_rate: Option<f64>,
    /// The key was revoked: 401, as for an unknown key.
    pub revoked: bool,
    /// Content windows report a `total` one more than the sum of their days: a data-quality
    /// finding for the load (fatal under `--strict`).
    pub skewed_totals: bool,
    /// A new organization without content statistics yet: every content window answers both
    /// series as `[]`.
    pub no_content: bool,
}

/// Injected failures.
#[derive(Clone, Debug, Default)]
pub struct FaultConfig {
    /// Probability that an authenticated request gets a fault instead of a clean answer.
    pub rate: f64,
    /// How long a "slow" fault delays the answer.
    pub slow: Duration,
    /// Restrict the dice to these kinds (tests force one kind); empty means all kinds.
    pub kinds: Vec<Fault>,
    /// How a [`Fault::LostAnswer`] may lose the answer; empty means all three ways.
    pub lost: Vec<LostKind>,
}

/// A fault the emulator injected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// 500 with an HTML error page.
    ServerErrorHtml,
    /// 503 with a JSON error.
    Unavailable,
    /// 429 with a `Retry-After: 1` header.
    TooManyRequests,
    /// The normal answer, after a delay.
    Slow,
    /// Headers and half the body, then the connection is dropped.
    ClosedMidBody,
    /// A 200 whose JSON body is cut short.
    TruncatedJson,
    /// Content statistics only: a valid answer with days missing.
    ShortSeries,
    /// Writes only: the write is applied, then its answer is lost: the connection drops before
    /// the status line, a proxy answers 502, or the 200's body is cut short.
    LostAnswer,
}

/// How a [`Fault::LostAnswer`] loses the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostKind {
    Dropped,
    BadGateway,
    CutBody,
}

/// One request as the emulator saw it.
#[derive(Clone, Debug, Serialize)]
pub struct RequestRecord {
    /// Milliseconds since the emulator started, at arrival.
    pub at_ms: f64,
    pub route: String,
    pub query: String,
    pub key: Option<&'static str>,
    /// 0 while unanswered, and for a request the client abandoned.
    pub status: u16,
    /// Milliseconds since the emulator started, when the answer was ready.
    pub done_ms: Option<f64>,
    pub fault: Option<Fault>,
}

/// A write attempt (sale update or payout mark) with its outcome.
#[derive(Clone, Debug, Serialize)]
pub struct WriteRecord {
    pub at: DateTime<Utc>,
    pub at_ms: f64,
    pub key: &'static str,
    /// `update_sale` or `mark_credit_payout`.
    pub operation: &'static str,
    /// Sale id or payout UUID.
    pub target: String,
    /// The request body as received.
    pub body: serde_json::Value,
    pub status: u16,
    /// `updated`, `marked`, or the error message.
    pub outcome: String,
    /// The sale after a successful update.
    pub sale: Option<crate::api::models::Sale>,
}

/// A request the rate policy refused.
#[derive(Clone, Debug, Serialize)]
pub struct Violation {
    pub at_ms: f64,
    pub key: &'static str,
    pub route: String,
    /// `spacing`, `mark_spacing` or `hourly_cap`.
    pub kind: &'static str,
    /// Time since the previous accepted request (spacing kinds).
    pub gap_ms: Option<f64>,
}

#[derive(Debug, Default)]
struct KeyRate {
    last_at: Option<Instant>,
    last_mark_at: Option<Instant>,
    window_start: Option<Instant>,
    window_count: u32,
}

/// A rate-limit refusal, ready to be answered with 429.
#[derive(Clone, Debug)]
pub enum RateRefusal {
    Spacing { retry_after: u64, seconds_text: String },
    Hourly { cap: u32, retry_after: u64, reset_time: DateTime<Utc> },
}

/// Everything the running emulator knows. Shared by all handlers; tests read it directly.
#[derive(Debug)]
pub struct EmulatorState {
    pub keys: Keys,
    pub rate: RatePolicy,
    pub faults: FaultConfig,
    pub latency: Duration,
    pub drift: bool,
    pub admin: bool,
    /// Numbered organizations' keys ([`data::org_key`]).
    numbered: HashMap<String, Caller>,
    /// Policies of numbered organizations that differ from the emulator's, by internal org id.
    policies: HashMap<u32, OrgPolicy>,
    started: Instant,
    store: Mutex<Store>,
    rates: Mutex<HashMap<&'static str, KeyRate>>,
    fault_rng: Mutex<fastrand::Rng>,
    /// Replaces `faults.rate` once set ([`EmulatorState::set_fault_rate`]).
    fault_rate: Mutex<Option<f64>>,
    scripted: Mutex<Scripted>,
    log: Mutex<Log>,
}

/// The main organization's list requests so far, and the moves due at a given one
/// ([`EmulatorState::move_at_list_request`]): `(request, application, status)`.
#[derive(Debug, Default)]
struct Scripted {
    list_requests: u64,
    moves: Vec<(u64, i64, ApplicationStatus)>,
    /// `(status, page, n)`: the n-th request for that page answers 500; and the requests so far
    /// per page.
    failures: Vec<(ApplicationStatus, u64, u32)>,
    per_page: HashMap<(ApplicationStatus, u64), u32>,
}

#[derive(Debug, Default)]
struct Log {
    requests: Vec<RequestRecord>,
    writes: Vec<WriteRecord>,
    violations: Vec<Violation>,
    drift: Vec<DriftEvent>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl EmulatorState {
    pub(crate) fn new(config: &super::EmulatorConfig, dataset: Dataset) -> Self {
        let seed = config.data.seed;
        // Numbered organizations' callers, named `org-<k>` in records. The names live as long as
        // the process, like the emulator; a few bytes per organization.
        let numbered = (1..=config.data.organizations)
            .map(|k| {
                let role: &'static str = Box::leak(format!("org-{k}").into_boxed_str());
                (data::org_key(k), Caller { org: data::numbered_org(k), read_only: false, role })
            })
            .collect();
        let policies = config.org_policies.iter().map(|(k, p)| (data::numbered_org(*k), p.clone())).collect();
        EmulatorState {
            keys: config.keys.clone(),
            rate: config.rate.clone(),
            faults: config.faults.clone(),
            latency: config.latency,
            drift: config.drift,
            admin: config.admin,
            numbered,
            policies,
            started: Instant::now(),
            store: Mutex::new(Store::new(dataset, seed)),
            rates: Mutex::new(HashMap::new()),
            fault_rng: Mutex::new(fastrand::Rng::with_seed(data::mix(seed ^ 0xFA17))),
            fault_rate: Mutex::new(None),
            scripted: Mutex::new(Scripted::default()),
            log: Mutex::new(Log::default()),
        }
    }

    pub(crate) fn elapsed_ms(&self) -> f64 {
        self.started.elapsed().as_secs_f64() * 1000.0
    }

    /// The data, locked. Keep the guard short: every request needs it.
    pub fn store(&self) -> MutexGuard<'_, Store> {
        lock(&self.store)
    }

    pub(crate) fn caller(&self, bearer: Option<&str>) -> Option<Caller> {
        let key = bearer?;
        if key == self.keys.full {
            Some(Caller { org: MAIN_ORG, read_only: false, role: "full" })
        } else if key == self.keys.read_only {
            Some(Caller { org: MAIN_ORG, read_only: true, role: "read_only" })
        } else if key == self.keys.other_org {
            Some(Caller { org: data::OTHER_ORG, read_only: false, role: "other_org" })
        } else {
            self.numbered.get(key).copied().filter(|c| !self.policies.get(&c.org).is_some_and(|p| p.revoked))
        }
    }

    /// Whether the organization's content totals are skewed ([`OrgPolicy::skewed_totals`]).
    pub(crate) fn skewed_totals(&self, org: u32) -> bool {
        self.policies.get(&org).is_some_and(|p| p.skewed_totals)
    }

    /// Whether the organization has no content statistics yet ([`OrgPolicy::no_content`]).
    pub(crate) fn no_content(&self, org: u32) -> bool {
        self.policies.get(&org).is_some_and(|p| p.no_content)
    }

    /// Applies the rate policy to a request arriving now; an accepted request counts.
    pub(crate) fn admit(&self, caller: &Caller, route: &str, is_mark: bool) -> Result<(), RateRefusal> {
        let policy = self.policies.get(&caller.org).and_then(|p| p.rate.as_ref()).unwrap_or(&self.rate);
        let now = Instant::now();
        let mut rates = lock(&self.rates);
        let kr = rates.entry(caller.role).or_default();
        let violation = |kind: &'static str, gap: Option<Duration>| Violation {
            at_ms: self.elapsed_ms(),
            key: caller.role,
            route: route.to_owned(),
            kind,
            gap_ms: gap.map(|g| g.as_secs_f64() * 1000.0),
        };
        if let Some(cap) = policy.hourly_cap.filter(|c| *c > 0) {
            if kr.window_start.is_none_or(|s| now >= s + policy.cap_window) {
                kr.window_start = Some(now);
                kr.window_count = 0;
            }
            if kr.window_count >= cap {
                let reset_in = (kr.window_start.unwrap_or(now) + policy.cap_window).saturating_duration_since(now);
                lock(&self.log).violations.push(violation("hourly_cap", None));
                return Err(RateRefusal::Hourly {
                    cap,
                    retry_after: reset_in.as_secs_f64().ceil() as u64,
                    reset_time: Utc::now() + chrono::Duration::from_std(reset_in).unwrap_or_default(),
                });
            }
        }
        let spacing_refusal = |interval: Duration| RateRefusal::Spacing {
            retry_after: interval.as_secs_f64().ceil().max(1.0) as u64,
            seconds_text: seconds_text(interval),
        };
        if let Some(last) = kr.last_at {
            let gap = now - last;
            if !policy.min_interval.is_zero() && gap < policy.min_interval {
                lock(&self.log).violations.push(violation("spacing", Some(gap)));
                return Err(spacing_refusal(policy.min_interval));
            }
        }
        if is_mark {
            if let Some(last) = kr.last_mark_at {
                let gap = now - last;
                if gap < MARK_PAYOUT_MIN_INTERVAL {
                    lock(&self.log).violations.push(violation("mark_spacing", Some(gap)));
                    return Err(spacing_refusal(MARK_PAYOUT_MIN_INTERVAL));
                }
            }
            kr.last_mark_at = Some(now);
        }
        kr.last_at = Some(now);
        kr.window_count += 1;
        Ok(())
    }

    /// Which way a lost answer is lost.
    pub(crate) fn roll_lost_kind(&self) -> LostKind {
        let all = [LostKind::Dropped, LostKind::BadGateway, LostKind::CutBody];
        let kinds = if self.faults.lost.is_empty() { &all[..] } else { &self.faults.lost[..] };
        kinds[lock(&self.fault_rng).usize(0..kinds.len())]
    }

    /// Rolls the fault dice for one request.
    pub(crate) fn roll_fault(&self, caller: &Caller, is_content: bool, is_write: bool) -> Option<Fault> {
        let own = self.policies.get(&caller.org).and_then(|p| p.fault_rate);
        let rate = own.unwrap_or_else(|| lock(&self.fault_rate).unwrap_or(self.faults.rate));
        if rate <= 0.0 {
            return None;
        }
        let mut rng = lock(&self.fault_rng);
        if rng.f64() >= rate {
            return None;
        }
        let kinds: &[Fault] = if is_content {
            &[
                Fault::ServerErrorHtml,
                Fault::Unavailable,
                Fault::TooManyRequests,
                Fault::Slow,
                Fault::ClosedMidBody,
                Fault::TruncatedJson,
                Fault::ShortSeries,
            ]
        } else {
            &[
                Fault::ServerErrorHtml,
                Fault::Unavailable,
                Fault::TooManyRequests,
                Fault::Slow,
                Fault::ClosedMidBody,
                Fault::TruncatedJson,
            ]
        };
        let mut kinds = kinds.to_vec();
        if is_write {
            kinds.push(Fault::LostAnswer);
        }
        let kinds: Vec<Fault> = if self.faults.kinds.is_empty() {
            kinds
        } else {
            kinds.iter().copied().filter(|k| self.faults.kinds.contains(k)).collect()
        };
        if kinds.is_empty() {
            return None;
        }
        Some(kinds[rng.usize(0..kinds.len())])
    }

    /// Changes the fault rate while serving, as a service recovers or degrades (a test knob).
    pub fn set_fault_rate(&self, rate: f64) {
        *lock(&self.fault_rate) = Some(rate);
    }

    /// Moves application `id` to `to` when the main organization's `n`-th list request arrives,
    /// before it is answered: a change at a chosen point of a crawl (a test knob).
    pub fn move_at_list_request(&self, n: u64, id: i64, to: ApplicationStatus) {
        lock(&self.scripted).moves.push((n, id, to));
    }

    /// The main organization's list requests that reached the handler so far: the count
    /// [`EmulatorState::move_at_list_request`] numbers them by.
    pub fn list_requests_seen(&self) -> u64 {
        lock(&self.scripted).list_requests
    }

    /// Answers the main organization's `n`-th request for page `page` of `status` with a 500 (a
    /// test knob: a failure at a chosen point of a crawl).
    pub fn fail_list_request(&self, status: ApplicationStatus, page: u64, n: u32) {
        lock(&self.scripted).failures.push((status, page, n));
    }

    /// Whether this request of the main organization for a page is one to fail.
    pub(crate) fn scripted_failure(&self, status: &ApplicationStatus, page: u64) -> bool {
        let mut scripted = lock(&self.scripted);
        let n = scripted.per_page.entry((status.clone(), page)).or_default();
        *n += 1;
        let n = *n;
        scripted.failures.iter().any(|(s, p, k)| s == status && *p == page && *k == n)
    }

    /// A list request of the main organization arrived: the moves due at it.
    pub(crate) fn list_request_arrived(&self, store: &mut Store) {
        let mut scripted = lock(&self.scripted);
        scripted.list_requests += 1;
        let n = scripted.list_requests;
        for (_, id, to) in scripted.moves.iter().filter(|m| m.0 == n) {
            store.set_status(*id, to.clone());
        }
    }

    pub(crate) fn drift_step(&self, store: &mut Store) {
        let events = store.drift_step(Utc::now());
        if !events.is_empty() {
            lock(&self.log).drift.extend(events);
        }
    }

    /// Records a request on arrival (status 0: not answered yet); returns its index.
    pub(crate) fn begin_request(&self, rec: RequestRecord) -> usize {
        let mut log = lock(&self.log);
        log.requests.push(rec);
        log.requests.len() - 1
    }

    /// Records the answer of a request begun with [`begin_request`](Self::begin_request).
    pub(crate) fn finish_request(&self, index: usize, status: u16, fault: Option<Fault>) {
        let now = self.elapsed_ms();
        if let Some(r) = lock(&self.log).requests.get_mut(index) {
            r.status = status;
            r.fault = fault;
            r.done_ms = Some(now);
        }
    }

    pub(crate) fn record_write(&self, rec: WriteRecord) {
        lock(&self.log).writes.push(rec);
    }

    /// Requests by `"METHOD /route STATUS"`, e.g. `GET /campaign_applications 200`. Status 0
    /// counts requests the client gave up on before the answer (a timeout).
    pub fn request_counts(&self) -> BTreeMap<String, u64> {
        let mut counts = BTreeMap::new();
        for r in &lock(&self.log).requests {
            *counts.entry(format!("{} {}", r.route, r.status)).or_default() += 1;
        }
        counts
    }

    /// Number of requests to a route (`"GET /campaign_applications"`), whatever the status.
    pub fn requests_to(&self, route: &str) -> u64 {
        lock(&self.log).requests.iter().filter(|r| r.route == route).count() as u64
    }

    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.log).requests.clone()
    }

    /// Every write attempt, in arrival order: the audit log.
    pub fn writes(&self) -> Vec<WriteRecord> {
        lock(&self.log).writes.clone()
    }

    pub fn violations(&self) -> Vec<Violation> {
        lock(&self.log).violations.clone()
    }

    pub fn drift_events(&self) -> Vec<DriftEvent> {
        lock(&self.log).drift.clone()
    }

    pub fn applications(&self, org: u32) -> Vec<Application> {
        self.store().applications(org)
    }

    /// Changes an application's status, as an operator would in the dashboard (a test knob).
    pub fn set_application_status(&self, id: i64, status: ApplicationStatus) -> bool {
        self.store().set_status(id, status)
    }

    /// Adds an application, as a creator applying would (a test knob); its id.
    pub fn add_application(&self, org: u32, status: ApplicationStatus, applied_at: DateTime<Utc>) -> i64 {
        self.store().add_application(org, status, applied_at)
    }

    /// Changes an application's monthly post count (a test knob).
    pub fn set_post_count(&self, id: i64, monthly_post_count: i64) -> bool {
        self.store().set_post_count(id, monthly_post_count)
    }

    pub fn sales(&self) -> Vec<StoredSale> {
        self.store().sales.values().cloned().collect()
    }

    pub fn payouts(&self) -> Vec<StoredPayout> {
        self.store().payouts.clone()
    }

    /// `(views, likes)` of an organization on a day, as the service reports them.
    pub fn content_day(&self, org: u32, date: NaiveDate) -> (i64, i64) {
        self.store().content.day(org, date)
    }
}

/// "2", "0.1": how the spacing message states the interval.
fn seconds_text(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{}", s as u64)
    } else {
        format!("{s}")
    }
}
