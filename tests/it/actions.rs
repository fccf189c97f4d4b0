//! `creator-etl actions`: a mixed reviewed file against the emulator, reruns, kills mid-apply,
//! payout pacing, invalid files and a read-only key. Results are read back from the emulator's
//! write log, the results CSV and the warehouse's journal.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use creator_etl::api::models::SaleStatus;
use creator_etl::emulator::{EmulatorConfig, PayoutKind, StoredPayout, MAIN_ORG, OTHER_ORG};

use crate::util::*;

const HEADER: &str =
    "action,approved,sale_id,creator_payout_uuid,total,commission,customer_email,status,reviewer,note,row_id";

fn payouts(emu: &TestEmu, kind: PayoutKind, org: u32) -> Vec<StoredPayout> {
    emu.state.payouts().into_iter().filter(|p| p.kind == kind && p.org == org).collect()
}

fn sale_where(emu: &TestEmu, pred: impl Fn(&creator_etl::emulator::StoredSale) -> bool) -> i64 {
    emu.state.sales().into_iter().find(|s| pred(s)).expect("the emulator has such a sale").id
}

fn write_csv(dir: &Path, name: &str, rows: &[String]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("{HEADER}\n{}\n", rows.join("\n"))).unwrap();
    path
}

fn actions(emu: &TestEmu, out: &Path, verb: &str, file: &Path, extra: &[&str], key: &str) -> std::process::Output {
    Bin::new(out.parent().unwrap())
        .args(["actions", verb, file.to_str().unwrap()])
        .emu(emu)
        .out(out)
        .args(extra)
        .key(key)
        .run()
}

/// `line → (outcome, http_status, message, result_commission)` from a results CSV.
fn results(path: &Path) -> HashMap<u64, (String, String, String, String)> {
    let mut r = csv::Reader::from_path(path).unwrap();
    let h = r.headers().unwrap().clone();
    let col = |name: &str| h.iter().position(|c| c == name).unwrap_or_else(|| panic!("no `{name}` in {h:?}"));
    let (line, outcome, status, message, commission) =
        (col("line"), col("outcome"), col("http_status"), col("message"), col("result_commission"));
    r.records()
        .map(|rec| {
            let rec = rec.unwrap();
            (
                rec[line].parse().unwrap(),
                (rec[outcome].to_owned(), rec[status].to_owned(), rec[message].to_owned(), rec[commission].to_owned()),
            )
        })
        .collect()
}

fn writes_to(emu: &TestEmu, target: &str) -> Vec<creator_etl::emulator::WriteRecord> {
    emu.state.writes().into_iter().filter(|w| w.target == target).collect()
}

