//! The API layer: typed models, the paced and retrying HTTP client, its configuration, and the
//! key.
//!
//! Everything that talks to the service goes through [`Client`]; the emulator shares only
//! [`models`]. See `../shared/api/SPEC.md` and `VENDOR_NOTES.md` for the contract.
//!
//! - `client`: the operations, and the loop of attempts of one request;
//! - `send`: sending one attempt and reading its answer;
//! - `retry`: the retry policy and the judgement of each attempt;
//! - `pacing` and `memory`: keeping to the service's rate rules, within and across processes;
//! - `config`: the defaults, the settings as given, and their check into a [`ClientConfig`].

mod client;
mod config;
mod error;
mod key;
mod memory;
mod metrics;
pub mod models;
mod operations;
mod pacing;
mod retry;
mod send;

pub use client::Client;
pub use config::{pacing_problem, ClientConfig, ClientSettings, DEFAULT_BASE_URL, DEFAULT_REQUEST_TIMEOUT};
pub use error::ApiError;
pub(crate) use key::fnv1a;
pub use key::{ApiKey, KeyError, API_KEY_ENV};
pub use metrics::MetricsSnapshot;
pub use operations::{
    ApplicationsQuery, Endpoint, Fetched, MarkOutcome, PayoutsQuery, WriteError, Written, CONTENT_LIMIT_ALL,
    MAX_APPLICATIONS_PER_PAGE,
};
pub use pacing::{
    PacingConfig, DEFAULT_CAP_WINDOW, DEFAULT_HOURLY_CAP, DEFAULT_MIN_INTERVAL, MARK_PAYOUT_MIN_INTERVAL,
};
pub use retry::{RetryPolicy, DEFAULT_DEADLINE, DEFAULT_MAX_ATTEMPTS};
pub use send::Transport;
