//! Typed errors of the API client. Each names the URL (never the key), the status and the
//! server's own message, so an operator can act on it without reading logs.

use thiserror::Error;

/// A request that failed for good: not retryable, or retries spent.
#[derive(Debug, Error)]
pub enum ApiError {
    #[error("API key rejected (401 {message}) at `{url}`: check `CREATOR_API_KEY` or `--api-key-file`")]
    Unauthorized { url: String, message: String },
    #[error("API key lacks rights (403 {message}) for `{method} {url}`: a read-only key cannot write; use a full-access key")]
    Forbidden { method: String, url: String, message: String },
    #[error("not found (404 {message}) at `{url}`")]
    NotFound { url: String, message: String },
    #[error("request refused (422 {message}) at `{url}`")]
    Unprocessable { url: String, message: String },
    #[error("request refused ({status} {message}) at `{url}`")]
    Rejected { url: String, status: u16, message: String },
    #[error("rate limited (429 {message}) at `{url}`; gave up after {attempts} attempts: lower the request rate (`--min-interval-ms`, `--hourly-cap`) or try later")]
    RateLimited { url: String, attempts: u32, message: String },
    #[error("server error ({status} {message}) at `{url}` after {attempts} attempts")]
    Server { url: String, status: u16, attempts: u32, message: String },
    #[error("connection to `{url}` failed after {attempts} attempts: {reason}")]
    Transport { url: String, attempts: u32, reason: String },
    #[error("response from `{url}` (status {status}) is not the expected JSON after {attempts} attempts: {reason}; body starts `{snippet}`")]
    Decode { url: String, status: u16, attempts: u32, reason: String, snippet: String },
    #[error("gave up on `{url}` after {attempts} attempts: the {deadline_s} s deadline would pass before the next try; last error: {last}")]
    Deadline { url: String, attempts: u32, deadline_s: u64, last: String },
    #[error("response from `{url}` is larger than the {limit}-byte limit; this is not an answer of the documented API: check `--base-url`")]
    TooLarge { url: String, limit: usize },
    #[error("response from `{url}` breaks the API contract: {reason}")]
    Protocol { url: String, reason: String },
    #[error("the service answered {status} (redirect to `{location}`) for `{method} {url}`; writes never follow redirects: check `--base-url`")]
    Redirected { method: String, url: String, status: u16, location: String },
    #[error("interrupted before the request to `{url}` was sent")]
    Interrupted { url: String },
    /// The client's request budget ([`ClientConfig::max_requests`](super::ClientConfig)) was
    /// spent: the request was not sent.
    #[error("request budget of {max} spent before the request to `{url}` was sent")]
    BudgetSpent { url: String, max: u64 },
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("cannot build the HTTP client: {0}")]
    Setup(String),
}

impl ApiError {
    /// The HTTP status the service answered, when there was one.
    pub fn status(&self) -> Option<u16> {
        match self {
            ApiError::Unauthorized { .. } => Some(401),
            ApiError::Forbidden { .. } => Some(403),
            ApiError::NotFound { .. } => Some(404),
            ApiError::Unprocessable { .. } => Some(422),
            ApiError::RateLimited { .. } => Some(429),
            ApiError::Rejected { status, .. }
            | ApiError::Server { status, .. }
            | ApiError::Decode { status, .. }
            | ApiError::Redirected { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The service's own message, when it sent one.
    pub fn server_message(&self) -> Option<&str> {
        match self {
            ApiError::Unauthorized { message, .. }
            | ApiError::Forbidden { message, .. }
            | ApiError::NotFound { message, .. }
            | ApiError::Unprocessable { message, .. }
            | ApiError::Rejected { message, .. }
            | ApiError::RateLimited { message, .. }
            | ApiError::Server { message, .. } => Some(message),
            _ => None,
        }
    }

    /// 401 or 403: the key is wrong or lacks rights; nothing else will succeed either.
    pub fn is_auth(&self) -> bool {
        matches!(self, ApiError::Unauthorized { .. } | ApiError::Forbidden { .. })
    }

    /// Not sent: a stop or the spent request budget came first, and a later run sends it.
    pub fn is_stop(&self) -> bool {
        matches!(self, ApiError::Interrupted { .. } | ApiError::BudgetSpent { .. })
    }

    /// A failure that retries could not get past (the service may answer later).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ApiError::RateLimited { .. }
                | ApiError::Server { .. }
                | ApiError::Transport { .. }
                | ApiError::Decode { .. }
                | ApiError::Deadline { .. }
        )
    }
}

/// At most `max` characters of a body, with control characters shown as spaces.
pub(crate) fn snippet(body: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(body);
    let mut out: String = text.chars().take(max).map(|c| if c.is_control() { ' ' } else { c }).collect();
    if text.chars().count() > max {
        out.push('…');
    }
    out
}
