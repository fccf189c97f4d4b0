//! `PATCH /affiliate_sales/{id}`: validates every field of an update, applies it only when all
//! are valid (a new total without a commission recalculates it), and records the write.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use serde_json::Value;

use super::{error, Shared};
use crate::api::models::{Currency, Sale, SaleEnvelope, SaleStatus};
use crate::emulator::state::{Caller, WriteRecord};

/// The largest amount the emulator accepts, in cents: far above any real sale, and small enough
/// that the commission arithmetic cannot overflow.
const MAX_CENTS: i64 = 1_000_000_000_000;

/// A validated update, applied only when every field is valid.
#[derive(Default)]
struct ValidUpdate {
    total: Option<i64>,
    subtotal: Option<i64>,
    commission: Option<i64>,
    currency: Option<Currency>,
    occurred_at: Option<DateTime<Utc>>,
    due_at: Option<Option<DateTime<Utc>>>,
    customer_email: Option<Option<String>>,
    customer_name: Option<Option<String>>,
    status: Option<SaleStatus>,
    sub_id: Option<Option<String>>,
}

fn parse_when(v: &Value) -> Option<DateTime<Utc>> {
    match v {
        Value::Number(n) => n.as_i64().and_then(|s| Utc.timestamp_opt(s, 0).single()),
        Value::String(s) => DateTime::parse_from_rfc3339(s).map(|t| t.with_timezone(&Utc)).ok().or_else(|| {
            NaiveDate::parse_from_str(s, "%Y-%m-%d")
                .ok()
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .map(|t| Utc.from_utc_datetime(&t))
        }),
        _ => None,
    }
}

fn validate_update(body: &serde_json::Map<String, Value>) -> Result<ValidUpdate, String> {
    let mut u = ValidUpdate::default();
    let cents = |name: &str| -> Result<Option<i64>, String> {
        match body.get(name) {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .filter(|n| (0..=MAX_CENTS).contains(n))
                .map(Some)
                .ok_or_else(|| format!("{name} must be an integer amount in cents between 0 and {MAX_CENTS}")),
        }
    };
    let text = |name: &str| -> Result<Option<Option<String>>, String> {
        match body.get(name) {
            None => Ok(None),
            Some(Value::Null) => Ok(Some(None)),
            Some(Value::String(s)) => Ok(Some(Some(s.clone()))),
            Some(_) => Err(format!("{name} must be a string or null")),
        }
    };
    u.total = cents("total")?;
    u.subtotal = cents("subtotal")?;
    u.commission = cents("commission")?;
    if let Some(v) = body.get("currency") {
        let c = v.as_str().map(Currency::parse).filter(Currency::is_known);
        u.currency = Some(c.ok_or_else(|| format!("currency must be one of {}", Currency::known_list()))?);
    }
    if let Some(v) = body.get("status") {
        let s = v.as_str().map(SaleStatus::parse).filter(SaleStatus::is_known);
        u.status = Some(s.ok_or_else(|| format!("status must be one of {}", SaleStatus::known_list()))?);
    }
    if let Some(v) = body.get("occurred_at") {
        u.occurred_at = Some(parse_when(v).ok_or("occurred_at must be an ISO 8601 date-time or a Unix timestamp")?);
    }
    if let Some(v) = body.get("due_at") {
        u.due_at = Some(match v {
            Value::Null => None,
            v => Some(parse_when(v).ok_or("due_at must be an ISO 8601 date-time or a Unix timestamp")?),
        });
    }
    u.customer_email = text("customer_email")?;
    u.customer_name = text("customer_name")?;
    u.sub_id = text("sub_id")?;
    Ok(u)
}

pub(super) async fn update_sale(
    State(st): State<Shared>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let record = |status: StatusCode, outcome: String, sale: Option<Sale>| WriteRecord {
        at: Utc::now(),
        at_ms: st.elapsed_ms(),
        key: caller.role,
        operation: "update_sale",
        target: id.clone(),
        body: parsed.clone(),
        status: status.as_u16(),
        outcome,
        sale,
    };
    let fail = |status: StatusCode, msg: &str| {
        st.record_write(record(status, msg.to_owned(), None));
        error(status, msg)
    };
    let mut store = st.store();
    let sale = id.parse::<i64>().ok().and_then(|i| store.sales.get_mut(&i)).filter(|s| s.org == caller.org);
    let Some(sale) = sale else {
        drop(store);
        return fail(StatusCode::NOT_FOUND, "Sale not found");
    };
    if sale.status == SaleStatus::Cancelled {
        drop(store);
        return fail(StatusCode::UNPROCESSABLE_ENTITY, "Cancelled sales cannot be updated.");
    }
    if !sale.updatable() {
        drop(store);
        return fail(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Only sales created via the public API (website platform) can be updated.",
        );
    }
    let Some(obj) = parsed.as_object() else {
        drop(store);
        return fail(StatusCode::UNPROCESSABLE_ENTITY, "Request body must be a JSON object");
    };
    let u = match validate_update(obj) {
        Ok(u) => u,
        Err(m) => {
            drop(store);
            return fail(StatusCode::UNPROCESSABLE_ENTITY, &m);
        }
    };
    if let Some(t) = u.total {
        sale.total = t;
        if u.commission.is_none() {
            // Rule 1: a new total without commission recalculates it from the campaign's rate.
            sale.commission = (t * sale.commission_pct + 50) / 100;
        }
    }
    if let Some(c) = u.commission {
        sale.commission = c;
    }
    if let Some(v) = u.subtotal {
        sale.subtotal = v;
    }
    if let Some(v) = u.currency {
        sale.currency = v;
    }
    if let Some(v) = u.occurred_at {
        sale.occurred_at = v;
    }
    if let Some(v) = u.due_at {
        sale.due_at = v;
    }
    if let Some(v) = u.customer_email {
        sale.customer_email = v;
    }
    if let Some(v) = u.customer_name {
        sale.customer_name = v;
    }
    if let Some(v) = u.sub_id {
        sale.sub_id = v;
    }
    if let Some(v) = u.status {
        sale.status = v;
    }
    let model = sale.to_model();
    drop(store);
    st.record_write(record(StatusCode::OK, "updated".into(), Some(model.clone())));
    Json(SaleEnvelope { data: model }).into_response()
}
