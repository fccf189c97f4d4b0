//! The reviewed CSV: parsed, then every row validated, with every problem reported at once by
//! line and column. Nothing is sent unless the whole file is valid.
//!
//! Format (README § "The reviewed CSV"): a header row naming any of [`COLUMNS`], in any order.
//! An empty cell means "leave unchanged"; `NULL` clears `customer_email` or `customer_name`.
//! Amounts are integer cents. UTF-8 with or without a BOM, comma-separated, RFC 4180 quoting
//! (quoted fields may hold commas and newlines). Line numbers are those of the file, so a
//! quoted newline makes the next row's line number jump, as an editor shows it.

use std::collections::HashMap;
use std::fmt;

use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};
use serde::Serialize;

use crate::api::models::{Currency, DateInput, Patch, SaleStatus, SaleUpdate};

/// Every column the file may have. `action` and `approved` are required.
pub const COLUMNS: [&str; 17] = [
    "action",
    "approved",
    "sale_id",
    "creator_payout_uuid",
    "total",
    "subtotal",
    "currency",
    "occurred_at",
    "due_at",
    "customer_email",
    "customer_name",
    "commission",
    "status",
    "sub_id",
    "reviewer",
    "note",
    "row_id",
];

/// The body fields of `PATCH /affiliate_sales/{id}`, as CSV columns.
const SALE_FIELDS: [&str; 10] = [
    "total",
    "subtotal",
    "currency",
    "occurred_at",
    "due_at",
    "customer_email",
    "customer_name",
    "commission",
    "status",
    "sub_id",
];

/// What a row asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    #[value(name = "update_sale")]
    UpdateSale,
    #[value(name = "mark_payout")]
    MarkPayout,
}

impl ActionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ActionKind::UpdateSale => "update_sale",
            ActionKind::MarkPayout => "mark_payout",
        }
    }
}

impl fmt::Display for ActionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The resource a row changes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    Sale(i64),
    /// Lowercase, hyphenated UUID.
    Payout(String),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Sale(id) => write!(f, "sale {id}"),
            Target::Payout(uuid) => write!(f, "payout {uuid}"),
        }
    }
}

/// A valid row.
#[derive(Clone, Debug, PartialEq)]
pub struct ReviewedRow {
    /// Line of the file where the row starts (the header is line 1).
    pub line: u64,
    /// The row's cells as written, in the header's order, for the results file.
    pub cells: Vec<String>,
    pub approved: bool,
    pub action: ActionKind,
    pub target: Target,
    /// The body to send, for `update_sale` rows (never empty).
    pub update: Option<SaleUpdate>,
    pub reviewer: Option<String>,
    pub note: Option<String>,
    pub row_id: Option<String>,
}

impl ReviewedRow {
    /// The body sent, as JSON: the sale update, or the payout mark's body.
    pub fn body_json(&self) -> String {
        match (&self.update, &self.target) {
            (Some(u), _) => serde_json::to_string(u).expect("updates serialise"),
            (None, Target::Payout(uuid)) => serde_json::json!({ "creator_payout_uuid": uuid }).to_string(),
            (None, Target::Sale(_)) => "{}".into(),
        }
    }

    /// Identity of the change: action, target and normalised fields. Two rows with the same
    /// fingerprint ask for the same write, whatever their file, line or wording.
    pub fn fingerprint(&self) -> String {
        let target = match &self.target {
            Target::Sale(id) => format!("sale={id}"),
            Target::Payout(uuid) => format!("payout={uuid}"),
        };
        format!("{} {target} {}", self.action, self.body_json())
    }

