use super::*;

const USER: &str = r#"{"id":"u","role":"user","source":{"kind":"user"},"content":[]}"#;

fn user(seq: u64, op: &str, sources: Option<&str>) -> String {
    let sources = sources
        .map(|s| format!(",\"sourceEventSeqs\":{s}"))
        .unwrap_or_default();
    format!(
        r#"{{"type":"user/message","seq":{seq},"time":0,"data":{USER}{sources},"surfaceOp":{op}}}"#
    )
}

fn log_only(seq: u64) -> String {
    format!(r#"{{"type":"turn/start","seq":{seq},"time":0,"data":{{"turn":1}}}}"#)
}

fn tool_result(seq: u64, op: &str, sources: &str, output: &str, is_error: bool) -> String {
    format!(
        r#"{{"type":"tool/result","seq":{seq},"time":0,"data":{{"turn":1,"message":{{"id":"r","role":"user","source":{{"kind":"tool","callId":"c"}},"content":[{{"type":"tool-result","toolCallId":"c","isError":{is_error},"content":{output}}}]}}}},"sourceEventSeqs":{sources},"surfaceOp":{op}}}"#
    )
}

fn fold(events: &[String]) -> Result<Surface> {
    let texts: Vec<&str> = events.iter().map(String::as_str).collect();
    Surface::fold_json(&texts, &Vocabulary::dsh_v0()).map(|(surface, _)| surface)
}

fn code(events: &[String]) -> &'static str {
    fold(events).expect_err("the fold must refuse").code()
}

#[test]
fn appends_go_to_the_tail_and_log_only_events_stay_off() {
    let surface = fold(&[
        user(0, "\"append\"", None),
        log_only(1),
        user(2, "\"append\"", None),
    ])
    .unwrap();
    assert_eq!(surface.nodes(), &[0, 2]);
    assert_eq!(surface.seq_next(), 3);
    assert_eq!(surface.replace_generation(), 0);
}

#[test]
fn step_1_contiguity() {
    assert_eq!(code(&[user(1, "\"append\"", None)]), "SEQ_NOT_CONTIGUOUS");
    assert_eq!(
        code(&[user(0, "\"append\"", None), user(0, "\"append\"", None)]),
        "SEQ_NOT_CONTIGUOUS"
    );
    let string_seq = r#"{"type":"turn/start","seq":"0","time":0,"data":{}}"#.to_owned();
    assert_eq!(code(&[string_seq]), "SEQ_NOT_CONTIGUOUS");
}

