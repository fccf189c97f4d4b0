//! The typed client against the emulator: every operation's success and error shapes, retries of
//! each injected fault, and tolerance of values this version does not know.

use std::collections::HashSet;
use std::time::Duration;

use chrono::{Duration as Days, NaiveDate, TimeZone, Utc};
use creator_etl::api::models::*;
use creator_etl::api::{ApiError, ApplicationsQuery, MarkOutcome, PayoutsQuery, CONTENT_LIMIT_ALL};
use creator_etl::emulator::{EmulatorConfig, Fault, PayoutKind, MAIN_ORG, OTHER_ORG};

use crate::util::*;

/// Pages through every status with the given client; returns rows by status.
async fn crawl(c: &creator_etl::api::Client) -> Vec<Application> {
    let mut all = vec![];
    for status in ApplicationStatus::KNOWN {
        let first = c.list_applications(&ApplicationsQuery::page(status.clone(), 1)).await.unwrap();
        let pages = first.value.meta.page_count;
        all.extend(first.value.data);
        for page in 2..=pages {
            all.extend(c.list_applications(&ApplicationsQuery::page(status.clone(), page)).await.unwrap().value.data);
        }
    }
    all
}

#[tokio::test]
async fn applications_page_newest_first_and_match_the_truth() {
    let emu = emulator(EmulatorConfig::for_tests(450)).await;
    let c = client(&emu.base_url, FULL_KEY, fast());
    let page = c.list_applications(&ApplicationsQuery::page(ApplicationStatus::Accepted, 1)).await.unwrap();
    let meta = &page.value.meta;
    assert_eq!(meta.current_page, 1);
    assert_eq!(meta.per_page, Some(100));
    assert_eq!(meta.page_count, meta.row_count.div_ceil(100));
    assert!(page.value.data.windows(2).all(|w| w[0].applied_at >= w[1].applied_at), "newest first");
    assert!(page.value.data.iter().all(|a| a.status == ApplicationStatus::Accepted));
    assert!(!page.raw.is_empty() && page.status == 200 && page.path == "campaign_applications");

    let mut got = crawl(&c).await;
    let mut truth = emu.state.applications(MAIN_ORG);
    got.sort_by_key(|a| a.id);
    truth.sort_by_key(|a| a.id);
    assert_eq!(got.len(), 450);
    assert_eq!(got, truth, "a crawl of every status is the main organization's data, field for field");

    // Marketplace applicants: first name only, no email, accounts still listed.
    let market: Vec<_> = got.iter().filter(|a| a.signup_source == SignupSource::Marketplace).collect();
    assert!(market.iter().all(|a| a.email.is_none() && !a.creator_name.contains(' ')));
    assert!(market.iter().any(|a| !a.connected_accounts.is_empty()));

    // campaign_id restricts.
    let q = ApplicationsQuery { campaign_id: Some(12), ..ApplicationsQuery::page(ApplicationStatus::Accepted, 1) };
    let by_campaign = c.list_applications(&q).await.unwrap().value;
    assert!(by_campaign.data.iter().all(|a| a.campaign_id == 12));
    assert!(by_campaign.meta.row_count < meta.row_count);
}

#[tokio::test]
async fn organizations_never_see_each_other() {
    let emu = emulator(EmulatorConfig::for_tests(300)).await;
    let main: HashSet<i64> = crawl(&client(&emu.base_url, FULL_KEY, fast())).await.iter().map(|a| a.id).collect();
    let other = crawl(&client(&emu.base_url, OTHER_ORG_KEY, fast())).await;
    let truth_other: HashSet<i64> = emu.state.applications(OTHER_ORG).iter().map(|a| a.id).collect();
    assert!(!other.is_empty());
    assert_eq!(other.iter().map(|a| a.id).collect::<HashSet<_>>(), truth_other);
    assert!(other.iter().all(|a| !main.contains(&a.id)));
    assert!(other.iter().all(|a| a.campaign_id >= 91));
    // Read-only keys may list.
    let ro = crawl(&client(&emu.base_url, READ_ONLY_KEY, fast())).await;
    assert_eq!(ro.len(), main.len());
}

