//! Crash repair's closers (contract §8), compared byte for byte with an independent model
//! written from the contract text, plus idempotence.
//!
//! Each case is a random log of 0 to 29 events: turn and step brackets (their `turn` and
//! `step` sometimes absent, `null`, a string or a number spelled `1.50` or `1e2`),
//! assistant messages announcing 0 to 2 tool calls from four ids (one with a quote and a
//! non-ASCII letter), `tool/call` and `tool/result` events for those ids, and other
//! log-only events; times go up and down. The log is reopened with `Session::reopen` and
//! the events it appends must be, byte for byte, the closers the model writes: §8's two
//! passes, with the key order and exact texts it gives and numbers written as
//! `JSON.stringify` writes them. Reopening the repaired log must append nothing. 3000
//! cases per run, and a fixed-seed run of 3000 more checks that the generator reaches
//! every kind of closer.

// serde_json, which these tests build their events with, is a dependency of these features.
#![cfg(any(feature = "cli", feature = "serde"))]

use std::fmt::Write as _;
use std::sync::Arc;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use serde_json::{Map, Value, json};
use surfacelog::internals::clock::ManualClock;
use surfacelog::internals::session::{Options, Session};

const HEADER: &str = r#"{"version":0,"id":"s","createdAt":1}"#;

const NOT_STARTED: &str = "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed.";
const UNKNOWN: &str = "The tool call was interrupted after it was recorded, but no result was durably recorded. Its outcome is unknown. Decide whether to retry from the tool semantics: retry only if the operation is read-only or idempotent; if it may have side effects, first verify external state or ask the user. Do not retry blindly.";

/// Tool call ids the generator uses.
const IDS: [&str; 4] = ["a", "b", "c\"é", "d"];

/// Cases per run.
const CASES: u32 = 3000;

fn options() -> Options {
    Options {
        clock: Arc::new(ManualClock::new(5)),
        ..Options::default()
    }
}

/// An integral number as `JSON.stringify` writes it.
#[expect(
    clippy::cast_possible_truncation,
    reason = "integral values only; the generated ones are far inside i64"
)]
fn js_integer(float: f64) -> String {
    format!("{}", float as i64)
}

/// `JSON.stringify` of a value (enough for the values generated here).
fn js(value: &Value) -> String {
    match value {
        Value::Number(number) => {
            let float = number.as_f64().expect("a JSON number is a float");
            if float.fract() == 0.0 && float.abs() < 1e21 {
                js_integer(float)
            } else {
                format!("{float}")
            }
        }
        Value::String(_) => serde_json::to_string(value).expect("a string serializes"),
        Value::Array(items) => format!("[{}]", items.iter().map(js).collect::<Vec<_>>().join(",")),
        Value::Object(members) => format!(
            "{{{}}}",
            members
                .iter()
                .map(|(key, member)| format!("{}:{}", quote(key), js(member)))
                .collect::<Vec<_>>()
                .join(",")
        ),
        other => other.to_string(),
    }
}

/// A JSON string literal.
fn quote(text: &str) -> String {
    serde_json::to_string(text).expect("a string serializes")
}

/// A pending tool call: its id, the `step` its announcing message carried (absent when
/// the key was), and the seq of its `tool/call` once one was seen.
#[derive(Debug, Clone)]
struct Pending {
    id: String,
    step: Option<Value>,
    call_seq: Option<u64>,
}

/// An open turn or step: the `turn` or `step` of the event that opened it, `None` when
/// that event had no such key.
struct Bracket(Option<Value>);

/// Pass 1's state: the open turn, the open step, and the pending calls in registration
/// order.
#[derive(Default)]
struct Scan {
    turn: Option<Bracket>,
    step: Option<Bracket>,
    pending: Vec<Pending>,
}

/// Contract §8, pass 1.
fn scan(events: &[Value]) -> Scan {
    let mut state = Scan::default();
    for (seq, event) in (0u64..).zip(events) {
        let data = &event["data"];
        match event["type"]
            .as_str()
            .expect("a generated event has a type")
        {
            "turn/start" => {
                state.turn = Some(Bracket(data.get("turn").cloned()));
                state.step = None;
                state.pending.clear();
            }
            "turn/end" => {
                state.turn = None;
                state.step = None;
                state.pending.clear();
            }
            "step/start" => state.step = Some(Bracket(data.get("step").cloned())),
            "step/end" => {
                state.step = None;
                state.pending.clear();
            }
            "assistant/message" => {
                let blocks = data["message"]["content"].as_array();
                for block in blocks.expect("generated content is an array") {
                    if block["type"] == json!("tool-call") {
                        let id = block["id"].as_str().expect("generated ids are strings");
                        let entry = Pending {
                            id: id.to_owned(),
                            step: data.get("step").cloned(),
                            call_seq: None,
                        };
                        match state.pending.iter_mut().find(|pending| pending.id == id) {
                            Some(pending) => *pending = entry,
                            None => state.pending.push(entry),
                        }
                    }
                }
            }
            "tool/call" => {
                let id = data["callId"].as_str();
                if let Some(pending) = state
                    .pending
                    .iter_mut()
                    .find(|pending| Some(pending.id.as_str()) == id)
                {
                    pending.call_seq = Some(seq);
                }
            }
            "tool/result" => {
                let id = data["message"]["source"]["callId"].as_str();
                state
                    .pending
                    .retain(|pending| Some(pending.id.as_str()) != id);
            }
            _ => {}
        }
    }
    state
}

