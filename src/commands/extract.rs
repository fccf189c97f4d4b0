//! `creator-etl extract`: crawl into the raw landing, without loading. Its arguments are shared by
//! `run`, and its sync mode by `fleet run`.

use std::time::Duration;

use chrono::NaiveDate;
use clap::Args;

use super::{duration_flag, print_json, stop_after_in_flight, validate_both, GlobalArgs};
use crate::api::models::ApplicationStatus;
use crate::api::Client;
use crate::extract::{ExtractConfig, SyncMode};
use crate::out::OutDir;
use crate::sync::{blocking, read_previous, Stage, StageLog};
use crate::{exit, Error};

/// How a sync reads the applications: `run`, `extract` and `fleet run` share these.
#[derive(Debug, Args)]
pub struct SyncArgs {
    /// `quick`: page 1 of each status, then only the pages that locate what changed since the
    /// last sync; `full`: every page (a reconcile); `auto`: quick within `--reconcile-every` of
    /// the last full sync, full otherwise
    #[arg(long, default_value_t = SyncMode::Auto, value_name = "MODE")]
    pub sync: SyncMode,
    /// With `--sync auto`: a full sync when the last one finished this long ago (`90m`, `24h`)
    #[arg(long, default_value = crate::extract::DEFAULT_RECONCILE_EVERY_FLAG, value_name = "DURATION")]
    pub reconcile_every: String,
}

impl SyncArgs {
    /// The mode and the reconcile interval; a problem is added for a bad duration.
    pub(crate) fn parse(&self, problems: &mut Vec<String>) -> (SyncMode, Duration) {
        let every = duration_flag("--reconcile-every", &self.reconcile_every, problems);
        (self.sync, every.unwrap_or(crate::extract::DEFAULT_RECONCILE_EVERY))
    }
}

#[derive(Debug, Args)]
pub struct ExtractArgs {
    /// Statuses to crawl, comma-separated [default: all six]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub statuses: Vec<String>,
    /// Only applications to this campaign
    #[arg(long, value_name = "ID")]
    pub campaign_id: Option<i64>,
    /// Requests in flight at once; the pacer still spaces their starts, so under the real 2 s
    /// spacing more buys nothing: it pays only when answers take longer than the spacing
    #[arg(long, default_value_t = crate::extract::DEFAULT_CONCURRENCY, value_name = "N")]
    pub concurrency: usize,
    /// Crawls of a status while its rows disagree with the service's count (drift)
    #[arg(long, default_value_t = crate::extract::DEFAULT_MAX_PASSES, value_name = "N")]
    pub max_passes: u32,
    /// First day of content statistics (YYYY-MM-DD, UTC) [default: last loaded day minus
    /// --lookback-days, or --since-days ago on the first run]
    #[arg(long, value_name = "DATE")]
    pub from: Option<String>,
    /// Last day of content statistics (YYYY-MM-DD, UTC) [default: today; later days are lowered to today]
    #[arg(long, value_name = "DATE")]
    pub to: Option<String>,
    /// Days per content request
    #[arg(long, default_value_t = crate::extract::DEFAULT_WINDOW_DAYS, value_name = "N")]
    pub window_days: u32,
    /// Days before the last loaded day that are fetched again, because recent days still change
    #[arg(long, default_value_t = crate::extract::DEFAULT_LOOKBACK_DAYS, value_name = "N")]
    pub lookback_days: u32,
    /// How far back the first run goes
    #[arg(long, default_value_t = crate::extract::DEFAULT_SINCE_DAYS, value_name = "N")]
    pub since_days: u32,
    /// After a completed run, keep only the newest N raw landings
    #[arg(long, value_name = "N")]
    pub keep_raw: Option<usize>,
    /// Start a new run even if an unfinished one could be resumed
    #[arg(long)]
    pub fresh: bool,
    #[command(flatten)]
    pub sync: SyncArgs,
}