    /// The changes in words, for the plan.
    pub fn changes(&self) -> String {
        let Some(u) = &self.update else { return "mark paid externally".into() };
        let mut parts = vec![];
        let value = serde_json::to_value(u).expect("updates serialise");
        if let Some(map) = value.as_object() {
            for (k, v) in map {
                let v = match v {
                    serde_json::Value::Null => "NULL (clear)".to_owned(),
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                parts.push(format!("{k}={v}"));
            }
        }
        if u.total.is_some() && u.commission.is_none() {
            parts.push("commission recalculated by the service".into());
        }
        parts.join(", ")
    }
}

/// A problem with the file, at a line and, where it is one cell's fault, a column.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RowError {
    pub line: u64,
    /// 1-based column number and name.
    pub column: Option<(usize, String)>,
    pub message: String,
}

impl fmt::Display for RowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.column {
            Some((n, name)) => write!(f, "line {}, column {n} (`{name}`): {}", self.line, self.message),
            None => write!(f, "line {}: {}", self.line, self.message),
        }
    }
}

/// A valid reviewed file.
#[derive(Clone, Debug, PartialEq)]
pub struct Reviewed {
    /// The header as written.
    pub headers: Vec<String>,
    pub rows: Vec<ReviewedRow>,
}

/// Parses and validates a whole file. Never panics, whatever the bytes.
pub fn parse(bytes: &[u8]) -> Result<Reviewed, Vec<RowError>> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let mut reader = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(bytes);
    let mut errors = vec![];
    let mut records = reader.byte_records();

    let header = match records.next() {
        None => {
            return Err(vec![RowError {
                line: 1,
                column: None,
                message: "the file is empty; it needs a header row naming its columns".into(),
            }])
        }
        Some(Err(e)) => return Err(vec![csv_error(&e, 1)]),
        Some(Ok(r)) => r,
    };
    let header_line = header.position().map_or(1, |p| p.line());
    let mut headers = vec![];
    let mut index: HashMap<&'static str, usize> = HashMap::new();
    for (i, raw) in header.iter().enumerate() {
        let name = String::from_utf8_lossy(raw).trim().to_owned();
        let column = Some((i + 1, name.clone()));
        match COLUMNS.iter().find(|c| **c == name.to_ascii_lowercase()) {
            Some(known) if index.contains_key(known) => {
                errors.push(RowError { line: header_line, column, message: format!("column `{known}` appears twice") })
            }
            Some(known) => {
                index.insert(known, i);
            }
            None => errors.push(RowError {
                line: header_line,
                column,
                message: match closest(&name) {
                    Some(c) => format!("unknown column `{name}`; did you mean `{c}`?"),
                    None => format!("unknown column `{name}`; the columns are {}", COLUMNS.join(", ")),
                },
            }),
        }
        headers.push(name);
    }
    let mut missing_required = false;
    for required in ["action", "approved"] {
        if !index.contains_key(required) {
            missing_required = true;
            errors.push(RowError {
                line: header_line,
                column: None,
                message: format!("the header has no `{required}` column"),
            });
        }
    }
    // Rows are still checked after an unknown column (it is left out), so that every problem is
    // reported at once; without `action` or `approved` every row would only repeat that.
    if missing_required {
        return Err(errors);
    }

    let mut rows = vec![];
    let mut last_line = header_line;
    for record in records {
        let record = match record {
            Ok(r) => r,
            Err(e) => {
                errors.push(csv_error(&e, last_line + 1));
                break;
            }
        };
        let line = record.position().map_or(last_line + 1, |p| p.line());
        last_line = line;
        if record.iter().all(|c| c.iter().all(u8::is_ascii_whitespace)) {
            continue; // a blank line, or one of empty cells
        }
        if record.len() != headers.len() {
            errors.push(RowError {
                line,
                column: None,
                message: format!(
                    "{} cells, but the header has {} columns (a comma inside a value needs quotes)",
                    record.len(),
                    headers.len()
                ),
            });
            continue;
        }
        let mut cells = Vec::with_capacity(record.len());
        let mut utf8_ok = true;
        for (i, raw) in record.iter().enumerate() {
            match std::str::from_utf8(raw) {
                Ok(s) => cells.push(s.to_owned()),
                Err(_) => {
                    utf8_ok = false;
                    errors.push(RowError {
                        line,
                        column: Some((i + 1, headers[i].clone())),
                        message: "not valid UTF-8; save the file as UTF-8".into(),
                    });
                    cells.push(String::new());
                }
            }
        }
        if !utf8_ok {
            continue;
        }
        let row = RowParser { line, cells: &cells, index: &index, errors: &mut errors }.row();
        if let Some(row) = row {
            rows.push(row);
        }
    }
    check_conflicts(&rows, &mut errors);
    if errors.is_empty() {
        Ok(Reviewed { headers, rows })
    } else {
        Err(errors)
    }
}

