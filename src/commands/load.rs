//! `creator-etl load`: transform a raw run and load it, without calling the API. Its options are
//! shared by `run`.

use std::time::Duration;

use clap::Args;
use reqwest::Url;

use super::{print_json, GlobalArgs};
use crate::load::LoadConfig;
use crate::out::OutDir;
use crate::sync::{load_blocking, push_to_lake, restore_from_lake, Stage, StageLog};
use crate::{exit, Error};

#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Raw run to load [default: the newest run that finished extracting]
    #[arg(long, value_name = "RUN_ID")]
    pub from_raw: Option<String>,
    #[command(flatten)]
    pub options: LoadOptions,
}

#[derive(Debug, Args)]
pub struct LoadOptions {
    /// Bucket edges of monthly posts for `post_count_cohorts`, comma-separated, increasing: the
    /// default gives the buckets `0`, `1-4`, `5-12`, `13-30`, `31+`, plus `no_accounts`
    #[arg(long, value_delimiter = ',', default_value = crate::transform::DEFAULT_COHORT_EDGES_FLAG, value_name = "LIST")]
    pub cohort_edges: Vec<i64>,
    /// Fail the load when a data-quality check finds a problem (otherwise it is recorded)
    #[arg(long)]
    pub strict: bool,
    /// Seconds a Parquet version is kept after a newer one replaces it, for readers that listed
    /// its files just before
    #[arg(long, default_value_t = crate::load::DEFAULT_PARQUET_GRACE.as_secs(), value_name = "S")]
    pub parquet_grace_s: u64,
    /// Also write every table to this Delta Lake (`file:///path` or `s3://bucket/prefix`),
    /// replacing only `--org`'s rows
    #[arg(long, env = "CREATOR_ETL_LAKE", value_name = "URL")]
    pub lake: Option<String>,
    /// The organization whose data this is, a slug (`acme`, `brand-2`); required with `--lake`
    #[arg(long, value_name = "NAME")]
    pub org: Option<String>,
    /// Accept an `s3://` lake whose endpoint ignores conditional writes (`If-None-Match`), which
    /// the first commit probes: two writers could then both commit one Delta version and lose one
    #[arg(long, env = "CREATOR_ETL_LAKE_UNSAFE_NO_CONDITIONAL_WRITES")]
    pub lake_unsafe_no_conditional_writes: bool,
}

impl LoadOptions {
    pub fn config(&self, global: &GlobalArgs) -> Result<LoadConfig, Error> {
        let mut problems = vec![];
        if let Err(e) = crate::transform::buckets(&self.cohort_edges) {
            problems.push(format!("`--cohort-edges`: {e}"));
        }
        let lake = match (&self.lake, &self.org) {
            (None, None) => None,
            (None, Some(_)) => {
                problems.push("`--org` names the organization in a lake; it goes with `--lake`".into());
                None
            }
            (Some(_), None) => {
                problems.push("`--lake` needs `--org NAME`: the organization whose rows this load replaces".into());
                None
            }
            (Some(url), Some(org)) => {
                checked_lake(url, Some(org), &mut problems).map(|url| crate::load::lake::LakeConfig {
                    url,
                    org: org.clone(),
                    unconditional_writes_ok: self.lake_unsafe_no_conditional_writes,
                })
            }
        };
        if !problems.is_empty() {
            return Err(Error::Config(problems));
        }
        Ok(LoadConfig {
            out: OutDir::new(&global.out),
            cohort_edges: self.cohort_edges.clone(),
            strict: self.strict,
            parquet_grace: Duration::from_secs(self.parquet_grace_s),
            lake,
        })
    }
}

/// Checks `--lake URL` and, when given, `--org NAME`: the URL as the lake code takes it, or the
/// problems added.
pub(crate) fn checked_lake(url: &str, org: Option<&str>, problems: &mut Vec<String>) -> Option<String> {
    if let Some(org) = org.filter(|o| !crate::load::lake::valid_org(o)) {
        problems.push(format!(
            "`--org` `{org}` is not a slug: lowercase letters, digits, `-` and `_`, at most 63 characters"
        ));
    }
    lake_url(url).map_err(|e| problems.push(e)).ok()
}

/// A lake URL, checked: `file:///absolute/path` or `s3://bucket/prefix`, without a trailing slash.
fn lake_url(raw: &str) -> Result<String, String> {
    let bad = |why: &str| format!("`--lake` `{raw}` {why}; use `file:///absolute/path` or `s3://bucket/prefix`");
    let url = Url::parse(raw).map_err(|e| bad(&format!("is not a URL ({e})")))?;
    match url.scheme() {
        "file" if url.path().len() > 1 && url.host_str().is_none_or(str::is_empty) => {}
        "s3" if url.host_str().is_some_and(|h| !h.is_empty()) => {}
        "file" | "s3" => return Err(bad("has no path or bucket")),
        other => return Err(bad(&format!("has the scheme `{other}`"))),
    }
    if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() || url.password().is_some() {
        return Err(bad("must not carry a query, a fragment or credentials"));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

pub async fn exec(args: &LoadArgs, global: &GlobalArgs) -> Result<u8, Error> {
    let config = args.options.config(global)?;
    let _lock = config.out.lock("load")?;
    let run_id = match &args.from_raw {
        Some(id) => id.clone(),
        None => crate::load::latest_complete_run(&config.out)?,
    };
    let report = crate::load::extract_report(&config.out, &run_id)?;
    let (lake, out) = (config.lake.clone(), config.out.clone());
    let stages: &[Stage] = if lake.is_some() { &[Stage::Load, Stage::Lake] } else { &[Stage::Load] };
    let log = StageLog::begin(&out, "load", stages);
    let result = async {
        // The lake's state of the organization first, as `run` does: its push replaces the
        // organization's rows, so an `--out` that lacks the lake's runs or action journal must
        // not push over them.
        if let Some(lake) = &lake {
            log.enter(Stage::Lake);
            restore_from_lake(&out, lake, None).await?;
        }
        log.enter(Stage::Load);
        let mut loaded = load_blocking(config, run_id.clone(), Some(report), None).await?;
        log.done(Stage::Load, Some(&run_id));
        if let Some(lake) = &lake {
            log.enter(Stage::Lake);
            loaded.lake = Some(push_to_lake(&out, lake, &crate::load::catalog::committed_tables(), None).await?);
            log.done(Stage::Lake, Some(&run_id));
        }
        Ok::<_, Error>(loaded)
    }
    .await;
    let loaded = result.inspect_err(|e| log.fail(e))?;
    print_json(&loaded)?;
    Ok(exit::OK)
}
