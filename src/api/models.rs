//! Typed models of the service's resources (SPEC §2 and VENDOR_NOTES), shared by the client and
//! the emulator.
//!
//! Decoding is lenient where the service may evolve: unknown fields are ignored, and an unknown
//! enum value (a new status, a new provider) is kept as [`Other`](ApplicationStatus::Other) with
//! its text instead of failing the whole page. Encoding is exact: the emulator serialises these
//! same types, so what the client decodes is what the service contract says.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Defines a string-valued enum whose unknown values survive as `Other(String)`.
macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($variant,)+
            /// A value this version does not know; kept verbatim.
            Other(String),
        }

        impl $name {
            /// Every known value, in the order the contract lists them.
            pub const KNOWN: &'static [$name] = &[$($name::$variant),+];

            /// The wire spelling.
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => $text,)+
                    $name::Other(s) => s,
                }
            }

            /// Parses a wire value; unknown text becomes `Other`.
            pub fn parse(s: &str) -> Self {
                match s {
                    $($text => $name::$variant,)+
                    other => $name::Other(other.to_owned()),
                }
            }

            /// Whether this is one of the values the contract names.
            pub fn is_known(&self) -> bool {
                !matches!(self, $name::Other(_))
            }

            /// The known values, comma-separated, for messages.
            pub fn known_list() -> String {
                Self::KNOWN.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(", ")
            }

            /// Parses a list of known values, each once in first-seen order; the unknown items
            /// are returned as given, for a message naming them with [`Self::known_list`].
            pub fn parse_known<'a>(items: impl IntoIterator<Item = &'a str>) -> (Vec<Self>, Vec<&'a str>) {
                let (mut known, mut unknown) = (vec![], vec![]);
                for item in items {
                    let v = Self::parse(item.trim());
                    if !v.is_known() {
                        unknown.push(item);
                    } else if !known.contains(&v) {
                        known.push(v);
                    }
                }
                (known, unknown)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Ok($name::parse(&s))
            }
        }
    };
}

string_enum!(
    /// Status of a campaign application (SPEC §3.1). Note the spelling `canceled`.
    ApplicationStatus {
        Pending => "pending",
        Accepted => "accepted",
        Rejected => "rejected",
        Canceled => "canceled",
        PendingContract => "pending_contract",
        PendingPayment => "pending_payment",
    }
);

string_enum!(
    /// Where an application came from.
    SignupSource {
        BrandApi => "brand_api",
        Whitelabel => "whitelabel",
        Marketplace => "marketplace",
    }
);

string_enum!(
    /// Social network of a connected account.
    Provider {
        TikTok => "tik_tok",
    }
);

string_enum!(
    /// Status of an affiliate sale (SPEC §3.2). Note the spelling `cancelled`.
    SaleStatus {
        Unpaid => "unpaid",
        Paid => "paid",
        PaidExternally => "paid_externally",
        Cancelled => "cancelled",
    }
);

string_enum!(
    /// Currency of an affiliate sale.
    Currency {
        Usd => "usd",
        Eur => "eur",
        Gbp => "gbp",
    }
);

/// One creator application to a campaign (SPEC §2.1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Application {
    pub id: i64,
    pub status: ApplicationStatus,
    pub campaign_id: i64,
    pub campaign_name: String,
    pub user_id: i64,
    pub creator_name: String,
    /// `null` for marketplace applicants.
    #[serde(default)]
    pub email: Option<String>,
    pub signup_source: SignupSource,
    #[serde(default)]
    pub connected_accounts: Vec<ConnectedAccount>,
    pub applied_at: DateTime<Utc>,
}

/// An applicant's connected TikTok account.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectedAccount {
    pub id: i64,
    pub provider: Provider,
    #[serde(default)]
    pub username: Option<String>,
    /// Posts in the last 30 days.
    pub monthly_post_count: i64,
}

/// Pagination metadata of a paged list (SPEC §2.2; `per_page` is absent on some endpoints).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageMeta {
    pub row_count: u64,
    pub page_count: u64,
    pub current_page: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_page: Option<u64>,
}

