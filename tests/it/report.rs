//! `creator-etl report`, looked at as a person does: rendered by headless Chromium (Debian's
//! `chromium`, which `.ci/run` installs), screenshot taken; its numbers checked against the named
//! queries; the empty and thin cases; the overview of several organizations; and the page that
//! `run` leaves after a load and after a failure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use creator_etl::emulator::{org_key, EmulatorConfig, OrgPolicy};

use creator_etl::report::SECTIONS;
use serde_json::Value;

use crate::demo::{demo_out, notebook_python, two_org_lake};
use crate::util::*;

/// The charts' series colours (`report::charts::PALETTE`): axes and grid are greys, so an element
/// in one of these is a drawn mark.
const PALETTE: [&str; 6] = ["#2563EB", "#EA580C", "#16A34A", "#DC2626", "#7C3AED", "#0E7490"];

/// What the browser made of a page.
struct Rendered {
    /// The DOM after the page's scripts ran.
    dom: String,
    /// What the page wrote to the console (errors included), one line each.
    console: Vec<String>,
    png: PathBuf,
}

fn chromium() -> &'static str {
    crate::needs::chromium()
}

/// Opens `page` from its file URL in headless Chromium, offline: a screenshot of `height` pixels
/// and the DOM after scripts ran, and the console's lines of both loads.
fn render(page: &Path, height: u32) -> Rendered {
    let scratch = tempfile::tempdir().unwrap();
    let png = scratch.path().join("shot.png");
    let url = format!("file://{}", page.display());
    let run = |extra: &[String]| {
        let o = Command::new(chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--no-first-run",
                "--enable-logging=stderr",
                "--v=0",
                &format!("--user-data-dir={}", scratch.path().join("profile").display()),
                &format!("--window-size=1200,{height}"),
                // Offline: any request to the network would fail and show in the console.
                "--proxy-server=127.0.0.1:9",
            ])
            .args(extra)
            .arg(&url)
            .env("HOME", scratch.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "chromium: {}", String::from_utf8_lossy(&o.stderr));
        o
    };
    let shot = run(&[format!("--screenshot={}", png.display())]);
    let dump = run(&["--dump-dom".to_owned()]);
    let console = [&shot, &dump]
        .iter()
        .flat_map(|o| String::from_utf8_lossy(&o.stderr).lines().map(str::to_owned).collect::<Vec<_>>())
        .filter(|l| l.contains(":CONSOLE"))
        .collect();
    let keep = std::env::temp_dir().join(format!("report-{}-{}.png", std::process::id(), fastrand::u64(..)));
    std::fs::copy(&png, &keep).unwrap();
    Rendered { dom: String::from_utf8_lossy(&dump.stdout).into_owned(), console, png: keep }
}

/// The pixels of a screenshot: how many are neither the page's background nor white, and how
/// many have each palette colour (read with Pillow, from the notebooks' virtualenv).
fn pixels(png: &Path) -> (u64, BTreeMap<String, u64>) {
    let script = r##"
import json, sys
from PIL import Image
im = Image.open(sys.argv[1]).convert("RGB")
colors = im.getcolors(maxcolors=1 << 24)
palette = [c.lstrip("#") for c in sys.argv[2:]]
counts = {c: 0 for c in palette}
inked = 0
for n, rgb in colors:
    h = "%02X%02X%02X" % rgb
    if rgb not in [(255, 255, 255), (248, 250, 252)]:
        inked += n
    if h in counts:
        counts[h] += n
print(json.dumps({"inked": inked, "palette": counts}))
"##;
    let o = Command::new(notebook_python()).arg("-c").arg(script).arg(png).args(PALETTE).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let palette = v["palette"].as_object().unwrap().iter().map(|(k, n)| (k.clone(), n.as_u64().unwrap())).collect();
    (v["inked"].as_u64().unwrap(), palette)
}

/// Each chart of a page (`data-chart` → its HTML).
fn charts(html: &str) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    for part in html.split("<figure class=\"chart\" data-chart=\"").skip(1) {
        let (key, rest) = part.split_once('"').unwrap();
        let end = rest.find("</figure>").expect("a chart's figure closes");
        found.insert(key.to_owned(), rest[..end].to_owned());
    }
    found
}

/// The marks of a chart: SVG elements in a palette colour.
fn marks(chart: &str) -> usize {
    PALETTE.iter().map(|c| chart.matches(&format!("=\"{c}\"")).count()).sum()
}

/// The JSON block of a page.
fn data_of(html: &str) -> Value {
    let start = "<script type=\"application/json\" id=\"report-data\">";
    let from = html.find(start).expect("the page holds its numbers") + start.len();
    let to = from + html[from..].find("</script>").unwrap();
    serde_json::from_str(&html[from..to]).unwrap()
}

