//! Pacing measured where it matters: at the emulator, which enforces the same policy.

use std::time::Duration;

use creator_etl::api::models::ApplicationStatus;
use creator_etl::api::{ApplicationsQuery, MarkOutcome, PacingConfig};
use creator_etl::emulator::{EmulatorConfig, PayoutKind, RequestRecord, MAIN_ORG};

use crate::util::*;

fn policy(ms: u64, cap: Option<u32>, window_ms: u64) -> PacingConfig {
    PacingConfig {
        min_interval: Duration::from_millis(ms),
        hourly_cap: cap,
        cap_window: Duration::from_millis(window_ms),
        wait_for_answers: false,
    }
}

fn emu_config(apps: usize, ms: u64, cap: Option<u32>, window_ms: u64) -> EmulatorConfig {
    let mut cfg = EmulatorConfig::for_tests(apps);
    cfg.rate.min_interval = Duration::from_millis(ms);
    cfg.rate.hourly_cap = cap;
    cfg.rate.cap_window = Duration::from_millis(window_ms);
    cfg
}

/// Smallest gap between consecutive accepted requests, as the emulator saw them.
fn min_gap_ms(reqs: &[RequestRecord]) -> f64 {
    let accepted: Vec<f64> = reqs.iter().filter(|r| r.status != 429).map(|r| r.at_ms).collect();
    accepted.windows(2).map(|w| w[1] - w[0]).fold(f64::INFINITY, f64::min)
}

/// The bar: a full crawl under the documented 2 s policy, with no 429 from spacing.
#[tokio::test]
async fn crawl_under_the_two_second_policy_has_no_429() {
    let emu = emulator(emu_config(300, 2000, None, 3_600_000)).await;
    let c = client(&emu.base_url, FULL_KEY, policy(2000, None, 3_600_000));
    let mut rows = 0;
    for status in ApplicationStatus::KNOWN {
        let first = c.list_applications(&ApplicationsQuery::page(status.clone(), 1)).await.unwrap();
        rows += first.value.data.len();
        for page in 2..=first.value.meta.page_count {
            rows += c.list_applications(&ApplicationsQuery::page(status.clone(), page)).await.unwrap().value.data.len();
        }
    }
    assert_eq!(rows, emu.state.applications(MAIN_ORG).len());
    assert!(emu.state.violations().is_empty(), "{:?}", emu.state.violations());
    assert_eq!(c.metrics().rate_limited, 0);
    let gap = min_gap_ms(&emu.state.requests());
    assert!(gap >= 2000.0, "smallest gap at the emulator {gap} ms");
}

