//! `creator-etl run`: one organization's whole sync, the command to schedule.

use clap::Args;
use serde::Serialize;
use std::path::PathBuf;

use super::actions::ActionGuards;
use super::extract::ExtractArgs;
use super::load::LoadOptions;
use super::{print_json, stop_after_in_flight, validate_both, GlobalArgs, ReportNote};
use crate::api::Client;
use crate::out::OutDir;
use crate::report::ReportConfig;
use crate::sync::{StageLog, SyncJob};
use crate::Error;

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub extract: ExtractArgs,
    #[command(flatten)]
    pub options: LoadOptions,
    /// After the load, apply this reviewed CSV (validated before anything is fetched)
    #[arg(long, value_name = "FILE")]
    pub actions: Option<PathBuf>,
    #[command(flatten)]
    pub guards: ActionGuards,
    /// Do not write the HTML report (`OUT/report/index.html`) after the run
    #[arg(long)]
    pub no_report: bool,
}

/// What `run` prints: the sync's report, and the HTML report's page (or why it could not be
/// written: the run's outcome and exit code stand either way).
#[derive(Serialize)]
struct RunOutput<'a> {
    #[serde(flatten)]
    sync: &'a crate::sync::SyncReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    report: Option<ReportNote>,
}

/// Writes the HTML report of `out`'s warehouse after a run, which recorded how it ended in the
/// stage ledger first.
async fn write_report(out: &OutDir) -> ReportNote {
    ReportNote::write(ReportConfig::after_sync(out)).await
}

pub async fn exec(args: &RunArgs, global: &GlobalArgs) -> Result<u8, Error> {
    let (client_config, (config, load_config)) =
        validate_both(global.client_config(), validate_both(args.extract.config(global), args.options.config(global)))?;
    // The reviewed file is validated before anything is fetched.
    let actions = args.actions.as_deref().map(|file| args.guards.config(file, global)).transpose()?;
    // The lock first: the pacer's memory is read as the last command on this `--out` left it.
    let _lock = config.out.lock("run")?;
    let client = Client::new(client_config.pacing_memory_in(&config.out.state_dir()))?;
    let (client, stop) = stop_after_in_flight(client);
    let out = config.out.clone();
    let job = SyncJob { extract: config, load: load_config, actions };
    // Every stage this run will do is on record before its first step: a kill anywhere leaves it
    // pending, which the report reads as interrupted.
    let log = StageLog::begin(&out, "run", &job.stages());
    let result = crate::sync::run(job, &client, stop, crate::sync::Sharing::Alone, &log).await;
    let report = match result {
        Ok(report) => report,
        Err(e) => {
            // The page shows the failure at the top, over the data of the last load; a later
            // `report` reads it from the ledger too.
            log.fail(&e);
            if !args.no_report && out.warehouse().is_file() {
                write_report(&out).await;
            }
            return Err(e);
        }
    };
    log.finish();
    let note = if args.no_report { None } else { Some(write_report(&out).await) };
    print_json(&RunOutput { sync: &report, report: note })?;
    // As `actions apply`: the actions' summary (and a refused key) on stderr, and their code.
    Ok(report.actions.as_ref().map_or(crate::exit::OK, super::actions::actions_exit_code))
}
