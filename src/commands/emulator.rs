//! `creator-etl emulator`: serve the emulator of the API until Ctrl-C.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use chrono::NaiveDate;
use clap::Args;

use super::GlobalArgs;
use crate::emulator::{Emulator, EmulatorConfig, FaultConfig, GenConfig, Keys, OrgPolicySpec, RatePolicy};
use crate::{exit, Error};

#[derive(Debug, Args)]
pub struct EmulatorArgs {
    /// Address to listen on
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Port to listen on (0 picks a free port)
    #[arg(long, default_value_t = 8787)]
    pub port: u16,
    /// Seed of the generated data
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Applications of the main organization (1,000,000 works)
    #[arg(long, default_value_t = 2000)]
    pub applications: usize,
    /// Updatable affiliate sales of the main organization (ids from 7001)
    #[arg(long, default_value_t = 16)]
    pub sales: usize,
    /// The emulator's today (YYYY-MM-DD): the last day with statistics [default: today, UTC]
    #[arg(long, value_name = "DATE")]
    pub today: Option<String>,
    /// Years of daily statistics before today
    #[arg(long, default_value_t = 6)]
    pub content_years: u32,
    /// Probability (0 to 1) that a request gets an injected fault
    #[arg(long, default_value_t = 0.0)]
    pub fault_rate: f64,
    /// Delay of the "slow response" fault, in milliseconds
    #[arg(long, default_value_t = 1500)]
    pub slow_ms: u64,
    /// Latency added to every request, in milliseconds
    #[arg(long, default_value_t = 0)]
    pub latency_ms: u64,
    /// Add applications and move pending ones to other statuses while clients page
    #[arg(long)]
    pub drift: bool,
    /// Serve introspection routes as JSON: `/__admin/requests` (counts and records),
    /// `/__admin/writes`, `/__admin/violations`, `/__admin/drift`
    #[arg(long)]
    pub admin: bool,
    /// Full-access key of the main organization
    #[arg(long, default_value = "emu-full-key")]
    pub full_key: String,
    /// Read-only key of the main organization
    #[arg(long, default_value = "emu-read-only-key")]
    pub read_only_key: String,
    /// Full-access key of the other organization
    #[arg(long, default_value = "emu-other-org-key")]
    pub other_org_key: String,
    /// Also serve N numbered organizations (fleets), organization k with the key `emu-org-<k>-key`
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub organizations: u32,
    /// Applications of each numbered organization
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub org_applications: usize,
    /// A numbered organization's own policy, `K:SETTING,...` (repeatable), with settings
    /// `min_interval_ms=MS`, `hourly_cap=N`, `cap_window_s=S`, `fault_rate=P`, `revoked`,
    /// `skewed_totals` (content totals off by one: a data-quality finding, fatal under `--strict`)
    /// and `no_content` (a new organization: no content statistics yet, both series `[]`);
    /// e.g. `--org-policy 3:hourly_cap=5,fault_rate=0.5`
    #[arg(long = "org-policy", value_name = "K:SETTINGS")]
    pub org_policies: Vec<String>,
}

impl EmulatorArgs {
    /// Validates the emulator's settings; the global rate flags are the policy it enforces.
    pub fn config(&self, global: &GlobalArgs) -> Result<(EmulatorConfig, SocketAddr), Error> {
        let mut problems = vec![];
        let today = match &self.today {
            None => chrono::Utc::now().date_naive(),
            Some(s) => NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap_or_else(|_| {
                problems.push(format!("`--today` `{s}` is not a YYYY-MM-DD date"));
                chrono::Utc::now().date_naive()
            }),
        };
        if !(0.0..=1.0).contains(&self.fault_rate) {
            problems.push(format!("`--fault-rate` {} must be between 0 and 1", self.fault_rate));
        }
        let keys = [&self.full_key, &self.read_only_key, &self.other_org_key];
        if keys.iter().any(|k| k.is_empty() || k.chars().any(char::is_whitespace)) {
            problems.push("emulator keys must be non-empty and without whitespace".into());
        }
        if keys[0] == keys[1] || keys[0] == keys[2] || keys[1] == keys[2] {
            problems.push("the three emulator keys must differ".into());
        }
        global.pacing_problems(&mut problems);
        let pacing = global.pacing();
        let rate = RatePolicy {
            min_interval: pacing.min_interval,
            hourly_cap: pacing.hourly_cap,
            cap_window: pacing.cap_window,
        };
        let mut org_policies = std::collections::BTreeMap::new();
        for spec in &self.org_policies {
            match spec.parse::<OrgPolicySpec>().and_then(|s| Ok((s.org, s.policy(&rate, self.organizations)?))) {
                Ok((k, p)) => {
                    org_policies.insert(k, p);
                }
                Err(e) => problems.push(e.to_string()),
            }
        }
        if !problems.is_empty() {
            return Err(Error::Config(problems));
        }
        let config = EmulatorConfig {
            data: GenConfig {
                seed: self.seed,
                applications: self.applications,
                sales: self.sales,
                today,
                content_years: self.content_years,
                organizations: self.organizations,
                org_applications: self.org_applications,
            },
            keys: Keys {
                full: self.full_key.clone(),
                read_only: self.read_only_key.clone(),
                other_org: self.other_org_key.clone(),
            },
            rate,
            faults: FaultConfig {
                rate: self.fault_rate,
                slow: Duration::from_millis(self.slow_ms),
                kinds: vec![],
                lost: vec![],
            },
            latency: Duration::from_millis(self.latency_ms),
            drift: self.drift,
            admin: self.admin,
            org_policies,
        };
        Ok((config, SocketAddr::new(self.host, self.port)))
    }
}

pub async fn exec(args: &EmulatorArgs, global: &GlobalArgs) -> Result<u8, Error> {
    let (config, addr) = args.config(global)?;
    let emu = Emulator::start(&config, addr).await.map_err(|source| Error::Bind { addr: addr.to_string(), source })?;
    {
        // The base URL alone on stdout's first line, so scripts can use `--port 0`.
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", emu.base_url);
        let _ = out.flush();
    }
    eprintln!(
        "emulator serving {} applications at {}\n  full-access key:  {}\n  read-only key:    {}\n  other-org key:    {}\n  rate policy: {} ms spacing, {} requests per {} s (0: none); payout marks 2 s apart\n  press Ctrl-C to stop",
        config.data.applications,
        emu.base_url,
        config.keys.full,
        config.keys.read_only,
        config.keys.other_org,
        global.min_interval_ms,
        global.hourly_cap,
        global.cap_window_s,
    );
    if config.data.organizations > 0 {
        eprintln!(
            "  {} numbered organizations of {} applications: keys emu-org-1-key … emu-org-{}-key",
            config.data.organizations, config.data.org_applications, config.data.organizations
        );
    }
    crate::stop::wait_for_shutdown().await;
    tracing::info!("emulator stopping");
    emu.stop().await;
    Ok(exit::OK)
}