/// Separately built clients with the same key, and their clones, share one pacer.
#[tokio::test]
async fn concurrent_clients_of_one_key_share_the_spacing() {
    let emu = emulator(emu_config(50, 300, None, 3_600_000)).await;
    let a = client(&emu.base_url, FULL_KEY, policy(300, None, 3_600_000));
    let b = client(&emu.base_url, FULL_KEY, policy(300, None, 3_600_000));
    let mut tasks = vec![];
    for c in [a.clone(), a, b.clone(), b] {
        tasks.push(tokio::spawn(async move {
            for _ in 0..3 {
                c.list_applications(&ApplicationsQuery::page(ApplicationStatus::Accepted, 1)).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(emu.state.violations().is_empty(), "{:?}", emu.state.violations());
    assert_eq!(emu.state.requests().len(), 12);
    assert!(min_gap_ms(&emu.state.requests()) >= 300.0);
}

#[tokio::test]
async fn payout_marks_are_two_seconds_apart_whatever_the_spacing() {
    let emu = emulator(emu_config(10, 0, None, 3_600_000)).await;
    let c = client(&emu.base_url, FULL_KEY, fast());
    let due: Vec<String> = emu
        .state
        .payouts()
        .into_iter()
        .filter(|p| p.kind == PayoutKind::DueCredit && p.org == MAIN_ORG)
        .map(|p| p.uuid)
        .take(3)
        .collect();
    for uuid in &due {
        assert!(matches!(c.mark_credit_payout(uuid).await.unwrap(), MarkOutcome::Marked(_)));
    }
    let marks: Vec<f64> = emu.state.writes().iter().map(|w| w.at_ms).collect();
    assert_eq!(marks.len(), 3);
    for w in marks.windows(2) {
        assert!(w[1] - w[0] >= 2000.0, "marks {} ms apart", w[1] - w[0]);
    }
    assert!(emu.state.violations().is_empty(), "{:?}", emu.state.violations());
}

/// The client sends faster than the service allows: each 429 is honoured, never retried early.
#[tokio::test]
async fn a_429_is_never_retried_before_it_allows() {
    let emu = emulator(emu_config(10, 1000, None, 3_600_000)).await;
    let c = client(&emu.base_url, FULL_KEY, fast());
    for _ in 0..3 {
        c.list_applications(&ApplicationsQuery::page(ApplicationStatus::Accepted, 1)).await.unwrap();
    }
    let reqs = emu.state.requests();
    let refused: Vec<&RequestRecord> = reqs.iter().filter(|r| r.status == 429).collect();
    assert!(!refused.is_empty(), "the client was faster than the policy");
    assert_eq!(c.metrics().rate_limited as usize, refused.len());
    for r in refused {
        let next = reqs.iter().find(|n| n.at_ms > r.at_ms).expect("the request was retried");
        assert!(next.at_ms - r.at_ms >= 1000.0, "retried {} ms after a 429 asking for 1 s", next.at_ms - r.at_ms);
        assert_eq!(next.status, 200);
    }
}

/// An exhausted cap makes the client wait for the window's reset, then finish.
#[tokio::test]
async fn hourly_cap_waits_and_completes() {
    let emu = emulator(emu_config(10, 0, Some(3), 2000)).await;
    let c = client_with(&emu.base_url, FULL_KEY, fast(), 6);
    for _ in 0..7 {
        c.list_applications(&ApplicationsQuery::page(ApplicationStatus::Accepted, 1)).await.unwrap();
    }
    let reqs = emu.state.requests();
    assert_eq!(reqs.iter().filter(|r| r.status == 200).count(), 7);
    let refused: Vec<_> = reqs.iter().filter(|r| r.status == 429).collect();
    assert!(!refused.is_empty());
    assert!(emu.state.violations().iter().all(|v| v.kind == "hourly_cap"));
    // A refusal is never followed by another request before its window resets.
    for r in &refused {
        let next = reqs.iter().find(|n| n.at_ms > r.at_ms).unwrap();
        assert_eq!(next.status, 200, "no second refusal: the client waited for the reset");
    }

    // Knowing the cap, the client keeps to it and is never refused.
    let emu = emulator(emu_config(10, 0, Some(3), 2000)).await;
    let c = client(&emu.base_url, FULL_KEY, policy(0, Some(3), 2000));
    for _ in 0..7 {
        c.list_applications(&ApplicationsQuery::page(ApplicationStatus::Accepted, 1)).await.unwrap();
    }
    assert!(
        emu.state.violations().is_empty(),
        "{:?} {:?}",
        emu.state.violations(),
        emu.state.requests().iter().map(|r| (r.at_ms, r.status)).collect::<Vec<_>>()
    );
    let reqs = emu.state.requests();
    assert!(reqs[6].at_ms - reqs[0].at_ms >= 4000.0, "7 requests at 3 per 2 s take two resets");
}

/// The pacer's memory is one file per service and key, whether the base URL ends in a slash or
/// not: the second process keeps the first one's rules.
#[test]
fn the_pacing_file_does_not_depend_on_a_trailing_slash() {
    let emu = TestEmu::start(EmulatorConfig::for_tests(10));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    for base in [emu.base_url.clone(), format!("{}/", emu.base_url)] {
        let args = ["extract", "--plan-only", "--base-url", &base, "--out", out.to_str().unwrap()];
        let o = run_bin(dir.path(), &args, &[("CREATOR_API_KEY", FULL_KEY)]);
        assert_exit(&args, &o, 0);
    }
    let files: Vec<String> = std::fs::read_dir(out.join("state"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("pacing-"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
}
