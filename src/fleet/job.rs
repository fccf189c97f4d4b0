//! One organization's job: its client and its sync, built from the fleet file's settings over
//! the command line's.

use std::path::PathBuf;
use std::time::Duration;

use super::status::org_dir;
use super::Organization;
use crate::action::journal::Scope;
use crate::action::ActionConfig;
use crate::api::{ApiKey, ClientConfig, ClientSettings, PacingConfig};
use crate::extract::{ExtractConfig, SyncMode};
use crate::load::LoadConfig;
use crate::out::OutDir;
use crate::sync::SyncJob;

/// One organization's sync, validated before anything is sent.
#[derive(Clone, Debug)]
pub struct Job {
    pub name: String,
    /// With the run's `--max-requests-per-org` as its `max_requests`.
    pub client: ClientConfig,
    pub sync: SyncJob,
}

/// What the organizations of a fleet run share: the command line's settings, under each
/// organization's own from the fleet file.
#[derive(Clone, Debug)]
pub struct Defaults {
    /// The fleet's `--out`; each organization works under `OUT/orgs/<name>/`.
    pub out: PathBuf,
    /// The command line's client settings; an organization's base URL and pacing go over them.
    pub client: ClientSettings,
    pub max_requests_per_org: Option<u64>,
    /// The shared lake's URL, checked.
    pub lake: Option<String>,
    pub lake_unsafe_no_conditional_writes: bool,
    pub sync: SyncMode,
    pub reconcile_every: Duration,
    pub cohort_edges: Vec<i64>,
    pub strict: bool,
}

/// One organization's job, its settings over the command line's `defaults`. Every problem at
/// once.
pub fn job(org: &Organization, defaults: &Defaults) -> Result<Job, Vec<String>> {
    let at = format!("organization `{}`", org.name);
    let s = &org.settings;
    let out = OutDir::new(org_dir(&defaults.out, &org.name));
    // Thousands of organizations make this machine late: space from answers (see
    // `PacingConfig::wait_for_answers`), so lateness never costs a 429.
    let mut pacing = PacingConfig { wait_for_answers: true, ..defaults.client.pacing.clone() };
    if let Some(ms) = s.min_interval_ms {
        pacing.min_interval = Duration::from_millis(ms);
    }
    if let Some(cap) = s.hourly_cap {
        pacing.hourly_cap = (cap > 0).then_some(cap.min(u64::from(u32::MAX)) as u32);
    }
    let base_url = s.base_url.as_deref().unwrap_or(&defaults.client.base_url);
    let mut problems = vec![];
    // The fleet file was read for a sync ([`Check::Sync`]), so every key is there.
    let key = org.key.clone().ok_or_else(|| format!("{at}: its key was not read"));
    let settings = ClientSettings { base_url: base_url.to_owned(), pacing, ..defaults.client.clone() };
    let client = settings
        .config(&format!("{at}: base URL"), key)
        .map_err(|p| problems.extend(p))
        .ok()
        .map(|c| ClientConfig { max_requests: defaults.max_requests_per_org, ..c.pacing_memory_in(&out.state_dir()) });
    let actions = s.actions.as_ref().and_then(|file| match crate::action::read(file) {
        Ok(reviewed) => {
            let config = ActionConfig {
                out: out.clone(),
                file: file.clone(),
                max_rows: None,
                only: None,
                retry_failed: false,
                scope: Scope::new(base_url, org.key.as_ref().map(ApiKey::fingerprint)),
            };
            Some((config, reviewed))
        }
        Err(e) => {
            problems.push(format!("{at}: {e}"));
            None
        }
    });
    let Some(client) = client.filter(|_| problems.is_empty()) else { return Err(problems) };
    let base = ExtractConfig::defaults(out.clone());
    let extract = ExtractConfig {
        statuses: s.statuses.clone().unwrap_or(base.statuses.clone()),
        campaign_id: s.campaign_id,
        lookback_days: s.lookback_days.map_or(base.lookback_days, |d| d as u32),
        since_days: s.since_days.map_or(base.since_days, |d| d as u32),
        sync: defaults.sync,
        reconcile_every: defaults.reconcile_every,
        ..base
    };
    let load = LoadConfig {
        out,
        cohort_edges: defaults.cohort_edges.clone(),
        strict: defaults.strict,
        parquet_grace: crate::load::DEFAULT_PARQUET_GRACE,
        lake: defaults.lake.as_ref().map(|url| crate::load::lake::LakeConfig {
            url: url.clone(),
            org: org.name.clone(),
            unconditional_writes_ok: defaults.lake_unsafe_no_conditional_writes,
        }),
    };
    Ok(Job { name: org.name.clone(), client, sync: SyncJob { extract, load, actions } })
}
