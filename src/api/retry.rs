//! The retry policy, and the judgement of one attempt: accept its answer, try again (after how
//! long, and why), or give up. Judging has no side effects; the client's loop
//! ([`Client`](super::Client)) applies what a [`Judgement`] says to the pacer and waits.
//!
//! Retryable: 429, 5xx, timeouts and connection errors, a body cut short, and a 2xx read whose
//! body is not the JSON it should be. Final: 401, 403, 404, 422, redirects and other 4xx, and a
//! read's body over the size limit. A write's 2xx is accepted whatever its body: the write took
//! effect. A retry waits an exponential backoff with jitter, or, when the service said how long
//! (a 429, or a 5xx with `Retry-After`), that long; never past `max_attempts` nor the deadline.

use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::header::{HeaderMap, LOCATION, RETRY_AFTER};
use reqwest::Method;
use serde::de::DeserializeOwned;

use super::error::{snippet, ApiError};
use super::models::ErrorBody;
use super::send::{Answer, BodyCut};

/// Attempts per request, the first included.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 6;
/// No retry starts once this much time has passed since a request's first attempt: long enough
/// to sit out one hourly-cap reset.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(65 * 60);

/// Added to a wait the server asked for: servers round to whole seconds, so a retry is never
/// sooner than allowed.
const WAIT_MARGIN: Duration = Duration::from_millis(50);

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
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            deadline: DEFAULT_DEADLINE,
            base_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The backoff before attempt `attempt + 1`: half fixed, half random ("equal jitter").
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self.base_backoff.saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
        let capped = exp.min(self.max_backoff);
        let half = capped / 2;
        half + half.mul_f64(fastrand::f64())
    }
}

/// One attempt of a request, as the judgement needs to know it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Attempt<'a> {
    pub method: &'a Method,
    /// The URL as shown in errors (it never holds the key).
    pub url: &'a str,
    /// A `PATCH` or `POST`: a 2xx ends it whatever its body, and a lost answer leaves it in doubt.
    pub write: bool,
    /// 1 for the first attempt.
    pub number: u32,
    /// Time since the first attempt started.
    pub elapsed: Duration,
    /// The body size limit the answer was read with.
    pub max_body: usize,
    /// The wall clock, for waits the server gives as a time of day.
    pub now: DateTime<Utc>,
}

/// What to do after an attempt.
#[derive(Debug)]
pub(crate) enum Verdict<T> {
    /// A 2xx: the decoded body, or, for a write only, why it could not be read.
    Accept(Result<T, String>),
    /// Try again after sleeping `sleep`; the next attempt can go `resume_in` from now (longer
    /// than `sleep` when the pacer is blocked for a wait the service asked for). `why` is this
    /// attempt's failure.
    Retry { sleep: Duration, resume_in: Duration, why: ApiError },
    /// Give up with this error.
    Fail(ApiError),
}

/// The verdict on an attempt, and what it taught about the service.
#[derive(Debug)]
pub(crate) struct Judgement<T> {
    pub verdict: Verdict<T>,
    /// A write's answer was lost (no answer, a body cut short, a 5xx): it may have taken effect.
    pub lost: bool,
    /// The service asked that no request on this key go out for this long (a 429, or a 5xx that
    /// said when to come back), whatever the verdict.
    pub block_for: Option<Duration>,
    /// A 429 for spacing, not the hourly cap: the pacer's margin was too thin.
    pub widen_margin: bool,
}

/// A failure that another attempt may get past.
struct Failure {
    error: ApiError,
    /// The wait the service asked for, for which the pacer is blocked: no backoff is added.
    server_wait: Option<Duration>,
    widen_margin: bool,
    lost: bool,
}

impl Failure {
    fn new(error: ApiError) -> Self {
        Failure { error, server_wait: None, widen_margin: false, lost: false }
    }
}

/// What an answer says, before the policy decides whether to try again.
enum Read<T> {
    Accept(Result<T, String>),
    Final(ApiError),
    Again(Failure),
}