/// The mixed file: approved and unapproved rows, every failure kind, an already-paid
/// payout and a total without commission. Then the same file again, and a reordered file with
/// a new row merged in.
#[test]
fn a_mixed_file_applies_each_approved_row_exactly_once() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(20));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let sales = updatable_sales(&emu);
    let (s1, s2, s3, s4) = (sales[0], sales[1], sales[2], sales[3]);
    let storefront = sale_where(&emu, |s| s.org == MAIN_ORG && !s.updatable());
    let cancelled = sale_where(&emu, |s| s.org == MAIN_ORG && s.status == SaleStatus::Cancelled);
    let foreign = sale_where(&emu, |s| s.org == OTHER_ORG);
    let due = payouts(&emu, PayoutKind::DueCredit, MAIN_ORG);
    let paid = &payouts(&emu, PayoutKind::PaidExternally, MAIN_ORG)[0];
    let zero = &payouts(&emu, PayoutKind::ZeroCredit, MAIN_ORG)[0];
    let pct = emu.state.sales().iter().find(|s| s.id == s1).unwrap().commission_pct;
    let rows = vec![
        format!("update_sale,yes,{s1},,5000,,,,ann,\"total fix, commission follows\",r1"), // line 2
        format!("update_sale,yes,{s2},,,123,NULL,paid,ann,,r2"),                           // line 3
        format!("update_sale,no,{s3},,1,,,,,,r3"),                                         // line 4
        format!("update_sale,yes,{storefront},,100,,,,,,r4"),                              // line 5
        format!("update_sale,yes,{cancelled},,,,,paid,,,r5"),                              // line 6
        format!("update_sale,yes,{foreign},,100,,,,,,r6"),                                 // line 7
        format!("mark_payout,yes,,{},,,,,,,r7", due[0].uuid),                              // line 8
        format!("mark_payout,1,,{},,,,,,,r8", paid.uuid),                                  // line 9
        format!("mark_payout,true,,{},,,,,,,r9", zero.uuid),                               // line 10
        format!("mark_payout,yes,,{},,,,,,,r10", due[1].uuid.to_uppercase()),              // line 11
        // The same change pasted again: decided once, by line 2.
        format!("update_sale,yes,{s1},,5000,,,,bob,same change again,r11"), // line 12
    ];
    let file = write_csv(dir.path(), "reviewed.csv", &rows);

    // The plan sends nothing.
    let o = actions(&emu, &out, "plan", &file, &[], FULL_KEY);
    assert_exit(&[], &o, 0);
    assert_eq!(emu.state.requests().len(), 0, "plan sends nothing");
    let plan = String::from_utf8_lossy(&o.stdout);
    assert!(plan.contains(&format!("sale {s1}")) && plan.contains("commission recalculated by the service"), "{plan}");
    assert!(plan.contains("skip (not approved)"), "{plan}");
    assert!(plan.contains("11 rows; 9 to send"), "{plan}");
    assert!(plan.contains("skip (duplicate of line 2)"), "{plan}");

    let o = actions(&emu, &out, "apply", &file, &[], FULL_KEY);
    assert_exit(&[], &o, 3);
    let rep: serde_json::Value = report(&o);
    let got = results(Path::new(rep["results_csv"].as_str().unwrap()));
    let outcome = |line: u64| got[&line].0.as_str();
    let expect = [
        (2, "applied"),
        (3, "applied"),
        (4, "skipped_not_approved"),
        (5, "failed"),
        (6, "failed"),
        (7, "failed"),
        (8, "applied"),
        (9, "noop"),
        (10, "failed"),
        (11, "applied"),
        (12, "skipped_duplicate"),
    ];
    for (line, want) in expect {
        assert_eq!(outcome(line), want, "line {line}: {:?}", got[&line]);
    }
    assert_eq!(got[&5].1, "422");
    assert!(got[&5].2.contains("Only sales created via the public API"), "{:?}", got[&5]);
    assert!(got[&6].2.contains("Cancelled sales cannot be updated"), "{:?}", got[&6]);
    assert_eq!((got[&7].1.as_str(), got[&7].2.as_str()), ("404", "Sale not found"));
    assert!(got[&9].2.contains("current status is paid_externally"), "{:?}", got[&9]);
    assert!(got[&10].2.contains("Only credit payouts"), "{:?}", got[&10]);

    // The service recalculated the commission, and the results show it.
    let recalculated = (5000 * pct + 50) / 100;
    assert_eq!(got[&2].3, recalculated.to_string());
    let stored = emu.state.sales().into_iter().find(|s| s.id == s1).unwrap();
    assert_eq!((stored.total, stored.commission), (5000, recalculated));
    let stored = emu.state.sales().into_iter().find(|s| s.id == s2).unwrap();
    assert_eq!((stored.commission, stored.customer_email, stored.status), (123, None, SaleStatus::Paid));

    // The write log: exactly one update per approved updatable sale, none for the unapproved.
    for s in [s1, s2] {
        let w = writes_to(&emu, &s.to_string());
        assert_eq!(w.len(), 1, "sale {s}: {w:?}");
        assert_eq!(w[0].outcome, "updated");
    }
    assert!(writes_to(&emu, &s1.to_string())[0].body.get("commission").is_none(), "only the cells filled are sent");
    assert!(writes_to(&emu, &s3.to_string()).is_empty(), "unapproved rows are never sent");
    let marks: Vec<_> = emu.state.writes().into_iter().filter(|w| w.operation == "mark_credit_payout").collect();
    assert_eq!(marks.len(), 4);
    // Payout marks are at least 2 s apart at the emulator, although the client's spacing is 0.
    for pair in marks.windows(2) {
        let gap = pair[1].at_ms - pair[0].at_ms;
        assert!(gap >= 2000.0, "payout marks {gap:.0} ms apart");
    }
    assert!(emu.state.violations().is_empty(), "{:?}", emu.state.violations());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("applied 4") && stderr.contains("failed 4"), "summary on stderr:\n{stderr}");
    assert!(!format!("{stderr}{}", String::from_utf8_lossy(&o.stdout)).contains(FULL_KEY), "no key in output");

    // The journal and the results are in the warehouse.
    let c = db(&out);
    let n: i64 = c.query_row("SELECT count(*) FROM action_results", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 11);
    let n: i64 = c
        .query_row("SELECT count(*) FROM action_journal WHERE outcome IN ('applied', 'noop')", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 5);
    drop(c);

    // The same file again: the rows that failed for good (404, 422) are held, not sent again.
    let before = emu.state.requests().len();
    let o = actions(&emu, &out, "apply", &file, &[], FULL_KEY);
    assert_exit(&[], &o, 3);
    assert_eq!(emu.state.requests().len(), before, "a row that failed for good is not sent again");
    let got = results(Path::new(report::<serde_json::Value>(&o)["results_csv"].as_str().unwrap()));
    for line in [2, 3, 8, 9, 11] {
        assert_eq!(got[&line].0, "skipped_already_applied", "line {line}");
    }
    assert_eq!(got[&12].0, "skipped_duplicate");
    for line in [5, 6, 7, 10] {
        assert_eq!(got[&line].0, "failed", "line {line}");
        assert!(
            got[&line].2.contains("failed before in run") && got[&line].2.contains("--retry-failed"),
            "{:?}",
            got[&line]
        );
    }
    assert!(got[&7].2.contains("404 Sale not found"), "the service's message is kept: {:?}", got[&7]);
    let o = actions(&emu, &out, "plan", &file, &[], FULL_KEY);
    let plan = String::from_utf8_lossy(&o.stdout);
    assert!(plan.contains("hold (failed before in run") && plan.contains("11 rows; 0 to send"), "{plan}");
    // `--retry-failed` sends them again, and only them.
    let o = actions(&emu, &out, "apply", &file, &["--retry-failed"], FULL_KEY);
    assert_exit(&[], &o, 3);
    assert_eq!(emu.state.requests().len() - before, 4, "only the 4 failed rows are sent again");
    assert!(
        emu.state.violations().is_empty(),
        "back-to-back applies keep the mark spacing: {:?}",
        emu.state.violations()
    );

    // Reordered, failures dropped, a new row merged in: only the new row is sent.
    let merged = vec![
        rows[9].clone(),
        format!("update_sale,yes,{s4},,777,,,,,,new"),
        rows[1].clone(),
        rows[0].clone(),
        rows[7].clone(),
        rows[6].clone(),
    ];
    let file2 = write_csv(dir.path(), "merged.csv", &merged);
    let before = emu.state.requests().len();
    let o = actions(&emu, &out, "apply", &file2, &[], FULL_KEY);
    assert_exit(&[], &o, 0);
    assert_eq!(emu.state.requests().len() - before, 1, "only the new row is sent");
    let got = results(Path::new(report::<serde_json::Value>(&o)["results_csv"].as_str().unwrap()));
    assert_eq!(got[&3].0, "applied");
    // And once more: nothing at all.
    let before = emu.state.requests().len();
    let o = actions(&emu, &out, "apply", &file2, &[], FULL_KEY);
    assert_exit(&[], &o, 0);
    assert_eq!(emu.state.requests().len(), before, "a rerun sends nothing");
    let o = actions(&emu, &out, "plan", &file2, &[], FULL_KEY);
    assert!(String::from_utf8_lossy(&o.stdout).contains("6 rows; 0 to send"), "{}", show(&[], &o));
}

