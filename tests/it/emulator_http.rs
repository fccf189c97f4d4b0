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
    let out = Command::new("curl").args(["-s", "-w", "\n%{http_code}"]).args(args).output().expect("curl is installed");
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
