use super::*;
use proptest::prelude::*;

fn js(text: &str) -> String {
    let json = Json::parse(text).unwrap();
    let mut out = String::new();
    write_js(&mut out, json.root());
    out
}

fn syntax_error(text: &str) -> bool {
    matches!(
        Json::parse(text),
        Err(JsonError {
            kind: JsonErrorKind::Syntax(_),
            ..
        })
    )
}

#[test]
fn accepts_rfc8259_values_and_spans_slice_the_text() {
    let text = r#" {"a": [1, -2.5e3, true, false, null], "b": {"c": "d\n"}} "#;
    let json = Json::parse(text).unwrap();
    let root = json.root();
    assert_eq!(root.kind(), Kind::Object);
    assert_eq!(
        root.get("a").unwrap().raw(),
        "[1, -2.5e3, true, false, null]"
    );
    assert_eq!(
        root.get("b").unwrap().get("c").unwrap().as_str().unwrap(),
        "d\n"
    );
    assert_eq!(root.get("a").unwrap().len(), 5);
    assert!(root.get("z").is_none());
}

#[test]
fn refuses_grammar_violations() {
    for bad in [
        "",
        " ",
        "{",
        "[1,]",
        "{\"a\":1,}",
        "01",
        "1.",
        ".5",
        "+1",
        "1e",
        "tru",
        "nul",
        "\"a",
        "\"\\x\"",
        "\"\\u12g4\"",
        "\"a\u{1}\"",
        "{1:2}",
        "[1 2]",
        "1 2",
        "\u{feff}1",
        "NaN",
        "{\"a\" 1}",
        "-",
        "[",
        "]",
        "{}}",
    ] {
        assert!(syntax_error(bad), "accepted {bad:?}");
    }
}

