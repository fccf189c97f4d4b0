//! Client-side pacing: keep to the service's rate policy instead of discovering it through 429s.
//!
//! The service limits the whole API per key: a minimum spacing between requests (documented as
//! 2 s), an hourly cap (documented default 40), and never more than one payout mark per 2 s. A
//! [`Pacer`] hands out *slots*: each caller reserves the earliest instant that keeps every rule,
//! then sleeps until it. Reservations are made under one lock, so concurrent requests queue in
//! order and the spacing holds however many tasks share the client.
//!
//! Pacers are shared per (base URL, key): every [`Client`](super::Client) built for the same
//! service and key, and every clone of one, draws from the same pacer ([`Pacer::shared`]).
//!
//! Caveat: the service measures spacing at arrival, the client at dispatch. Two requests sent
//! exactly one interval apart arrive closer than that when the first one is held up on the way
//! (a busy machine, a slow connection setup) and the second is not. Three things keep that from
//! costing a 429:
//! - a fixed margin: 1/50 of the interval, between 1 ms and 25 ms (for the cap window 1/50 of it,
//!   between 50 ms and 10 s), for the usual scheduling jitter;
//! - the previous request's own delay: a request can only have arrived before its answer began,
//!   so when an answer comes back slower than half the fastest one seen for that endpoint (the
//!   way back; for an endpoint's first answer, of any endpoint; the very first answer counts
//!   whole), the next request waits that excess instead of the margin, up to 1/5 of the
//!   interval, and for short intervals up to the interval, at most 250 ms (`max_extra`,
//!   [`Pacer::answered`]). Until the latest request answers, or when it fails without an
//!   answer, the next one keeps all of it: it costs nothing while answers come back within the
//!   interval;
//! - with [`PacingConfig::wait_for_answers`] (fleets), no estimate at all: the next request goes
//!   the interval after the latest one's answer, which the service sent after admitting it;
//! - a 429 that slips through anyway is honoured by the retry layer, which blocks the pacer for
//!   as long as the server asks, and, when it was for spacing, widens the margin
//!   ([`Pacer::widen_margin`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use chrono::Utc;
use tokio::time::Instant;

use super::key::ApiKey;
use super::memory::PacingMemory;

/// The service never accepts payout marks closer together than this, whatever the API-wide rule.
pub const MARK_PAYOUT_MIN_INTERVAL: Duration = Duration::from_millis(2000);

/// Documented defaults of the real service.
pub const DEFAULT_MIN_INTERVAL: Duration = Duration::from_millis(2000);
pub const DEFAULT_HOURLY_CAP: u32 = 40;
pub const DEFAULT_CAP_WINDOW: Duration = Duration::from_secs(3600);

/// Waits longer than this are logged once, with the time the client resumes.
const LONG_WAIT: Duration = Duration::from_secs(60);

/// The rate policy the client keeps to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacingConfig {
    /// Minimum time between two requests with the same key; zero disables spacing.
    pub min_interval: Duration,
    /// At most this many requests per `cap_window`; `None` disables the client-side cap.
    pub hourly_cap: Option<u32>,
    /// Length of the cap's window (an hour on the real service).
    pub cap_window: Duration,
    /// Space each request from the previous one's *answer* instead of estimating when it
    /// arrived: the service admitted it before answering, so no lateness anywhere can make two
    /// requests arrive closer than the interval. It costs one round trip per request while the
    /// spacing binds. Fleets use it: thousands of organizations on one machine make it late.
    pub wait_for_answers: bool,
}

impl Default for PacingConfig {
    fn default() -> Self {
        PacingConfig {
            min_interval: DEFAULT_MIN_INTERVAL,
            hourly_cap: Some(DEFAULT_HOURLY_CAP),
            cap_window: DEFAULT_CAP_WINDOW,
            wait_for_answers: false,
        }
    }
}

impl PacingConfig {
    /// No client-side limits at all (tests and benchmarks against an unlimited emulator).
    pub fn unlimited() -> Self {
        PacingConfig {
            min_interval: Duration::ZERO,
            hourly_cap: None,
            cap_window: DEFAULT_CAP_WINDOW,
            wait_for_answers: false,
        }
    }
}

/// Which spacing rules a request is subject to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RequestClass {
    General,
    /// `POST /stats/mark_credit_payout`: also at least [`MARK_PAYOUT_MIN_INTERVAL`] apart.
    MarkPayout,
}