fn csv_error(e: &csv::Error, fallback_line: u64) -> RowError {
    let line = e.position().map_or(fallback_line, |p| p.line());
    RowError { line, column: None, message: format!("not readable as CSV: {e}") }
}

/// The known column nearest to a misspelt one, if it is near enough to be a typo.
fn closest(name: &str) -> Option<&'static str> {
    let name = name.to_ascii_lowercase();
    COLUMNS.iter().map(|c| (strsim::levenshtein(&name, c), *c)).filter(|(d, _)| *d <= 2).min().map(|(_, c)| c)
}

/// Validates one row, pushing its problems.
struct RowParser<'a> {
    line: u64,
    cells: &'a [String],
    index: &'a HashMap<&'static str, usize>,
    errors: &'a mut Vec<RowError>,
}

impl RowParser<'_> {
    /// The trimmed cell of a column; empty when the column is absent.
    fn cell(&self, name: &str) -> &str {
        self.index.get(name).map_or("", |&i| self.cells[i].trim())
    }

    fn error(&mut self, name: &str, message: String) {
        let column = self.index.get(name).map(|&i| (i + 1, name.to_owned()));
        self.errors.push(RowError { line: self.line, column, message });
    }

    fn optional(&self, name: &str) -> Option<String> {
        Some(self.cell(name).to_owned()).filter(|s| !s.is_empty())
    }

    fn row(mut self) -> Option<ReviewedRow> {
        let before = self.errors.len();
        let action = match self.cell("action").to_ascii_lowercase().as_str() {
            "update_sale" => Some(ActionKind::UpdateSale),
            "mark_payout" => Some(ActionKind::MarkPayout),
            "" => {
                self.error("action", "missing; write `update_sale` or `mark_payout`".into());
                None
            }
            other => {
                let other = other.to_owned();
                self.error("action", format!("unknown action `{other}`; write `update_sale` or `mark_payout`"));
                None
            }
        };
        let approved = match self.cell("approved").to_ascii_lowercase().as_str() {
            "yes" | "true" | "1" => true,
            "no" | "false" | "0" | "" => false,
            other => {
                let other = other.to_owned();
                self.error("approved", format!("`{other}` is not yes/no/true/false/1/0 (empty means no)"));
                false
            }
        };
        let (target, update) = match action {
            Some(ActionKind::UpdateSale) => (self.sale_id(), self.sale_update()),
            Some(ActionKind::MarkPayout) => {
                let target = self.payout_uuid();
                for name in std::iter::once("sale_id").chain(SALE_FIELDS) {
                    if !self.cell(name).is_empty() {
                        self.error(name, "applies to `update_sale` rows only; leave it empty for `mark_payout`".into());
                    }
                }
                (target, None)
            }
            None => (None, None),
        };
        if self.errors.len() > before {
            return None;
        }
        Some(ReviewedRow {
            line: self.line,
            cells: self.cells.to_vec(),
            approved,
            action: action?,
            target: target?,
            update,
            reviewer: self.optional("reviewer"),
            note: self.optional("note"),
            row_id: self.optional("row_id"),
        })
    }

    fn sale_id(&mut self) -> Option<Target> {
        if !self.cell("creator_payout_uuid").is_empty() {
            self.error(
                "creator_payout_uuid",
                "applies to `mark_payout` rows only; leave it empty for `update_sale`".into(),
            );
        }
        let raw = self.cell("sale_id").to_owned();
        match raw.parse::<i64>() {
            Ok(id) if id > 0 => Some(Target::Sale(id)),
            _ if raw.is_empty() => {
                self.error("sale_id", "missing; an `update_sale` row needs the sale's id".into());
                None
            }
            _ => {
                self.error("sale_id", format!("`{raw}` is not a sale id (a positive integer)"));
                None
            }
        }
    }

    fn payout_uuid(&mut self) -> Option<Target> {
        let raw = self.cell("creator_payout_uuid").to_owned();
        if raw.is_empty() {
            self.error("creator_payout_uuid", "missing; a `mark_payout` row needs the payout's UUID".into());
            return None;
        }
        match uuid::Uuid::try_parse(&raw) {
            Ok(u) if raw.len() == 36 => Some(Target::Payout(u.hyphenated().to_string())),
            _ => {
                self.error(
                    "creator_payout_uuid",
                    format!("`{raw}` is not a UUID (like 1b4e28ba-2fa1-11d2-883f-0016d3cca427)"),
                );
                None
            }
        }
    }

    /// A non-empty cell through `parse`; its error is the row's problem.
    fn parsed<T>(&mut self, name: &str, parse: fn(&str) -> Result<T, String>) -> Option<T> {
        let raw = self.cell(name).to_owned();
        if raw.is_empty() {
            return None;
        }
        parse(&raw).map_err(|m| self.error(name, m)).ok()
    }

    fn clearable(&mut self, name: &str, check: fn(&str) -> Result<(), String>) -> Patch<String> {
        let raw = self.cell(name).to_owned();
        match raw.as_str() {
            "" => Patch::Unchanged,
            "NULL" => Patch::Clear,
            v => match check(v) {
                Ok(()) => Patch::Set(v.to_owned()),
                Err(m) => {
                    self.error(name, m);
                    Patch::Unchanged
                }
            },
        }
    }

    fn sale_update(&mut self) -> Option<SaleUpdate> {
        let currency = match self.cell("currency").to_ascii_lowercase() {
            c if c.is_empty() => None,
            c => {
                let parsed = Currency::parse(&c);
                if parsed.is_known() {
                    Some(parsed)
                } else {
                    self.error("currency", format!("unknown currency `{c}`; one of {}", Currency::known_list()));
                    None
                }
            }
        };
        let status = match self.cell("status").to_ascii_lowercase() {
            s if s.is_empty() => None,
            s => {
                let parsed = SaleStatus::parse(&s);
                if parsed.is_known() {
                    Some(parsed)
                } else {
                    let hint = if s == "canceled" { " (sales spell it `cancelled`)" } else { "" };
                    self.error(
                        "status",
                        format!("unknown sale status `{s}`; one of {}{hint}", SaleStatus::known_list()),
                    );
                    None
                }
            }
        };
        let sub_id = match self.cell("sub_id") {
            "" => None,
            "NULL" => {
                self.error("sub_id", "`NULL` clears only `customer_email` and `customer_name`".into());
                None
            }
            s => Some(s.to_owned()),
        };
        let update = SaleUpdate {
            total: self.parsed("total", parse_cents),
            subtotal: self.parsed("subtotal", parse_cents),
            currency,
            occurred_at: self.parsed("occurred_at", parse_date),
            due_at: self.parsed("due_at", parse_date),
            customer_email: self.clearable("customer_email", check_email),
            customer_name: self.clearable("customer_name", |_| Ok(())),
            commission: self.parsed("commission", parse_cents),
            status,
            sub_id,
        };
        if update.is_empty() && SALE_FIELDS.iter().all(|f| self.cell(f).is_empty()) {
            self.errors.push(RowError {
                line: self.line,
                column: None,
                message: format!(
                    "an `update_sale` row changes nothing; fill at least one of {}",
                    SALE_FIELDS.join(", ")
                ),
            });
        }
        Some(update)
    }
}

