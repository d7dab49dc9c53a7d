use super::*;
use crate::clock::ManualClock;
use crate::event::SurfaceOp;

const NOW: i64 = 1_000;

fn options() -> Options {
    Options {
        clock: Arc::new(ManualClock::new(NOW)),
        ..Options::default()
    }
}

fn with_invariants() -> Options {
    Options {
        invariants: true,
        ..options()
    }
}

fn user_data(id: &str) -> String {
    format!(
        r#"{{"id":"{id}","role":"user","source":{{"kind":"user"}},"content":[{{"type":"text","text":"{id}"}}]}}"#
    )
}

fn assistant_data(turn: u64, step: u64, blocks: &str) -> String {
    format!(
        r#"{{"turn":{turn},"step":{step},"message":{{"id":"a","role":"assistant","source":{{"kind":"model","provider":"p","model":"m"}},"content":[{blocks}]}}}}"#
    )
}

fn tool_result_data(turn: u64, step: u64, call: &str) -> String {
    format!(
        r#"{{"turn":{turn},"step":{step},"message":{{"id":"r-{call}","role":"user","source":{{"kind":"tool","callId":"{call}"}},"content":[{{"type":"tool-result","toolCallId":"{call}","content":[{{"type":"text","text":"out"}}]}}]}}}}"#
    )
}

/// Opens turn 1 and its step 1.
fn open_step_1(session: &mut Session) {
    session
        .append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)
        .unwrap();
    session
        .append::<kinds::StepStart>(r#"{"turn":1,"step":1}"#, NoSurface)
        .unwrap();
}

fn new_session(options: Options) -> Session {
    Session::create("s", None, None, options).unwrap()
}

fn texts(session: &Session) -> Vec<String> {
    (0..session.seq_next())
        .map(|s| session.event(s).unwrap().unwrap().text().into_owned())
        .collect()
}

