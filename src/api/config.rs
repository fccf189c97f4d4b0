//! What a client is built from: [`ClientConfig`], and the defaults it starts from.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::Url;

use super::key::ApiKey;
use super::pacing::PacingConfig;
use super::retry::RetryPolicy;

/// The real service's base URL (VENDOR_NOTES).
pub const DEFAULT_BASE_URL: &str = "https://api.growi.io/api/public/v1";

/// Timeout of one HTTP attempt, from sending to the whole answer.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Timeout of setting up a connection.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest response body the client reads (16 MiB). The API's biggest answers, 100 applications
/// or a 3,650-day statistics window, are well under 2 MiB.
pub(crate) const MAX_BODY_BYTES: usize = 16 << 20;

/// Everything needed to talk to the service.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    pub base_url: Url,
    pub api_key: ApiKey,
    pub pacing: PacingConfig,
    pub retry: RetryPolicy,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    /// Largest response body read (16 MiB unless set).
    pub max_body_bytes: usize,
    /// A file that keeps the pacer's memory between processes ([`ClientConfig::pacing_memory_in`]).
    pub pacing_memory: Option<PathBuf>,
    /// Send at most this many requests (retries included); later ones end with
    /// [`ApiError::Interrupted`](super::ApiError::Interrupted), as a stop does
    /// ([`Client::budget_spent`](super::Client::budget_spent)).
    pub max_requests: Option<u64>,
}

impl ClientConfig {
    pub fn new(base_url: Url, api_key: ApiKey) -> Self {
        ClientConfig {
            base_url,
            api_key,
            pacing: PacingConfig::default(),
            retry: RetryPolicy::default(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_body_bytes: MAX_BODY_BYTES,
            pacing_memory: None,
            max_requests: None,
        }
    }

    /// Keeps the pacer's memory (latest request, latest payout mark, cap window) in `dir`, one
    /// file per service and key, so that the next process on this key keeps the service's rules
    /// from where this one stopped.
    pub fn pacing_memory_in(mut self, dir: &Path) -> Self {
        self.pacing_memory = Some(super::memory::file_in(dir, self.base_url.as_str(), &self.api_key));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pacing_file_is_one_per_service_and_key() {
        let config = |url: &str, k: &str| {
            ClientConfig::new(url.parse().unwrap(), ApiKey::new(k, "test").unwrap()).pacing_memory_in(Path::new("/s"))
        };
        let file = |url: &str, k: &str| config(url, k).pacing_memory.unwrap();
        assert_eq!(file("http://h:1/api/v1", "k-1"), file("http://h:1/api/v1/", "k-1"));
        assert_ne!(file("http://h:1/api/v1", "k-1"), file("http://h:1/api/v1", "k-2"));
        assert!(file("http://h:1/api/v1", "k-1").starts_with("/s"));
    }
}
