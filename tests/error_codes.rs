//! Pins the table of stable error codes (contract §11 and the sections that define
//! them): every `ErrorKind` variant maps to exactly one code, codes are unique, and every
//! message is a lowercase sentence with no final period.

use surfacelog::Error;
use surfacelog::internals::error::{ErrorKind, Invariant};

#[expect(clippy::too_many_lines, reason = "the pinned table, one row per code")]
fn table() -> Vec<(ErrorKind, &'static str)> {
    let s = String::new;
    let mut rows = vec![
        (
            ErrorKind::EnvelopeInvalid { reason: s() },
            "ENVELOPE_INVALID",
        ),
        (
            ErrorKind::SeqNotContiguous {
                expected: 1,
                found: "2".into(),
            },
            "SEQ_NOT_CONTIGUOUS",
        ),
        (
            ErrorKind::DataInvalidJson {
                offset: 0,
                reason: "x",
            },
            "DATA_INVALID_JSON",
        ),
        (
            ErrorKind::DataDuplicateKey {
                key: s(),
                offset: 0,
            },
            "DATA_DUPLICATE_KEY",
        ),
        (
            ErrorKind::DataNotLossless { offset: 0 },
            "DATA_NOT_LOSSLESS",
        ),
        (
            ErrorKind::EventTooLarge { len: 2, max: 1 },
            "EVENT_TOO_LARGE",
        ),
        (ErrorKind::LegacyEvent { reason: "x" }, "LEGACY_EVENT"),
        (
            ErrorKind::MessageShape {
                event_type: s(),
                rule: "x",
            },
            "MESSAGE_SHAPE",
        ),
        (
            ErrorKind::RequestHeaderShape { rule: "x" },
            "REQUEST_HEADER_SHAPE",
        ),
        (
            ErrorKind::SurfaceOpForbidden { event_type: s() },
            "SURFACE_OP_FORBIDDEN",
        ),
        (
            ErrorKind::SourcesForbidden { event_type: s() },
            "SOURCES_FORBIDDEN",
        ),
        (
            ErrorKind::SurfaceOpRequired { event_type: s() },
            "SURFACE_OP_REQUIRED",
        ),
        (ErrorKind::SurfaceOpInvalid, "SURFACE_OP_INVALID"),
        (ErrorKind::SourcesInvalid, "SOURCES_INVALID"),
        (ErrorKind::SourcesEmpty, "SOURCES_EMPTY"),
        (
            ErrorKind::SourcesDuplicate { source: 1 },
            "SOURCES_DUPLICATE",
        ),
        (
            ErrorKind::SourcesNotEarlier { source: 1 },
            "SOURCES_NOT_EARLIER",
        ),
        (
            ErrorKind::ReplaceStartNotOnSurface { start: 1 },
            "REPLACE_START_NOT_ON_SURFACE",
        ),
        (
            ErrorKind::ReplaceEndNotOnSurface { end: 1 },
            "REPLACE_END_NOT_ON_SURFACE",
        ),
        (
            ErrorKind::ReplaceReversed { start: 2, end: 1 },
            "REPLACE_REVERSED",
        ),
        (
            ErrorKind::ReplaceSourcesIncomplete { missing: vec![1] },
            "REPLACE_SOURCES_INCOMPLETE",
        ),
        (
            ErrorKind::ToolRewriteNotSingle { shadowed: 2 },
            "TOOL_REWRITE_NOT_SINGLE",
        ),
        (
            ErrorKind::ToolRewriteTarget { target: 1 },
            "TOOL_REWRITE_TARGET",
        ),
        (
            ErrorKind::ToolRewriteChanged { target: 1 },
            "TOOL_REWRITE_CHANGED",
        ),
        (ErrorKind::HeaderInvalid { reason: s() }, "HEADER_INVALID"),
        (
            ErrorKind::FormatVersion {
                found: "1".into(),
                newer: true,
            },
            "FORMAT_VERSION",
        ),
        (
            ErrorKind::FormatVersion {
                found: "-1".into(),
                newer: false,
            },
            "FORMAT_VERSION",
        ),
        (ErrorKind::SessionExists { id: s() }, "SESSION_EXISTS"),
        (ErrorKind::SessionNotFound { id: s() }, "SESSION_NOT_FOUND"),
        (
            ErrorKind::InvalidBoundary { boundary: s() },
            "INVALID_BOUNDARY",
        ),
        (
            ErrorKind::InvalidId {
                id: s(),
                reason: "x",
            },
            "INVALID_ID",
        ),
        (
            ErrorKind::CompactionUnbalanced {
                start: 0,
                end: 1,
                open_before: 0,
                open_after: 1,
            },
            "COMPACTION_UNBALANCED",
        ),
        (
            ErrorKind::Corrupt {
                location: s(),
                reason: s(),
            },
            "CORRUPT",
        ),
        (
            ErrorKind::Io {
                op: "write",
                path: "/x".into(),
                kind: std::io::ErrorKind::Other,
                message: s(),
            },
            "IO",
        ),
        (
            ErrorKind::OpenTurn {
                boundary: 3,
                turn_start: 2,
            },
            "OPEN_TURN",
        ),
        (
            ErrorKind::Locked {
                path: "/x/LOCK".into(),
            },
            "LOCKED",
        ),
        (ErrorKind::Poisoned, "POISONED"),
        (
            ErrorKind::UnsafePath {
                path: "/x/db".into(),
                reason: "a symbolic link",
            },
            "UNSAFE_PATH",
        ),
        (
            ErrorKind::UnknownEventType {
                event_type: "x/y".into(),
            },
            "UNKNOWN_EVENT_TYPE",
        ),
        (
            ErrorKind::NotRepresentable {
                seq: 3,
                reason: "why",
            },
            "NOT_REPRESENTABLE",
        ),
    ];
    let invariants = [
        (Invariant::SeqOrder, "INV_SEQ_ORDER"),
        (Invariant::TurnAlreadyOpen, "INV_TURN_ALREADY_OPEN"),
        (Invariant::TurnNumber, "INV_TURN_NUMBER"),
        (Invariant::TurnEndMismatch, "INV_TURN_END_MISMATCH"),
        (Invariant::TurnEndStepOpen, "INV_TURN_END_STEP_OPEN"),
        (Invariant::StepTurn, "INV_STEP_TURN"),
        (Invariant::StepAlreadyOpen, "INV_STEP_ALREADY_OPEN"),
        (Invariant::StepNumber, "INV_STEP_NUMBER"),
        (Invariant::OutsideStep, "INV_OUTSIDE_STEP"),
        (Invariant::ToolResultUnmatched, "INV_TOOL_RESULT_UNMATCHED"),
        (
            Invariant::ReplacementOutsideTurn,
            "INV_REPLACEMENT_OUTSIDE_TURN",
        ),
        (Invariant::OutsideTurn, "INV_OUTSIDE_TURN"),
    ];
    rows.extend(invariants.map(|(violation, code)| (ErrorKind::Invariant { violation }, code)));
    rows
}

