//! `creator-etl report`: a self-contained HTML page of what the warehouse (or the lake) knows,
//! written to `OUT/report/index.html`, that anyone can open from a file, mail or host.
//!
//! - [`data`]: the named queries' answers for one organization (the page's numbers come from
//!   them and nothing else) and its health (fresh, stale, failed, running, never synced);
//! - [`charts`]: the charts, drawn by `plotters` into inline SVG;
//! - [`page`]: the HTML of an organization's page and of the overview of several.
//!
//! One organization (its own warehouse, `--org`, or a fleet warehouse or lake of one) gets its
//! page as `index.html`. Several get an overview as `index.html` and a page each under
//! `org/NAME.html`. Every file is written whole, then renamed into place; an organization's page
//! this report did not write (an earlier report's) is removed after the index is written.

mod charts;
mod data;
mod page;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

pub use data::{FailedRun, Health, HealthState, ASKED};
pub use page::SECTIONS;

use crate::out::OutDir;
use crate::query::{QueryError, Reader, Source, Switchable};
use crate::Error;

/// A sync older than this is shown as stale: a daily schedule, with two hours' slack.
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(26 * 3600);

/// Where the report learns of runs that did not reach the data it reads.
#[derive(Clone, Debug)]
pub enum RunState {
    /// Nowhere: only the data (a lake read from elsewhere).
    DataOnly,
    /// One organization's output directory: a run holding its lock now (unless `locked_here`:
    /// this process holds it, as `run` and the demo do); a newer raw run that did not finish, or
    /// that finished its extract and was not loaded; and, for an organization of a fleet with
    /// its own warehouse, its status file (`fleet status`).
    Own { out: OutDir, locked_here: bool },
    /// A fleet's output directory: each organization's lock and status file (`fleet status`).
    /// Organizations with a status file and no rows yet (a first sync that failed) get a page
    /// too.
    Fleet(PathBuf),
}

/// A validated report request.
#[derive(Clone, Debug)]
pub struct ReportConfig {
    pub source: Source,
    /// Only this organization of a fleet warehouse or a lake.
    pub org: Option<String>,
    /// The directory of `index.html` (`OUT/report`).
    pub dir: PathBuf,
    pub state: RunState,
    pub stale_after: Duration,
    /// A run that just failed (the `run` that writes the report after its failure).
    pub failed: Option<FailedRun>,
}

impl ReportConfig {
    /// The report a command holding `out`'s lock writes of its warehouse after a sync (`run`,
    /// the demo); `failed`: why that sync failed.
    pub fn after_sync(out: &OutDir, failed: Option<FailedRun>) -> Self {
        ReportConfig {
            source: Source::Warehouse { path: out.root().join("warehouse.duckdb"), org: None },
            org: None,
            dir: out.root().join("report"),
            state: RunState::Own { out: out.clone(), locked_here: true },
            stale_after: DEFAULT_STALE_AFTER,
            failed,
        }
    }
}

/// What `creator-etl report` prints.
#[derive(Debug, Serialize)]
pub struct ReportSummary {
    /// The page to open: `OUT/report/index.html`.
    pub path: PathBuf,
    pub generated_at: DateTime<Utc>,
    pub pages: Vec<PageSummary>,
}

/// One organization's page.
#[derive(Debug, Serialize)]
pub struct PageSummary {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub organization: Option<String>,
    pub path: PathBuf,
    pub health: HealthState,
    pub last_synced_at: Option<DateTime<Utc>>,
    /// Per section: `charted`, or `sentences` where it had nothing to chart.
    pub sections: BTreeMap<&'static str, &'static str>,
}

