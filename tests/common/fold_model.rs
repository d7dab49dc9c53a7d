//! An independent model of the pure fold (contract §4, steps 1-5), written from the
//! contract text alone, and a generator of random logs that drives it.
//!
//! Shared by `fold_model_contract.rs` (which compares the model with the engine's fold on
//! logs with faults) and `fork_model_contract.rs` (which builds valid source logs with the
//! generator and predicts a fork's child with the model). The model is a `Vec<u64>` of
//! seqs with linear lookup and `splice`; it reports the first refusal's code the way §4
//! orders the checks. The generator builds one event at a time from six random `u16`s
//! against the model's current state, so replace ranges come from the current surface
//! (nested compactions, prunes of tool results, rewrites of rewrites) and one event in
//! twelve carries a fault of a kind §4 names.

#![allow(
    dead_code,
    reason = "each model test uses a part of the model and its generator"
)]

use serde_json::{Map, Value, json};

/// The types that may carry `surfaceOp` (contract §3).
pub(crate) const ELIGIBLE: [&str; 5] = [
    "user/message",
    "assistant/message",
    "tool/result",
    "context/message",
    "steering/message",
];
/// Log-only types the generator uses.
const LOG_ONLY: [&str; 4] = ["turn/start", "tool/call", "plugin/x", "session/end-seed"];

/// The largest safe integer (contract §2).
const MAX_SAFE: f64 = 9_007_199_254_740_991.0;

/// A log position as an index into the model's vectors.
fn index(seq: u64) -> usize {
    usize::try_from(seq).expect("a seq of a generated log fits in usize")
}

/// A length as a seq.
fn seq_of(len: usize) -> u64 {
    u64::try_from(len).expect("a length fits in u64")
}

/// JSON values equal as values: numbers by value (contract §2, "7.0 is 7").
pub(crate) fn same(left: &Value, right: &Value) -> bool {
    match (left, right) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(xs), Value::Array(ys)) => {
            xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| same(x, y))
        }
        (Value::Object(xs), Value::Object(ys)) => {
            xs.len() == ys.len()
                && xs
                    .iter()
                    .all(|(key, x)| ys.get(key).is_some_and(|y| same(x, y)))
        }
        _ => left == right,
    }
}

/// A non-negative safe integer (contract §2), whatever its spelling (`7`, `7.0`, `7e0`).
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "the value is checked integral, non-negative and at most 2^53 - 1 first"
)]
fn safe_nonneg(value: &Value) -> Option<u64> {
    let float = value.as_f64()?;
    if !value.is_number() || float < 0.0 || float.fract() != 0.0 || float > MAX_SAFE {
        return None;
    }
    Some(float as u64)
}

/// The fold's state: the surface's nodes, the accepted events, and every replace applied
/// as `(seq, start, end, shadowed)`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Model {
    pub(crate) nodes: Vec<u64>,
    pub(crate) events: Vec<Value>,
    pub(crate) replacements: Vec<(u64, u64, u64, Vec<u64>)>,
}

/// A parsed `surfaceOp`.
enum Op {
    Append,
    Replace(u64, u64),
}

/// Step 2's reading of a present `surfaceOp`.
fn parse_op(op: &Value) -> Result<Op, &'static str> {
    if op == &json!("append") {
        return Ok(Op::Append);
    }
    match op.as_object() {
        Some(members)
            if members.len() == 3
                && members.get("op") == Some(&json!("replace"))
                && members.get("start").and_then(safe_nonneg).is_some()
                && members.get("end").and_then(safe_nonneg).is_some() =>
        {
            Ok(Op::Replace(
                safe_nonneg(&members["start"]).expect("checked above"),
                safe_nonneg(&members["end"]).expect("checked above"),
            ))
        }
        _ => Err("SURFACE_OP_INVALID"),
    }
}

