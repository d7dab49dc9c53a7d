//! The vocabulary: which event types are surface-eligible and how each projects to a
//! message (contract §3), plus the shape rules every entry point checks.
//!
//! The vocabulary is data, so a store can carry another one; [`Vocabulary::dsh_v0`] is
//! the default. Projection never copies: a message is a [`Value`] of the event's own
//! JSON, hence a slice of the stored text.

use crate::json::{Kind, Value};

/// Which part of `data` is the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Projection {
    /// The whole `data` value.
    Data,
    /// The member of `data` with this key.
    Member(String),
}

/// Who produced a message, which fixes the `source` rules of its shape check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Any `source.kind`.
    Any,
    /// `source.kind == "model"` with non-empty `provider` and `model`.
    Model,
    /// `source.kind == "tool"` with a non-empty `callId`, and exactly one `tool-result`
    /// block answering it. Replacements of such a type are tool-output prunes
    /// (contract §4: content-only rewrite of one node of the same type).
    Tool,
}

/// One surface-eligible event type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SurfaceType {
    /// The event type, e.g. `user/message`.
    pub event_type: String,
    /// Where the message is.
    pub projection: Projection,
    /// The message `role` the shape check requires.
    pub role: String,
    /// The `source` rules.
    pub origin: Origin,
    /// `true` when a message whose `content` is an empty array produces no message
    /// (the event stays a surface node).
    pub empty_content_is_silent: bool,
}

/// The set of surface-eligible types and their projections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vocabulary {
    /// The vocabulary's name, e.g. `dsh-v0`.
    pub name: String,
    /// The eligible types; every other type is log-only.
    pub types: Vec<SurfaceType>,
}

impl Default for Vocabulary {
    fn default() -> Self {
        Self::dsh_v0()
    }
}

impl Vocabulary {
    /// The default vocabulary `dsh-v0` (contract §3).
    pub fn dsh_v0() -> Self {
        let entry =
            |event_type: &str, projection: Projection, role: &str, origin, silent| SurfaceType {
                event_type: event_type.to_owned(),
                projection,
                role: role.to_owned(),
                origin,
                empty_content_is_silent: silent,
            };
        let message = || Projection::Member("message".to_owned());
        Self {
            name: "dsh-v0".to_owned(),
            types: vec![
                entry("user/message", Projection::Data, "user", Origin::Any, false),
                entry(
                    "assistant/message",
                    message(),
                    "assistant",
                    Origin::Model,
                    true,
                ),
                entry("tool/result", message(), "user", Origin::Tool, false),
                entry(
                    "context/message",
                    Projection::Data,
                    "user",
                    Origin::Any,
                    false,
                ),
                entry(
                    "steering/message",
                    Projection::Data,
                    "user",
                    Origin::Any,
                    false,
                ),
            ],
        }
    }

    /// The rule for `event_type`, or `None` when the type is log-only.
    pub fn surface_type(&self, event_type: &str) -> Option<&SurfaceType> {
        self.types.iter().find(|t| t.event_type == event_type)
    }

    /// `true` when `event_type` is surface-eligible.
    pub fn is_eligible(&self, event_type: &str) -> bool {
        self.surface_type(event_type).is_some()
    }
}

impl SurfaceType {
    /// The message value inside `data`, or `None` when the event produces no message.
    pub fn project<'j, 'a>(&self, data: Value<'j, 'a>) -> Option<Value<'j, 'a>> {
        let message = match &self.projection {
            Projection::Data => data,
            Projection::Member(key) => data.get(key)?,
        };
        let silent = self.empty_content_is_silent
            && message
                .get("content")
                .is_some_and(|c| c.kind() == Kind::Array && c.is_empty());
        (!silent).then_some(message)
    }

