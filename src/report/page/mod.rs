//! The HTML of the pages: one organization's page, and the overview of several. Every page is
//! one file with its CSS and charts inline, and its numbers in a JSON block
//! (`<script type="application/json" id="report-data">`) as the named queries answered them.
//!
//! - [`html`]: the kit: a section's figures, charts, sentences and tables, escaping, numbers;
//! - one module per section of an organization's page: [`health`], [`content`],
//!   [`applications`], [`cohorts`], [`corrections`], each reading its named queries' typed rows
//!   ([`crate::report::rows`]);
//! - [`overview`]: the overview of several organizations.

mod applications;
mod cohorts;
mod content;
mod corrections;
mod health;
mod html;
mod key;
mod overview;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt::Write;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::data::{stamp, Answers};
use super::health::Health;
use super::rows::Typed;
use html::{esc, Section};
pub use overview::{overview, OverviewRow};

/// The sections of an organization's page, in order: their ids and titles.
pub const SECTIONS: [(&str, &str); 5] = [
    ("health", "Freshness and health"),
    ("content", "Views and likes"),
    ("applications", "Applications"),
    ("cohorts", "Cohorts"),
    ("corrections", "Corrections"),
];

/// What an organization's page needs.
pub struct OrgPage<'a> {
    pub organization: Option<&'a str>,
    pub source: &'a str,
    pub generated_at: DateTime<Utc>,
    /// The named queries' answers, as `creator-etl query` prints them (the page's JSON block).
    pub answers: &'a Answers,
    /// The same rows, typed (what the sections read).
    pub rows: &'a Typed,
    pub health: &'a Health,
    /// The overview's path from this page, when there is one.
    pub overview: Option<&'a str>,
    /// How old a page may be before it says that its health is as of its making (`--stale-after`).
    pub stale_after: std::time::Duration,
}

/// An organization's page and what it shows.
pub struct Built {
    pub html: String,
    /// Per section: drawn (at least one chart) or not.
    pub sections: BTreeMap<&'static str, bool>,
    pub figures: BTreeMap<String, Value>,
}

/// An organization's page.
pub fn org_page(p: &OrgPage<'_>) -> Built {
    let (a, t) = (p.answers, p.rows);
    let mut sections: Vec<(&str, &str, Section)> = vec![
        ("health", SECTIONS[0].1, health::section(t)),
        ("content", SECTIONS[1].1, content::section(t, a)),
        ("applications", SECTIONS[2].1, applications::section(t, a)),
        ("cohorts", SECTIONS[3].1, cohorts::section(t, a)),
        ("corrections", SECTIONS[4].1, corrections::section(t)),
    ];
    let title = match p.organization {
        Some(o) => format!("creator-etl report: {o}"),
        None => "creator-etl report".to_owned(),
    };
    let mut html = head(&title);
    let _ = writeln!(
        html,
        "<header><h1>{}</h1><p class=\"meta\">Generated {} from {}.{}</p>{}</header>",
        esc(&title),
        stamp(p.generated_at),
        esc(p.source),
        p.overview.map_or_else(String::new, |o| format!(" <a href=\"{}\">All organizations</a>", esc(o))),
        age_line(p.generated_at, p.health.last_synced_at, p.stale_after, p.overview.is_some())
    );
    let _ = write!(
        html,
        "<div class=\"banner {}\" data-health=\"{}\"><strong>{}</strong>",
        p.health.state.css_class(),
        p.health.state.as_str(),
        esc(&p.health.headline)
    );
    for n in &p.health.notes {
        let _ = write!(html, "<br>{}", esc(n));
    }
    html.push_str("</div>\n<nav>");
    for (id, t, _) in &sections {
        let _ = write!(html, "<a href=\"#{id}\">{}</a>", esc(t));
    }
    html.push_str("</nav>\n");
    let mut drawn = BTreeMap::new();
    let mut figures = BTreeMap::new();
    for (id, t, s) in &mut sections {
        drawn.insert(*id, s.charts > 0);
        let _ = writeln!(html, "<section id=\"{id}\" data-section=\"{id}\"><h2>{}</h2>", esc(t));
        if !s.figures.is_empty() {
            html.push_str("<div class=\"figures\">");
            for f in &s.figures {
                let _ = write!(
                    html,
                    "<div class=\"figure\"><div class=\"label\">{}</div><div class=\"value\" data-figure=\"{}\" data-value=\"{}\">{}</div>{}</div>",
                    esc(&f.label),
                    esc(&f.key),
                    esc(&match &f.value {
                        Value::String(s) => s.clone(),
                        v => v.to_string(),
                    }),
                    esc(&f.shown),
                    f.note.as_deref().map_or_else(String::new, |n| format!("<div class=\"note\">{}</div>", esc(n)))
                );
                figures.insert(f.key.clone(), f.value.clone());
            }
            html.push_str("</div>\n");
        }
        html.push_str(&s.body);
        html.push_str("</section>\n");
    }
    let data = json!({
        "report_version": 1,
        "organization": p.organization,
        "source": p.source,
        "generated_at": p.generated_at.to_rfc3339(),
        "health": p.health,
        "figures": figures,
        "queries": a,
    });
    html.push_str(&data_block(&data));
    html.push_str("</main></body></html>\n");
    Built { html, sections: drawn, figures }
}

