//! Feature `serde` (issue 14 item 4): a host's own types go in through
//! `Session::append_serialize`, which validates the serialized text exactly as the text
//! append does, and come back out through `Message::parse`.

#![cfg(feature = "serde")]

mod common;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use surfacelog::internals::log::Durability;
use surfacelog::internals::session::{NoSurface, SurfaceIntent, kinds};
use surfacelog::internals::store::{Store, StoredSession};

use common::{scratch, store_options};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Source {
    kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    provider: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
enum Block {
    Text {
        text: String,
    },
    ToolCall {
        id: String,
        name: String,
        arguments: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Msg {
    id: String,
    role: String,
    source: Source,
    content: Vec<Block>,
}

/// The data of an `assistant/message`: its message sits under `message`.
#[derive(Debug, Serialize)]
struct AssistantData<'a> {
    turn: u64,
    step: u64,
    message: &'a Msg,
}

/// A type the stored messages do not fit.
#[derive(Debug, Deserialize)]
struct Strict {
    #[expect(dead_code, reason = "only its absence matters")]
    missing: u64,
}

/// A message without `content` (contract §3).
#[derive(Serialize)]
struct NoContent<'a> {
    id: &'a str,
    role: &'a str,
    source: Source,
}

/// A message with a float member.
#[derive(Serialize)]
struct Rated {
    id: &'static str,
    role: &'static str,
    source: Source,
    content: Vec<Block>,
    score: f64,
}

fn user(text: &str) -> Msg {
    Msg {
        id: format!("u-{text}"),
        role: "user".into(),
        source: Source {
            kind: "user".into(),
            provider: None,
            model: None,
        },
        content: vec![Block::Text { text: text.into() }],
    }
}

fn new_session(store: &Store) -> StoredSession {
    let mut session = store.create("s", None, None).unwrap();
    session
        .append_serialize::<kinds::TurnStart, _>(&BTreeMap::from([("turn", 1)]), NoSurface)
        .unwrap();
    session
}

#[test]
fn typed_messages_round_trip_through_the_store() {
    let dir = scratch("serde", "round-trip");
    let store = Store::open_or_create(&dir, store_options(Durability::Manual, 1 << 16)).unwrap();
    let mut session = new_session(&store);
    let question = user("list the files, \"quoted\" \u{e9}\u{1f600}");
    let answer = Msg {
        id: "a1".into(),
        role: "assistant".into(),
        source: Source {
            kind: "model".into(),
            provider: Some("p".into()),
            model: Some("m".into()),
        },
        content: vec![
            Block::Text {
                text: "Let me look.".into(),
            },
            Block::ToolCall {
                id: "c1".into(),
                name: "ls".into(),
                arguments: "{}".into(),
            },
        ],
    };
    let u = session
        .append_serialize::<kinds::UserMessage, _>(&question, SurfaceIntent::append())
        .unwrap();
    let step = AssistantData {
        turn: 1,
        step: 1,
        message: &answer,
    };
    let a = session
        .append_serialize::<kinds::AssistantMessage, _>(&step, SurfaceIntent::append())
        .unwrap();
    // Stored exactly as serde_json wrote it.
    let stored = session.event(u).unwrap().unwrap().data().into_owned();
    assert_eq!(stored, serde_json::to_string(&question).unwrap());
    session.close().unwrap();

    // Read back after a reopen: the messages are the stored texts, parsed into `Msg`. The
    // turn was left open, so the reopen closed it: a third message answers the tool call.
    let (session, opened) = store.open_session("s").unwrap();
    let messages = session.messages().unwrap();
    assert!(opened.closers > 0);
    let seqs: Vec<u64> = messages.iter().map(|m| m.seq).collect();
    assert_eq!(seqs[..2], [u, a]);
    assert_eq!(messages[0].parse::<Msg>().unwrap(), question);
    assert_eq!(messages[1].parse::<Msg>().unwrap(), answer);

    // A message that does not fit the host's type is serde_json's error, not a panic.
    assert!(messages[0].parse::<Strict>().is_err());
}

/// The refusal of the serialized value, and of the same text appended as text: equal
/// codes, and neither leaves a trace (no seq taken, nothing stored after a reopen).
fn refused_like_text<T: Serialize>(session: &mut StoredSession, value: &T, code: &str) {
    let before = session.seq_next();
    let typed = session
        .append_serialize::<kinds::UserMessage, _>(value, SurfaceIntent::append())
        .unwrap_err();
    let text = serde_json::to_string(value).unwrap();
    let plain = session
        .append::<kinds::UserMessage>(&text, SurfaceIntent::append())
        .unwrap_err();
    assert_eq!(typed.code(), code, "{typed}");
    assert_eq!(plain.code(), code, "{plain}");
    assert_eq!(session.seq_next(), before);
}

#[test]
fn a_serialized_value_the_engine_refuses_leaves_no_trace() {
    let dir = scratch("serde", "refused");
    let store = Store::open_or_create(&dir, store_options(Durability::Manual, 1 << 16)).unwrap();
    let mut session = new_session(&store);

    // The message shape (contract §3).
    let source = Source {
        kind: "user".into(),
        provider: None,
        model: None,
    };
    refused_like_text(
        &mut session,
        &NoContent {
            id: "x",
            role: "user",
            source,
        },
        "MESSAGE_SHAPE",
    );

    // Lossless JSON: serde_json writes -0.0 as `-0.0`, which an append refuses.
    let negative_zero = Rated {
        id: "x",
        role: "user",
        source: Source {
            kind: "user".into(),
            provider: None,
            model: None,
        },
        content: vec![],
        score: -0.0,
    };
    refused_like_text(&mut session, &negative_zero, "DATA_NOT_LOSSLESS");

    // A value serde_json cannot write at all (a map whose keys are not strings).
    let before = session.seq_next();
    let map = BTreeMap::from([((1, 2), "pair key")]);
    let error = session
        .append_serialize::<kinds::UserMessage, _>(&map, SurfaceIntent::append())
        .unwrap_err();
    assert_eq!(error.code(), "DATA_INVALID_JSON", "{error}");
    assert_eq!(session.seq_next(), before);

    // The next accepted value takes the seq the refused ones did not.
    let seq = session
        .append_serialize::<kinds::UserMessage, _>(&user("ok"), SurfaceIntent::append())
        .unwrap();
    assert_eq!(seq, before);
    session.close().unwrap();
    let (session, opened) = store.open_session("s").unwrap();
    // Stored: the events before, the accepted one, and the closers of the open turn.
    assert_eq!(session.seq_next() - opened.closers, before + 1);
    assert_eq!(
        session.messages().unwrap()[0].parse::<Msg>().unwrap(),
        user("ok")
    );
}
