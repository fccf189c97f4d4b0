//! The reviewed CSV's unit tests: every problem at once, by line and column; property tests on arbitrary bytes.

use super::*;
use crate::api::models::DateInput;

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
    assert!(parse_date("2025").unwrap_err().contains("between 2000-01-01 and 2099-12-31"), "a year is not a timestamp");
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
