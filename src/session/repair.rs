//! Crash repair (contract §8): the events that close a turn a crash left open.
//!
//! Repair is event-level; byte-level recovery (dropping a torn tail) belongs to the log.
//! [`closers`] is a pure function of the log: one forward scan, then the closers as JSON
//! texts with the exact key order and texts of contract §8 (`dsh-formats.md` §9.5), so
//! that an export reproduces the reference's bytes.

use std::collections::HashMap;

use crate::Result;
use crate::event::EventSource;
use crate::json::{Json, Kind, Value, push_js_string, write_js};

/// The text of a closer for a call that never started.
pub const NOT_STARTED_TEXT: &str = "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed.";

/// The text of a closer for a call whose outcome is unknown.
pub const OUTCOME_UNKNOWN_TEXT: &str = "The tool call was interrupted after it was recorded, but no result was durably recorded. Its outcome is unknown. Decide whether to retry from the tool semantics: retry only if the operation is read-only or idempotent; if it may have side effects, first verify external state or ask the user. Do not retry blindly.";

/// A `data.turn` or `data.step` value as `JSON.stringify` writes it; `None` when the key
/// is absent (JavaScript's `undefined`, which drops the key from the closer).
type Number = Option<String>;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Pending {
    call_id: Vec<u8>,
    step: Number,
    call_seq: Option<u64>,
}

/// The repair scan's state after some prefix of a log (pass 1 of contract §8): resumable,
/// so a checkpoint can hold it and reopening scans only the tail.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepairState {
    /// `Some(turn)` while a turn is open.
    open_turn: Option<Number>,
    /// `Some(step)` while a step is open.
    open_step: Option<Number>,
    pending: PendingCalls,
}

/// Pending calls in registration order, with O(1) lookup by id: answered calls leave a
/// hole instead of shifting the rest, so a log with many calls repairs in linear time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct PendingCalls {
    slots: Vec<Option<Pending>>,
    by_id: HashMap<Vec<u8>, usize>,
}

impl PendingCalls {
    fn clear(&mut self) {
        self.slots.clear();
        self.by_id.clear();
    }

    /// Registers a call; a known id keeps its position and loses its call seq.
    fn register(&mut self, entry: Pending) {
        if let Some(&slot) = self.by_id.get(&entry.call_id) {
            self.slots[slot] = Some(entry);
        } else {
            self.by_id.insert(entry.call_id.clone(), self.slots.len());
            self.slots.push(Some(entry));
        }
    }

    fn get_mut(&mut self, id: &[u8]) -> Option<&mut Pending> {
        let slot = *self.by_id.get(id)?;
        self.slots[slot].as_mut()
    }

