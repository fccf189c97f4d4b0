//! The `creator-etl` binary: parse arguments, set up logging, run, map the result to an exit code.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use creator_etl::cli::Cli;
use creator_etl::commands::{GlobalArgs, LogFormat};
use creator_etl::exit;
use tracing_subscriber::EnvFilter;

/// The allocator of Rust's memory (DuckDB's C++ keeps the system's): many threads allocating and
/// freeing small buffers at once, a fleet's organizations' and Polars'. Its settings come from
/// the environment (`MIMALLOC_PURGE_DELAY=0` and others: the manual's Performance page).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

/// The fewest worker threads of the async runtime, whatever the cores: a fleet's organizations
/// write their small files (stage ledger, resume state, landing, status) with their fsyncs on
/// the workers, and with one worker per core, each fsync held a core's share of the fleet.
const MIN_WORKER_THREADS: usize = 8;

/// The async runtime's worker threads: one per core, and at least [`MIN_WORKER_THREADS`],
/// unless `TOKIO_WORKER_THREADS` says how many (a number above 0: anything else is refused
/// here, where tokio would panic).
fn worker_threads() -> Result<usize, String> {
    match std::env::var_os("TOKIO_WORKER_THREADS") {
        None => Ok(std::thread::available_parallelism().map_or(1, |n| n.get()).max(MIN_WORKER_THREADS)),
        Some(v) => match v.to_str().and_then(|v| v.trim().parse::<usize>().ok()) {
            Some(n) if n > 0 => Ok(n),
            _ => Err(format!("TOKIO_WORKER_THREADS must be a number above 0, not {v:?}")),
        },
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
    let workers = match worker_threads() {
        Ok(n) => n,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(exit::USAGE);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().worker_threads(workers).build() {
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
