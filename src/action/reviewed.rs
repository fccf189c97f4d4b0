//! The reviewed CSV: parsed, then every row validated, with every problem reported at once by
//! line and column. Nothing is sent unless the whole file is valid.
//!
//! Format (the manual's concepts chapter on actions, "The reviewed CSV"): a header row naming
//! any of [`COLUMNS`], in any order.
//! An empty cell means "leave unchanged"; `NULL` clears `customer_email` or `customer_name`.
//! Amounts are integer cents. UTF-8 with or without a BOM, comma-separated, RFC 4180 quoting
//! (quoted fields may hold commas and newlines). Line numbers are those of the file, so a
//! quoted newline makes the next row's line number jump, as an editor shows it.

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;

use crate::api::models::{Currency, Patch, SaleStatus, SaleUpdate};

mod cells;

use cells::check_email;
pub use cells::{parse_cents, parse_date, MAX_CENTS, MAX_DATE, MIN_DATE};

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
mod tests;
