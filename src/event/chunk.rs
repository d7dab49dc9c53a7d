//! A streamed chunk event held as its fields (`format-spec/log-format.md` §4.1): the
//! text of an `assistant/chunk` event in the reference's layout is an envelope around a
//! delta of a few bytes, so a chunk record stores the fields and the delta and the text is
//! rebuilt, byte for byte, when it is asked for (REC-13).
//!
//! [`ChunkRef::from_text`] is the writer's side of REC-11: it recognises exactly the texts
//! [`ChunkRef::write_text`] builds, so every event stored as a chunk reads back as the
//! text that was appended.
#![deny(clippy::indexing_slicing)]

use std::ops::Range;

/// The type of every chunk event.
pub const CHUNK_TYPE: &str = "assistant/chunk";

/// Which delta a chunk carries (REC-12 `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkKind {
    /// `text-delta`: `chunk.text`.
    Text,
    /// `reasoning-delta`: `chunk.text`.
    Reasoning,
    /// `tool-call-delta` with `id` and `argumentsDelta`, and `name` when the chunk has one.
    ToolCall,
}

impl ChunkKind {
    /// The chunk's `type` member.
    pub fn chunk_type(self) -> &'static str {
        match self {
            Self::Text => "text-delta",
            Self::Reasoning => "reasoning-delta",
            Self::ToolCall => "tool-call-delta",
        }
    }
}

/// The fields of a chunk event besides `seq` and `time`. The strings are the insides of
/// JSON string literals (escapes kept as written), so rebuilding the text copies them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkRef<'a> {
    /// The delta's kind.
    pub kind: ChunkKind,
    /// `data.turn`.
    pub turn: u32,
    /// `data.step`.
    pub step: u32,
    /// `data.chunk.index`.
    pub index: u32,
    /// The call id (tool calls), else empty.
    pub id: &'a str,
    /// The tool name, for a tool call whose chunk has one.
    pub name: Option<&'a str>,
    /// `chunk.text` or `chunk.argumentsDelta`.
    pub payload: &'a str,
}

const PREFIX: &str = r#"{"type":"assistant/chunk","seq":"#;
const TIME: &str = r#","time":"#;
const DATA: &str = r#","data":"#;
const TURN: &str = r#"{"turn":"#;
const STEP: &str = r#","step":"#;
const CHUNK: &str = r#","chunk":{"type":""#;
const INDEX: &str = r#"","index":"#;
const TEXT: &str = r#","text":""#;
const ID: &str = r#","id":""#;
const NAME: &str = r#"","name":""#;
const ARGUMENTS: &str = r#"","argumentsDelta":""#;
const END: &str = r#""}}}"#;

impl<'a> ChunkRef<'a> {
    /// REC-11: the chunk `text` stands for, when `text` is exactly the text
    /// [`ChunkRef::write_text`] builds for it with `seq` and `time`; `None` for any other
    /// text (another type, layout, number spelling, or a value out of range).
    pub fn from_text(seq: u64, time: i64, text: &'a str) -> Option<Self> {
        let rest = text.strip_prefix(PREFIX)?;
        let rest = strip_decimal(rest, u128::from(seq), false)?;
        let rest = rest.strip_prefix(TIME)?;
        let rest = strip_decimal(rest, u128::from(time.unsigned_abs()), time < 0)?;
        let data = rest.strip_prefix(DATA)?.strip_suffix('}')?;
        let chunk = Self::from_data(data)?;
        debug_assert_eq!(
            chunk.text(seq, time),
            text,
            "REC-11: the text rebuilds exactly"
        );
        Some(chunk)
    }

    /// The chunk whose `data` text (REC-13: from `{"turn"` to the `}` closing `data`) is
    /// exactly `data`; `None` for any other text. [`ChunkRef::from_text`] is this on the
    /// text's `data` once the envelope before and after it matched: the compact codec
    /// (log-format.md REC-20) asks it of a record that holds `data` without the envelope.
    pub fn from_data(data: &'a str) -> Option<Self> {
        let (turn, rest) = u32_token(data.strip_prefix(TURN)?)?;
        let (step, rest) = u32_token(rest.strip_prefix(STEP)?)?;
        let rest = rest.strip_prefix(CHUNK)?;
        let (kind, rest) = [ChunkKind::Text, ChunkKind::Reasoning, ChunkKind::ToolCall]
            .into_iter()
            .find_map(|kind| Some((kind, rest.strip_prefix(kind.chunk_type())?)))?;
        let (index, rest) = u32_token(rest.strip_prefix(INDEX)?)?;
        let (id, name, payload, rest) = if kind == ChunkKind::ToolCall {
            let (id, rest) = string_inside(rest.strip_prefix(ID)?)?;
            let (name, rest) = match rest.strip_prefix(NAME) {
                Some(rest) => {
                    let (name, rest) = string_inside(rest)?;
                    (Some(name), rest)
                }
                None => (None, rest),
            };
            let (payload, rest) = string_inside(rest.strip_prefix(ARGUMENTS)?)?;
            (id, name, payload, rest)
        } else {
            let (payload, rest) = string_inside(rest.strip_prefix(TEXT)?)?;
            ("", None, payload, rest)
        };
        // `END` closes the payload's string, the chunk, `data` and the event: the last `}`
        // is the envelope's, not part of `data`.
        if rest != &END[..END.len() - 1] {
            return None;
        }
        Some(Self {
            kind,
            turn,
            step,
            index,
            id,
            name,
            payload,
        })
    }

