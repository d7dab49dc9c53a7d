//! The public facade, used as a host uses it: only items at the crate root (issue 14).
//! This file names nothing under the hidden `internals` module (the last test checks that), so
//! removing or renaming a facade item fails this crate's build, and CI with it.

use std::time::Duration;

use surfacelog::{
    Boundary, CheckpointUnusable, Compacted, Compaction, Durability, Error, ErrorKind, Event,
    EventKind, EventRef, FollowEvents, Follower, Header, Listing, Message, NoSurface, OpenReport,
    Opened, Outcome, Problem, Prune, Replacement, Seqs, Session, SessionReport, Severity, Snapshot,
    Store, StoreOptions, StoredSession, Surface, SurfaceIntent, SurfaceOp, TornTail, VerifyReport,
    kinds,
};

/// Every facade type, named: a compile-time list of what the crate root must export.
#[allow(
    dead_code,
    reason = "only its signature matters: it names every facade type"
)]
#[allow(
    clippy::type_complexity,
    reason = "the point is to name every type at once"
)]
fn facade_types(
    _: Option<(
        Store,
        StoreOptions,
        StoredSession,
        Session,
        Listing,
        Opened,
        OpenReport,
    )>,
    _: Option<(
        TornTail,
        CheckpointUnusable,
        Durability,
        Error,
        ErrorKind,
        Outcome,
    )>,
    _: Option<(
        Event,
        EventRef<'_>,
        Header,
        Seqs<'_>,
        SurfaceOp,
        Message<'_>,
        Surface,
    )>,
    _: Option<(
        Replacement<'_>,
        Snapshot<'_>,
        Boundary,
        Compaction<'_>,
        Compacted,
        Prune<'_>,
    )>,
    _: Option<(
        SurfaceIntent,
        NoSurface,
        Follower,
        VerifyReport,
        SessionReport,
        Problem,
    )>,
    _: Option<(Severity, surfacelog::Result<()>)>,
    _: Option<FollowEvents<'_>>,
) {
}

fn user(id: &str, text: &str) -> String {
    format!(
        r#"{{"id":"{id}","role":"user","source":{{"kind":"user"}},"content":[{{"type":"text","text":"{text}"}}]}}"#
    )
}

