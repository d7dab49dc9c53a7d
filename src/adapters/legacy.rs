//! The import-compatibility projections of DSH logs written by older pre-release
//! versions (`dsh-formats.md` §9.2, LOAD-4), applied when such a log is imported.
//!
//! The reference applies them in memory at every load and never rewrites the file. An
//! import stores each projected event instead (so the surface, its messages and every
//! check of the contract see what the reference's loader sees) and keeps the event's
//! original text beside the log (`store.md` STORE-26), so that an export gives back the
//! file's own bytes (§2.4).

use std::collections::BTreeMap;

use crate::error::{Error, ErrorKind, Result};
use crate::event::EventRef;
use crate::json::{Json, Kind, Value, push_js_string};

/// The name of the file, in a session's directory, that holds the original texts of the
/// events an import projected (STORE-26).
pub const ORIGINALS_FILE: &str = crate::store::ORIGINALS_FILE;

/// The projected text of `event`, a stored event of session `session` (its header id),
/// when a projection of §9.2 changes it; `None` when none applies. The projections apply
/// in the order §9.2 lists them. `message_id_at(seq)` gives the message id of an earlier
/// event as it was stored (projected), which a legacy tool result that replaces it takes.
///
/// An event whose envelope is not one (no string `type`, no safe `seq`) is left to the
/// import's own checks.
///
/// # Errors
/// `CORRUPT` naming the seq, for an event §9.2 calls malformed (a `turn/start` with a
/// `trigger`, a `turn/end`, or a `steering/message` of another shape): the reference
/// reports such a log as a stored session that failed validation (LOAD-7).
pub fn project(
    session: &str,
    event: Value<'_, '_>,
    message_id_at: &mut dyn FnMut(u64) -> Result<Option<String>>,
) -> Result<Option<String>> {
    let Some(event_type) = event.get("type").and_then(|t| t.as_str()) else {
        return Ok(None);
    };
    // Most events (chunks above all) are of no type §9.2 looks at: one lookup for them.
    if !matches!(
        event_type.as_ref(),
        "turn/start"
            | "turn/end"
            | "steering/message"
            | "user/message"
            | "assistant/message"
            | "tool/result"
    ) {
        return Ok(None);
    }
    let (Some(seq), Some(data)) = (
        event.get("seq").and_then(|s| s.as_safe_u64()),
        event.get("data"),
    ) else {
        return Ok(None);
    };
    let malformed = |why: &str| -> Error {
        Error::from(ErrorKind::Corrupt {
            location: format!("seq {seq}"),
            reason: format!("stored session failed validation: {why} (dsh-formats.md §9.2)"),
        })
        .at_seq(seq)
    };
    let legacy_id = || {
        let mut id = String::new();
        push_js_string(
            &mut id,
            format!("legacy-message:{session}:{seq}").as_bytes(),
        );
        id
    };
    let is_object = data.kind() == Kind::Object;
    let projected: Option<(&str, String)> = match event_type.as_ref() {
        "turn/start" if is_object && data.get("trigger").is_some() => {
            let trigger_kind = data
                .get("trigger")
                .filter(|t| t.kind() == Kind::Object)
                .and_then(|t| t.get("kind"))
                .and_then(|k| k.as_str());
            let ok = exactly(data, &["turn", "trigger"])
                && is_count(data.get("turn"))
                && trigger_kind.is_some_and(|k| !k.is_empty());
            if !ok {
                return Err(malformed(
                    "a turn/start with a trigger holds exactly turn >= 1 and a trigger with a \
                     kind",
                ));
            }
            let turn = data.get("turn").map_or("", |t| t.raw());
            Some(("turn/start", object(&[("turn", turn.to_owned())])))
        }
        "turn/end" if is_object => turn_end(data).map_err(&malformed)?.map(|d| ("turn/end", d)),
        "steering/message" => Some((
            "user/message",
            steering(data, &legacy_id).map_err(malformed)?,
        )),
        "user/message" => user_without_id(data, &legacy_id).map(|d| ("user/message", d)),
        "assistant/message" if is_object => {
            assistant_without_message(data, &legacy_id).map(|d| ("assistant/message", d))
        }
        "tool/result" if is_object => {
            let replaced = event
                .get("surfaceOp")
                .filter(|op| op.get("op").is_some_and(|o| o.is_str("replace")))
                .and_then(|op| op.get("start"))
                .and_then(|s| s.as_safe_u64());
            match tool_result_without_message(data, replaced, &legacy_id, message_id_at) {
                Ok(new) => new.map(|d| ("tool/result", d)),
                Err(Projection::Malformed(why)) => return Err(malformed(why)),
                Err(Projection::Failed(error)) => return Err(error),
            }
        }
        _ => None,
    };
    Ok(projected.map(|(new_type, new_data)| rebuild(event, new_type, &new_data)))
}