#[tokio::test]
async fn list_errors_are_typed_and_name_the_fix() {
    let emu = emulator(EmulatorConfig::for_tests(50)).await;
    let bad = client(&emu.base_url, "not-a-key", fast());
    let err = bad.list_applications(&ApplicationsQuery::page(ApplicationStatus::Pending, 1)).await.unwrap_err();
    assert!(matches!(err, ApiError::Unauthorized { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("401 Not Authenticated") && text.contains("CREATOR_API_KEY"), "{text}");
    assert!(!text.contains("not-a-key"), "the key never appears in an error: {text}");

    let c = client(&emu.base_url, FULL_KEY, fast());
    let q = ApplicationsQuery::page(ApplicationStatus::Other("on_hold".into()), 1);
    let err = c.list_applications(&q).await.unwrap_err();
    assert!(matches!(err, ApiError::Unprocessable { .. }), "{err:?}");
    let msg = err.server_message().unwrap();
    for s in ApplicationStatus::KNOWN {
        assert!(msg.contains(s.as_str()), "422 names `{s}`: {msg}");
    }
    // Non-retryable errors are sent once.
    assert_eq!(c.metrics().requests["list_applications"]["422"], 1);
    assert_eq!(c.metrics().retries, 0);
}

#[tokio::test]
async fn content_returns_every_day_with_week_earlier_comparison() {
    let emu = emulator(EmulatorConfig::for_tests(10)).await;
    let c = client(&emu.base_url, FULL_KEY, fast());
    let start = NaiveDate::from_ymd_opt(2024, 2, 20).unwrap(); // spans a leap day
    let end = NaiveDate::from_ymd_opt(2024, 3, 5).unwrap();
    let r = c.content_24h(start, end, CONTENT_LIMIT_ALL).await.unwrap();
    assert_eq!(r.query[0], ("start_date".into(), "02/20/2024".into()));
    let data = r.value.data.content_24h_data;
    let views = data.views_24h.unwrap();
    let likes = data.likes_24h.unwrap();
    assert_eq!(views.len(), 15);
    assert_eq!(likes.len(), 15);
    for (i, p) in views.iter().enumerate() {
        let day = start + Days::days(i as i64);
        let midnight = Utc.from_utc_datetime(&day.and_hms_opt(0, 0, 0).unwrap()).timestamp();
        assert_eq!(p.date, midnight);
        assert_eq!(p.last_date, midnight - 7 * 86_400);
        assert_eq!(p.name, "Views");
        assert_eq!(p.current, emu.state.content_day(MAIN_ORG, day).0);
        assert_eq!(p.last, emu.state.content_day(MAIN_ORG, day - Days::days(7)).0);
        assert_eq!(p.total, views.iter().map(|p| p.current).sum::<i64>());
    }
    assert!(likes.iter().all(|p| p.name == "Likes"));

    // A client that forgets `limit` gets the documented default: 4 days.
    let url = format!("{}/stats/content_24h_data?start_date=01/01/2024&end_date=01/31/2024", emu.base_url);
    let (status, body) = raw("GET", &url, Some(FULL_KEY), None).await;
    assert_eq!(status, 200);
    assert_eq!(body["data"]["content_24h_data"]["views_24h"].as_array().unwrap().len(), 4);

    // Malformed dates: 400 with the documented message, not retried.
    let url = format!("{}/stats/content_24h_data?start_date=2024-01-01&end_date=01/31/2024", emu.base_url);
    let (status, body) = raw("GET", &url, Some(FULL_KEY), None).await;
    assert_eq!((status, body["error"].as_str().unwrap()), (400, "Dates should be in MM/DD/YYYY format"));
}

fn first_sale(emu: &creator_etl::emulator::Emulator, pred: impl Fn(&creator_etl::emulator::StoredSale) -> bool) -> i64 {
    emu.state.sales().into_iter().find(|s| pred(s)).expect("the emulator has such a sale").id
}

#[tokio::test]
async fn sale_updates_follow_the_vendor_rules() {
    let emu = emulator(EmulatorConfig::for_tests(10)).await;
    let c = client(&emu.base_url, FULL_KEY, fast());
    let id = first_sale(&emu, |s| s.org == MAIN_ORG && s.updatable() && s.status != SaleStatus::Cancelled);
    let pct = emu.state.sales().iter().find(|s| s.id == id).unwrap().commission_pct;

    // `total` alone: the service recalculates the commission.
    let u = SaleUpdate { total: Some(12_345), ..Default::default() };
    let sale = c.update_sale(id, &u).await.unwrap().value.unwrap().data;
    assert_eq!(sale.total, Some(12_345));
    assert_eq!(sale.commission, Some((12_345 * pct + 50) / 100));

    // `commission` given: used as is. `customer_email: null` clears it; other fields stay.
    let u = SaleUpdate {
        total: Some(20_000),
        commission: Some(777),
        customer_email: Patch::Clear,
        currency: Some(Currency::Gbp),
        status: Some(SaleStatus::Paid),
        occurred_at: Some(DateInput::Iso("2026-01-02T03:04:05Z".into())),
        ..Default::default()
    };
    let sale = c.update_sale(id, &u).await.unwrap().value.unwrap().data;
    assert_eq!((sale.total, sale.commission, sale.currency), (Some(20_000), Some(777), Some(Currency::Gbp)));
    assert_eq!(sale.status, SaleStatus::Paid);
    let stored = emu.state.sales().into_iter().find(|s| s.id == id).unwrap();
    assert_eq!(stored.customer_email, None);
    assert!(stored.customer_name.is_some());

    // Every successful update is in the write log with its body.
    let log: Vec<_> = emu.state.writes().into_iter().filter(|w| w.outcome == "updated").collect();
    assert_eq!(log.len(), 2);
    assert_eq!(log[1].body["customer_email"], serde_json::Value::Null);
    assert!(log[0].body.get("commission").is_none(), "only the fields set are sent");

    let cancelled = first_sale(&emu, |s| s.org == MAIN_ORG && s.status == SaleStatus::Cancelled);
    let err = c.update_sale(cancelled, &u).await.unwrap_err().error;
    assert_eq!(err.server_message(), Some("Cancelled sales cannot be updated."), "{err}");
    assert_eq!(err.status(), Some(422));

    let storefront = first_sale(&emu, |s| s.org == MAIN_ORG && !s.updatable());
    let err = c.update_sale(storefront, &u).await.unwrap_err().error;
    assert_eq!(err.server_message(), Some("Only sales created via the public API (website platform) can be updated."));

    let foreign = first_sale(&emu, |s| s.org == OTHER_ORG);
    for target in [foreign, 999_999] {
        let err = c.update_sale(target, &u).await.unwrap_err().error;
        assert!(matches!(&err, ApiError::NotFound { message, .. } if message == "Sale not found"), "{err:?}");
    }

    let ro = client(&emu.base_url, READ_ONLY_KEY, fast());
    let err = ro.update_sale(id, &u).await.unwrap_err().error;
    assert!(matches!(err, ApiError::Forbidden { .. }), "{err:?}");
    assert!(err.to_string().contains("This API key is read-only and cannot modify data."));
    assert!(err.is_auth());

    // Invalid values: a 4xx with `error`, nothing changed.
    let url = format!("{}/affiliate_sales/{id}", emu.base_url);
    let (status, body) = raw("PATCH", &url, Some(FULL_KEY), Some(r#"{"currency":"jpy"}"#)).await;
    assert_eq!(status, 422);
    assert!(body["error"].as_str().unwrap().contains("usd, eur, gbp"));
    let (status, _) = raw("PATCH", &url, Some(FULL_KEY), Some(r#"{"total":12.5}"#)).await;
    assert_eq!(status, 422);
    assert_eq!(emu.state.sales().into_iter().find(|s| s.id == id).unwrap(), stored);
}

#[tokio::test]
async fn payout_marks_follow_the_five_rules() {
    let emu = emulator(EmulatorConfig::for_tests(10)).await;
    let c = client(&emu.base_url, FULL_KEY, fast());
    let payouts = emu.state.payouts();
    let of = |kind: PayoutKind, org: u32| payouts.iter().find(|p| p.kind == kind && p.org == org).unwrap().uuid.clone();

    let due = of(PayoutKind::DueCredit, MAIN_ORG);
    match c.mark_credit_payout(&due).await.unwrap() {
        MarkOutcome::Marked(r) => {
            let v = r.value.unwrap();
            assert!(v.success);
            assert_eq!(v.creator_payout.status, "Paid externally");
            assert_eq!(v.creator_payout.uuid, due);
        }
        other => panic!("expected Marked, got {other:?}"),
    }
    // Marking again is the documented no-op.
    match c.mark_credit_payout(&due).await.unwrap() {
        MarkOutcome::AlreadyPaid { status, message, resent } => {
            assert!((400..500).contains(&status));
            assert_eq!(message, "Cannot mark payout as paid: current status is paid_externally");
            assert!(!resent, "no answer was lost");
        }
        other => panic!("expected AlreadyPaid, got {other:?}"),
    }
    let pending = of(PayoutKind::PendingRequirementsCredit, MAIN_ORG);
    assert!(matches!(c.mark_credit_payout(&pending).await.unwrap(), MarkOutcome::Marked(_)));

    let zero = c.mark_credit_payout(&of(PayoutKind::ZeroCredit, MAIN_ORG)).await.unwrap_err().error;
    assert_eq!(zero.server_message(), Some("Only credit payouts can be marked paid via this endpoint"));
    let mixed = c.mark_credit_payout(&of(PayoutKind::Mixed, MAIN_ORG)).await.unwrap_err().error;
    assert!(mixed.server_message().unwrap().contains("cash and credits"), "{mixed}");
    for uuid in [of(PayoutKind::DueCredit, OTHER_ORG), "00000000-0000-4000-8000-000000000000".into()] {
        let err = c.mark_credit_payout(&uuid).await.unwrap_err().error;
        assert!(matches!(&err, ApiError::NotFound { message, .. } if message == "Creator payout not found"));
    }
    let ro = client(&emu.base_url, READ_ONLY_KEY, fast());
    assert!(matches!(ro.mark_credit_payout(&pending).await.unwrap_err().error, ApiError::Forbidden { .. }));

    let url = format!("{}/stats/mark_credit_payout", emu.base_url);
    // A raw request bypasses the client's pacing, so keep the 2 s mark rule by hand.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (status, body) = raw("POST", &url, Some(FULL_KEY), Some("{}")).await;
    assert_eq!((status, body["error"].as_str().unwrap()), (422, "creator_payout_uuid is required"));

    // The write log holds every attempt with its outcome.
    let marks: Vec<_> = emu.state.writes().into_iter().filter(|w| w.operation == "mark_credit_payout").collect();
    assert_eq!(marks.iter().filter(|w| w.outcome == "marked").count(), 2);
}

#[tokio::test]
async fn payouts_list_filters_and_pages() {
    let emu = emulator(EmulatorConfig::for_tests(10)).await;
    let c = client(&emu.base_url, FULL_KEY, fast());
    let today = Utc::now().date_naive();
    let q = PayoutsQuery {
        start_date: today - Days::days(365),
        end_date: today,
        credits_only: true,
        status: Some("due".into()),
        campaign_id: None,
        creator_id: None,
        page: 1,
        per_page: 500,
    };
    let page = c.list_creator_payouts(&q).await.unwrap();
    assert_eq!(page.query.iter().find(|(k, _)| k == "per_page").unwrap().1, "40", "per_page is capped at 40");
    let truth = emu
        .state
        .payouts()
        .into_iter()
        .filter(|p| p.org == MAIN_ORG && p.status == "due" && p.total_credit_amount > 0.0)
        .count();
    assert_eq!(page.value.meta.row_count as usize, truth);
    assert!(page.value.data.iter().all(|p| p.status == "Due" && p.total_credit_amount.unwrap() > 0.0));
    assert!(page.value.data.iter().all(|p| p.since_date.as_deref().unwrap().contains('/')));

    let default = format!("{}/stats/creator_payouts?start_date={}&end_date={}", emu.base_url, q.start_date, q.end_date);
    let (status, body) = raw("GET", &default, Some(FULL_KEY), None).await;
    assert_eq!(status, 200);
    assert_eq!(body["data"].as_array().unwrap().len(), 4, "default page size is 4");
    let bad = format!("{}/stats/creator_payouts?start_date=01/01/2026&end_date=2026-02-01", emu.base_url);
    let (status, body) = raw("GET", &bad, Some(FULL_KEY), None).await;
    assert_eq!((status, body["error"].as_str().unwrap()), (400, "Dates should be in YYYY-MM-DD format"));
}

/// Each fault kind alone, on every request: retried up to the limit, then a clear typed error.
#[tokio::test]
async fn every_injected_fault_is_retried_then_surfaces_clearly() {
    let cases = [
        (Fault::ServerErrorHtml, "500"),
        (Fault::Unavailable, "503"),
        (Fault::TooManyRequests, "429"),
        (Fault::Slow, "timed out"),
        (Fault::ClosedMidBody, "connection"),
        (Fault::TruncatedJson, "not the expected JSON"),
    ];
    for (fault, expect) in cases {
        let mut cfg = EmulatorConfig::for_tests(20);
        cfg.faults.rate = 1.0;
        cfg.faults.kinds = vec![fault];
        cfg.faults.slow = Duration::from_millis(1500);
        let emu = emulator(cfg).await;
        let mut ccfg = creator_etl::api::ClientConfig::new(
            emu.base_url.parse().unwrap(),
            creator_etl::api::ApiKey::new(FULL_KEY, "test").unwrap(),
        );
        ccfg.pacing = fast();
        ccfg.retry.max_attempts = 3;
        ccfg.retry.base_backoff = Duration::from_millis(10);
        ccfg.request_timeout = Duration::from_millis(500);
        let c = creator_etl::api::Client::new(ccfg).unwrap();
        let err = c.list_applications(&ApplicationsQuery::page(ApplicationStatus::Accepted, 1)).await.unwrap_err();
        let text = err.to_string();
        assert!(text.contains(expect) && text.contains("3 attempts"), "{fault:?}: {text}");
        assert!(err.is_transient(), "{fault:?}");
        assert_eq!(emu.state.requests_to("GET /campaign_applications"), 3, "{fault:?} was tried 3 times");
        assert_eq!(c.metrics().retries, 2);
        if fault == Fault::ServerErrorHtml {
            assert!(text.contains("something went wrong"), "the HTML page's text is shown: {text}");
        }
    }
}

/// With a 20 % mixed fault rate a full crawl still equals the truth.
#[tokio::test]
async fn mixed_faults_do_not_change_the_result() {
    let mut cfg = EmulatorConfig::for_tests(400);
    cfg.faults.rate = 0.2;
    cfg.faults.slow = Duration::from_millis(50);
    let emu = emulator(cfg).await;
    let c = client_with(&emu.base_url, FULL_KEY, fast(), 10);
    let mut got = crawl(&c).await;
    got.sort_by_key(|a| a.id);
    let mut truth = emu.state.applications(MAIN_ORG);
    truth.sort_by_key(|a| a.id);
    assert_eq!(got, truth);
    assert!(c.metrics().retries > 0, "faults were injected and retried");
    assert!(emu.state.requests().iter().any(|r| r.fault.is_some()));
}

/// A service that answers with values this version does not know, and fields it has not seen.
#[tokio::test]
async fn unknown_enum_values_and_fields_are_tolerated() {
    use axum::routing::get;
    let page = serde_json::json!({
        "data": [{
            "id": 1, "status": "on_hold", "campaign_id": 2, "campaign_name": "C", "user_id": 3,
            "creator_name": "Ann", "email": null, "signup_source": "partner_portal",
            "connected_accounts": [{"id": 9, "provider": "instagram", "username": null,
                                    "monthly_post_count": 4, "follower_count": 1200}],
            "applied_at": "2026-01-02T03:04:05.123+02:00", "new_field": {"nested": true}
        }],
        "meta": {"row_count": 1, "page_count": 1, "current_page": 1, "per_page": 100, "extra": 1}
    });
    let app = axum::Router::new().route(
        "/v1/campaign_applications",
        get(move || {
            let page = page.clone();
            async move { axum::Json(page) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let c = client(&format!("http://{addr}/v1"), "any", fast());
    let got = c.list_applications(&ApplicationsQuery::page(ApplicationStatus::Pending, 1)).await.unwrap().value;
    let a = &got.data[0];
    assert_eq!(a.status, ApplicationStatus::Other("on_hold".into()));
    assert_eq!(a.signup_source, SignupSource::Other("partner_portal".into()));
    assert_eq!(a.connected_accounts[0].provider, Provider::Other("instagram".into()));
    assert_eq!(a.applied_at.to_rfc3339(), "2026-01-02T01:04:05.123+00:00");
}

/// `--drift`: applications appear and leave `pending` while a client pages, as on the real service.
#[tokio::test]
async fn drift_inserts_and_moves_applications_while_paging() {
    let mut cfg = EmulatorConfig::for_tests(600);
    cfg.drift = true;
    let emu = emulator(cfg).await;
    let c = client(&emu.base_url, FULL_KEY, fast());
    let before = emu.state.applications(MAIN_ORG).len();
    for page in 1..=10 {
        c.list_applications(&ApplicationsQuery {
            per_page: 10,
            ..ApplicationsQuery::page(ApplicationStatus::Pending, page)
        })
        .await
        .unwrap();
    }
    let events = emu.state.drift_events();
    let truth = emu.state.applications(MAIN_ORG);
    let inserted: Vec<i64> = events
        .iter()
        .filter_map(|e| match e {
            creator_etl::emulator::DriftEvent::Inserted { id } => Some(*id),
            _ => None,
        })
        .collect();
    assert!(!inserted.is_empty() && events.len() > inserted.len(), "both kinds happened: {events:?}");
    assert_eq!(truth.len(), before + inserted.len());
    for e in &events {
        if let creator_etl::emulator::DriftEvent::Moved { id, to, .. } = e {
            assert_eq!(&truth.iter().find(|a| a.id == *id).unwrap().status, to);
        }
    }
    // New applications are the newest: they lead the pending list.
    let first = c.list_applications(&ApplicationsQuery::page(ApplicationStatus::Pending, 1)).await.unwrap().value;
    assert!(first.data.windows(2).all(|w| w[0].applied_at >= w[1].applied_at));
    assert!(first.data.iter().any(|a| inserted.contains(&a.id)));
}

/// Serves `router` on 127.0.0.1:0 for the rest of the test; returns its API base URL.
async fn serve(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}/api/public/v1")
}

fn writes_client(base: &str, max_attempts: u32) -> creator_etl::api::Client {
    client_with(base, FULL_KEY, fast(), max_attempts)
}

/// Regression: a 2xx to a PATCH whose body did not parse was retried up to six times and ended
/// `failed_transient`. Any 2xx ends a write: applied, with what could be read of the answer.
#[tokio::test]
async fn a_2xx_write_ends_its_retries_whatever_its_body() {
    for fault in [Fault::TruncatedJson, Fault::ClosedMidBody] {
        let mut cfg = EmulatorConfig::for_tests(10);
        cfg.faults.rate = 1.0;
        cfg.faults.kinds = vec![fault];
        let emu = emulator(cfg).await;
        let id = first_sale(&emu, |s| s.org == MAIN_ORG && s.updatable() && s.status != SaleStatus::Cancelled);
        let w = writes_client(&emu.base_url, 6)
            .update_sale(id, &SaleUpdate { total: Some(4_242), ..Default::default() })
            .await
            .unwrap();
        assert!(w.value.is_none() && w.unreadable.is_some(), "{fault:?}: {w:?}");
        assert_eq!((w.status, w.attempts, w.resent), (200, 1, false), "{fault:?}");
        assert_eq!(emu.state.requests_to("PATCH /affiliate_sales/{id}"), 1, "{fault:?}: sent once");
        assert_eq!(emu.state.sales().into_iter().find(|s| s.id == id).unwrap().total, 4_242);
    }
}

/// A write whose answer is lost every time is in doubt: the error says the write may have taken
/// effect, and the service did apply it.
#[tokio::test]
async fn a_write_whose_answers_are_lost_is_in_doubt() {
    let mut cfg = EmulatorConfig::for_tests(10);
    cfg.faults.rate = 1.0;
    cfg.faults.kinds = vec![Fault::LostAnswer];
    // Lost before any status arrived (a cut 200 would be an answer: applied).
    cfg.faults.lost = vec![creator_etl::emulator::LostKind::Dropped, creator_etl::emulator::LostKind::BadGateway];
    let emu = emulator(cfg).await;
    let id = first_sale(&emu, |s| s.org == MAIN_ORG && s.updatable() && s.status != SaleStatus::Cancelled);
    let err = writes_client(&emu.base_url, 3)
        .update_sale(id, &SaleUpdate { total: Some(777), ..Default::default() })
        .await
        .unwrap_err();
    assert!(err.in_doubt && err.error.is_transient(), "{err:?}");
    assert_eq!(emu.state.requests_to("PATCH /affiliate_sales/{id}"), 3);
    assert_eq!(emu.state.sales().into_iter().find(|s| s.id == id).unwrap().total, 777, "it took effect");
    // Reads are never "in doubt": a lost read is simply retried.
    let c = writes_client(&emu.base_url, 2);
    c.list_applications(&ApplicationsQuery::page(ApplicationStatus::Pending, 1)).await.unwrap();
}

/// A 503 with `Retry-After` is honoured like a 429: the retry arrives no sooner than asked.
#[tokio::test]
async fn a_503_retry_after_is_honoured() {
    let mut cfg = EmulatorConfig::for_tests(10);
    cfg.faults.rate = 1.0;
    cfg.faults.kinds = vec![Fault::Unavailable];
    let emu = emulator(cfg).await;
    let err = writes_client(&emu.base_url, 2)
        .list_applications(&ApplicationsQuery::page(ApplicationStatus::Pending, 1))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(503));
    let at: Vec<f64> = emu.state.requests().iter().map(|r| r.at_ms).collect();
    assert_eq!(at.len(), 2);
    assert!(at[1] - at[0] >= 1000.0, "the retry waited out `Retry-After: 1`: {:.0} ms", at[1] - at[0]);
}

/// A body over the limit is a clear error, not an allocation; it is not retried.
#[tokio::test]
async fn response_bodies_have_a_size_limit() {
    let emu = emulator(EmulatorConfig::for_tests(300)).await;
    let mut cfg = creator_etl::api::ClientConfig::new(
        emu.base_url.parse().unwrap(),
        creator_etl::api::ApiKey::new(FULL_KEY, "test").unwrap(),
    );
    cfg.pacing = fast();
    cfg.max_body_bytes = 2_000;
    let c = creator_etl::api::Client::new(cfg).unwrap();
    let err = c.list_applications(&ApplicationsQuery::page(ApplicationStatus::Pending, 1)).await.unwrap_err();
    assert!(matches!(err, ApiError::TooLarge { limit: 2_000, .. }), "{err:?}");
    assert!(err.to_string().contains("larger than the 2000-byte limit"), "{err}");
    assert_eq!(emu.state.requests().len(), 1);
}

/// Regression: a `page_count` that disagreed with `row_count` was believed, so a lying or broken
/// server could make the crawl plan 2^64 pages. It is a protocol error now.
#[tokio::test]
async fn a_page_count_that_disagrees_is_a_protocol_error() {
    let router = axum::Router::new().route(
        "/api/public/v1/campaign_applications",
        axum::routing::get(|| async {
            axum::Json(serde_json::json!({
                "data": [],
                "meta": {"row_count": 5, "page_count": u64::MAX, "current_page": 1}
            }))
        }),
    );
    let base = serve(router).await;
    let err = writes_client(&base, 3)
        .list_applications(&ApplicationsQuery::page(ApplicationStatus::Pending, 1))
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Protocol { .. }), "{err:?}");
    assert!(err.to_string().contains("`page_count` 18446744073709551615 disagrees with `row_count` 5"), "{err}");
    assert!(!err.is_transient());
}

/// Writes never follow a redirect: the write is refused with the redirect named, and nothing
/// is sent where it points.
#[tokio::test]
async fn writes_follow_no_redirects() {
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counted = hits.clone();
    let router = axum::Router::new()
        .route(
            "/api/public/v1/affiliate_sales/{id}",
            axum::routing::patch(|| async {
                (axum::http::StatusCode::TEMPORARY_REDIRECT, [(axum::http::header::LOCATION, "/elsewhere")])
            }),
        )
        .route(
            "/elsewhere",
            axum::routing::patch(move || {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async { "{}" }
            }),
        );
    let base = serve(router).await;
    let err =
        writes_client(&base, 3).update_sale(1, &SaleUpdate { total: Some(1), ..Default::default() }).await.unwrap_err();
    assert!(matches!(err.error, ApiError::Redirected { status: 307, .. }), "{err:?}");
    assert!(!err.in_doubt);
    assert!(err.error.to_string().contains("writes never follow redirects"), "{}", err.error);
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
}

/// Ctrl-C stops an extract after the requests in flight, as the manual says: each of them is
/// answered and landed, none is abandoned, and the run exits 130.
#[test]
fn ctrl_c_lands_the_requests_in_flight() {
    let mut cfg = EmulatorConfig::for_tests(2500);
    cfg.latency = Duration::from_millis(800);
    let emu = TestEmu::start(cfg);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let args = ["extract", "--base-url", &emu.base_url, "--out", out.to_str().unwrap(), "--concurrency", "4"];
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_creator-etl"))
        .args(args)
        .args(["--since-days", "5"])
        .env("CREATOR_API_KEY", FULL_KEY)
        .env("CREATOR_MIN_INTERVAL_MS", "0")
        .env("CREATOR_HOURLY_CAP", "0")
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Pages go out up to 4 at once after the six first pages: wait for two in flight.
    let started = std::time::Instant::now();
    while emu.state.requests().iter().filter(|r| r.status == 0).count() < 2 {
        assert!(started.elapsed() < Duration::from_secs(60), "no two requests were ever in flight");
        std::thread::sleep(Duration::from_millis(10));
    }
    let kill = std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let o = child.wait_with_output().unwrap();
    assert_exit(&args, &o, 130);
    let requests = emu.state.requests();
    assert!(requests.iter().all(|r| r.status == 200), "a request was abandoned: {requests:?}");
    let runs: Vec<_> = std::fs::read_dir(out.join("raw")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let landed = creator_etl::extract::raw::read_run(&runs[0]).unwrap();
    assert_eq!(landed.len(), requests.len(), "every answer that came is landed");
}

/// A spent request budget is its own error, naming the budget; retries count against it, and
/// nothing more is sent. A write it stops is in doubt only when an earlier attempt lost its answer.
#[tokio::test]
async fn a_spent_budget_is_its_own_error_and_sends_nothing_more() {
    let budgeted = |base: &str, max: u64| {
        let mut cfg = creator_etl::api::ClientConfig::new(
            base.parse().unwrap(),
            creator_etl::api::ApiKey::new(FULL_KEY, "test").unwrap(),
        );
        cfg.pacing = fast();
        cfg.retry.max_attempts = 5;
        cfg.retry.base_backoff = Duration::from_millis(10);
        cfg.max_requests = Some(max);
        creator_etl::api::Client::new(cfg).unwrap()
    };
    let page = ApplicationsQuery::page(ApplicationStatus::Accepted, 1);
    let emu = emulator(EmulatorConfig::for_tests(20)).await;
    let c = budgeted(&emu.base_url, 2);
    for _ in 0..2 {
        c.list_applications(&page).await.unwrap();
    }
    let err = c.list_applications(&page).await.unwrap_err();
    assert!(matches!(err, ApiError::BudgetSpent { max: 2, .. }), "{err:?}");
    assert!(err.to_string().starts_with("request budget of 2 spent before the request to `"), "{err}");
    assert!(!err.is_transient() && !err.is_auth() && err.is_stop());
    let write = c.mark_credit_payout("00000000-0000-4000-8000-000000000000").await.unwrap_err();
    assert!(matches!(write.error, ApiError::BudgetSpent { max: 2, .. }) && !write.in_doubt, "{write:?}");
    assert_eq!(emu.state.requests().len(), 2, "nothing is sent past the budget");

    // Every attempt counts: two refused attempts spend a budget of two, and a write whose
    // answers were lost stays in doubt.
    let mut cfg = EmulatorConfig::for_tests(20);
    cfg.faults.rate = 1.0;
    cfg.faults.kinds = vec![Fault::ServerErrorHtml];
    let emu = emulator(cfg).await;
    let err = budgeted(&emu.base_url, 2).list_applications(&page).await.unwrap_err();
    assert!(matches!(err, ApiError::BudgetSpent { max: 2, .. }), "{err:?}");
    let write =
        budgeted(&emu.base_url, 2).mark_credit_payout("00000000-0000-4000-8000-000000000000").await.unwrap_err();
    assert!(matches!(write.error, ApiError::BudgetSpent { max: 2, .. }) && write.in_doubt, "{write:?}");
    assert_eq!(emu.state.requests().len(), 4);
}
