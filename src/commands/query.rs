//! `creator-etl query`: a named query or a SQL file, against the warehouse or the lake.

use std::path::PathBuf;

use clap::Args;

use super::load::checked_lake;
use super::{print_text, GlobalArgs};
use crate::query::lake::LakeSource;
use crate::query::{Format, QueryConfig, Source};
use crate::{exit, Error};

#[derive(Debug, Args)]
pub struct QueryArgs {
    /// A named query (wow_latest, weekly_trend, cohort_acceptance, cohort_by_month, pending_queue,
    /// status_changes, action_outcomes, run_health) or the path of a .sql file
    #[arg(value_name = "NAME|FILE")]
    pub query: String,
    /// Output format
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
    /// columns (the named queries need it when there are several)
    #[arg(long, value_name = "NAME")]
    pub org: Option<String>,
    /// With `--lake`: read every table at the versions in this report (the JSON that `load
    /// --lake` or `run --lake` printed: its `lake.versions`), which is exactly that sync's data
    #[arg(long, value_name = "FILE")]
    pub at_versions: Option<PathBuf>,
}

impl QueryArgs {
    pub fn config(&self, global: &GlobalArgs) -> Result<QueryConfig, Error> {
        if self.lake.is_none() && self.at_versions.is_some() {
            return Err(Error::Config(vec![
                "`--at-versions` reads a lake at given versions; it goes with `--lake`".into()
            ]));
        }
        let source = match (&self.lake, &self.org) {
            (None, org) => {
                if let Some(org) = org.as_deref().filter(|o| !crate::load::lake::valid_org(o)) {
                    return Err(Error::Config(vec![format!(
                        "`--org` `{org}` is not an organization's name (lowercase letters, digits, `-`, `_`, at most 63)"
                    )]));
                }
                Source::Warehouse { path: global.out.join("warehouse.duckdb"), org: org.clone() }
            }
            (Some(url), org) => {
                let mut problems = vec![];
                match checked_lake(url, org.as_deref(), &mut problems) {
                    Some(url) if problems.is_empty() => {
                        let at_versions =
                            self.at_versions.as_deref().map(crate::query::lake::versions_of_report).transpose()?;
                        Source::Lake(LakeSource {
                            url,
                            org: org.clone(),
                            cache: global.out.join("lake-cache"),
                            at_versions,
                        })
                    }
                    _ => return Err(Error::Config(problems)),
                }
            }
        };
        Ok(QueryConfig::new(source, &self.query, &self.params, self.format)?)
    }
}

pub async fn exec(args: &QueryArgs, global: &GlobalArgs) -> Result<u8, Error> {
    let config = args.config(global)?;
    let format = config.format;
    print_text(&crate::query::render(&crate::query::run(config).await?, format)?)?;
    Ok(exit::OK)
}