/// Why a projection could not be made.
enum Projection {
    /// §9.2 calls the event malformed.
    Malformed(&'static str),
    /// An earlier event could not be read.
    Failed(Error),
}

/// `turn/end` (checked on every one whose `data` is an object): its new `data`, when the
/// reason is a legacy one.
fn turn_end(data: Value<'_, '_>) -> Result<Option<String>, &'static str> {
    let reason = data.get("reason").filter(|r| r.kind() == Kind::Object);
    let kind = reason.and_then(|r| r.get("kind")).and_then(|k| k.as_str());
    let (true, true, Some(reason), Some(kind)) = (
        exactly(data, &["turn", "reason"]),
        is_count(data.get("turn")),
        reason,
        kind,
    ) else {
        return Err("a turn/end holds exactly turn >= 1 and a reason with a string kind");
    };
    let new_reason = match kind.as_ref() {
        "completed" | "blocked" | "max-tokens" | "interrupted" => {
            if !exactly(reason, &["kind"]) {
                return Err(
                    "a completed, blocked, max-tokens or interrupted reason holds only its kind",
                );
            }
            None
        }
        "aborted" if exactly(reason, &["kind"]) => {
            Some(r#"{"kind":"aborted","reason":{"kind":"legacy"}}"#.to_owned())
        }
        "disposed" if exactly(reason, &["kind"]) => {
            Some(r#"{"kind":"aborted","reason":{"kind":"disposed"}}"#.to_owned())
        }
        "error" if reason.get("error").is_none() => Some(error_reason(reason)?),
        _ => None,
    };
    Ok(new_reason.map(|new| replacing(data, &[("reason", new)])))
}

/// A legacy `error` reason without an `error` member, as {`kind`, `error`}.
fn error_reason(reason: Value<'_, '_>) -> Result<String, &'static str> {
    let why = "a legacy error reason holds a step and a failure, or a message and a code";
    // A non-negative safe integer, judged by value as JavaScript does (`-0` is one).
    if reason.get("step").and_then(|s| s.as_safe_u64()).is_none() {
        return Err(why);
    }
    if exactly(reason, &["kind", "step", "failure"]) {
        let failure = reason.get("failure").ok_or(why)?;
        let string = |k: &str| failure.get(k).is_some_and(|v| v.kind() == Kind::String);
        let number = |k: &str| failure.get(k).is_none_or(|v| v.kind() == Kind::Number);
        let ok = failure.kind() == Kind::Object
            && has_only(
                failure,
                &[
                    "message",
                    "code",
                    "status",
                    "providerRetryAfterMs",
                    "requestId",
                ],
            )
            && string("message")
            && string("code")
            && number("status")
            && number("providerRetryAfterMs")
            && failure
                .get("requestId")
                .is_none_or(|v| v.kind() == Kind::String);
        if !ok {
            return Err(why);
        }
        return Ok(format!(r#"{{"kind":"error","error":{}}}"#, failure.raw()));
    }
    let with_code = exactly(reason, &["kind", "step", "message", "code"]);
    if !(with_code || exactly(reason, &["kind", "step", "message"])) {
        return Err(why);
    }
    let message = reason.get("message").filter(|m| m.kind() == Kind::String);
    let code = reason.get("code");
    if message.is_none() || code.is_some_and(|c| c.kind() != Kind::String) {
        return Err(why);
    }
    let code = code.map_or(r#""UNKNOWN""#, |c| c.raw());
    Ok(format!(
        r#"{{"kind":"error","error":{{"message":{},"code":{code}}}}}"#,
        message.map_or("", |m| m.raw())
    ))
}

/// `steering/message` becomes `user/message`: its new `data`.
fn steering(data: Value<'_, '_>, legacy_id: &dyn Fn() -> String) -> Result<String, &'static str> {
    if exactly(data, &["turn", "message"])
        && data.get("turn").is_some_and(|t| t.as_safe_int().is_some())
        && data
            .get("message")
            .is_some_and(|m| m.kind() == Kind::Object)
    {
        let message = data.get("message").expect("checked");
        // The message becomes the data, and then an id-less one gets its legacy id.
        return Ok(user_without_id(message, legacy_id).unwrap_or_else(|| message.raw().to_owned()));
    }
    if !exactly(data, &["turn", "content", "source"]) {
        return Err(
            "a steering/message holds exactly turn and message, or turn, content and source",
        );
    }
    let raw = |k: &str| data.get(k).map_or("", |v| v.raw()).to_owned();
    Ok(object(&[
        ("content", raw("content")),
        ("source", raw("source")),
        ("id", legacy_id()),
        ("role", r#""user""#.to_owned()),
    ]))
}

/// A `user/message` with `content` and `source` but none of `id`, `role`, `message`: its
/// data with the legacy id and the role `user` added.
fn user_without_id(data: Value<'_, '_>, legacy_id: &dyn Fn() -> String) -> Option<String> {
    let applies = data.kind() == Kind::Object
        && data.get("content").is_some()
        && data.get("source").is_some()
        && ["id", "role", "message"]
            .iter()
            .all(|k| data.get(k).is_none());
    applies.then(|| {
        let mut members = raw_members(data);
        members.push(("\"id\"".to_owned(), legacy_id()));
        members.push(("\"role\"".to_owned(), r#""user""#.to_owned()));
        raw_object(&members)
    })
}

/// An `assistant/message` with `content` and `provenance` but no `message`: those two
/// become `message` = {`id`, `role`: `assistant`, `content`, `source`: the provenance's
/// fields and `kind`: `model`}.
fn assistant_without_message(
    data: Value<'_, '_>,
    legacy_id: &dyn Fn() -> String,
) -> Option<String> {
    let (Some(content), Some(provenance), None) = (
        data.get("content"),
        data.get("provenance"),
        data.get("message"),
    ) else {
        return None;
    };
    // The provenance's fields, then `kind`, which overrides one of theirs.
    let mut source: Vec<(String, String)> = raw_members(provenance)
        .into_iter()
        .filter(|(key, _)| key != "\"kind\"")
        .collect();
    source.push(("\"kind\"".to_owned(), r#""model""#.to_owned()));
    let message = object(&[
        ("id", legacy_id()),
        ("role", r#""assistant""#.to_owned()),
        ("content", content.raw().to_owned()),
        ("source", raw_object(&source)),
    ]);
    let mut members = without(data, &["content", "provenance"]);
    members.push(("\"message\"".to_owned(), message));
    Some(raw_object(&members))
}

/// A `tool/result` with `callId`, `content` and `isError` but no `message`: those three
/// become the message of a tool result, whose id is the legacy one, or for a replacement
/// of seq `replaced`, the message id of that event as projected.
fn tool_result_without_message(
    data: Value<'_, '_>,
    replaced: Option<u64>,
    legacy_id: &dyn Fn() -> String,
    message_id_at: &mut dyn FnMut(u64) -> Result<Option<String>>,
) -> Result<Option<String>, Projection> {
    let (Some(call_id), Some(content), Some(is_error), None) = (
        data.get("callId"),
        data.get("content"),
        data.get("isError"),
        data.get("message"),
    ) else {
        return Ok(None);
    };
    let id = match replaced {
        None => legacy_id(),
        Some(start) => {
            let id = message_id_at(start).map_err(Projection::Failed)?;
            let id = id.ok_or(Projection::Malformed(
                "a legacy tool result replaces an event without a message id",
            ))?;
            let mut text = String::new();
            push_js_string(&mut text, id.as_bytes());
            text
        }
    };
    let block = object(&[
        ("type", r#""tool-result""#.to_owned()),
        ("toolCallId", call_id.raw().to_owned()),
        ("content", content.raw().to_owned()),
        ("isError", is_error.raw().to_owned()),
    ]);
    let source = object(&[
        ("kind", r#""tool""#.to_owned()),
        ("callId", call_id.raw().to_owned()),
    ]);
    let message = object(&[
        ("id", id),
        ("role", r#""user""#.to_owned()),
        ("content", format!("[{block}]")),
        ("source", source),
    ]);
    let mut members = without(data, &["callId", "content", "isError"]);
    members.push(("\"message\"".to_owned(), message));
    Ok(Some(raw_object(&members)))
}

/// The event with its type and data replaced, its other members as they were.
fn rebuild(event: Value<'_, '_>, event_type: &str, data: &str) -> String {
    let mut type_text = String::new();
    push_js_string(&mut type_text, event_type.as_bytes());
    replacing(event, &[("type", type_text), ("data", data.to_owned())])
}

/// `object`'s text with the values of the members named in `new` replaced by the given
/// texts, every member in its place.
fn replacing(object: Value<'_, '_>, new: &[(&str, String)]) -> String {
    let members: Vec<(String, String)> = object
        .members()
        .map(|(key, value)| {
            let text = new
                .iter()
                .find(|(name, _)| key.is_str(name))
                .map_or_else(|| value.raw().to_owned(), |(_, text)| text.clone());
            (key.raw().to_owned(), text)
        })
        .collect();
    raw_object(&members)
}

/// Whether `object` is an object holding exactly the members `keys`.
fn exactly(object: Value<'_, '_>, keys: &[&str]) -> bool {
    has_only(object, keys) && keys.iter().all(|k| object.get(k).is_some())
}

/// Whether `object` is an object none of whose members is outside `keys`.
fn has_only(object: Value<'_, '_>, keys: &[&str]) -> bool {
    object.kind() == Kind::Object
        && object
            .members()
            .all(|(key, _)| key.as_str().is_some_and(|k| keys.contains(&k.as_ref())))
}

/// A safe integer of at least 1.
fn is_count(value: Option<Value<'_, '_>>) -> bool {
    value.and_then(|v| v.as_safe_int()).is_some_and(|n| n >= 1)
}

/// The members of an object as (key text, value text).
fn raw_members(object: Value<'_, '_>) -> Vec<(String, String)> {
    object
        .members()
        .map(|(key, value)| (key.raw().to_owned(), value.raw().to_owned()))
        .collect()
}

/// [`raw_members`] without the members named `keys`.
fn without(object: Value<'_, '_>, keys: &[&str]) -> Vec<(String, String)> {
    object
        .members()
        .filter(|(key, _)| !key.as_str().is_some_and(|k| keys.contains(&k.as_ref())))
        .map(|(key, value)| (key.raw().to_owned(), value.raw().to_owned()))
        .collect()
}

/// An object of plain ASCII names and JSON value texts.
fn object(members: &[(&str, String)]) -> String {
    let members: Vec<(String, String)> = members
        .iter()
        .map(|(name, value)| (format!("\"{name}\""), value.clone()))
        .collect();
    raw_object(&members)
}

/// An object of key texts and value texts.
fn raw_object(members: &[(String, String)]) -> String {
    let mut out = String::from("{");
    for (i, (key, value)) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(key);
        out.push(':');
        out.push_str(value);
    }
    out.push('}');
    out
}

/// The original texts of the events an import projected, by seq, each bound to the text
/// the log stores for it (STORE-26).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Originals(BTreeMap<u64, Original>);

/// One projected event's original text, and the CRC-32C of its projected (stored) text.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Original {
    stored_crc: u32,
    text: String,
}

impl Originals {
    /// The original text of `event`, when the import projected it and the log still holds
    /// the projection: an event that took its seq since (after a salvage cut the log,
    /// SLV-1) has another text, and is exported as stored.
    pub fn of<'e>(&'e self, event: &EventRef<'_>) -> Option<&'e str> {
        let original = self.0.get(&event.seq)?;
        (crc32c::crc32c(event.text().as_bytes()) == original.stored_crc)
            .then_some(original.text.as_str())
    }

    /// Keeps `text`, the original of event `seq`, which the log stores as `stored`.
    pub(crate) fn insert(&mut self, seq: u64, text: &str, stored: &str) {
        let original = Original {
            stored_crc: crc32c::crc32c(stored.as_bytes()),
            text: text.to_owned(),
        };
        self.0.insert(seq, original);
    }

    /// Whether no event was projected.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Hands the originals to `import`, which writes them beside the log when it is
    /// published (STORE-26): a line per event in seq order,
    /// `{"seq":…,"storedCrc32c":…,"original":…}`, the original compact when it spanned
    /// lines (a `SQLite` `data` text may; its export writes it compactly anyway, SQL-15),
    /// then `{"crc32c":…}`, the CRC-32C of every byte before that last line. A carriage
    /// return alone ends no line (RAW-3): such a text is kept as read. Nothing when no
    /// event was projected.
    pub(crate) fn keep(self, import: &mut crate::store::Import<'_>) {
        if self.is_empty() {
            return;
        }
        let mut bytes = Vec::new();
        for (seq, original) in &self.0 {
            let mut compact = String::new();
            let text = if original.text.contains('\n') {
                if let Ok(json) = Json::parse(&original.text) {
                    crate::json::write_js(&mut compact, json.root());
                }
                &compact
            } else {
                &original.text
            };
            let line = format!(
                r#"{{"seq":{seq},"storedCrc32c":{},"original":{text}}}"#,
                original.stored_crc
            );
            bytes.extend_from_slice(line.as_bytes());
            bytes.push(b'\n');
        }
        // The file's own checksum, as its last line (STORE-26): what is exported from it is
        // checked first, as every byte the store returns is.
        let trailer = format!(r#"{{"crc32c":{}}}"#, crc32c::crc32c(&bytes));
        bytes.extend_from_slice(trailer.as_bytes());
        bytes.push(b'\n');
        import.keep_beside(ORIGINALS_FILE, bytes);
    }

    /// Reads the originals of session `id` of `store`: none when it has no
    /// [`ORIGINALS_FILE`] (the import projected nothing).
    ///
    /// # Errors
    /// `CORRUPT` naming the file (and line) for a file whose last line is not its checksum
    /// or whose bytes do not match it (changed, cut), and for a line that is not as
    /// [`Originals::keep`] writes it; `UNSAFE_PATH`, `IO`.
    pub fn read(store: &crate::store::Store, id: &str) -> Result<Self> {
        let Some((path, bytes)) = store.read_beside(id, ORIGINALS_FILE)? else {
            return Ok(Self::default());
        };
        let corrupt = |line: usize, why: &str| -> Error {
            ErrorKind::Corrupt {
                location: format!("{} line {}", path.display(), line + 1),
                reason: format!("{why} (store.md STORE-26)"),
            }
            .into()
        };
        // STORE-26: the last line is the checksum of every byte before it; nothing of the
        // file is taken before it matches (a byte changed, a line cut away).
        let body = crate::store::originals_lines(&bytes).map_err(|line| {
            corrupt(
                line,
                "the last line is not the checksum of the lines before it: the file was \
                 changed or cut",
            )
        })?;
        let body = std::str::from_utf8(body).map_err(|_| corrupt(0, "not UTF-8"))?;
        let mut originals = Self::default();
        for (line, record) in body.split_terminator('\n').enumerate() {
            let json = Json::parse(record).map_err(|_| corrupt(line, "not JSON"))?;
            let root = json.root();
            let seq = root.get("seq").and_then(|s| s.as_safe_u64());
            let crc = root
                .get("storedCrc32c")
                .and_then(|c| c.as_safe_u64())
                .and_then(|c| u32::try_from(c).ok());
            let text = root.get("original").filter(|o| o.kind() == Kind::Object);
            let (Some(seq), Some(stored_crc), Some(text)) = (seq, crc, text) else {
                return Err(corrupt(line, "not a seq, a CRC and an original event"));
            };
            let original = Original {
                stored_crc,
                text: text.raw().to_owned(),
            };
            originals.0.insert(seq, original);
        }
        Ok(originals)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn projected(event: &str) -> Result<Option<String>> {
        let json = Json::parse(event).unwrap();
        project("s", json.root(), &mut |_| Ok(None))
    }

    #[test]
    fn current_events_are_left_as_they_are() {
        for event in [
            r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#,
            r#"{"type":"turn/end","seq":1,"time":1,"data":{"turn":1,"reason":{"kind":"aborted","reason":{"kind":"parent"}}}}"#,
            r#"{"type":"turn/end","seq":1,"time":1,"data":{"turn":1,"reason":{"kind":"error","error":{"message":"m","code":"C"}}}}"#,
            r#"{"type":"turn/end","seq":1,"time":1,"data":{"turn":1,"reason":{"kind":"plugin-x","any":1}}}"#,
            r#"{"type":"user/message","seq":2,"time":1,"data":{"id":"u","role":"user","content":[],"source":{"kind":"user"}}}"#,
            r#"{"type":"assistant/message","seq":2,"time":1,"data":{"turn":1,"step":1,"message":{"id":"a"}}}"#,
            r#"{"type":"tool/result","seq":2,"time":1,"data":{"turn":1,"step":1,"message":{"id":"t"}}}"#,
            r#"{"type":"assistant/chunk","seq":2,"time":1,"data":{"turn":1,"step":1,"chunk":{}}}"#,
        ] {
            assert_eq!(projected(event).unwrap(), None, "{event}");
        }
    }

    #[test]
    fn legacy_error_reasons() {
        let failure = r#"{"type":"turn/end","seq":3,"time":1,"data":{"turn":1,"reason":{"kind":"error","step":2,"failure":{"message":"m","code":"C","status":500}}}}"#;
        assert_eq!(
            projected(failure).unwrap().unwrap(),
            r#"{"type":"turn/end","seq":3,"time":1,"data":{"turn":1,"reason":{"kind":"error","error":{"message":"m","code":"C","status":500}}}}"#
        );
        // `step` is judged by value, as JavaScript does: `-0` is a non-negative integer.
        let coded = r#"{"type":"turn/end","seq":3,"time":1,"data":{"reason":{"kind":"error","step":-0,"message":"m","code":"X"},"turn":1}}"#;
        assert_eq!(
            projected(coded).unwrap().unwrap(),
            r#"{"type":"turn/end","seq":3,"time":1,"data":{"reason":{"kind":"error","error":{"message":"m","code":"X"}},"turn":1}}"#
        );
        for bad in [
            r#"{"kind":"error","step":2,"failure":{"message":"m"}}"#,
            r#"{"kind":"error","step":2,"failure":{"message":"m","code":"C","extra":1}}"#,
            r#"{"kind":"error","step":1.5,"message":"m"}"#,
            r#"{"kind":"error","step":1,"message":5}"#,
            r#"{"kind":"error","step":1}"#,
        ] {
            let event = format!(
                r#"{{"type":"turn/end","seq":3,"time":1,"data":{{"turn":1,"reason":{bad}}}}}"#
            );
            let error = projected(&event).unwrap_err();
            assert_eq!((error.code(), error.seq()), ("CORRUPT", Some(3)), "{bad}");
        }
    }

    #[test]
    fn a_legacy_replacement_without_a_message_id_to_take_is_malformed() {
        let event = r#"{"type":"tool/result","seq":5,"time":1,"data":{"callId":"c","content":[],"isError":false},"surfaceOp":{"op":"replace","start":2,"end":2},"sourceEventSeqs":[2]}"#;
        let error = projected(event).unwrap_err();
        assert_eq!((error.code(), error.seq()), ("CORRUPT", Some(5)));
        let json = Json::parse(event).unwrap();
        let taken = project("s", json.root(), &mut |seq| Ok(Some(format!("m{seq}"))));
        assert!(taken.unwrap().unwrap().contains(r#""id":"m2""#));
    }
}
