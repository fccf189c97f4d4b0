//! Sending one row and reading its answer: any 2xx is `applied`; after a lost answer, the
//! answer to the re-send is read as evidence of whether the first attempt took effect
//! ([`settle`]).

use super::reviewed::{ReviewedRow, Target};
use super::{RowOutcome, RowResult};
use crate::api::{ApiError, Client, MarkOutcome, WriteError, Written};

/// What the operator should look at to settle a row in doubt.
pub(super) fn check_hint(row: &ReviewedRow) -> String {
    match &row.target {
        Target::Sale(id) => format!("whether sale {id} shows {} in the dashboard", row.changes()),
        Target::Payout(uuid) => format!("whether payout {uuid} shows paid externally in the dashboard"),
    }
}

fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.chars().take(300).collect()
}

/// Sends one row and classifies the answer. `resent` says an earlier attempt of this row, in a
/// run that died or ended in doubt, may have taken effect. Returns the error that stops the run
/// (401, 403, Ctrl-C), if any.
pub(super) async fn send(client: &Client, row: &ReviewedRow, result: &mut RowResult, resent: bool) -> Option<ApiError> {
    let failure = match (&row.target, &row.update) {
        (Target::Sale(id), Some(update)) => match client.update_sale(*id, update).await {
            Ok(w) => {
                applied(result, &w, resent);
                if let Some(sale) = &w.value {
                    result.result_total = sale.data.total;
                    result.result_commission = sale.data.commission;
                    result.result_status = Some(sale.data.status.to_string());
                }
                return None;
            }
            Err(e) => e,
        },
        (Target::Payout(uuid), _) => match client.mark_credit_payout(uuid).await {
            Ok(MarkOutcome::Marked(w)) => {
                applied(result, &w, resent);
                result.result_status = w.value.as_ref().map(|v| v.creator_payout.status.clone());
                return None;
            }
            Ok(MarkOutcome::AlreadyPaid { status, message, resent: lost_now }) => {
                result.http_status = Some(status);
                if resent || lost_now {
                    result.outcome = RowOutcome::Applied;
                    result.message = Some(format!(
                        "took effect: an earlier attempt's answer was lost, and the re-send was answered `{message}`"
                    ));
                } else {
                    result.outcome = RowOutcome::Noop;
                    result.message = Some(message);
                }
                return None;
            }
            Err(e) => e,
        },
        (Target::Sale(_), None) => unreachable!("validation gives every update_sale row a body"),
    };
    let WriteError { error, in_doubt } = failure;
    if error.is_stop() && !in_doubt {
        // Stopped (Ctrl-C, a budget, a deadline) before this attempt went out, or after attempts
        // that were answered and took no effect (a 429): this run sent nothing that could have
        // taken effect, so the row stays as the journal had it, a re-send included.
        result.outcome = RowOutcome::NotSent;
        result.message = Some(if resent {
            "not sent: the run stopped first; the earlier attempt's answer is still lost, and the next apply sends it again".into()
        } else {
            "not sent: the run stopped first; the next apply sends it".into()
        });
        return Some(error);
    }
    settle(row, result, &error, resent || in_doubt);
    (error.is_auth() || error.is_stop()).then_some(error)
}

/// A 2xx: applied, whether or not the body could be read.
fn applied<T>(result: &mut RowResult, w: &Written<T>, resent: bool) {
    result.outcome = RowOutcome::Applied;
    result.http_status = Some(w.status);
    result.response_excerpt = Some(excerpt(&w.raw));
    let mut notes = vec![];
    if let Some(why) = &w.unreadable {
        notes.push(format!("the service accepted it ({}), but its answer could not be read: {why}", w.status));
    }
    if resent || w.resent {
        notes.push("an earlier attempt's answer was lost; this answer is to the re-send".to_owned());
    }
    result.message = (!notes.is_empty()).then(|| notes.join("; "));
}

/// The outcome of a row the service did not accept. Without a lost answer: `failed`, or
/// `failed_transient` when retries could not get past 429s, 5xx or the network. After a lost
/// answer, the refusal is read as evidence about the earlier attempt.
fn settle(row: &ReviewedRow, result: &mut RowResult, error: &ApiError, lost: bool) {
    result.http_status = error.status();
    let said = error.server_message().map_or_else(|| error.to_string(), str::to_owned);
    if !lost {
        result.outcome = if error.is_transient() { RowOutcome::FailedTransient } else { RowOutcome::Failed };
        result.message = Some(said);
        return;
    }
    let cancels = row.update.as_ref().is_some_and(|u| u.status == Some(crate::api::models::SaleStatus::Cancelled));
    let cancelled_refusal = said.to_ascii_lowercase().contains("cancelled sales cannot be updated");
    // Refusals of the row itself (its target or its values), which the earlier attempt met too.
    let refusal = matches!(error.status(), Some(400 | 404 | 405 | 410 | 413 | 415 | 422));
    if cancels && cancelled_refusal {
        result.outcome = RowOutcome::Applied;
        result.message = Some(format!(
            "took effect: an earlier attempt's answer was lost, and the re-send was answered `{said}`: the sale is cancelled, as the row asked"
        ));
    } else if refusal && !cancelled_refusal {
        // 404, an invalid value, a sale or payout of the wrong kind: the earlier attempt met the
        // same refusal, so nothing took effect.
        result.outcome = RowOutcome::Failed;
        result.message = Some(format!("{said} (an earlier attempt's answer was lost; it met the same refusal)"));
    } else {
        result.outcome = RowOutcome::InDoubt;
        result.message = Some(format!(
            "an earlier attempt's answer was lost, and no later answer settled whether it took effect (last: {said}); check {}; if it is not there, apply with `--retry-failed`",
            check_hint(row)
        ));
    }
}
