//! The overview of several organizations: a sortable table, worst health first, each row linking
//! to the organization's page.

use std::collections::BTreeMap;
use std::fmt::Write;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::html::{change_text, esc, int_text, rate_text, table, Cell};
use super::{data_block, head, key};
use crate::report::data::stamp;
use crate::report::health::{Health, HealthState};

/// One organization's line on the overview.
pub struct OverviewRow {
    pub organization: String,
    pub page: String,
    pub health: Health,
    pub figures: BTreeMap<String, Value>,
}

/// The overview of several organizations: a sortable table, worst health first, each row linking
/// to the organization's page.
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
    let num_cell = |v: Value, shown: String| cell(v.as_f64().map_or_else(String::new, |f| f.to_string()), esc(&shown));
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
                cell(
                    last.map_or_else(String::new, |t| t.timestamp().to_string()),
                    esc(&last.map_or("–".into(), stamp)),
                ),
                Cell::Text(fig(r, key::LAST_SYNC_MODE).as_str().map_or("–", |m| m).to_owned()),
                count_cell(r, key::LAST_RUN_REQUESTS),
                count_cell(r, key::LAST_RUN_RATE_LIMITED),
                count_cell(r, key::APPLICATIONS_TOTAL),
                count_cell(r, key::APPLICATIONS_PENDING),
                count_cell(r, &key::last_full_week("views")),
                num_cell(fig(r, &key::wow_change("views")), change_text(fig(r, &key::wow_change("views")).as_f64())),
                num_cell(fig(r, key::ACCEPTANCE_RATE), rate_text(fig(r, key::ACCEPTANCE_RATE).as_f64())),
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
