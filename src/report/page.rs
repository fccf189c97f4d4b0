//! The HTML of the pages: one organization's page, and the overview of several. Every page is
//! one file with its CSS and charts inline, and its numbers in a JSON block
//! (`<script type="application/json" id="report-data">`) as the named queries answered them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;
use serde_json::{json, Value};

use super::charts::{self, Scale, Series, BLUE, GREEN, ORANGE, PALETTE, PURPLE, RED};
use super::data::{date, flag, int, iso_week, num, stamp, text, time, Answers, Health, HealthState, Row};

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
    pub answers: &'a Answers,
    pub health: &'a Health,
    /// The overview's path from this page, when there is one.
    pub overview: Option<&'a str>,
}

/// An organization's page and what it shows.
pub struct Built {
    pub html: String,
    /// Per section: drawn (at least one chart) or not.
    pub sections: BTreeMap<&'static str, bool>,
    pub figures: BTreeMap<String, Value>,
}

/// One figure: a number with its label (unit and date range), its value for machines, and a
/// note.
struct Figure {
    key: String,
    label: String,
    shown: String,
    value: Value,
    note: Option<String>,
}

/// A section being written.
#[derive(Default)]
struct Section {
    figures: Vec<Figure>,
    body: String,
    charts: usize,
}

impl Section {
    fn figure(&mut self, key: &str, label: String, shown: String, value: Value, note: Option<String>) {
        self.figures.push(Figure { key: key.to_owned(), label, shown, value, note });
    }

    fn chart(&mut self, key: &str, caption: &str, svg: Result<Option<String>, String>, otherwise: &str) {
        match svg {
            Ok(Some(svg)) => {
                self.charts += 1;
                let _ = writeln!(
                    self.body,
                    "<figure class=\"chart\" data-chart=\"{key}\">{svg}<figcaption>{}</figcaption></figure>",
                    esc(caption)
                );
            }
            Ok(None) => self.sentence(otherwise),
            Err(e) => self.sentence(&e),
        }
    }

    fn sentence(&mut self, s: &str) {
        let _ = writeln!(self.body, "<p class=\"empty\">{}</p>", esc(s));
    }

    fn heading(&mut self, s: &str) {
        let _ = writeln!(self.body, "<h3>{}</h3>", esc(s));
    }

    fn table(&mut self, caption: &str, headers: &[&str], rows: Vec<Vec<String>>) {
        let rows = rows.into_iter().map(|r| r.into_iter().map(Cell::Text).collect()).collect();
        self.body.push_str(&table(caption, headers, rows, false));
    }
}

/// A table cell: text (escaped when written), or HTML this module built with the key a sortable
/// table sorts it by. Data never becomes HTML: only [`Cell::Html`] is written as is.
enum Cell {
    Text(String),
    Html { sort: String, html: String },
}

/// A plain table. With `sortable`, every cell carries its sort key in `data-sort` (its text,
/// or the key of a [`Cell::Html`]).
fn table(caption: &str, headers: &[&str], rows: Vec<Vec<Cell>>, sortable: bool) -> String {
    let mut s = format!(
        "<table{}>{}<thead><tr>",
        if sortable { " class=\"sortable\"" } else { "" },
        if caption.is_empty() { String::new() } else { format!("<caption>{}</caption>", esc(caption)) }
    );
    for h in headers {
        let _ = write!(s, "<th>{}</th>", esc(h));
    }
    s.push_str("</tr></thead><tbody>\n");
    for row in rows {
        s.push_str("<tr>");
        for cell in row {
            match cell {
                Cell::Html { sort, html } => {
                    let _ = write!(s, "<td data-sort=\"{}\">{html}</td>", esc(&sort));
                }
                Cell::Text(text) if sortable => {
                    let _ = write!(s, "<td data-sort=\"{0}\">{0}</td>", esc(&text));
                }
                Cell::Text(text) => {
                    let _ = write!(s, "<td>{}</td>", esc(&text));
                }
            }
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</tbody></table>\n");
    s
}

/// HTML-escapes text.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// An integer with thousands separators: `12,345`.
pub fn int_text(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut o = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            o.push(',');
        }
        o.push(c);
    }
    if n < 0 {
        format!("-{o}")
    } else {
        o
    }
}

/// A fraction as a signed percentage: `+4.2 %`.
pub fn change_text(f: Option<f64>) -> String {
    f.map_or("–".into(), |f| format!("{:+.1} %", f * 100.0))
}

/// A fraction as a percentage: `42.0 %`.
pub fn rate_text(f: Option<f64>) -> String {
    f.map_or("–".into(), |f| format!("{:.1} %", f * 100.0))
}

fn opt_int(v: Option<i64>) -> String {
    v.map_or("–".into(), int_text)
}

fn opt_json<T: Serialize>(v: Option<T>) -> Value {
    v.map_or(Value::Null, |v| json!(v))
}

fn day(d: NaiveDate) -> String {
    d.format("%b %-d").to_string()
}

