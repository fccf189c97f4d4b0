//! `creator-etl report`: a self-contained HTML page of what the warehouse (or the lake) knows,
//! written to `OUT/report/index.html`, that anyone can open from a file, mail or host.
//!
//! - [`data`]: the named queries' answers, asked once for many organizations and split by
//!   organization (the page's numbers come from them and nothing else), and [`health`]: each
//!   organization's (fresh, stale, failed, running, never synced);
//! - [`charts`]: the charts, drawn by `plotters` into inline SVG;
//! - [`page`]: the HTML of an organization's page and of the overview of several.
//!
//! One organization (its own warehouse, `--org`, or a fleet warehouse or lake of one) gets its
//! page as `index.html`. Several get an overview as `index.html` and a page each under
//! `org/NAME.html`. Every file is written whole, then renamed into place; an organization's page
//! this report did not write (an earlier report's) is removed after the index is written.

mod charts;
mod data;
mod health;
mod index;
mod page;
mod rows;
mod runs;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

pub use data::ASKED;
pub use health::{Health, HealthState, ProblemKind, RunProblem};
pub use page::SECTIONS;

use crate::out::OutDir;
use crate::query::{Keyed, QueryError, Reader, Source};
use crate::Error;

/// A sync older than this is shown as stale: a daily schedule, with two hours' slack.
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(26 * 3600);

/// Where the report learns of runs that did not reach the data it reads.
#[derive(Clone, Debug)]
pub enum RunState {
    /// Nowhere: only the data (a lake read from elsewhere).
    DataOnly,
    /// One organization's output directory: a run holding its lock now (unless `locked_here`:
    /// this process holds it, as `run` and the demo do); its stage ledger
    /// ([`crate::sync::stages`]); a newer raw run that did not finish, or that finished its
    /// extract and was not loaded; and, for an organization of a fleet with its own warehouse,
    /// its status file (`fleet status`).
    Own { out: OutDir, locked_here: bool },
    /// A fleet's output directory: the fleet's lock, and each organization's lock, stage ledger
    /// and status file (`fleet status`). Organizations with a status file and no rows yet (a
    /// first sync that failed) get a page too.
    Fleet(PathBuf),
}

/// Which pages of several organizations a report makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refresh {
    /// Every page (`creator-etl report`).
    All,
    /// The pages of the organizations whose data or health state changed since their page was
    /// made (the passing clock alone is no change), and any page that is missing; the others are
    /// kept, and the overview is made anew with every organization's health as of now
    /// (`fleet run`). The kept pages are listed in `OUT/report/pages.json`.
    Changed,
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
    pub refresh: Refresh,
    /// Cancelled by a first Ctrl-C or SIGTERM (`fleet run`'s): the report stops before its next
    /// page ([`Error::Interrupted`]).
    pub stop: Option<tokio_util::sync::CancellationToken>,
}

impl ReportConfig {
    /// The report a command holding `out`'s lock writes of its warehouse after a sync (`run`,
    /// the demo), which recorded how it ended in the stage ledger first.
    pub fn after_sync(out: &OutDir) -> Self {
        ReportConfig {
            source: Source::Warehouse { path: out.warehouse(), org: None },
            org: None,
            dir: out.report_dir(),
            state: RunState::Own { out: out.clone(), locked_here: true },
            stale_after: DEFAULT_STALE_AFTER,
            refresh: Refresh::All,
            stop: None,
        }
    }

