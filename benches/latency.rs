//! One organization at the latency floor: `creator-etl extract` with no spacing against a small
//! server that is not the project's emulator. The server answers every request after a fixed
//! latency (50 ms unless `--latency-ms`), from data it makes up itself: `--applications`
//! applications over the six statuses, newest first, and daily views and likes for any window.
//!
//! The floor of an extract is `requests × latency / in-flight limit`; the benchmark reports the
//! wall time against it, the average number of requests in flight, and where that average falls:
//! the in-flight count over each phase (page 1 of every status, each status's other pages, the
//! content windows), from the server's own arrival and answer times.
//!
//! `cargo bench --bench latency -- [--applications N] [--reps N] [--latency-ms N] [--concurrency N]`
//! (without `--concurrency`, both 8 and 16 are measured).

mod common;

use common::{arg, median};

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use chrono::{Duration as Days, NaiveDate, Utc};
use serde_json::{json, Value};

/// The six statuses and their shares of the applications, in percent.
const STATUSES: [(&str, u64); 6] = [
    ("pending", 15),
    ("accepted", 40),
    ("rejected", 20),
    ("canceled", 10),
    ("pending_contract", 8),
    ("pending_payment", 7),
];

/// SPEC 2.1's `signup_source` values.
const SOURCES: [&str; 3] = ["brand_api", "whitelabel", "marketplace"];

/// One request as the server saw it: what it was for, when it arrived and when it was answered,
/// in ms since the server started.
#[derive(Clone)]
struct Seen {
    what: String,
    at_ms: f64,
    done_ms: f64,
}

struct Server {
    latency: Duration,
    /// Applications per status.
    counts: BTreeMap<&'static str, u64>,
    epoch: Instant,
    seen: Mutex<Vec<Seen>>,
}

impl Server {
    fn ms(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64() * 1000.0
    }
}

/// Application `i` (0 is the newest) of a status: every field of SPEC 2.1.
fn application(status: &str, status_index: u64, i: u64) -> Value {
    let id = 10_000_000 - status_index * 1_000_000 - i;
    let applied = Utc::now() - chrono::Duration::minutes(i as i64 * 7 + status_index as i64);
    let source = SOURCES[(id % 3) as usize];
    // Marketplace applicants: first name only, and no email.
    let marketplace = source == "marketplace";
    json!({
        "id": id,
        "status": status,
        "campaign_id": 100 + id % 7,
        "campaign_name": format!("Campaign {}", id % 7),
        "user_id": 500_000 + id,
        "creator_name": if marketplace { format!("Creator{id}") } else { format!("Creator{id} Surname") },
        "email": if marketplace { Value::Null } else { json!(format!("creator{id}@example.com")) },
        "signup_source": source,
        "connected_accounts": [{
            "id": 900_000 + id,
            "provider": "tik_tok",
            "username": format!("handle{id}"),
            "monthly_post_count": (id % 40) as i64,
        }],
        "applied_at": applied.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    })
}

async fn list_applications(
    State(s): State<Arc<Server>>,
    Query(q): Query<BTreeMap<String, String>>,
) -> impl IntoResponse {
    let at_ms = s.ms();
    tokio::time::sleep(s.latency).await;
    let status = q.get("status").map_or("pending", String::as_str);
    let page: u64 = q.get("page").and_then(|p| p.parse().ok()).unwrap_or(1).max(1);
    let per_page: u64 = q.get("per_page").and_then(|p| p.parse().ok()).unwrap_or(25).clamp(1, 100);
    let Some(index) = STATUSES.iter().position(|(name, _)| *name == status) else {
        return (axum::http::StatusCode::UNPROCESSABLE_ENTITY, Json(json!({"error": "invalid status"})));
    };
    let rows = s.counts[status];
    let first = (page - 1) * per_page;
    let data: Vec<Value> = (first..rows.min(first + per_page)).map(|i| application(status, index as u64, i)).collect();
    let body = json!({
        "data": data,
        "meta": {"row_count": rows, "page_count": rows.div_ceil(per_page), "current_page": page, "per_page": per_page},
    });
    let done_ms = s.ms();
    s.seen.lock().unwrap().push(Seen { what: status.to_owned(), at_ms, done_ms });
    (axum::http::StatusCode::OK, Json(body))
}