/// Step 3: `sourceEventSeqs` of an event of type `ty` at `seq_next`, when present.
fn parse_sources(
    sources: Option<&Value>,
    ty: &str,
    seq_next: u64,
) -> Result<Option<Vec<u64>>, &'static str> {
    let Some(sources) = sources else {
        return Ok(None);
    };
    let array = sources.as_array().ok_or("SOURCES_INVALID")?;
    let mut out = Vec::new();
    for element in array {
        out.push(safe_nonneg(element).ok_or("SOURCES_INVALID")?);
    }
    if out.is_empty() && ty != "assistant/message" {
        return Err("SOURCES_EMPTY");
    }
    for (position, source) in out.iter().enumerate() {
        if out[position + 1..].contains(source) {
            return Err("SOURCES_DUPLICATE");
        }
    }
    if out.iter().any(|source| *source >= seq_next) {
        return Err("SOURCES_NOT_EARLIER");
    }
    Ok(Some(out))
}

/// `data` without `message.content[0].content`, the one value a prune may change.
fn without_pruned_output(mut data: Value) -> Value {
    if let Some(block) = data
        .pointer_mut("/message/content/0")
        .and_then(Value::as_object_mut)
    {
        block.remove("content");
    }
    data
}

/// Step 5's last rule: a `tool/result` replacing `old` changes only the pruned output.
fn check_tool_rewrite(new: &Map<String, Value>, old: &Value) -> Result<(), &'static str> {
    if old["type"] != json!("tool/result") {
        return Err("TOOL_REWRITE_TARGET");
    }
    let new_data = new.get("data").cloned().unwrap_or(Value::Null);
    let old_data = old.get("data").cloned().unwrap_or(Value::Null);
    let output = new_data
        .pointer("/message/content/0/content")
        .filter(|content| content.is_array());
    if output.is_none() {
        return Err("TOOL_REWRITE_CHANGED");
    }
    if !same(
        &without_pruned_output(new_data),
        &without_pruned_output(old_data),
    ) {
        return Err("TOOL_REWRITE_CHANGED");
    }
    Ok(())
}

impl Model {
    /// The seq the next event must carry.
    pub(crate) fn events_len(&self) -> u64 {
        seq_of(self.events.len())
    }

    /// Contract §4 steps 1-5 on one event: the first refusal's code, or the new state.
    pub(crate) fn step(&mut self, event: &Value) -> Result<(), &'static str> {
        let seq_next = self.events_len();
        let members = event.as_object().expect("a generated event is an object");
        // 1. contiguity
        match members.get("seq").and_then(safe_nonneg) {
            Some(seq) if seq == seq_next => {}
            _ => return Err("SEQ_NOT_CONTIGUOUS"),
        }
        let ty = members.get("type").and_then(Value::as_str).unwrap_or("");
        let op = members.get("surfaceOp");
        let sources = members.get("sourceEventSeqs");
        // 2. marker
        if !ELIGIBLE.contains(&ty) {
            if op.is_some() {
                return Err("SURFACE_OP_FORBIDDEN");
            }
            if sources.is_some() {
                return Err("SOURCES_FORBIDDEN");
            }
            self.events.push(event.clone());
            return Ok(());
        }
        let op = parse_op(op.ok_or("SURFACE_OP_REQUIRED")?)?;
        // 3. provenance
        let sources = parse_sources(sources, ty, seq_next)?;
        match op {
            // 4. append
            Op::Append => self.nodes.push(seq_next),
            // 5. replace
            Op::Replace(start, end) => {
                self.replace(members, ty, seq_next, (start, end), sources.as_deref())?;
            }
        }
        self.events.push(event.clone());
        Ok(())
    }

    /// Step 5: replaces `range` with `seq_next`, or refuses with nothing changed.
    fn replace(
        &mut self,
        event: &Map<String, Value>,
        ty: &str,
        seq_next: u64,
        (start, end): (u64, u64),
        sources: Option<&[u64]>,
    ) -> Result<(), &'static str> {
        let first = self
            .nodes
            .iter()
            .position(|node| *node == start)
            .ok_or("REPLACE_START_NOT_ON_SURFACE")?;
        let last = self
            .nodes
            .iter()
            .position(|node| *node == end)
            .ok_or("REPLACE_END_NOT_ON_SURFACE")?;
        if first > last {
            return Err("REPLACE_REVERSED");
        }
        let shadowed: Vec<u64> = self.nodes[first..=last].to_vec();
        let cited = sources.unwrap_or_default();
        if shadowed.iter().any(|seq| !cited.contains(seq)) {
            return Err("REPLACE_SOURCES_INCOMPLETE");
        }
        if ty == "tool/result" {
            if shadowed.len() != 1 {
                return Err("TOOL_REWRITE_NOT_SINGLE");
            }
            check_tool_rewrite(event, &self.events[index(shadowed[0])])?;
        }
        self.nodes.splice(first..=last, [seq_next]);
        self.replacements.push((seq_next, start, end, shadowed));
        Ok(())
    }
}

