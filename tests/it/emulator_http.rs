//! `creator-etl emulator` as a user runs it, seen by plain HTTP clients (curl among them).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::util::*;

/// Starts the binary's emulator on a free port; returns the child and its base URL.
fn spawn_emulator(min_interval_ms: &str, extra: &[&str]) -> (std::process::Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_creator-etl"))
        .args(["emulator", "--port", "0", "--applications", "150", "--hourly-cap", "0"])
        .args(["--min-interval-ms", min_interval_ms])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let base = line.trim().to_owned();
    assert!(base.starts_with("http://127.0.0.1:") && base.ends_with("/api/public/v1"), "{base}");
    (child, base)
}

fn curl(args: &[&str]) -> (u16, serde_json::Value) {
    let out = Command::new(crate::needs::curl())
        .args(["-s", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("curl is installed");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.parse().unwrap(), serde_json::from_str(body).unwrap_or(serde_json::Value::String(body.into())))
}

#[test]
fn curl_sees_what_the_spec_describes() {
    let (mut child, base) = spawn_emulator("0", &["--admin"]);
    let auth = format!("Authorization: Bearer {FULL_KEY}");

    let (code, body) = curl(&[&format!("{base}/campaign_applications")]);
    assert_eq!((code, body["error"].as_str()), (401, Some("Not Authenticated")));

    let (code, body) = curl(&["-H", &auth, &format!("{base}/campaign_applications")]);
    assert_eq!(code, 200);
    assert!(body["data"].as_array().unwrap().iter().all(|a| a["status"] == "pending"), "pending is the default");
    assert_eq!(body["meta"]["per_page"], 25);
    for field in ["row_count", "page_count", "current_page"] {
        assert!(body["meta"][field].is_u64(), "{field}");
    }

    let (code, body) = curl(&["-H", &auth, &format!("{base}/campaign_applications?status=cancelled")]);
    assert_eq!(code, 422, "applications spell it `canceled`");
    assert!(body["error"].as_str().unwrap().contains("pending_payment"));
    for bad in ["per_page=0", "per_page=101", "page=0", "page=x"] {
        let (code, _) = curl(&["-H", &auth, &format!("{base}/campaign_applications?{bad}")]);
        assert_eq!(code, 422, "{bad}");
    }

    let ro = format!("Authorization: Bearer {READ_ONLY_KEY}");
    let (code, body) = curl(&[
        "-X",
        "PATCH",
        "-H",
        &ro,
        "-H",
        "Content-Type: application/json",
        "-d",
        r#"{"total":1}"#,
        &format!("{base}/affiliate_sales/7001"),
    ]);
    assert_eq!((code, body["error"].as_str()), (403, Some("This API key is read-only and cannot modify data.")));

    let (code, body) = curl(&[
        "-H",
        &auth,
        &format!("{base}/stats/content_24h_data?start_date=01/01/2025&end_date=01/10/2025&limit=10000"),
    ]);
    assert_eq!(code, 200);
    assert_eq!(body["success"], true);
    assert_eq!(body["data"]["content_24h_data"]["likes_24h"].as_array().unwrap().len(), 10);

    let (code, body) = curl(&[&format!("{}/__admin/requests", base.trim_end_matches("/api/public/v1"))]);
    assert_eq!(code, 200);
    assert!(body["counts"]["GET /campaign_applications 401"] == 1, "{body}");

    child.kill().unwrap();
    let _ = child.wait();
}

#[test]
fn the_emulator_enforces_the_documented_spacing_with_the_documented_body() {
    let (mut child, base) = spawn_emulator("2000", &[]);

    let auth = format!("Authorization: Bearer {FULL_KEY}");
    let url = format!("{base}/campaign_applications");
    let (first, _) = curl(&["-H", &auth, &url]);
    let (second, body) = curl(&["-H", &auth, &url]);
    assert_eq!((first, second), (200, 429));
    assert_eq!(body["error"], "Rate limit exceeded. Please wait 2 seconds between requests.");
    assert_eq!(body["retry_after"], 2);
    // Admin routes are off unless asked for.
    let (code, _) = curl(&[&format!("{}/__admin/requests", base.trim_end_matches("/api/public/v1"))]);
    assert_eq!(code, 404);
    child.kill().unwrap();
    let _ = child.wait();
}

/// The emulator never panics and never half-applies: any query values and bodies on any route
/// get a 2xx or a 4xx, and a 4xx leaves every sale and payout as it was. (Regression:
/// `page=9223372036854775807` overflowed the page offset, and a `total` near `i64::MAX` the
/// commission arithmetic, both panics in debug builds.)
#[test]
fn arbitrary_requests_get_a_4xx_and_change_nothing() {
    use creator_etl::emulator::EmulatorConfig;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    let emu = TestEmu::start(EmulatorConfig::for_tests(30));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let http = reqwest::Client::new();
    let value = prop_oneof![
        Just("9223372036854775807".to_owned()),
        Just("-9223372036854775808".to_owned()),
        Just("99999999999999999999999".to_owned()),
        Just("0".to_owned()),
        Just("-1".to_owned()),
        Just("1".to_owned()),
        Just("101".to_owned()),
        Just("01/01/0000".to_owned()),
        Just("12/31/9999".to_owned()),
        Just("02/30/2025".to_owned()),
        Just("2025-01-01".to_owned()),
        Just("pending".to_owned()),
        Just("true".to_owned()),
        "[ -~]{0,12}",
    ];
    let json = prop_oneof![
        Just(serde_json::json!(i64::MAX)),
        Just(serde_json::json!(i64::MIN)),
        Just(serde_json::json!(9_223_372_036_854_775_807u64)),
        Just(serde_json::json!(1e300)),
        Just(serde_json::json!(-5)),
        Just(serde_json::json!(1250)),
        Just(serde_json::json!(null)),
        Just(serde_json::json!("cancelled")),
        Just(serde_json::json!("usd")),
        Just(serde_json::json!("2025-01-01")),
        Just(serde_json::json!(253_402_300_800i64)),
        Just(serde_json::json!({"nested": [1, 2]})),
        "[ -~]{0,10}".prop_map(serde_json::Value::String),
    ];
    let field = prop::sample::select(vec![
        "total",
        "subtotal",
        "commission",
        "currency",
        "status",
        "occurred_at",
        "due_at",
        "customer_email",
        "customer_name",
        "sub_id",
        "creator_payout_uuid",
        "other",
    ]);
    let param = prop::sample::select(vec![
        "status",
        "page",
        "per_page",
        "campaign_id",
        "start_date",
        "end_date",
        "limit",
        "credits_only",
        "creator_id",
    ]);
    let route = prop::sample::select(vec![
        ("GET", "campaign_applications".to_owned()),
        ("GET", "stats/content_24h_data".to_owned()),
        ("GET", "stats/creator_payouts".to_owned()),
        ("POST", "stats/mark_credit_payout".to_owned()),
        ("PATCH", "affiliate_sales/7001".to_owned()),
        ("PATCH", "affiliate_sales/7002".to_owned()),
        ("PATCH", "affiliate_sales/9223372036854775807".to_owned()),
        ("PATCH", "affiliate_sales/-1".to_owned()),
    ]);
    let body = prop_oneof![
        prop::collection::btree_map(field, json, 0..5).prop_map(|m| serde_json::to_vec(&m).unwrap()),
        prop::collection::vec(any::<u8>(), 0..40),
    ];
    let strategy = (route, prop::collection::vec((param, value), 0..6), body);
    let mut runner = TestRunner::new(Config { cases: 400, failure_persistence: None, ..Config::default() });
    runner
        .run(&strategy, |((method, path), query, body)| {
            let before = (emu.state.sales(), emu.state.payouts());
            let url = reqwest::Url::parse_with_params(&format!("{}/{path}", emu.base_url), &query).unwrap();
            let status = rt.block_on(async {
                let mut req =
                    http.request(method.parse().unwrap(), url).header("Authorization", format!("Bearer {FULL_KEY}"));
                if method != "GET" {
                    req = req.header("Content-Type", "application/json").body(body.clone());
                }
                req.send().await.map(|r| r.status().as_u16())
            });
            let status = status.map_err(|e| TestCaseError::fail(format!("no answer (a panic?): {e}")))?;
            prop_assert!((200..500).contains(&status), "{method} {path} {query:?}: {status}");
            if status >= 400 {
                prop_assert!(
                    (emu.state.sales(), emu.state.payouts()) == before,
                    "{method} {path} {status} changed state; body {:?}",
                    String::from_utf8_lossy(&body)
                );
            }
            Ok(())
        })
        .unwrap();
}

/// `--org-policy` gives a numbered organization its own policy over the emulator's, and a
/// malformed one is a configuration error (exit 2) that quotes the argument.
#[test]
fn org_policies_shape_numbered_organizations() {
    let (mut child, base) = spawn_emulator(
        "0",
        &["--organizations", "3", "--org-policy", "2:revoked", "--org-policy", "3:hourly_cap=1,min_interval_ms=0"],
    );
    let get = |k: u32| {
        curl(&["-H", &format!("Authorization: Bearer emu-org-{k}-key"), &format!("{base}/campaign_applications")])
    };
    assert_eq!(get(1).0, 200);
    assert_eq!(get(1).0, 200, "organization 1 keeps the emulator's policy: no cap");
    let (code, body) = get(2);
    assert_eq!((code, body["error"].as_str()), (401, Some("Not Authenticated")), "a revoked key is unknown");
    assert_eq!(get(3).0, 200);
    let (code, body) = get(3);
    assert_eq!((code, body["error"].as_str()), (429, Some("Hourly rate limit of 1 requests exceeded.")));
    child.kill().unwrap();
    let _ = child.wait();

    let dir = tempfile::tempdir().unwrap();
    let args = [
        "emulator",
        "--port",
        "0",
        "--organizations",
        "4",
        "--org-policy",
        "5:revoked",
        "--org-policy",
        "1:colour=red",
    ];
    let out = run_bin(dir.path(), &args, &[]);
    assert_exit(&args, &out, 2);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for message in [
        "`--org-policy` `5:revoked`: organization 5 is not served (`--organizations 4`)",
        "`--org-policy` `1:colour=red`: `colour=red` is not one of min_interval_ms=MS, hourly_cap=N, cap_window_s=S, fault_rate=P (0 to 1), revoked, skewed_totals",
    ] {
        assert!(stderr.contains(message), "{message}\nin:\n{stderr}");
    }
}