/// Judges one attempt's outcome: its answer, or why none arrived (a transport error).
pub(crate) fn judge<T: DeserializeOwned>(
    policy: &RetryPolicy,
    at: &Attempt<'_>,
    outcome: Result<&Answer, &str>,
) -> Judgement<T> {
    let settled = |verdict| Judgement { verdict, lost: false, block_for: None, widen_margin: false };
    let read = match outcome {
        Err(reason) => Read::Again(Failure {
            lost: at.write,
            ..Failure::new(ApiError::Transport {
                url: at.url.to_owned(),
                attempts: at.number,
                reason: reason.to_owned(),
            })
        }),
        Ok(answer) => read(at, answer),
    };
    let Failure { error, server_wait, widen_margin, lost } = match read {
        Read::Accept(value) => return settled(Verdict::Accept(value)),
        Read::Final(error) => return settled(Verdict::Fail(error)),
        Read::Again(failure) => failure,
    };
    let verdict = if at.number >= policy.max_attempts {
        Verdict::Fail(error)
    } else {
        let sleep = if server_wait.is_some() { Duration::ZERO } else { policy.backoff(at.number) };
        let resume_in = sleep.max(server_wait.unwrap_or_default());
        if at.elapsed + resume_in > policy.deadline {
            Verdict::Fail(ApiError::Deadline {
                url: at.url.to_owned(),
                attempts: at.number,
                deadline_s: policy.deadline.as_secs(),
                last: error.to_string(),
            })
        } else {
            Verdict::Retry { sleep, resume_in, why: error }
        }
    };
    Judgement { verdict, lost, block_for: server_wait, widen_margin }
}

/// What an answer that arrived says.
fn read<T: DeserializeOwned>(at: &Attempt<'_>, answer: &Answer) -> Read<T> {
    let status = answer.status;
    let accepted = (200..300).contains(&status);
    match &answer.cut {
        // A body cut short is a lost answer, unless it is a write's 2xx (the write took effect):
        // a read is asked again, and a refusal's garbled message cannot be read, so a write is
        // sent again too.
        Some(BodyCut::Interrupted(reason)) if !(at.write && accepted) => {
            let reason = format!("the {status} answer's body was cut short: {reason}");
            Read::Again(Failure {
                lost: at.write,
                ..Failure::new(ApiError::Transport { url: at.url.to_owned(), attempts: at.number, reason })
            })
        }
        Some(BodyCut::TooLarge) if !at.write => {
            Read::Final(ApiError::TooLarge { url: at.url.to_owned(), limit: at.max_body })
        }
        cut if accepted => {
            let decoded = match cut {
                Some(c) => Err(c.describe(at.max_body)),
                None => serde_json::from_slice::<T>(&answer.raw).map_err(|e| e.to_string()),
            };
            match decoded {
                Ok(value) => Read::Accept(Ok(value)),
                // The write took effect: its answer only failed to arrive whole.
                Err(reason) if at.write => Read::Accept(Err(reason)),
                Err(reason) => Read::Again(Failure::new(ApiError::Decode {
                    url: at.url.to_owned(),
                    status,
                    attempts: at.number,
                    reason,
                    snippet: snippet(&answer.raw, 120),
                })),
            }
        }
        _ => refusal(at, status, &answer.headers, &answer.raw),
    }
}