async fn content_24h(State(s): State<Arc<Server>>, Query(q): Query<BTreeMap<String, String>>) -> impl IntoResponse {
    let at_ms = s.ms();
    tokio::time::sleep(s.latency).await;
    let day = |k: &str| q.get(k).and_then(|d| NaiveDate::parse_from_str(d, "%m/%d/%Y").ok());
    let (Some(start), Some(end)) = (day("start_date"), day("end_date")) else {
        return (axum::http::StatusCode::UNPROCESSABLE_ENTITY, Json(json!({"error": "bad dates"})));
    };
    let series = |name: &str, scale: i64| -> Vec<Value> {
        let days: Vec<NaiveDate> = start.iter_days().take_while(|d| *d <= end).collect();
        let ts = |d: NaiveDate| d.and_hms_opt(0, 0, 0).unwrap().and_utc().timestamp();
        days.iter()
            .map(|d| {
                let n = ts(*d) / 86_400;
                json!({
                    "date": ts(*d), "last_date": ts(*d - Days::days(7)),
                    "current": (n % 97) * scale, "last": ((n - 7) % 97) * scale,
                    "name": name, "total": 1_000_000 * scale, "last_total": 990_000 * scale,
                })
            })
            .collect()
    };
    let body = json!({"success": true, "data": {"content_24h_data": {
        "views_24h": series("Views", 10), "likes_24h": series("Likes", 1),
    }}});
    let done_ms = s.ms();
    s.seen.lock().unwrap().push(Seen { what: "content".into(), at_ms, done_ms });
    (axum::http::StatusCode::OK, Json(body))
}

/// The average number of requests in flight over `[from, to]` ms.
fn in_flight(seen: &[Seen], from: f64, to: f64) -> f64 {
    if to <= from {
        return 0.0;
    }
    let busy: f64 = seen.iter().map(|r| (r.done_ms.min(to) - r.at_ms.max(from)).max(0.0)).sum();
    busy / (to - from)
}

struct Sample {
    wall_s: f64,
    requests: usize,
    in_flight: f64,
    /// Per phase: its name, its span in ms, and the requests in flight over it.
    phases: Vec<(String, f64, f64)>,
}

