//! Sending one request: the connection pools, and one attempt's round trip, read into an
//! [`Answer`] as it arrived. Nothing here retries, paces or judges the answer.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use reqwest::{Method, Url};
use tokio::time::Instant;

use super::error::ApiError;

/// HTTP connection pools for reads and writes, shareable by many [`Client`](super::Client)s.
#[derive(Clone, Debug)]
pub struct Transport {
    /// Reads: follows redirects (cross-host ones drop the `Authorization` header).
    http: reqwest::Client,
    /// Writes: never follows a redirect, so a write is sent only where it was addressed.
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

    /// One attempt: sends the request and reads the whole answer, at most `limit` bytes of body.
    /// `Err` (why, without the URL or the headers) when no answer (status line) arrived; a body
    /// cut short after the status is an [`Answer`] with [`Answer::cut`] set. `auth` is the
    /// `Authorization` header, marked sensitive.
    pub(crate) async fn send(
        &self,
        auth: &HeaderValue,
        method: &Method,
        url: &Url,
        body: Option<&[u8]>,
        write: bool,
        limit: usize,
    ) -> Result<Answer, String> {
        let http = if write { &self.http_write } else { &self.http };
        let mut req = http
            .request(method.clone(), url.clone())
            .header(AUTHORIZATION, auth.clone())
            .header(ACCEPT, "application/json")
            // The service's own usage example sends it on GETs too.
            .header(CONTENT_TYPE, "application/json")
            .header(USER_AGENT, concat!("creator-etl/", env!("CARGO_PKG_VERSION")));
        if let Some(b) = body {
            req = req.body(b.to_vec());
        }
        let mut resp = req.send().await.map_err(|e| transport_reason(&e))?;
        let headers_at = Instant::now();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let mut raw = BytesMut::new();
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
pub(crate) struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub raw: Bytes,
    /// Why the body is not whole, when it is not.
    pub cut: Option<BodyCut>,
    pub headers_at: Instant,
}

/// Why an answer's body is incomplete.
pub(crate) enum BodyCut {
    /// The connection failed after the status line.
    Interrupted(String),
    /// It is larger than the client reads.
    TooLarge,
}

impl BodyCut {
    pub(crate) fn describe(&self, limit: usize) -> String {
        match self {
            BodyCut::Interrupted(reason) => format!("the body was cut short: {reason}"),
            BodyCut::TooLarge => format!("the body is larger than the {limit}-byte limit"),
        }
    }
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