    /// REC-13: appends the event's text to `out`.
    pub fn write_text(&self, seq: u64, time: i64, out: &mut String) {
        use std::fmt::Write as _;
        out.reserve(self.text_len(seq, time));
        out.push_str(PREFIX);
        let _ = write!(
            out,
            "{seq}{TIME}{time}{DATA}{TURN}{}{STEP}{}",
            self.turn, self.step
        );
        out.push_str(CHUNK);
        out.push_str(self.kind.chunk_type());
        out.push_str(INDEX);
        let _ = write!(out, "{}", self.index);
        if self.kind == ChunkKind::ToolCall {
            out.push_str(ID);
            out.push_str(self.id);
            if let Some(name) = self.name {
                out.push_str(NAME);
                out.push_str(name);
            }
            out.push_str(ARGUMENTS);
        } else {
            out.push_str(TEXT);
        }
        out.push_str(self.payload);
        out.push_str(END);
    }

    /// The event's text (REC-13).
    pub fn text(&self, seq: u64, time: i64) -> String {
        let mut out = String::new();
        self.write_text(seq, time, &mut out);
        out
    }

    /// The length of the text, without building it.
    pub fn text_len(&self, seq: u64, time: i64) -> usize {
        Self::data_start(seq, time) + self.data_len_from_turn() + 1
    }

    /// The span of `data` within the text (REC-13): from `{"turn"` to before the last `}`.
    pub fn data_span(&self, seq: u64, time: i64) -> Range<usize> {
        let start = Self::data_start(seq, time);
        start..start + self.data_len_from_turn()
    }

    /// Where `data` starts: after `…"time":T,"data":`.
    fn data_start(seq: u64, time: i64) -> usize {
        PREFIX.len()
            + decimal_len(u128::from(seq))
            + TIME.len()
            + decimal_len(u128::from(time.unsigned_abs()))
            + usize::from(time < 0)
            + DATA.len()
    }

    /// The bytes of `data`: `{"turn":…` to the `}` closing it.
    fn data_len_from_turn(&self) -> usize {
        let numbers = decimal_len(u128::from(self.turn))
            + decimal_len(u128::from(self.step))
            + decimal_len(u128::from(self.index));
        let fields = if self.kind == ChunkKind::ToolCall {
            ID.len()
                + self.id.len()
                + self.name.map_or(0, |name| NAME.len() + name.len())
                + ARGUMENTS.len()
        } else {
            TEXT.len()
        };
        // `{"turn":` … `}}` — the text's last `}` closes the event, not `data`.
        TURN.len()
            + STEP.len()
            + CHUNK.len()
            + self.kind.chunk_type().len()
            + INDEX.len()
            + numbers
            + fields
            + self.payload.len()
            + END.len()
            - 1
    }
}

/// The number of decimal digits of `n`.
fn decimal_len(n: u128) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

/// `rest` after the decimal spelling of the integer (`-` first when `negative`).
fn strip_decimal(rest: &str, magnitude: u128, negative: bool) -> Option<&str> {
    let rest = if negative {
        rest.strip_prefix('-')?
    } else {
        rest
    };
    let digits = decimal_len(magnitude);
    let (token, rest) = rest.split_at_checked(digits)?;
    let follows_digit = rest.as_bytes().first().is_some_and(u8::is_ascii_digit);
    (token.parse::<u128>().ok()? == magnitude
        && token.bytes().all(|b| b.is_ascii_digit())
        && !follows_digit)
        .then_some(rest)
}

/// A `u32` written as JSON writes it (digits, no leading zero), and the text after it.
fn u32_token(text: &str) -> Option<(u32, &str)> {
    let end = text
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(text.len());
    let (token, rest) = text.split_at_checked(end)?;
    if token.is_empty() || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    Some((token.parse().ok()?, rest))
}

