//! `creator-etl actions plan|apply`: validate a reviewed CSV, then send its approved rows once.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::{print_json, print_text, validate_both, GlobalArgs};
use crate::action::journal::Scope;
use crate::action::{ActionConfig, ActionKind, ActionReport, Reviewed};
use crate::api::{ApiKey, Client, API_KEY_ENV};
use crate::out::OutDir;
use crate::sync::{Stage, StageLog};
use crate::{exit, Error};

#[derive(Debug, Subcommand)]
pub enum ActionsCommand {
    /// Validate the whole file and print what `apply` would do; sends nothing
    Plan(ActionsArgs),
    /// Validate the whole file, then send its approved rows once each; prints a JSON report on
    /// stdout and a summary on stderr
    Apply(ActionsArgs),
}

#[derive(Debug, Args)]
pub struct ActionsArgs {
    /// The reviewed CSV
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    #[command(flatten)]
    pub guards: ActionGuards,
}

/// Limits on what an actions run may send.
#[derive(Debug, Args)]
pub struct ActionGuards {
    /// Refuse (sending nothing) when more than N rows would be sent
    #[arg(long, value_name = "N")]
    pub max_rows: Option<usize>,
    /// Send only rows of this action
    #[arg(long, value_enum, value_name = "ACTION")]
    pub only: Option<ActionKind>,
    /// Send again rows that failed for good (404, 422) or ended in doubt in an earlier run
    #[arg(long)]
    pub retry_failed: bool,
}

impl ActionGuards {
    /// Validates an actions request: the guards and the whole file, before any I/O elsewhere.
    pub fn config(&self, file: &std::path::Path, global: &GlobalArgs) -> Result<(ActionConfig, Reviewed), Error> {
        if self.max_rows == Some(0) {
            return Err(Error::Config(vec!["`--max-rows` must be at least 1".into()]));
        }
        let reviewed = crate::action::read(file)?;
        // The journal's scope: the service and the key's fingerprint. Without a key (a plan), the
        // scope is the service alone; `apply` reports the missing key itself.
        let key = ApiKey::resolve(global.api_key_file.as_deref(), std::env::var(API_KEY_ENV).ok().as_deref()).ok();
        let config = ActionConfig {
            out: OutDir::new(&global.out),
            file: file.to_path_buf(),
            max_rows: self.max_rows,
            only: self.only,
            retry_failed: self.retry_failed,
            scope: Scope::new(&global.base_url, key.map(|k| k.fingerprint())),
        };
        Ok((config, reviewed))
    }
}

pub fn plan(args: &ActionsArgs, global: &GlobalArgs) -> Result<u8, Error> {
    let (config, reviewed) = args.guards.config(&args.file, global)?;
    print_text(&crate::action::plan(&config, &reviewed)?)?;
    Ok(exit::OK)
}

pub async fn apply(args: &ActionsArgs, global: &GlobalArgs) -> Result<u8, Error> {
    let (client_config, (config, reviewed)) =
        validate_both(global.client_config(), args.guards.config(&args.file, global))?;
    // The lock first: the pacer's memory is read as the last command on this `--out` left it.
    let _lock = config.out.lock("actions")?;
    let client = Client::new(client_config.pacing_memory_in(&config.out.state_dir()))?;
    let log = StageLog::begin(&config.out, "actions apply", &[Stage::Actions]);
    let report = crate::action::apply(&config, &reviewed, &client, crate::stop::stop_signal())
        .await
        .map_err(Error::from)
        .inspect_err(|e| log.fail(e))?;
    log.actions_ended(&report, config.only.is_some());
    print_json(&report)?;
    Ok(actions_exit_code(&report))
}

/// Prints the summary of an actions run on stderr and picks its exit code: 4 when the key was
/// refused, 130 when interrupted, 3 when any approved row did not succeed.
pub(crate) fn actions_exit_code(report: &ActionReport) -> u8 {
    eprintln!("{}", crate::action::summary(report));
    if report.stopped_by_auth {
        eprintln!("error: {}", report.stopped.as_deref().unwrap_or("the API key was refused"));
    }
    crate::sync::actions_code(report)
}
