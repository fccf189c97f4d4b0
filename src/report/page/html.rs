//! The pages' HTML kit: a section being written (its figures, charts, sentences and tables),
//! escaped text, and numbers as the pages show them. Data never becomes HTML: text is escaped
//! when written, and only HTML this module builds ([`Cell::Html`]) is written as is.

use std::fmt::Write;

use chrono::NaiveDate;
use serde::Serialize;
use serde_json::{json, Value};

/// One figure: a number with its label (unit and date range), its value for machines, and a
/// note.
pub(super) struct Figure {
    pub key: String,
    pub label: String,
    pub shown: String,
    pub value: Value,
    pub note: Option<String>,
}

/// A section being written.
#[derive(Default)]
pub(super) struct Section {
    pub figures: Vec<Figure>,
    pub body: String,
    pub charts: usize,
}

impl Section {
    pub fn figure(&mut self, key: &str, label: String, shown: String, value: Value, note: Option<String>) {
        self.figures.push(Figure { key: key.to_owned(), label, shown, value, note });
    }

    pub fn chart(&mut self, key: &str, caption: &str, svg: Result<Option<String>, String>, otherwise: &str) {
        match svg {
            Ok(Some(svg)) => {
                self.charts += 1;
                let _ = writeln!(
                    self.body,
                    "<figure class=\"chart\" data-chart=\"{key}\">{svg}<figcaption>{}</figcaption></figure>",
                    esc(caption)
                );
            }
            Ok(None) => self.sentence(otherwise),
            Err(e) => self.sentence(&e),
        }
    }

    pub fn sentence(&mut self, s: &str) {
        let _ = writeln!(self.body, "<p class=\"empty\">{}</p>", esc(s));
    }

    pub fn heading(&mut self, s: &str) {
        let _ = writeln!(self.body, "<h3>{}</h3>", esc(s));
    }

    pub fn table(&mut self, caption: &str, headers: &[&str], rows: Vec<Vec<String>>) {
        let rows = rows.into_iter().map(|r| r.into_iter().map(Cell::Text).collect()).collect();
        self.body.push_str(&table(caption, headers, rows, false));
    }
}

/// A table cell: text (escaped when written), or HTML this module built with the key a sortable
/// table sorts it by. Data never becomes HTML: only [`Cell::Html`] is written as is.
pub(super) enum Cell {
    Text(String),
    Html { sort: String, html: String },
}

/// A plain table. With `sortable`, every cell carries its sort key in `data-sort` (its text,
/// or the key of a [`Cell::Html`]).
pub(super) fn table(caption: &str, headers: &[&str], rows: Vec<Vec<Cell>>, sortable: bool) -> String {
    let mut s = format!(
        "<table{}>{}<thead><tr>",
        if sortable { " class=\"sortable\"" } else { "" },
        if caption.is_empty() { String::new() } else { format!("<caption>{}</caption>", esc(caption)) }
    );
    for h in headers {
        let _ = write!(s, "<th>{}</th>", esc(h));
    }
    s.push_str("</tr></thead><tbody>\n");
    for row in rows {
        s.push_str("<tr>");
        for cell in row {
            match cell {
                Cell::Html { sort, html } => {
                    let _ = write!(s, "<td data-sort=\"{}\">{html}</td>", esc(&sort));
                }
                Cell::Text(text) if sortable => {
                    let _ = write!(s, "<td data-sort=\"{0}\">{0}</td>", esc(&text));
                }
                Cell::Text(text) => {
                    let _ = write!(s, "<td>{}</td>", esc(&text));
                }
            }
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</tbody></table>\n");
    s
}

/// HTML-escapes text.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// An integer with thousands separators: `12,345`.
pub fn int_text(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut o = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            o.push(',');
        }
        o.push(c);
    }
    if n < 0 {
        format!("-{o}")
    } else {
        o
    }
}

/// A fraction as a signed percentage: `+4.2 %`.
pub fn change_text(f: Option<f64>) -> String {
    f.map_or("–".into(), |f| format!("{:+.1} %", f * 100.0))
}

/// A fraction as a percentage: `42.0 %`.
pub fn rate_text(f: Option<f64>) -> String {
    f.map_or("–".into(), |f| format!("{:.1} %", f * 100.0))
}

pub(super) fn opt_int(v: Option<i64>) -> String {
    v.map_or("–".into(), int_text)
}

pub(super) fn opt_json<T: Serialize>(v: Option<T>) -> Value {
    v.map_or(Value::Null, |v| json!(v))
}

pub(super) fn day(d: NaiveDate) -> String {
    d.format("%b %-d").to_string()
}

/// A word with its first letter capitalized.
pub(super) fn capital(s: &str) -> String {
    let mut c = s.chars();
    c.next().map_or_else(String::new, |f| f.to_uppercase().chain(c).collect())
}