/// The largest amount a row may set: 100,000,000 cents (1,000,000.00 in the sale's currency).
/// Larger is far more likely a slip (an extra digit, cents typed twice) than a real sale.
pub const MAX_CENTS: i64 = 100_000_000;

/// Dates a row may set: from 2000-01-01 to 2099-12-31 (UTC). Anything outside is a slip, such as
/// a millisecond timestamp read as seconds.
pub const MIN_DATE: NaiveDate = NaiveDate::from_ymd_opt(2000, 1, 1).expect("valid date");
pub const MAX_DATE: NaiveDate = NaiveDate::from_ymd_opt(2099, 12, 31).expect("valid date");

/// An amount in integer cents, from 0 to [`MAX_CENTS`]. Decimals are refused with the integer to
/// write instead; nothing is ever rounded.
pub fn parse_cents(raw: &str) -> Result<i64, String> {
    if let Ok(v) = raw.parse::<i64>() {
        return if v < 0 {
            Err(format!("`{raw}` is negative; amounts are zero or more cents"))
        } else if v > MAX_CENTS {
            Err(format!("`{raw}` cents is above the maximum of {MAX_CENTS} (1,000,000.00); check for an extra digit"))
        } else {
            Ok(v)
        };
    }
    if raw.bytes().all(|b| b.is_ascii_digit()) && !raw.is_empty() {
        return Err(format!(
            "`{raw}` cents is above the maximum of {MAX_CENTS} (1,000,000.00); check for an extra digit"
        ));
    }
    if let Some((whole, frac)) = raw.split_once('.') {
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if digits(whole) && digits(frac) && frac.len() <= 2 {
            let cents = format!("{whole}{frac:0<2}").trim_start_matches('0').to_owned();
            let cents = if cents.is_empty() { "0".to_owned() } else { cents };
            return Err(format!("`{raw}` is not in cents; amounts are integer cents: write {cents} for {raw}"));
        }
    }
    Err(format!("`{raw}` is not an amount; amounts are integer cents, like 1250 for 12.50"))
}