/// Writes the report; the caller validated the request.
pub async fn write(config: ReportConfig) -> Result<ReportSummary, Error> {
    let reader = match (&config.source, &config.state) {
        // A fleet whose warehouse is not published yet (every organization's first sync
        // failed): its organizations' status files still make an overview, over no data.
        (Source::Warehouse { path, .. }, RunState::Fleet(out)) if !path.exists() && !fleet_members(out).is_empty() => {
            // Its writer's file is made before the first load: only one that holds no rows
            // means nothing was loaded (one that holds rows is loaded, not yet published).
            let writer = out.join("state").join("warehouse.duckdb");
            let empty = || async {
                let source = Source::Warehouse { path: writer.clone(), org: None };
                Reader::open(&source).await.ok().is_some_and(|r| r.holds().is_some_and(|h| h.is_empty()))
            };
            if writer.exists() && !empty().await {
                return Err(Error::Config(vec![format!(
                    "the fleet warehouse `{}` is not published yet (its writer's file `state/warehouse.duckdb` is there): \
                     the next `fleet run` publishes it; `creator-etl fleet status` shows each organization meanwhile",
                    path.display()
                )]));
            }
            Reader::nothing(vec![])?
        }
        _ => Reader::open(&config.source).await?,
    };
    tokio::task::spawn_blocking(move || write_blocking(&reader, &config))
        .await
        .map_err(|e| Error::Query(QueryError::Db(format!("the report task failed: {e}"))))?
}

/// Which pages the source gets.
enum Pages {
    /// One organization's page as `index.html` (None: one organization's own warehouse).
    One(Option<String>),
    /// The overview and a page per organization.
    Many(Vec<String>),
}

fn pages(reader: &Reader, config: &ReportConfig) -> Result<Pages, QueryError> {
    let within = match &config.source {
        Source::Warehouse { .. } => "the fleet warehouse",
        Source::Lake(_) => "the lake",
    };
    let holds = reader.holds().map(|holds| {
        let mut all: std::collections::BTreeSet<String> = holds.iter().cloned().collect();
        if let RunState::Fleet(out) = &config.state {
            all.extend(fleet_members(out));
        }
        all.into_iter().collect::<Vec<_>>()
    });
    match (holds.as_deref(), &config.org) {
        (None, None) => Ok(Pages::One(None)),
        (None, Some(_)) => Err(QueryError::OneOrganization(describe(&config.source))),
        (Some(holds), Some(org)) if !holds.contains(org) => {
            Err(QueryError::UnknownOrganization { within, org: org.clone(), holds: holds.to_vec() })
        }
        (Some(_), Some(org)) => Ok(Pages::One(Some(org.clone()))),
        (Some([only]), None) => Ok(Pages::One(Some(only.clone()))),
        (Some(holds), None) => Ok(Pages::Many(holds.to_vec())),
    }
}

/// The organizations of a fleet's output directory that have a status file: every organization
/// a fleet run has tried, whether or not it has rows yet.
fn fleet_members(out: &Path) -> Vec<String> {
    let mut names = vec![];
    for entry in std::fs::read_dir(out.join("orgs")).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if crate::load::lake::valid_org(&name) && crate::fleet::status::status_path(&entry.path()).is_file() {
            names.push(name);
        }
    }
    names
}

/// The source as the page names it.
fn describe(source: &Source) -> String {
    match source {
        Source::Warehouse { path, .. } => format!("the warehouse {}", path.display()),
        Source::Lake(lake) => format!("the lake {}", lake.url),
    }
}

/// An organization's page file name: its name (organizations' names are lowercase letters,
/// digits, `-` and `_`); any other character of a name read from a lake is spelled out as `~`
/// and its code point in hex, which no name has and a URL keeps as it is.
fn page_file(org: &str) -> String {
    let mut name = String::new();
    for c in org.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_' {
            name.push(c);
        } else {
            name.push_str(&format!("~{:06x}", c as u32));
        }
    }
    format!("{name}.html")
}

/// One organization's answers, health and page (`overview`: the overview's path from it).
fn org_page(
    conn: &Switchable,
    config: &ReportConfig,
    org: Option<&str>,
    source: &str,
    now: DateTime<Utc>,
    overview: Option<&str>,
) -> Result<(Health, page::Built), Error> {
    let answers = data::Answers::ask(conn.select(org)?, &config.source)?;
    let (failed, running) = match &config.failed {
        Some(f) => (Some(f.clone()), None),
        None => not_loaded(&config.state, org, &answers),
    };
    let health = Health::of(&answers, failed.as_ref(), running.as_deref(), now, config.stale_after);
    let built = page::org_page(&page::OrgPage {
        organization: org,
        source,
        generated_at: now,
        answers: &answers,
        health: &health,
        overview,
    });
    Ok((health, built))
}