    fn answer(&mut self, id: &[u8]) {
        if let Some(slot) = self.by_id.remove(id) {
            self.slots[slot] = None;
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Pending> {
        self.slots.iter().flatten()
    }
}

/// The closers for `source`: empty when the log is empty or no turn is open; otherwise
/// one `tool/result` per pending call, then `step/end` if a step is open, then
/// `turn/end`, numbered from the next seq and stamped with the last event's time.
///
/// Cost: one scan of the log; only the data of bracket and tool events is parsed.
/// Call ids that are not non-empty strings are not tracked: a `tool/result` can only
/// answer a non-empty string id (contract §3), so a closer for one would be refused.
///
/// # Errors
/// The error reading an event (`CORRUPT` with the file and offset): closers are never
/// made from a log read in part.
pub fn closers(source: &impl EventSource) -> Result<Vec<String>> {
    let mut state = RepairState::default();
    state.observe_from(source, 0)?;
    state.closers(source)
}

impl RepairState {
    /// Observes the events of `source` from `from` to its end.
    ///
    /// # Errors
    /// The error reading an event; the events before it stay observed.
    pub fn observe_from(&mut self, source: &impl EventSource, from: u64) -> Result<()> {
        for seq in from..source.seq_next() {
            let event = source.event_at(seq).map_err(|e| e.at_seq(seq))?;
            if relevant(event.event_type) {
                self.observe(seq, event.event_type, &event.data());
            }
        }
        Ok(())
    }

    /// The closers for a log whose events this state has observed (all of them).
    ///
    /// # Errors
    /// The error reading the last event, whose time the closers take.
    pub fn closers(&self, source: &impl EventSource) -> Result<Vec<String>> {
        let seq_next = source.seq_next();
        let Some(last) = seq_next.checked_sub(1) else {
            return Ok(Vec::new());
        };
        let Some(turn) = &self.open_turn else {
            return Ok(Vec::new());
        };
        let last = source.event_at(last)?;
        let time = last.time;
        let mut seq = seq_next;
        let mut out = Vec::with_capacity(self.pending.by_id.len() + 2);
        for call in self.pending.iter() {
            out.push(tool_result_closer(seq, time, turn.as_deref(), call));
            seq += 1;
        }
        if let Some(step) = &self.open_step {
            let mut text = head("step/end", seq, time);
            push_members(
                &mut text,
                &[("turn", turn.as_deref()), ("step", step.as_deref())],
            );
            text.push_str("}}");
            out.push(text);
            seq += 1;
        }
        let mut text = head("turn/end", seq, time);
        push_members(&mut text, &[("turn", turn.as_deref())]);
        text.push_str(if turn.is_some() { "," } else { "" });
        text.push_str("\"reason\":{\"kind\":\"interrupted\"}}}");
        out.push(text);
        Ok(out)
    }

    /// The state as bytes, for a checkpoint (`format-spec/checkpoint.md` CKP-4).
    pub fn encode(&self, out: &mut Vec<u8>) {
        push_option(
            out,
            self.open_turn
                .as_ref()
                .map(|t| t.as_deref().map(str::as_bytes)),
        );
        push_option(
            out,
            self.open_step
                .as_ref()
                .map(|t| t.as_deref().map(str::as_bytes)),
        );
        let pending: Vec<&Pending> = self.pending.iter().collect();
        out.extend_from_slice(
            &u32::try_from(pending.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        for call in pending {
            push_bytes(out, &call.call_id);
            push_option(out, Some(call.step.as_deref().map(str::as_bytes)));
            match call.call_seq {
                Some(seq) => {
                    out.push(1);
                    out.extend_from_slice(&seq.to_le_bytes());
                }
                None => out.push(0),
            }
        }
    }

    /// Reads a state written by [`RepairState::encode`]; `None` when the bytes are not one.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let mut reader = Reader { bytes, at: 0 };
        let open_turn = reader.option()?.map(|t| t.map(String::from));
        let open_step = reader.option()?.map(|t| t.map(String::from));
        let count = reader.u32()?;
        let mut pending = PendingCalls::default();
        for _ in 0..count {
            let call_id = reader.bytes()?.to_vec();
            let step = reader.option()??.map(String::from);
            let call_seq = match reader.u8()? {
                0 => None,
                1 => Some(reader.u64()?),
                _ => return None,
            };
            pending.register(Pending {
                call_id,
                step,
                call_seq,
            });
        }
        (reader.at == bytes.len()).then_some(Self {
            open_turn,
            open_step,
            pending,
        })
    }

    /// Observes one event (pass 1 of contract §8).
    pub fn observe(&mut self, seq: u64, event_type: &str, data: &str) {
        if !relevant(event_type) {
            return;
        }
        let Ok(json) = Json::parse(data) else { return };
        let data = json.root();
        match event_type {
            "turn/start" => {
                self.open_turn = Some(js_member(data, "turn"));
                self.open_step = None;
                self.pending.clear();
            }
            "turn/end" => {
                self.open_turn = None;
                self.open_step = None;
                self.pending.clear();
            }
            "step/start" => self.open_step = Some(js_member(data, "step")),
            "step/end" => {
                self.open_step = None;
                self.pending.clear();
            }
            "assistant/message" => self.register_calls(data),
            "tool/call" => {
                let id = data.get("callId").and_then(|c| c.as_wtf8());
                if let Some(call) = id.and_then(|id| self.pending.get_mut(&id)) {
                    call.call_seq = Some(seq);
                }
            }
            _ => {
                let id = data
                    .get("message")
                    .and_then(|m| m.get("source"))
                    .and_then(|s| s.get("callId"));
                if let Some(id) = id.and_then(|id| id.as_wtf8()) {
                    self.pending.answer(&id);
                }
            }
        }
    }

    /// Every `tool-call` block registers its id; re-registering keeps the position and
    /// drops the recorded call seq.
    fn register_calls(&mut self, data: Value<'_, '_>) {
        let step = js_member(data, "step");
        let content = data.get("message").and_then(|m| m.get("content"));
        for block in content.iter().flat_map(Value::elements) {
            if !block.get("type").is_some_and(|t| t.is_str("tool-call")) {
                continue;
            }
            // Only a non-empty string id can be answered by a tool/result (contract §3), so
            // only such ids get a closer: any other would make the log impossible to reopen.
            let id = block
                .get("id")
                .filter(|i| i.kind() == Kind::String && i.raw().len() > 2);
            let Some(id) = id.and_then(|i| i.as_wtf8()) else {
                continue;
            };
            self.pending.register(Pending {
                call_id: id.into_owned(),
                step: step.clone(),
                call_seq: None,
            });
        }
    }
}

fn tool_result_closer(seq: u64, time: i64, turn: Option<&str>, call: &Pending) -> String {
    let mut message_id = b"interrupted-tool-result-".to_vec();
    message_id.extend_from_slice(&call.call_id);
    message_id.extend_from_slice(format!("-{seq}").as_bytes());
    let (error_name, code, text) = match call.call_seq {
        None => ("ToolNotStartedError", "TOOL_NOT_STARTED", NOT_STARTED_TEXT),
        Some(_) => (
            "ToolOutcomeUnknownError",
            "TOOL_OUTCOME_UNKNOWN",
            OUTCOME_UNKNOWN_TEXT,
        ),
    };
    let mut out = head("tool/result", seq, time);
    push_members(&mut out, &[("turn", turn), ("step", call.step.as_deref())]);
    if turn.is_some() || call.step.is_some() {
        out.push(',');
    }
    out.push_str("\"message\":{\"id\":");
    push_js_string(&mut out, &message_id);
    out.push_str(",\"role\":\"user\",\"source\":{\"kind\":\"tool\",\"callId\":");
    push_js_string(&mut out, &call.call_id);
    out.push_str("},\"content\":[{\"type\":\"tool-result\",\"toolCallId\":");
    push_js_string(&mut out, &call.call_id);
    out.push_str(",\"isError\":true,\"content\":[{\"type\":\"text\",\"text\":");
    push_js_string(&mut out, text.as_bytes());
    for piece in [
        "}]}]},\"error\":{\"name\":\"",
        error_name,
        "\",\"code\":\"",
        code,
    ] {
        out.push_str(piece);
    }
    out.push_str("\"}},\"surfaceOp\":\"append\"");
    if let Some(call_seq) = call.call_seq {
        out.push_str(",\"sourceEventSeqs\":[");
        out.push_str(&call_seq.to_string());
        out.push(']');
    }
    out.push('}');
    out
}

/// `{"type":T,"seq":S,"time":T,"data":{` — the shared start of every closer.
fn head(event_type: &str, seq: u64, time: i64) -> String {
    format!("{{\"type\":\"{event_type}\",\"seq\":{seq},\"time\":{time},\"data\":{{")
}

/// Writes `"k":v` pairs separated by commas, skipping absent values (no trailing comma).
fn push_members(out: &mut String, members: &[(&str, Option<&str>)]) {
    let mut first = true;
    for (key, value) in members {
        if let Some(value) = value {
            if !first {
                out.push(',');
            }
            first = false;
            out.push('"');
            out.push_str(key);
            out.push_str("\":");
            out.push_str(value);
        }
    }
}

fn js_member(data: Value<'_, '_>, key: &str) -> Number {
    data.get(key).map(|value| {
        let mut out = String::new();
        write_js(&mut out, value);
        out
    })
}

/// `0` (absent), or `1` then `0` (present, undefined) or `1` then the bytes (CKP-4).
#[expect(
    clippy::option_option,
    reason = "absent, present-undefined and present-value are three states"
)]
fn push_option(out: &mut Vec<u8>, value: Option<Option<&[u8]>>) {
    match value {
        None => out.push(0),
        Some(None) => out.extend_from_slice(&[1, 0]),
        Some(Some(bytes)) => {
            out.extend_from_slice(&[1, 1]);
            push_bytes(out, bytes);
        }
    }
}

fn push_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// A bounds-checked cursor over untrusted checkpoint bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        let taken = self.bytes.get(self.at..self.at.checked_add(len)?)?;
        self.at += len;
        Some(taken)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1)?.first().copied()
    }

    fn u32(&mut self) -> Option<u32> {
        self.take(4)?.try_into().ok().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Option<u64> {
        self.take(8)?.try_into().ok().map(u64::from_le_bytes)
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.u32()?).ok()?;
        self.take(len)
    }

    fn text(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }

    /// The inverse of `push_option`: `None` for bad bytes, `Some(None)` for absent.
    #[expect(
        clippy::option_option,
        reason = "absent, present-undefined and present-value are three states"
    )]
    fn option(&mut self) -> Option<Option<Option<&'a str>>> {
        match self.u8()? {
            0 => Some(None),
            1 => match self.u8()? {
                0 => Some(Some(None)),
                1 => Some(Some(Some(self.text()?))),
                _ => None,
            },
            _ => None,
        }
    }
}

/// Whether pass 1 of contract §8 looks at events of this type (the others it skips
/// without reading their data).
fn relevant(event_type: &str) -> bool {
    matches!(
        event_type,
        "turn/start"
            | "turn/end"
            | "step/start"
            | "step/end"
            | "assistant/message"
            | "tool/call"
            | "tool/result"
    )
}