    /// Checks the message shape rules of contract §3.
    ///
    /// # Errors
    /// The rule that failed, for `MESSAGE_SHAPE`.
    pub fn check_shape(&self, data: Value<'_, '_>) -> Result<(), &'static str> {
        let message = match &self.projection {
            Projection::Data => Some(data),
            Projection::Member(key) => data.get(key),
        };
        let message = message
            .filter(|m| m.kind() == Kind::Object)
            .ok_or("message is not an object")?;
        if !non_empty_str(message.get("id")) {
            return Err("id is not a non-empty string");
        }
        if !message.get("role").is_some_and(|r| r.is_str(&self.role)) {
            return Err("role does not match the event type");
        }
        let source = message.get("source").filter(|s| s.kind() == Kind::Object);
        let source = source.ok_or("source is not an object")?;
        if !non_empty_str(source.get("kind")) {
            return Err("source.kind is not a non-empty string");
        }
        let content = message.get("content").filter(|c| c.kind() == Kind::Array);
        let content = content.ok_or("content is not an array")?;
        match self.origin {
            Origin::Any => Ok(()),
            Origin::Model => check_model_source(source),
            Origin::Tool => check_tool_result(source, content),
        }
    }
}

fn check_model_source(source: Value<'_, '_>) -> Result<(), &'static str> {
    let model_kind = source.get("kind").is_some_and(|k| k.is_str("model"));
    if !model_kind || !non_empty_str(source.get("provider")) || !non_empty_str(source.get("model"))
    {
        return Err("assistant source is not kind model with provider and model");
    }
    Ok(())
}

fn check_tool_result(source: Value<'_, '_>, content: Value<'_, '_>) -> Result<(), &'static str> {
    let call_id = source.get("callId");
    if !source.get("kind").is_some_and(|k| k.is_str("tool")) || !non_empty_str(call_id) {
        return Err("tool result source is not kind tool with a callId");
    }
    let mut blocks = content.elements();
    let (Some(block), None) = (blocks.next(), blocks.next()) else {
        return Err("tool result content is not exactly one block");
    };
    if !block.get("type").is_some_and(|t| t.is_str("tool-result")) {
        return Err("tool result block is not of type tool-result");
    }
    if !block
        .get("content")
        .is_some_and(|c| c.kind() == Kind::Array)
    {
        return Err("tool result block content is not an array");
    }
    let answers = block.get("toolCallId").zip(call_id);
    if !answers.is_some_and(|(a, b)| a.kind() == Kind::String && a.as_wtf8() == b.as_wtf8()) {
        return Err("toolCallId differs from source.callId");
    }
    Ok(())
}

/// Refuses retired event kinds (contract §3, `LEGACY_EVENT`).
///
/// # Errors
/// The legacy form found.
pub fn check_legacy(event_type: &str, data: Value<'_, '_>) -> Result<(), &'static str> {
    if event_type == "request/header-delta" {
        return Err("request/header-delta is retired");
    }
    if event_type == "request/header" && data.get("reason").is_some_and(|r| r.is_str("fallback")) {
        return Err("request/header with reason fallback is retired");
    }
    Ok(())
}

/// Checks a `request/header` event's data (contract §3, `REQUEST_HEADER_SHAPE`).
///
/// # Errors
/// The rule that failed.
pub fn check_request_header(data: Value<'_, '_>) -> Result<(), &'static str> {
    let header = data.get("header");
    let config = header
        .and_then(|h| h.get("config"))
        .filter(|c| c.kind() == Kind::Object);
    let config = config.ok_or("header.config is not an object")?;
    if !non_empty_str(config.get("provider")) || !non_empty_str(config.get("model")) {
        return Err("config needs non-empty provider and model");
    }
    if config
        .get("reasoningEffort")
        .is_some_and(|e| !non_empty_str(Some(e)))
    {
        return Err("reasoningEffort is not a non-empty string");
    }
    let Some(defaults) = header.and_then(|h| h.get("adapterDefaults")) else {
        return Ok(());
    };
    if defaults.kind() != Kind::Object {
        return Err("adapterDefaults is not an object");
    }
    for (key, value) in defaults.members() {
        let known = key.is_str("reasoningEffort") || key.is_str("maxTokens");
        if !known || !value.is_true() {
            return Err("adapterDefaults has a key other than reasoningEffort/maxTokens: true");
        }
        let field = key.as_str().unwrap_or_default();
        if config.get(&field).is_none() {
            return Err("adapterDefaults names a field that config lacks");
        }
    }
    Ok(())
}