/// A closed turn: user message, one model step calling a tool, its result, turn end.
/// Returns the seq of the tool result.
fn turn(session: &mut StoredSession, turn: u64) -> surfacelog::Result<u64> {
    session.append::<kinds::TurnStart>(&format!(r#"{{"turn":{turn}}}"#), NoSurface)?;
    session
        .append::<kinds::UserMessage>(&user(&format!("u{turn}"), "hi"), SurfaceIntent::append())?;
    session.append::<kinds::StepStart>(&format!(r#"{{"turn":{turn},"step":1}}"#), NoSurface)?;
    let chunk = session.append::<kinds::AssistantChunk>(
        &format!(
            r#"{{"turn":{turn},"step":1,"chunk":{{"type":"text-delta","index":0,"text":"ok"}}}}"#
        ),
        NoSurface,
    )?;
    session.append::<kinds::AssistantMessage>(
        &format!(
            r#"{{"turn":{turn},"step":1,"message":{{"id":"a{turn}","role":"assistant","source":{{"kind":"model","provider":"p","model":"m"}},"content":[{{"type":"text","text":"ok"}},{{"type":"tool-call","id":"c{turn}","name":"grep","arguments":"{{}}"}}]}}}}"#
        ),
        SurfaceIntent::append_citing(vec![chunk]),
    )?;
    let call = session.append::<kinds::ToolCall>(
        &format!(r#"{{"turn":{turn},"step":1,"callId":"c{turn}","name":"grep"}}"#),
        NoSurface,
    )?;
    let result = session.append::<kinds::ToolResult>(
        &format!(
            r#"{{"turn":{turn},"step":1,"message":{{"id":"r{turn}","role":"user","source":{{"kind":"tool","callId":"c{turn}"}},"content":[{{"type":"tool-result","toolCallId":"c{turn}","isError":false,"content":[{{"type":"text","text":"a long output"}}]}}]}}}}"#
        ),
        SurfaceIntent::append_citing(vec![call]),
    )?;
    session.append::<kinds::StepEnd>(&format!(r#"{{"turn":{turn},"step":1}}"#), NoSurface)?;
    session.append::<kinds::TurnEnd>(
        &format!(r#"{{"turn":{turn},"reason":{{"kind":"completed"}}}}"#),
        NoSurface,
    )?;
    Ok(result)
}

/// The names in `dir` and below, sorted: what must not change.
fn tree(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&path) else {
            continue;
        };
        for entry in entries.flatten() {
            out.push(entry.path().display().to_string());
            stack.push(entry.path());
        }
    }
    out.sort();
    out
}

#[test]
fn open_never_creates_and_open_or_create_does() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("a").join("store");
    let error = Store::open(&missing, StoreOptions::new()).unwrap_err();
    assert_eq!(error.code(), "STORE_NOT_FOUND");
    assert!(matches!(error.kind(), ErrorKind::StoreNotFound { path } if *path == missing));
    assert_eq!(error.outcome(), Outcome::NothingWritten);
    assert!(
        tree(tmp.path()).is_empty(),
        "nothing created: {:?}",
        tree(tmp.path())
    );

    // An existing directory that is no store: refused, and left as it was.
    std::fs::create_dir(tmp.path().join("empty")).unwrap();
    std::fs::write(tmp.path().join("empty").join("notes.txt"), "mine").unwrap();
    let before = tree(tmp.path());
    let error = Store::open(tmp.path().join("empty"), StoreOptions::new()).unwrap_err();
    assert_eq!(error.code(), "STORE_NOT_FOUND");
    assert_eq!(tree(tmp.path()), before);

    let store = Store::open_or_create(&missing, StoreOptions::new()).unwrap();
    store.create("s", None, None).unwrap().close().unwrap();
    drop(store);
    let store = Store::open(&missing, StoreOptions::new()).unwrap();
    assert_eq!(store.list().unwrap().len(), 1);
    drop(store);

    // Opening an existing store writes nothing: not even the lock file of `tmp/`.
    std::fs::remove_file(missing.join("tmp.lock")).unwrap();
    let before = tree(&missing);
    Store::open(&missing, StoreOptions::new()).unwrap();
    assert_eq!(tree(&missing), before);

    // A store missing one of its directories is damaged, not recreated by `open`.
    std::fs::remove_dir(missing.join("trash")).unwrap();
    let error = Store::open(&missing, StoreOptions::new()).unwrap_err();
    assert_eq!(error.code(), "CORRUPT");
    assert!(error.to_string().contains("trash"), "{error}");
    assert!(!missing.join("trash").exists());
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one host's session, read top to bottom"
)]
fn a_host_loop_through_the_facade() {
    let tmp = tempfile::tempdir().unwrap();
    let options = StoreOptions::new()
        .durability(Durability::Sync)
        .invariants(true)
        .segment_bytes(64 << 10)
        .checkpoint_every(20)
        .max_event_bytes(1 << 20);
    let store = Store::open_or_create(tmp.path(), options.clone()).unwrap();
    let mut session = store.create("main", None, None).unwrap();
    let result = turn(&mut session, 1).unwrap();
    turn(&mut session, 2).unwrap();
    assert_eq!(session.messages().unwrap().len(), 6);

    // In turn 3: prune the first tool output, then compact turn 1 away.
    session
        .append::<kinds::TurnStart>(r#"{"turn":3}"#, NoSurface)
        .unwrap();
    let pruned = session
        .prune(&Prune {
            seq: result,
            content: r#"[{"type":"text","text":"[pruned]"}]"#,
            shadowed_token_count: 10,
        })
        .unwrap();
    let nodes = session.surface().nodes().to_vec();
    let summary = r#"[{"type":"text","text":"turn 1"}]"#;
    let message = format!(
        r#"{{"id":"sum","role":"user","source":{{"kind":"plugin","plugin":"compaction"}},"content":{summary}}}"#
    );
    let done: Compacted = session
        .compact(&Compaction {
            compaction_id: "c1",
            turn: Some(3),
            start: nodes[0],
            end: nodes[2],
            summary,
            summary_extra: None,
            message: &message,
        })
        .unwrap();
    assert_eq!(session.surface().nodes()[0], done.message);
    assert_eq!(session.surface().position(done.message), Some(0));
    let history = session.replacements().unwrap();
    let replaced: Vec<Replacement<'_>> = history.replacements().collect();
    assert_eq!(replaced.len(), 2);
    assert_eq!(replaced[0].seq, pruned);
    assert_eq!(replaced[1].shadowed, &nodes[..3]);
    let snapshot: Snapshot<'_> = session.as_of(pruned - 2).unwrap();
    assert_eq!(snapshot.messages.len(), 6);
    // The transcript keeps what was appended, not what replaced it.
    let transcript = session.transcript().unwrap();
    assert!(transcript.contains(&nodes[0]) && !transcript.contains(&done.message));

    // Refusals: a stable code, and nothing written.
    let seq_next = session.seq_next();
    let error = session
        .append::<kinds::StepStart>(r#"{"turn":9,"step":1}"#, NoSurface)
        .unwrap_err();
    assert!(error.code().starts_with("INV_"), "{error}");
    assert_eq!(error.outcome(), Outcome::NothingWritten);
    assert_eq!(error.session(), Some("main"));
    assert_eq!(error.seq(), Some(seq_next));
    assert!(std::error::Error::source(&error).is_none());
    assert_eq!(session.seq_next(), seq_next);
    let error = session
        .append_dynamic("user/message", &user("x", "y"), None)
        .unwrap_err();
    assert_eq!(error.code(), "SURFACE_OP_REQUIRED");
    let error = session
        .append_json("user/message", &user("x", "y"), Some("null"), None)
        .unwrap_err();
    assert_eq!(error.code(), "SURFACE_OP_INVALID");
    let seqs = session
        .append_all(&[
            ("compaction/end", r#"{"compactionId":"c9"}"#, None),
            ("user/message", "{", Some(SurfaceIntent::append())),
        ])
        .unwrap_err();
    assert_eq!(seqs.code(), "DATA_INVALID_JSON");
    assert_eq!(session.seq_next(), seq_next);

    // A crash mid-turn: the reopen closes turn 3 once.
    drop(session);
    let (session, opened): (StoredSession, Opened) = store.open_session("main").unwrap();
    assert_eq!(opened.closers, 1);
    let report: &OpenReport = &opened.log;
    assert!(report.torn_tail.is_none());
    let closer: EventRef<'_> = session.event(session.seq_next() - 1).unwrap().unwrap();
    assert_eq!(closer.event_type, "turn/end");
    assert_eq!(closer.surface_op, None);
    let header: &Header = session.header();
    assert_eq!(header.id(), "main");
    assert_eq!(session.first_live_seq(), seq_next);
    let messages: Vec<Message<'_>> = session.messages().unwrap();
    let cited: Seqs<'_> = session
        .event(messages[2].seq)
        .unwrap()
        .unwrap()
        .sources
        .expect("the assistant message cites its chunk");
    assert_eq!(cited.len(), 1);
    assert_eq!(
        session.event(messages[2].seq).unwrap().unwrap().surface_op,
        Some(SurfaceOp::Append)
    );
    session.close().unwrap();

    // Fork, follow, inspect, verify, list, delete.
    let mut child = store.fork("main", Boundary::Last, "child").unwrap();
    turn(&mut child, 4).unwrap();
    assert_eq!(child.header().seed_length(), Some(seq_next + 1));
    child.close().unwrap();
    let mut follower: Follower = store.follow("child").unwrap();
    assert!(follower.wait_for(0, Duration::from_secs(5)).unwrap());
    let events: Vec<Event> = follower
        .events(0, Duration::from_millis(10))
        .collect::<surfacelog::Result<_>>()
        .unwrap();
    assert_eq!(
        events.len() as u64,
        store.inspect("child").unwrap().seq_next()
    );
    assert!(events.iter().enumerate().all(|(i, e)| e.seq() == i as u64));
    let report: VerifyReport = store.verify(None).unwrap();
    assert!(report.ok(), "{:?}", report.problems().collect::<Vec<_>>());
    let sessions: &[SessionReport] = &report.sessions;
    assert_eq!(sessions.len(), 2);
    let listing: Listing = store.list().unwrap();
    assert_eq!(
        listing.iter().map(Header::id).collect::<Vec<_>>(),
        ["child", "main"]
    );
    store.delete("child").unwrap();
    store.purge().unwrap();
    store.remove("main").unwrap();
    assert!(store.list().unwrap().is_empty());
    let error = store.open_session("main").unwrap_err();
    assert!(matches!(error.kind(), ErrorKind::SessionNotFound { .. }));
}

#[test]
fn an_in_memory_session_has_the_same_api() {
    let options = StoreOptions::new().max_event_bytes(300);
    let mut session = Session::in_memory("m", &options).unwrap();
    assert_eq!(kinds::UserMessage::TYPE, "user/message");
    session
        .append::<kinds::UserMessage>(&user("a", "b"), SurfaceIntent::append())
        .unwrap();
    let error = session
        .append::<kinds::UserMessage>(&user("a", &"x".repeat(400)), SurfaceIntent::append())
        .unwrap_err();
    assert_eq!(error.code(), "EVENT_TOO_LARGE");
    assert_eq!(session.messages().unwrap().len(), 1);
    assert_eq!(Boundary::from_json("3").unwrap(), Boundary::Seq(3));
    assert!(Session::in_memory("", &options).is_err());
}

#[test]
fn resume_appends_the_end_seed_marker_once() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open_or_create(tmp.path(), StoreOptions::new()).unwrap();
    let mut session = store.create("s", None, None).unwrap();
    turn(&mut session, 1).unwrap();
    let end = session.seq_next();
    session.close().unwrap();
    let (session, _) = store.resume("s").unwrap();
    assert_eq!(
        session.event(end).unwrap().unwrap().event_type,
        "session/end-seed"
    );
    session.close().unwrap();
    let (session, _) = store.resume("s").unwrap();
    assert_eq!(
        session.seq_next(),
        end + 1,
        "the marker is not appended twice"
    );
}

#[test]
fn this_file_uses_only_the_crate_root() {
    let source = include_str!("facade.rs");
    let needle = ["surfacelog", "::", "internals"].concat();
    assert!(
        !source.contains(&needle),
        "tests/facade.rs must use only the crate root"
    );
}