#[test]
fn every_kind_has_its_pinned_code() {
    for (kind, code) in table() {
        assert_eq!(kind.code(), code, "{kind:?}");
        assert_eq!(Error::from(kind).code(), code);
    }
}

#[test]
fn codes_are_unique_per_variant() {
    let mut codes: Vec<&str> = table().iter().map(|(_, code)| *code).collect();
    codes.sort_unstable();
    let before = codes.len();
    codes.dedup();
    assert_eq!(
        before - codes.len(),
        1,
        "only FORMAT_VERSION appears twice (newer and older)"
    );
}

#[test]
fn messages_are_lowercase_sentences_with_context() {
    for (kind, _) in table() {
        let error = Error::from(kind).in_session("s1").at_seq(7);
        let text = error.to_string();
        let first = text.chars().next().unwrap();
        assert!(first.is_lowercase(), "{text}");
        assert!(!text.ends_with('.'), "{text}");
        assert!(text.ends_with(r#"session="s1" seq=7"#), "{text}");
        assert!(format!("{error:?}").starts_with(&format!("Error[{}]", error.code())));
    }
}

#[test]
fn context_is_set_once() {
    let error = Error::from(ErrorKind::SurfaceOpInvalid)
        .in_session("a")
        .in_session("b")
        .at_seq(1)
        .at_seq(2);
    assert_eq!((error.session(), error.seq()), (Some("a"), Some(1)));
}
