//! A faithful local emulator of the creator-campaign service, for tests, demos and benchmarks.
//!
//! It serves every operation of SPEC.md with the rules and error bodies of VENDOR_NOTES.md under
//! [`BASE_PATH`], from seeded, deterministic data ([`data`]). Knobs reproduce what a real service
//! does to a client: a per-key rate policy (spacing, the payout-mark 2 s rule, an hourly cap with
//! a short test window), injected faults, latency, and drift (applications appearing and changing
//! status while a client pages). Everything clients did is recorded in [`EmulatorState`] for
//! assertions, and under `/__admin` when enabled.
//!
//! It shares only the API models with the rest of the crate ([`crate::api::models`]).

pub mod data;
mod http;
mod org_policy;
mod state;
mod store;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use data::{numbered_org, org_key, GenConfig, PayoutKind, StoredPayout, StoredSale, MAIN_ORG, OTHER_ORG};
pub use http::app;
pub use org_policy::{OrgPolicyError, OrgPolicySpec};
pub use state::{
    Caller, DriftEvent, EmulatorState, Fault, FaultConfig, Keys, LostKind, OrgPolicy, RatePolicy, RequestRecord, Store,
    Violation, WriteRecord,
};

/// Path prefix of the API, as on the real service.
pub const BASE_PATH: &str = "/api/public/v1";

/// Everything that shapes an emulator.
#[derive(Clone, Debug)]
pub struct EmulatorConfig {
    pub data: GenConfig,
    pub keys: Keys,
    pub rate: RatePolicy,
    pub faults: FaultConfig,
    /// Added to every authenticated request.
    pub latency: Duration,
    /// Applications appear and change status while clients page.
    pub drift: bool,
    /// Serve the introspection routes under `/__admin`.
    pub admin: bool,
    /// Numbered organizations whose key has its own policy, by `k` ([`OrgPolicySpec`] parses it).
    pub org_policies: BTreeMap<u32, OrgPolicy>,
}

impl EmulatorConfig {
    /// A fast emulator for tests: no rate limits, no faults, `applications` of them.
    pub fn for_tests(applications: usize) -> Self {
        EmulatorConfig {
            data: GenConfig {
                seed: 42,
                applications,
                sales: 16,
                today: chrono::Utc::now().date_naive(),
                content_years: 6,
                organizations: 0,
                org_applications: 200,
            },
            keys: Keys::default(),
            rate: RatePolicy { min_interval: Duration::ZERO, hourly_cap: None, cap_window: Duration::from_secs(3600) },
            faults: FaultConfig { rate: 0.0, slow: Duration::from_millis(1500), kinds: vec![], lost: vec![] },
            latency: Duration::ZERO,
            drift: false,
            admin: false,
            org_policies: BTreeMap::new(),
        }
    }

    /// Builds the state: generates the data.
    pub fn build(&self) -> EmulatorState {
        let dataset = data::generate(&self.data);
        EmulatorState::new(self, dataset)
    }
}

/// A running emulator. Dropping it stops the server.
pub struct Emulator {
    /// `http://127.0.0.1:PORT/api/public/v1`
    pub base_url: String,
    pub state: Arc<EmulatorState>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl Emulator {
    /// Binds `addr` (port 0 picks a free one) and serves in the background on this runtime.
    pub async fn start(config: &EmulatorConfig, addr: SocketAddr) -> std::io::Result<Emulator> {
        let state = Arc::new(config.build());
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = oneshot::channel::<()>();
        let router = app(state.clone());
        let task = tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await
        });
        Ok(Emulator { base_url: format!("http://{addr}{BASE_PATH}"), state, shutdown: Some(tx), task: Some(task) })
    }

    /// Stops accepting requests and waits for the server to finish.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