#[derive(Debug, Default)]
struct State {
    /// Latest reserved start (slots are handed out after it).
    last_start: Option<Instant>,
    last_mark: Option<Instant>,
    /// Actual dispatch times, which can be later than their slots when a task wakes late.
    last_dispatch: Option<Instant>,
    last_mark_dispatch: Option<Instant>,
    blocked_until: Option<Instant>,
    /// Reserved starts inside the current cap window, oldest first.
    window: VecDeque<Instant>,
    /// Spacing 429s seen: each widens the spacing margin (see [`Pacer::widen_margin`]).
    widened: u32,
    /// How much slower than the fastest answer of its endpoint the latest dispatched request
    /// answered (capped): the next request keeps at least this much beyond the interval.
    extra: Duration,
    /// The latest dispatched request has no answer yet: it may still be on its way, so the next
    /// one keeps the largest extra until it answers.
    pending: bool,
    /// The fastest time to an answer seen per endpoint: the request's path without holdups.
    rtt_floor: HashMap<&'static str, Duration>,
}

/// A request slot that was granted: when the request went out, and how long it waited for that.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dispatch {
    pub at: Instant,
    pub waited: Duration,
    /// The cap-window slot it took (see [`Pacer::refused`]).
    slot: Option<Instant>,
}

/// Why a slot was as late as it was; used only to explain long waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reason {
    None,
    Spacing,
    MarkSpacing,
    ServerAsked,
    HourlyCap,
}

impl Reason {
    fn as_str(self) -> &'static str {
        match self {
            Reason::None => "none",
            Reason::Spacing => "request spacing",
            Reason::MarkSpacing => "payout-mark spacing",
            Reason::ServerAsked => "the service asked to wait (429)",
            Reason::HourlyCap => "hourly request cap",
        }
    }
}

/// Hands out request slots that keep a [`PacingConfig`].
#[derive(Debug)]
pub(crate) struct Pacer {
    config: PacingConfig,
    state: Mutex<State>,
    /// Wakes waiting requests when an answer arrives: it may let them go sooner.
    answers: tokio::sync::Notify,
}

/// Safety added to a cap window: the service starts its window when the first request *arrives*,
/// which can be a connection setup later than the client reserved it.
fn cap_margin(window: Duration) -> Duration {
    (window / 50).clamp(Duration::from_millis(50), Duration::from_secs(10))
}

fn margin(interval: Duration) -> Duration {
    if interval.is_zero() {
        return Duration::ZERO;
    }
    (interval / 50).clamp(Duration::from_millis(1), Duration::from_millis(25))
}

/// Removes one entry equal to `t` from the cap window.
fn remove_one(window: &mut VecDeque<Instant>, t: Instant) {
    if let Some(i) = window.iter().position(|w| *w == t) {
        window.remove(i);
    }
}

/// The API-wide spacing margin after `widened` spacing 429s.
fn spacing_margin(interval: Duration, widened: u32) -> Duration {
    margin(interval) + interval / 50 * widened.min(MAX_WIDENINGS)
}

/// How many spacing 429s widen the margin: each adds 1/50 of the interval, so at most 1/10 more.
const MAX_WIDENINGS: u32 = 4;

/// The most a slow answer can add to the next gap: 1/5 of the interval, and for short intervals
/// up to the interval itself, at most [`LATENESS`]. How late a request reaches the service on a
/// busy machine or path is absolute time, not a share of the interval: at a 100 ms policy, 1/5
/// (20 ms) is less than one scheduling delay of a machine whose cores are busy loading.
fn max_extra(interval: Duration) -> Duration {
    (interval / 5).max(interval.min(LATENESS))
}

/// With [`PacingConfig::wait_for_answers`], the longest the next request waits for the latest
/// one's answer beyond the interval: an answer that never comes (its task was dropped) does not
/// hold the key for longer.
const ANSWER_WAIT: Duration = Duration::from_secs(15);

/// Lateness a short interval absorbs in full (see [`max_extra`]).
const LATENESS: Duration = Duration::from_millis(250);

impl Pacer {
    pub fn new(config: PacingConfig) -> Self {
        Pacer { config, state: Mutex::new(State::default()), answers: tokio::sync::Notify::new() }
    }

