//! Helpers shared by the benchmarks: flags, medians, peak RSS and generated load input.
#![allow(dead_code)] // each benchmark uses a part

use chrono::{DateTime, Duration, NaiveDate, Utc};
use creator_etl::emulator::{data, GenConfig, MAIN_ORG};
use creator_etl::extract::{ContentRow, Extracted, Metric, Observation, RunSpec};

/// The value of `--name N` on the command line, or `default`.
pub fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Whether `--name` is on the command line.
pub fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

/// The median of some measurements.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// The process's peak RSS (`VmHWM`), in MB.
pub fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

/// CPU seconds this process has used (user and system, its children not included).
pub fn process_cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit_once(')').map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    // After the command name: state is field 0, utime 11 and stime 12, in clock ticks.
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// Resets the peak RSS to the current RSS, so that the next reading measures one step.
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// One organization's extracted data, generated without HTTP.
pub struct Input {
    pub apps: Vec<Observation>,
    pub content: Vec<ContentRow>,
    pub accounts: usize,
    pub start: NaiveDate,
    pub today: NaiveDate,
    pub now: DateTime<Utc>,
}

/// Generates `applications` applications (topped up to `accounts` accounts) and `years` of
/// daily statistics with the emulator's generator.
pub fn generate(seed: u64, applications: usize, accounts: usize, years: u32) -> Input {
    let today = Utc::now().date_naive();
    let dataset = data::generate(&GenConfig {
        seed,
        applications,
        sales: 16,
        today,
        content_years: years,
        organizations: 0,
        org_applications: 0,
    });
    let now = Utc::now();
    let mut apps: Vec<Observation> = dataset
        .applications
        .into_iter()
        .filter(|(org, _)| *org == MAIN_ORG)
        .map(|(_, app)| Observation { seq: 0, observed_at: now, app, first_pass: 1 })
        .collect();
    let start = dataset.content.start;
    let mut content = vec![];
    let mut day = start;
    while day <= today {
        let (v, l) = dataset.content.day(MAIN_ORG, day);
        let (lv, ll) = dataset.content.day(MAIN_ORG, day - Duration::days(7));
        for (metric, current, last) in [(Metric::Views, v, lv), (Metric::Likes, l, ll)] {
            content.push(ContentRow {
                metric,
                date: day,
                last_date: day - Duration::days(7),
                current,
                last,
                total: 0,
                last_total: 0,
            });
        }
        day += Duration::days(1);
    }
    // The generator lists ~1.4 accounts per application; the issues' scale is ~2 per application.
    // Top up with copies of an application's own accounts (new ids) until `accounts` is reached.
    let mut next_id = dataset.next_account_id;
    let mut listed: usize = apps.iter().map(|o| o.app.connected_accounts.len()).sum();
    'top_up: for round in 0..3 {
        for o in apps.iter_mut() {
            if listed >= accounts {
                break 'top_up;
            }
            if let Some(a) = o.app.connected_accounts.get(round).cloned() {
                o.app.connected_accounts.push(creator_etl::api::models::ConnectedAccount { id: next_id, ..a });
                next_id += 1;
                listed += 1;
            }
        }
    }
    Input { apps, content, accounts: listed, start, today, now }
}

impl Input {
    /// A complete extracted run of this input; `take` moves the applications out instead of
    /// copying them (for the last run).
    pub fn extracted(&mut self, run_id: String, take: bool) -> Extracted {
        Extracted {
            spec: RunSpec {
                run_id,
                created_at: self.now,
                base_url: "generated".into(),
                statuses: creator_etl::api::models::ApplicationStatus::KNOWN.iter().map(|s| s.to_string()).collect(),
                campaign_id: None,
                max_passes: 1,
                from: self.start,
                to: self.today,
                window_days: 90,
                sync: creator_etl::extract::SyncMode::Full,
                base_run: None,
            },
            applications: if take { std::mem::take(&mut self.apps) } else { self.apps.clone() },
            content: self.content.clone(),
            complete: true,
            quick: None,
        }
    }
}

/// The binary's allocator (src/main.rs), so that what a benchmark measures in its own process
/// is what the binary would do.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
