//! The event envelope (contract §2): reading an event object's keys, the strict checks of
//! the seed and import paths, and the surface fields as the fold sees them.
//!
//! The surface fields are kept tri-state ([`Field`]): a key given as `null` is present
//! and wrong, never the same as a missing key (contract §2, "A key given as `null` is
//! present").

use std::borrow::Cow;

use super::SurfaceOp;
use crate::error::{ErrorKind, Result};
use crate::json::{Kind, Value};

/// The longest accepted `type`, in bytes (contract §2).
pub const EVENT_TYPE_BYTES_MAX: usize = 256;

/// A surface field as found on a candidate event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field<T> {
    /// The key is missing.
    Absent,
    /// The key is present with a value that breaks its rule (`null` included).
    Invalid,
    /// The key is present and well formed.
    Valid(T),
}

impl<T> Field<T> {
    /// `true` unless the key is missing.
    pub fn is_present(&self) -> bool {
        !matches!(self, Self::Absent)
    }
}

/// What the surface fold (contract §4) needs of an event that is not yet accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate<'a> {
    /// The seq, or its text when it is not a non-negative safe integer.
    pub seq: Result<u64, String>,
    /// The type.
    pub event_type: Cow<'a, str>,
    /// `surfaceOp`.
    pub surface_op: Field<SurfaceOp>,
    /// `sourceEventSeqs`.
    pub sources: Field<Cow<'a, [u64]>>,
    /// The exact JSON text of `data` (used by the tool-output rewrite rule).
    pub data: &'a str,
}

/// The members of an event object, by key. Values borrow the parsed text.
#[derive(Debug, Clone, Copy, Default)]
pub struct Envelope<'j, 'a> {
    /// `type`.
    pub event_type: Option<Value<'j, 'a>>,
    /// `seq`.
    pub seq: Option<Value<'j, 'a>>,
    /// `time`.
    pub time: Option<Value<'j, 'a>>,
    /// `data`.
    pub data: Option<Value<'j, 'a>>,
    /// `sourceEventSeqs`.
    pub sources: Option<Value<'j, 'a>>,
    /// `surfaceOp`.
    pub surface_op: Option<Value<'j, 'a>>,
    /// `ignorable`.
    pub ignorable: Option<Value<'j, 'a>>,
    /// The first key outside the envelope table, if any.
    pub unknown_key: Option<Value<'j, 'a>>,
}

impl<'j, 'a> Envelope<'j, 'a> {
    /// Sorts an event object's members by key.
    ///
    /// # Errors
    /// `ENVELOPE_INVALID` when the value is not an object.
    pub fn read(event: Value<'j, 'a>) -> Result<Self> {
        if event.kind() != Kind::Object {
            return Err(invalid("event is not an object"));
        }
        let mut envelope = Self::default();
        for (key, value) in event.members() {
            // The parser refuses repeated keys, so each slot is filled at most once.
            match slot_of(key) {
                Some(index) => *envelope.slot(index) = Some(value),
                None => {
                    envelope.unknown_key.get_or_insert(key);
                }
            }
        }
        Ok(envelope)
    }

    /// The strict envelope checks of the seed and import paths (contract §2): no other
    /// key, every required key, `type`, `seq`, `time` and `ignorable` within their rules.
    /// Returns the seq and the time they checked.
    ///
    /// # Errors
    /// `ENVELOPE_INVALID` naming the rule.
    pub fn check(&self) -> Result<(u64, i64)> {
        if let Some(key) = self.unknown_key {
            return Err(invalid(&format!("unknown key {}", key.raw())));
        }
        let event_type = self.event_type.ok_or_else(|| invalid("type is missing"))?;
        check_event_type(event_type)?;
        let seq = self.seq.ok_or_else(|| invalid("seq is missing"))?;
        let seq = seq
            .as_safe_u64()
            .ok_or_else(|| invalid("seq is not a non-negative safe integer"))?;
        let time = self.time.ok_or_else(|| invalid("time is missing"))?;
        let time = time
            .as_safe_int()
            .ok_or_else(|| invalid("time is not a safe integer"))?;
        if self.data.is_none() {
            return Err(invalid("data is missing"));
        }
        if self.ignorable.is_some_and(|i| !i.is_true()) {
            return Err(invalid("ignorable is not the literal true"));
        }
        Ok((seq, time))
    }

    /// The candidate the fold checks. Lenient: a missing or malformed `seq` becomes a
    /// contiguity failure, a missing `type` the empty type, a missing `data` `null`.
    pub fn candidate(&self) -> Candidate<'a> {
        let seq = match self.seq {
            Some(seq) => seq
                .as_safe_u64()
                .ok_or_else(|| crate::error::excerpt(seq.raw())),
            None => Err("(missing)".to_owned()),
        };
        self.candidate_at(seq)
    }

    /// [`Envelope::candidate`] with its seq already read (by [`Envelope::check`]).
    pub fn candidate_at(&self, seq: Result<u64, String>) -> Candidate<'a> {
        let event_type = self.event_type.and_then(|t| t.as_str()).unwrap_or_default();
        Candidate {
            seq,
            event_type,
            surface_op: self.surface_op.map_or(Field::Absent, read_surface_op),
            sources: self.sources.map_or(Field::Absent, read_sources),
            data: self.data.map_or("null", |d| d.raw()),
        }
    }

    fn slot(&mut self, index: usize) -> &mut Option<Value<'j, 'a>> {
        match index {
            0 => &mut self.event_type,
            1 => &mut self.seq,
            2 => &mut self.time,
            3 => &mut self.data,
            4 => &mut self.sources,
            5 => &mut self.surface_op,
            _ => &mut self.ignorable,
        }
    }
}