/// Any invalid row: nothing is sent, not even by `run`, and every problem is listed.
#[test]
fn an_invalid_file_sends_nothing_and_exits_2() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(20));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let good = updatable_sales(&emu)[0];
    let file = write_csv(
        dir.path(),
        "bad.csv",
        &[
            format!("update_sale,yes,{good},,100,,,,,,"),
            "update_sale,yes,7002,,12.50,,,,,,".into(),
            "refund,yes,,,,,,,,,".into(),
        ],
    );
    for verb in ["plan", "apply"] {
        let o = actions(&emu, &out, verb, &file, &[], FULL_KEY);
        assert_exit(&[], &o, 2);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(stderr.contains("2 problem(s); nothing was sent"), "{stderr}");
        assert!(stderr.contains("line 3, column 5 (`total`): `12.50` is not in cents"), "{stderr}");
        assert!(stderr.contains("line 4, column 1 (`action`): unknown action `refund`"), "{stderr}");
    }
    // Without a key too: both problems are reported at once.
    let args =
        ["actions", "apply", file.to_str().unwrap(), "--base-url", &emu.base_url, "--out", out.to_str().unwrap()];
    let o = run_bin(dir.path(), &args, &[]);
    assert_exit(&args, &o, 2);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("no API key") && stderr.contains("`12.50` is not in cents"), "{stderr}");
    let args =
        ["run", "--base-url", &emu.base_url, "--out", out.to_str().unwrap(), "--actions", file.to_str().unwrap()];
    let o = run_bin(dir.path(), &args, &[("CREATOR_API_KEY", FULL_KEY)]);
    assert_exit(&args, &o, 2);
    assert_eq!(emu.state.requests().len(), 0, "an invalid file sends zero requests");
    // --max-rows refuses a larger file, sending nothing.
    let file = write_csv(
        dir.path(),
        "two.csv",
        &[format!("update_sale,yes,{good},,100,,,,,,"), "update_sale,yes,7002,,5,,,,,,".into()],
    );
    let o = actions(&emu, &out, "apply", &file, &["--max-rows", "1"], FULL_KEY);
    assert_exit(&[], &o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("2 rows would be sent, more than `--max-rows 1`"));
    assert_eq!(emu.state.requests().len(), 0);
}

/// A read-only key: the first write gets 403 and nothing more is sent; `--only` filters.
#[test]
fn a_read_only_key_stops_at_the_first_403() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(20));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let s = updatable_sales(&emu);
    let due = payouts(&emu, PayoutKind::DueCredit, MAIN_ORG);
    let file = write_csv(
        dir.path(),
        "r.csv",
        &[
            format!("update_sale,yes,{},,100,,,,,,", s[0]),
            format!("mark_payout,yes,,{},,,,,,,", due[0].uuid),
            format!("update_sale,yes,{},,200,,,,,,", s[1]),
        ],
    );
    let o = actions(&emu, &out, "apply", &file, &[], READ_ONLY_KEY);
    assert_exit(&[], &o, 4);
    assert_eq!(emu.state.requests().len(), 1, "no request after the 403");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("403") && stderr.contains("read-only"), "{stderr}");
    let got = results(Path::new(report::<serde_json::Value>(&o)["results_csv"].as_str().unwrap()));
    assert_eq!((got[&2].0.as_str(), got[&2].1.as_str()), ("failed", "403"));
    assert_eq!(got[&3].0, "not_sent");
    assert_eq!(got[&4].0, "not_sent");

    // With the full key and `--only mark_payout`, only the payout is sent.
    let o = actions(&emu, &out, "apply", &file, &["--only", "mark_payout"], FULL_KEY);
    assert_exit(&[], &o, 0);
    let got = results(Path::new(report::<serde_json::Value>(&o)["results_csv"].as_str().unwrap()));
    assert_eq!(got[&2].0, "skipped_not_selected");
    assert_eq!(got[&3].0, "applied");
}