#[test]
fn refuses_duplicate_keys_after_decoding() {
    for text in [
        r#"{"a":1,"a":2}"#,
        r#"{"a":1,"\u0061":2}"#,
        r#"{"k1":1,"k2":1,"k3":1,"k4":1,"k5":1,"k6":1,"k7":1,"k8":1,"k9":1,"k1":1}"#,
    ] {
        let err = Json::parse(text).unwrap_err();
        assert!(
            matches!(err.kind, JsonErrorKind::DuplicateKey(_)),
            "{text}: {err:?}"
        );
    }
    assert!(Json::parse(r#"{"a":{"a":1},"b":[{"a":1},{"a":2}]}"#).is_ok());
    assert!(Json::parse(r#"{"\ud800":1,"\ud801":2}"#).is_ok());
}

#[test]
fn nesting_of_200k_levels_parses_compares_writes_and_drops() {
    let depth = crate::limits::JSON_NESTING_TESTED;
    let text = format!("{}0{}", "[{\"a\":".repeat(depth), "}]".repeat(depth));
    let json = Json::parse(&text).unwrap();
    assert!(equal(json.root(), json.root()));
    assert_eq!(js(&text), text);
}

#[test]
fn negative_zero_is_reported_not_refused() {
    for text in ["-0", "[1,-0.0]", "{\"a\":-0e5}", "-1e-400"] {
        assert!(
            Json::parse(text).unwrap().negative_zero().is_some(),
            "{text}"
        );
    }
    for text in ["0", "-1", "0.0", "-0.5", "[\"-0\"]"] {
        assert!(
            Json::parse(text).unwrap().negative_zero().is_none(),
            "{text}"
        );
    }
}

#[test]
fn safe_integers_are_judged_by_value() {
    let value = |t: &str| Json::parse(t).unwrap().root().as_safe_int();
    assert_eq!(value("7.0"), Some(7));
    assert_eq!(value("70E-1"), Some(7));
    assert_eq!(value("-0"), Some(0));
    assert_eq!(value("9007199254740991"), Some(9_007_199_254_740_991));
    assert_eq!(value("9007199254740992"), None);
    assert_eq!(value("-9007199254740991"), Some(-9_007_199_254_740_991));
    assert_eq!(value("1.5"), None);
    assert_eq!(value("\"1\""), None);
    assert_eq!(value("1e400"), None);
}

#[test]
fn lone_surrogates_are_kept_and_written_escaped() {
    assert_eq!(js(r#""\uD800x\uDFFF""#), r#""\ud800x\udfff""#);
    assert_eq!(js(r#""\ud83d\ude00""#), "\"😀\"");
    assert_eq!(js(r#""\u00e9\u2028\u007f\/""#), "\"é\u{2028}\u{7f}/\"");
    assert_eq!(
        js(r#""\u0000\u000B\u001f\b\f\n\r\t\"\\""#),
        r#""\u0000\u000b\u001f\b\f\n\r\t\"\\""#
    );
    assert_eq!(js("\"\u{d7ff}\u{e000}\""), "\"\u{d7ff}\u{e000}\"");
    let json = Json::parse(r#""\ud800""#).unwrap();
    assert!(json.root().as_str().is_none());
}

#[test]
fn numbers_are_written_as_ecmascript_does() {
    let cases = [
        ("1", "1"),
        ("1.0", "1"),
        ("-0", "0"),
        ("100", "100"),
        ("1e20", "100000000000000000000"),
        ("1e21", "1e+21"),
        ("1.5e300", "1.5e+300"),
        ("0.000001234", "0.000001234"),
        ("1e-7", "1e-7"),
        ("5e-324", "5e-324"),
        ("1e400", "null"),
        ("0.1", "0.1"),
        ("123456789012345680000", "123456789012345680000"),
        ("-1.5", "-1.5"),
        ("9007199254740993", "9007199254740992"),
        // Found by the json fuzz target: out of binary64 range, JavaScript writes null.
        ("-50e0555", "null"),
    ];
    for (input, expected) in cases {
        assert_eq!(js(input), expected, "{input}");
    }
}

#[test]
fn members_are_written_in_javascript_order() {
    let input = r#"{"b":1,"4294967295":2,"4294967294":3,"1":4,"01":5,"a":6,"0":7}"#;
    let expected = r#"{"0":7,"1":4,"4294967294":3,"b":1,"4294967295":2,"01":5,"a":6}"#;
    assert_eq!(js(input), expected);
}

#[test]
fn equality_is_by_value() {
    let eq = |a: &str, b: &str| {
        equal(
            Json::parse(a).unwrap().root(),
            Json::parse(b).unwrap().root(),
        )
    };
    assert!(eq(
        r#"{"a":1,"b":[1.0,"x"]}"#,
        r#"{"b":[1,"\u0078"],"a":1e0}"#
    ));
    assert!(eq("-0", "0"));
    assert!(!eq(r#"{"a":1}"#, r#"{"a":1,"b":2}"#));
    assert!(!eq("[1,2]", "[2,1]"));
    assert!(!eq("1", "\"1\""));
    assert!(!eq("null", "false"));
}

#[test]
fn equal_except_ignores_one_member_on_each_side() {
    let a = Json::parse(r#"{"k":1,"c":[1]}"#).unwrap();
    let b = Json::parse(r#"{"c":[2],"k":1}"#).unwrap();
    let (ra, rb) = (a.root(), b.root());
    assert!(!equal(ra, rb));
    assert!(equal_except(ra, ra.get("c"), rb, rb.get("c")));
    assert!(!equal_except(ra, ra.get("c"), rb, None));
}

fn arb_json() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_string()),
        any::<bool>().prop_map(|b| b.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:e}")),
        "[a-z\\\\\"\u{0}-\u{1f}é😀]{0,6}".prop_map(|s| {
            let mut out = String::new();
            push_js_string(&mut out, s.as_bytes());
            out
        }),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(|v| format!("[{}]", v.join(" , "))),
            prop::collection::btree_map("[a-z0-9]{1,3}", inner, 0..5).prop_map(|m| {
                let body: Vec<_> = m
                    .into_iter()
                    .map(|(k, v)| format!("\"{k}\" : {v}"))
                    .collect();
                format!("{{ {} }}", body.join(","))
            }),
        ]
    })
}

proptest! {
    #[test]
    fn js_writer_output_reparses_to_an_equal_value_and_is_a_fixed_point(text in arb_json()) {
        let once = js(&text);
        prop_assert!(equal(Json::parse(&text).unwrap().root(), Json::parse(&once).unwrap().root()));
        prop_assert_eq!(js(&once), once.clone());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let text = String::from_utf8_lossy(&bytes);
        if let Ok(json) = Json::parse(&text) {
            let mut out = String::new();
            write_js(&mut out, json.root());
            prop_assert!(Json::parse(&out).is_ok());
        }
    }
}

proptest! {
    /// The integer fast paths agree with the general ones: reading (`f64::from_str`) and
    /// writing (`ryu-js`, which implements Number::toString).
    #[test]
    fn integer_fast_paths_match_the_general_number_code(
        n in prop_oneof![any::<i64>(), -1_000_000_000_000_000_i64..1_000_000_000_000_000],
    ) {
        let token = n.to_string();
        prop_assert_eq!(
            parse::number_value(&token).to_bits(),
            token.parse::<f64>().unwrap().to_bits()
        );
        #[expect(clippy::cast_precision_loss, reason = "the comparison is on binary64 values")]
        let value = n as f64;
        let mut fast = String::new();
        push_js_number(&mut fast, value);
        let general = if value == 0.0 {
            "0".to_owned()
        } else {
            ryu_js::Buffer::new().format_finite(value).to_owned()
        };
        prop_assert_eq!(&fast, &general);
        if n.unsigned_abs() <= crate::limits::SAFE_INTEGER_MAX.unsigned_abs() {
            let mut int = String::new();
            super::write::push_js_int(&mut int, n);
            prop_assert_eq!(int, fast);
        }
    }
}

#[test]
fn number_fast_path_keeps_negative_zero_and_long_integers_exact() {
    assert_eq!(parse::number_value("-0").to_bits(), (-0.0f64).to_bits());
    // 16 digits and more take the general path (correct rounding).
    let bits = |token: &str| parse::number_value(token).to_bits();
    assert_eq!(
        bits("9007199254740993"),
        9_007_199_254_740_992.0f64.to_bits()
    );
    assert_eq!(bits("123456789012345"), 123_456_789_012_345.0f64.to_bits());
}

proptest! {
    /// The word-at-a-time scan finds the same first special byte as a byte-at-a-time one.
    #[test]
    fn plain_run_matches_a_bytewise_scan(
        bytes in prop::collection::vec(
            prop_oneof![1 => Just(b'"'), 1 => Just(b'\\'), 1 => 0u8..0x20, 30 => 0x20u8..=0xff],
            0..200,
        ),
        cut in 0usize..16,
    ) {
        let bytes = &bytes[cut.min(bytes.len())..];
        let expected = bytes
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
            .unwrap_or(bytes.len());
        prop_assert_eq!(parse::plain_run(bytes), expected);
    }
}

proptest! {
    /// Copying an unescaped string's text gives what decoding and writing it again gives.
    #[test]
    fn string_values_are_written_as_javascript_does(text in "\\PC*|[\\x00-\\x7f\\u{2028}\\u{e9}]*") {
        let token = encode_js_string(text.as_bytes());
        let json = Json::parse(&token).unwrap();
        let mut fast = String::new();
        push_js_string_value(&mut fast, json.root());
        let mut general = String::new();
        push_js_string(&mut general, &json.root().as_wtf8().unwrap());
        prop_assert_eq!(fast, general);
    }
}

proptest! {
    /// `as_safe_int`, with its one-pass integer path, judges every number as the general
    /// rule does: by its binary64 value (contract §2), `-0` as 0.
    #[test]
    fn safe_int_fast_path_matches_the_value_rule(
        token in prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            "-?(0|[1-9][0-9]{0,17})(\\.[0-9]{1,3})?([eE][-+]?[0-9]{1,2})?",
        ],
    ) {
        let json = Json::parse(&token).unwrap();
        let general = super::safe_int(token.parse::<f64>().unwrap());
        prop_assert_eq!(json.root().as_safe_int(), general);
    }
}

proptest! {
    /// `as_str` and `is_str` (with their unescaped fast paths) give what decoding gives,
    /// for literals written plainly and for the same strings fully escaped.
    #[test]
    fn as_str_and_is_str_agree_with_decoding(
        s in "\\PC{0,12}",
        other in "\\PC{0,3}",
        escape_all in any::<bool>(),
    ) {
        let literal = if escape_all {
            let units = s.encode_utf16().fold(String::new(), |mut out, unit| {
                use std::fmt::Write;
                let _ = write!(out, "\\u{unit:04x}");
                out
            });
            format!("\"{units}\"")
        } else {
            encode_js_string(s.as_bytes())
        };
        let json = Json::parse(&literal).unwrap();
        let root = json.root();
        let text = root.as_str();
        prop_assert_eq!(text.as_deref(), Some(s.as_str()));
        prop_assert!(root.is_str(&s));
        prop_assert_eq!(root.is_str(&other), other == s);
        let bytes = root.as_wtf8();
        prop_assert_eq!(bytes.as_deref(), Some(s.as_bytes()));
    }
}

proptest! {
    /// The eight-at-a-time integer read gives what `str::parse` gives for integer tokens
    /// of up to 15 digits, and nothing for a token with any other byte among its digits.
    #[test]
    fn small_integers_read_as_parse_reads_them(
        digits in "[0-9]{1,15}",
        negative in any::<bool>(),
        at in 0usize..15,
        // Not `-`, which in front of the digits makes a valid token.
        other in prop_oneof![0u8..b'-', (b'-' + 1)..b'0', (b'9' + 1)..=255u8],
    ) {
        let token = format!("{}{digits}", if negative { "-" } else { "" });
        prop_assert_eq!(parse::small_integer(&token), Some(token.parse::<i64>().unwrap()));
        let mut bytes = digits.clone().into_bytes();
        let at = at % bytes.len();
        bytes[at] = other;
        let bad = String::from_utf8_lossy(&bytes).into_owned();
        prop_assert_eq!(parse::small_integer(&bad), None);
    }
}