/// The `data-figure` values shown on a page.
fn shown_figures(html: &str) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    for part in html.split("data-figure=\"").skip(1) {
        let (key, rest) = part.split_once('"').unwrap();
        let value = rest.split_once("data-value=\"").unwrap().1.split_once('"').unwrap().0;
        found.insert(key.to_owned(), value.replace("&quot;", "\"").replace("&#39;", "'").replace("&amp;", "&"));
    }
    found
}

/// The page loads nothing: no element refers to a file or the network but the report's own pages.
fn assert_self_contained(html: &str) {
    for banned in ["<link", " src=", "@import", "url(", "<iframe", "<img"] {
        assert!(!html.contains(banned), "the page refers to another resource ({banned})");
    }
    for part in html.split("href=\"").skip(1) {
        let target = part.split_once('"').unwrap().0;
        assert!(
            target.starts_with('#') || target.starts_with("org/") || target == "../index.html",
            "a link out of the report: {target}"
        );
    }
}

fn rows_of(o: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Every query of a page's JSON block answers the same through `creator-etl query` (with the
/// page's parameters, and `extra`: `--lake`, `--org`).
fn assert_numbers_match_queries(dir: &Path, out: &Path, page: &Value, extra: &[&str]) {
    let queries = page["queries"].as_object().unwrap();
    assert_eq!(queries.len(), creator_etl::report::ASKED.len());
    for (name, answer) in queries {
        let mut args = vec!["query".to_owned(), name.clone(), "--format".into(), "json".into()];
        args.extend(["--out".to_owned(), out.to_str().unwrap().to_owned()]);
        for (k, v) in answer["params"].as_object().unwrap() {
            args.extend(["--param".to_owned(), format!("{k}={}", v.as_str().unwrap())]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = run_bin(dir, &argv, &[]);
        assert_exit(&argv, &o, 0);
        let mut want = rows_of(&o);
        if answer.get("aggregate").is_some() {
            assert_eq!(name, "status_changes");
            // The page counts the changes per ISO week (starting Monday, UTC) and new status.
            let mut weeks: BTreeMap<(String, String), i64> = BTreeMap::new();
            for r in &want {
                let at = chrono::DateTime::parse_from_rfc3339(r["changed_at"].as_str().unwrap()).unwrap();
                let day = at.with_timezone(&chrono::Utc).date_naive();
                let monday =
                    day - chrono::Duration::days(chrono::Datelike::weekday(&day).num_days_from_monday().into());
                *weeks.entry((monday.to_string(), r["to_status"].as_str().unwrap().to_owned())).or_default() += 1;
            }
            want = weeks
                .into_iter()
                .map(|((w, s), n)| serde_json::json!({"week_start": w, "to_status": s, "changes": n}))
                .collect();
        }
        assert_eq!(answer["rows"].as_array().unwrap(), &want, "{name}: the page's rows are the query's");
    }
}

/// The report of the demo's warehouse, in a real browser: no console error, every section,
/// every chart with drawn marks, a screenshot with ink and the charts' colours; its numbers are
/// the named queries' answers, and the figures shown are those numbers.
#[test]
fn the_demo_report_renders_in_headless_chromium_with_the_queries_numbers() {
    let out = demo_out();
    let dir = out.parent().unwrap();
    // The demo wrote it; the command writes it again, from the same warehouse.
    let o = Bin::new(dir).args(["report"]).out(out).expect(0);
    let summary: Value = report(&o);
    let index = out.join("report/index.html");
    assert_eq!(summary["path"].as_str().unwrap(), index.to_str().unwrap());
    assert_eq!(summary["pages"][0]["health"], "fresh");
    for (id, _) in SECTIONS {
        assert_eq!(summary["pages"][0]["sections"][id], "charted", "{id} has a chart on the demo's data");
    }
    let html = std::fs::read_to_string(&index).unwrap();
    assert_self_contained(&html);

    let page = render(&index, 6000);
    assert!(page.console.is_empty(), "console output: {:#?}", page.console);
    for (id, title) in SECTIONS {
        assert!(page.dom.contains(&format!("data-section=\"{id}\"")), "section {id}");
        assert!(page.dom.contains(title), "{title}");
    }
    let drawn = charts(&page.dom);
    let want = [
        "runs_requests",
        "views_daily",
        "likes_daily",
        "applications_by_status",
        "status_changes_weekly",
        "pending_age",
        "acceptance_by_cohort",
        "acceptance_by_month",
        "action_outcomes",
    ];
    assert_eq!(drawn.keys().map(String::as_str).collect::<Vec<_>>().len(), want.len(), "{:?}", drawn.keys());
    for key in want {
        let chart = drawn.get(key).unwrap_or_else(|| panic!("chart {key}"));
        assert!(chart.contains("<svg"), "{key}: an inline SVG");
        assert!(marks(chart) > 0, "{key}: drawn marks");
    }
    let (inked, palette) = pixels(&page.png);
    assert!(inked > 200_000, "the screenshot is not blank: {inked} inked pixels");
    for c in ["2563EB", "16A34A", "EA580C"] {
        assert!(palette[c] > 500, "the browser drew the charts' marks in #{c}: {palette:?}");
    }

    let data = data_of(&html);
    assert_numbers_match_queries(dir, out, &data, &[]);
    // The figures on the page are those of the block, and read from the queries' rows.
    let shown = shown_figures(&html);
    let figures = data["figures"].as_object().unwrap();
    assert_eq!(shown.len(), figures.len());
    for (k, v) in figures {
        let as_text = match v {
            Value::String(s) => s.clone(),
            v => v.to_string(),
        };
        assert_eq!(shown[k], as_text, "figure {k}");
    }
    let q = &data["queries"];
    let total: i64 = q["applications_by_status"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["applications"].as_i64().unwrap())
        .sum();
    assert_eq!(figures["applications_total"], total);
    assert_eq!(total, 800);
    assert_eq!(figures["last_run_requests"], q["run_health"]["rows"][0]["requests"]);
    let full_weeks: Vec<&Value> =
        q["weekly_trend"]["rows"].as_array().unwrap().iter().filter(|r| r["complete"] == true).collect();
    assert_eq!(figures["views_last_full_week"], full_weeks.last().unwrap()["views"]);
    assert_eq!(figures["status_changes"], 24, "the demo decided 24 applications between its runs");
    assert_eq!(figures["actions_last_applied"], 5);
}

/// An organization with no applications and no content statistics, after its first run: the
/// page shows freshness and health, and a sentence for everything it cannot draw; no chart
/// without marks. A thin one (three days, one run) draws its few points and says what is missing.
#[test]
fn empty_and_thin_organizations_get_sentences_not_broken_charts() {
    let mut cfg = EmulatorConfig::for_tests(30);
    cfg.data.organizations = 1;
    cfg.data.org_applications = 0;
    cfg.org_policies.insert(1, OrgPolicy { no_content: true, ..OrgPolicy::default() });
    let emu = TestEmu::start(cfg);
    let dir = tempfile::tempdir().unwrap();

    let empty = dir.path().join("empty");
    let o = Bin::new(dir.path()).args(["run", "--since-days", "30"]).emu(&emu).out(&empty).key(&org_key(1)).expect(0);
    let run: Value = report(&o);
    let index = empty.join("report/index.html");
    assert_eq!(run["report"]["path"].as_str().unwrap(), index.to_str().unwrap(), "run writes the report");
    assert_eq!(run["report"]["health"], "fresh");
    let html = std::fs::read_to_string(&index).unwrap();
    for sentence in [
        "No full ISO week",
        "No daily views loaded yet",
        "No daily likes loaded yet",
        "No applications loaded yet.",
        "No status change recorded yet",
        "No application is pending",
        "No application has been accepted or rejected yet",
        "No month has an accepted or rejected application yet.",
        "No reviewed corrections have been applied",
    ] {
        assert!(html.contains(sentence), "the empty page says: {sentence}");
    }
    assert_eq!(charts(&html).keys().collect::<Vec<_>>(), ["runs_requests"], "only the runs have something to draw");
    let page = render(&index, 3000);
    assert!(page.console.is_empty(), "{:#?}", page.console);
    for (key, chart) in charts(&page.dom) {
        assert!(marks(&chart) > 0, "{key}");
    }
    assert_numbers_match_queries(dir.path(), &empty, &data_of(&html), &[]);

    // Thin: three days of content, one run, no decisions, no corrections.
    let thin = dir.path().join("thin");
    Bin::new(dir.path()).args(["run", "--since-days", "3"]).emu(&emu).out(&thin).key(FULL_KEY).expect(0);
    let html = std::fs::read_to_string(thin.join("report/index.html")).unwrap();
    let drawn = charts(&html);
    for key in ["views_daily", "likes_daily", "applications_by_status", "acceptance_by_cohort"] {
        assert!(marks(&drawn[key]) > 0, "thin data still draws {key}");
    }
    assert!(!drawn.contains_key("status_changes_weekly") && !drawn.contains_key("action_outcomes"));
    assert!(html.contains("No full ISO week") && html.contains("No status change recorded yet"));
    assert!(html.contains("No reviewed corrections have been applied"));
    let page = render(&thin.join("report/index.html"), 4000);
    assert!(page.console.is_empty(), "{:#?}", page.console);

    // A run that fails leaves the page of the last load, marked failed at the top.
    let args = ["run", "--base-url", "http://127.0.0.1:9", "--max-attempts", "1", "--out", thin.to_str().unwrap()];
    let o = run_bin(dir.path(), &args, &[("CREATOR_API_KEY", FULL_KEY)]);
    assert_ne!(o.status.code(), Some(0), "{}", show(&args, &o));
    let html = std::fs::read_to_string(thin.join("report/index.html")).unwrap();
    assert!(html.contains("data-health=\"failed\""), "the failure shows at the top");
    assert!(html.contains("Failed: `creator-etl run` (started"), "and says what failed");
    assert!(html.contains("failed in its extract stage"), "and where");
    assert!(html.contains("The data below is from the sync that finished"));
    assert!(!html.contains(FULL_KEY), "never the key");
    // `report` on its own later reads the run's stage ledger (`state/stages.json`): still failed,
    // and a monitor's exit code says so.
    let o = Bin::new(dir.path()).args(["report"]).out(&thin).expect(7);
    let summary: Value = report(&o);
    assert_eq!(summary["pages"][0]["health"], "failed");
    let html = std::fs::read_to_string(thin.join("report/index.html")).unwrap();
    assert!(html.contains("Failed: `creator-etl run` (started"), "the record shows");
    assert!(html.contains("127.0.0.1:9"), "with its message");
    // Without the record, the unfinished raw run it left tells as much.
    std::fs::remove_file(thin.join("state/stages.json")).unwrap();
    let o = Bin::new(dir.path()).args(["report"]).out(&thin).expect(7);
    assert_eq!(report::<Value>(&o)["pages"][0]["health"], "failed");
    let html = std::fs::read_to_string(thin.join("report/index.html")).unwrap();
    assert!(html.contains("did not finish its extract"), "the unfinished run shows");
    // A run refused because another process holds the writer's warehouse file: the record and
    // the page name that process by its pid only, never its command line (which may carry
    // anything).
    let writer = thin.join("state/warehouse.duckdb");
    let script = dir.path().join("h.py");
    std::fs::write(
        &script,
        "import duckdb, sys, time\nc = duckdb.connect(sys.argv[2])\nprint('held', flush=True)\ntime.sleep(60)\n",
    )
    .unwrap();
    let mut holder = Command::new(notebook_python())
        .arg(&script)
        .arg("--api-token=TOPSECRET123")
        .arg(&writer)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(holder.stdout.as_mut().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), "held");
    let o = Bin::new(dir.path()).args(["run", "--since-days", "3"]).emu(&emu).out(&thin).key(FULL_KEY).expect(5);
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("TOPSECRET123"),
        "the terminal names the holder in full: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let record = std::fs::read_to_string(thin.join("state/stages.json")).unwrap();
    assert!(record.contains("held by another process (pid "), "{record}");
    let page = std::fs::read_to_string(thin.join("report/index.html")).unwrap();
    assert!(page.contains("held by another process (pid "), "the page shows the refusal");
    for text in [&record, &page] {
        assert!(!text.contains("TOPSECRET123"), "never the holder's command line");
    }
    std::fs::remove_file(thin.join("state/stages.json")).unwrap();
    // While a run holds the output directory, the page says so rather than failed.
    let lock = creator_etl::out::OutDir::new(&thin).lock("20261125T000000Z-test").unwrap();
    let o = Bin::new(dir.path()).args(["report"]).out(&thin).expect(0);
    assert_eq!(report::<Value>(&o)["pages"][0]["health"], "running");
    let html = std::fs::read_to_string(thin.join("report/index.html")).unwrap();
    assert!(html.contains("Running: run 20261125T000000Z-test (pid"), "who runs");
    drop(lock);
    // Once a run completes, the page is fresh again; older than `--stale-after`, stale.
    Bin::new(dir.path()).args(["run", "--since-days", "3"]).emu(&emu).out(&thin).key(FULL_KEY).expect(0);
    let o = Bin::new(dir.path()).args(["report"]).out(&thin).expect(0);
    assert_eq!(report::<Value>(&o)["pages"][0]["health"], "fresh");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let o = Bin::new(dir.path()).args(["report", "--stale-after", "1s"]).out(&thin).expect(7);
    assert_eq!(report::<Value>(&o)["pages"][0]["health"], "stale", "older than --stale-after");
    // Two weeks of content: the full week's change on a partly loaded week before is not shown.
    let two = dir.path().join("two-weeks");
    Bin::new(dir.path()).args(["run", "--since-days", "13"]).emu(&emu).out(&two).key(FULL_KEY).expect(0);
    let html = std::fs::read_to_string(two.join("report/index.html")).unwrap();
    let data = data_of(&html);
    assert!(data["figures"]["views_last_full_week"].is_i64(), "{}", data["figures"]);
    assert_eq!(data["figures"]["views_wow_change"], Value::Null);
    assert!(html.contains("the week before is not fully loaded"));
    // `--no-report` writes none.
    let none = dir.path().join("none");
    Bin::new(dir.path()).args(["run", "--since-days", "3", "--no-report"]).emu(&emu).out(&none).key(FULL_KEY).expect(0);
    assert!(!none.join("report").exists());
    // Bad flags and a missing warehouse exit 2.
    let o = Bin::new(dir.path()).args(["report", "--stale-after", "soon"]).out(&thin).expect(2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("`--stale-after` `soon` is not a duration"));
    let o = Bin::new(dir.path()).args(["report"]).out(&dir.path().join("nothing")).expect(2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("no warehouse at"));
    let o = Bin::new(dir.path()).args(["report", "--org", "acme"]).out(&thin).expect(2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("one organization's warehouse"));
}

/// A fleet whose first syncs all failed has no warehouse to read, but its organizations' status
/// files make an overview of failures; a status file that cannot be read shows as unknown,
/// failed.
#[test]
fn a_fleet_whose_first_syncs_failed_gets_an_overview_of_its_failures() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let file = dir.path().join("fleet.toml");
    std::fs::write(
        &file,
        "[[organization]]\nname = \"acme\"\nkey_env = \"K1\"\n[[organization]]\nname = \"beta\"\nkey_env = \"K2\"\n",
    )
    .unwrap();
    let args = [
        "--base-url",
        "http://127.0.0.1:9",
        "--max-attempts",
        "1",
        "--out",
        out.to_str().unwrap(),
        "fleet",
        "run",
        "--config",
    ];
    let o = Bin::new(dir.path()).args(args).args([file.to_str().unwrap()]).env("K1", "key-1").env("K2", "key-2").run();
    assert_ne!(o.status.code(), Some(0), "{}", show(&args, &o));
    assert!(!out.join("warehouse.duckdb").exists(), "nothing published");
    std::fs::write(out.join("orgs/beta/state/fleet-status.json"), "{\"last_outcome\": ").unwrap();
    let o = Bin::new(dir.path()).args(["report"]).out(&out).expect(7);
    let summary: Value = report(&o);
    let pages = summary["pages"].as_array().unwrap();
    assert_eq!(pages.len(), 2);
    for page in pages {
        assert_eq!(page["health"], "failed", "{page}");
        assert!(page["sections"].as_object().unwrap().values().all(|v| v == "sentences"), "{page}");
    }
    let html = std::fs::read_to_string(out.join("report/index.html")).unwrap();
    assert!(html.contains("2 organizations: 2 failed"));
    let acme = std::fs::read_to_string(out.join("report/org/acme.html")).unwrap();
    assert!(
        acme.contains("Failed: the fleet&#39;s last run of it ended failed")
            && acme.contains("Nothing has been loaded yet.")
    );
    let beta = std::fs::read_to_string(out.join("report/org/beta.html")).unwrap();
    assert!(
        beta.contains("how its last run ended is unknown, its fleet status cannot be read"),
        "a damaged status file"
    );
}

/// A lake of two organizations: an overview whose table lists both and sorts in the browser, a
/// page each with the lake's numbers (as `query --lake --org` answers), and `--org` for one.
#[test]
fn a_lake_of_two_organizations_gets_an_overview_and_a_page_each() {
    let lake = two_org_lake();
    let scratch = tempfile::tempdir().unwrap();
    let out = scratch.path().join("data");
    let o = Bin::new(scratch.path()).args(["report", "--lake", &lake.url]).out(&out).expect(0);
    let summary: Value = report(&o);
    let pages = summary["pages"].as_array().unwrap();
    assert_eq!(pages.iter().map(|p| p["organization"].as_str().unwrap()).collect::<Vec<_>>(), ["demo", "other"]);
    let index = out.join("report/index.html");
    let html = std::fs::read_to_string(&index).unwrap();
    assert_self_contained(&html);
    let data = data_of(&html);
    let orgs = data["organizations"].as_array().unwrap();
    assert_eq!(orgs.len(), 2);
    for (org, own) in [("demo", &lake.demo), ("other", &lake.other)] {
        assert!(html.contains(&format!("<a href=\"org/{org}.html\">{org}</a>")), "the overview links {org}'s page");
        let page_html = std::fs::read_to_string(out.join(format!("report/org/{org}.html"))).unwrap();
        assert_self_contained(&page_html);
        assert!(page_html.contains("<a href=\"../index.html\">All organizations</a>"));
        let page = data_of(&page_html);
        assert_eq!(page["organization"], org);
        assert_numbers_match_queries(scratch.path(), &out, &page, &["--lake", &lake.url, "--org", org]);
        // And the same numbers as the organization's own warehouse gives.
        let own_page = Bin::new(scratch.path()).args(["report"]).out(own).expect(0);
        let own_summary: Value = report(&own_page);
        let own_html = std::fs::read_to_string(own_summary["path"].as_str().unwrap()).unwrap();
        assert_eq!(data_of(&own_html)["queries"], page["queries"], "{org}: lake and warehouse agree");
        let line = orgs.iter().find(|o| o["organization"] == org).unwrap();
        assert_eq!(line["figures"], page["figures"], "the overview's numbers are the page's");
    }
    let page = render(&index, 1500);
    assert!(page.console.is_empty(), "{:#?}", page.console);
    assert!(page.dom.contains("2 organizations:"));
    // Sorting in the browser: the applications column, clicked once (ascending), puts `other`
    // (300) before `demo` (800).
    let order = |dom: &str| -> Vec<String> {
        let body = dom.split("<tbody>").nth(1).unwrap();
        body.split("<a href=\"org/").skip(1).map(|p| p.split_once(".html").unwrap().0.to_owned()).collect()
    };
    assert_eq!(order(&page.dom), ["demo", "other"], "by health, then name");
    let clicked = out.join("report/clicked.html");
    let col = ["organization", "health", "last sync (UTC)", "mode", "requests", "429s", "applications"].len() - 1;
    std::fs::write(
        &clicked,
        html.replace(
            "</main></body>",
            &format!("<script>document.querySelectorAll('table.sortable th')[{col}].click();</script></main></body>"),
        ),
    )
    .unwrap();
    let sorted = render(&clicked, 1500);
    assert!(sorted.console.is_empty(), "{:#?}", sorted.console);
    assert_eq!(order(&sorted.dom), ["other", "demo"]);
    assert!(sorted.dom.contains("data-dir=\"asc\""));
    // The last sync's column sorts by time: twice (descending) puts `other`, synced after
    // `demo`, first.
    let col = ["organization", "health", "last sync (UTC)"].len() - 1;
    std::fs::write(
        &clicked,
        html.replace(
            "</main></body>",
            &format!(
                "<script>var th = document.querySelectorAll('table.sortable th')[{col}]; th.click(); th.click();</script></main></body>"
            ),
        ),
    )
    .unwrap();
    let sorted = render(&clicked, 1500);
    assert!(sorted.console.is_empty(), "{:#?}", sorted.console);
    assert_eq!(order(&sorted.dom), ["other", "demo"]);
    std::fs::remove_file(&clicked).unwrap();

    // `--org` writes that organization's page alone, as the index; the overview's pages go.
    let o = Bin::new(scratch.path()).args(["report", "--lake", &lake.url, "--org", "other"]).out(&out).expect(0);
    let summary: Value = report(&o);
    assert_eq!(summary["pages"].as_array().unwrap().len(), 1);
    assert_eq!(data_of(&std::fs::read_to_string(&index).unwrap())["organization"], "other");
    assert!(!out.join("report/org/demo.html").exists());
    let o = Bin::new(scratch.path()).args(["report", "--lake", &lake.url, "--org", "nobody"]).out(&out).expect(2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("holds no rows of it"), "{}", show(&[], &o));
}

/// The pages' file names and contents under `OUT/report/org/`.
fn org_pages(out: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(out.join("report/org"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap()))
        .collect()
}

/// `fleet run` writes the report (issue 35): every page at first; on a run where nothing
/// changed, the overview anew and every page kept; the page of an organization whose data
/// changed, or whose sync failed, made again; `--no-report`, nothing. A kept page tells its age
/// in the browser, and once older than the stale limit, that its health is as of then. Shards
/// each write their own, and `report --lake` is the overview of all of them.
#[test]
fn fleet_run_writes_the_pages_whose_data_or_health_changed() {
    use creator_etl::emulator::numbered_org;
    let emu = crate::fleet::fleet_emulator(3, 200, &[]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let file = crate::fleet::fleet_file(dir.path(), &["one", "two", "three"], "");
    let config = file.to_str().unwrap().to_owned();
    let run = |extra: &[&str], keys: &[(String, String)]| {
        Bin::new(dir.path())
            .emu(&emu)
            .out(&out)
            .args(["fleet", "run", "--config", &config])
            .args(extra)
            .envs(keys.iter().cloned())
            .run()
    };
    let keys = crate::fleet::key_env(3);
    let note = |o: &std::process::Output| -> (u64, u64) {
        let r: Value = report(o);
        (r["report"]["pages_made"].as_u64().unwrap(), r["report"]["pages_kept"].as_u64().unwrap())
    };
    let generated =
        || data_of(&std::fs::read_to_string(out.join("report/index.html")).unwrap())["generated_at"].clone();

    let o = run(&[], &keys);
    assert_exit(&[], &o, 0);
    assert_eq!(note(&o), (3, 0), "every page at first");
    let first = org_pages(&out);
    assert_eq!(first.keys().collect::<Vec<_>>(), ["one.html", "three.html", "two.html"]);
    // The pages were made from one query per named query over every organization, split by
    // organization: each page's rows are what `query --org` answers of its organization alone.
    for org in ["one", "two", "three"] {
        let page = data_of(&first[&format!("{org}.html")]);
        assert_numbers_match_queries(dir.path(), &out, &page, &["--org", org]);
    }
    let overview = generated();

    // Nothing changed: every page kept, the overview made anew, every organization fresh.
    let o = run(&[], &keys);
    assert_exit(&[], &o, 0);
    assert_eq!(note(&o), (0, 3), "{}", show(&[], &o));
    assert_eq!(org_pages(&out), first, "kept pages are untouched");
    assert_ne!(generated(), overview, "the overview is made at every run");
    let html = std::fs::read_to_string(out.join("report/index.html")).unwrap();
    assert!(html.contains("3 organizations: 0 failed"), "every organization's health as of now");

    // One organization's data changed: its page alone is made again, with the change.
    let moved = emu.state.applications(numbered_org(2)).iter().find(|a| a.status.as_str() == "accepted").unwrap().id;
    emu.state.set_application_status(moved, creator_etl::api::models::ApplicationStatus::Rejected);
    let o = run(&[], &keys);
    assert_exit(&[], &o, 0);
    assert_eq!(note(&o), (1, 2));
    let third = org_pages(&out);
    assert_ne!(third["two.html"], first["two.html"]);
    assert_eq!((&third["one.html"], &third["three.html"]), (&first["one.html"], &first["three.html"]));

    // One organization's key is refused: its health changes (failed), so its page is made again
    // and says so; the overview counts it.
    let mut refused = keys.clone();
    refused[2].1 = "emu-not-a-key".into();
    let o = run(&[], &refused);
    assert_exit(&[], &o, creator_etl::exit::SOME_FAILED as i32);
    let fourth = org_pages(&out);
    let remade: Vec<&str> = fourth.keys().filter(|f| fourth[*f] != third[*f]).map(String::as_str).collect();
    // `two`'s page too when its last run's notes changed (the run that found its change may
    // have warned; this one did not): a kept page never shows another run's notes.
    assert!(remade.contains(&"three.html") && !remade.contains(&"one.html"), "remade: {remade:?}");
    assert_eq!(note(&o), (remade.len() as u64, 3 - remade.len() as u64));
    assert!(fourth["three.html"].contains("data-health=\"failed\""), "the failed organization's page says so");
    assert_eq!(fourth["one.html"], first["one.html"]);
    assert!(std::fs::read_to_string(out.join("report/index.html")).unwrap().contains("3 organizations: 1 failed"));

    // `--no-report`: no report, no file touched.
    let before = std::fs::read_to_string(out.join("report/index.html")).unwrap();
    let o = run(&["--no-report"], &keys);
    assert_exit(&[], &o, 0);
    assert!(report::<Value>(&o)["report"].is_null());
    assert_eq!(std::fs::read_to_string(out.join("report/index.html")).unwrap(), before);

    // `report` makes every page again, each named query asked once for the three organizations
    // and split by organization (`two` has a status change by now): each page's rows are what
    // `query --org` answers of its organization alone.
    let o = Bin::new(dir.path()).args(["report"]).out(&out).run();
    assert!(matches!(o.status.code(), Some(0 | 7)), "{}", show(&[], &o));
    for org in ["one", "two", "three"] {
        let page = data_of(&std::fs::read_to_string(out.join(format!("report/org/{org}.html"))).unwrap());
        assert_numbers_match_queries(dir.path(), &out, &page, &["--org", org]);
        let changes = page["queries"]["status_changes"]["rows"].as_array().unwrap().len();
        assert_eq!(changes > 0, org == "two", "{org}: {changes} weeks of status changes");
    }

    // A first Ctrl-C or SIGTERM while `fleet run` writes its report stops it before its next
    // page: the overview stays the last report's, and the page list keeps the last report's
    // pages not reached (here every one), so the next report makes only the pages not made.
    let overview = std::fs::read_to_string(out.join("report/index.html")).unwrap();
    let listed = std::fs::read_to_string(out.join("report/pages.json")).unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    stop.cancel();
    let stopped = creator_etl::report::ReportConfig::after_fleet_run(&creator_etl::out::OutDir::new(&out), stop);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let e = rt.block_on(creator_etl::report::write(stopped)).unwrap_err();
    assert_eq!(e.exit_code(), creator_etl::exit::INTERRUPTED, "{e}");
    assert!(e.to_string().contains("the next report makes the pages not made yet"), "{e}");
    assert_eq!(std::fs::read_to_string(out.join("report/pages.json")).unwrap(), listed);
    assert_eq!(std::fs::read_to_string(out.join("report/index.html")).unwrap(), overview);

    // A kept page's age, as the browser tells it: made just now, nothing more; made three days
    // ago (past the 26 h stale limit), its health is as of then.
    let page = out.join("report/org/one.html");
    let fresh = render(&page, 600);
    assert!(fresh.console.is_empty(), "{:#?}", fresh.console);
    // The line as the script filled it (the script's own text is in the DOM too).
    let line = |dom: &str| {
        dom.split("id=\"page-age\"").nth(1).unwrap().split_once('>').unwrap().1.split("</p>").next().unwrap().to_owned()
    };
    let told = line(&fresh.dom);
    assert!(told.starts_with("This page was made ") && told.ends_with(" ago.") && !told.contains("health"), "{told}");
    let made = data_of(&first["one.html"])["generated_at"].as_str().unwrap().to_owned();
    let at = |html: &str| html.split("data-generated=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
    assert_eq!(
        chrono::DateTime::parse_from_rfc3339(&at(&first["one.html"])).unwrap().timestamp(),
        chrono::DateTime::parse_from_rfc3339(&made).unwrap().timestamp()
    );
    let old = (chrono::Utc::now() - chrono::Duration::hours(75)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let aged = dir.path().join("aged.html");
    let made_attr = format!("data-generated=\"{}\"", at(&first["one.html"]));
    std::fs::write(&aged, first["one.html"].replace(&made_attr, &format!("data-generated=\"{old}\""))).unwrap();
    let aged = render(&aged, 600);
    assert!(aged.console.is_empty(), "{:#?}", aged.console);
    assert_eq!(
        line(&aged.dom),
        "This page was made 3 days 3 h ago. Its health is as of when it was made: the overview says how the organization stands now."
    );
    assert!(aged.dom.contains("class=\"meta age old\""));
    // Made just now of a last sync 40 h old: its health is as of then too.
    let synced = first["one.html"].split("data-last-synced=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
    assert!(!synced.is_empty(), "the page knows its last sync");
    let long_ago =
        (chrono::Utc::now() - chrono::Duration::hours(40)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let unsynced = dir.path().join("unsynced.html");
    std::fs::write(
        &unsynced,
        first["one.html"]
            .replace(&format!("data-last-synced=\"{synced}\""), &format!("data-last-synced=\"{long_ago}\"")),
    )
    .unwrap();
    let told = line(&render(&unsynced, 600).dom);
    assert!(told.contains("The last sync it shows finished 40 h 0 min ago, more than the stale limit. Its health is as of when it was made"), "{told}");

    // Shards each write their own report, of their own organizations; `report --lake` gives the
    // overview of every shard.
    let lake = format!("file://{}", dir.path().join("lake").display());
    let mut names = BTreeMap::new();
    // Of three shards, these two hold every organization (`one` and `three`, and `two`).
    for shard in ["0/3", "1/3"] {
        let shard_out = dir.path().join(format!("shard-{}", &shard[..1]));
        let args = ["fleet", "run", "--config", &config, "--shard", shard, "--lake", &lake];
        let o = Bin::new(dir.path()).emu(&emu).out(&shard_out).args(args).envs(keys.iter().cloned()).run();
        assert_exit(&args, &o, 0);
        let listed: Vec<String> = by_org(&o).into_iter().collect();
        // One organization's report is its page, as `index.html`.
        let pages: Vec<String> = match shard_out.join("report/org").is_dir() {
            true => org_pages(&shard_out).keys().map(|f| f.trim_end_matches(".html").to_owned()).collect(),
            false => {
                let page = data_of(&std::fs::read_to_string(shard_out.join("report/index.html")).unwrap());
                vec![page["organization"].as_str().unwrap().to_owned()]
            }
        };
        assert_eq!(pages, listed, "shard {shard}'s report has its own organizations");
        names.insert(shard, listed);
    }
    assert_eq!(names.values().map(Vec::len).sum::<usize>(), 3);
    let lake_out = dir.path().join("lake-report");
    let o = Bin::new(dir.path()).args(["report", "--lake", &lake]).out(&lake_out).expect(0);
    let pages: Vec<String> = report::<Value>(&o)["pages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["organization"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(pages, ["one", "three", "two"]);
}

/// The organizations of a `fleet run`'s report, sorted.
fn by_org(o: &std::process::Output) -> std::collections::BTreeSet<String> {
    let r: Value = report(o);
    r["organizations"].as_array().unwrap().iter().map(|o| o["name"].as_str().unwrap().to_owned()).collect()
}