    /// The report `fleet run` writes of its fleet warehouse once it has published it and let go
    /// of the fleet's lock: the pages that changed, and the overview; until `stop`.
    pub fn after_fleet_run(out: &OutDir, stop: tokio_util::sync::CancellationToken) -> Self {
        ReportConfig {
            source: Source::Warehouse { path: out.warehouse(), org: None },
            org: None,
            dir: out.report_dir(),
            state: RunState::Fleet(out.root().to_path_buf()),
            stale_after: DEFAULT_STALE_AFTER,
            refresh: Refresh::Changed,
            stop: Some(stop),
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
    /// Organizations' pages made by this report.
    pub pages_made: usize,
    /// Organizations' pages kept from an earlier report: their data and health state had not
    /// changed ([`Refresh::Changed`]).
    pub pages_kept: usize,
}

/// One organization's page.
#[derive(Debug, Serialize)]
pub struct PageSummary {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub organization: Option<String>,
    pub path: PathBuf,
    /// Its health as of now.
    pub health: HealthState,
    pub last_synced_at: Option<DateTime<Utc>>,
    /// When its page was made: now, or by an earlier report for a kept page.
    pub made_at: DateTime<Utc>,
    /// Per section: `charted`, or `sentences` where it had nothing to chart (empty for a kept
    /// page).
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
            let writer = OutDir::new(out).writer_warehouse();
            let empty = || async {
                let source = Source::Warehouse { path: writer.clone(), org: None };
                Reader::open(&source).await.ok().is_some_and(|r| r.holds().is_some_and(|h| h.is_empty()))
            };
            if writer.exists() && !empty().await {
                return Err(Error::Config(vec![format!(
                    "the fleet warehouse `{}` is not published yet (its writer's file `{}` is there): \
                     the next `fleet run` publishes it; `creator-etl fleet status` shows each organization meanwhile",
                    path.display(),
                    writer.display()
                )]));
            }
            Reader::nothing(vec![])
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
    for entry in std::fs::read_dir(OutDir::new(out).orgs_dir()).into_iter().flatten().flatten() {
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

/// Organizations whose answers a report holds at once: it asks each named query once per this
/// many (one query answers for all of them), and holds their rows until their pages are made.
const CHUNK: usize = 250;

/// The health as of now of each of `orgs` (`None`: one organization's own warehouse), and the
/// answers of the named queries in `asked` (the health reads `run_health`'s): what a page needs
/// to be kept or made.
fn healths(
    keyed: &Keyed,
    config: &ReportConfig,
    orgs: &[Option<&str>],
    now: DateTime<Utc>,
    asked: &[&str],
) -> Result<Vec<(Health, data::Answers)>, Error> {
    // What the output directory says is read before the data (see [`runs::look`]).
    let looks: Vec<_> = orgs.iter().map(|org| runs::look(&config.state, *org)).collect();
    let names: Vec<String> = orgs.iter().map(|org| org.unwrap_or(crate::query::OWN).to_owned()).collect();
    let mut answers = data::Answers::ask(keyed, &config.source, asked, &names)?;
    let mut known = vec![];
    for (look, name) in looks.into_iter().zip(&names) {
        let answers = answers.remove(name).unwrap_or_default();
        let rows = rows::Typed::of(&answers)?;
        let found = runs::findings(look, &rows.run_health);
        let health = Health::of(&rows.run_health, &found.problems, found.running.as_deref(), now, config.stale_after);
        known.push((health, answers));
    }
    Ok(known)
}

/// Every named query the page asks.
fn every_query() -> Vec<&'static str> {
    data::ASKED.iter().map(|(name, _)| *name).collect()
}

/// One organization's page (`overview`: the overview's path from it), from its health and every
/// named query's answers.
fn org_page(
    org: Option<&str>,
    config: &ReportConfig,
    (source, now, overview): (&str, DateTime<Utc>, Option<&str>),
    health: &Health,
    answers: &data::Answers,
) -> Result<page::Built, Error> {
    let rows = rows::Typed::of(answers)?;
    Ok(page::org_page(&page::OrgPage {
        organization: org,
        source,
        generated_at: now,
        answers,
        rows: &rows,
        health,
        overview,
        stale_after: config.stale_after,
    }))
}

/// A message cut to 300 characters.
fn shorten(text: &str) -> String {
    if text.chars().count() > 300 {
        text.chars().take(300).collect::<String>() + "…"
    } else {
        text.to_owned()
    }
}

fn write_blocking(reader: &Reader, config: &ReportConfig) -> Result<ReportSummary, Error> {
    let now = Utc::now();
    let source = match (reader, &config.state) {
        (Reader::Nothing { .. }, RunState::Fleet(out)) => format!(
            "no fleet warehouse yet: the organizations' fleet status files under {}",
            OutDir::new(out).orgs_dir().display()
        ),
        _ => describe(&config.source),
    };
    let index = config.dir.join("index.html");
    let org_dir = config.dir.join("org");
    let mut summaries = vec![];
    let mut written = vec![];
    let pages = pages(reader, config)?;
    let keyed = reader.keyed()?;
    let (mut made, mut kept) = (0, 0);
    match pages {
        Pages::One(org) => {
            let (health, answers) =
                healths(&keyed, config, &[org.as_deref()], now, &every_query())?.pop().expect("one organization");
            let built = org_page(org.as_deref(), config, (&source, now, None), &health, &answers)?;
            crate::out::write_atomic(&index, built.html.as_bytes())?;
            summaries.push(summary(org, index.clone(), &health, now, &built.sections));
            made += 1;
        }
        Pages::Many(orgs) => {
            // Its phases' times, in the debug log.
            let started = std::time::Instant::now();
            // Every organization's data fingerprint, kept with its page for the next report to
            // compare with; without them (they could not be read) every page is made, and no
            // index is kept. A lake's report (`report --lake`, every page) is followed by no
            // fleet run that would keep its pages: no fingerprints, which would read every row of
            // the lake.
            let fingerprints = match (config.refresh, &config.source) {
                (Refresh::All, Source::Lake(_)) => None,
                _ => index::fingerprints(reader)
                    .inspect_err(|e| tracing::warn!(error = %e, "the organizations' data fingerprints cannot be read; every page is made"))
                    .ok(),
            };
            let kept_pages = match (config.refresh, &fingerprints) {
                (Refresh::Changed, Some(_)) => index::PageIndex::read(&config.dir, &source),
                _ => index::PageIndex::default(),
            };
            tracing::debug!(elapsed_ms = started.elapsed().as_millis() as u64, "report: fingerprints read");
            let (mut keys_ms, mut pages_ms) = (0u128, 0u128);
            // Gone until the pages it names are made: a report that stops half-way (a full disk,
            // a failed query) leaves no index that could keep a page made for another key.
            let _ = std::fs::remove_file(config.dir.join(index::INDEX_FILE));
            let mut rows = vec![];
            let mut next = BTreeMap::new();
            let rest: Vec<&str> = every_query().into_iter().filter(|q| *q != "run_health").collect();
            for chunk in orgs.chunks(CHUNK) {
                // Their health as of now, with `run_health` alone; then the other queries of the
                // organizations whose page is made.
                let t = std::time::Instant::now();
                let names: Vec<Option<&str>> = chunk.iter().map(|org| Some(org.as_str())).collect();
                let known = healths(&keyed, config, &names, now, &["run_health"])?;
                let mut keyed_pages = vec![];
                for (org, (health, answers)) in chunk.iter().zip(known) {
                    let fingerprint = fingerprints.as_ref().and_then(|f| f.get(org)).map(String::as_str);
                    let key = index::key(fingerprint, &health);
                    let page = kept_pages.current(&config.dir, org, &key).cloned();
                    keyed_pages.push((org, health, answers, key, page));
                }
                let to_make: Vec<String> =
                    keyed_pages.iter().filter(|(.., page)| page.is_none()).map(|(org, ..)| (*org).clone()).collect();
                let mut more = match to_make.is_empty() {
                    true => BTreeMap::new(),
                    false => data::Answers::ask(&keyed, &config.source, &rest, &to_make)?,
                };
                keys_ms += t.elapsed().as_millis();
                for (org, health, mut answers, key, page) in keyed_pages {
                    if config.stop.as_ref().is_some_and(|s| s.is_cancelled()) {
                        // The page list as it stands: the pages made or kept so far, and the last
                        // report's for the others, whose files this report has not touched.
                        if fingerprints.is_some() {
                            let mut pages = kept_pages.pages.clone();
                            pages.extend(next);
                            write_index(&config.dir, &source, pages);
                        }
                        return Err(Error::Interrupted(
                            "the report stopped between two pages: the pages made so far are written, the \
                             overview is the last report's (none if there was none), and the next report makes \
                             the pages not made yet",
                        ));
                    }
                    let file = page_file(org);
                    let path = org_dir.join(&file);
                    // A page is kept when the organization's data and health are what they were
                    // when it was made; its health and last run's figures are as of now all the
                    // same.
                    let (figures, page) = match page {
                        Some(page) => {
                            kept += 1;
                            summaries.push(summary(Some(org.clone()), path, &health, page.made_at, &BTreeMap::new()));
                            let mut figures = page.figures.clone();
                            figures.extend(page::health_figures(&rows::Typed::of(&answers)?));
                            (figures, page)
                        }
                        None => {
                            let t = std::time::Instant::now();
                            answers.0.extend(more.remove(org).unwrap_or_default().0);
                            let overview = Some("../index.html");
                            let built = org_page(Some(org), config, (&source, now, overview), &health, &answers)?;
                            pages_ms += t.elapsed().as_millis();
                            crate::out::write_atomic(&path, built.html.as_bytes())?;
                            made += 1;
                            summaries.push(summary(Some(org.clone()), path, &health, now, &built.sections));
                            let page =
                                index::Kept { file: file.clone(), key, made_at: now, figures: built.figures.clone() };
                            (built.figures, page)
                        }
                    };
                    let row =
                        page::OverviewRow { organization: org.clone(), page: format!("org/{file}"), health, figures };
                    rows.push(row);
                    written.push(file);
                    next.insert(org.clone(), page);
                }
            }
            tracing::debug!(
                keys_ms = keys_ms as u64,
                pages_ms = pages_ms as u64,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "report: pages made and kept"
            );
            crate::out::write_atomic(&index, page::overview(&source, now, &rows).as_bytes())?;
            // After the pages and the overview: an index never names a page that is not there.
            // Its write is atomic: one that fails leaves none, and the next report makes every
            // page.
            if fingerprints.is_some() {
                write_index(&config.dir, &source, next);
            }
        }
    }
    remove_other_pages(&org_dir, &written);
    Ok(ReportSummary { path: index, generated_at: now, pages: summaries, pages_made: made, pages_kept: kept })
}

/// Writes the page index; one that cannot be written is logged: the next report makes every page.
fn write_index(dir: &Path, source: &str, pages: BTreeMap<String, index::Kept>) {
    if let Err(e) = index::PageIndex::write(dir, source, pages) {
        let error = crate::exit::with_causes(&e);
        tracing::warn!(%error, "the report's page index cannot be written; the next report makes every page");
    }
}

fn summary(
    org: Option<String>,
    path: PathBuf,
    health: &Health,
    made_at: DateTime<Utc>,
    sections: &BTreeMap<&'static str, bool>,
) -> PageSummary {
    PageSummary {
        organization: org,
        path,
        health: health.state,
        last_synced_at: health.last_synced_at,
        made_at,
        sections: sections.iter().map(|(k, v)| (*k, if *v { "charted" } else { "sentences" })).collect(),
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
    fn page_files_are_names_and_never_leave_the_directory() {
        assert_eq!(super::page_file("acme-2_b"), "acme-2_b.html");
        assert_eq!(super::page_file("../E x"), "~00002e~00002e~00002f~000045~000020x.html");
        assert_ne!(super::page_file("A"), super::page_file("\u{4}1"), "fixed width: no two names share a file");
    }
}