/// Response of `GET /campaign_applications`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApplicationsPage {
    pub data: Vec<Application>,
    pub meta: PageMeta,
}

/// One day of views or likes, compared with the same day a week earlier (SPEC §2.3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContentPoint {
    /// Unix timestamp of the day's UTC midnight.
    pub date: i64,
    /// Unix timestamp of the comparison day, `date` minus seven days.
    pub last_date: i64,
    pub current: i64,
    pub last: i64,
    /// `Views` or `Likes`.
    pub name: String,
    pub total: i64,
    pub last_total: i64,
}

/// The two series of `GET /stats/content_24h_data`. A series the service left out is `None`,
/// so that validation can say so instead of failing to decode.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Content24hData {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub views_24h: Option<Vec<ContentPoint>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub likes_24h: Option<Vec<ContentPoint>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Content24hEnvelope {
    #[serde(default)]
    pub content_24h_data: Content24hData,
}

/// Response of `GET /stats/content_24h_data`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Content24hResponse {
    #[serde(default)]
    pub success: bool,
    #[serde(default)]
    pub data: Content24hEnvelope,
}

/// A body field that can be left alone, cleared with `null`, or set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Patch<T> {
    /// Not sent: the service leaves the field as it is.
    #[default]
    Unchanged,
    /// Sent as `null`: the service clears the field.
    Clear,
    /// Sent with this value.
    Set(T),
}

impl<T> Patch<T> {
    pub fn is_unchanged(&self) -> bool {
        matches!(self, Patch::Unchanged)
    }
}

impl<T: Serialize> Serialize for Patch<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            // Only reached when a caller forgets `skip_serializing_if`; null would clear.
            Patch::Unchanged | Patch::Clear => s.serialize_none(),
            Patch::Set(v) => v.serialize(s),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Patch<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Present-but-null is Clear; an absent field falls back to `Default` (Unchanged).
        Ok(match Option::<T>::deserialize(d)? {
            None => Patch::Clear,
            Some(v) => Patch::Set(v),
        })
    }
}

/// A date as the update operation accepts it: ISO 8601 text or a Unix timestamp.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DateInput {
    Unix(i64),
    Iso(String),
}

/// Body of `PATCH /affiliate_sales/{id}`: every field optional, only those set are sent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SaleUpdate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subtotal: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<Currency>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occurred_at: Option<DateInput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at: Option<DateInput>,
    #[serde(default, skip_serializing_if = "Patch::is_unchanged")]
    pub customer_email: Patch<String>,
    #[serde(default, skip_serializing_if = "Patch::is_unchanged")]
    pub customer_name: Patch<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commission: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<SaleStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_id: Option<String>,
}

impl SaleUpdate {
    /// Whether the body would change nothing.
    pub fn is_empty(&self) -> bool {
        *self == SaleUpdate::default()
    }
}

/// An affiliate sale as the update operation returns it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sale {
    pub id: i64,
    #[serde(default)]
    pub external_id: Option<String>,
    #[serde(default)]
    pub platform: Option<String>,
    pub status: SaleStatus,
    #[serde(default)]
    pub occurred_at: Option<String>,
    #[serde(default)]
    pub total: Option<i64>,
    #[serde(default)]
    pub commission: Option<i64>,
    #[serde(default)]
    pub currency: Option<Currency>,
    #[serde(default)]
    pub sub_id: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SaleEnvelope {
    pub data: Sale,
}

/// Body of `POST /stats/mark_credit_payout`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkPayoutRequest {
    pub creator_payout_uuid: String,
}

