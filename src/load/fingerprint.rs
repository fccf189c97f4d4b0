//! A fingerprint of a frame: what the fleet warehouse keeps of each organization's frame tables
//! as last loaded (`frame_fingerprints`), so that a batch rewrites, and the next publish exports,
//! only the tables whose rows changed ([`super::commit`]).
//!
//! The fingerprint is xxh3's 128-bit hash of the frame's height, every column's name, type and
//! values in row order (a NULL apart from every value), and of [`FORMAT`] and the fleet
//! warehouse's schema version: a migration, or a change to how a frame becomes rows, makes
//! every table written again once. Two frames with the same fingerprint are taken to be equal
//! (xxh3 is not a cryptographic hash, but nothing here is adversarial: a fingerprint is only
//! ever compared with the same organization's same table's, and two different frames share one
//! by chance with a probability of about 2^-128). A column of a type it does not know has no
//! fingerprint: the table is then written every time.

use polars::prelude::{DataFrame, DataType};
use xxhash_rust::xxh3::Xxh3;

/// The fingerprints' format: bumped whenever the rows a frame becomes can change while its
/// values do not (the staging's Parquet, the insert, a DuckDB upgrade that reads them
/// differently), so that no table is kept on a fingerprint made the old way.
pub(crate) const FORMAT: u32 = 1;

/// The frame's fingerprint, as stored: 32 hexadecimal digits. `None`: a column of a type not
/// fingerprinted (the table is written every time).
pub(crate) fn fingerprint(df: &DataFrame) -> Option<String> {
    let mut hasher = Xxh3::new();
    let mut buf: Vec<u8> = vec![];
    let format = format!("creator-etl fingerprint {FORMAT} fleet schema {}", super::catalog::Shape::Fleet.version());
    put_bytes(&mut buf, format.as_bytes());
    buf.extend((df.height() as u64).to_le_bytes());
    for column in df.columns() {
        put_bytes(&mut buf, column.name().as_bytes());
        put_bytes(&mut buf, format!("{:?}", column.dtype()).as_bytes());
        let physical = column.as_materialized_series().to_physical_repr();
        let values = physical.as_ref();
        match values.dtype() {
            DataType::Boolean => values.bool().ok()?.iter().for_each(|v| put(&mut buf, v.map(|b| [b as u8]))),
            DataType::Int32 => values.i32().ok()?.iter().for_each(|v| put(&mut buf, v.map(i32::to_le_bytes))),
            DataType::Int64 => values.i64().ok()?.iter().for_each(|v| put(&mut buf, v.map(i64::to_le_bytes))),
            DataType::UInt32 => values.u32().ok()?.iter().for_each(|v| put(&mut buf, v.map(u32::to_le_bytes))),
            DataType::UInt64 => values.u64().ok()?.iter().for_each(|v| put(&mut buf, v.map(u64::to_le_bytes))),
            DataType::Float32 => {
                values.f32().ok()?.iter().for_each(|v| put(&mut buf, v.map(|f| f.to_bits().to_le_bytes())))
            }
            DataType::Float64 => {
                values.f64().ok()?.iter().for_each(|v| put(&mut buf, v.map(|f| f.to_bits().to_le_bytes())))
            }
            DataType::String => values.str().ok()?.iter().for_each(|v| match v {
                Some(s) => {
                    buf.push(1);
                    put_bytes(&mut buf, s.as_bytes());
                }
                None => buf.push(0),
            }),
            _ => return None,
        }
        hasher.update(&buf);
        buf.clear();
    }
    hasher.update(&buf);
    Some(format!("{:032x}", hasher.digest128()))
}

/// A value, or NULL: a tag byte first, so that no NULL reads as a value.
fn put<const N: usize>(buf: &mut Vec<u8>, value: Option<[u8; N]>) {
    match value {
        Some(bytes) => {
            buf.push(1);
            buf.extend_from_slice(&bytes);
        }
        None => buf.push(0),
    }
}