/// What the output directory knows that the data does not: a run that did not reach the data
/// (newer than the last loaded one), or who holds the directory now (a run in progress).
fn not_loaded(state: &RunState, org: Option<&str>, answers: &data::Answers) -> (Option<FailedRun>, Option<String>) {
    let runs = answers.rows("run_health");
    let loaded_at = runs.first().and_then(|r| data::time(r, "finished_at"));
    let newer = |at: DateTime<Utc>| loaded_at.is_none_or(|l| at > l);
    let (out, locked_here, fleet) = match (state, org) {
        (RunState::Own { out, locked_here }, _) => (out.clone(), *locked_here, false),
        (RunState::Fleet(out), Some(org)) => (OutDir::new(crate::fleet::status::org_dir(out, org)), false, true),
        _ => return (None, None),
    };
    let running = if locked_here { None } else { out.lock_holder() };
    // The newest of what the fleet's status file, `run`'s record and the raw runs tell (one with
    // no time counts as newest). While a run is in progress, an unfinished raw run is most
    // likely its own: not a failure. A fleet's organization's raw runs are its status file's
    // business (its loads go into the fleet warehouse, in batches).
    let mut failures = vec![fleet_failure(out.root(), newer), last_run_failure(&out, newer)];
    if running.is_none() && !fleet {
        failures.push(raw_run_not_loaded(&out, runs, newer));
    }
    let failed = failures.into_iter().flatten().max_by_key(|f| (f.at.is_none(), f.at));
    (failed, running)
}

/// How the last `run` of an output directory ended: `OUT/state/last-run.json`, written by `run`
/// when it finishes or fails, so that a later report knows of a failure that left no raw run
/// (a preflight that failed) or came after the load (the actions, the lake push). The error is
/// kept as [`Error::recorded`] gives it: a lock's holder by its pid only. A later command that
/// redoes the failed stage and succeeds clears it ([`clear_last_run`]).
#[derive(Debug, Serialize, serde::Deserialize)]
pub struct LastRun {
    pub finished_at: DateTime<Utc>,
    /// Why it failed; None when it completed.
    pub error: Option<String>,
    /// The stage that failed.
    #[serde(default)]
    pub stage: Option<Stage>,
}

/// The stage of a `run` that failed, as far as the commands that can redo it go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// The preflight, the extract or the load: `load` redoes it.
    Sync,
    /// The lake's restore or push: `load --lake` redoes it.
    Lake,
    /// The reviewed actions: `actions apply` redoes them.
    Actions,
}

impl Stage {
    fn of(e: &Error) -> Stage {
        match e {
            Error::Load(crate::load::LoadError::Lake(_)) => Stage::Lake,
            Error::Action(_) => Stage::Actions,
            _ => Stage::Sync,
        }
    }
}

fn last_run_path(out: &OutDir) -> PathBuf {
    out.state_dir().join("last-run.json")
}

/// Records how a `run` ended (see [`LastRun`]). A record that cannot be written is a warning:
/// the run's own outcome stands.
pub fn record_last_run(out: &OutDir, failed: Option<&Error>) {
    let record = LastRun { finished_at: Utc::now(), error: failed.map(Error::recorded), stage: failed.map(Stage::of) };
    if let Err(e) = crate::out::write_json_atomic(&last_run_path(out), &record) {
        tracing::warn!(error = %e, "how this run ended cannot be recorded for the report");
    }
}

/// After a command that redid `stages` and succeeded: a recorded failure of one of them is
/// behind (a failure of another stage stays).
pub fn clear_last_run(out: &OutDir, stages: &[Stage]) {
    let Ok(bytes) = std::fs::read(last_run_path(out)) else { return };
    let Ok(last) = serde_json::from_slice::<LastRun>(&bytes) else { return };
    if last.error.is_some() && stages.contains(&last.stage.unwrap_or(Stage::Sync)) {
        record_last_run(out, None);
    }
}