    /// The pacer for this service and key, shared with every client that uses them. Keys are
    /// told apart by the keys themselves (in memory only): two keys with one fingerprint have
    /// two budgets.
    pub fn shared(base_url: &str, key: &ApiKey, config: PacingConfig) -> Arc<Pacer> {
        type Registry = Mutex<HashMap<(String, ApiKey), Weak<Pacer>>>;
        static REGISTRY: OnceLock<Registry> = OnceLock::new();
        let registry = REGISTRY.get_or_init(Default::default);
        let mut map = registry.lock().unwrap_or_else(|e| e.into_inner());
        // Dropped pacers are swept when the map doubles, not on every call: a fleet builds
        // thousands of clients, and a sweep per client would cost the square of their number.
        if map.len() >= 64 && map.len().is_power_of_two() {
            map.retain(|_, w| w.strong_count() > 0);
        }
        let id = (base_url.to_owned(), key.clone());
        if let Some(existing) = map.get(&id).and_then(Weak::upgrade) {
            if existing.config == config {
                return existing;
            }
        }
        let pacer = Arc::new(Pacer::new(config));
        map.insert(id, Arc::downgrade(&pacer));
        pacer
    }

    pub fn config(&self) -> &PacingConfig {
        &self.config
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserves the earliest slot that keeps every rule and records it. `replacing` is a slot the
    /// same request reserved before and gives up: it leaves the cap window, so a request that
    /// reserves again (after a 429 blocked the key) still counts once.
    fn reserve(
        &self,
        st: &mut State,
        now: Instant,
        class: RequestClass,
        replacing: Option<Instant>,
    ) -> (Instant, Reason) {
        if let Some(old) = replacing {
            remove_one(&mut st.window, old);
        }
        let cfg = &self.config;
        let mut slot = now;
        let mut reason = Reason::None;
        let mut later = |candidate: Instant, why: Reason, slot: &mut Instant| {
            if candidate > *slot {
                *slot = candidate;
                reason = why;
            }
        };
        if let Some(b) = st.blocked_until {
            later(b, Reason::ServerAsked, &mut slot);
        }
        if let Some(last) = st.last_start {
            if !cfg.min_interval.is_zero() {
                later(
                    last + cfg.min_interval + spacing_margin(cfg.min_interval, st.widened),
                    Reason::Spacing,
                    &mut slot,
                );
            }
        }
        if class == RequestClass::MarkPayout {
            if let Some(last) = st.last_mark {
                let gap = MARK_PAYOUT_MIN_INTERVAL;
                later(last + gap + margin(gap), Reason::MarkSpacing, &mut slot);
            }
        }
        if let Some(cap) = cfg.hourly_cap.filter(|c| *c > 0) {
            let cap = cap as usize;
            if st.window.len() >= cap {
                let nth_latest = st.window[st.window.len() - cap];
                later(nth_latest + cfg.cap_window + cap_margin(cfg.cap_window), Reason::HourlyCap, &mut slot);
            }
            while st.window.front().is_some_and(|t| *t + cfg.cap_window <= slot) {
                st.window.pop_front();
            }
            st.window.push_back(slot);
        }
        st.last_start = Some(st.last_start.map_or(slot, |l| l.max(slot)));
        if class == RequestClass::MarkPayout {
            st.last_mark = Some(st.last_mark.map_or(slot, |l| l.max(slot)));
        }
        (slot, reason)
    }

    /// Waits until a request of this class may go out, and says when it did.
    pub async fn acquire(&self, class: RequestClass) -> Dispatch {
        let started = Instant::now();
        let counted = self.config.hourly_cap.is_some_and(|c| c > 0);
        let mut reserved: Option<Instant> = None;
        loop {
            let (slot, reason) = {
                let mut st = self.lock();
                self.reserve(&mut st, Instant::now(), class, reserved.take())
            };
            reserved = counted.then_some(slot);
            let wait = slot.saturating_duration_since(Instant::now());
            if wait >= LONG_WAIT {
                let resume = Utc::now() + chrono::Duration::from_std(wait).unwrap_or_default();
                tracing::warn!(
                    wait_s = wait.as_secs(),
                    resume_at = %resume.format("%Y-%m-%dT%H:%M:%SZ"),
                    reason = reason.as_str(),
                    "waiting before the next request"
                );
            }
            let mut wake = slot;
            loop {
                // Registered before the state is read again, so no answer is missed.
                let answer = self.answers.notified();
                tokio::pin!(answer);
                answer.as_mut().enable();
                tokio::select! {
                    _ = tokio::time::sleep_until(wake) => {}
                    _ = &mut answer => {}
                }
                let mut st = self.lock();
                let now = Instant::now();
                // A 429 seen by another task while we slept may have blocked the key for longer.
                if st.blocked_until.is_some_and(|b| b > now) {
                    break;
                }
                // The previous request may have gone out later than its slot (its task woke late):
                // keep the spacing from when it actually went.
                let earliest = self.earliest_after_dispatch(&st, class).map_or(slot, |e| e.max(slot));
                if earliest > now {
                    wake = earliest;
                    continue;
                }
                if st.last_dispatch.is_none_or(|l| now > l) {
                    st.last_dispatch = Some(now);
                    st.extra = Duration::ZERO;
                    st.pending = !self.config.min_interval.is_zero();
                }
                st.last_start = Some(st.last_start.map_or(now, |l| l.max(now)));
                if class == RequestClass::MarkPayout {
                    st.last_mark_dispatch = Some(now);
                    st.last_mark = Some(st.last_mark.map_or(now, |l| l.max(now)));
                }
                return Dispatch { at: now, waited: now.duration_since(started), slot: reserved };
            }
        }
    }

    /// The earliest instant the spacing rules allow, counted from actual dispatches.
    fn earliest_after_dispatch(&self, st: &State, class: RequestClass) -> Option<Instant> {
        let cfg = &self.config;
        let general = st.last_dispatch.filter(|_| !cfg.min_interval.is_zero()).map(|d| {
            let extra = match (st.pending, cfg.wait_for_answers) {
                (true, true) => ANSWER_WAIT,
                (true, false) => max_extra(cfg.min_interval),
                (false, _) => st.extra,
            };
            d + cfg.min_interval + spacing_margin(cfg.min_interval, st.widened).max(extra)
        });
        let mark = st
            .last_mark_dispatch
            .filter(|_| class == RequestClass::MarkPayout)
            .map(|d| d + MARK_PAYOUT_MIN_INTERVAL + margin(MARK_PAYOUT_MIN_INTERVAL));
        general.max(mark)
    }

    /// The answer to a request of `endpoint` dispatched at `dispatch` began to arrive `rtt` later.
    ///
    /// The request reached the service at most `rtt` after it went out; on a path without holdups
    /// it takes about the fastest `rtt` seen for the endpoint. When this was the latest request
    /// sent, the excess is how much later than usual it may have arrived, so the next request
    /// keeps that much (at most `max_extra`) beyond the interval instead of the margin.
    /// Only the latest request matters: the one after an older one has already gone out. Until
    /// the latest request answers, the next one keeps all of `max_extra`; this wakes it when the
    /// answer allows it to go sooner.
    ///
    /// A payout mark's spacing counts from its answer instead of its dispatch: the service saw
    /// it at some moment in between, so the next mark is 2 s after it whatever the delays. True
    /// when that moved the [`memory`](Pacer::memory), which a caller that keeps it saves again.
    pub fn answered(&self, dispatch: &Dispatch, endpoint: &'static str, rtt: Duration) -> bool {
        let mut st = self.lock();
        let moved = Self::mark_seen_by(&mut st, dispatch, dispatch.at + rtt);
        if self.config.min_interval.is_zero() {
            return moved;
        }
        // An endpoint's first answer is compared with the fastest of any endpoint, and the very
        // first answer with nothing: it may have waited for a connection to be set up.
        let floor = st.rtt_floor.get(endpoint).or_else(|| st.rtt_floor.values().min()).copied();
        // Of the fastest round trip, only the way back (about half) is surely after the
        // request arrived; the way out may have been as late as the rest of it.
        let excess = floor.map_or(rtt, |f| rtt.saturating_sub(f / 2));
        st.rtt_floor.entry(endpoint).and_modify(|f| *f = (*f).min(rtt)).or_insert(rtt);
        if st.last_dispatch == Some(dispatch.at) {
            st.extra = if self.config.wait_for_answers { rtt } else { excess.min(max_extra(self.config.min_interval)) };
            st.pending = false;
            drop(st);
            self.answers.notify_waiters();
        }
        moved
    }

    /// The request dispatched at `dispatch` got no answer (a transport error): it may have
    /// arrived at any time, so the next one keeps the largest extra. True as for
    /// [`answered`](Pacer::answered).
    pub fn unanswered(&self, dispatch: &Dispatch) -> bool {
        let mut st = self.lock();
        let moved = Self::mark_seen_by(&mut st, dispatch, Instant::now());
        if st.last_dispatch == Some(dispatch.at) {
            st.extra = if self.config.wait_for_answers {
                // It arrived, if at all, before now.
                Instant::now().saturating_duration_since(dispatch.at)
            } else {
                max_extra(self.config.min_interval)
            };
            st.pending = false;
        }
        moved
    }

    /// When `dispatch` was the latest payout mark, the service had it by `by` at the latest;
    /// true when so.
    fn mark_seen_by(st: &mut State, dispatch: &Dispatch, by: Instant) -> bool {
        let latest = st.last_mark_dispatch == Some(dispatch.at);
        if latest {
            st.last_mark_dispatch = Some(by);
            st.last_mark = st.last_mark.max(Some(by));
        }
        latest
    }

    /// The service refused the request of `dispatch` with a 429: it did not count it, so it
    /// leaves the cap window and takes no slot of the hourly budget (its retry takes its own).
    pub fn refused(&self, dispatch: &Dispatch) {
        if let Some(slot) = dispatch.slot {
            remove_one(&mut self.lock().window, slot);
        }
    }

    /// What a later process needs to keep spacing, mark spacing and the cap window from where
    /// this one is: wall-clock times of the latest dispatches.
    pub fn memory(&self) -> PacingMemory {
        let st = self.lock();
        let now = Instant::now();
        let wall = Utc::now().timestamp_millis();
        let ms = |t: Instant| wall - now.saturating_duration_since(t).as_millis() as i64;
        PacingMemory {
            last_request_ms: st.last_dispatch.map(ms),
            last_mark_ms: st.last_mark_dispatch.map(ms),
            window_ms: st.window.iter().filter(|t| **t <= now).map(|t| ms(*t)).collect(),
        }
    }

    /// Starts from what an earlier process remembered ([`Pacer::memory`]), so that its last
    /// request, its last payout mark and its cap window count for this one. Times in the future
    /// (a clock that went back) count as now; times older than the rules care about are dropped.
    pub fn restore(&self, memory: &PacingMemory) {
        let now = Instant::now();
        let wall = Utc::now().timestamp_millis();
        let horizon = self.config.cap_window.max(self.config.min_interval).max(MARK_PAYOUT_MIN_INTERVAL);
        let at = |ms: i64| {
            let ago = Duration::from_millis(wall.saturating_sub(ms).max(0) as u64);
            (ago <= horizon).then(|| now.checked_sub(ago).unwrap_or(now))
        };
        let mut st = self.lock();
        let later = |mine: Option<Instant>, theirs: Option<Instant>| mine.max(theirs);
        let last = memory.last_request_ms.and_then(at);
        st.last_dispatch = later(st.last_dispatch, last);
        st.last_start = later(st.last_start, last);
        let mark = memory.last_mark_ms.and_then(at);
        st.last_mark_dispatch = later(st.last_mark_dispatch, mark);
        st.last_mark = later(st.last_mark, mark);
        if self.config.hourly_cap.is_some_and(|c| c > 0) {
            let mut window: Vec<Instant> = memory.window_ms.iter().filter_map(|ms| at(*ms)).collect();
            window.extend(st.window.iter().copied());
            window.sort();
            st.window = window.into();
        }
    }

    /// The server refused a request for spacing although the pacer kept it: its clock or its
    /// path adds more jitter than the margin absorbs. Each call widens the margin by 1/50 of the
    /// interval, at most four times (so by 1/10 in all), for the rest of the process.
    pub fn widen_margin(&self) {
        let mut st = self.lock();
        if st.widened < MAX_WIDENINGS && !self.config.min_interval.is_zero() {
            st.widened += 1;
            tracing::info!(
                margin_ms = spacing_margin(self.config.min_interval, st.widened).as_millis() as u64,
                "the service refused a request for spacing; widening the pacing margin"
            );
        }
    }

    /// Blocks every request on this pacer for `wait` from now (the server answered 429).
    pub fn block_for(&self, wait: Duration) {
        let until = Instant::now() + wait;
        let mut st = self.lock();
        st.blocked_until = Some(st.blocked_until.map_or(until, |b| b.max(until)));
    }
}

#[cfg(test)]
mod tests;