/// A date as the update accepts it: a Unix timestamp in seconds, an RFC 3339 date-time with its
/// zone (normalised to UTC), or a `YYYY-MM-DD` day, between [`MIN_DATE`] and [`MAX_DATE`].
pub fn parse_date(raw: &str) -> Result<DateInput, String> {
    let range = || format!("dates must fall between {MIN_DATE} and {MAX_DATE}");
    let in_range = |d: NaiveDate| (MIN_DATE..=MAX_DATE).contains(&d);
    if let Ok(ts) = raw.parse::<i64>() {
        let day = |secs: i64| DateTime::<Utc>::from_timestamp(secs, 0).map(|t| t.date_naive());
        if day(ts).is_some_and(in_range) {
            return Ok(DateInput::Unix(ts));
        }
        if let Some(d) = day(ts / 1000).filter(|d| in_range(*d)) {
            return Err(format!(
                "`{raw}` looks like a timestamp in milliseconds ({d}); the service takes seconds: write {}",
                ts / 1000
            ));
        }
        return Err(format!("`{raw}` is not a date: {}; write YYYY-MM-DD or a Unix timestamp in seconds", range()));
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(raw) {
        let t = t.with_timezone(&Utc);
        if !in_range(t.date_naive()) {
            return Err(format!("`{raw}` is out of range: {}", range()));
        }
        return Ok(DateInput::Iso(t.to_rfc3339_opts(SecondsFormat::AutoSi, true)));
    }
    if let Ok(d) = NaiveDate::parse_from_str(raw, "%Y-%m-%d") {
        if !in_range(d) {
            return Err(format!("`{raw}` is out of range: {}", range()));
        }
        return Ok(DateInput::Iso(d.format("%Y-%m-%d").to_string()));
    }
    if chrono::NaiveDateTime::parse_from_str(raw, "%Y-%m-%dT%H:%M:%S").is_ok() {
        return Err(format!("`{raw}` has no time zone; add one, like `{raw}Z` for UTC"));
    }
    Err(format!("`{raw}` is not a date: write YYYY-MM-DD, an ISO 8601 date-time with a zone, or a Unix timestamp"))
}

fn check_email(v: &str) -> Result<(), String> {
    let ok =
        v.split_once('@').is_some_and(|(a, b)| !a.is_empty() && b.contains('.')) && !v.contains(char::is_whitespace);
    if ok {
        Ok(())
    } else {
        Err(format!("`{v}` is not an email address (write `NULL` to clear it)"))
    }
}

/// The rows for one target must agree: the same change and the same approval. A copy of an
/// earlier row (a reviewer pasting twice) is allowed and decided once; rows that disagree leave
/// no way to tell which the reviewer meant, so the file is refused.
fn check_conflicts(rows: &[ReviewedRow], errors: &mut Vec<RowError>) {
    let mut first: HashMap<&Target, &ReviewedRow> = HashMap::new();
    for row in rows {
        let Some(earlier) = first.get(&row.target) else {
            first.insert(&row.target, row);
            continue;
        };
        let message = if earlier.fingerprint() != row.fingerprint() {
            format!(
                "{} is also changed by the row at line {}, with different changes; keep one row per target",
                row.target, earlier.line
            )
        } else if earlier.approved != row.approved {
            format!(
                "{} has the same change at line {}, {} there and {} here; keep one row per target",
                row.target,
                earlier.line,
                if earlier.approved { "approved" } else { "not approved" },
                if row.approved { "approved" } else { "not approved" }
            )
        } else {
            continue;
        };
        errors.push(RowError { line: row.line, column: None, message });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "action,approved,sale_id,creator_payout_uuid,total,commission,customer_email,status,note\n";
    const UUID: &str = "1b4e28ba-2fa1-11d2-883f-0016d3cca427";

    fn errors(text: &str) -> Vec<String> {
        parse(text.as_bytes()).unwrap_err().into_iter().map(|e| e.to_string()).collect()
    }

    #[test]
    fn a_valid_file_with_bom_quotes_and_newlines() {
        let text = format!(
            "\u{feff}{HEADER}update_sale,yes,7001,,1250,,,,\"a note, with a comma\nand a newline\"\n\
             mark_payout,TRUE,,{},,,,,\nupdate_sale,,7002,,,,NULL,paid,\n",
            UUID.to_uppercase()
        );
        let r = parse(text.as_bytes()).unwrap();
        assert_eq!(r.rows.len(), 3);
        let a = &r.rows[0];
        assert_eq!((a.line, a.approved, a.action), (2, true, ActionKind::UpdateSale));
        assert_eq!(a.update.as_ref().unwrap().total, Some(1250));
        assert_eq!(a.note.as_deref(), Some("a note, with a comma\nand a newline"));
        assert!(a.changes().contains("commission recalculated"));
        let b = &r.rows[1];
        assert_eq!(b.line, 4, "line numbers follow the file across a quoted newline");
        assert_eq!(b.target, Target::Payout(UUID.into()), "UUIDs are normalised");
        let c = &r.rows[2];
        assert!(!c.approved, "an empty cell means not approved");
        assert_eq!(c.update.as_ref().unwrap().customer_email, Patch::Clear);
        assert_eq!(c.body_json(), r#"{"customer_email":null,"status":"paid"}"#);
    }

    #[test]
    fn every_problem_is_reported_with_line_and_column() {
        let text = format!(
            "{HEADER}refund,yes,7001,,,,,,\nupdate_sale,yes,abc,,12.50,-3,bob,canceled,\n\
             mark_payout,yes,,not-a-uuid,,,,,\nupdate_sale,maybe,7003,,,,,,\n"
        );
        let e = errors(&text);
        let expect = [
            "line 2, column 1 (`action`): unknown action `refund`",
            "line 3, column 3 (`sale_id`): `abc` is not a sale id",
            "line 3, column 5 (`total`): `12.50` is not in cents; amounts are integer cents: write 1250 for 12.50",
            "line 3, column 6 (`commission`): `-3` is negative",
            "line 3, column 7 (`customer_email`): `bob` is not an email address",
            "line 3, column 8 (`status`): unknown sale status `canceled`",
            "line 4, column 4 (`creator_payout_uuid`): `not-a-uuid` is not a UUID",
            "line 5, column 2 (`approved`): `maybe` is not yes/no",
            "line 5: an `update_sale` row changes nothing",
        ];
        for want in expect {
            assert!(e.iter().any(|m| m.starts_with(want)), "missing {want:?} in {e:#?}");
        }
        assert_eq!(e.len(), expect.len(), "{e:#?}");
    }

    #[test]
    fn header_problems_name_the_column() {
        let e = errors("action,aproved,totl,frobnicate\n");
        assert!(e[0].contains("unknown column `aproved`; did you mean `approved`?"), "{e:?}");
        assert!(e[1].contains("did you mean `total`?"), "{e:?}");
        assert!(e[2].contains("unknown column `frobnicate`; the columns are"), "{e:?}");
        assert!(e[3].contains("the header has no `approved` column"), "{e:?}");
        assert!(errors("")[0].contains("the file is empty"));
    }

    #[test]
    fn rows_are_checked_despite_an_unknown_column() {
        let e = errors("action,approved,sale_id,totl\nupdate_sale,yes,abc,12.5\n");
        assert!(e[0].contains("unknown column `totl`; did you mean `total`?"), "{e:?}");
        assert!(e[1].starts_with("line 2, column 3 (`sale_id`): `abc` is not a sale id"), "{e:?}");
    }

    #[test]
    fn rows_for_one_target_that_disagree_are_refused_and_copies_pass() {
        let text = format!(
            "{HEADER}update_sale,yes,7001,,100,,,,\nupdate_sale,no,7001,,200,,,,\nupdate_sale,yes,7001,,100,,,,\n\
             update_sale,yes,7001,,300,,,,\nmark_payout,yes,,{UUID},,,,,\nmark_payout,yes,,{UUID},,,,,\n\
             update_sale,no,7002,,5,,,,\nupdate_sale,yes,7002,,5,,,,\n"
        );
        let e = errors(&text);
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(e[0].starts_with("line 3: sale 7001 is also changed by the row at line 2"), "{e:?}");
        assert!(e[1].starts_with("line 5: sale 7001 is also changed by the row at line 2"), "{e:?}");
        assert!(
            e[2].starts_with("line 9: sale 7002 has the same change at line 8, not approved there and approved here"),
            "{e:?}"
        );
        let copies = format!("{HEADER}update_sale,yes,7001,,100,,,,\nupdate_sale,yes,7001,,100,,,,note 2\n");
        assert_eq!(parse(copies.as_bytes()).unwrap().rows.len(), 2, "a copy is no conflict");
    }

    #[test]
    fn rows_of_the_wrong_shape_are_refused() {
        let e = errors(&format!("{HEADER}update_sale,yes,7001\nmark_payout,yes,7001,{UUID},5,,,,\n"));
        assert!(e[0].starts_with("line 2: 3 cells, but the header has 9 columns"), "{e:?}");
        assert!(e[1].contains("column 3 (`sale_id`): applies to `update_sale` rows only"), "{e:?}");
        assert!(e[2].contains("column 5 (`total`): applies to `update_sale` rows only"), "{e:?}");
    }

    #[test]
    fn dates_and_cents() {
        assert_eq!(parse_date("2025-01-03").unwrap(), DateInput::Iso("2025-01-03".into()));
        assert_eq!(parse_date("2025-01-03T10:00:00+02:00").unwrap(), DateInput::Iso("2025-01-03T08:00:00Z".into()));
        assert_eq!(parse_date("1735689600").unwrap(), DateInput::Unix(1_735_689_600));
        assert!(parse_date("2025-01-03T10:00:00").unwrap_err().contains("no time zone"));
        assert!(parse_date("03/01/2025").is_err());
        assert!(
            parse_date("2025").unwrap_err().contains("between 2000-01-01 and 2099-12-31"),
            "a year is not a timestamp"
        );
        // Regression: a millisecond timestamp was sent as the year 56,970.
        let e = parse_date("1735689600000").unwrap_err();
        assert!(e.contains("milliseconds (2025-01-01)") && e.contains("write 1735689600"), "{e}");
        assert!(parse_date("1999-12-31").unwrap_err().contains("out of range"));
        assert!(parse_date("2100-01-01T00:00:00Z").unwrap_err().contains("out of range"));
        assert!(parse_date("99999999999999999999").is_err());
        assert_eq!(parse_cents(&MAX_CENTS.to_string()).unwrap(), MAX_CENTS);
        assert!(parse_cents("100000001").unwrap_err().contains("above the maximum"));
        assert!(parse_cents("99999999999999999999999").unwrap_err().contains("above the maximum"));
        assert_eq!(parse_cents("0").unwrap(), 0);
        assert!(parse_cents("0.5").unwrap_err().contains("write 50 for 0.5"));
        assert!(parse_cents("12.345").unwrap_err().contains("like 1250"));
        assert!(parse_cents("1e3").is_err());
    }

    /// Either a plan (every row valid) or errors, each at a line of the file; never a panic.
    fn check_never_panics(bytes: &[u8]) -> Result<(), proptest::test_runner::TestCaseError> {
        let lines = bytes.iter().filter(|b| **b == b'\n').count() as u64 + 1;
        match parse(bytes) {
            Ok(r) => {
                for row in &r.rows {
                    proptest::prop_assert!(row.line >= 2 && row.line <= lines);
                    proptest::prop_assert!(!row.fingerprint().is_empty());
                }
            }
            Err(errors) => {
                proptest::prop_assert!(!errors.is_empty());
                for e in &errors {
                    proptest::prop_assert!(e.line >= 1 && e.line <= lines, "{e} outside 1..={lines}");
                }
            }
        }
        Ok(())
    }

    /// Cells drawn from valid and invalid values of every column, quoted or not.
    fn cell() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            Just(String::new()),
            Just("update_sale".to_owned()),
            Just("mark_payout".to_owned()),
            Just("yes".to_owned()),
            Just("NULL".to_owned()),
            Just(UUID.to_owned()),
            Just("12.50".to_owned()),
            Just("\"a, \"\"quoted\"\"\nvalue\"".to_owned()),
            Just("2025-01-03".to_owned()),
            Just("usd".to_owned()),
            Just("paid".to_owned()),
            (0i64..10_000).prop_map(|n| n.to_string()),
            "[ -~]{0,12}",
            any::<String>(),
        ]
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            check_never_panics(&bytes)?;
        }

        #[test]
        fn arbitrary_csvs_give_a_plan_or_line_numbered_errors(
            columns in proptest::sample::subsequence(COLUMNS.to_vec(), 0..=COLUMNS.len()),
            rows in proptest::collection::vec(proptest::collection::vec(cell(), 0..20), 0..8),
            bom in proptest::prelude::any::<bool>(),
        ) {
            let mut text = if bom { "\u{feff}".to_owned() } else { String::new() };
            text.push_str(&columns.join(","));
            for row in &rows {
                text.push('\n');
                text.push_str(&row.iter().take(columns.len().max(1)).cloned().collect::<Vec<_>>().join(","));
            }
            check_never_panics(text.as_bytes())?;
        }
    }
}
