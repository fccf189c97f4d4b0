//! The API layer: typed models, the paced and retrying HTTP client, and the key.
//!
//! Everything that talks to the service goes through [`Client`]; the emulator shares only
//! [`models`]. See `../shared/api/SPEC.md` and `VENDOR_NOTES.md` for the contract.

mod client;
mod error;
mod key;
mod metrics;
pub mod models;
pub mod pacing;

pub use client::{
    rate_limit_wait, stopped, ApplicationsQuery, Client, ClientConfig, Endpoint, Fetched, MarkOutcome, PayoutsQuery,
    RetryPolicy, Transport, WriteError, Written, CONTENT_LIMIT_ALL, DEFAULT_BASE_URL, MAX_APPLICATIONS_PER_PAGE,
    MAX_BODY_BYTES, MAX_PAYOUTS_PER_PAGE, MAX_ROW_COUNT,
};
pub use error::ApiError;
pub(crate) use key::fnv1a;
pub use key::{ApiKey, KeyError, API_KEY_ENV};
pub use metrics::{Metrics, MetricsSnapshot};
pub use pacing::{PacingConfig, PacingMemory, MARK_PAYOUT_MIN_INTERVAL};