/// The payout as the mark operation returns it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MarkedPayout {
    #[serde(default)]
    pub id: Option<i64>,
    pub uuid: String,
    #[serde(default)]
    pub creator_name: Option<String>,
    #[serde(default)]
    pub since_date: Option<String>,
    #[serde(default)]
    pub deal_date: Option<String>,
    /// Human-readable, e.g. `Paid externally`.
    pub status: String,
    #[serde(default)]
    pub amount: Option<String>,
    #[serde(default)]
    pub credits_enabled: Option<bool>,
    #[serde(default)]
    pub credit_name: Option<String>,
    #[serde(default)]
    pub total_credit_amount: Option<f64>,
    #[serde(default)]
    pub formatted_total_credit_amount: Option<String>,
}

/// Response of `POST /stats/mark_credit_payout`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MarkPayoutResponse {
    #[serde(default)]
    pub success: bool,
    pub creator_payout: MarkedPayout,
}

/// A creator payout as `GET /stats/creator_payouts` lists it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CreatorPayout {
    #[serde(default)]
    pub id: Option<i64>,
    pub uuid: String,
    #[serde(default)]
    pub creator_name: Option<String>,
    #[serde(default)]
    pub creator_id: Option<i64>,
    /// Formatted cash amount, e.g. `$0.00`.
    #[serde(default)]
    pub amount: Option<String>,
    #[serde(default)]
    pub deal_date: Option<String>,
    /// `MM/DD/YYYY`.
    #[serde(default)]
    pub since_date: Option<String>,
    #[serde(default)]
    pub campaign_name: Option<String>,
    /// Human-readable, e.g. `Due`, `Paid externally`.
    pub status: String,
    #[serde(default)]
    pub credits_enabled: Option<bool>,
    #[serde(default)]
    pub credit_name: Option<String>,
    #[serde(default)]
    pub total_credit_amount: Option<f64>,
    /// Not in the documented response; present when the service sends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_cash_amount: Option<f64>,
}

/// Pagination metadata of the payouts list (no `per_page`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayoutsMeta {
    pub current_page: u64,
    pub row_count: u64,
    pub page_count: u64,
}

/// Response of `GET /stats/creator_payouts`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PayoutsPage {
    #[serde(default)]
    pub success: bool,
    pub data: Vec<CreatorPayout>,
    pub meta: PayoutsMeta,
}

/// Error body: `error` and/or `message`, plus the rate-limit hints of a 429.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_time: Option<String>,
}

impl ErrorBody {
    pub fn new(error: impl Into<String>) -> Self {
        ErrorBody { error: Some(error.into()), ..Default::default() }
    }

    /// The server's message: `error`, then `message`, joined when both say something different.
    pub fn text(&self) -> Option<String> {
        match (&self.error, &self.message) {
            (Some(e), Some(m)) if e != m => Some(format!("{e}: {m}")),
            (Some(e), _) => Some(e.clone()),
            (None, Some(m)) => Some(m.clone()),
            (None, None) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_status_is_kept_verbatim() {
        let s: ApplicationStatus = serde_json::from_str("\"on_hold\"").unwrap();
        assert_eq!(s, ApplicationStatus::Other("on_hold".into()));
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"on_hold\"");
        assert!(!s.is_known());
    }

    #[test]
    fn patch_distinguishes_absent_null_and_value() {
        let u: SaleUpdate = serde_json::from_str(r#"{"customer_email":null}"#).unwrap();
        assert_eq!(u.customer_email, Patch::Clear);
        assert_eq!(u.customer_name, Patch::Unchanged);
        assert_eq!(serde_json::to_string(&u).unwrap(), r#"{"customer_email":null}"#);
        let u = SaleUpdate { customer_name: Patch::Set("Ann".into()), total: Some(5), ..Default::default() };
        assert_eq!(serde_json::to_string(&u).unwrap(), r#"{"total":5,"customer_name":"Ann"}"#);
    }

    #[test]
    fn error_body_reads_both_fields() {
        let b: ErrorBody = serde_json::from_str(r#"{"message":"bad"}"#).unwrap();
        assert_eq!(b.text().as_deref(), Some("bad"));
        let b: ErrorBody = serde_json::from_str(r#"{"error":"x","message":"y","extra":1}"#).unwrap();
        assert_eq!(b.text().as_deref(), Some("x: y"));
    }
}