/// Bytes of any length, their length first, so that no two sequences run together alike.
fn put_bytes(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.extend((bytes.len() as u64).to_le_bytes());
    buf.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use polars::prelude::{Column, TimeUnit};

    fn frame(ids: &[Option<i64>], names: &[Option<&str>]) -> DataFrame {
        DataFrame::new_infer_height(vec![
            Column::new("id".into(), ids.to_vec()),
            Column::new("name".into(), names.to_vec()),
        ])
        .unwrap()
    }

    /// The same rows give the same fingerprint; a changed value, a NULL for a value, another
    /// order, a renamed column, another type or a moved byte between strings each give another.
    #[test]
    fn a_fingerprint_tells_any_change_apart() {
        let base = frame(&[Some(1), Some(2)], &[Some("ab"), Some("c")]);
        let fp = fingerprint(&base).unwrap();
        assert_eq!(fp.len(), 32);
        assert_eq!(fingerprint(&frame(&[Some(1), Some(2)], &[Some("ab"), Some("c")])).unwrap(), fp);
        let others = [
            frame(&[Some(1), Some(3)], &[Some("ab"), Some("c")]),
            frame(&[Some(1), None], &[Some("ab"), Some("c")]),
            frame(&[Some(1), Some(0)], &[Some("ab"), Some("c")]),
            frame(&[Some(2), Some(1)], &[Some("c"), Some("ab")]),
            frame(&[Some(1), Some(2)], &[Some("a"), Some("bc")]),
            frame(&[Some(1), Some(2)], &[Some("ab"), None]),
            frame(&[Some(1), Some(2)], &[Some("ab"), Some("")]),
            frame(&[Some(1)], &[Some("ab")]),
            {
                let mut renamed = base.clone();
                renamed.rename("name", "creator".into()).unwrap();
                renamed
            },
            DataFrame::new_infer_height(vec![
                Column::new("id".into(), vec![Some(1i32), Some(2)]),
                Column::new("name".into(), vec![Some("ab"), Some("c")]),
            ])
            .unwrap(),
        ];
        let mut seen = std::collections::BTreeSet::from([fp]);
        for other in &others {
            assert!(seen.insert(fingerprint(other).unwrap()), "{other}");
        }
    }

    /// A changed value of every type a frame has changes the fingerprint.
    #[test]
    fn every_frames_type_is_fingerprinted_by_its_values() {
        let one = |c: Column| fingerprint(&DataFrame::new_infer_height(vec![c]).unwrap()).unwrap();
        let pairs = [
            (Column::new("x".into(), [true, false]), Column::new("x".into(), [true, true])),
            (Column::new("x".into(), [1.5f64, 2.0]), Column::new("x".into(), [1.5f64, 2.5])),
            (Column::new("x".into(), [1.5f32, 2.0]), Column::new("x".into(), [1.5f32, 2.5])),
            (Column::new("x".into(), [1u32, 2]), Column::new("x".into(), [1u32, 3])),
            (Column::new("x".into(), [1u64, 2]), Column::new("x".into(), [1u64, 3])),
            (Column::new("x".into(), [1i32, 2]), Column::new("x".into(), [1i32, 3])),
            (
                Column::new("x".into(), [19_000i32, 19_001]).cast(&DataType::Date).unwrap(),
                Column::new("x".into(), [19_000i32, 19_002]).cast(&DataType::Date).unwrap(),
            ),
        ];
        for (a, b) in pairs {
            assert_eq!(one(a.clone()), one(a.clone()), "{a:?}");
            assert_ne!(one(a.clone()), one(b.clone()), "{a:?} against {b:?}");
        }
    }

    /// Dates and times are fingerprinted by their physical values and their type, its time unit
    /// included; a type it does not know has none.
    #[test]
    fn temporal_columns_have_a_fingerprint_and_unknown_types_none() {
        let micros = Column::new("at".into(), vec![Some(1_700_000_000_000_000i64)]);
        let one = |c: Column| fingerprint(&DataFrame::new_infer_height(vec![c]).unwrap()).unwrap();
        let us = one(micros.cast(&DataType::Datetime(TimeUnit::Microseconds, None)).unwrap());
        let ms = one(micros.cast(&DataType::Datetime(TimeUnit::Milliseconds, None)).unwrap());
        let raw = one(micros.clone());
        assert!(us != ms && us != raw && ms != raw, "the same physical values under another type");
        let day = Column::new("day".into(), vec![Some(19_000i32)]).cast(&DataType::Date).unwrap();
        assert!(fingerprint(&DataFrame::new_infer_height(vec![day]).unwrap()).is_some());
        let unknown = Column::full_null("n".into(), 1, &DataType::Null);
        assert_eq!(fingerprint(&DataFrame::new_infer_height(vec![unknown]).unwrap()), None);
    }
}
