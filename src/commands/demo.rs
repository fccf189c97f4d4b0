//! `creator-etl demo`: the whole product on this machine.

use clap::Args;

use super::GlobalArgs;
use crate::demo::DemoConfig;
use crate::Error;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Applications of the emulated organization
    #[arg(long, default_value_t = 5000)]
    pub applications: usize,
    /// Seed of the emulated data (the example reviewed CSV matches seed 42)
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

pub async fn exec(args: &DemoArgs, global: &GlobalArgs) -> Result<u8, Error> {
    crate::demo::run(&DemoConfig::new(
        crate::out::OutDir::new(&global.out),
        args.applications,
        args.seed,
        global.quiet == 0,
    )?)
    .await
}