/// The page's words for a `run` that just failed.
pub fn run_failed(e: &Error) -> FailedRun {
    FailedRun { at: Some(Utc::now()), what: format!("`creator-etl run` failed: {}", shorten(&e.recorded())) }
}

fn last_run_failure(out: &OutDir, newer: impl Fn(DateTime<Utc>) -> bool) -> Option<FailedRun> {
    let path = last_run_path(out);
    let bytes = std::fs::read(&path).ok()?;
    let last: LastRun = match serde_json::from_slice(&bytes) {
        Ok(last) => last,
        Err(e) => {
            let written = modified_at(&path);
            return written.is_none_or(&newer).then(|| FailedRun {
                at: written,
                what: format!(
                    "how the last `creator-etl run` ended is unknown: `{}` cannot be read ({e})",
                    path.display()
                ),
            });
        }
    };
    let error = last.error?;
    newer(last.finished_at).then(|| FailedRun {
        at: Some(last.finished_at),
        what: format!("the last `creator-etl run` failed: {}", shorten(&error)),
    })
}

/// When a file was last written.
fn modified_at(path: &Path) -> Option<DateTime<Utc>> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok().map(DateTime::<Utc>::from)
}

/// A message cut to 300 characters.
fn shorten(text: &str) -> String {
    if text.chars().count() > 300 {
        text.chars().take(300).collect::<String>() + "…"
    } else {
        text.to_owned()
    }
}

/// The newest raw run of an output directory, when it is newer than the last load and did not
/// finish its extract, or finished it and was not loaded.
fn raw_run_not_loaded(out: &OutDir, loaded: &[data::Row], newer: impl Fn(DateTime<Utc>) -> bool) -> Option<FailedRun> {
    use crate::extract::runs;
    if let Some(id) = runs::unfinished_run(out) {
        let at = runs::read_spec(out, &id).ok().map(|s| s.created_at);
        if at.is_none_or(&newer) {
            return Some(FailedRun {
                at,
                what: format!(
                    "run {id} did not finish its extract (it failed or was interrupted); the next run resumes it"
                ),
            });
        }
    }
    let id = runs::latest_complete_run(out)?;
    if loaded.iter().any(|r| data::text(r, "run_id") == Some(id.as_str())) {
        return None;
    }
    let at = runs::read_spec(out, &id).ok().map(|s| s.created_at)?;
    newer(at).then(|| FailedRun {
        at: Some(at),
        what: format!("run {id} finished its extract but was not loaded (`creator-etl load` loads it)"),
    })
}

/// An organization's fleet status file (`OUT/orgs/NAME/state/fleet-status.json`), when its last
/// run after the last load did not complete.
fn fleet_failure(org_out: &Path, newer: impl Fn(DateTime<Utc>) -> bool) -> Option<FailedRun> {
    use crate::fleet::report::Outcome;
    let (status, problem) = crate::fleet::status::read_status(org_out);
    if let Some(problem) = problem {
        // What the last run did is unknown: say so, as a failure, rather than guess.
        tracing::warn!(%problem, "an organization's fleet status cannot be read");
        if status.last_outcome.is_none_or(|o| o != Outcome::Completed) {
            // When: the run it recorded, or else when the file was last written.
            let written = modified_at(&crate::fleet::status::status_path(org_out));
            let at = status.last_run_at.or(written);
            return at.is_none_or(&newer).then(|| FailedRun {
                at,
                what: format!("how its last run ended is unknown, its fleet status cannot be read: {problem}"),
            });
        }
    }
    let outcome = status.last_outcome.filter(|o| *o != Outcome::Completed)?;
    let at = status.last_error_at.or(status.last_run_at);
    if !at.is_none_or(newer) {
        return None;
    }
    let error = shorten(&status.last_error.unwrap_or_default());
    Some(FailedRun {
        at,
        what: format!(
            "the fleet's last run of it ended {}{}",
            outcome.as_str(),
            if error.is_empty() { String::new() } else { format!(": {error}") }
        ),
    })
}