/// The inside of the JSON string literal that `text` continues (its opening quote already
/// consumed), and the text from its closing quote on; `None` unless it is a well-formed
/// string inside ([`is_string_inside`]).
fn string_inside(text: &str) -> Option<(&str, &str)> {
    let bytes = text.as_bytes();
    let mut at = 0;
    loop {
        match bytes.get(at)? {
            b'"' => break,
            b'\\' => at += 2,
            _ => at += 1,
        }
    }
    let (inside, rest) = text.split_at_checked(at)?;
    // A `str`'s bytes are UTF-8 already.
    is_escaped_inside(inside.as_bytes()).then_some((inside, rest))
}

/// REC-12: `bytes` are the inside of a JSON string literal: UTF-8, no unescaped `"` or
/// `\`, no byte below `0x20`, and only JSON's escapes.
pub fn is_string_inside(bytes: &[u8]) -> bool {
    std::str::from_utf8(bytes).is_ok() && is_escaped_inside(bytes)
}

/// [`is_string_inside`] but for UTF-8: no unescaped `"` or `\`, no byte below `0x20`, and
/// only JSON's escapes.
fn is_escaped_inside(bytes: &[u8]) -> bool {
    let mut at = 0;
    while let Some(&b) = bytes.get(at) {
        match b {
            b'"' | 0..0x20 => return false,
            b'\\' => match bytes.get(at + 1) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => at += 2,
                Some(b'u') => {
                    let hex = bytes.get(at + 2..at + 6);
                    if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                        return false;
                    }
                    at += 6;
                }
                _ => return false,
            },
            _ => at += 1,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn event(seq: u64, time: i64, data: &str) -> String {
        format!(r#"{{"type":"assistant/chunk","seq":{seq},"time":{time},"data":{data}}}"#)
    }

    #[test]
    fn recognises_the_reference_layouts_and_rebuilds_them() {
        for (data, kind, name) in [
            (
                r#"{"turn":1,"step":2,"chunk":{"type":"text-delta","index":0,"text":"Hel\"lo\n"}}"#,
                ChunkKind::Text,
                None,
            ),
            (
                r#"{"turn":0,"step":0,"chunk":{"type":"reasoning-delta","index":3,"text":""}}"#,
                ChunkKind::Reasoning,
                None,
            ),
            (
                r#"{"turn":7,"step":1,"chunk":{"type":"tool-call-delta","index":1,"id":"call_1","name":"read","argumentsDelta":""}}"#,
                ChunkKind::ToolCall,
                Some("read"),
            ),
            (
                r#"{"turn":7,"step":1,"chunk":{"type":"tool-call-delta","index":1,"id":"c","argumentsDelta":"{\"pa\u00e9"}}"#,
                ChunkKind::ToolCall,
                None,
            ),
        ] {
            for (seq, time) in [(0, 0), (12, -5), (u64::MAX, 9_007_199_254_740_991)] {
                let text = event(seq, time, data);
                let chunk = ChunkRef::from_text(seq, time, &text).expect(&text);
                assert_eq!((chunk.kind, chunk.name), (kind, name));
                assert_eq!(chunk.text(seq, time), text);
                assert_eq!(chunk.text_len(seq, time), text.len());
                assert_eq!(&text[chunk.data_span(seq, time)], data);
                assert_eq!(ChunkRef::from_data(data), Some(chunk));
            }
        }
    }

    #[test]
    fn refuses_every_other_text() {
        let ok = r#"{"turn":1,"step":2,"chunk":{"type":"text-delta","index":0,"text":"a"}}"#;
        assert!(ChunkRef::from_text(5, 6, &event(5, 6, ok)).is_some());
        // Fields that disagree with the envelope, other spellings and layouts.
        assert!(ChunkRef::from_text(4, 6, &event(5, 6, ok)).is_none());
        assert!(ChunkRef::from_text(5, 7, &event(5, 6, ok)).is_none());
        assert!(ChunkRef::from_text(55, 6, &event(5, 6, ok)).is_none());
        let others = [
            r#"{"turn":01,"step":2,"chunk":{"type":"text-delta","index":0,"text":"a"}}"#,
            r#"{"turn":1.0,"step":2,"chunk":{"type":"text-delta","index":0,"text":"a"}}"#,
            r#"{"turn":-1,"step":2,"chunk":{"type":"text-delta","index":0,"text":"a"}}"#,
            r#"{"turn":4294967296,"step":2,"chunk":{"type":"text-delta","index":0,"text":"a"}}"#,
            r#"{"step":2,"turn":1,"chunk":{"type":"text-delta","index":0,"text":"a"}}"#,
            r#"{"turn":1,"step":2,"chunk":{"type":"block-start","index":0,"blockType":"text"}}"#,
            r#"{"turn":1,"step":2,"chunk":{"type":"text-delta","index":0,"text":"a","x":1}}"#,
            r#"{"turn":1,"step":2,"chunk":{"index":0,"type":"text-delta","text":"a"}}"#,
            r#"{"turn":1,"step":2,"chunk":{"type":"text-delta","index":0,"text":"\x"}}"#,
            r#"{"turn":1,"step":2,"chunk":{"type":"tool-call-delta","index":0,"argumentsDelta":"a"}}"#,
            r#"{"turn":1,"step":2,"chunk":{"type":"text-delta","index":0,"text":"a"},"x":1}"#,
        ];
        for data in others {
            assert!(
                ChunkRef::from_text(5, 6, &event(5, 6, data)).is_none(),
                "{data}"
            );
            assert!(ChunkRef::from_data(data).is_none(), "{data}");
        }
        // `data` ends at the `}` closing it: the envelope's last `}` is not part of it.
        assert!(ChunkRef::from_data(&format!("{ok}}}")).is_none());
        assert!(ChunkRef::from_data(&ok[..ok.len() - 1]).is_none());
        let spaced = event(5, 6, ok).replace(r#""seq":5"#, r#""seq": 5"#);
        assert!(ChunkRef::from_text(5, 6, &spaced).is_none());
        let exponent = event(5, 6, ok).replace(r#""time":6"#, r#""time":6e0"#);
        assert!(ChunkRef::from_text(5, 6, &exponent).is_none());
        let other_type = event(5, 6, ok).replace("assistant/chunk", "assistant/chunks");
        assert!(ChunkRef::from_text(5, 6, &other_type).is_none());
    }

    #[test]
    fn string_insides() {
        for good in ["", "a", r#"\"\\\/\b\f\n\r\t"#, r"\u00e9\uD800", "é✓"] {
            assert!(is_string_inside(good.as_bytes()), "{good}");
        }
        for bad in [
            &b"\""[..],
            b"\\",
            b"\\x",
            b"\\u12",
            b"\\u12g4",
            b"\x01",
            b"\xff",
        ] {
            assert!(!is_string_inside(bad), "{bad:?}");
        }
    }

    proptest! {
        /// REC-12 where `choose` skips its own check of a chunk recognised in a text: the
        /// string inside that [`string_inside`] takes from a text is exactly one that
        /// [`is_string_inside`] accepts, and everything it takes is one.
        #[test]
        fn string_inside_takes_exactly_the_string_insides(
            s in r#"[a"\\/bfnrtu0-9A-Fé\x01\x1f ]{0,16}"#,
        ) {
            let text = format!("{s}\"}}");
            let taken = string_inside(&text);
            prop_assert_eq!(taken == Some((s.as_str(), "\"}")), is_string_inside(s.as_bytes()), "{:?}", s);
            if let Some((inside, _)) = taken {
                prop_assert!(is_string_inside(inside.as_bytes()), "{:?}", inside);
            }
        }

        /// Every chunk rebuilds a text that is recognised as that same chunk.
        #[test]
        fn write_then_recognise(
            seq: u64,
            time in -9_007_199_254_740_991_i64..=9_007_199_254_740_991,
            turn: u32, step: u32, index: u32,
            kind in 0..4_u8,
            id in r#"([a-z_0-9]|\\"|\\u00e9){0,12}"#,
            name in r"[a-z]{0,6}",
            payload in r#"([ -!#-\[\]-~é]|\\n|\\"|\\\\|\\u0000){0,20}"#,
        ) {
            let kind_ = match kind { 0 => ChunkKind::Text, 1 => ChunkKind::Reasoning, _ => ChunkKind::ToolCall };
            let tool = kind_ == ChunkKind::ToolCall;
            let chunk = ChunkRef {
                kind: kind_,
                turn,
                step,
                index,
                id: if tool { &id } else { "" },
                name: (kind == 3).then_some(name.as_str()),
                payload: &payload,
            };
            let text = chunk.text(seq, time);
            prop_assert_eq!(ChunkRef::from_text(seq, time, &text), Some(chunk));
            prop_assert_eq!(chunk.text_len(seq, time), text.len());
            let data = &text[chunk.data_span(seq, time)];
            let framed = data.starts_with(r#"{"turn":"#) && data.ends_with("}}");
            prop_assert!(framed, "data span {:?}", data);
            prop_assert_eq!(ChunkRef::from_data(data), Some(chunk));
        }
    }
}
