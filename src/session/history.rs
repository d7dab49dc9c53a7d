//! History manipulation helpers (contract §10): compaction and tool-output pruning, both
//! plain appends that use `replace`, so replay reproduces them.
//!
//! Each helper checks everything that could refuse one of its events before appending
//! the first, so a refused helper call leaves no trace.

use super::typed::{EventKind, SurfaceIntent, kinds};
use super::{Session, json_error};
use crate::error::{ErrorKind, Result};
use crate::event::{EventSource, Origin};
use crate::json::{Json, Kind, Value, push_js_string};

/// A compaction of the surface range `start..=end` into one summary message.
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
#[derive(Debug, Clone, Copy)]
pub struct Prune<'a> {
    /// The `tool/result` surface node to rewrite.
    pub seq: u64,
    /// JSON array text of the new tool output.
    pub content: &'a str,
    /// `shadowedTokenCount` of the `compaction/prune` event.
    pub shadowed_token_count: u64,
}

impl Session {
    /// Compacts the surface range `start..=end` (contract §10): `compaction/start`,
    /// `compaction/summary`, the replacing `user/message` citing the start, the summary
    /// and every shadowed seq, then `compaction/end`.
    ///
    /// # Errors
    /// `REPLACE_*` for a range that is not on the surface, `COMPACTION_UNBALANCED` when a
    /// cut separates a tool call from its result, `MESSAGE_SHAPE` or a JSON code for the
    /// given texts; nothing is appended then.
    pub fn compact(&mut self, compaction: &Compaction<'_>) -> Result<Compacted> {
        let (first, last) = self.range_positions(compaction.start, compaction.end)?;
        self.check_balanced(first, last, compaction)?;
        let shadowed = self.surface.nodes()[first..=last].to_vec();
        let mut id = String::new();
        push_js_string(&mut id, compaction.compaction_id.as_bytes());
        let summary_data = summary_data(&id, compaction, &shadowed)?;
        self.check_message(compaction.message)?;
        let turn = compaction
            .turn
            .map_or_else(|| "null".to_owned(), |t| t.to_string());
        let bracket = format!("{{\"compactionId\":{id},\"turn\":{turn}}}");
        let start = self.append::<kinds::CompactionStart>(&bracket, super::NoSurface)?;
        let summary = self.append::<kinds::CompactionSummary>(&summary_data, super::NoSurface)?;
        let mut sources = vec![start, summary];
        sources.extend_from_slice(&shadowed);
        let intent = SurfaceIntent::replace(compaction.start, compaction.end, sources);
        let message = self.append::<kinds::UserMessage>(compaction.message, intent)?;
        let end = self.append::<kinds::CompactionEnd>(&bracket, super::NoSurface)?;
        Ok(Compacted {
            start,
            summary,
            message,
            end,
        })
    }