#[test]
fn step_2_markers() {
    let marker_on_log_only = r#"{"type":"turn/start","seq":0,"time":0,"data":{},"surfaceOp":null}"#;
    assert_eq!(
        code(&[marker_on_log_only.to_owned()]),
        "SURFACE_OP_FORBIDDEN"
    );
    let sources_on_log_only =
        r#"{"type":"turn/start","seq":0,"time":0,"data":{},"sourceEventSeqs":[]}"#;
    assert_eq!(code(&[sources_on_log_only.to_owned()]), "SOURCES_FORBIDDEN");
    let no_marker = format!(r#"{{"type":"user/message","seq":0,"time":0,"data":{USER}}}"#);
    assert_eq!(code(&[no_marker]), "SURFACE_OP_REQUIRED");
    for bad in [
        "null",
        "{}",
        "[]",
        "1",
        "\"Append\"",
        r#"{"op":"replace","start":0}"#,
        r#"{"op":"replace","start":0,"end":0,"x":1}"#,
        r#"{"op":"splice","start":0,"end":0}"#,
        r#"{"op":"replace","start":-1,"end":0}"#,
        r#"{"op":"replace","start":0.5,"end":0}"#,
        r#"{"op":"replace","start":9007199254740992,"end":0}"#,
    ] {
        assert_eq!(code(&[user(0, bad, None)]), "SURFACE_OP_INVALID", "{bad}");
    }
}

#[test]
fn step_3_provenance() {
    for bad in [
        "null",
        "1",
        "{}",
        "[\"0\"]",
        "[0.5]",
        "[-1]",
        "[null]",
        "[[0]]",
        "[9007199254740992]",
    ] {
        let events = [log_only(0), user(1, "\"append\"", Some(bad))];
        assert_eq!(code(&events), "SOURCES_INVALID", "{bad}");
    }
    assert_eq!(code(&[user(0, "\"append\"", Some("[]"))]), "SOURCES_EMPTY");
    assert_eq!(
        code(&[log_only(0), user(1, "\"append\"", Some("[0,0]"))]),
        "SOURCES_DUPLICATE"
    );
    assert_eq!(
        code(&[user(0, "\"append\"", Some("[0]"))]),
        "SOURCES_NOT_EARLIER"
    );
    assert_eq!(
        code(&[user(0, "\"append\"", Some("[1]"))]),
        "SOURCES_NOT_EARLIER"
    );
    let many: Vec<String> = (0..40)
        .map(|i| i.to_string())
        .chain(["7".to_owned()])
        .collect();
    let mut events: Vec<String> = (0..41).map(log_only).collect();
    events.push(user(
        41,
        "\"append\"",
        Some(&format!("[{}]", many.join(","))),
    ));
    assert_eq!(code(&events), "SOURCES_DUPLICATE");
}

#[test]
fn empty_sources_are_allowed_on_assistant_messages_only() {
    let assistant = r#"{"type":"assistant/message","seq":0,"time":0,"data":{"message":{"content":[]}},"sourceEventSeqs":[],"surfaceOp":"append"}"#;
    let surface = fold(&[assistant.to_owned()]).unwrap();
    assert_eq!(surface.nodes(), &[0]);
}

#[test]
fn step_5_replace_locates_endpoints_by_position() {
    let mut events = vec![
        user(0, "\"append\"", None),
        user(1, "\"append\"", None),
        user(2, "\"append\"", None),
    ];
    events.push(user(
        3,
        r#"{"op":"replace","start":1,"end":2}"#,
        Some("[1,2]"),
    ));
    events.push(user(4, "\"append\"", None));
    // Nested: the replacement 3 is shadowed with its neighbour 4.
    events.push(user(
        5,
        r#"{"op":"replace","start":3,"end":4}"#,
        Some("[4,3]"),
    ));
    let surface = fold(&events).unwrap();
    assert_eq!(surface.nodes(), &[0, 5]);
    assert_eq!(surface.replace_generation(), 2);
    let replacements: Vec<_> = surface
        .replacements()
        .map(|r| (r.seq, r.start, r.end, r.shadowed.to_vec()))
        .collect();
    assert_eq!(
        replacements,
        vec![(3, 1, 2, vec![1, 2]), (5, 3, 4, vec![3, 4])]
    );
    // start seq numerically greater than end seq, valid by position.
    events.push(user(6, "\"append\"", None));
    events.push(user(
        7,
        r#"{"op":"replace","start":5,"end":6}"#,
        Some("[5,6]"),
    ));
    assert_eq!(fold(&events).unwrap().nodes(), &[0, 7]);
    let mut reversed_numbers = vec![user(0, "\"append\"", None), user(1, "\"append\"", None)];
    reversed_numbers.push(user(
        2,
        r#"{"op":"replace","start":0,"end":0}"#,
        Some("[0]"),
    ));
    reversed_numbers.push(user(
        3,
        r#"{"op":"replace","start":2,"end":1}"#,
        Some("[2,1]"),
    ));
    assert_eq!(fold(&reversed_numbers).unwrap().nodes(), &[3]);
}

#[test]
fn step_5_replace_refusals() {
    let base = || {
        vec![
            user(0, "\"append\"", None),
            log_only(1),
            user(2, "\"append\"", None),
        ]
    };
    let with = |event: String| {
        let mut events = base();
        events.push(event);
        code(&events)
    };
    assert_eq!(
        with(user(
            3,
            r#"{"op":"replace","start":1,"end":2}"#,
            Some("[1,2]")
        )),
        "REPLACE_START_NOT_ON_SURFACE"
    );
    assert_eq!(
        with(user(
            3,
            r#"{"op":"replace","start":3,"end":3}"#,
            Some("[0]")
        )),
        "REPLACE_START_NOT_ON_SURFACE"
    );
    assert_eq!(
        with(user(
            3,
            r#"{"op":"replace","start":0,"end":9}"#,
            Some("[0]")
        )),
        "REPLACE_END_NOT_ON_SURFACE"
    );
    assert_eq!(
        with(user(
            3,
            r#"{"op":"replace","start":2,"end":0}"#,
            Some("[0,2]")
        )),
        "REPLACE_REVERSED"
    );
    assert_eq!(
        with(user(
            3,
            r#"{"op":"replace","start":0,"end":2}"#,
            Some("[0]")
        )),
        "REPLACE_SOURCES_INCOMPLETE"
    );
    assert_eq!(
        with(user(3, r#"{"op":"replace","start":0,"end":2}"#, None)),
        "REPLACE_SOURCES_INCOMPLETE"
    );
    let err = {
        let mut events = base();
        events.push(user(
            3,
            r#"{"op":"replace","start":0,"end":2}"#,
            Some("[1]"),
        ));
        fold(&events).unwrap_err()
    };
    assert_eq!(
        err.kind(),
        &ErrorKind::ReplaceSourcesIncomplete {
            missing: vec![0, 2]
        }
    );
    assert_eq!(err.seq(), Some(3));
    // A shadowed node cannot be named again, but may be cited.
    let mut events = base();
    events.push(user(
        3,
        r#"{"op":"replace","start":0,"end":0}"#,
        Some("[0]"),
    ));
    events.push(user(4, "\"append\"", Some("[0]")));
    assert!(fold(&events).is_ok());
    events.push(user(
        5,
        r#"{"op":"replace","start":0,"end":0}"#,
        Some("[0]"),
    ));
    assert_eq!(code(&events), "REPLACE_START_NOT_ON_SURFACE");
}

#[test]
fn tool_output_prune_may_change_only_the_output() {
    let original = tool_result(
        1,
        "\"append\"",
        "[0]",
        r#"[{"type":"text","text":"long"}]"#,
        false,
    );
    let base = || vec![log_only(0), original.clone(), user(2, "\"append\"", None)];
    let with = |event: String| {
        let mut events = base();
        events.push(event);
        fold(&events).map(|s| s.nodes().to_vec())
    };
    let prune = tool_result(
        3,
        r#"{"op":"replace","start":1,"end":1}"#,
        "[1]",
        "[]",
        false,
    );
    assert_eq!(with(prune).unwrap(), vec![3, 2]);
    let changed_flag = tool_result(
        3,
        r#"{"op":"replace","start":1,"end":1}"#,
        "[1]",
        "[]",
        true,
    );
    assert_eq!(
        with(changed_flag).unwrap_err().code(),
        "TOOL_REWRITE_CHANGED"
    );
    let output_not_array = tool_result(
        3,
        r#"{"op":"replace","start":1,"end":1}"#,
        "[1]",
        "null",
        false,
    );
    assert_eq!(
        with(output_not_array).unwrap_err().code(),
        "TOOL_REWRITE_CHANGED"
    );
    let two_nodes = tool_result(
        3,
        r#"{"op":"replace","start":1,"end":2}"#,
        "[1,2]",
        "[]",
        false,
    );
    assert_eq!(
        with(two_nodes).unwrap_err().code(),
        "TOOL_REWRITE_NOT_SINGLE"
    );
    let wrong_target = tool_result(
        3,
        r#"{"op":"replace","start":2,"end":2}"#,
        "[2]",
        "[]",
        false,
    );
    assert_eq!(
        with(wrong_target).unwrap_err().code(),
        "TOOL_REWRITE_TARGET"
    );
}

#[test]
fn position_follows_replacements_and_refuses_shadowed_and_unknown_seqs() {
    let events = vec![
        user(0, "\"append\"", None),
        user(1, "\"append\"", None),
        user(2, "\"append\"", None),
        user(3, r#"{"op":"replace","start":0,"end":1}"#, Some("[0,1]")),
    ];
    let surface = fold(&events).unwrap();
    assert_eq!(surface.position(3), Some(0));
    assert_eq!(surface.position(2), Some(1));
    assert_eq!(surface.position(0), None);
    assert_eq!(surface.position(1), None);
    assert_eq!(surface.position(99), None);
}

#[test]
fn catch_up_resumes_where_the_fold_stopped() {
    let texts: Vec<String> = (0..6).map(|seq| user(seq, "\"append\"", None)).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let (whole, log) = Surface::fold_json(&refs, &Vocabulary::dsh_v0()).unwrap();
    let (mut partial, _) = Surface::fold_json(&refs[..2], &Vocabulary::dsh_v0()).unwrap();
    partial.catch_up(&log, &Vocabulary::dsh_v0()).unwrap();
    assert_eq!(partial, whole);
    assert!(whole.heap_bytes() >= whole.nodes().len() * 8);
}

/// CKP-2: the branch-free order check agrees with the pairwise one, at the edges of its
/// bit trick too (words from 2^63 on, pairs 2^63 or more apart, wrapping differences).
#[test]
fn strictly_increasing_agrees_with_the_pairwise_check() {
    let top = 1u64 << 63;
    let cases: &[&[u64]] = &[
        &[],
        &[5],
        &[0, 1, 2, 9],
        &[0, 1, 1],
        &[3, 2],
        &[0, u64::MAX],
        &[u64::MAX, 0],
        &[u64::MAX, u64::MAX],
        &[top - 1, top],
        &[top, top + 1],
        &[top + 1, top],
        &[0, top],
        &[1, top + 1],
        &[top, 0, 1],
        &[0, 1, top, 2],
        &[7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 3],
    ];
    for words in cases {
        let pairwise = words.windows(2).all(|w| w[0] < w[1]);
        assert_eq!(strictly_increasing(words), pairwise, "{words:?}");
    }
    // Long runs, so that the vectorized loop and its remainder both see a fault.
    let mut words: Vec<u64> = (0..1000).map(|i| i * 3).collect();
    assert!(strictly_increasing(&words));
    for at in [1, 2, 3, 4, 500, 998, 999] {
        let saved = words[at];
        words[at] = words[at - 1];
        assert!(!strictly_increasing(&words), "a repeat at {at}");
        words[at] = saved;
    }
}

/// CKP-2: `from_parts` refuses parts that break the surface's invariants, with and without
/// replacements (its two checking paths), and accepts what a fold produced.
#[test]
fn ckp_2_from_parts_refuses_broken_invariants() {
    let parts = |nodes: &[u64], keys: &[(u64, u64)], seq_next| {
        Surface::from_parts(nodes.to_vec(), keys.to_vec(), 0, seq_next)
    };
    // Without replacements: keys are seqs.
    assert!(parts(&[0, 1, 5], &[], 6).is_some());
    assert!(parts(&[], &[], 0).is_some());
    assert!(parts(&[0, 5, 1], &[], 6).is_none(), "not increasing");
    assert!(parts(&[0, 1, 1], &[], 6).is_none(), "a repeated node");
    assert!(parts(&[0, 1, 6], &[], 6).is_none(), "a node at seq_next");
    // With replacements: node 7 replaced 2..=3 and holds key 2.
    assert!(parts(&[0, 7, 4], &[(7, 2)], 8).is_some());
    assert!(
        parts(&[0, 4, 7], &[(7, 2)], 8).is_none(),
        "keys out of order"
    );
    assert!(
        parts(&[0, 7, 4, 9], &[(7, 2)], 9).is_none(),
        "a node at seq_next"
    );
    assert!(
        parts(&[0, 7, 4], &[(7, 2), (6, 1)], 8).is_none(),
        "keys unsorted"
    );
    assert!(
        parts(&[0, 7, 4], &[(6, 1), (7, 2)], 8).is_none(),
        "a key of no node"
    );
    assert!(
        parts(&[0, 7, 4], &[(7, 8)], 8).is_none(),
        "a key above its seq"
    );
    let events = vec![
        user(0, "\"append\"", None),
        user(1, "\"append\"", None),
        user(2, "\"append\"", None),
        user(3, r#"{"op":"replace","start":1,"end":2}"#, Some("[1,2]")),
        user(4, "\"append\"", None),
    ];
    let surface = fold(&events).unwrap();
    let rebuilt = Surface::from_parts(
        surface.nodes().to_vec(),
        surface.replacement_keys().to_vec(),
        surface.replace_generation(),
        surface.seq_next(),
    );
    assert_eq!(rebuilt, Some(surface));
}