fn main() {
    let applications = arg("--applications", 50_000);
    let reps = arg("--reps", 3);
    let latency_ms = arg("--latency-ms", 50);
    let concurrencies: Vec<u64> = match arg("--concurrency", 0) {
        0 => vec![8, 16],
        n => vec![n],
    };
    let days = 3 * 365;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let share = |pct: u64| applications * pct / 100;
    // The last status takes the rounding remainder.
    let rest = applications - STATUSES.iter().map(|(_, p)| share(*p)).sum::<u64>();
    let counts: BTreeMap<&'static str, u64> = STATUSES
        .iter()
        .enumerate()
        .map(|(i, (s, pct))| (*s, share(*pct) + if i == STATUSES.len() - 1 { rest } else { 0 }))
        .collect();
    println!(
        "latency-floor benchmark: {applications} applications, {days} days of content, server latency {latency_ms} ms, \
         no spacing, {reps} runs per setting; a fixed-latency server that is not the emulator\n"
    );
    println!("| in-flight limit | requests | wall s, median | floor s | wall / floor | requests in flight, avg | server CPU s |");
    println!("|---|---|---|---|---|---|---|");
    let mut phase_lines = vec![];
    for &concurrency in &concurrencies {
        let mut samples = vec![];
        let mut server_cpu = vec![];
        for _ in 0..reps {
            let server = Arc::new(Server {
                latency: Duration::from_millis(latency_ms),
                counts: counts.clone(),
                epoch: Instant::now(),
                seen: Mutex::new(vec![]),
            });
            let app = Router::new()
                .route("/api/public/v1/campaign_applications", get(list_applications))
                .route("/api/public/v1/stats/content_24h_data", get(content_24h))
                .with_state(server.clone());
            let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
            let addr: SocketAddr = listener.local_addr().unwrap();
            let serving = rt.spawn(async move { axum::serve(listener, app).await });
            let cpu_before = common::process_cpu_s();
            let out = tempfile::tempdir().unwrap();
            let started = Instant::now();
            let output = Command::new(env!("CARGO_BIN_EXE_creator-etl"))
                .args(["extract", "--base-url", &format!("http://{addr}/api/public/v1"), "--out"])
                .arg(out.path())
                .args(["--since-days", &(days - 1).to_string(), "--hourly-cap", "0", "--min-interval-ms", "0", "-q"])
                .args(["--concurrency", &concurrency.to_string()])
                .env("CREATOR_API_KEY", "latency-bench-key")
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .output()
                .unwrap();
            let wall_s = started.elapsed().as_secs_f64();
            server_cpu.push(common::process_cpu_s() - cpu_before);
            serving.abort();
            assert!(output.status.success(), "extract failed");
            let report: Value = serde_json::from_slice(&output.stdout).unwrap();
            assert_eq!(report["status"], "completed");
            let seen = server.seen.lock().unwrap().clone();
            samples.push(sample(&seen, wall_s));
        }
        let requests = samples.iter().map(|x| x.requests).max().unwrap();
        let floor = requests as f64 * latency_ms as f64 / 1000.0 / concurrency as f64;
        let wall = median(samples.iter().map(|x| x.wall_s).collect());
        println!(
            "| {concurrency} | {requests} | {wall:.2} | {floor:.2} | {:.2} | {:.1} | {:.2} |",
            wall / floor,
            median(samples.iter().map(|x| x.in_flight).collect()),
            median(server_cpu),
        );
        let mid = &samples[samples.len() / 2];
        for (name, span, flight) in &mid.phases {
            phase_lines.push(format!("| {concurrency} | {name} | {span:.0} | {flight:.1} |"));
        }
    }
    println!("\nWhere the in-flight count falls (one run per limit; a phase spans its first arrival to its last answer, and phases may overlap):\n");
    println!("| in-flight limit | phase | span ms | requests in flight, avg |");
    println!("|---|---|---|---|");
    for line in phase_lines {
        println!("{line}");
    }
}

/// One run's figures from what the server saw.
fn sample(seen: &[Seen], wall_s: f64) -> Sample {
    let first = seen.iter().map(|r| r.at_ms).fold(f64::INFINITY, f64::min);
    let last = seen.iter().map(|r| r.done_ms).fold(0.0, f64::max);
    let mut phases = vec![];
    // Page 1 of every status: the first request of each status.
    let mut firsts: BTreeMap<&str, &Seen> = BTreeMap::new();
    for r in seen.iter().filter(|r| r.what != "content") {
        let e = firsts.entry(r.what.as_str()).or_insert(r);
        if r.at_ms < e.at_ms {
            *e = r;
        }
    }
    let first_pages_end = firsts.values().map(|r| r.done_ms).fold(0.0, f64::max);
    phases.push((
        "page 1 of every status".to_owned(),
        first_pages_end - first,
        in_flight(seen, first, first_pages_end),
    ));
    let mut kinds: Vec<&str> = STATUSES.iter().map(|(s, _)| *s).collect();
    kinds.push("content");
    for kind in kinds {
        let page_1 = firsts.get(kind).map(|r| r.at_ms);
        let of: Vec<&Seen> = seen.iter().filter(|r| r.what == kind && Some(r.at_ms) != page_1).collect();
        let from = of.iter().map(|r| r.at_ms).fold(f64::INFINITY, f64::min);
        let to = of.iter().map(|r| r.done_ms).fold(0.0, f64::max);
        let name = if kind == "content" { "content windows".to_owned() } else { format!("`{kind}` after page 1") };
        phases.push((format!("{name} ({} requests)", of.len()), to - from, in_flight(seen, from, to)));
    }
    Sample { wall_s, requests: seen.len(), in_flight: in_flight(seen, first, last), phases }
}