/// What a non-2xx answer says: a final error, or a failure to retry.
fn refusal<T>(at: &Attempt<'_>, status: u16, headers: &HeaderMap, raw: &[u8]) -> Read<T> {
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
    let url = at.url.to_owned();
    match status {
        401 => Read::Final(ApiError::Unauthorized { url, message }),
        403 => Read::Final(ApiError::Forbidden { method: at.method.to_string(), url, message }),
        404 => Read::Final(ApiError::NotFound { url, message }),
        422 => Read::Final(ApiError::Unprocessable { url, message }),
        429 => Read::Again(Failure {
            error: ApiError::RateLimited { url, attempts: at.number, message },
            server_wait: Some(rate_limit_wait(headers, &body, at.now)),
            // Without a reset time it is not the hourly cap but the spacing rule, which the
            // pacer meant to keep.
            widen_margin: body.reset_time.is_none(),
            lost: false,
        }),
        // A 503 (or any 5xx) that says when to come back is honoured like a 429.
        s if s >= 500 => Read::Again(Failure {
            error: ApiError::Server { url, status, attempts: at.number, message },
            server_wait: server_wait_hint(headers, &body, at.now).map(|w| w + WAIT_MARGIN),
            widen_margin: false,
            lost: at.write,
        }),
        300..=399 => Read::Final(ApiError::Redirected {
            method: at.method.to_string(),
            url,
            status,
            location: headers
                .get(LOCATION)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("nowhere")
                .chars()
                .take(200)
                .collect(),
        }),
        _ => Read::Final(ApiError::Rejected { url, status, message }),
    }
}

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
fn rate_limit_wait(headers: &HeaderMap, body: &ErrorBody, now: DateTime<Utc>) -> Duration {
    server_wait_hint(headers, body, now).unwrap_or(Duration::from_secs(2)) + WAIT_MARGIN
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use reqwest::header::HeaderValue;
    use tokio::time::Instant;

    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").unwrap().with_timezone(&Utc)
    }

    fn attempt(write: bool, number: u32) -> Attempt<'static> {
        static PATCH: Method = Method::PATCH;
        static GET: Method = Method::GET;
        Attempt {
            method: if write { &PATCH } else { &GET },
            url: "http://h/v1/x",
            write,
            number,
            elapsed: Duration::ZERO,
            max_body: 1000,
            now: now(),
        }
    }

    fn answer(status: u16, body: &str, headers: &[(&'static str, &'static str)], cut: Option<BodyCut>) -> Answer {
        let mut h = HeaderMap::new();
        for (name, value) in headers {
            h.insert(*name, HeaderValue::from_static(value));
        }
        Answer { status, headers: h, raw: Bytes::from(body.to_owned()), cut, headers_at: Instant::now() }
    }

    /// A policy whose backoff is at most 20 ms and whose deadline is far.
    fn policy() -> RetryPolicy {
        RetryPolicy {
            base_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(20),
            ..RetryPolicy::default()
        }
    }

    fn judged(write: bool, number: u32, a: &Answer) -> Judgement<serde_json::Value> {
        judge(&policy(), &attempt(write, number), Ok(a))
    }

    fn retried<T>(j: Judgement<T>) -> (Duration, Duration, ApiError) {
        match j.verdict {
            Verdict::Retry { sleep, resume_in, why } => (sleep, resume_in, why),
            Verdict::Accept(_) => panic!("accepted, not retried"),
            Verdict::Fail(e) => panic!("failed, not retried: {e}"),
        }
    }

    fn failed<T>(j: Judgement<T>) -> ApiError {
        match j.verdict {
            Verdict::Fail(e) => e,
            Verdict::Accept(_) => panic!("accepted, not failed"),
            Verdict::Retry { why, .. } => panic!("retried, not failed: {why}"),
        }
    }

    fn accepted<T>(j: Judgement<T>) -> Result<T, String> {
        match j.verdict {
            Verdict::Accept(v) => v,
            Verdict::Retry { why, .. } => panic!("retried, not accepted: {why}"),
            Verdict::Fail(e) => panic!("failed, not accepted: {e}"),
        }
    }

    #[test]
    fn a_2xx_with_its_json_is_accepted() {
        let j = judged(false, 1, &answer(200, r#"{"a":1}"#, &[], None));
        assert!(!j.lost && j.block_for.is_none() && !j.widen_margin);
        assert_eq!(accepted(j).unwrap()["a"], 1);
        assert_eq!(accepted(judged(true, 2, &answer(201, "{}", &[], None))).unwrap(), serde_json::json!({}));
    }

    #[test]
    fn a_read_whose_2xx_is_not_its_json_is_retried_and_a_write_is_accepted() {
        let a = answer(200, "<html>", &[], None);
        let (sleep, resume_in, why) = retried(judged(false, 1, &a));
        assert!(sleep >= Duration::from_millis(5) && sleep <= Duration::from_millis(20), "{sleep:?}");
        assert_eq!(sleep, resume_in);
        assert!(matches!(why, ApiError::Decode { status: 200, attempts: 1, .. }), "{why:?}");
        assert!(why.to_string().contains("body starts `<html>`"), "{why}");
        // The write took effect; only its answer is unreadable.
        let j = judged(true, 1, &a);
        assert!(!j.lost);
        assert!(accepted(j).unwrap_err().contains("expected value"));
    }

    #[test]
    fn a_body_cut_short_is_a_lost_answer_unless_a_write_was_accepted() {
        let cut = || Some(BodyCut::Interrupted("reset by peer".into()));
        let j = judged(false, 1, &answer(200, r#"{"a""#, &[], cut()));
        assert!(!j.lost, "a read is never in doubt");
        let (_, _, why) = retried(j);
        assert!(why.to_string().contains("the 200 answer's body was cut short: reset by peer"), "{why}");
        let j = judged(true, 1, &answer(200, r#"{"a""#, &[], cut()));
        assert!(accepted(j).unwrap_err().contains("cut short: reset by peer"));
        let j = judged(true, 1, &answer(422, r#"{"mess"#, &[], cut()));
        assert!(j.lost, "the refusal cannot be read: the write is sent again, in doubt");
        assert!(matches!(retried(j).2, ApiError::Transport { .. }));
    }

    #[test]
    fn a_body_over_the_limit_fails_a_read_and_is_accepted_for_a_write() {
        let e = failed(judged(false, 1, &answer(200, "{", &[], Some(BodyCut::TooLarge))));
        assert!(matches!(e, ApiError::TooLarge { limit: 1000, .. }), "{e:?}");
        let j = judged(true, 1, &answer(200, "{", &[], Some(BodyCut::TooLarge)));
        assert!(accepted(j).unwrap_err().contains("larger than the 1000-byte limit"));
    }

    #[test]
    fn refusals_that_no_retry_fixes_are_final() {
        let body = r#"{"message":"nope"}"#;
        for status in [401, 403, 404, 422, 400] {
            let j = judged(true, 1, &answer(status, body, &[], None));
            assert!(!j.lost && j.block_for.is_none(), "{status}");
            let e = failed(j);
            let kind = match &e {
                ApiError::Unauthorized { .. } => 401,
                ApiError::Forbidden { method, .. } if method == "PATCH" => 403,
                ApiError::NotFound { .. } => 404,
                ApiError::Unprocessable { .. } => 422,
                ApiError::Rejected { status: 400, .. } => 400,
                _ => 0,
            };
            assert_eq!(kind, status, "{e:?}");
            assert_eq!(e.server_message(), Some("nope"));
        }
        let e = failed(judged(true, 1, &answer(308, "", &[("location", "https://elsewhere/v1/x")], None)));
        assert!(
            matches!(&e, ApiError::Redirected { status: 308, location, .. } if location == "https://elsewhere/v1/x")
        );
        // Without a message, the status's own name.
        let e = failed(judged(false, 1, &answer(404, "", &[], None)));
        assert_eq!(e.server_message(), Some("Not Found"));
    }

    #[test]
    fn a_429_blocks_the_key_for_as_long_as_asked_without_a_backoff() {
        let j = judged(false, 1, &answer(429, r#"{"message":"slow down"}"#, &[("retry-after", "3")], None));
        assert_eq!(j.block_for, Some(Duration::from_millis(3050)));
        assert!(j.widen_margin, "no reset time: the spacing rule");
        assert!(!j.lost);
        let (sleep, resume_in, why) = retried(j);
        assert_eq!((sleep, resume_in), (Duration::ZERO, Duration::from_millis(3050)));
        assert!(matches!(why, ApiError::RateLimited { attempts: 1, .. }));
        // The hourly cap says when it resets; that is no reason to widen the spacing.
        let j = judged(false, 1, &answer(429, r#"{"reset_time":"2026-01-01T00:10:00Z"}"#, &[], None));
        assert_eq!(j.block_for, Some(Duration::from_millis(600_050)));
        assert!(!j.widen_margin);
        // The last attempt gives up, and the key stays blocked for the next request.
        let j = judged(false, DEFAULT_MAX_ATTEMPTS, &answer(429, "", &[], None));
        assert_eq!(j.block_for, Some(Duration::from_millis(2050)));
        let e = failed(j);
        assert!(matches!(e, ApiError::RateLimited { attempts: 6, .. }), "{e:?}");
    }

    #[test]
    fn a_5xx_is_retried_after_a_backoff_or_as_long_as_it_asks_and_leaves_a_write_in_doubt() {
        let j = judged(false, 2, &answer(500, "<h1>something went wrong</h1>", &[], None));
        assert!(!j.lost && j.block_for.is_none() && !j.widen_margin);
        let (sleep, _, why) = retried(j);
        assert!(sleep >= Duration::from_millis(10) && sleep <= Duration::from_millis(20), "{sleep:?}");
        assert!(matches!(why, ApiError::Server { status: 500, attempts: 2, .. }));
        assert!(why.to_string().contains("something went wrong"), "{why}");
        let j = judged(true, 1, &answer(503, "", &[("retry-after", "1")], None));
        assert!(j.lost, "the write may have taken effect");
        assert_eq!(j.block_for, Some(Duration::from_millis(1050)));
        assert!(!j.widen_margin);
        assert_eq!(retried(j).0, Duration::ZERO);
    }

    #[test]
    fn no_answer_is_retried_and_leaves_a_write_in_doubt() {
        let j: Judgement<serde_json::Value> = judge(&policy(), &attempt(true, 1), Err("connection refused"));
        assert!(j.lost);
        let (_, _, why) = retried(j);
        assert_eq!(why.to_string(), "connection to `http://h/v1/x` failed after 1 attempts: connection refused");
        let j: Judgement<serde_json::Value> = judge(&policy(), &attempt(false, 1), Err("timed out"));
        assert!(!j.lost);
        let j: Judgement<serde_json::Value> = judge(&policy(), &attempt(false, 6), Err("timed out"));
        assert!(matches!(failed(j), ApiError::Transport { attempts: 6, .. }), "the attempts are spent");
    }

    #[test]
    fn no_retry_starts_that_would_pass_the_deadline() {
        let at = Attempt { elapsed: Duration::from_secs(65 * 60 - 2), ..attempt(false, 1) };
        let a = answer(429, r#"{"message":"slow down"}"#, &[("retry-after", "5")], None);
        let j: Judgement<serde_json::Value> = judge(&RetryPolicy::default(), &at, Ok(&a));
        assert_eq!(j.block_for, Some(Duration::from_millis(5050)), "the key is blocked all the same");
        let e = failed(j);
        assert!(
            matches!(&e, ApiError::Deadline { attempts: 1, deadline_s: 3900, last, .. } if last.contains("slow down"))
        );
        let j: Judgement<serde_json::Value> =
            judge(&RetryPolicy::default(), &at, Ok(&answer(429, "", &[("retry-after", "1")], None)));
        assert!(matches!(j.verdict, Verdict::Retry { .. }), "a wait that ends within it is kept");
    }

    #[test]
    fn rate_limit_wait_takes_the_longest_ask() {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static("3"));
        let body = ErrorBody { retry_after: Some(2.0), ..Default::default() };
        assert_eq!(rate_limit_wait(&h, &body, now()), Duration::from_millis(3050));
        let body =
            ErrorBody { retry_after: Some(2.0), reset_time: Some("2026-01-01T00:10:00Z".into()), ..Default::default() };
        assert_eq!(rate_limit_wait(&h, &body, now()), Duration::from_millis(600_050));
        h.insert(RETRY_AFTER, HeaderValue::from_static("Thu, 01 Jan 2026 00:20:00 GMT"));
        assert_eq!(rate_limit_wait(&h, &body, now()), Duration::from_millis(1_200_050));
        assert_eq!(rate_limit_wait(&HeaderMap::new(), &ErrorBody::default(), now()), Duration::from_millis(2050));
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
}