/// `"key":value` when the value is present.
fn member(key: &str, value: Option<&Value>) -> Option<String> {
    value.map(|value| format!("\"{key}\":{}", js(value)))
}

/// The closing `tool/result` of `pending` at `seq`.
fn tool_closer(pending: &Pending, turn: Option<&Value>, seq: u64, time: i64) -> String {
    let (name, code, text) = match pending.call_seq {
        None => ("ToolNotStartedError", "TOOL_NOT_STARTED", NOT_STARTED),
        Some(_) => ("ToolOutcomeUnknownError", "TOOL_OUTCOME_UNKNOWN", UNKNOWN),
    };
    let call = quote(&pending.id);
    let message_id = quote(&format!("interrupted-tool-result-{}-{seq}", pending.id));
    let mut data: Vec<String> = [member("turn", turn), member("step", pending.step.as_ref())]
        .into_iter()
        .flatten()
        .collect();
    data.push(format!(
        r#""message":{{"id":{message_id},"role":"user","source":{{"kind":"tool","callId":{call}}},"content":[{{"type":"tool-result","toolCallId":{call},"isError":true,"content":[{{"type":"text","text":{}}}]}}]}}"#,
        quote(text)
    ));
    data.push(format!(r#""error":{{"name":"{name}","code":"{code}"}}"#));
    let mut closer = format!(
        r#"{{"type":"tool/result","seq":{seq},"time":{time},"data":{{{}}},"surfaceOp":"append""#,
        data.join(",")
    );
    if let Some(call_seq) = pending.call_seq {
        write!(closer, r#","sourceEventSeqs":[{call_seq}]"#).expect("writing to a String succeeds");
    }
    closer.push('}');
    closer
}

/// Contract §8, passes 1 and 2: the texts of the closers, in order.
fn model_closers(events: &[Value]) -> Vec<String> {
    let Scan {
        turn,
        step,
        pending,
    } = scan(events);
    let Some(turn) = turn else { return vec![] };
    let Some(last) = events.last() else {
        return vec![];
    };
    let turn = turn.0.as_ref();
    let time = last["time"].as_i64().expect("generated times are integers");
    let mut seq = u64::try_from(events.len()).expect("a length fits in u64");
    let mut out = Vec::new();
    for call in &pending {
        out.push(tool_closer(call, turn, seq, time));
        seq += 1;
    }
    if let Some(step) = &step {
        let data: Vec<String> = [member("turn", turn), member("step", step.0.as_ref())]
            .into_iter()
            .flatten()
            .collect();
        out.push(format!(
            r#"{{"type":"step/end","seq":{seq},"time":{time},"data":{{{}}}}}"#,
            data.join(",")
        ));
        seq += 1;
    }
    let mut data: Vec<String> = member("turn", turn).into_iter().collect();
    data.push(r#""reason":{"kind":"interrupted"}"#.to_owned());
    out.push(format!(
        r#"{{"type":"turn/end","seq":{seq},"time":{time},"data":{{{}}}}}"#,
        data.join(",")
    ));
    out
}

/// A `turn` or `step` value: absent, a string, `1.50`, `1e2`, `null`, or `base`.
fn number(choice: u16, base: u64) -> Option<Value> {
    match choice % 9 {
        0 => None,
        1 => Some(json!("t")),
        2 => Some(serde_json::from_str("1.50").expect("valid JSON")),
        3 => Some(serde_json::from_str("1e2").expect("valid JSON")),
        4 => Some(Value::Null),
        _ => Some(json!(base)),
    }
}

/// Inserts `key` when `value` is present.
fn put(data: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(value) = value {
        data.insert(key.to_owned(), value);
    }
}

/// An assistant message at `seq` announcing 0 to 2 tool calls.
fn assistant_data(action: [u16; 4], seq: u64, data: &mut Map<String, Value>) {
    put(data, "turn", Some(json!(1)));
    put(data, "step", number(action[2] / 9, 1));
    let mut content = vec![json!({"type": "text", "text": "x"})];
    for k in 0..(action[2] % 3) {
        let id = IDS[(usize::from(action[1]) + usize::from(k)) % IDS.len()];
        content.push(json!({"type": "tool-call", "id": id, "name": "n", "input": {}}));
    }
    data.insert(
        "message".into(),
        json!({
            "id": format!("m{seq}"),
            "role": "assistant",
            "source": {"kind": "model", "provider": "p", "model": "m"},
            "content": content,
        }),
    );
}

/// Builds a log from actions (four random `u16`s each).
fn build(actions: &[[u16; 4]]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut time: i64 = 100;
    for (seq, action) in (0u64..).zip(actions) {
        time += i64::from(action[3] % 7) - 2;
        let id = IDS[usize::from(action[1]) % IDS.len()];
        let mut data = Map::new();
        let (ty, appended) = match action[0] % 12 {
            0 => {
                put(
                    &mut data,
                    "turn",
                    number(action[2], 1 + u64::from(action[1] % 3)),
                );
                ("turn/start", false)
            }
            1 => {
                put(&mut data, "turn", number(action[2], 1));
                ("turn/end", false)
            }
            2 | 3 => {
                put(&mut data, "turn", Some(json!(1)));
                put(
                    &mut data,
                    "step",
                    number(action[2], 1 + u64::from(action[1] % 2)),
                );
                ("step/start", false)
            }
            4 => {
                put(&mut data, "turn", Some(json!(1)));
                ("step/end", false)
            }
            5..=7 => {
                assistant_data(*action, seq, &mut data);
                ("assistant/message", true)
            }
            8 | 9 => {
                data.insert("callId".into(), json!(id));
                ("tool/call", false)
            }
            10 => {
                put(&mut data, "turn", Some(json!(1)));
                data.insert(
                    "message".into(),
                    json!({
                        "id": format!("r{seq}"),
                        "role": "user",
                        "source": {"kind": "tool", "callId": id},
                        "content": [{"type": "tool-result", "toolCallId": id, "content": []}],
                    }),
                );
                ("tool/result", true)
            }
            _ => ("plugin/other", false),
        };
        let mut event = json!({"type": ty, "seq": seq, "time": time, "data": Value::Object(data)});
        if appended {
            event["surfaceOp"] = json!("append");
        }
        out.push(event);
    }
    out
}

/// Every event of `session` from `from` on, as stored.
fn texts_from(session: &Session, from: u64) -> Vec<String> {
    (from..session.seq_next())
        .map(|seq| {
            session
                .event(seq)
                .expect("a stored event reads")
                .expect("a seq below seq_next has an event")
                .text()
                .into_owned()
        })
        .collect()
}

/// Reopens the log `actions` build and compares its closers with the model's; returns
/// the model's closers.
fn check(actions: &[[u16; 4]]) -> Result<Vec<String>, TestCaseError> {
    let events = build(actions);
    let texts: Vec<String> = events
        .iter()
        .map(|event| serde_json::to_string(event).expect("a JSON value serializes"))
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let (session, report) = Session::reopen("s", HEADER, &refs, options())
        .map_err(|error| TestCaseError::fail(format!("{error} {texts:#?}")))?;
    let want = model_closers(&events);
    prop_assert_eq!(
        &texts_from(&session, report.stored),
        &want,
        "log {:#?}",
        texts
    );
    // idempotence: reopening the repaired log adds nothing
    let all = texts_from(&session, 0);
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    let (_, again) = Session::reopen("s", HEADER, &refs, options())
        .map_err(|error| TestCaseError::fail(format!("{error} {all:#?}")))?;
    prop_assert_eq!(again.closers, 0);
    Ok(want)
}

fn actions() -> impl Strategy<Value = Vec<[u16; 4]>> {
    proptest::collection::vec(proptest::array::uniform4(any::<u16>()), 0..30)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]
    #[test]
    fn repair_matches_independent_model(actions in actions()) {
        check(&actions)?;
    }
}

/// The comparison is only as good as the logs: a fixed-seed run reaches logs that need no
/// repair, both kinds of tool closer, a closed step and several closers at once.
#[test]
fn generator_reaches_every_closer() {
    let mut runner = TestRunner::deterministic();
    let mut counts = [0usize; 5];
    for _ in 0..CASES {
        let actions = actions()
            .new_tree(&mut runner)
            .expect("the strategy generates")
            .current();
        let closers = check(&actions).unwrap_or_else(|error| panic!("{error}"));
        let has = |needle: &str| closers.iter().any(|closer| closer.contains(needle));
        for (count, reached) in counts.iter_mut().zip([
            closers.is_empty(),
            has("TOOL_NOT_STARTED"),
            has("TOOL_OUTCOME_UNKNOWN"),
            has("\"step/end\""),
            closers.len() > 2,
        ]) {
            *count += usize::from(reached);
        }
    }
    assert!(
        counts.iter().all(|count| *count > 0),
        "no repair, not started, outcome unknown, step/end, 3+ closers: {counts:?}"
    );
}