/// SIGKILL at a random point of an apply, then a rerun: every approved row's change is in place,
/// and each was sent once, except at most the one in flight when the process died (resent with
/// the same body, which is idempotent).
#[test]
fn a_killed_apply_reruns_to_each_row_exactly_once() {
    let mut cfg = EmulatorConfig::for_tests(20);
    cfg.data.sales = 40;
    cfg.latency = Duration::from_millis(40);
    let emu = TestEmu::start(cfg);
    let sales = updatable_sales(&emu);
    let mut killed_mid_run = 0;
    for round in 0..3u64 {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let rows: Vec<String> = sales
            .iter()
            .take(30)
            .map(|s| format!("update_sale,yes,{s},,{},,,,,,", 1000 + round * 100 + (*s as u64 % 97)))
            .collect();
        let file = write_csv(dir.path(), "k.csv", &rows);
        let before: HashMap<String, usize> =
            sales.iter().map(|s| (s.to_string(), writes_to(&emu, &s.to_string()).len())).collect();
        let mut child = spawn_bin(&[
            "actions",
            "apply",
            file.to_str().unwrap(),
            "--base-url",
            &emu.base_url,
            "--out",
            out.to_str().unwrap(),
        ]);
        // Kill at a random point after the first write: how long the process takes to get
        // there depends on the machine's load, so waiting a fixed time can miss the apply.
        let sent =
            || sales.iter().map(|s| writes_to(&emu, &s.to_string()).len() - before[&s.to_string()]).sum::<usize>();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while sent() == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(fastrand::u64(0..600)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let sent_before_kill: usize =
            sales.iter().map(|s| writes_to(&emu, &s.to_string()).len() - before[&s.to_string()]).sum();
        if sent_before_kill > 0 && sent_before_kill < 30 {
            killed_mid_run += 1;
        }
        let o = actions(&emu, &out, "apply", &file, &[], FULL_KEY);
        assert_exit(&[], &o, 0);
        let mut twice = 0;
        for (s, row) in sales.iter().take(30).zip(&rows) {
            let n = writes_to(&emu, &s.to_string()).len() - before[&s.to_string()];
            assert!((1..=2).contains(&n), "round {round}: sale {s} written {n} times");
            twice += usize::from(n == 2);
            let want: i64 = row.split(',').nth(4).unwrap().parse().unwrap();
            assert_eq!(emu.state.sales().iter().find(|x| x.id == *s).unwrap().total, want);
        }
        assert!(twice <= 1, "round {round}: only the row in flight at the kill is sent again ({twice})");
        // A third apply sends nothing.
        let n = emu.state.requests().len();
        let o = actions(&emu, &out, "apply", &file, &[], FULL_KEY);
        assert_exit(&[], &o, 0);
        assert_eq!(emu.state.requests().len(), n, "round {round}: converged");
    }
    assert!(killed_mid_run >= 1, "at least one kill landed mid-apply");
}

/// The two crash windows of a payout mark: after the intent (nothing sent) and after the send
/// (answer lost). Either way the rerun leaves exactly one successful mark.
#[test]
fn a_crash_around_a_payout_mark_is_resolved_on_rerun() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(20));
    let due = payouts(&emu, PayoutKind::DueCredit, MAIN_ORG);
    for (i, point) in ["actions-after-intent", "actions-before-outcome"].into_iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let uuid = &due[i].uuid;
        let file = write_csv(dir.path(), "p.csv", &[format!("mark_payout,yes,,{uuid},,,,,,,")]);
        let args =
            ["actions", "apply", file.to_str().unwrap(), "--base-url", &emu.base_url, "--out", out.to_str().unwrap()];
        let o = run_bin(dir.path(), &args, &[("CREATOR_API_KEY", FULL_KEY), ("CREATOR_ETL_CRASH_AT", point)]);
        assert!(!o.status.success(), "{point}: crashed\n{}", show(&args, &o));
        let o = actions(&emu, &out, "plan", &file, &[], FULL_KEY);
        assert!(String::from_utf8_lossy(&o.stdout).contains("send again"), "{point}: {}", show(&[], &o));
        let o = actions(&emu, &out, "apply", &file, &[], FULL_KEY);
        assert_exit(&[], &o, 0);
        let marks = writes_to(&emu, uuid);
        assert_eq!(marks.iter().filter(|w| w.outcome == "marked").count(), 1, "{point}: {marks:?}");
        let expected_sends = if point == "actions-after-intent" { 1 } else { 2 };
        assert_eq!(marks.len(), expected_sends, "{point}: {marks:?}");
        let rep: serde_json::Value = report(&o);
        let got = results(Path::new(rep["results_csv"].as_str().unwrap()));
        // The re-send after our own lost attempt is answered "already paid": our attempt took effect.
        assert_eq!(got[&2].0, "applied", "{point}: {:?}", got[&2]);
        if expected_sends == 2 {
            assert!(got[&2].2.contains("took effect"), "{point}: {:?}", got[&2]);
        }
        // The interrupted intent is closed: an apply of another file does not list it.
        let other = write_csv(dir.path(), "other.csv", &[format!("mark_payout,no,,{uuid},,,,,,,")]);
        let o = actions(&emu, &out, "apply", &other, &[], FULL_KEY);
        assert_exit(&[], &o, 0);
        assert_eq!(report::<serde_json::Value>(&o)["unresolved_intents"], serde_json::json!([]), "{point}");
        let c = db(&out);
        let open: i64 =
            c.query_row("SELECT count(*) FROM action_journal WHERE outcome = 'pending'", [], |r| r.get(0)).unwrap();
        assert_eq!(open, 0, "{point}: the intent was superseded");
    }
}