/// A `tool/result`'s data for `call`; `extra`'s low bits add `isError` and `meta`.
fn tool_data(call: &str, output: &Value, extra: u16) -> Value {
    let mut block = json!({"type": "tool-result", "toolCallId": call, "content": output});
    if extra & 1 != 0 {
        block["isError"] = json!(extra & 2 != 0);
    }
    let mut data = json!({"turn": 1, "step": 1, "message": {
        "id": format!("r-{call}"),
        "role": "user",
        "source": {"kind": "tool", "callId": call},
        "content": [block],
    }});
    if extra & 4 != 0 {
        data["meta"] = json!({"k": 1});
    }
    data
}

/// Data for an event of type `ty` at `seq`; `variant` picks among shapes.
fn data_for(ty: &str, seq: u64, variant: u16) -> Value {
    match ty {
        "assistant/message" => {
            let content = if variant & 1 == 0 {
                json!([])
            } else {
                json!([{"type": "text", "text": "x"}])
            };
            json!({"turn": 1, "step": 1, "message": {
                "id": format!("a{seq}"),
                "role": "assistant",
                "source": {"kind": "model", "provider": "p", "model": "m"},
                "content": content,
            }})
        }
        "tool/result" => tool_data(
            &format!("c{seq}"),
            &json!([{"type": "text", "text": "out"}]),
            variant,
        ),
        other if ELIGIBLE.contains(&other) => {
            json!({"id": format!("m{seq}"), "role": "user", "source": {"kind": "user"}, "content": []})
        }
        _ => json!({"turn": 1}),
    }
}

/// Picks a seq from a category relative to the model's state: mostly a current node,
/// sometimes any earlier seq, the event's own seq or a later one.
fn pick(model: &Model, category: u16, choice: u16, seq: u64) -> Value {
    let nodes = &model.nodes;
    let any = |bound: u64| {
        if bound == 0 {
            0
        } else {
            u64::from(choice) % bound
        }
    };
    match category % 8 {
        0..=3 if !nodes.is_empty() => json!(nodes[usize::from(choice) % nodes.len()]),
        4 => json!(any(seq.max(1))),
        5 => json!(seq),
        6 => json!(seq + 1 + u64::from(choice % 3)),
        _ if !nodes.is_empty() => json!(nodes[(usize::from(choice) / 3) % nodes.len()]),
        _ => json!(any(seq.max(1))),
    }
}

