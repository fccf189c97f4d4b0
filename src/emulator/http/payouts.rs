//! Creator payouts: `GET /stats/creator_payouts` lists them, newest deal first, and
//! `POST /stats/mark_credit_payout` marks a credit-only payout as paid (a recorded write).

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use chrono::Utc;
use serde_json::Value;

use super::{error, int_param, parse_date, Params, Shared};
use crate::api::models::{MarkPayoutResponse, MarkedPayout, PayoutsMeta, PayoutsPage};
use crate::emulator::state::{Caller, WriteRecord};

pub(super) async fn mark_credit_payout(
    State(st): State<Shared>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Response {
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let uuid = parsed.get("creator_payout_uuid").and_then(Value::as_str).map(str::trim).unwrap_or_default().to_owned();
    let record = |status: StatusCode, outcome: String| WriteRecord {
        at: Utc::now(),
        at_ms: st.elapsed_ms(),
        key: caller.role,
        operation: "mark_credit_payout",
        target: uuid.clone(),
        body: parsed.clone(),
        status: status.as_u16(),
        outcome,
        sale: None,
    };
    let fail = |status: StatusCode, msg: String| {
        st.record_write(record(status, msg.clone()));
        error(status, msg)
    };
    if uuid.is_empty() {
        return fail(StatusCode::UNPROCESSABLE_ENTITY, "creator_payout_uuid is required".into());
    }
    let mut store = st.store();
    let Some(p) = store.payouts.iter_mut().find(|p| p.org == caller.org && p.uuid.eq_ignore_ascii_case(&uuid)) else {
        drop(store);
        return fail(StatusCode::NOT_FOUND, "Creator payout not found".into());
    };
    if p.status != "due" && p.status != "pending_completing_requirements" {
        let msg = format!("Cannot mark payout as paid: current status is {}", p.status);
        drop(store);
        return fail(StatusCode::UNPROCESSABLE_ENTITY, msg);
    }
    if p.total_credit_amount <= 0.0 {
        drop(store);
        return fail(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Only credit payouts can be marked paid via this endpoint".into(),
        );
    }
    if p.total_cash_amount > 0.0 {
        drop(store);
        return fail(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Cannot mark payout as paid: payouts with both cash and credits must be paid in the dashboard".into(),
        );
    }
    p.status = "paid_externally".into();
    let m = p.to_model();
    drop(store);
    st.record_write(record(StatusCode::OK, "marked".into()));
    let credit = m.total_credit_amount.unwrap_or_default();
    Json(MarkPayoutResponse {
        success: true,
        creator_payout: MarkedPayout {
            id: m.id,
            uuid: m.uuid,
            creator_name: m.creator_name,
            since_date: m.since_date,
            deal_date: m.deal_date,
            status: m.status,
            amount: m.amount,
            credits_enabled: m.credits_enabled,
            credit_name: m.credit_name.clone(),
            total_credit_amount: m.total_credit_amount,
            formatted_total_credit_amount: Some(format!("{credit:.0} {}", m.credit_name.unwrap_or_default())),
        },
    })
    .into_response()
}

pub(super) async fn list_creator_payouts(
    State(st): State<Shared>,
    Extension(caller): Extension<Caller>,
    Query(q): Params,
) -> Response {
    let (Some(start), Some(end)) =
        (parse_date(q.get("start_date"), "%Y-%m-%d"), parse_date(q.get("end_date"), "%Y-%m-%d"))
    else {
        return error(StatusCode::BAD_REQUEST, "Dates should be in YYYY-MM-DD format");
    };
    let ints = (|| {
        Ok::<_, String>((
            int_param(&q, "page")?.unwrap_or(1).max(1) as u64,
            // `limit` is an alias of `per_page`; at most 40.
            int_param(&q, "per_page")?.or(int_param(&q, "limit")?).unwrap_or(4).clamp(1, 40) as u64,
            int_param(&q, "campaign_id")?,
            int_param(&q, "creator_id")?,
        ))
    })();
    let (page, per_page, campaign_id, creator_id) = match ints {
        Ok(v) => v,
        Err(m) => return error(StatusCode::UNPROCESSABLE_ENTITY, m),
    };
    let credits_only = matches!(q.get("credits_only").map(String::as_str), Some("true" | "1"));
    let status = q.get("status").filter(|s| !s.is_empty());
    let store = st.store();
    let campaign_name = campaign_id.and_then(|c| store.campaigns.iter().find(|k| k.id == c).map(|k| k.name.clone()));
    let mut rows: Vec<_> = store
        .payouts
        .iter()
        .filter(|p| p.org == caller.org && p.deal_date >= start && p.deal_date <= end)
        .filter(|p| !credits_only || p.total_credit_amount > 0.0)
        .filter(|p| status.is_none_or(|s| *s == p.status))
        .filter(|p| campaign_id.is_none() || campaign_name.as_deref() == Some(p.campaign_name.as_str()))
        .filter(|p| creator_id.is_none_or(|c| c == p.creator_id))
        .collect();
    rows.sort_by(|a, b| b.deal_date.cmp(&a.deal_date).then(b.id.cmp(&a.id)));
    let row_count = rows.len() as u64;
    let skip = usize::try_from(page.saturating_sub(1).saturating_mul(per_page)).unwrap_or(usize::MAX);
    let data = rows.iter().skip(skip).take(per_page as usize).map(|p| p.to_model()).collect();
    Json(PayoutsPage {
        success: true,
        data,
        meta: PayoutsMeta { current_page: page, row_count, page_count: row_count.div_ceil(per_page) },
    })
    .into_response()
}