/// An organization's page.
pub fn org_page(p: &OrgPage<'_>) -> Built {
    let a = p.answers;
    let mut sections: Vec<(&str, &str, Section)> = vec![
        ("health", SECTIONS[0].1, health(a)),
        ("content", SECTIONS[1].1, content(a)),
        ("applications", SECTIONS[2].1, applications(a)),
        ("cohorts", SECTIONS[3].1, cohorts(a)),
        ("corrections", SECTIONS[4].1, corrections(a)),
    ];
    let title = match p.organization {
        Some(o) => format!("creator-etl report: {o}"),
        None => "creator-etl report".to_owned(),
    };
    let mut html = head(&title);
    let _ = writeln!(
        html,
        "<header><h1>{}</h1><p class=\"meta\">Generated {} from {}.{}</p></header>",
        esc(&title),
        stamp(p.generated_at),
        esc(p.source),
        p.overview.map(|o| format!(" <a href=\"{}\">All organizations</a>", esc(o))).unwrap_or_default()
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
                    f.note.as_deref().map(|n| format!("<div class=\"note\">{}</div>", esc(n))).unwrap_or_default()
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

/// The numbers of a page for machines: JSON in a script element that never runs (`<` escaped, so
/// no text in it can close the element).
fn data_block(v: &Value) -> String {
    let json = serde_json::to_string(v).expect("JSON values serialise").replace('<', "\\u003c");
    format!("<script type=\"application/json\" id=\"report-data\">{json}</script>\n")
}

fn head(title: &str) -> String {
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

fn health(a: &Answers) -> Section {
    let mut s = Section::default();
    let runs = a.rows("run_health");
    let Some(last) = runs.first() else {
        s.sentence("No run has been loaded: no freshness or request figures yet.");
        return s;
    };
    let finished = time(last, "finished_at");
    let on = finished.map(|t| format!(" ({})", stamp(t))).unwrap_or_default();
    s.figure(
        "last_synced_at",
        "Last sync finished (UTC)".into(),
        finished.map_or("–".into(), stamp),
        opt_json(finished.map(|t| t.to_rfc3339())),
        None,
    );
    let mode = text(last, "sync_mode").unwrap_or("full");
    s.figure(
        "last_sync_mode",
        "Mode of the last sync".into(),
        mode.to_owned(),
        json!(mode),
        flag(last, "counts_agree").map(|c| if c { "every count agreed".into() } else { "counts disagreed".into() }),
    );
    // The last full sync: the last run's own reconcile time, or the newest full run shown.
    let reconciled = time(last, "last_reconcile_at").or_else(|| {
        runs.iter().find(|r| text(r, "sync_mode").is_none_or(|m| m == "full")).and_then(|r| time(r, "finished_at"))
    });
    s.figure(
        "last_reconciled_at",
        "Last reconciled by a full sync (UTC)".into(),
        reconciled.map_or("not in the last runs".into(), stamp),
        opt_json(reconciled.map(|t| t.to_rfc3339())),
        None,
    );
    for (key, label, col) in [
        ("last_run_requests", "Requests, last run", "requests"),
        ("last_run_rate_limited", "429 responses, last run", "rate_limited"),
        ("last_run_warnings", "Warnings, last run", "warnings"),
    ] {
        let v = int(last, col);
        s.figure(key, format!("{label}{on}"), opt_int(v), opt_json(v), None);
    }
    let d = num(last, "duration_s");
    s.figure(
        "last_run_duration_s",
        format!("Duration, last run{on}"),
        d.map_or("–".into(), |d| format!("{d:.1} s")),
        opt_json(d),
        None,
    );
    let oldest_first: Vec<&Row> = runs.iter().rev().collect();
    let labels: Vec<String> = oldest_first
        .iter()
        .map(|r| time(r, "finished_at").map_or("?".into(), |t| t.format("%m-%d %H:%M").to_string()))
        .collect();
    let range = match (oldest_first.first().and_then(|r| time(r, "finished_at")), finished) {
        (Some(a), Some(b)) if a == b => format!(", finished {}", stamp(a)),
        (Some(a), Some(b)) => format!(", {} to {}", stamp(a), stamp(b)),
        _ => String::new(),
    };
    s.chart(
        "runs_requests",
        &match runs.len() {
            1 => format!("Requests and 429 responses of the only loaded run so far{range}."),
            n => format!("Requests and 429 responses per loaded run: the last {n} runs{range}."),
        },
        charts::bars(
            &labels,
            &[
                Series::new("requests", BLUE, oldest_first.iter().map(|r| num(r, "requests")).collect()),
                Series::new("429s", RED, oldest_first.iter().map(|r| num(r, "rate_limited")).collect()),
            ],
            false,
            Scale::Count,
        ),
        "The loaded runs made no requests to chart (runs loaded from a landing without its report).",
    );
    let rows = runs
        .iter()
        .take(10)
        .map(|r| {
            vec![
                time(r, "finished_at").map_or("–".into(), stamp),
                text(r, "sync_mode").unwrap_or("full").to_owned(),
                text(r, "status").unwrap_or_default().to_owned(),
                num(r, "duration_s").map_or("–".into(), |d| format!("{d:.1}")),
                opt_int(int(r, "requests")),
                opt_int(int(r, "rate_limited")),
                opt_int(int(r, "warnings")),
                opt_int(int(r, "status_changes")),
            ]
        })
        .collect();
    s.table(
        "The last loaded runs, newest first (queries/run_health.sql)",
        &["finished (UTC)", "mode", "status", "duration (s)", "requests", "429s", "warnings", "status changes"],
        rows,
    );
    s
}

/// The rows of one metric of `wow_latest`, oldest first.
fn metric_rows<'a>(a: &'a Answers, metric: &str) -> Vec<&'a Row> {
    let mut rows: Vec<&Row> = a.rows("wow_latest").iter().filter(|r| text(r, "metric") == Some(metric)).collect();
    rows.sort_by_key(|r| date(r, "date"));
    rows
}

/// A full week's change on the week before (`weekly_trend`'s column `{metric}_pct_change`),
/// only when the week before is full too: a change on a partly loaded week would read as a jump.
/// Otherwise why there is none.
fn full_week_change(all: &[Row], week: &Row, metric: &str) -> Result<f64, String> {
    let not_full = || "the week before is not fully loaded".to_owned();
    let start = date(week, "week_start").ok_or_else(not_full)?;
    let before = all.iter().find(|r| date(r, "week_start") == Some(start - chrono::Duration::days(7)));
    match before {
        Some(b) if flag(b, "complete") == Some(true) => {
            num(week, &format!("{metric}_pct_change")).ok_or_else(|| format!("the week before had no {metric}"))
        }
        _ => Err(not_full()),
    }
}

fn content(a: &Answers) -> Section {
    let mut s = Section::default();
    let all = a.rows("weekly_trend");
    let weeks: Vec<&Row> = all.iter().filter(|r| flag(r, "complete") == Some(true)).collect();
    match weeks.last() {
        Some(w) => {
            let label = date(w, "week_start").map(iso_week).unwrap_or_default();
            for metric in ["views", "likes"] {
                let total = int(w, metric);
                let change = full_week_change(all, w, metric);
                s.figure(
                    &format!("{metric}_last_full_week"),
                    format!("{}, ISO week {label}", capital(metric)),
                    opt_int(total),
                    opt_json(total),
                    Some(match &change {
                        Ok(c) => format!("{} on the week before", change_text(Some(*c))),
                        Err(why) => why.clone(),
                    }),
                );
                let change = change.ok();
                s.figure(
                    &format!("{metric}_wow_change"),
                    format!("{} week over week, ISO week {label}", capital(metric)),
                    change_text(change),
                    opt_json(change),
                    None,
                );
            }
        }
        None => s.sentence("No full ISO week (Monday to Sunday, every day loaded) of content yet: no weekly totals."),
    }
    for metric in ["views", "likes"] {
        let rows = metric_rows(a, metric);
        let x: Vec<String> = rows.iter().map(|r| date(r, "date").map(day).unwrap_or_default()).collect();
        let range = match (rows.first().and_then(|r| date(r, "date")), rows.last().and_then(|r| date(r, "date"))) {
            (Some(a), Some(b)) => format!("{a} to {b}"),
            _ => String::new(),
        };
        s.chart(
            &format!("{metric}_daily"),
            &format!(
                "{} per day (24-hour statistics) and the 7-day average, {range} (the {} days up to the newest loaded day).",
                capital(metric),
                a.param("wow_latest", "days")
            ),
            charts::lines(
                &x,
                &[
                    Series::new(
                        format!("{metric} per day"),
                        if metric == "views" { BLUE } else { PURPLE },
                        rows.iter().map(|r| num(r, "current")).collect(),
                    ),
                    Series::new(
                        "7-day average",
                        ORANGE,
                        rows.iter().map(|r| num(r, "current_7d").map(|v| v / 7.0)).collect(),
                    ),
                ],
                Scale::Count,
            ),
            &format!("No daily {metric} loaded yet: the organization has no content statistics in the warehouse."),
        );
    }
    if !weeks.is_empty() {
        let rows = weeks
            .iter()
            .rev()
            .take(6)
            .map(|w| {
                vec![
                    date(w, "week_start").map(iso_week).unwrap_or_default(),
                    opt_int(int(w, "views")),
                    change_text(full_week_change(all, w, "views").ok()),
                    opt_int(int(w, "likes")),
                    change_text(full_week_change(all, w, "likes").ok()),
                ]
            })
            .collect();
        s.heading("Full ISO weeks");
        s.table(
            "The last full ISO weeks, newest first, with the change on the week before when that week is full too (queries/weekly_trend.sql)",
            &["ISO week", "views", "change", "likes", "change"],
            rows,
        );
    }
    s.heading("Biggest movers");
    let movers = a.rows("movers");
    if movers.is_empty() {
        s.sentence("No day of the last 28 loaded days has a week before to compare with yet.");
    } else {
        let rows = movers
            .iter()
            .map(|r| {
                let end = date(r, "date");
                vec![
                    text(r, "metric").unwrap_or_default().to_owned(),
                    end.map(|e| format!("{} to {}", e - chrono::Duration::days(6), e)).unwrap_or_default(),
                    opt_int(int(r, "current_7d")),
                    opt_int(int(r, "last_7d")),
                    change_text(num(r, "pct_change_7d")),
                ]
            })
            .collect();
        s.table(
            "The 7-day sums that changed most on the week before, in the last 28 loaded days (queries/movers.sql)",
            &["metric", "7 days", "sum", "week before", "change"],
            rows,
        );
    }
    s
}

fn capital(s: &str) -> String {
    let mut c = s.chars();
    c.next().map(|f| f.to_uppercase().chain(c).collect()).unwrap_or_default()
}

fn status_color(status: &str, i: usize) -> plotters::style::RGBColor {
    match status {
        "accepted" => GREEN,
        "rejected" => RED,
        "pending" => BLUE,
        _ => [ORANGE, PURPLE, PALETTE[5]][i % 3],
    }
}

fn applications(a: &Answers) -> Section {
    let mut s = Section::default();
    let by_status = a.rows("applications_by_status");
    let total: i64 = by_status.iter().filter_map(|r| int(r, "applications")).sum();
    let pending_now = by_status
        .iter()
        .find(|r| text(r, "status") == Some("pending"))
        .and_then(|r| int(r, "applications"))
        .unwrap_or(0);
    s.figure("applications_total", "Applications, as of the last load".into(), int_text(total), json!(total), None);
    s.figure(
        "applications_pending",
        "Pending applications, as of the last load".into(),
        int_text(pending_now),
        json!(pending_now),
        None,
    );
    let statuses: Vec<String> = by_status.iter().map(|r| text(r, "status").unwrap_or_default().to_owned()).collect();
    s.chart(
        "applications_by_status",
        "Applications by status, as of the last load (queries/applications_by_status.sql).",
        charts::bars(
            &statuses,
            &[Series::new("applications", BLUE, by_status.iter().map(|r| num(r, "applications")).collect())],
            false,
            Scale::Count,
        ),
        "No applications loaded yet.",
    );

    let changes = a.rows("status_changes");
    // Every week from the first with a change to the last, those without one included.
    let seen: BTreeSet<NaiveDate> = changes.iter().filter_map(|r| date(r, "week_start")).collect();
    let weeks: Vec<NaiveDate> = match (seen.first(), seen.last()) {
        (Some(first), Some(last)) => {
            (0..).map(|k| *first + chrono::Duration::weeks(k)).take_while(|w| w <= last).collect()
        }
        _ => vec![],
    };
    let to: BTreeSet<&str> = changes.iter().filter_map(|r| text(r, "to_status")).collect();
    let series: Vec<Series> = to
        .iter()
        .enumerate()
        .map(|(i, st)| {
            let values = weeks
                .iter()
                .map(|w| {
                    changes
                        .iter()
                        .find(|r| date(r, "week_start") == Some(*w) && text(r, "to_status") == Some(st))
                        .and_then(|r| num(r, "changes"))
                })
                .collect();
            Series::new(format!("to {st}"), status_color(st, i), values)
        })
        .collect();
    let changed: i64 = changes.iter().filter_map(|r| int(r, "changes")).sum();
    let days = a.param("status_changes", "days");
    s.figure(
        "status_changes",
        format!("Status changes, the last {days} days of history"),
        int_text(changed),
        json!(changed),
        None,
    );
    s.heading("Status changes over time");
    s.chart(
        "status_changes_weekly",
        &format!(
            "Status changes per ISO week (weeks starting Monday), by the status changed to, from the SCD2 history \
             (application_status_history), the last {days} days before the newest change (queries/status_changes.sql)."
        ),
        charts::bars(
            &weeks.iter().map(|w| w.format("%b %-d").to_string()).collect::<Vec<_>>(),
            &series,
            true,
            Scale::Count,
        ),
        "No status change recorded yet: the history shows changes from the second sync on.",
    );

    s.heading("Pending queue");
    let queue = a.rows("pending_queue");
    let sum = |col: &str| queue.iter().filter_map(|r| int(r, col)).sum::<i64>();
    let (under, mid, over) = (sum("under_7d"), sum("from_7_to_30d"), sum("over_30d"));
    let oldest = queue.iter().filter_map(|r| time(r, "oldest_applied_at")).min();
    s.figure(
        "pending_over_30d",
        "Pending for over 30 days (to the last load)".into(),
        int_text(over),
        json!(over),
        Some(format!("of {} pending in {} campaigns", int_text(under + mid + over), queue.len())),
    );
    s.figure(
        "pending_oldest_applied_at",
        "Oldest pending application applied (UTC)".into(),
        oldest.map_or("–".into(), stamp),
        opt_json(oldest.map(|t| t.to_rfc3339())),
        None,
    );
    s.chart(
        "pending_age",
        "Pending applications by how long they have waited, counted to the last load (queries/pending_queue.sql).",
        charts::bars(
            &["under 7 days".into(), "7 to 30 days".into(), "over 30 days".into()],
            &[Series::new("pending", BLUE, vec![Some(under as f64), Some(mid as f64), Some(over as f64)])],
            false,
            Scale::Count,
        ),
        "No application is pending: the queue is empty.",
    );
    if !queue.is_empty() {
        let rows = queue
            .iter()
            .take(5)
            .map(|r| {
                vec![
                    text(r, "campaign_name").map_or_else(|| opt_int(int(r, "campaign_id")), str::to_owned),
                    opt_int(int(r, "pending")),
                    opt_int(int(r, "under_7d")),
                    opt_int(int(r, "from_7_to_30d")),
                    opt_int(int(r, "over_30d")),
                    num(r, "median_age_days").map_or("–".into(), |d| format!("{d:.1}")),
                ]
            })
            .collect();
        s.table(
            "The campaigns with the most pending applications",
            &["campaign", "pending", "< 7 days", "7–30 days", "> 30 days", "median age (days)"],
            rows,
        );
    }
    s
}

fn cohorts(a: &Answers) -> Section {
    let mut s = Section::default();
    let buckets = a.rows("cohort_acceptance");
    let accepted: i64 = buckets.iter().filter_map(|r| int(r, "accepted")).sum();
    let rejected: i64 = buckets.iter().filter_map(|r| int(r, "rejected")).sum();
    let overall = (accepted + rejected > 0).then(|| accepted as f64 / (accepted + rejected) as f64);
    s.figure(
        "acceptance_rate",
        "Acceptance rate, every application decided so far".into(),
        rate_text(overall),
        opt_json(overall),
        Some(format!("{} accepted, {} rejected", int_text(accepted), int_text(rejected))),
    );
    s.chart(
        "acceptance_by_cohort",
        "Acceptance rate, accepted / (accepted + rejected), by the creator's monthly post count (queries/cohort_acceptance.sql).",
        charts::bars(
            &buckets.iter().map(|r| text(r, "bucket").unwrap_or_default().to_owned()).collect::<Vec<_>>(),
            &[Series::new("acceptance rate", GREEN, buckets.iter().map(|r| num(r, "acceptance_rate")).collect())],
            false,
            Scale::Percent,
        ),
        &if accepted + rejected > 0 {
            format!(
                "No application has been accepted: all {} decided so far were rejected, 0 % in every cohort.",
                int_text(rejected)
            )
        } else {
            "No application has been accepted or rejected yet: no acceptance rate by post count.".to_owned()
        },
    );
    if !buckets.is_empty() {
        let rows = buckets
            .iter()
            .map(|r| {
                vec![
                    text(r, "bucket").unwrap_or_default().to_owned(),
                    opt_int(int(r, "applications")),
                    opt_int(int(r, "creators")),
                    opt_int(int(r, "accepted")),
                    opt_int(int(r, "rejected")),
                    opt_int(int(r, "pending")),
                    rate_text(num(r, "acceptance_rate")),
                ]
            })
            .collect();
        s.table(
            "Applications per monthly-post-count cohort",
            &["posts per month", "applications", "creators", "accepted", "rejected", "pending", "acceptance"],
            rows,
        );
    }
    // Per month of application: the grid's cells summed over the buckets.
    let mut months: BTreeMap<NaiveDate, (i64, i64)> = BTreeMap::new();
    for r in a.rows("cohort_by_month") {
        if let Some(m) = date(r, "applied_month") {
            let e = months.entry(m).or_default();
            e.0 += int(r, "accepted").unwrap_or(0);
            e.1 += int(r, "rejected").unwrap_or(0);
        }
    }
    let labels: Vec<String> = months.keys().map(|m| m.format("%Y-%m").to_string()).collect();
    let rates: Vec<Option<f64>> =
        months.values().map(|(acc, rej)| (acc + rej > 0).then(|| *acc as f64 / (acc + rej) as f64)).collect();
    s.heading("By month of application");
    s.chart(
        "acceptance_by_month",
        &format!(
            "Acceptance rate by month of application, the {} months up to the newest month with applications (queries/cohort_by_month.sql, summed over the cohorts).",
            a.param("cohort_by_month", "months")
        ),
        charts::bars(&labels, &[Series::new("acceptance rate", GREEN, rates)], false, Scale::Percent),
        if months.values().any(|(acc, rej)| acc + rej > 0) {
            "No application of these months has been accepted: every one decided was rejected, 0 % in each month."
        } else {
            "No month has an accepted or rejected application yet."
        },
    );
    s
}

/// The outcomes of rows that need attention (`action::Outcome::is_failure`, exit 3).
const NEED_ATTENTION: [&str; 4] = ["failed", "failed_transient", "in_doubt", "not_sent"];

fn corrections(a: &Answers) -> Section {
    let mut s = Section::default();
    let rows = a.rows("action_outcomes");
    // Runs newest first, as the query orders them.
    let mut runs: Vec<&str> = vec![];
    for r in rows {
        if let Some(id) = text(r, "run_id") {
            if !runs.contains(&id) {
                runs.push(id);
            }
        }
    }
    let Some(last) = runs.first() else {
        s.sentence(
            "No reviewed corrections have been applied to this organization's data (`creator-etl actions apply`, or `run --actions`).",
        );
        return s;
    };
    fn of<'a>(rows: &'a [Row], run: &'a str) -> impl Iterator<Item = &'a Row> + 'a {
        rows.iter().filter(move |r| text(r, "run_id") == Some(run))
    }
    let finished = of(rows, last).filter_map(|r| time(r, "finished_at")).max();
    let on = finished.map(|t| format!(" ({})", stamp(t))).unwrap_or_default();
    let count = |run: &str, pred: &dyn Fn(&str) -> bool| -> i64 {
        of(rows, run).filter(|r| text(r, "outcome").is_some_and(pred)).filter_map(|r| int(r, "rows")).sum()
    };
    let applied = count(last, &|o| o == "applied");
    let attention = count(last, &|o| NEED_ATTENTION.contains(&o));
    let total = count(last, &|_| true);
    s.figure("actions_last_rows", format!("Rows, last actions run{on}"), int_text(total), json!(total), None);
    s.figure("actions_last_applied", format!("Applied, last actions run{on}"), int_text(applied), json!(applied), None);
    s.figure(
        "actions_last_need_attention",
        format!("Need attention, last actions run{on}"),
        int_text(attention),
        json!(attention),
        Some("failed, failed_transient, in_doubt or not_sent: `actions apply` exits 3".into()),
    );
    let shown: Vec<&str> = runs.iter().take(5).rev().copied().collect();
    let outcomes: BTreeSet<&str> = rows.iter().filter_map(|r| text(r, "outcome")).collect();
    let series: Vec<Series> = outcomes
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let color = match *o {
                "applied" => GREEN,
                "failed" => RED,
                _ => [BLUE, ORANGE, PURPLE, PALETTE[5]][i % 4],
            };
            Series::new(*o, color, shown.iter().map(|run| Some(count(run, &|x| x == *o) as f64)).collect())
        })
        .collect();
    let labels: Vec<String> = shown
        .iter()
        .map(|run| {
            of(rows, run)
                .filter_map(|r| time(r, "finished_at"))
                .max()
                .map_or("?".into(), |t| t.format("%m-%d %H:%M").to_string())
        })
        .collect();
    s.chart(
        "action_outcomes",
        &match shown.len() {
            1 => "Rows per outcome of the only actions run so far, by when it finished (queries/action_outcomes.sql)."
                .to_owned(),
            n => format!(
                "Rows per outcome of the last {n} actions runs, by when each finished (queries/action_outcomes.sql)."
            ),
        },
        charts::bars(&labels, &series, true, Scale::Count),
        "The actions runs recorded no rows.",
    );
    let table_rows = of(rows, last)
        .map(|r| {
            vec![
                text(r, "action").unwrap_or_default().to_owned(),
                text(r, "outcome").unwrap_or_default().to_owned(),
                opt_int(int(r, "rows")),
                text(r, "http_statuses").unwrap_or("–").to_owned(),
            ]
        })
        .collect();
    s.table(
        &format!("The last actions run{on}, by action and outcome"),
        &["action", "outcome", "rows", "HTTP statuses"],
        table_rows,
    );
    s
}

