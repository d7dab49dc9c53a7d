//! History manipulation helpers (contract §10): compaction and tool-output pruning, both
//! plain appends that use `replace`, so replay reproduces them.
//!
//! Each helper appends its events as one unit ([`Session::append_all`]): if any of them
//! is refused, none is appended.

use super::typed::{EventKind, SurfaceIntent, kinds};
use super::{Session, SessionLog};
use crate::error::{ErrorKind, Result};
use crate::event::Origin;
use crate::json::{Json, Kind, Value, push_js_string};
use crate::surface::pruned_output;

/// A compaction of the surface range `start..=end` into one summary message.
///
/// ```
/// use surfacelog::{Compaction, Session, StoreOptions, SurfaceIntent, kinds};
///
/// let mut s = Session::in_memory("s", &StoreOptions::new())?;
/// let user = |id: &str| format!(r#"{{"id":"{id}","role":"user","source":{{"kind":"user"}},"content":[]}}"#);
/// let first = s.append::<kinds::UserMessage>(&user("a"), SurfaceIntent::append())?;
/// let last = s.append::<kinds::UserMessage>(&user("b"), SurfaceIntent::append())?;
/// let summary = r#"[{"type":"text","text":"a and b"}]"#;
/// let message = format!(r#"{{"id":"sum","role":"user","source":{{"kind":"plugin","plugin":"compaction"}},"content":{summary}}}"#);
/// let done = s.compact(&Compaction {
///     compaction_id: "c1",
///     turn: None,
///     start: first,
///     end: last,
///     summary,
///     summary_extra: None,
///     message: &message,
/// })?;
/// assert_eq!(s.surface().nodes(), [done.message]); // the summary replaced both
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Compaction<'a> {
    /// `compactionId`, shared by the bracket events.
    pub compaction_id: &'a str,
    /// The turn the compaction runs in; `None` writes `null`.
    pub turn: Option<u64>,
    /// First surface node to shadow.
    pub start: u64,
    /// Last surface node to shadow.
    pub end: u64,
    /// JSON text of the `summary` value of `compaction/summary` (e.g. a content array).
    pub summary: &'a str,
    /// JSON object text whose members are added to the `compaction/summary` data after
    /// the required ones (token counts, provider, model, ...). `None` adds nothing.
    pub summary_extra: Option<&'a str>,
    /// JSON text of the `user/message` data that replaces the range.
    pub message: &'a str,
}

/// The seqs a compaction appended.
///
/// ```
/// use surfacelog::{Compaction, Session, StoreOptions, SurfaceIntent, kinds};
///
/// let mut s = Session::in_memory("s", &StoreOptions::new())?;
/// let user = |id: &str| format!(r#"{{"id":"{id}","role":"user","source":{{"kind":"user"}},"content":[]}}"#);
/// let first = s.append::<kinds::UserMessage>(&user("a"), SurfaceIntent::append())?;
/// let last = s.append::<kinds::UserMessage>(&user("b"), SurfaceIntent::append())?;
/// let summary = r#"[{"type":"text","text":"a and b"}]"#;
/// let message = format!(r#"{{"id":"sum","role":"user","source":{{"kind":"plugin","plugin":"compaction"}},"content":{summary}}}"#);
/// let done = s.compact(&Compaction {
///     compaction_id: "c1",
///     turn: None,
///     start: first,
///     end: last,
///     summary,
///     summary_extra: None,
///     message: &message,
/// })?;
/// assert!(done.start < done.summary && done.summary < done.message && done.message < done.end);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compacted {
    /// `compaction/start`.
    pub start: u64,
    /// `compaction/summary`.
    pub summary: u64,
    /// The replacing `user/message`.
    pub message: u64,
    /// `compaction/end`.
    pub end: u64,
}

/// A prune of one tool output: the `tool/result` at `seq` keeps everything but
/// `message.content[0].content`, which becomes `content`.
///
/// ```
/// use surfacelog::{NoSurface, Prune, Session, StoreOptions, SurfaceIntent, kinds};
///
/// let mut s = Session::in_memory("s", &StoreOptions::new())?;
/// s.append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)?;
/// s.append::<kinds::StepStart>(r#"{"turn":1,"step":1}"#, NoSurface)?;
/// s.append::<kinds::ToolCall>(r#"{"turn":1,"step":1,"callId":"c1","name":"cat"}"#, NoSurface)?;
/// let result = s.append::<kinds::ToolResult>(
///     r#"{"turn":1,"step":1,"message":{"id":"r1","role":"user","source":{"kind":"tool","callId":"c1"},"content":[{"type":"tool-result","toolCallId":"c1","isError":false,"content":[{"type":"text","text":"a very long file"}]}]}}"#,
///     SurfaceIntent::append(),
/// )?;
/// let pruned = s.prune(&Prune {
///     seq: result,
///     content: r#"[{"type":"text","text":"[output pruned]"}]"#,
///     shadowed_token_count: 1_200,
/// })?;
/// assert!(s.messages()?[0].json.contains("[output pruned]"));
/// # let _ = pruned;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Prune<'a> {
    /// The `tool/result` surface node to rewrite.
    pub seq: u64,
    /// JSON array text of the new tool output.
    pub content: &'a str,
    /// `shadowedTokenCount` of the `compaction/prune` event.
    pub shadowed_token_count: u64,
}