/// A reviewed file of `rows`, parsed as `actions apply` would.
fn reviewed(rows: &[String]) -> creator_etl::action::Reviewed {
    creator_etl::action::reviewed::parse(format!("{HEADER}\n{}\n", rows.join("\n")).as_bytes()).unwrap()
}

/// Half of all write answers are lost (the write applied, then the connection dropped, a 502, or
/// the 200's body cut short). Every approved row still takes effect once and is reported as
/// taking effect; rows the service refuses are `failed`, never `in_doubt`.
#[test]
fn lost_answers_at_a_high_rate_still_apply_each_row_once() {
    use creator_etl::action::{journal::Scope, ActionConfig, RowOutcome};
    use creator_etl::emulator::Fault;

    let mut cfg = EmulatorConfig::for_tests(20);
    cfg.data.sales = 40;
    cfg.faults.rate = 0.5;
    cfg.faults.kinds = vec![Fault::LostAnswer];
    let emu = TestEmu::start(cfg);
    let dir = tempfile::tempdir().unwrap();
    let sales = updatable_sales(&emu);
    let due = payouts(&emu, PayoutKind::DueCredit, MAIN_ORG);
    let foreign = sale_where(&emu, |s| s.org == OTHER_ORG);
    let storefront = sale_where(&emu, |s| s.org == MAIN_ORG && !s.updatable());
    let mut rows: Vec<String> =
        sales.iter().take(12).map(|s| format!("update_sale,yes,{s},,{},,,,,,", 2000 + s)).collect();
    assert!(sales.len() >= 16, "enough updatable sales: {}", sales.len());
    let cancelled: Vec<i64> = sales[12..16].to_vec();
    rows.extend(cancelled.iter().map(|s| format!("update_sale,yes,{s},,,,,cancelled,,,")));
    rows.extend(due.iter().take(4).map(|p| format!("mark_payout,yes,,{},,,,,,,", p.uuid)));
    rows.push(format!("update_sale,yes,{foreign},,100,,,,,,"));
    rows.push(format!("update_sale,yes,{storefront},,100,,,,,,"));
    let file = reviewed(&rows);
    let client = client_with(&emu.base_url, FULL_KEY, fast(), 14);
    let config = ActionConfig {
        out: creator_etl::out::OutDir::new(dir.path().join("out")),
        file: dir.path().join("reviewed.csv"),
        max_rows: None,
        only: None,
        retry_failed: false,
        scope: Scope::new(&emu.base_url, Some("key-test".into())),
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let report = rt.block_on(creator_etl::action::apply(&config, &file, &client, stop.clone())).unwrap();

    let lost = emu.state.requests().iter().filter(|r| r.fault == Some(Fault::LostAnswer)).count();
    assert!(lost >= 5, "the fault was exercised: {lost} answers lost");
    let n = report.rows.len();
    for (i, r) in report.rows.iter().enumerate() {
        let want = if i >= n - 2 { RowOutcome::Failed } else { RowOutcome::Applied };
        assert_eq!(r.outcome, want, "line {}: {r:?}", r.line);
    }
    for s in sales.iter().take(12) {
        let stored = emu.state.sales().into_iter().find(|x| x.id == *s).unwrap();
        assert_eq!(stored.total, 2000 + s, "sale {s}");
        let updated: Vec<_> = writes_to(&emu, &s.to_string()).into_iter().filter(|w| w.outcome == "updated").collect();
        assert!(updated.iter().all(|w| w.body == updated[0].body), "re-sends carry the same body");
    }
    for s in &cancelled {
        let stored = emu.state.sales().into_iter().find(|x| x.id == *s).unwrap();
        assert_eq!(stored.status, SaleStatus::Cancelled, "sale {s}");
    }
    for p in due.iter().take(4) {
        let marked = writes_to(&emu, &p.uuid).into_iter().filter(|w| w.outcome == "marked").count();
        assert_eq!(marked, 1, "payout {} marked exactly once", p.uuid);
    }
    let settled_by_refusal =
        report.rows.iter().filter(|r| r.message.as_deref().is_some_and(|m| m.contains("took effect"))).count();
    let resent = report.rows.iter().filter(|r| r.message.as_deref().is_some_and(|m| m.contains("re-send"))).count();
    assert!(settled_by_refusal + resent >= 3, "lost answers were settled: {report:#?}");

    // Converged: a second apply sends nothing (failed-for-good rows are held).
    let before = emu.state.requests().len();
    let again = rt.block_on(creator_etl::action::apply(&config, &file, &client, stop)).unwrap();
    assert_eq!(emu.state.requests().len(), before, "{again:#?}");
}

/// An emulator that loses every write's answer before any status arrives (a cut 200 would be an
/// answer: applied); `set_fault_rate(0.0)` brings the answers back.
fn every_answer_lost() -> TestEmu {
    use creator_etl::emulator::{Fault, LostKind};
    let mut cfg = EmulatorConfig::for_tests(20);
    cfg.faults.rate = 1.0;
    cfg.faults.kinds = vec![Fault::LostAnswer];
    cfg.faults.lost = vec![LostKind::Dropped, LostKind::BadGateway];
    TestEmu::start(cfg)
}

/// Every answer lost, retries spent: the rows end `in_doubt` (exit 3), with what to check. They
/// are held by later applies until `--retry-failed`, whose answers then settle them.
#[test]
fn writes_whose_answers_never_come_end_in_doubt_and_are_held() {
    let emu = every_answer_lost();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let s = updatable_sales(&emu)[0];
    let due = &payouts(&emu, PayoutKind::DueCredit, MAIN_ORG)[0];
    let file = write_csv(
        dir.path(),
        "d.csv",
        &[format!("update_sale,yes,{s},,4321,,,,,,"), format!("mark_payout,yes,,{},,,,,,,", due.uuid)],
    );
    let o = actions(&emu, &out, "apply", &file, &["--max-attempts", "2"], FULL_KEY);
    assert_exit(&[], &o, 3);
    let got = results(Path::new(report::<serde_json::Value>(&o)["results_csv"].as_str().unwrap()));
    for line in [2, 3] {
        assert_eq!(got[&line].0, "in_doubt", "line {line}: {:?}", got[&line]);
        assert!(got[&line].2.contains("check") && got[&line].2.contains("--retry-failed"), "{:?}", got[&line]);
    }
    assert!(String::from_utf8_lossy(&o.stderr).contains("in_doubt 2"), "{}", show(&[], &o));
    // The plan shows them held, with what to check; a later apply sends nothing and exits 3.
    let o = actions(&emu, &out, "plan", &file, &[], FULL_KEY);
    let plan = String::from_utf8_lossy(&o.stdout);
    assert!(
        plan.contains("hold (in doubt since run") && plan.contains(&format!("check whether sale {s} shows")),
        "{plan}"
    );
    let before = emu.state.requests().len();
    let o = actions(&emu, &out, "apply", &file, &[], FULL_KEY);
    assert_exit(&[], &o, 3);
    assert_eq!(emu.state.requests().len(), before, "in-doubt rows are never re-sent by themselves");
    // The service recovers; `--retry-failed` re-sends, and the answers settle both rows.
    emu.state.set_fault_rate(0.0);
    let o = actions(&emu, &out, "apply", &file, &["--retry-failed"], FULL_KEY);
    assert_exit(&[], &o, 0);
    let got = results(Path::new(report::<serde_json::Value>(&o)["results_csv"].as_str().unwrap()));
    assert_eq!(got[&2].0, "applied");
    assert_eq!(got[&3].0, "applied", "the mark was already paid by our own lost attempt: {:?}", got[&3]);
    assert!(got[&3].2.contains("took effect"), "{:?}", got[&3]);
    assert_eq!(writes_to(&emu, &due.uuid).iter().filter(|w| w.outcome == "marked").count(), 1);
}

/// The journal's identity of a row includes the service: the same file applied to a second
/// service with the same `--out` is sent there, and to the first one again is not.
#[test]
fn the_journal_is_scoped_to_the_service_and_key() {
    let a = TestEmu::start(EmulatorConfig::for_tests(20));
    let b = TestEmu::start(EmulatorConfig::for_tests(20));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let s = updatable_sales(&a)[0];
    let file = write_csv(dir.path(), "s.csv", &[format!("update_sale,yes,{s},,999,,,,,,")]);
    assert_exit(&[], &actions(&a, &out, "apply", &file, &[], FULL_KEY), 0);
    let o = actions(&b, &out, "apply", &file, &[], FULL_KEY);
    assert_exit(&[], &o, 0);
    assert_eq!(writes_to(&b, &s.to_string()).len(), 1, "sent to the second service: {}", show(&[], &o));
    let n = a.state.requests().len();
    assert_exit(&[], &actions(&a, &out, "apply", &file, &[], FULL_KEY), 0);
    assert_eq!(a.state.requests().len(), n, "the first service already has it");
    // Another organization's key on the first service is another scope too.
    let o = actions(&a, &out, "plan", &file, &[], OTHER_ORG_KEY);
    assert!(String::from_utf8_lossy(&o.stdout).contains("1 to send"), "{}", show(&[], &o));
    let c = db(&out);
    let keys: Vec<String> = c
        .prepare("SELECT DISTINCT key_fingerprint FROM action_journal")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(keys.iter().all(|k| k.starts_with("key-") && !k.contains(FULL_KEY)), "{keys:?}");
    drop(c);
    // No file under `--out` holds the key: journal, snapshots, pacing state, results.
    let files = files(&out);
    assert!(files.iter().any(|f| f.file_name().unwrap().to_string_lossy().starts_with("pacing-")), "{files:?}");
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        let hit = bytes.windows(FULL_KEY.len()).any(|w| w == FULL_KEY.as_bytes());
        assert!(!hit, "{} holds the key", f.display());
    }
}

