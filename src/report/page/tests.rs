//! The pages' unit tests: escaping, the need-attention outcomes, and sections over thin data.

use chrono::Utc;
use serde_json::{json, Value};

use super::corrections::NEED_ATTENTION;
use super::html::{change_text, esc, int_text, table, Cell};
use super::{cohorts, content, data_block, org_page, OrgPage, SECTIONS};
use crate::report::data::{Answer, Answers};
use crate::report::health::Health;
use crate::report::rows::Typed;

#[test]
fn the_rows_that_need_attention_are_the_actions_failures() {
    use crate::action::RowOutcome;
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
        let outcome: RowOutcome = serde_json::from_value(json!(name)).unwrap();
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
    a.0.insert(name, Answer { params: Default::default(), aggregate: None, rows });
    a
}

#[test]
fn a_zero_acceptance_rate_is_said_as_such() {
    let a = answers_of(
        "cohort_acceptance",
        json!([{"bucket": "1-4", "bucket_min": 1, "bucket_max": 4, "applications": 5, "creators": 5, "accepted": 0,
                "rejected": 5, "pending": 0, "acceptance_rate": 0.0}]),
    );
    let s = cohorts::section(&Typed::of(&a).unwrap(), &a);
    assert_eq!(s.charts, 0);
    assert!(s.body.contains("No application has been accepted: all 5 decided so far were rejected"), "{}", s.body);
}

#[test]
fn a_week_over_week_change_needs_a_full_week_before() {
    let a = answers_of(
        "weekly_trend",
        json!([
            {"week_start": "2026-11-09", "views": 10, "views_delta": null, "views_pct_change": null, "likes": 1,
             "likes_delta": null, "likes_pct_change": null, "complete": false},
            {"week_start": "2026-11-16", "views": 700, "views_delta": 690, "views_pct_change": 69.0, "likes": 70,
             "likes_delta": 69, "likes_pct_change": 69.0, "complete": true},
        ]),
    );
    let s = content::section(&Typed::of(&a).unwrap(), &a);
    let wow = s.figures.iter().find(|f| f.key == super::key::wow_change("views")).unwrap();
    assert_eq!(wow.value, Value::Null, "no change on a partly loaded week");
    assert!(s.figures.iter().any(|f| f.note.as_deref() == Some("the week before is not fully loaded")));
    // A full week before with nothing in it: no change either, and the note says why.
    let a = answers_of(
        "weekly_trend",
        json!([
            {"week_start": "2026-11-09", "views": 0, "views_delta": null, "views_pct_change": null, "likes": 0,
             "likes_delta": null, "likes_pct_change": null, "complete": true},
            {"week_start": "2026-11-16", "views": 700, "views_delta": 700, "views_pct_change": null, "likes": 70,
             "likes_delta": 70, "likes_pct_change": null, "complete": true},
        ]),
    );
    let s = content::section(&Typed::of(&a).unwrap(), &a);
    assert!(s.figures.iter().any(|f| f.note.as_deref() == Some("the week before had no views")));
}

#[test]
fn an_organization_without_data_gets_sentences_and_no_chart() {
    let answers = Answers::default();
    let rows = Typed::default();
    let health = Health::of(&rows.run_health, &[], None, Utc::now(), std::time::Duration::from_secs(3600));
    let built = org_page(&OrgPage {
        organization: Some("acme"),
        source: "the lake file:///x",
        generated_at: Utc::now(),
        answers: &answers,
        rows: &rows,
        health: &health,
        overview: Some("../index.html"),
        stale_after: std::time::Duration::from_secs(3600),
    });
    assert!(built.sections.values().all(|drawn| !drawn), "{:?}", built.sections);
    assert!(!built.html.contains("<svg"), "no chart without data");
    for (id, _) in SECTIONS {
        assert!(built.html.contains(&format!("data-section=\"{id}\"")), "{id}");
    }
    assert!(built.html.contains("Never synced"));
    assert!(built.html.contains("No reviewed corrections have been applied"));
}