/// A `surfaceOp` that step 2 refuses.
fn bad_op(choice: u16) -> Value {
    match choice % 12 {
        0 => Value::Null,
        1 => json!({}),
        2 => json!("replace"),
        3 => json!(3),
        4 => json!([0, 0]),
        5 => json!({"op": "replace", "start": 0, "end": 0, "x": 1}),
        6 => json!({"op": "replace", "start": 0}),
        7 => json!({"op": "Replace", "start": 0, "end": 0}),
        8 => json!({"op": "replace", "start": -1, "end": 0}),
        9 => json!({"op": "replace", "start": 0.5, "end": 0}),
        10 => json!({"op": "replace", "start": "0", "end": 0}),
        _ => serde_json::from_str(r#"{"op":"replace","start":0,"end":9007199254740992}"#)
            .expect("valid JSON"),
    }
}

/// A `sourceEventSeqs` that step 3 refuses as `SOURCES_INVALID`.
fn bad_sources(choice: u16) -> Value {
    match choice % 8 {
        0 => Value::Null,
        1 => json!(1),
        2 => json!("0"),
        3 => json!({}),
        4 => json!(["0"]),
        5 => json!([0.5]),
        6 => json!([-1]),
        _ => serde_json::from_str("[9007199254740992]").expect("valid JSON"),
    }
}

/// An event's parts before assembly.
struct Draft {
    ty: String,
    op: Option<Value>,
    sources: Option<Value>,
    data: Value,
}

/// The `seq` member: the expected one, or (for some faulty events) a gap, a repeat or
/// the expected one spelled as a float.
fn seq_value(seq: u64, faulty: bool, choice: u16) -> Value {
    if !faulty {
        json!(seq)
    } else if choice.is_multiple_of(61) {
        json!(seq + 1)
    } else if choice % 61 == 1 && seq > 0 {
        json!(seq - 1)
    } else if choice % 61 == 2 {
        serde_json::from_str(&format!("{seq}.0")).expect("valid JSON")
    } else {
        json!(seq)
    }
}

/// A log-only event, faulty ones with a marker it must not carry.
fn log_only_draft(action: &[u16; 6], seq: u64, faulty: bool) -> Draft {
    let ty = LOG_ONLY[usize::from(action[1]) % LOG_ONLY.len()].to_owned();
    let data = data_for(&ty, seq, action[2]);
    let (mut op, mut sources) = (None, None);
    match if faulty { action[3] % 20 } else { 19 } {
        0 => op = Some(json!("append")),
        1 => op = Some(Value::Null),
        2 => sources = Some(json!([])),
        3 => sources = Some(Value::Null),
        _ => {}
    }
    Draft {
        ty,
        op,
        sources,
        data,
    }
}

/// An append of an eligible type, with valid sources or (when faulty) a bad marker or
/// bad sources.
fn append_draft(action: &[u16; 6], seq: u64, faulty: bool) -> Draft {
    let ty = ELIGIBLE[usize::from(action[1]) % ELIGIBLE.len()].to_owned();
    let data = data_for(&ty, seq, action[2]);
    let mut op = Some(json!("append"));
    let mut sources = None;
    match if faulty {
        action[3] % 16
    } else {
        6 + action[3] % 10
    } {
        0 => op = None,
        1 => op = Some(bad_op(action[4])),
        2 => sources = Some(bad_sources(action[4])),
        3 => sources = Some(json!([])),
        4 if seq > 0 => {
            let source = u64::from(action[4]) % seq;
            sources = Some(json!([source, source]));
        }
        5 => sources = Some(json!([seq + u64::from(action[4] % 2)])),
        6..=9 if seq > 0 => {
            let mut cited: Vec<u64> = Vec::new();
            for k in 0..=(action[4] % 3) {
                let source = (u64::from(action[4]) * 7 + u64::from(k) * 13) % seq;
                if !cited.contains(&source) {
                    cited.push(source);
                }
            }
            sources = Some(json!(cited));
        }
        _ => {}
    }
    Draft {
        ty,
        op,
        sources,
        data,
    }
}

/// A replace: mostly well formed, its range from the current surface, its sources the
/// shadowed range plus extras (when faulty, sometimes missing one, or absent).
fn replace_draft(model: &Model, action: &[u16; 6], seq: u64, faulty: bool) -> Draft {
    let mut ty = match action[1] % 10 {
        0..=4 => "user/message",
        5 | 6 => "tool/result",
        7 => "assistant/message",
        8 => "context/message",
        _ => "steering/message",
    };
    let category = |value: u16| if faulty { value } else { value % 4 };
    let start = pick(model, category(action[2]), action[3], seq);
    let end = if action[4].is_multiple_of(3) {
        start.clone()
    } else {
        pick(model, category(action[2] / 8), action[4], seq)
    };
    let op = Some(json!({"op": "replace", "start": start, "end": end}));
    let (start, end) = (
        start.as_u64().expect("picked seqs are integers"),
        end.as_u64().expect("picked seqs are integers"),
    );
    let start_is_tool = model
        .events
        .get(index(start))
        .is_some_and(|event| event["type"] == json!("tool/result"));
    if !faulty && ty == "tool/result" && !(start_is_tool && start == end) {
        ty = "user/message";
    }
    if !faulty && start_is_tool && start == end && action[3].is_multiple_of(2) {
        ty = "tool/result";
    }
    let first = model.nodes.iter().position(|node| *node == start);
    let last = model.nodes.iter().position(|node| *node == end);
    let mut cited: Vec<u64> = match (first, last) {
        (Some(first), Some(last)) if first <= last => model.nodes[first..=last].to_vec(),
        _ => vec![],
    };
    if faulty && action[5].is_multiple_of(7) && !cited.is_empty() {
        cited.remove(usize::from(action[5]) % cited.len());
    }
    if action[5] % 5 == 1 && seq > 0 {
        let extra = u64::from(action[5]) % seq;
        if !cited.contains(&extra) {
            cited.push(extra);
        }
    }
    if action[5].is_multiple_of(3) {
        cited.reverse();
    }
    let omitted =
        (faulty && action[5].is_multiple_of(11)) || (cited.is_empty() && ty != "assistant/message");
    let sources = (!omitted).then(|| json!(cited));
    let mut data = data_for(ty, seq, action[2]);
    if ty == "tool/result"
        && let Some(old) = model.events.get(index(start))
        && old["type"] == json!("tool/result")
    {
        data = pruned_data(old, action, faulty);
    }
    Draft {
        ty: ty.to_owned(),
        op,
        sources,
        data,
    }
}

/// A prune of the tool result `old`: its data with the output changed (to an array, or
/// when faulty to a non-array) and, when faulty, sometimes something else changed too.
fn pruned_data(old: &Value, action: &[u16; 6], faulty: bool) -> Value {
    let mut data = old["data"].clone();
    let output = match if faulty { action[2] % 4 } else { action[2] % 3 } {
        0 => json!([]),
        1 => json!([{"type": "text", "text": "[pruned]"}]),
        2 => data["message"]["content"][0]["content"].clone(),
        _ => json!("not an array"),
    };
    data["message"]["content"][0]["content"] = output;
    match if faulty {
        action[3] % 9
    } else {
        6 + action[3] % 3
    } {
        0 => data["message"]["id"] = json!("other"),
        1 => data["step"] = json!(2),
        2 => data["message"]["content"][0]["isError"] = json!(true),
        3 => data["meta"] = json!({"k": 2}),
        4 => {
            data["message"]["content"][0]
                .as_object_mut()
                .expect("a tool result's block is an object")
                .remove("content");
        }
        5 => {
            let block = data["message"]["content"][0].clone();
            data["message"]["content"]
                .as_array_mut()
                .expect("a tool result's content is an array")
                .push(block);
        }
        6 => data["step"] = json!(1.0),
        _ => {}
    }
    data
}

/// Builds the next event from an action (six random `u16`s) against the model's current
/// state. One action in twelve (`action[5].is_multiple_of(12)`) makes a faulty event.
pub(crate) fn build(model: &Model, action: &[u16; 6]) -> Value {
    let seq = model.events_len();
    let faulty = action[5].is_multiple_of(12);
    let seq_member = seq_value(seq, faulty, action[5]);
    let draft = match action[0] % 16 {
        0..=2 => log_only_draft(action, seq, faulty),
        3..=6 => append_draft(action, seq, faulty),
        _ if model.nodes.is_empty() => append_draft(action, seq, faulty),
        _ => replace_draft(model, action, seq, faulty),
    };
    let mut event = Map::new();
    event.insert("type".into(), json!(draft.ty));
    event.insert("seq".into(), seq_member);
    event.insert("time".into(), json!(0));
    event.insert("data".into(), draft.data);
    if let Some(sources) = draft.sources {
        event.insert("sourceEventSeqs".into(), sources);
    }
    if let Some(op) = draft.op {
        event.insert("surfaceOp".into(), op);
    }
    Value::Object(event)
}