/// One organization's line on the overview.
pub struct OverviewRow {
    pub organization: String,
    pub page: String,
    pub health: Health,
    pub figures: BTreeMap<String, Value>,
}

/// The overview of several organizations: a sortable table, failed and stale first, each row
/// linking to the organization's page.
pub fn overview(source: &str, generated_at: DateTime<Utc>, rows: &[OverviewRow]) -> String {
    let title = "creator-etl report: every organization";
    let mut html = head(title);
    let count = |st: HealthState| rows.iter().filter(|r| r.health.state == st).count();
    let _ = writeln!(
        html,
        "<header><h1>{}</h1><p class=\"meta\">Generated {} from {}.</p></header>",
        esc(title),
        stamp(generated_at),
        esc(source)
    );
    let worst = rows.iter().map(|r| r.health.state).min().unwrap_or(HealthState::Never);
    let _ = writeln!(
        html,
        "<div class=\"banner {}\" data-health=\"{}\"><strong>{} organizations: {}.</strong></div>",
        worst.css_class(),
        worst.as_str(),
        rows.len(),
        HealthState::ALL.iter().map(|st| format!("{} {}", count(*st), st.as_str())).collect::<Vec<_>>().join(", ")
    );
    html.push_str("<section id=\"organizations\" data-section=\"organizations\"><h2>Organizations</h2>\n");
    if rows.is_empty() {
        html.push_str("<p class=\"empty\">The source holds no organization's rows yet.</p>\n");
    }
    let mut sorted: Vec<&OverviewRow> = rows.iter().collect();
    sorted.sort_by(|a, b| a.health.state.cmp(&b.health.state).then(a.organization.cmp(&b.organization)));
    let cell = |sort: String, html: String| Cell::Html { sort, html };
    let fig = |r: &OverviewRow, k: &str| r.figures.get(k).cloned().unwrap_or(Value::Null);
    // Numbers sort as numbers; a missing one has no key, and sorts last.
    let num_cell = |v: Value, shown: String| cell(v.as_f64().map(|f| f.to_string()).unwrap_or_default(), esc(&shown));
    let count_cell = |r: &OverviewRow, k: &str| {
        let v = fig(r, k);
        let shown = v.as_i64().map_or("–".into(), int_text);
        num_cell(v, shown)
    };
    let table_rows: Vec<Vec<Cell>> = sorted
        .iter()
        .map(|r| {
            let last = r.health.last_synced_at;
            let state = r.health.state.as_str();
            vec![
                cell(r.organization.clone(), format!("<a href=\"{}\">{}</a>", esc(&r.page), esc(&r.organization))),
                cell(
                    format!("{}", r.health.state as u8),
                    format!(
                        "<span class=\"state-{}\" title=\"{}\">{}</span>",
                        r.health.state.css_class(),
                        esc(&r.health.headline),
                        esc(state)
                    ),
                ),
                cell(last.map(|t| t.timestamp().to_string()).unwrap_or_default(), esc(&last.map_or("–".into(), stamp))),
                Cell::Text(fig(r, "last_sync_mode").as_str().unwrap_or("–").to_owned()),
                count_cell(r, "last_run_requests"),
                count_cell(r, "last_run_rate_limited"),
                count_cell(r, "applications_total"),
                count_cell(r, "applications_pending"),
                count_cell(r, "views_last_full_week"),
                num_cell(fig(r, "views_wow_change"), change_text(fig(r, "views_wow_change").as_f64())),
                num_cell(fig(r, "acceptance_rate"), rate_text(fig(r, "acceptance_rate").as_f64())),
            ]
        })
        .collect();
    if !rows.is_empty() {
        html.push_str(&table(
            "Click a column's name to sort by it. Requests and 429s are the last loaded run's; views are the last full ISO week's.",
            &[
                "organization",
                "health",
                "last sync (UTC)",
                "mode",
                "requests",
                "429s",
                "applications",
                "pending",
                "views, last full week",
                "week over week",
                "acceptance",
            ],
            table_rows,
            true,
        ));
    }
    html.push_str("</section>\n");
    let data = json!({
        "report_version": 1,
        "source": source,
        "generated_at": generated_at.to_rfc3339(),
        "organizations": rows.iter().map(|r| json!({
            "organization": r.organization,
            "page": r.page,
            "health": r.health,
            "figures": r.figures,
        })).collect::<Vec<_>>(),
    });
    html.push_str(&data_block(&data));
    html.push_str(SORT_SCRIPT);
    html.push_str("</main></body></html>\n");
    html
}