impl<L: SessionLog> Session<L> {
    /// Compacts the surface range `start..=end` (contract §10): `compaction/start`,
    /// `compaction/summary`, the replacing `user/message` citing the start, the summary
    /// and every shadowed seq, then `compaction/end`, appended as one unit.
    ///
    /// ```
    /// use surfacelog::{Compaction, Session, StoreOptions, SurfaceIntent, kinds};
    ///
    /// let mut s = Session::in_memory("s", &StoreOptions::new())?;
    /// let user = |id: &str| format!(r#"{{"id":"{id}","role":"user","source":{{"kind":"user"}},"content":[]}}"#);
    /// let first = s.append::<kinds::UserMessage>(&user("a"), SurfaceIntent::append())?;
    /// let last = s.append::<kinds::UserMessage>(&user("b"), SurfaceIntent::append())?;
    /// let summary = r#"[{"type":"text","text":"a and b"}]"#;
    /// let message = format!(r#"{{"id":"sum","role":"user","source":{{"kind":"plugin","plugin":"compaction"}},"content":{summary}}}"#);
    /// let done = s.compact(&Compaction {
    ///     compaction_id: "c1",
    ///     turn: None,
    ///     start: first,
    ///     end: last,
    ///     summary,
    ///     summary_extra: None,
    ///     message: &message,
    /// })?;
    /// // Nothing is deleted: the log keeps both messages, and `as_of` shows them.
    /// assert_eq!(s.as_of(last)?.messages.len(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `REPLACE_*` for a range that is not on the surface, `COMPACTION_UNBALANCED` when a
    /// cut separates a tool call from its result, or any refusal of the four events (a
    /// JSON code, `MESSAGE_SHAPE`, ...), `CORRUPT` when the surface's checkpoint nodes
    /// were lost (CKP-2); nothing is appended then.
    pub fn compact(&mut self, compaction: &Compaction<'_>) -> Result<Compacted> {
        // CKP-2: the shadowed nodes are written into the summary: checked again first.
        self.surface.check_again();
        // Nodes that were lost are damage, never a range missing from the surface.
        self.surface.check_not_lost()?;
        let (first, last) = self.surface.range(compaction.start, compaction.end)?;
        self.check_balanced(first, last, compaction)?;
        let shadowed = self.surface.nodes()[first..=last].to_vec();
        let mut id = String::new();
        push_js_string(&mut id, compaction.compaction_id.as_bytes());
        let summary_data = summary_data(&id, compaction, &shadowed)?;
        let turn = compaction
            .turn
            .map_or_else(|| "null".to_owned(), |t| t.to_string());
        let bracket = format!("{{\"compactionId\":{id},\"turn\":{turn}}}");
        let start = self.seq_next();
        let mut sources = vec![start, start + 1];
        sources.extend_from_slice(&shadowed);
        let intent = SurfaceIntent::replace(compaction.start, compaction.end, sources);
        let seqs = self.append_all(&[
            (kinds::CompactionStart::TYPE, &bracket, None),
            (kinds::CompactionSummary::TYPE, &summary_data, None),
            (kinds::UserMessage::TYPE, compaction.message, Some(intent)),
            (kinds::CompactionEnd::TYPE, &bracket, None),
        ])?;
        Ok(Compacted {
            start: seqs[0],
            summary: seqs[1],
            message: seqs[2],
            end: seqs[3],
        })
    }