/// The figures of the page's health section (its last run's), as the overview shows them.
pub fn health_figures(t: &Typed) -> BTreeMap<String, Value> {
    health::section(t).figures.into_iter().map(|f| (f.key, f.value)).collect()
}

/// The page's age as the reader's clock has it. `fleet run` keeps a page until its
/// organization's data or health changes (see [`crate::report::Refresh`]), so a page says how old
/// it is, and once it, or the last sync it shows, is older than `stale_after`, that its health is
/// as of its making. Without scripts (a mail reader) the line stays empty, and the header's time
/// says when the page was made.
fn age_line(
    generated_at: DateTime<Utc>,
    last_synced_at: Option<DateTime<Utc>>,
    stale_after: std::time::Duration,
    overview: bool,
) -> String {
    let time = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    format!(
        "<p class=\"meta age\" id=\"page-age\" data-generated=\"{}\" data-last-synced=\"{}\" data-stale-after-s=\"{}\" data-overview=\"{overview}\"></p>{AGE_SCRIPT}",
        time(generated_at),
        last_synced_at.map(time).unwrap_or_default(),
        stale_after.as_secs()
    )
}

const AGE_SCRIPT: &str = "<script>
(function () {
  var e = document.getElementById('page-age');
  var now = Date.now(), limit = Number(e.getAttribute('data-stale-after-s')) * 1000;
  var made = Date.parse(e.getAttribute('data-generated'));
  var synced = Date.parse(e.getAttribute('data-last-synced'));
  if (isNaN(made)) { return; }
  var ago = function (ms) {
    var m = Math.floor(Math.max(0, ms) / 60000), h = Math.floor(m / 60), d = Math.floor(h / 24);
    return d >= 2 ? d + ' days ' + (h % 24) + ' h' : h >= 1 ? h + ' h ' + (m % 60) + ' min' : m >= 1 ? m + ' min' : 'less than a minute';
  };
  var text = 'This page was made ' + ago(now - made) + ' ago.';
  var late = now - made > limit;
  if (!isNaN(synced) && now - synced > limit) {
    text += ' The last sync it shows finished ' + ago(now - synced) + ' ago, more than the stale limit.';
    late = true;
  }
  if (late) {
    text += e.getAttribute('data-overview') === 'true'
      ? ' Its health is as of when it was made: the overview says how the organization stands now.'
      : ' Its health is as of when it was made: a new report says how it stands now.';
    e.className += ' old';
  }
  e.textContent = text;
})();
</script>";

/// The numbers of a page for machines: JSON in a script element that never runs (`<` escaped, so
/// no text in it can close the element).
pub(super) fn data_block(v: &Value) -> String {
    let json = serde_json::to_string(v).expect("JSON values serialise").replace('<', "\\u003c");
    format!("<script type=\"application/json\" id=\"report-data\">{json}</script>\n")
}

pub(super) fn head(title: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{CSS}</style></head><body><main>\n",
        esc(title)
    )
}

const CSS: &str = "
body{margin:0;background:#f8fafc;color:#0f172a;font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif}
main{max-width:1080px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:22px;margin:8px 0 2px}h2{font-size:18px;margin:0 0 12px}h3{font-size:15px;margin:18px 0 6px}
.meta{color:#475569;margin:0 0 12px}
.meta.old{color:#9a3412;font-weight:600}
nav{margin:12px 0}nav a{margin-right:14px;color:#1d4ed8;text-decoration:none}
.banner{padding:10px 14px;border-radius:6px;margin:8px 0;border:1px solid}
.banner.fresh{background:#f0fdf4;border-color:#86efac}.banner.stale{background:#fffbeb;border-color:#fcd34d}
.banner.failed{background:#fef2f2;border-color:#fca5a5}.banner.interrupted{background:#fff7ed;border-color:#fdba74}.banner.unknown{background:#faf5ff;border-color:#d8b4fe}.banner.running{background:#eff6ff;border-color:#93c5fd}.banner.never-synced{background:#f1f5f9;border-color:#cbd5e1}
section{background:#fff;border:1px solid #e2e8f0;border-radius:8px;padding:16px 20px;margin:16px 0}
.figures{display:flex;flex-wrap:wrap;gap:10px;margin-bottom:8px}
.figure{border:1px solid #e2e8f0;border-radius:6px;padding:8px 12px;min-width:150px;flex:1 1 150px}
.figure .label{color:#475569;font-size:12px}.figure .value{font-size:20px;font-weight:600}
.figure .note{color:#475569;font-size:12px}
figure.chart{margin:12px 0}figure.chart svg{max-width:100%;height:auto;display:block}
figcaption{color:#475569;font-size:12px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}caption{text-align:left;color:#475569;font-size:12px}
th,td{border-bottom:1px solid #e2e8f0;padding:4px 10px;text-align:right}th:first-child,td:first-child{text-align:left}
table.sortable th{cursor:pointer;user-select:none}table.sortable th[data-dir=asc]::after{content:' \\25B2'}
table.sortable th[data-dir=desc]::after{content:' \\25BC'}
.empty{color:#475569;font-style:italic}
.state-running{color:#1d4ed8;font-weight:600}.state-failed{color:#b91c1c;font-weight:600}.state-interrupted{color:#c2410c;font-weight:600}.state-unknown{color:#7e22ce;font-weight:600}.state-stale{color:#b45309;font-weight:600}
";
