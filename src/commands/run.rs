//! `creator-etl run`: one organization's whole sync, the command to schedule.

use clap::Args;
use std::path::PathBuf;

use super::actions::ActionGuards;
use super::extract::ExtractArgs;
use super::load::LoadOptions;
use super::{print_json, stop_after_in_flight, validate_both, GlobalArgs};
use crate::api::Client;
use crate::sync::SyncJob;
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
}

pub async fn exec(args: &RunArgs, global: &GlobalArgs) -> Result<u8, Error> {
    let (client_config, (config, load_config)) =
        validate_both(global.client_config(), validate_both(args.extract.config(global), args.options.config(global)))?;
    if config.plan_only {
        return Err(Error::Config(vec!["`--plan-only` belongs to `creator-etl extract`".into()]));
    }
    // The reviewed file is validated before anything is fetched.
    let actions = args.actions.as_deref().map(|file| args.guards.config(file, global)).transpose()?;
    let client = Client::new(client_config.pacing_memory_in(&config.out.state_dir()))?;
    let _lock = config.out.lock("run")?;
    let (client, stop) = stop_after_in_flight(client);
    let report = crate::sync::run(
        SyncJob { extract: config, load: load_config, actions },
        &client,
        stop,
        crate::sync::Sharing::Alone,
    )
    .await?;
    print_json(&report)?;
    // As `actions apply`: the actions' summary (and a refused key) on stderr, and their code.
    Ok(report.actions.as_ref().map_or(crate::exit::OK, super::actions::actions_exit_code))
}
