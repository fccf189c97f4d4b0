//! What a client is built from: [`ClientConfig`], checked and ready, and [`ClientSettings`], the
//! settings a command line or a fleet file gives, checked into one together with the policy on
//! which base URLs may carry the key. The defaults here are the ones the command line shows.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::Url;

use super::key::ApiKey;
use super::pacing::PacingConfig;
use super::retry::{RetryPolicy, DEFAULT_DEADLINE, DEFAULT_MAX_ATTEMPTS};

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
    /// [`ApiError::BudgetSpent`](super::ApiError::BudgetSpent).
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

/// A client's settings as given, before they are checked: the command line's, or a fleet
/// organization's over them. [`ClientSettings::config`] checks them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientSettings {
    pub base_url: String,
    /// Allow an `http://` base URL to a host other than this machine (the key would travel in
    /// clear text).
    pub allow_insecure_http: bool,
    pub pacing: PacingConfig,
    /// Attempts per request, the first included; at least 1.
    pub max_attempts: u32,
    /// No retry starts once this much time has passed since a request's first attempt.
    pub deadline: Duration,
    /// Timeout of one attempt; not zero.
    pub request_timeout: Duration,
}

impl Default for ClientSettings {
    fn default() -> Self {
        ClientSettings {
            base_url: DEFAULT_BASE_URL.to_owned(),
            allow_insecure_http: false,
            pacing: PacingConfig::default(),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            deadline: DEFAULT_DEADLINE,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

impl ClientSettings {
    /// Checks these settings, with the key read for them (or why it could not be), into a
    /// client's configuration; every problem at once. `what` names the base URL's origin in
    /// messages (`` `--base-url` ``, or an organization of a fleet file). The problems name the
    /// command line's flags.
    pub fn config(&self, what: &str, key: Result<ApiKey, String>) -> Result<ClientConfig, Vec<String>> {
        let mut problems = vec![];
        let url = self.base_url(what).map_err(|p| problems.push(p)).ok();
        let key = key.map_err(|e| problems.push(e)).ok();
        problems.extend(pacing_problem(&self.pacing));
        if self.max_attempts == 0 {
            problems.push("`--max-attempts` must be at least 1".into());
        }
        if self.request_timeout.is_zero() {
            problems.push("`--timeout-s` must be at least 1".into());
        }
        match (url, key) {
            (Some(url), Some(key)) if problems.is_empty() => Ok(ClientConfig {
                pacing: self.pacing.clone(),
                retry: RetryPolicy {
                    max_attempts: self.max_attempts,
                    deadline: self.deadline,
                    ..RetryPolicy::default()
                },
                request_timeout: self.request_timeout,
                ..ClientConfig::new(url, key)
            }),
            _ => Err(problems),
        }
    }

    /// The base URL, if the key may travel to it: http(s) with a host, no credentials of its
    /// own, and plain http only to this machine unless insecure http is allowed.
    fn base_url(&self, what: &str) -> Result<Url, String> {
        let raw = &self.base_url;
        match Url::parse(raw) {
            Ok(u) if !u.username().is_empty() || u.password().is_some() => Err(format!(
                "{what} must not hold a user name or password (`user:pass@`); the key is the only credential"
            )),
            Ok(u) if u.scheme() == "http" && u.host().is_some() && !is_loopback(&u) && !self.allow_insecure_http => {
                Err(format!(
                    "{what} `{raw}` is plain http to another machine: the API key would travel in clear text; use https, or pass `--allow-insecure-http` if the network is trusted"
                ))
            }
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(u),
            Ok(_) => Err(format!("{what} `{raw}` must be an http(s) URL with a host")),
            Err(e) => Err(format!("{what} `{raw}` is not a URL: {e}")),
        }
    }
}

/// What is wrong with a rate policy given on the command line, if anything: a cap window must
/// have a length.
pub fn pacing_problem(pacing: &PacingConfig) -> Option<String> {
    pacing.cap_window.is_zero().then(|| "`--cap-window-s` must be at least 1".to_owned())
}

/// `localhost`, 127.0.0.0/8 or ::1: plain http there never leaves the machine.
fn is_loopback(u: &Url) -> bool {
    let Some(host) = u.host_str() else { return false };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Result<ApiKey, String> {
        Ok(ApiKey::new("k-1", "test").unwrap())
    }

    fn settings(base_url: &str) -> ClientSettings {
        ClientSettings { base_url: base_url.into(), ..ClientSettings::default() }
    }

    #[test]
    fn the_settings_become_the_config() {
        let s = ClientSettings {
            max_attempts: 2,
            deadline: Duration::from_secs(9),
            request_timeout: Duration::from_secs(3),
            pacing: PacingConfig::unlimited(),
            ..settings("https://h/v1")
        };
        let c = s.config("`--base-url`", key()).unwrap();
        assert_eq!(c.base_url.as_str(), "https://h/v1");
        assert_eq!((c.retry.max_attempts, c.retry.deadline), (2, Duration::from_secs(9)));
        assert_eq!(c.retry.base_backoff, RetryPolicy::default().base_backoff);
        assert_eq!((c.request_timeout, c.connect_timeout), (Duration::from_secs(3), DEFAULT_CONNECT_TIMEOUT));
        assert_eq!(c.pacing, PacingConfig::unlimited());
        assert_eq!((c.pacing_memory, c.max_requests), (None, None));
        let d = ClientSettings::default().config("`--base-url`", key()).unwrap();
        assert_eq!((d.base_url.as_str(), d.retry), (DEFAULT_BASE_URL, RetryPolicy::default()));
    }

    #[test]
    fn the_key_travels_in_clear_text_only_on_this_machine_or_when_allowed() {
        for url in ["http://127.0.0.1:9/v1", "http://localhost:9/v1", "http://LOCALHOST/v1", "http://[::1]:9/v1"] {
            assert!(settings(url).config("`--base-url`", key()).is_ok(), "{url}");
        }
        let insecure = "http://10.1.2.3/api/public/v1";
        let p = settings(insecure).config("`--base-url`", key()).unwrap_err();
        assert_eq!(p, [format!("`--base-url` `{insecure}` is plain http to another machine: the API key would travel in clear text; use https, or pass `--allow-insecure-http` if the network is trusted")]);
        let allowed = ClientSettings { allow_insecure_http: true, ..settings(insecure) };
        assert!(allowed.config("`--base-url`", key()).is_ok());
    }

    #[test]
    fn every_problem_is_named_at_once() {
        let s = ClientSettings {
            max_attempts: 0,
            request_timeout: Duration::ZERO,
            pacing: PacingConfig { cap_window: Duration::ZERO, ..PacingConfig::default() },
            ..settings("https://user:pw@h/v1")
        };
        let p = s.config("organization `a`: base URL", Err("no API key".into())).unwrap_err();
        assert_eq!(
            p,
            [
                "organization `a`: base URL must not hold a user name or password (`user:pass@`); the key is the only credential",
                "no API key",
                "`--cap-window-s` must be at least 1",
                "`--max-attempts` must be at least 1",
                "`--timeout-s` must be at least 1",
            ]
        );
        let p = settings("ftp://h/v1").config("`--base-url`", key()).unwrap_err();
        assert_eq!(p, ["`--base-url` `ftp://h/v1` must be an http(s) URL with a host"]);
        let p = settings("not a url").config("`--base-url`", key()).unwrap_err();
        assert_eq!(p, ["`--base-url` `not a url` is not a URL: relative URL without a base"]);
    }

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
