//! `creator-etl report`: the HTML page of what the warehouse (or the lake) holds.

use clap::Args;

use super::{parse_duration, print_json, GlobalArgs};
use crate::out::OutDir;
use crate::report::{ReportConfig, RunState};
use crate::{exit, Error};

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Read this Delta Lake's current snapshot (`file:///path` or `s3://bucket/prefix`) instead
    /// of the warehouse; the page is still written under `OUT/report/`
    #[arg(long, env = "CREATOR_ETL_LAKE", value_name = "URL")]
    pub lake: Option<String>,
    /// Only this organization of a fleet warehouse or a lake: its page is `index.html` (without
    /// it, several organizations get an overview and a page each)
    #[arg(long, value_name = "NAME")]
    pub org: Option<String>,
    /// Show the data as stale when its last sync finished longer ago than this (`26h`, `3d`);
    /// the default is a daily schedule with two hours' slack
    #[arg(long, default_value = "26h", value_name = "DURATION")]
    pub stale_after: String,
}

impl ReportArgs {
    pub fn config(&self, global: &GlobalArgs) -> Result<ReportConfig, Error> {
        let stale_after = parse_duration(&self.stale_after).ok_or_else(|| {
            Error::Config(vec![format!(
                "`--stale-after` `{}` is not a duration: write e.g. `26h`, `90m` or `3d`",
                self.stale_after
            )])
        })?;
        let source = super::query::source(self.lake.as_deref(), self.org.as_deref(), None, global)?;
        // A fleet whose organizations keep their own warehouses has no fleet warehouse (its
        // writer's file neither), but published organizations' ones.
        let out = OutDir::new(&global.out);
        let per_org = || {
            std::fs::read_dir(out.orgs_dir())
                .into_iter()
                .flatten()
                .flatten()
                .any(|e| OutDir::new(e.path()).warehouse().is_file())
        };
        if self.lake.is_none() && !out.warehouse().exists() && !out.writer_warehouse().exists() && per_org() {
            return Err(Error::Config(vec![format!(
                "`{}` holds a fleet whose organizations keep their own warehouses (`fleet run --warehouse per-org`): \
                 write each one's report with `creator-etl report --out {}`",
                global.out.display(),
                out.org("NAME").root().display()
            )]));
        }
        let state = match (&self.lake, out.orgs_dir().is_dir()) {
            (Some(_), _) => RunState::DataOnly,
            (None, true) => RunState::Fleet(global.out.clone()),
            (None, false) => RunState::Own { out: out.clone(), locked_here: false },
        };
        let refresh = crate::report::Refresh::All;
        Ok(ReportConfig {
            source,
            org: self.org.clone(),
            dir: out.report_dir(),
            state,
            stale_after,
            refresh,
            stop: None,
        })
    }
}

pub async fn exec(args: &ReportArgs, global: &GlobalArgs) -> Result<u8, Error> {
    let summary = crate::report::write(args.config(global)?).await?;
    print_json(&summary)?;
    // A monitor's answer: every page fresh (or running over fresh data), or not.
    let healthy = summary.pages.iter().all(|p| p.health.is_healthy());
    Ok(if healthy { exit::OK } else { exit::NOT_FRESH })
}