    /// Prunes the tool output of surface node `seq` (contract §10): `compaction/prune`,
    /// then a `tool/result` replacing `seq` alone, identical except for
    /// `message.content[0].content`, citing `[seq]`. Returns the replacement's seq.
    ///
    /// # Errors
    /// `REPLACE_START_NOT_ON_SURFACE`, `TOOL_REWRITE_TARGET`, or a JSON code for
    /// `content`; nothing is appended then.
    ///
    /// # Panics
    /// Never: a surface node is always in the log.
    pub fn prune(&mut self, prune: &Prune<'_>) -> Result<u64> {
        self.range_positions(prune.seq, prune.seq)?;
        let target = self
            .log
            .event(prune.seq)
            .expect("surface nodes are in the log");
        let is_tool = self
            .options
            .vocabulary
            .surface_type(target.event_type)
            .is_some_and(|t| t.origin == Origin::Tool);
        let old = Json::parse(target.data()).map_err(json_error)?;
        let output = old
            .root()
            .get("message")
            .and_then(|m| m.get("content"))
            .and_then(|c| c.elements().next())
            .and_then(|b| b.get("content"));
        let (true, Some(output)) = (is_tool, output) else {
            return Err(ErrorKind::ToolRewriteTarget { target: prune.seq }.into());
        };
        let content = Json::parse(prune.content).map_err(json_error)?;
        if content.root().kind() != Kind::Array {
            return Err(ErrorKind::ToolRewriteChanged { target: prune.seq }.into());
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
        let seq = prune.seq;
        let record = format!(
            "{{\"shadowedRange\":{{\"start\":{seq},\"end\":{seq}}},\"shadowedSeqs\":[{seq}],\"shadowedTokenCount\":{}}}",
            prune.shadowed_token_count
        );
        self.append::<kinds::CompactionPrune>(&record, super::NoSurface)?;
        self.append_dynamic(
            &tool_type,
            &new_data,
            Some(SurfaceIntent::replace(seq, seq, vec![seq])),
        )
    }

    /// Positions of `start` and `end` on the surface, in order.
    fn range_positions(&self, start: u64, end: u64) -> Result<(usize, usize)> {
        let first = self
            .surface
            .position(start)
            .ok_or(ErrorKind::ReplaceStartNotOnSurface { start })?;
        let last = self
            .surface
            .position(end)
            .ok_or(ErrorKind::ReplaceEndNotOnSurface { end })?;
        if first > last {
            return Err(ErrorKind::ReplaceReversed { start, end }.into());
        }
        Ok((first, last))
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
            open += self.tool_balance(seq);
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

    fn tool_balance(&self, seq: u64) -> i64 {
        let Some(event) = self.log.event(seq) else {
            return 0;
        };
        match self
            .options
            .vocabulary
            .surface_type(event.event_type)
            .map(|t| t.origin)
        {
            Some(Origin::Tool) => -1,
            Some(Origin::Model) => {
                let Some(message) = event.message() else {
                    return 0;
                };
                let Ok(json) = Json::parse(message) else {
                    return 0;
                };
                let content = json.root().get("content");
                let calls = content
                    .iter()
                    .flat_map(Value::elements)
                    .filter(|b| b.get("type").is_some_and(|t| t.is_str("tool-call")));
                i64::try_from(calls.count()).unwrap_or(i64::MAX)
            }
            _ => 0,
        }
    }

    /// Checks the replacing message before anything is appended.
    fn check_message(&self, message: &str) -> Result<()> {
        let message = Json::parse(message).map_err(json_error)?;
        if let Some(user) = self
            .options
            .vocabulary
            .surface_type(kinds::UserMessage::TYPE)
        {
            user.check_shape(message.root())
                .map_err(|rule| ErrorKind::MessageShape {
                    event_type: kinds::UserMessage::TYPE.to_owned(),
                    rule,
                })?;
        }
        Ok(())
    }
}

/// The `compaction/summary` data, validated as JSON (so a bad `summary` or a key of
/// `summary_extra` that repeats a required one is refused before anything is appended).
fn summary_data(id: &str, compaction: &Compaction<'_>, shadowed: &[u64]) -> Result<String> {
    let not_object = || ErrorKind::DataInvalidJson {
        offset: 0,
        reason: "summary_extra is not an object",
    };
    let list: Vec<String> = shadowed.iter().map(u64::to_string).collect();
    let mut data = format!(
        "{{\"compactionId\":{id},\"summary\":{},\"shadowedRange\":{{\"start\":{},\"end\":{}}},\"shadowedSeqs\":[{}]",
        compaction.summary.trim(),
        compaction.start,
        compaction.end,
        list.join(",")
    );
    if let Some(extra) = compaction.summary_extra {
        let json = Json::parse(extra).map_err(json_error)?;
        if json.root().kind() != Kind::Object {
            return Err(not_object().into());
        }
        if !json.root().is_empty() {
            let raw = json.root().raw();
            data.push(',');
            data.push_str(&raw[1..raw.len() - 1]);
        }
    }
    data.push('}');
    let parsed = Json::parse(&data).map_err(json_error)?;
    if parsed.negative_zero().is_some() {
        return Err(ErrorKind::DataNotLossless { offset: 0 }.into());
    }
    Ok(data)
}