/// Sorts a `table.sortable` by the column whose header is clicked, by each cell's `data-sort`
/// (as numbers when both are numbers, times as epoch seconds; empty keys last either way).
/// Inline: the page loads nothing.
const SORT_SCRIPT: &str = "<script>
document.querySelectorAll('table.sortable').forEach(function (t) {
  t.querySelectorAll('th').forEach(function (th, i) {
    th.addEventListener('click', function () {
      var asc = th.getAttribute('data-dir') !== 'asc';
      t.querySelectorAll('th').forEach(function (h) { h.removeAttribute('data-dir'); });
      th.setAttribute('data-dir', asc ? 'asc' : 'desc');
      var body = t.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var num = function (v) { return v !== '' && isFinite(Number(v)); };
      rows.sort(function (a, b) {
        var x = a.cells[i].getAttribute('data-sort') || '', y = b.cells[i].getAttribute('data-sort') || '';
        if (x === '' || y === '') { return (x === '') - (y === ''); }
        var r = (num(x) && num(y)) ? Number(x) - Number(y) : x.localeCompare(y);
        return asc ? r : -r;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
</script>
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rows_that_need_attention_are_the_actions_failures() {
        use crate::action::Outcome;
        for name in [
            "applied",
            "noop",
            "skipped_not_approved",
            "skipped_already_applied",
            "skipped_not_selected",
            "skipped_duplicate",
        ]
        .into_iter()
        .chain(NEED_ATTENTION)
        {
            let outcome: Outcome = serde_json::from_value(json!(name)).unwrap();
            assert_eq!(outcome.as_str(), name);
            assert_eq!(outcome.is_failure(), NEED_ATTENTION.contains(&name), "{name}");
        }
    }

    #[test]
    fn text_is_escaped_and_the_data_block_cannot_be_closed_early() {
        assert_eq!(esc("<a href=\"x\">'&'</a>"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
        let block = data_block(&json!({"campaign": "</script><script>alert(1)</script>"}));
        assert_eq!(block.matches("</script>").count(), 1, "{block}");
        let back: Value = serde_json::from_str(
            block
                .trim_start_matches("<script type=\"application/json\" id=\"report-data\">")
                .trim_end()
                .trim_end_matches("</script>"),
        )
        .unwrap();
        assert_eq!(back["campaign"], "</script><script>alert(1)</script>");
        assert_eq!(int_text(-1234567), "-1,234,567");
        assert_eq!(int_text(999), "999");
        assert_eq!(change_text(Some(0.0421)), "+4.2 %");
        assert_eq!(change_text(None), "–");
    }

    #[test]
    fn data_in_a_cell_is_text_whatever_it_holds() {
        let rows = [vec![Cell::Text("\u{1}k\u{2}<img src=x onerror=alert(1)>".into())]];
        for sortable in [false, true] {
            let t = table(
                "",
                &["campaign"],
                rows.iter()
                    .map(|r| {
                        r.iter()
                            .map(|c| match c {
                                Cell::Text(t) => Cell::Text(t.clone()),
                                Cell::Html { sort, html } => Cell::Html { sort: sort.clone(), html: html.clone() },
                            })
                            .collect()
                    })
                    .collect(),
                sortable,
            );
            assert!(!t.contains("<img"), "{t}");
            assert!(t.contains("&lt;img src=x onerror=alert(1)&gt;"), "{t}");
        }
    }

    fn answers_of(name: &'static str, rows: Value) -> Answers {
        let mut a = Answers::default();
        let rows = rows.as_array().unwrap().iter().map(|r| r.as_object().unwrap().clone()).collect();
        a.0.insert(name, super::super::data::Answer { params: Default::default(), aggregate: None, rows });
        a
    }

    #[test]
    fn a_zero_acceptance_rate_is_said_as_such() {
        let a = answers_of(
            "cohort_acceptance",
            json!([{"bucket": "1-4", "applications": 5, "accepted": 0, "rejected": 5, "acceptance_rate": 0.0}]),
        );
        let s = cohorts(&a);
        assert_eq!(s.charts, 0);
        assert!(s.body.contains("No application has been accepted: all 5 decided so far were rejected"), "{}", s.body);
    }

    #[test]
    fn a_week_over_week_change_needs_a_full_week_before() {
        let a = answers_of(
            "weekly_trend",
            json!([
                {"week_start": "2026-11-09", "views": 10, "views_pct_change": null, "likes": 1, "likes_pct_change": null, "complete": false},
                {"week_start": "2026-11-16", "views": 700, "views_pct_change": 69.0, "likes": 70, "likes_pct_change": 69.0, "complete": true},
            ]),
        );
        let s = content(&a);
        let wow = s.figures.iter().find(|f| f.key == "views_wow_change").unwrap();
        assert_eq!(wow.value, Value::Null, "no change on a partly loaded week");
        assert!(s.figures.iter().any(|f| f.note.as_deref() == Some("the week before is not fully loaded")));
        // A full week before with nothing in it: no change either, and the note says why.
        let a = answers_of(
            "weekly_trend",
            json!([
                {"week_start": "2026-11-09", "views": 0, "views_pct_change": null, "likes": 0, "likes_pct_change": null, "complete": true},
                {"week_start": "2026-11-16", "views": 700, "views_pct_change": null, "likes": 70, "likes_pct_change": null, "complete": true},
            ]),
        );
        let s = content(&a);
        assert!(s.figures.iter().any(|f| f.note.as_deref() == Some("the week before had no views")));
    }

    #[test]
    fn an_organization_without_data_gets_sentences_and_no_chart() {
        let answers = Answers::default();
        let health = Health::of(&answers, &[], None, Utc::now(), std::time::Duration::from_secs(3600));
        let built = org_page(&OrgPage {
            organization: Some("acme"),
            source: "the lake file:///x",
            generated_at: Utc::now(),
            answers: &answers,
            health: &health,
            overview: Some("../index.html"),
        });
        assert!(built.sections.values().all(|drawn| !drawn), "{:?}", built.sections);
        assert!(!built.html.contains("<svg"), "no chart without data");
        for (id, _) in SECTIONS {
            assert!(built.html.contains(&format!("data-section=\"{id}\"")), "{id}");
        }
        assert!(built.html.contains("Never synced"));
        assert!(built.html.contains("No reviewed corrections have been applied"));
    }
}
