//! The `creator-etl` binary: parse arguments, set up logging, run, map the result to an exit code.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use creator_etl::cli::Cli;
use creator_etl::commands::{GlobalArgs, LogFormat};
use creator_etl::exit;
use tracing_subscriber::EnvFilter;

fn init_tracing(global: &GlobalArgs) {
    let default = match (global.verbose, global.quiet) {
        (0, 0) => "warn,creator_etl=info",
        (1, _) => "warn,creator_etl=debug",
        (v, _) if v >= 2 => "trace",
        (_, 1) => "warn",
        _ => "error",
    };
    // delta-rs's kernel logs "No files in log segment" at ERROR whenever a lake table does not
    // exist yet, which creator-etl then creates: not an error for our users.
    let default = format!("{default},buoyant_kernel::snapshot::builder=off");
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match global.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // --help and --version are not errors.
            return ExitCode::from(if e.use_stderr() { exit::USAGE } else { exit::OK });
        }
    };
    init_tracing(&cli.global);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::FAILED);
        }
    };
    match runtime.block_on(creator_etl::cli::run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            tracing::debug!(error = %e.report(), "run failed");
            eprintln!("error: {}", e.report());
            ExitCode::from(e.exit_code())
        }
    }
}