fn parse_day(flag: &str, value: &Option<String>, problems: &mut Vec<String>) -> Option<NaiveDate> {
    let v = value.as_ref()?;
    match NaiveDate::parse_from_str(v, "%Y-%m-%d") {
        Ok(d) => Some(d),
        Err(_) => {
            problems.push(format!("`{flag}` `{v}` is not a YYYY-MM-DD date"));
            None
        }
    }
}

impl ExtractArgs {
    /// Validates the extract request.
    pub fn config(&self, global: &GlobalArgs) -> Result<ExtractConfig, Error> {
        let mut problems = vec![];
        let statuses = if self.statuses.is_empty() {
            ApplicationStatus::KNOWN.to_vec()
        } else {
            let (known, unknown) = ApplicationStatus::parse_known(self.statuses.iter().map(String::as_str));
            for s in unknown {
                problems
                    .push(format!("`--statuses`: `{s}` is not a status; allowed: {}", ApplicationStatus::known_list()));
            }
            known
        };
        if !(1..=64).contains(&self.concurrency) {
            problems.push("`--concurrency` must be between 1 and 64".into());
        }
        if !(1..=10).contains(&self.max_passes) {
            problems.push("`--max-passes` must be between 1 and 10".into());
        }
        if !(1..=3650).contains(&self.window_days) {
            problems.push("`--window-days` must be between 1 and 3650".into());
        }
        let from = parse_day("--from", &self.from, &mut problems);
        let to = parse_day("--to", &self.to, &mut problems);
        if let (Some(f), Some(t)) = (from, to) {
            if f > t {
                problems.push(format!("`--from` {f} is after `--to` {t}"));
            }
        }
        if self.keep_raw == Some(0) {
            problems.push("`--keep-raw` must be at least 1".into());
        }
        let (sync, reconcile_every) = self.sync.parse(&mut problems);
        if !problems.is_empty() {
            return Err(Error::Config(problems));
        }
        Ok(ExtractConfig {
            out: OutDir::new(&global.out),
            statuses,
            campaign_id: self.campaign_id,
            concurrency: self.concurrency,
            max_passes: self.max_passes,
            from,
            to,
            window_days: self.window_days,
            lookback_days: self.lookback_days,
            since_days: self.since_days,
            plan_only: false,
            keep_raw: self.keep_raw,
            fresh: self.fresh,
            progress_bars: global.quiet == 0,
            sync,
            reconcile_every,
            // Read from the warehouse's ledger just before the extract.
            content_cursor: None,
        })
    }
}

/// `creator-etl extract`'s arguments: the crawl's, which `run` shares, and the plan, its own.
#[derive(Debug, Args)]
pub struct ExtractCommandArgs {
    #[command(flatten)]
    pub extract: ExtractArgs,
    /// Print the plan after page 1 of each status (at most one request per status), then stop
    #[arg(long)]
    pub plan_only: bool,
}

pub async fn exec(args: &ExtractCommandArgs, global: &GlobalArgs) -> Result<u8, Error> {
    let (client_config, mut config) = validate_both(global.client_config(), args.extract.config(global))?;
    config.plan_only = args.plan_only;
    // The lock first: the pacer's memory is read as the last command on this `--out` left it.
    let _lock = config.out.lock("extract")?;
    let client = Client::new(client_config.pacing_memory_in(&config.out.state_dir()))?;
    let extract_config = config.clone();
    let (config, snapshot) = blocking("warehouse", move || read_previous(&extract_config, None)).await?;
    let (client, stop) = stop_after_in_flight(client);
    // A plan sends nothing that changes the directory's data: it records no stage.
    let log =
        if config.plan_only { StageLog::none() } else { StageLog::begin(&config.out, "extract", &[Stage::Extract]) };
    let result = async {
        let begun = crate::extract::begin(&config, &client, stop, snapshot.as_ref()).await?;
        eprintln!("{}", begun.plan());
        Ok::<_, Error>(begun.finish().await?)
    }
    .await;
    let report = result.inspect_err(|e| log.fail(e))?;
    if !config.plan_only {
        log.done(Stage::Extract, Some(&report.run_id));
    }
    print_json(&report)?;
    Ok(exit::OK)
}