/// Pacing survives the process: two applies back to back, each with payout marks, keep the 2 s
/// mark rule at the emulator (the second process starts from the first one's last mark).
#[test]
fn back_to_back_applies_keep_the_mark_spacing() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(20));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let due = payouts(&emu, PayoutKind::DueCredit, MAIN_ORG);
    for (i, pair) in due.chunks(2).take(2).enumerate() {
        let rows: Vec<String> = pair.iter().map(|p| format!("mark_payout,yes,,{},,,,,,,", p.uuid)).collect();
        let file = write_csv(dir.path(), &format!("m{i}.csv"), &rows);
        assert_exit(&[], &actions(&emu, &out, "apply", &file, &[], FULL_KEY), 0);
    }
    let marks: Vec<_> = emu.state.writes().into_iter().filter(|w| w.operation == "mark_credit_payout").collect();
    assert_eq!(marks.len(), 4, "{marks:?}");
    assert!(emu.state.violations().is_empty(), "{:?}", emu.state.violations());
    assert_eq!(emu.state.requests().iter().filter(|r| r.status == 429).count(), 0);
}

/// An emulator, a temporary directory, and in it a file approving updates of the first two
/// updatable sales to `totals`; with those sales' ids.
fn two_sale_updates(totals: [i64; 2]) -> (TestEmu, tempfile::TempDir, PathBuf, Vec<i64>) {
    let emu = TestEmu::start(EmulatorConfig::for_tests(20));
    let dir = tempfile::tempdir().unwrap();
    let s = updatable_sales(&emu);
    let rows: Vec<String> = s.iter().zip(totals).map(|(id, t)| format!("update_sale,yes,{id},,{t},,,,,,")).collect();
    let file = write_csv(dir.path(), "two.csv", &rows);
    (emu, dir, file, s)
}

