//! `creator-etl report`: a self-contained HTML page of what the warehouse (or the lake) knows,
//! written to `OUT/report/index.html`, that anyone can open from a file, mail or host.
//!
//! - [`data`]: the named queries' answers for one organization (the page's numbers come from
//!   them and nothing else) and its health (fresh, stale, failed, never synced);
//! - [`charts`]: the charts, drawn by `plotters` into inline SVG;
//! - [`page`]: the HTML of an organization's page and of the overview of several.
//!
//! One organization (its own warehouse, `--org`, or a fleet warehouse or lake of one) gets its
//! page as `index.html`. Several get an overview as `index.html` and a page each under
//! `org/NAME.html`. Every file is written whole, then renamed into place; pages of organizations
//! the source no longer holds are removed.

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
    /// One organization's output directory: a newer raw run that did not finish, or that
    /// finished its extract and was not loaded.
    Own(OutDir),
    /// A fleet's output directory: each organization's status file (`fleet status`).
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
    let reader = Reader::open(&config.source).await?;
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
    match (reader.holds(), &config.org) {
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
            name.push_str(&format!("~{:x}", c as u32));
        }
    }
    format!("{name}.html")
}

struct Gathered {
    answers: data::Answers,
    health: Health,
}

fn gather(conn: &Switchable, config: &ReportConfig, org: Option<&str>, now: DateTime<Utc>) -> Result<Gathered, Error> {
    let answers = data::Answers::ask(conn.select(org)?, &config.source)?;
    let failed = config.failed.clone().or_else(|| unfinished(&config.state, org, &answers));
    let health = Health::of(&answers, failed.as_ref(), now, config.stale_after);
    Ok(Gathered { answers, health })
}

/// A run newer than the last loaded one that did not reach the data.
fn unfinished(state: &RunState, org: Option<&str>, answers: &data::Answers) -> Option<FailedRun> {
    let runs = answers.rows("run_health");
    let loaded_at = runs.first().and_then(|r| data::time(r, "finished_at"));
    let newer = |at: DateTime<Utc>| loaded_at.is_none_or(|l| at > l);
    match (state, org) {
        (RunState::Own(out), _) => {
            use crate::extract::runs;
            if let Some(id) = runs::unfinished_run(out) {
                let at = runs::read_spec(out, &id).ok().map(|s| s.created_at);
                if at.is_none_or(newer) {
                    return Some(FailedRun {
                        at,
                        what: format!(
                            "run {id} did not finish its extract (it failed, was interrupted, or is still running); \
                             the next run resumes it"
                        ),
                    });
                }
            }
            let id = runs::latest_complete_run(out)?;
            if runs.iter().any(|r| data::text(r, "run_id") == Some(id.as_str())) {
                return None;
            }
            let at = runs::read_spec(out, &id).ok().map(|s| s.created_at)?;
            newer(at).then(|| FailedRun {
                at: Some(at),
                what: format!("run {id} finished its extract but was not loaded (`creator-etl load` loads it)"),
            })
        }
        (RunState::Fleet(out), Some(org)) => {
            use crate::fleet::report::Outcome;
            let (status, _) = crate::fleet::status::read_status(&crate::fleet::status::org_dir(out, org));
            let outcome = status.last_outcome.filter(|o| *o != Outcome::Completed)?;
            let at = status.last_error_at.or(status.last_run_at);
            if !at.is_none_or(newer) {
                return None;
            }
            let mut error = status.last_error.unwrap_or_default();
            if error.chars().count() > 300 {
                error = error.chars().take(300).collect::<String>() + "…";
            }
            Some(FailedRun {
                at,
                what: format!(
                    "the fleet's last run of it ended {}{}",
                    outcome.as_str(),
                    if error.is_empty() { String::new() } else { format!(": {error}") }
                ),
            })
        }
        _ => None,
    }
}

fn write_blocking(reader: &Reader, config: &ReportConfig) -> Result<ReportSummary, Error> {
    let now = Utc::now();
    let source = describe(&config.source);
    let index = config.dir.join("index.html");
    let org_dir = config.dir.join("org");
    let mut summaries = vec![];
    let mut written = vec![];
    let pages = pages(reader, config)?;
    let conn = reader.switchable()?;
    match pages {
        Pages::One(org) => {
            let g = gather(&conn, config, org.as_deref(), now)?;
            let built = page::org_page(&page::OrgPage {
                organization: org.as_deref(),
                source: &source,
                generated_at: now,
                answers: &g.answers,
                health: &g.health,
                overview: None,
            });
            crate::out::write_atomic(&index, built.html.as_bytes())?;
            summaries.push(summary(org, index.clone(), &g.health, &built));
        }
        Pages::Many(orgs) => {
            let mut rows = vec![];
            for org in orgs {
                let g = gather(&conn, config, Some(&org), now)?;
                let file = page_file(&org);
                let built = page::org_page(&page::OrgPage {
                    organization: Some(&org),
                    source: &source,
                    generated_at: now,
                    answers: &g.answers,
                    health: &g.health,
                    overview: Some("../index.html"),
                });
                let path = org_dir.join(&file);
                crate::out::write_atomic(&path, built.html.as_bytes())?;
                summaries.push(summary(Some(org.clone()), path, &g.health, &built));
                written.push(file.clone());
                rows.push(page::OverviewRow {
                    organization: org,
                    page: format!("org/{file}"),
                    health: g.health,
                    figures: built.figures,
                });
            }
            crate::out::write_atomic(&index, page::overview(&source, now, &rows).as_bytes())?;
        }
    }
    remove_other_pages(&org_dir, &written);
    Ok(ReportSummary { path: index, generated_at: now, pages: summaries })
}

#[cfg(test)]
mod tests {
    #[test]
    fn page_files_are_names_and_never_leave_the_directory() {
        assert_eq!(super::page_file("acme-2_b"), "acme-2_b.html");
        assert_eq!(super::page_file("../Evil x"), "~2e~2e~2f~45vil~20x.html");
    }
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