/// Appends one complete tool-using turn; returns (user, assistant, tool result) seqs.
fn tool_turn(session: &mut Session, turn: u64) -> (u64, u64, u64) {
    session
        .append::<kinds::TurnStart>(&format!(r#"{{"turn":{turn}}}"#), NoSurface)
        .unwrap();
    let user = session
        .append::<kinds::UserMessage>(&user_data(&format!("u{turn}")), SurfaceIntent::append())
        .unwrap();
    session
        .append::<kinds::StepStart>(&format!(r#"{{"turn":{turn},"step":1}}"#), NoSurface)
        .unwrap();
    let call = format!(r#"{{"type":"tool-call","id":"c{turn}","name":"x","arguments":"{{}}"}}"#);
    let assistant = session
        .append::<kinds::AssistantMessage>(&assistant_data(turn, 1, &call), SurfaceIntent::append())
        .unwrap();
    let tool_call = session
        .append::<kinds::ToolCall>(
            &format!(r#"{{"turn":{turn},"step":1,"callId":"c{turn}"}}"#),
            NoSurface,
        )
        .unwrap();
    let result = session
        .append::<kinds::ToolResult>(
            &tool_result_data(turn, 1, &format!("c{turn}")),
            SurfaceIntent::append_citing(vec![tool_call]),
        )
        .unwrap();
    session
        .append::<kinds::StepEnd>(&format!(r#"{{"turn":{turn},"step":1}}"#), NoSurface)
        .unwrap();
    session
        .append::<kinds::TurnEnd>(
            &format!(r#"{{"turn":{turn},"reason":{{"kind":"completed"}}}}"#),
            NoSurface,
        )
        .unwrap();
    (user, assistant, result)
}

#[test]
fn append_writes_the_engine_key_order_and_stamps_the_clock() {
    let mut session = new_session(options());
    session
        .append::<kinds::TurnStart>(r#" {"turn":1} "#, NoSurface)
        .unwrap();
    let seq = session
        .append::<kinds::UserMessage>(&user_data("u"), SurfaceIntent::append_citing(vec![0]))
        .unwrap();
    let event = session.event(seq).unwrap();
    let expected = format!(
        r#"{{"type":"user/message","seq":1,"time":{NOW},"data":{},"sourceEventSeqs":[0],"surfaceOp":"append"}}"#,
        user_data("u")
    );
    assert_eq!(event.unwrap().text(), expected);
    assert_eq!(session.event(0).unwrap().unwrap().data(), r#"{"turn":1}"#);
    assert_eq!(session.messages().unwrap()[0].json, user_data("u"));
    let replace = session
        .append_dynamic(
            "user/message",
            &user_data("v"),
            Some(SurfaceIntent::replace(1, 1, vec![1])),
        )
        .unwrap();
    assert!(
        session
            .event(replace)
            .unwrap()
            .unwrap()
            .text()
            .ends_with(r#""sourceEventSeqs":[1],"surfaceOp":{"op":"replace","start":1,"end":1}}"#)
    );
}

#[test]
fn the_runtime_path_checks_the_surface_intent() {
    let mut session = new_session(options());
    let err = session
        .append_dynamic("user/message", &user_data("u"), None)
        .unwrap_err();
    assert_eq!(err.code(), "SURFACE_OP_REQUIRED");
    assert_eq!((err.session(), err.seq()), (Some("s"), Some(0)));
    let err = session
        .append_dynamic("turn/start", "{}", Some(SurfaceIntent::append()))
        .unwrap_err();
    assert_eq!(err.code(), "SURFACE_OP_FORBIDDEN");
    assert_eq!(session.seq_next(), 0);
}

#[test]
fn append_refusals_carry_their_codes() {
    let mut session = Session::create(
        "s",
        None,
        None,
        Options {
            max_event_bytes: 160,
            ..options()
        },
    )
    .unwrap();
    let cases: [(&str, &str, &str); 8] = [
        ("", "{}", "ENVELOPE_INVALID"),
        ("plugin/x", "{", "DATA_INVALID_JSON"),
        ("plugin/x", r#"{"a":1,"a":2}"#, "DATA_DUPLICATE_KEY"),
        ("plugin/x", r#"{"a":-0.0}"#, "DATA_NOT_LOSSLESS"),
        (
            "plugin/x",
            &format!("\"{}\"", "y".repeat(200)),
            "EVENT_TOO_LARGE",
        ),
        ("request/header-delta", "{}", "LEGACY_EVENT"),
        (
            "request/header",
            r#"{"reason":"fallback","header":{"config":{"provider":"p","model":"m"}}}"#,
            "LEGACY_EVENT",
        ),
        (
            "request/header",
            r#"{"header":{"config":{"provider":"p"}}}"#,
            "REQUEST_HEADER_SHAPE",
        ),
    ];
    for (event_type, data, code) in cases {
        let err = session.append_dynamic(event_type, data, None).unwrap_err();
        assert_eq!(err.code(), code, "{event_type} {data}");
    }
    let err = session
        .append_json("user/message", r#"{"id":"u"}"#, Some("\"append\""), None)
        .unwrap_err();
    assert_eq!(err.code(), "MESSAGE_SHAPE");
    let err = session
        .append_json("plugin/x", "{}", None, Some("[-0]"))
        .unwrap_err();
    assert_eq!(err.code(), "DATA_NOT_LOSSLESS");
    assert_eq!(session.seq_next(), 0, "refused appends take no seq");
    assert_eq!(session.append_dynamic("plugin/x", "null", None).unwrap(), 0);
}

#[test]
fn message_shapes_are_checked_per_type() {
    let mut session = new_session(options());
    session
        .append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)
        .unwrap();
    let bad_assistant =
        r#"{"message":{"id":"a","role":"assistant","source":{"kind":"user"},"content":[]}}"#;
    let err = session
        .append::<kinds::AssistantMessage>(bad_assistant, SurfaceIntent::append())
        .unwrap_err();
    assert_eq!(
        err.kind(),
        &ErrorKind::MessageShape {
            event_type: "assistant/message".into(),
            rule: "assistant source is not kind model with provider and model"
        }
    );
    let two_blocks = tool_result_data(1, 1, "c").replace("}]}]}}", "}]},{\"type\":\"text\"}]}}");
    assert_eq!(
        session
            .append::<kinds::ToolResult>(&two_blocks, SurfaceIntent::append_citing(vec![0]))
            .unwrap_err()
            .code(),
        "MESSAGE_SHAPE"
    );
    let wrong_role = user_data("u")
        .replace("\"user\"}", "\"assistant\"}")
        .replace("\"role\":\"user\"", "\"role\":\"assistant\"");
    assert_eq!(
        session
            .append::<kinds::UserMessage>(&wrong_role, SurfaceIntent::append())
            .unwrap_err()
            .code(),
        "MESSAGE_SHAPE"
    );
    // An empty assistant message stays on the surface but gives no message.
    let empty = assistant_data(1, 1, "");
    let seq = session
        .append::<kinds::AssistantMessage>(&empty, SurfaceIntent::append_citing(vec![]))
        .unwrap();
    assert_eq!(session.surface().nodes(), &[seq]);
    assert!(session.messages().unwrap().is_empty());
}

#[test]
fn seeds_get_the_end_seed_marker_unless_they_end_with_one() {
    let user = format!(
        r#"{{"type":"user/message","seq":0,"time":5,"data":{},"surfaceOp":"append"}}"#,
        user_data("u")
    );
    let session = Session::create("s", None, Some(&[user.as_str()]), options()).unwrap();
    assert_eq!(session.seq_next(), 2);
    assert_eq!(session.first_live_seq(), 1);
    assert_eq!(
        session.event(1).unwrap().unwrap().text(),
        format!(r#"{{"type":"session/end-seed","seq":1,"time":{NOW},"data":{{}}}}"#)
    );
    assert_eq!(
        session.header().text(),
        format!(r#"{{"version":0,"id":"s","createdAt":{NOW}}}"#)
    );
    let empty = Session::create("s", None, Some(&[]), options()).unwrap();
    assert_eq!((empty.seq_next(), empty.first_live_seq()), (1, 0));
    let none = Session::create("s", None, None, options()).unwrap();
    assert_eq!(none.seq_next(), 0);
    let marker = r#"{"type":"session/end-seed","seq":1,"time":2,"data":{}}"#;
    let ends = Session::create("s", None, Some(&[user.as_str(), marker]), options()).unwrap();
    assert_eq!(ends.seq_next(), 2);
    let err = Session::create(
        "s",
        None,
        Some(&[user.replace("\"time\":5", "\"time\":-0").as_str()]),
        options(),
    )
    .unwrap_err();
    assert_eq!(err.code(), "DATA_NOT_LOSSLESS");
    let err = Session::create(
        "s",
        None,
        Some(&[&user.replace("\"time\":5", "\"time\":5,\"x\":1")]),
        options(),
    )
    .unwrap_err();
    assert_eq!(err.code(), "ENVELOPE_INVALID");
}

#[test]
fn headers_are_validated() {
    let cases = [
        (r#"{"version":1,"id":"s","createdAt":0}"#, "FORMAT_VERSION"),
        (r#"{"version":-1,"id":"s","createdAt":0}"#, "FORMAT_VERSION"),
        (
            r#"{"version":"0","id":"s","createdAt":0}"#,
            "HEADER_INVALID",
        ),
        (r#"{"version":0,"id":"t","createdAt":0}"#, "HEADER_INVALID"),
        (r#"{"version":0,"id":"s","createdAt":-1}"#, "HEADER_INVALID"),
        (
            r#"{"version":0,"id":"s","createdAt":0,"cwd":"rel"}"#,
            "HEADER_INVALID",
        ),
        (
            r#"{"version":0,"id":"s","createdAt":0,"origin":"user"}"#,
            "HEADER_INVALID",
        ),
        (
            r#"{"version":0,"id":"s","createdAt":0,"agentPreset":null}"#,
            "HEADER_INVALID",
        ),
        (
            r#"{"version":0,"id":"s","createdAt":-0}"#,
            "DATA_NOT_LOSSLESS",
        ),
        ("[]", "HEADER_INVALID"),
    ];
    for (header, code) in cases {
        let err = Session::create("s", Some(header), None, options()).unwrap_err();
        assert_eq!(err.code(), code, "{header}");
    }
    let newer = Session::create(
        "s",
        Some(r#"{"version":2,"id":"s","createdAt":0}"#),
        None,
        options(),
    )
    .unwrap_err();
    assert!(matches!(
        newer.kind(),
        ErrorKind::FormatVersion { newer: true, .. }
    ));
    let full = r#"{"version":0,"id":"s","createdAt":0,"cwd":"/w","parentSession":"p","seedLength":1,"origin":"subagent","delegationDepth":2,"agentPreset":"x","extra":{"k":[1]}}"#;
    assert_eq!(
        Session::create("s", Some(full), None, options())
            .unwrap()
            .header()
            .text(),
        full
    );
}

#[test]
fn reopen_repairs_an_interrupted_turn_once_and_resume_adds_the_marker() {
    let mut source = new_session(options());
    open_step_1(&mut source);
    let calls = r#"{"type":"tool-call","id":"B"},{"type":"tool-call","id":"A"}"#;
    source
        .append::<kinds::AssistantMessage>(&assistant_data(1, 1, calls), SurfaceIntent::append())
        .unwrap();
    source
        .append::<kinds::ToolCall>(r#"{"turn":1,"step":1,"callId":"A"}"#, NoSurface)
        .unwrap();
    let stored = texts(&source);
    let refs: Vec<&str> = stored.iter().map(String::as_str).collect();
    let header = source.header().text().to_owned();
    let (repaired, report) = Session::reopen("s", &header, &refs, with_invariants()).unwrap();
    assert_eq!(
        report,
        Reopened {
            stored: 4,
            closers: 4
        }
    );
    let types: Vec<&str> = (4..8)
        .map(|s| repaired.event(s).unwrap().unwrap().event_type)
        .collect();
    assert_eq!(
        types,
        ["tool/result", "tool/result", "step/end", "turn/end"]
    );
    assert!(
        repaired
            .event(4)
            .unwrap()
            .unwrap()
            .text()
            .contains(r#""id":"interrupted-tool-result-B-4""#)
    );
    assert_eq!(
        repaired
            .event(5)
            .unwrap()
            .unwrap()
            .sources
            .map(|s| s.to_vec()),
        Some(vec![3])
    );
    assert!(
        repaired
            .event(7)
            .unwrap()
            .unwrap()
            .text()
            .ends_with(r#""data":{"turn":1,"reason":{"kind":"interrupted"}}}"#)
    );
    let again = texts(&repaired);
    let refs: Vec<&str> = again.iter().map(String::as_str).collect();
    let (_, report) = Session::reopen("s", &header, &refs, options()).unwrap();
    assert_eq!(report.closers, 0, "repair is persisted exactly once");
    let (resumed, _) = Session::resume("s", &header, &refs, options()).unwrap();
    assert_eq!(resumed.event(8).unwrap().unwrap().event_type, END_SEED_TYPE);
    assert_eq!(resumed.first_live_seq(), 8);
}

#[test]
fn reopen_reads_negative_zero_as_zero() {
    let stored = r#"{"type":"plugin/x","seq":-0,"time":-0,"data":{"n":-0}}"#;
    let (session, _) = Session::reopen(
        "s",
        r#"{"version":0,"id":"s","createdAt":-0}"#,
        &[stored],
        options(),
    )
    .unwrap();
    assert_eq!(session.event(0).unwrap().unwrap().time, 0);
    assert_eq!(session.header().created_at(), 0);
}

#[test]
fn every_invariant_code_is_reachable_and_refusals_keep_the_state() {
    let mut session = new_session(with_invariants());
    let (_, _, result) = tool_turn(&mut session, 1);
    let steps: [(&str, &str, Option<SurfaceIntent>, &str); 12] = [
        ("turn/end", r#"{"turn":2}"#, None, "INV_TURN_END_MISMATCH"),
        ("turn/start", r#"{"turn":3}"#, None, "INV_TURN_NUMBER"),
        (
            "step/start",
            r#"{"turn":2,"step":1}"#,
            None,
            "INV_STEP_TURN",
        ),
        ("todo/write", "{}", None, "INV_OUTSIDE_TURN"),
        (
            "tool/result",
            &tool_result_data(1, 1, "c1"),
            Some(SurfaceIntent::replace(result, result, vec![result])),
            "INV_REPLACEMENT_OUTSIDE_TURN",
        ),
        ("turn/start", r#"{"turn":2}"#, None, ""),
        ("turn/start", r#"{"turn":2}"#, None, "INV_TURN_ALREADY_OPEN"),
        (
            "step/start",
            r#"{"turn":2,"step":2}"#,
            None,
            "INV_STEP_NUMBER",
        ),
        (
            "assistant/chunk",
            r#"{"turn":2,"step":1}"#,
            None,
            "INV_OUTSIDE_STEP",
        ),
        ("step/start", r#"{"turn":2,"step":1}"#, None, ""),
        (
            "step/start",
            r#"{"turn":2,"step":2}"#,
            None,
            "INV_STEP_ALREADY_OPEN",
        ),
        (
            "tool/result",
            &tool_result_data(2, 1, "c"),
            Some(SurfaceIntent::append()),
            "INV_TOOL_RESULT_UNMATCHED",
        ),
    ];
    for (event_type, data, intent, code) in steps {
        let before = (session.invariants.clone(), session.seq_next());
        let outcome = session.append_dynamic(event_type, data, intent);
        if code.is_empty() {
            outcome.unwrap();
        } else {
            assert_eq!(outcome.unwrap_err().code(), code, "{event_type} {data}");
            assert_eq!((session.invariants.clone(), session.seq_next()), before);
        }
    }
    session
        .append::<kinds::StepEnd>(r#"{"turn":2,"step":1}"#, NoSurface)
        .unwrap();
    session
        .append::<kinds::StepStart>(r#"{"turn":2,"step":2}"#, NoSurface)
        .unwrap();
    let err = session
        .append::<kinds::TurnEnd>(r#"{"turn":2}"#, NoSurface)
        .unwrap_err();
    assert_eq!(err.code(), "INV_TURN_END_STEP_OPEN");
    // The repair-closer shape answers no call and is still accepted (contract §9).
    let not_started = tool_result_data(2, 2, "z").replace(
        "\"content\":[{\"type\":\"text\"",
        "\"isError\":true,\"content\":[{\"type\":\"text\"",
    );
    let with_error = format!(
        "{},\"error\":{{\"code\":\"TOOL_NOT_STARTED\"}}}}",
        &not_started[..not_started.len() - 1]
    );
    session
        .append::<kinds::ToolResult>(&with_error, SurfaceIntent::append())
        .unwrap();
    let mut state = InvariantState::default();
    let json = crate::json::Json::parse("{}").unwrap();
    let effect = state.check(5, "plugin/x", json.root(), false).unwrap();
    state.apply(effect);
    assert_eq!(
        state.check(5, "plugin/x", json.root(), false),
        Err(crate::error::Invariant::SeqOrder)
    );
}

#[test]
fn fork_copies_the_prefix_and_checks_in_order() {
    let mut store = MemStore::new(options());
    let source = store
        .create(
            "src",
            Some(r#"{"version":0,"id":"src","createdAt":1,"cwd":"/w","agentPreset":"x"}"#),
            None,
        )
        .unwrap();
    let (user, _, _) = tool_turn(source, 1);
    source
        .append::<kinds::TurnStart>(r#"{"turn":2}"#, NoSurface)
        .unwrap();
    let open_at = source.seq_next() - 1;
    let before = texts(store.get("src").unwrap());
    assert_eq!(
        store.fork("src", Boundary::Last, "src").unwrap_err().code(),
        "SESSION_EXISTS"
    );
    assert_eq!(
        store.fork("nope", Boundary::Last, "c").unwrap_err().code(),
        "SESSION_NOT_FOUND"
    );
    assert_eq!(
        store
            .fork("src", Boundary::Seq(99), "c")
            .unwrap_err()
            .code(),
        "INVALID_BOUNDARY"
    );
    assert_eq!(
        store.fork("src", Boundary::Last, "c").unwrap_err().kind(),
        &ErrorKind::OpenTurn {
            boundary: open_at,
            turn_start: open_at
        }
    );
    assert_eq!(
        store.fork("src", Boundary::Seq(3), "c").unwrap_err().code(),
        "OPEN_TURN"
    );
    for bad in ["null", "\"1\"", "1.5", "-1", "9007199254740992"] {
        assert_eq!(
            Boundary::from_json(bad).unwrap_err().code(),
            "INVALID_BOUNDARY",
            "{bad}"
        );
    }
    assert_eq!(Boundary::from_json("2.0").unwrap(), Boundary::Seq(2));
    let child = store.fork("src", Boundary::Seq(open_at - 1), "c").unwrap();
    assert_eq!(
        child.header().text(),
        r#"{"version":0,"id":"c","createdAt":1000,"cwd":"/w","parentSession":"src","seedLength":8}"#
    );
    assert_eq!(child.first_live_seq(), 8);
    assert_eq!(child.seq_next(), 9);
    assert_eq!(texts(child)[..8], before[..8]);
    assert_eq!(child.messages().unwrap()[0].seq, user);
    assert_eq!(
        texts(store.get("src").unwrap()),
        before,
        "the source is unchanged"
    );
    assert_eq!(store.ids().collect::<Vec<_>>(), ["c", "src"]);
}

#[test]
fn compaction_replaces_a_balanced_range_and_cites_everything() {
    let mut session = new_session(with_invariants());
    let (user1, assistant1, result1) = tool_turn(&mut session, 1);
    let (user2, ..) = tool_turn(&mut session, 2);
    let message = user_data("summary");
    let unbalanced = Compaction {
        compaction_id: "k",
        turn: None,
        start: user1,
        end: assistant1,
        summary: "[]",
        summary_extra: None,
        message: &message,
    };
    let before = texts(&session);
    let err = session.compact(&unbalanced).unwrap_err();
    assert_eq!(
        err.kind(),
        &ErrorKind::CompactionUnbalanced {
            start: user1,
            end: assistant1,
            open_before: 0,
            open_after: 1
        }
    );
    let bad_extra = Compaction {
        end: result1,
        summary_extra: Some(r#"{"compactionId":"dup"}"#),
        ..unbalanced
    };
    assert_eq!(
        session.compact(&bad_extra).unwrap_err().code(),
        "DATA_DUPLICATE_KEY"
    );
    assert_eq!(
        texts(&session),
        before,
        "refused compactions leave no trace"
    );
    let done = session
        .compact(&Compaction {
            end: result1,
            summary_extra: Some(r#"{"shadowedTokenCount":9}"#),
            ..unbalanced
        })
        .unwrap();
    assert_eq!(
        session
            .event(done.message)
            .unwrap()
            .unwrap()
            .sources
            .map(|s| s.to_vec()),
        Some(vec![done.start, done.summary, user1, assistant1, result1])
    );
    assert_eq!(
        session.event(done.message).unwrap().unwrap().surface_op,
        Some(SurfaceOp::Replace {
            start: user1,
            end: result1
        })
    );
    assert!(
        session
            .event(done.summary)
            .unwrap()
            .unwrap()
            .data()
            .ends_with(r#""shadowedSeqs":[1,3,5],"shadowedTokenCount":9}"#)
    );
    assert_eq!(session.surface().nodes()[..2], [done.message, user2]);
    // Nested: the summary and the next turn's user message.
    let nested = Compaction {
        start: done.message,
        end: user2,
        compaction_id: "k2",
        ..unbalanced
    };
    let again = session.compact(&nested).unwrap();
    assert_eq!(session.surface().nodes()[0], again.message);
    assert_eq!(session.surface().replace_generation(), 2);
}

#[test]
fn prune_rewrites_only_the_tool_output() {
    let mut session = new_session(with_invariants());
    let (user, _, result) = tool_turn(&mut session, 1);
    session
        .append::<kinds::TurnStart>(r#"{"turn":2}"#, NoSurface)
        .unwrap();
    let prune = |seq, content| Prune {
        seq,
        content,
        shadowed_token_count: 3,
    };
    assert_eq!(
        session.prune(&prune(user, "[]")).unwrap_err().code(),
        "TOOL_REWRITE_TARGET"
    );
    assert_eq!(
        session.prune(&prune(99, "[]")).unwrap_err().code(),
        "REPLACE_START_NOT_ON_SURFACE"
    );
    assert_eq!(
        session.prune(&prune(result, "{}")).unwrap_err().code(),
        "TOOL_REWRITE_CHANGED"
    );
    let seq = session
        .prune(&prune(result, r#"[{"type":"text","text":"(pruned)"}]"#))
        .unwrap();
    let old = session.event(result).unwrap().unwrap().data().replace(
        r#"[{"type":"text","text":"out"}]"#,
        r#"[{"type":"text","text":"(pruned)"}]"#,
    );
    assert_eq!(session.event(seq).unwrap().unwrap().data(), old);
    assert_eq!(
        session.event(seq - 1).unwrap().unwrap().event_type,
        "compaction/prune"
    );
    assert!(session.surface().nodes().contains(&seq));
    assert!(!session.surface().nodes().contains(&result));
}

#[test]
fn as_of_travels_back_in_time() {
    let mut session = new_session(options());
    let (user, assistant, result) = tool_turn(&mut session, 1);
    session
        .prune(&Prune {
            seq: result,
            content: "[]",
            shadowed_token_count: 0,
        })
        .unwrap();
    let then = session.as_of(result).unwrap();
    assert_eq!(then.surface.nodes(), &[user, assistant, result]);
    assert_eq!(then.transcript, vec![user, assistant, result]);
    assert_eq!(then.messages.len(), 3);
    let now = session.as_of(session.seq_next() - 1).unwrap();
    assert_eq!(now.surface.nodes(), session.surface().nodes());
    assert_eq!(
        session.as_of(session.seq_next()).unwrap_err().code(),
        "INVALID_BOUNDARY"
    );
}

#[test]
fn whatever_append_accepted_reopens() {
    // An empty call id cannot be answered, so repair gives it no closer (found by
    // tests/surface_model.rs); a clock outside the safe range is clamped.
    let clock = Arc::new(ManualClock::new(i64::MAX));
    let mut session = Session::create(
        "s",
        None,
        None,
        Options {
            clock,
            max_event_bytes: 400,
            ..Options::default()
        },
    )
    .unwrap();
    session
        .append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)
        .unwrap();
    let blocks = r#"{"type":"tool-call","id":""},{"type":"tool-call","id":"long-enough-to-make-the-closer-exceed-the-limit"}"#;
    session
        .append::<kinds::AssistantMessage>(&assistant_data(1, 1, blocks), SurfaceIntent::append())
        .unwrap();
    assert_eq!(session.event(0).unwrap().unwrap().time, (1 << 53) - 1);
    let stored = texts(&session);
    let refs: Vec<&str> = stored.iter().map(String::as_str).collect();
    let (reopened, report) = Session::reopen(
        "s",
        session.header().text(),
        &refs,
        session.options().clone(),
    )
    .unwrap();
    assert_eq!(
        report.closers, 2,
        "one tool/result for the non-empty id, then turn/end"
    );
    assert!(reopened.event(2).unwrap().unwrap().text().len() > 400);
}

#[test]
fn append_checks_json_rules_before_the_type() {
    let mut session = new_session(options());
    assert_eq!(
        session.append_dynamic("", "{", None).unwrap_err().code(),
        "DATA_INVALID_JSON"
    );
    assert_eq!(
        session.append_dynamic("", "-0", None).unwrap_err().code(),
        "DATA_NOT_LOSSLESS"
    );
    assert_eq!(
        session.append_dynamic("", "{}", None).unwrap_err().code(),
        "ENVELOPE_INVALID"
    );
}

#[test]
fn helpers_are_atomic_and_refusals_carry_session_and_seq() {
    // Found in review: a prune or compaction whose last event is refused left its first
    // events behind.
    let mut session = new_session(with_invariants());
    let (user, _, result) = tool_turn(&mut session, 1);
    let before = texts(&session);
    let prune = |content| Prune {
        seq: result,
        content,
        shadowed_token_count: 0,
    };
    assert_eq!(
        session.prune(&prune("[-0]")).unwrap_err().code(),
        "DATA_NOT_LOSSLESS"
    );
    let outside_turn = session.prune(&prune("[]")).unwrap_err();
    assert_eq!(outside_turn.code(), "INV_REPLACEMENT_OUTSIDE_TURN");
    assert_eq!(
        (outside_turn.session(), outside_turn.seq()),
        (Some("s"), Some(before.len() as u64 + 1))
    );
    let message = r#"{"id":"m","role":"user","source":{"kind":"user"},"content":[],"n":-0}"#;
    let compaction = Compaction {
        compaction_id: "k",
        turn: None,
        start: user,
        end: result,
        summary: "[]",
        summary_extra: None,
        message,
    };
    assert_eq!(
        session.compact(&compaction).unwrap_err().code(),
        "DATA_NOT_LOSSLESS"
    );
    let injected = Compaction {
        summary: r#"1,"injected":true"#,
        ..compaction
    };
    assert_eq!(
        session.compact(&injected).unwrap_err().code(),
        "DATA_INVALID_JSON"
    );
    assert_eq!(texts(&session), before);
    assert_eq!(
        session.append_dynamic("x", "{", None).unwrap_err().seq(),
        Some(before.len() as u64)
    );
}

#[test]
fn invariant_checks_stay_linear_with_many_pending_calls() {
    let mut session = new_session(with_invariants());
    open_step_1(&mut session);
    let calls: Vec<String> = (0..20_000)
        .map(|i| format!(r#"{{"turn":1,"step":1,"callId":"c{i}"}}"#))
        .collect();
    let batch: Vec<(&str, &str, Option<SurfaceIntent>)> = calls
        .iter()
        .map(|c| ("tool/call", c.as_str(), None))
        .collect();
    let seqs = session.append_all(&batch).unwrap();
    assert_eq!(seqs.len(), 20_000);
    let answer = tool_result_data(1, 1, "c19999");
    session
        .append::<kinds::ToolResult>(&answer, SurfaceIntent::append())
        .unwrap();
    let again = session
        .append::<kinds::ToolResult>(&answer, SurfaceIntent::append())
        .unwrap_err();
    assert_eq!(again.code(), "INV_TOOL_RESULT_UNMATCHED");
}

#[test]
fn empty_ids_are_refused_and_header_strings_may_hold_lone_surrogates() {
    assert_eq!(
        Session::create("", None, None, options())
            .unwrap_err()
            .code(),
        "HEADER_INVALID"
    );
    let header = r#"{"version":0,"id":"s","createdAt":0,"cwd":"/\ud800","parentSession":"\udfff","agentPreset":"\ud800"}"#;
    let session = Session::create("s", Some(header), None, options()).unwrap();
    assert_eq!(session.header().cwd(), Some(&b"/\xed\xa0\x80"[..]));
    let child = session.fork(Boundary::Last, "c").unwrap();
    assert!(
        child.header().text().contains(r#""cwd":"/\ud800""#),
        "{}",
        child.header().text()
    );
}

#[test]
fn repair_stays_linear_with_many_pending_calls() {
    // Found in review: 80k tool-call blocks took 17 s to repair with a linear pending list.
    let mut session = new_session(options());
    session
        .append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)
        .unwrap();
    let blocks: Vec<String> = (0..80_000)
        .map(|i| format!(r#"{{"type":"tool-call","id":"c{i}"}}"#))
        .collect();
    session
        .append::<kinds::AssistantMessage>(
            &assistant_data(1, 1, &blocks.join(",")),
            SurfaceIntent::append(),
        )
        .unwrap();
    let started = std::time::Instant::now();
    let closers = repair::closers(session.log()).unwrap();
    assert_eq!(closers.len(), 80_001);
    assert!(closers[79_999].contains(r#""id":"interrupted-tool-result-c79999-80001""#));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "linear, not quadratic"
    );
}

#[test]
fn pending_call_ids_are_a_set() {
    // Contract §9: `tool/call` adds its id to pending, an appended `tool/result` removes
    // it. A second call with the same id adds nothing, so one result answers both and a
    // second result is unmatched (found in review: ids were counted).
    let mut session = new_session(with_invariants());
    open_step_1(&mut session);
    for _ in 0..2 {
        session
            .append::<kinds::ToolCall>(r#"{"turn":1,"step":1,"callId":"a"}"#, NoSurface)
            .unwrap();
    }
    let answer = tool_result_data(1, 1, "a");
    session
        .append::<kinds::ToolResult>(&answer, SurfaceIntent::append())
        .unwrap();
    let before = (session.invariants.clone(), session.seq_next());
    let again = session
        .append::<kinds::ToolResult>(&answer, SurfaceIntent::append())
        .unwrap_err();
    assert_eq!(again.code(), "INV_TOOL_RESULT_UNMATCHED");
    assert_eq!((session.invariants.clone(), session.seq_next()), before);
}