/// `actions apply` of `file` under an hourly cap of 1: once the write to `first` went out, the
/// next row waits for the pacer, and Ctrl-C stops it there (exit 130). The output, and when
/// the apply started.
fn apply_stopped_in_a_pacing_wait(
    emu: &TestEmu,
    out: &Path,
    file: &Path,
    first: &str,
) -> (std::process::Output, std::time::Instant) {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_creator-etl"))
        .args(["actions", "apply", file.to_str().unwrap(), "--base-url", &emu.base_url, "--out", out.to_str().unwrap()])
        .args(["--hourly-cap", "1", "--cap-window-s", "3600", "--min-interval-ms", "0"])
        .env("CREATOR_API_KEY", FULL_KEY)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while writes_to(emu, first).is_empty() {
        assert!(started.elapsed() < Duration::from_secs(30), "the first row was never sent");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let kill = std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let o = child.wait_with_output().unwrap();
    assert_exit(&["actions", "apply"], &o, 130);
    (o, started)
}

/// Ctrl-C while an apply waits for the pacer (here an hourly cap of 1) stops it at once: the
/// waiting row is `not_sent`, the exit is 130, and a rerun will send it.
#[test]
fn ctrl_c_interrupts_a_pacing_wait_during_apply() {
    let (emu, dir, file, s) = two_sale_updates([11, 12]);
    let out = dir.path().join("out");
    let (o, started) = apply_stopped_in_a_pacing_wait(&emu, &out, &file, &s[0].to_string());
    assert!(started.elapsed() < Duration::from_secs(60), "it did not sit out the hour");
    let got = results(Path::new(report::<serde_json::Value>(&o)["results_csv"].as_str().unwrap()));
    assert_eq!((got[&2].0.as_str(), got[&3].0.as_str()), ("applied", "not_sent"));
    assert!(writes_to(&emu, &s[1].to_string()).is_empty());
    let o = actions(&emu, &out, "plan", &file, &[], FULL_KEY);
    assert!(String::from_utf8_lossy(&o.stdout).contains("1 to send"), "{}", show(&[], &o));
}

/// `run --actions` checks `--max-rows` before it fetches anything, like an invalid file.
#[test]
fn run_checks_the_actions_guards_before_fetching() {
    let (emu, dir, file, _) = two_sale_updates([100, 5]);
    let out = dir.path().join("out");
    let args = [
        "run",
        "--base-url",
        &emu.base_url,
        "--out",
        out.to_str().unwrap(),
        "--actions",
        file.to_str().unwrap(),
        "--max-rows",
        "1",
    ];
    let o = run_bin(dir.path(), &args, &[("CREATOR_API_KEY", FULL_KEY)]);
    assert_exit(&args, &o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("more than `--max-rows 1`"), "{}", show(&args, &o));
    assert_eq!(emu.state.requests().len(), 0, "nothing was fetched");
}

/// A re-send stopped before it went out (Ctrl-C while it waits for the pacer) sent nothing, so
/// the row stays as the journal had it: `not_sent` in this run, sent again by the next apply,
/// and applied once. It is never taken for a write in doubt.
#[test]
fn an_interrupted_re_send_is_left_to_the_next_apply() {
    let (emu, dir, _, s) = two_sale_updates([21, 22]);
    let out = dir.path().join("out");
    let (a, b) = (s[0].to_string(), s[1].to_string());
    // A run that dies right after recording its intent for sale A: the row is interrupted.
    let only_a = write_csv(dir.path(), "a.csv", &[format!("update_sale,yes,{a},,31,,,,,,")]);
    let args =
        ["actions", "apply", only_a.to_str().unwrap(), "--base-url", &emu.base_url, "--out", out.to_str().unwrap()];
    let o =
        run_bin(dir.path(), &args, &[("CREATOR_API_KEY", FULL_KEY), ("CREATOR_ETL_CRASH_AT", "actions-after-intent")]);
    assert!(!o.status.success(), "{}", show(&args, &o));
    assert!(writes_to(&emu, &a).is_empty());
    // Then B first and A's re-send: under an hourly cap of 1, the re-send waits for the pacer,
    // and Ctrl-C stops it there.
    let both = write_csv(
        dir.path(),
        "both.csv",
        &[format!("update_sale,yes,{b},,32,,,,,,"), format!("update_sale,yes,{a},,31,,,,,,")],
    );
    let (o, _) = apply_stopped_in_a_pacing_wait(&emu, &out, &both, &b);
    let got = results(Path::new(report::<serde_json::Value>(&o)["results_csv"].as_str().unwrap()));
    assert_eq!((got[&2].0.as_str(), got[&3].0.as_str()), ("applied", "not_sent"), "{got:?}");
    assert!(got[&3].2.contains("sends it again"), "{:?}", got[&3]);
    assert!(writes_to(&emu, &a).is_empty(), "nothing went out for A");
    let o = actions(&emu, &out, "plan", &both, &[], FULL_KEY);
    let plan = String::from_utf8_lossy(&o.stdout);
    assert!(plan.contains("send again (run") && plan.contains("1 to send"), "{}", show(&[], &o));
    let o = actions(&emu, &out, "apply", &both, &[], FULL_KEY);
    assert_exit(&[], &o, 0);
    let got = results(Path::new(report::<serde_json::Value>(&o)["results_csv"].as_str().unwrap()));
    assert_eq!((got[&2].0.as_str(), got[&3].0.as_str()), ("skipped_already_applied", "applied"), "{got:?}");
    assert_eq!(writes_to(&emu, &a).len(), 1);
    assert_eq!(writes_to(&emu, &b).len(), 1);
}

/// Regression (issue 32): a reviewer pasted one approved cancel twice. Both copies were decided
/// "send" from one journal snapshot; when the first ended in doubt, the second overwrote its
/// journal row with a new intent and sent again without `--retry-failed`. Each fingerprint is
/// now decided once per run: the copy is `skipped_duplicate` of line 2, is never sent, counts
/// for neither `--max-rows` nor the plan's sends, and the first copy's journal row is its own.
#[test]
fn an_approved_row_pasted_twice_is_sent_once_even_when_its_answers_are_lost() {
    let emu = every_answer_lost();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let s = updatable_sales(&emu)[0];
    let cancel = format!("update_sale,yes,{s},,,,,cancelled,,,");
    let file = write_csv(dir.path(), "twice.csv", &[cancel.clone(), cancel]);
    let o = actions(&emu, &out, "plan", &file, &["--max-rows", "1"], FULL_KEY);
    assert_exit(&[], &o, 0);
    let plan = String::from_utf8_lossy(&o.stdout);
    assert!(plan.contains("skip (duplicate of line 2)") && plan.contains("2 rows; 1 to send"), "{plan}");
    assert!(!plan.contains("would refuse"), "a copy is not counted against `--max-rows`: {plan}");

    let o = actions(&emu, &out, "apply", &file, &["--max-attempts", "2", "--max-rows", "1"], FULL_KEY);
    assert_exit(&[], &o, 3);
    let got = results(Path::new(report::<serde_json::Value>(&o)["results_csv"].as_str().unwrap()));
    assert_eq!(got[&2].0, "in_doubt", "{:?}", got[&2]);
    assert_eq!((got[&3].0.as_str(), got[&3].2.as_str()), ("skipped_duplicate", "duplicate of line 2"));
    assert_eq!(writes_to(&emu, &s.to_string()).len(), 2, "the first copy's two attempts, nothing for the copy");
    let journal = db(&out);
    assert_eq!(
        count(
            &journal,
            &format!("SELECT count(*) FROM action_journal WHERE target = 'sale {s}' AND outcome = 'in_doubt'")
        ),
        1,
        "the first copy's journal row stands"
    );
    assert_eq!(count(&journal, "SELECT count(*) FROM action_journal WHERE outcome = 'pending'"), 0);
    drop(journal);

    // Held, not re-sent, by a plain apply; `--retry-failed` settles it by the refusal of a
    // cancel that took effect, and the copy is still a duplicate.
    let o = actions(&emu, &out, "apply", &file, &[], FULL_KEY);
    assert_exit(&[], &o, 3);
    assert_eq!(writes_to(&emu, &s.to_string()).len(), 2, "in doubt: held");
    emu.state.set_fault_rate(0.0);
    let o = actions(&emu, &out, "apply", &file, &["--retry-failed"], FULL_KEY);
    assert_exit(&[], &o, 0);
    let got = results(Path::new(report::<serde_json::Value>(&o)["results_csv"].as_str().unwrap()));
    assert_eq!(got[&2].0, "applied", "{:?}", got[&2]);
    assert!(got[&2].2.contains("took effect"), "{:?}", got[&2]);
    assert_eq!(got[&3].0, "skipped_duplicate");
    assert_eq!(writes_to(&emu, &s.to_string()).len(), 3, "one re-send");
}