fn write_blocking(reader: &Reader, config: &ReportConfig) -> Result<ReportSummary, Error> {
    let now = Utc::now();
    let source = match (reader, &config.state) {
        (Reader::Nothing { .. }, RunState::Fleet(out)) => format!(
            "no fleet warehouse yet: the organizations' fleet status files under {}",
            out.join("orgs").display()
        ),
        _ => describe(&config.source),
    };
    let index = config.dir.join("index.html");
    let org_dir = config.dir.join("org");
    let mut summaries = vec![];
    let mut written = vec![];
    let pages = pages(reader, config)?;
    let conn = reader.switchable()?;
    match pages {
        Pages::One(org) => {
            let (health, built) = org_page(&conn, config, org.as_deref(), &source, now, None)?;
            crate::out::write_atomic(&index, built.html.as_bytes())?;
            summaries.push(summary(org, index.clone(), &health, &built));
        }
        Pages::Many(orgs) => {
            let mut rows = vec![];
            for org in orgs {
                let (health, built) = org_page(&conn, config, Some(&org), &source, now, Some("../index.html"))?;
                let file = page_file(&org);
                let path = org_dir.join(&file);
                crate::out::write_atomic(&path, built.html.as_bytes())?;
                summaries.push(summary(Some(org.clone()), path, &health, &built));
                written.push(file.clone());
                rows.push(page::OverviewRow {
                    organization: org,
                    page: format!("org/{file}"),
                    health,
                    figures: built.figures,
                });
            }
            crate::out::write_atomic(&index, page::overview(&source, now, &rows).as_bytes())?;
        }
    }
    remove_other_pages(&org_dir, &written);
    Ok(ReportSummary { path: index, generated_at: now, pages: summaries })
}

fn summary(org: Option<String>, path: PathBuf, health: &Health, built: &page::Built) -> PageSummary {
    PageSummary {
        organization: org,
        path,
        health: health.state,
        last_synced_at: health.last_synced_at,
        sections: built.sections.iter().map(|(k, v)| (*k, if *v { "charted" } else { "sentences" })).collect(),
    }
}

/// Removes the pages of organizations this report did not write (an earlier report's).
fn remove_other_pages(dir: &Path, written: &[String]) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".html") && !written.contains(&name) {
            if let Err(e) = std::fs::remove_file(entry.path()) {
                tracing::warn!(path = %entry.path().display(), error = %e, "an earlier report's page cannot be removed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_recorded_failure_is_cleared_only_by_a_command_that_redoes_its_stage() {
        use super::*;
        let dir = tempfile::tempdir().unwrap();
        let out = OutDir::new(dir.path());
        let all = |_: DateTime<Utc>| true;
        let lake = Error::Load(crate::load::LoadError::Lake("cannot create the lake table directory".into()));
        record_last_run(&out, Some(&lake));
        assert!(last_run_failure(&out, all).unwrap().what.contains("cannot create the lake table directory"));
        clear_last_run(&out, &[Stage::Sync]);
        assert!(last_run_failure(&out, all).is_some(), "a load without the lake does not repair the lake");
        clear_last_run(&out, &[Stage::Actions]);
        assert!(last_run_failure(&out, all).is_some());
        clear_last_run(&out, &[Stage::Sync, Stage::Lake]);
        assert!(last_run_failure(&out, all).is_none(), "load --lake does");
        record_last_run(&out, Some(&Error::Config(vec!["x".into()])));
        clear_last_run(&out, &[Stage::Sync]);
        assert!(last_run_failure(&out, all).is_none());
        // A record that cannot be read is said, not taken for a success.
        std::fs::write(last_run_path(&out), b"{\"finished_at\": ").unwrap();
        assert!(last_run_failure(&out, all).unwrap().what.contains("ended is unknown"));
    }

    #[test]
    fn page_files_are_names_and_never_leave_the_directory() {
        assert_eq!(super::page_file("acme-2_b"), "acme-2_b.html");
        assert_eq!(super::page_file("../E x"), "~00002e~00002e~00002f~000045~000020x.html");
        assert_ne!(super::page_file("A"), super::page_file("\u{4}1"), "fixed width: no two names share a file");
    }
}
