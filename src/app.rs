//! Runs a parsed command line: validate, then act. Returns the exit code of a run that finished,
//! or an [`Error`] whose [`exit_code`](Error::exit_code) says how it failed.

use std::io::Write;

use serde::Serialize;

use crate::api::models::ApplicationStatus;
use crate::api::{ApiError, ApplicationsQuery, Client, MetricsSnapshot};
use tokio::sync::watch;

use crate::cli::{validate_both, Cli, Command, EmulatorArgs, ExtractArgs, GlobalArgs};

use crate::emulator::Emulator;
use crate::{exit, Error};

pub async fn run(cli: Cli) -> Result<u8, Error> {
    match &cli.command {
        Command::Check => check(&cli.global).await,
        Command::Emulator(args) => emulator(args, &cli.global).await,
        Command::Extract(args) => extract(args, &cli.global).await,
    }
}

/// A stop flag raised by the first Ctrl-C or SIGTERM; a second one exits at once.
fn stop_signal() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_shutdown().await;
        tracing::warn!("stopping after the requests in flight; press Ctrl-C again to quit at once");
        let _ = tx.send(true);
        wait_for_shutdown().await;
        std::process::exit(i32::from(exit::INTERRUPTED));
    });
    rx
}

async fn extract(args: &ExtractArgs, global: &GlobalArgs) -> Result<u8, Error> {
    let (client_config, config) = validate_both(global.client_config(), args.config(global))?;
    let client = Client::new(client_config)?;
    let _lock = config.out.lock("extract")?;
    let report = crate::extract::run(&config, &client, stop_signal()).await?;
    print_json(&report)?;
    Ok(exit::OK)
}

/// What `check` prints on stdout.
#[derive(Debug, Serialize)]
pub struct CheckReport {
    pub base_url: String,
    pub key: &'static str,
    /// Pending applications, from the list's `meta.row_count`.
    pub pending_applications: u64,
    pub requests: MetricsSnapshot,
}

async fn check(global: &GlobalArgs) -> Result<u8, Error> {
    let config = global.client_config()?;
    let client = Client::new(config)?;
    let page = client
        .list_applications(&ApplicationsQuery { per_page: 1, ..ApplicationsQuery::page(ApplicationStatus::Pending, 1) })
        .await?;
    let report = CheckReport {
        base_url: client.base_url().to_string(),
        key: "accepted",
        pending_applications: page.value.meta.row_count,
        requests: client.metrics(),
    };
    print_json(&report)?;
    Ok(exit::OK)
}

fn print_json<T: Serialize>(value: &T) -> Result<(), Error> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Error::Api(ApiError::InvalidRequest(format!("cannot encode the report: {e}"))))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").map_err(|source| Error::Io { context: "cannot write to stdout".into(), source })
}

async fn emulator(args: &EmulatorArgs, global: &GlobalArgs) -> Result<u8, Error> {
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
    wait_for_shutdown().await;
    tracing::info!("emulator stopping");
    emu.stop().await;
    Ok(exit::OK)
}

async fn wait_for_shutdown() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