/// Checks a `type` value (contract §2): a non-empty UTF-8 string of at most 256 bytes.
///
/// # Errors
/// `ENVELOPE_INVALID`.
pub fn check_event_type(event_type: Value<'_, '_>) -> Result<()> {
    let Some(text) = event_type.as_str() else {
        return Err(invalid("type is not a Unicode string"));
    };
    check_event_type_str(&text)
}

/// [`check_event_type`] for a type given as a Rust string.
///
/// # Errors
/// `ENVELOPE_INVALID`.
pub fn check_event_type_str(text: &str) -> Result<()> {
    if text.is_empty() || text.len() > EVENT_TYPE_BYTES_MAX {
        return Err(invalid("type is empty or longer than 256 bytes"));
    }
    Ok(())
}

/// Reads `surfaceOp` (contract §4 step 2): `"append"`, or an object of exactly `op`,
/// `start`, `end` with `op == "replace"` and non-negative safe integer endpoints.
pub fn read_surface_op(value: Value<'_, '_>) -> Field<SurfaceOp> {
    if value.is_str("append") {
        return Field::Valid(SurfaceOp::Append);
    }
    if value.kind() != Kind::Object || value.len() != 3 {
        return Field::Invalid;
    }
    let op = value.get("op").is_some_and(|op| op.is_str("replace"));
    let start = value.get("start").and_then(|s| s.as_safe_u64());
    let end = value.get("end").and_then(|e| e.as_safe_u64());
    match (op, start, end) {
        (true, Some(start), Some(end)) => Field::Valid(SurfaceOp::Replace { start, end }),
        _ => Field::Invalid,
    }
}

/// Reads `sourceEventSeqs` (contract §4 step 3): an array of non-negative safe integers.
pub fn read_sources<'a>(value: Value<'_, 'a>) -> Field<Cow<'a, [u64]>> {
    if value.kind() != Kind::Array {
        return Field::Invalid;
    }
    let seqs: Option<Vec<u64>> = value.elements().map(|e| e.as_safe_u64()).collect();
    seqs.map_or(Field::Invalid, |s| Field::Valid(Cow::Owned(s)))
}

/// The envelope slot of a key (`"\u0074ype"` is `type` too), or `None` for other keys.
fn slot_of(key: Value<'_, '_>) -> Option<usize> {
    const KEYS: [&str; 7] = [
        "type",
        "seq",
        "time",
        "data",
        "sourceEventSeqs",
        "surfaceOp",
        "ignorable",
    ];
    // Literal arms: each compares the length, then the bytes as integers, inline.
    match key.plain_str() {
        Some("type") => Some(0),
        Some("seq") => Some(1),
        Some("time") => Some(2),
        Some("data") => Some(3),
        Some("sourceEventSeqs") => Some(4),
        Some("surfaceOp") => Some(5),
        Some("ignorable") => Some(6),
        Some(_) => None,
        None => KEYS.iter().position(|k| key.is_str(k)),
    }
}

fn invalid(reason: &str) -> crate::Error {
    ErrorKind::EnvelopeInvalid {
        reason: reason.to_owned(),
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::Json;

    /// Each envelope key finds its own slot, spelled plainly or escaped; near misses of
    /// every length find none.
    #[test]
    fn every_key_finds_its_slot() {
        const KEYS: [&str; 7] = [
            "type",
            "seq",
            "time",
            "data",
            "sourceEventSeqs",
            "surfaceOp",
            "ignorable",
        ];
        for (at, key) in KEYS.iter().enumerate() {
            let escaped = key.chars().fold(String::new(), |mut out, c| {
                use std::fmt::Write;
                let _ = write!(out, "\\u{:04x}", c as u32);
                out
            });
            for spelled in [(*key).to_owned(), escaped] {
                let text = format!(r#"{{"{spelled}":0}}"#);
                let json = Json::parse(&text).unwrap();
                let (name, _) = json.root().members().next().unwrap();
                assert_eq!(slot_of(name), Some(at), "{spelled}");
            }
        }
        for miss in [
            "typ",
            "tipe",
            "Data",
            "surfaceop",
            "sourceEventSeqz",
            "",
            "types",
        ] {
            let text = format!(r#"{{"{miss}":0}}"#);
            let json = Json::parse(&text).unwrap();
            let (name, _) = json.root().members().next().unwrap();
            assert_eq!(slot_of(name), None, "{miss}");
        }
    }
}
