//! The command line: the top-level parser and the dispatch to [`crate::commands`], where each
//! subcommand's arguments are defined next to the code that turns them into a config. Nothing
//! here reads a file, the environment or the network.

use clap::{Parser, Subcommand};

use crate::commands::actions::ActionsCommand;
use crate::commands::demo::DemoArgs;
use crate::commands::emulator::EmulatorArgs;
use crate::commands::extract::ExtractCommandArgs;
use crate::commands::fleet::FleetCommand;
use crate::commands::load::LoadArgs;
use crate::commands::query::QueryArgs;
use crate::commands::report::ReportArgs;
use crate::commands::run::RunArgs;
use crate::commands::{self, GlobalArgs};
use crate::Error;

/// `creator-etl --version`: the package version and the git commit the binary was built from
/// (`unknown` when built outside a git checkout; see build.rs).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("CREATOR_ETL_COMMIT"), ")");

#[derive(Debug, Parser)]
#[command(
    name = "creator-etl",
    version = VERSION,
    about = "Extract a creator-marketing service's data into Parquet and DuckDB, and replay reviewed corrections",
    after_help = "The API key is read from the CREATOR_API_KEY environment variable or --api-key-file, never from a flag.\nExit codes: 0 ok, 1 failed, 2 usage/config/input error, 3 some action rows failed, 4 key rejected (401/403), 5 --out locked, 6 some fleet organizations failed, 7 report: some organization not fresh, 130 interrupted."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check the API key and connectivity with one request; prints a JSON report
    Check,
    /// Serve the emulator of the API on this machine; prints its base URL on stdout
    Emulator(EmulatorArgs),
    /// Crawl every application and the content statistics into the raw landing; resumes an
    /// unfinished run; prints the run report on stdout
    Extract(ExtractCommandArgs),
    /// Transform a raw run and load it into the DuckDB warehouse and Parquet, without calling
    /// the API; prints the load report on stdout
    Load(LoadArgs),
    /// Extract, transform and load in one go, then optionally apply reviewed actions: the
    /// command to schedule
    Run(RunArgs),
    /// Replay approved rows of a reviewed CSV (sale corrections, payout markings), exactly once
    #[command(subcommand)]
    Actions(ActionsCommand),
    /// Run a named query (`queries/`) or a SQL file against the warehouse, read-only
    Query(QueryArgs),
    /// Write the HTML report (`OUT/report/index.html`): freshness, views and likes,
    /// applications, cohorts and corrections, one self-contained file; prints a JSON summary
    Report(ReportArgs),
    /// The whole product on this machine: an in-process emulator, `run`, the example actions,
    /// and a summary (writes only into an empty directory or an earlier demo's)
    Demo(DemoArgs),
    /// Sync many organizations from one fleet file, each with its own key and budget
    #[command(subcommand)]
    Fleet(FleetCommand),
}

/// Runs a parsed command line; the exit code of a run that finished, or an [`Error`] whose
/// [`exit_code`](Error::exit_code) says how it failed.
pub async fn run(cli: Cli) -> Result<u8, Error> {
    let global = &cli.global;
    match &cli.command {
        Command::Check => commands::check::exec(global).await,
        Command::Emulator(args) => commands::emulator::exec(args, global).await,
        Command::Extract(args) => commands::extract::exec(args, global).await,
        Command::Load(args) => commands::load::exec(args, global).await,
        Command::Run(args) => commands::run::exec(args, global).await,
        Command::Actions(ActionsCommand::Plan(args)) => commands::actions::plan(args, global),
        Command::Actions(ActionsCommand::Apply(args)) => commands::actions::apply(args, global).await,
        Command::Query(args) => commands::query::exec(args, global).await,
        Command::Report(args) => commands::report::exec(args, global).await,
        Command::Fleet(FleetCommand::Run(args)) => commands::fleet::run(args, global).await,
        Command::Fleet(FleetCommand::Status(args)) => commands::fleet::status(args, global),
        Command::Demo(args) => commands::demo::exec(args, global).await,
    }
}