fn non_empty_str(value: Option<Value<'_, '_>>) -> bool {
    value.is_some_and(|v| v.kind() == Kind::String && v.raw().len() > 2)
}

/// Defines [`DSH_KNOWN_TYPES`] and [`known_type`] from one list of names.
macro_rules! known_types {
    ($($name:literal,)*) => {
        /// The 48 event types the DSH reference knows (`dsh-formats.md` Appendix A), sorted.
        pub const DSH_KNOWN_TYPES: [&str; 48] = [$($name,)*];

        /// The static name of a type of [`DSH_KNOWN_TYPES`], found by a `match` on literals
        /// (a length test, then the bytes compared inline); `None` for any other type.
        pub fn known_type(event_type: &str) -> Option<&'static str> {
            match event_type {
                $($name => Some($name),)*
                _ => None,
            }
        }
    };
}

known_types! {
    "agent-preset/selected",
    "agent/inbox/spliced",
    "approval/asked",
    "approval/decided",
    "approval/policy",
    "assistant/chunk",
    "assistant/message",
    "command/done",
    "command/run",
    "compaction/end",
    "compaction/prune",
    "compaction/start",
    "compaction/summary",
    "feedback/record",
    "goal/change",
    "hook/invoked",
    "hook/result",
    "llm/retry",
    "llm/retry-started",
    "permission/preset",
    "plan/mode",
    "request/context",
    "request/header",
    "sandbox/mode",
    "schedule/change",
    "session/end-seed",
    "session/title",
    "session/title-llm-request",
    "step/end",
    "step/start",
    "subagent/descriptor",
    "team/member",
    "team/message/delivered",
    "team/message/queued",
    "team/task",
    "todo/write",
    "tool-workflow/agent-end",
    "tool-workflow/agent-start",
    "tool-workflow/run-end",
    "tool-workflow/run-start",
    "tool/call",
    "tool/code-dispatch",
    "tool/code-dispatch-start",
    "tool/result",
    "turn/end",
    "turn/start",
    "user/message",
    "web/deepseek-search-llm-request",
}

/// LOAD-10 (`dsh-formats.md` §9.4), for an import as strict as DSH's loader: the type is
/// known (after the `steering/message` → `user/message` projection of §9.2) or the event
/// is marked `ignorable`.
///
/// # Errors
/// `UNKNOWN_EVENT_TYPE`.
pub fn check_dsh_known(event_type: &str, ignorable: bool) -> crate::Result<()> {
    let known = event_type == "steering/message" || known_type(event_type).is_some();
    if known || ignorable {
        return Ok(());
    }
    Err(crate::error::ErrorKind::UnknownEventType {
        event_type: event_type.to_owned(),
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dsh_vocabulary_is_appendix_a_sorted_for_lookup() {
        assert_eq!(DSH_KNOWN_TYPES.len(), 48);
        assert!(DSH_KNOWN_TYPES.windows(2).all(|w| w[0] < w[1]));
        for name in DSH_KNOWN_TYPES {
            assert_eq!(known_type(name), Some(name));
            assert_eq!(known_type(&name[1..]), None);
            assert_eq!(known_type(&format!("{name}x")), None);
        }
        assert_eq!(known_type("turn/End"), None);
        assert_eq!(known_type(""), None);
        assert!(check_dsh_known("assistant/chunk", false).is_ok());
        assert!(check_dsh_known("steering/message", false).is_ok());
        assert!(check_dsh_known("text-chunks", true).is_ok());
        let refused = check_dsh_known("text-chunks", false).unwrap_err();
        assert_eq!(refused.code(), "UNKNOWN_EVENT_TYPE");
    }
}