    /// Prunes the tool output of surface node `seq` (contract §10): `compaction/prune`,
    /// then a `tool/result` replacing `seq` alone, identical except for
    /// `message.content[0].content`, citing `[seq]`, appended as one unit. Returns the
    /// replacement's seq.
    ///
    /// ```
    /// use surfacelog::{NoSurface, Prune, Session, StoreOptions, SurfaceIntent, kinds};
    ///
    /// let mut s = Session::in_memory("s", &StoreOptions::new())?;
    /// s.append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)?;
    /// s.append::<kinds::StepStart>(r#"{"turn":1,"step":1}"#, NoSurface)?;
    /// s.append::<kinds::ToolCall>(r#"{"turn":1,"step":1,"callId":"c1","name":"cat"}"#, NoSurface)?;
    /// let result = s.append::<kinds::ToolResult>(
    ///     r#"{"turn":1,"step":1,"message":{"id":"r1","role":"user","source":{"kind":"tool","callId":"c1"},"content":[{"type":"tool-result","toolCallId":"c1","isError":false,"content":[{"type":"text","text":"a very long file"}]}]}}"#,
    ///     SurfaceIntent::append(),
    /// )?;
    /// let replacing = s.prune(&Prune {
    ///     seq: result,
    ///     content: r#"[{"type":"text","text":"[output pruned]"}]"#,
    ///     shadowed_token_count: 1_200,
    /// })?;
    /// assert_eq!(s.surface().nodes(), [replacing]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `REPLACE_START_NOT_ON_SURFACE`, `TOOL_REWRITE_TARGET`, `TOOL_REWRITE_CHANGED` when
    /// `content` is not an array, `CORRUPT` when the target's record cannot be read back
    /// or the surface's checkpoint nodes were lost (CKP-2),
    /// or any refusal of the two events; nothing is appended then.
    pub fn prune(&mut self, prune: &Prune<'_>) -> Result<u64> {
        let seq = prune.seq;
        self.surface.check_again();
        self.surface.check_not_lost()?;
        self.surface.range(seq, seq)?;
        let target = self
            .log
            .event_at(seq)
            .map_err(|e| e.in_session(self.header.id()))?;
        let surface_type = self.options.vocabulary.surface_type(target.event_type);
        let is_tool = surface_type.is_some_and(|t| t.origin == Origin::Tool);
        let old_data = target.data();
        let old = Json::parse(&old_data)?;
        let (true, Some(output)) = (is_tool, pruned_output(old.root())) else {
            return Err(ErrorKind::ToolRewriteTarget { target: seq }.into());
        };
        let content = Json::parse(prune.content)?;
        if content.root().kind() != Kind::Array {
            return Err(ErrorKind::ToolRewriteChanged { target: seq }.into());
        }
        let span = output.span();
        let data = target.data();
        let new_data = format!(
            "{}{}{}",
            &data[..span.start],
            content.root().raw(),
            &data[span.end..]
        );
        let tool_type = target.event_type.to_owned();
        let record = format!(
            "{{\"shadowedRange\":{{\"start\":{seq},\"end\":{seq}}},\"shadowedSeqs\":[{seq}],\"shadowedTokenCount\":{}}}",
            prune.shadowed_token_count
        );
        let intent = SurfaceIntent::replace(seq, seq, vec![seq]);
        let seqs = self.append_all(&[
            (kinds::CompactionPrune::TYPE, &record, None),
            (&tool_type, &new_data, Some(intent)),
        ])?;
        Ok(seqs[1])
    }

    /// Tool-pairing balance (contract §10): +1 per `tool-call` block of a model message,
    /// −1 per tool result, along the surface; 0 before `first` and after `last`.
    fn check_balanced(&self, first: usize, last: usize, compaction: &Compaction<'_>) -> Result<()> {
        let mut open: i64 = 0;
        let mut open_before = 0;
        for (position, &seq) in self.surface.nodes()[..=last].iter().enumerate() {
            if position == first {
                open_before = open;
            }
            open += self.tool_balance(seq)?;
        }
        if open_before != 0 || open != 0 {
            let (start, end) = (compaction.start, compaction.end);
            return Err(ErrorKind::CompactionUnbalanced {
                start,
                end,
                open_before,
                open_after: open,
            }
            .into());
        }
        Ok(())
    }

    /// The node's +1/−1 per tool call and result (contract §10).
    ///
    /// # Errors
    /// `CORRUPT` when its record cannot be read back: a balance is never guessed.
    fn tool_balance(&self, seq: u64) -> Result<i64> {
        let event = self.log.event_at(seq)?;
        Ok(
            match self
                .options
                .vocabulary
                .surface_type(event.event_type)
                .map(|t| t.origin)
            {
                Some(Origin::Tool) => -1,
                Some(Origin::Model) => {
                    let Some(message) = event.message() else {
                        return Ok(0);
                    };
                    let Ok(json) = Json::parse(message) else {
                        return Ok(0);
                    };
                    let content = json.root().get("content");
                    let is_call =
                        |b: &Value<'_, '_>| b.get("type").is_some_and(|t| t.is_str("tool-call"));
                    let calls = content.iter().flat_map(Value::elements).filter(is_call);
                    i64::try_from(calls.count()).unwrap_or(i64::MAX)
                }
                _ => 0,
            },
        )
    }
}

/// The `compaction/summary` data. `summary` must be one JSON value and `summary_extra` an
/// object, so the caller's texts cannot add members of their own.
fn summary_data(id: &str, compaction: &Compaction<'_>, shadowed: &[u64]) -> Result<String> {
    let summary = Json::parse(compaction.summary)?;
    let list: Vec<String> = shadowed.iter().map(u64::to_string).collect();
    let mut data = format!(
        "{{\"compactionId\":{id},\"summary\":{},\"shadowedRange\":{{\"start\":{},\"end\":{}}},\"shadowedSeqs\":[{}]",
        summary.root().raw(),
        compaction.start,
        compaction.end,
        list.join(",")
    );
    if let Some(extra) = compaction.summary_extra {
        let json = Json::parse(extra)?;
        if json.root().kind() != Kind::Object {
            let reason = "summary_extra is not an object";
            return Err(ErrorKind::DataInvalidJson { offset: 0, reason }.into());
        }
        if !json.root().is_empty() {
            let raw = json.root().raw();
            data.push(',');
            data.push_str(&raw[1..raw.len() - 1]);
        }
    }
    data.push('}');
    Ok(data)
}
