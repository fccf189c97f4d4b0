//! `creator-etl query`: a named query or a SQL file, against the warehouse or the lake.

use std::path::{Path, PathBuf};

use clap::Args;

use super::load::checked_lake;
use super::{print_text, GlobalArgs};
use crate::query::lake::LakeSource;
use crate::query::{Format, QueryConfig, Source};
use crate::{exit, Error};

#[derive(Debug, Args)]
pub struct QueryArgs {
    /// A named query (wow_latest, movers, weekly_trend, cohort_acceptance, cohort_by_month,
    /// applications_by_status, pending_queue, status_changes, action_outcomes, run_health) or the
    /// path of a .sql file
    #[arg(value_name = "NAME|FILE")]
    pub query: String,
    /// Output format; JSON is one object per line, numbers as numbers, NULL as `null`
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// A parameter the query declares, as NAME=VALUE (repeatable), e.g. `--param days=30`
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    /// Query this Delta Lake's current snapshot (`file:///path` or `s3://bucket/prefix`) instead
    /// of the warehouse; an `s3://` lake's files are cached under `OUT/lake-cache/`
    #[arg(long, env = "CREATOR_ETL_LAKE", value_name = "URL")]
    pub lake: Option<String>,
    /// Only this organization's rows of a lake or a fleet warehouse, with one organization's
    /// columns (a named query prints one organization's answer: it needs `--org` when there
    /// are several)
    #[arg(long, value_name = "NAME")]
    pub org: Option<String>,
    /// With `--lake`: read every table at the versions in this report (the JSON that `load
    /// --lake` or `run --lake` printed: its `lake.versions`), which is exactly that sync's data
    #[arg(long, value_name = "FILE")]
    pub at_versions: Option<PathBuf>,
}

impl QueryArgs {
    pub fn config(&self, global: &GlobalArgs) -> Result<QueryConfig, Error> {
        let source = source(self.lake.as_deref(), self.org.as_deref(), self.at_versions.as_deref(), global)?;
        Ok(QueryConfig::new(source, &self.query, &self.params, self.format)?)
    }
}

/// What `query` and `report` read: `OUT/warehouse.duckdb`, or the lake at `lake` (at the
/// versions of a report, with `at_versions`); `org` checked to be an organization's name.
pub(crate) fn source(
    lake: Option<&str>,
    org: Option<&str>,
    at_versions: Option<&Path>,
    global: &GlobalArgs,
) -> Result<Source, Error> {
    if lake.is_none() && at_versions.is_some() {
        return Err(Error::Config(
            vec!["`--at-versions` reads a lake at given versions; it goes with `--lake`".into()],
        ));
    }
    let org = org.map(str::to_owned);
    match lake {
        None => {
            if let Some(org) = org.as_deref().filter(|o| !crate::load::lake::valid_org(o)) {
                return Err(Error::Config(vec![format!(
                    "`--org` `{org}` is not an organization's name (lowercase letters, digits, `-`, `_`, at most 63)"
                )]));
            }
            Ok(Source::Warehouse { path: crate::out::OutDir::new(&global.out).warehouse(), org })
        }
        Some(url) => {
            let mut problems = vec![];
            match checked_lake(url, org.as_deref(), &mut problems) {
                Some(url) if problems.is_empty() => {
                    let at_versions = at_versions.map(crate::query::lake::versions_of_report).transpose()?;
                    Ok(Source::Lake(LakeSource {
                        url,
                        org,
                        cache: crate::out::OutDir::new(&global.out).lake_cache_dir(),
                        at_versions,
                    }))
                }
                _ => Err(Error::Config(problems)),
            }
        }
    }
}

pub async fn exec(args: &QueryArgs, global: &GlobalArgs) -> Result<u8, Error> {
    let config = args.config(global)?;
    let format = config.format;
    print_text(&crate::query::render(&crate::query::run(config).await?, format)?)?;
    Ok(exit::OK)
}
