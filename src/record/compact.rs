//! Compact records (`format-spec/log-format.md` §4.2, feature `COMPACT_RECORDS`): a varint
//! frame (REC-15, REC-16); event records whose envelope is rebuilt from their fields (kind
//! one) or whose text is stored whole (kind two); chunk runs holding consecutive streamed
//! deltas (kind three). Pure functions over bytes, like the rest of the codec: nothing in
//! the engine writes or reads these records yet.
//!
//! Decoding treats its input as untrusted: every varint, length and span is checked before
//! use, a failure is a [`CompactError`] (never a panic), the work is bounded by the bytes
//! given, and the decoded [`Record`] borrows them (no allocation per byte of payload;
//! sources and run members are decoded on access).
//!
//! The codec is canonical (REC-20): `decode(encode(r))` is `r`, and any bytes [`decode`]
//! accepts are exactly what [`Record::encode`] writes for the record it returns. Which body
//! an event gets (REC-17) is decided by one function, [`form`], which the writer
//! ([`choose`]) and the decoder (refusing a kind 2 that should be kind 1, or a kind 1 or 2
//! that should be a chunk run) both call.
#![deny(clippy::indexing_slicing)]

use std::borrow::Cow;
use std::fmt;

use crate::event::chunk::{CHUNK_TYPE, ChunkKind, ChunkRef, is_string_inside};
use crate::event::envelope::EVENT_TYPE_BYTES_MAX;
use crate::event::{Event, EventFields, EventRef, Seqs, SurfaceOp};
use crate::limits::SAFE_INTEGER_MAX;

/// Records start at multiples of this (REC-15, SEG-4).
pub const RECORD_ALIGN: usize = super::RECORD_ALIGN;
/// Bytes of the `crc` field (REC-15).
pub const CRC_LEN: usize = 4;
/// The longest `len` varint (REC-15): `len` is below 2^32.
pub const LEN_BYTES_MAX: usize = 5;
/// The shortest body (REC-15): a kind 1 record with one byte of `data`.
pub const BODY_MIN_LEN: usize = 6;
/// The largest body of a chunk run of two or more members (REC-16).
pub const RUN_BODY_MAX: usize = 4096;
/// The longest `id` or `name` of a chunk run (REC-16).
pub const STRING_BYTES_MAX: usize = 65_535;
/// The largest text a record may stand for (REC-18, REC-20): spans are 32-bit.
pub const TEXT_BYTES_MAX: u64 = u32::MAX as u64;

/// Body `kind` 1: an event whose text is rebuilt from its fields and `data` (REC-18).
pub const KIND_REBUILT: u8 = 1;
/// Body `kind` 2: an event whose text is stored whole.
pub const KIND_VERBATIM: u8 = 2;
/// Body `kind` 3: a run of consecutive streamed chunks.
pub const KIND_CHUNKS: u8 = 3;

const FLAG_SURFACE_OP: u8 = 1 << 0;
const FLAG_REPLACE: u8 = 1 << 1;
const FLAG_SOURCES: u8 = 1 << 2;
const FLAG_IGNORABLE: u8 = 1 << 3;
const FLAG_MESSAGE: u8 = 1 << 4;
const FLAG_SURFACE_OP_FIRST: u8 = 1 << 5;
const FLAGS_RESERVED: u8 = 0b1100_0000;

const SAFE: u64 = SAFE_INTEGER_MAX.unsigned_abs();

/// Defines [`TYPE_TABLE`] and [`type_code`] from one list of names.
macro_rules! type_table {
    ($($code:literal $name:literal,)*) => {
        /// Table T (log-format.md REC-19): the event types written as a one-byte code,
        /// code `n` at index `n − 1`. Frozen with the feature: a new code would be misread
        /// by a reader that does not know it, so adding one takes a new feature bit.
        pub const TYPE_TABLE: [&str; 50] = [$($name,)*];

        /// The code of `event_type` in [`TYPE_TABLE`], or `None` for a type written inline.
        pub fn type_code(event_type: &str) -> Option<u8> {
            match event_type {
                $($name => Some($code),)*
                _ => None,
            }
        }
    };
}

type_table! {
    1 "agent-preset/selected",
    2 "agent/inbox/spliced",
    3 "approval/asked",
    4 "approval/decided",
    5 "approval/policy",
    6 "assistant/chunk",
    7 "assistant/message",
    8 "command/done",
    9 "command/run",
    10 "compaction/end",
    11 "compaction/prune",
    12 "compaction/start",
    13 "compaction/summary",
    14 "feedback/record",
    15 "goal/change",
    16 "hook/invoked",
    17 "hook/result",
    18 "llm/retry",
    19 "llm/retry-started",
    20 "permission/preset",
    21 "plan/mode",
    22 "request/context",
    23 "request/header",
    24 "sandbox/mode",
    25 "schedule/change",
    26 "session/end-seed",
    27 "session/title",
    28 "session/title-llm-request",
    29 "step/end",
    30 "step/start",
    31 "subagent/descriptor",
    32 "team/member",
    33 "team/message/delivered",
    34 "team/message/queued",
    35 "team/task",
    36 "todo/write",
    37 "tool-workflow/agent-end",
    38 "tool-workflow/agent-start",
    39 "tool-workflow/run-end",
    40 "tool-workflow/run-start",
    41 "tool/call",
    42 "tool/code-dispatch",
    43 "tool/code-dispatch-start",
    44 "tool/result",
    45 "turn/end",
    46 "turn/start",
    47 "user/message",
    48 "web/deepseek-search-llm-request",
    49 "context/message",
    50 "steering/message",
}

/// Why bytes are not a valid compact record. The first four are the frame's (what recovery
/// tells a torn tail by, RCV-3); [`CompactError::Refused`] is a frame whose checksum matched
/// but whose bytes the encoder never writes (REC-20), `CORRUPT` (RCV-8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactError {
    /// The first byte is 0: the end of the data (SEG-5), not a record.
    End,
    /// The frame does not fit in the bytes available.
    Truncated,
    /// `len` runs past 5 bytes, is 2^32 or more, or is below 6 (REC-15).
    Length,
    /// The checksum does not match (REC-15).
    Checksum,
    /// The checksum matches but the record breaks REC-20: `offset` is where, from the
    /// record's first byte, the field that breaks it starts.
    Refused {
        /// The field's offset within the record.
        offset: usize,
        /// The rule broken.
        rule: Refusal,
    },
}

/// A REC-20 rule a record breaks (or, from the encoding functions, an event or run that
/// cannot be written as a compact record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `len` is not a minimal varint.
    NonMinimalLen,
    /// The padding after the body is not zero.
    Padding,
    /// A varint is not minimal (it ends in a `0x00` byte, REC-16).
    NonMinimalVarint,
    /// A varint is longer than 10 bytes or above 2^64 − 1.
    VarintOverflow,
    /// A field or a length runs past the end of the body.
    PastBody,
    /// `kind` is not 1, 2 or 3.
    Kind,
    /// `flags` sets bit 6 or 7.
    ReservedFlags,
    /// `flags` sets bit 1 (replace) without bit 0 (`surfaceOp`).
    ReplaceWithoutOp,
    /// `flags` sets bit 5 in a kind 2 record, or without bits 0 and 2.
    OrderFlag,
    /// A seq (an event's, a run's or its last member's) is above 2^53 − 1.
    SeqRange,
    /// A time (an event's or a run member's) is outside ±(2^53 − 1).
    TimeRange,
    /// `type_code` is above 50.
    TypeCode,
    /// An inline type is empty or longer than 256 bytes.
    TypeLength,
    /// An inline type is not UTF-8.
    TypeUtf8,
    /// An inline type is a type of table T: it must be written as its code.
    TypeInTable,
    /// A kind 1 record's inline type holds `"`, `\` or a byte below `0x20`: its JSON string
    /// would not be itself.
    TypeEscape,
    /// A replace bound is above 2^53 − 1.
    ReplaceRange,
    /// A source seq is below 0 or above 2^53 − 1.
    SourceRange,
    /// A later source run starts right after the previous one: it would have been one run.
    SourceGap,
    /// A kind 2 record lists more sources than its text has bytes.
    SourceCount,
    /// A kind 1 record's rebuilt text, or a chunk run member's text (REC-13), would be 2^32
    /// bytes or longer.
    TextLength,
    /// `data` (kind 1) or the text (kind 2) is not UTF-8.
    TextUtf8,
    /// A kind 1 record's `data` is empty.
    EmptyData,
    /// A kind 2 record's data span lies outside its text or off a character boundary.
    DataSpan,
    /// The message span lies outside `data` or off a character boundary.
    MessageSpan,
    /// A kind 2 record whose text is REC-18's text of its fields: it must be kind 1.
    ShouldBeRebuilt,
    /// A kind 1 or 2 record holding an event REC-11 calls a chunk: it must be kind 3.
    ShouldBeChunkRun,
    /// `chunk_kind` is not 1 to 4.
    ChunkKind,
    /// A chunk run of no member.
    CountZero,
    /// A chunk run of two or more members whose body is above 4,096 bytes.
    RunTooLarge,
    /// `turn`, `step` or `index` is 2^32 or more.
    U32Range,
    /// An `id` or `name` is longer than 65,535 bytes.
    StringLength,
    /// An `id`, `name` or payload is not the inside of a JSON string (REC-12's rule).
    ChunkString,
    /// The payload lengths do not add up to the rest of the body.
    PayloadLengths,
    /// Encoding only: a chunk does not continue the run before it (REC-17, DSH ROW-3).
    Discontinuous,
    /// Encoding only: the event's spans do not lie in its text, or its text is not stored
    /// (a view of another record kind that is not a chunk).
    Unencodable,
}

impl Refusal {
    /// The rule, in words.
    pub fn reason(self) -> &'static str {
        match self {
            Self::NonMinimalLen => "len is not a minimal varint (REC-15)",
            Self::Padding => "padding is not zero (REC-15)",
            Self::NonMinimalVarint => "a varint is not minimal (REC-16)",
            Self::VarintOverflow => "a varint is above 2^64 - 1 (REC-16)",
            Self::PastBody => "a field runs past the body (REC-20)",
            Self::Kind => "unknown body kind (REC-16)",
            Self::ReservedFlags => "reserved flag bits 6, 7 (REC-16)",
            Self::ReplaceWithoutOp => "replace flag without surfaceOp (REC-16)",
            Self::OrderFlag => "surfaceOp-first flag outside a kind 1 with both fields (REC-16)",
            Self::SeqRange => "a seq is not a safe integer (REC-20)",
            Self::TimeRange => "a time is not a safe integer (REC-20)",
            Self::TypeCode => "type code above 50 (REC-19)",
            Self::TypeLength => "inline type length outside 1..=256 (REC-20)",
            Self::TypeUtf8 => "inline type is not UTF-8 (REC-20)",
            Self::TypeInTable => "inline type of table T (REC-19)",
            Self::TypeEscape => "a rebuilt type needs an escape (REC-18)",
            Self::ReplaceRange => "a replace bound is not a safe integer (REC-20)",
            Self::SourceRange => "a source seq is not a safe integer (REC-20)",
            Self::SourceGap => "a source run continues the previous one (REC-16)",
            Self::SourceCount => "more sources than bytes of text (REC-20)",
            Self::TextLength => "a rebuilt text is 2^32 bytes or longer (REC-20)",
            Self::TextUtf8 => "text or data is not UTF-8 (REC-20)",
            Self::EmptyData => "empty data in a rebuilt event (REC-20)",
            Self::DataSpan => "data span outside the text (REC-20)",
            Self::MessageSpan => "message span outside data (REC-20)",
            Self::ShouldBeRebuilt => "a verbatim text that REC-18 rebuilds (REC-17)",
            Self::ShouldBeChunkRun => "an event record holding a chunk (REC-17)",
            Self::ChunkKind => "unknown chunk kind (REC-16)",
            Self::CountZero => "a chunk run of no member (REC-16)",
            Self::RunTooLarge => "a chunk run of several members above 4096 bytes (REC-16)",
            Self::U32Range => "turn, step or index is 2^32 or more (REC-16)",
            Self::StringLength => "id or name longer than 65535 bytes (REC-16)",
            Self::ChunkString => "a string is not the inside of a JSON string (REC-12)",
            Self::PayloadLengths => "payload lengths do not add up to the body (REC-16)",
            Self::Discontinuous => "a chunk does not continue the run (REC-17)",
            Self::Unencodable => "the event's spans do not lie in its text",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}

impl fmt::Display for CompactError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::End => f.write_str("end of the data"),
            Self::Truncated => f.write_str("the frame runs past the bytes"),
            Self::Length => f.write_str("len out of range (REC-15)"),
            Self::Checksum => f.write_str("checksum mismatch (REC-15)"),
            Self::Refused { offset, rule } => write!(f, "{rule} at record offset {offset}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Varints (REC-16)

/// Appends `value` as an unsigned LEB128 varint, minimal.
pub fn put_uv(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value & 0x7f) as u8 | 0x80);
        value >>= 7;
    }
    out.push((value & 0x7f) as u8);
}

/// Appends `value` zigzag-encoded (REC-16).
pub fn put_zz(out: &mut Vec<u8>, value: i64) {
    put_uv(out, zigzag(value));
}

/// The bytes of the minimal varint of `value`.
pub fn uv_len(value: u64) -> usize {
    (value | 1).ilog2() as usize / 7 + 1
}

/// Zigzag: `2n` for n ≥ 0, `−2n − 1` otherwise; a bijection of i64 onto u64.
pub fn zigzag(value: i64) -> u64 {
    (value << 1 ^ value >> 63).cast_unsigned()
}

/// The inverse of [`zigzag`].
pub fn unzigzag(value: u64) -> i64 {
    (value >> 1).cast_signed() ^ -(value & 1).cast_signed()
}

/// Reads the varint at the start of `bytes`: its value and length. `None` when the bytes
/// end first.
///
/// # Errors
/// [`Refusal::NonMinimalVarint`] or [`Refusal::VarintOverflow`].
fn read_uv(bytes: &[u8]) -> Result<Option<(u64, usize)>, Refusal> {
    let mut value = 0_u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        if i == 9 && b > 1 {
            return Err(Refusal::VarintOverflow);
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            if i > 0 && b == 0 {
                return Err(Refusal::NonMinimalVarint);
            }
            return Ok(Some((value, i + 1)));
        }
    }
    if bytes.len() >= 10 {
        return Err(Refusal::VarintOverflow);
    }
    Ok(None)
}

/// A reader over a body whose checksum matched: each read checks the bounds and REC-16,
/// and a refusal names the offset (within the record) of the field it was reading.
struct Cursor<'a> {
    body: &'a [u8],
    at: usize,
    /// The offset of the body within the record.
    base: usize,
    /// Where the field read last starts.
    field: usize,
}

impl<'a> Cursor<'a> {
    fn new(body: &'a [u8], base: usize) -> Self {
        Self {
            body,
            at: 0,
            base,
            field: 0,
        }
    }

    /// A refusal at the field read last.
    fn refuse(&self, rule: Refusal) -> CompactError {
        CompactError::Refused {
            offset: self.base + self.field,
            rule,
        }
    }

    fn u8(&mut self) -> Result<u8, CompactError> {
        self.field = self.at;
        let b = *self
            .body
            .get(self.at)
            .ok_or_else(|| self.refuse(Refusal::PastBody))?;
        self.at += 1;
        Ok(b)
    }

    fn uv(&mut self) -> Result<u64, CompactError> {
        self.field = self.at;
        let rest = self.body.get(self.at..).unwrap_or_default();
        match read_uv(rest) {
            Ok(Some((value, n))) => {
                self.at += n;
                Ok(value)
            }
            Ok(None) => Err(self.refuse(Refusal::PastBody)),
            Err(rule) => Err(self.refuse(rule)),
        }
    }

    /// A `uv` at most `max`, else `rule`.
    fn uv_max(&mut self, max: u64, rule: Refusal) -> Result<u64, CompactError> {
        let value = self.uv()?;
        if value > max {
            return Err(self.refuse(rule));
        }
        Ok(value)
    }

    fn zz(&mut self) -> Result<i64, CompactError> {
        self.uv().map(unzigzag)
    }

    /// The next `len` bytes.
    fn take(&mut self, len: u64) -> Result<&'a [u8], CompactError> {
        self.field = self.at;
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| self.at.checked_add(len))
            .ok_or_else(|| self.refuse(Refusal::PastBody))?;
        let bytes = self
            .body
            .get(self.at..end)
            .ok_or_else(|| self.refuse(Refusal::PastBody))?;
        self.at = end;
        Ok(bytes)
    }

    /// The rest of the body.
    fn rest(&mut self) -> &'a [u8] {
        self.field = self.at;
        let rest = self.body.get(self.at..).unwrap_or_default();
        self.at = self.body.len();
        rest
    }
}

// ---------------------------------------------------------------------------------------
// Frame (REC-15)

/// The total size of the frame of a body of `body_len` bytes, padding included.
pub fn frame_len(body_len: usize) -> usize {
    (uv_len(body_len as u64) + CRC_LEN + body_len).next_multiple_of(RECORD_ALIGN)
}

/// Appends a frame around the body `write` appends (REC-15): `len`, `crc`, body, padding.
fn frame(out: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    let reserved = LEN_BYTES_MAX + CRC_LEN;
    out.resize(start + reserved, 0);
    write(out);
    let body_len = out.len() - start - reserved;
    let mut header = [0_u8; LEN_BYTES_MAX + CRC_LEN];
    let n = uv_len(body_len as u64).min(LEN_BYTES_MAX);
    let mut value = body_len as u64;
    for (i, slot) in header.iter_mut().take(n).enumerate() {
        let more = if i + 1 < n { 0x80 } else { 0 };
        *slot = (value & 0x7f) as u8 | more;
        value >>= 7;
    }
    out.copy_within(start + reserved.., start + n + CRC_LEN);
    out.truncate(start + n + CRC_LEN + body_len);
    let len_bytes = header.get(..n).unwrap_or_default();
    let body = out.get(start + n + CRC_LEN..).unwrap_or_default();
    let crc = crc32c::crc32c_append(crc32c::crc32c(len_bytes), body);
    if let Some(slot) = header.get_mut(n..n + CRC_LEN) {
        slot.copy_from_slice(&crc.to_le_bytes());
    }
    if let (Some(slot), Some(header)) = (
        out.get_mut(start..start + n + CRC_LEN),
        header.get(..n + CRC_LEN),
    ) {
        slot.copy_from_slice(header);
    }
    out.resize(start + frame_len(body_len), 0);
}

/// The frame length `head` (a record's first bytes) announces by its `len` alone, nothing
/// checked; `None` when `head` holds no `len` of at most 5 bytes and in range (REC-15).
pub fn announced_len(head: &[u8]) -> Option<usize> {
    let (n, len) = read_len(head)?;
    (n + CRC_LEN)
        .checked_add(len)?
        .checked_next_multiple_of(RECORD_ALIGN)
}

/// `len`'s bytes and value, when `head` starts with one in range (REC-15).
fn read_len(head: &[u8]) -> Option<(usize, usize)> {
    let head = head.get(..LEN_BYTES_MAX).unwrap_or(head);
    let n = head.iter().position(|b| b & 0x80 == 0)? + 1;
    let len = head
        .get(..n)?
        .iter()
        .enumerate()
        .fold(0_u64, |v, (i, b)| v | u64::from(b & 0x7f) << (7 * i));
    if len > TEXT_BYTES_MAX || len < BODY_MIN_LEN as u64 {
        return None;
    }
    Some((n, usize::try_from(len).ok()?))
}

/// The record at the start of `bytes` by its frame and first body bytes alone, nothing
/// checked (bytes this process's writer has just written): its frame length and how many
/// events it holds. `None` when the frame is not whole in `bytes` or its body does not
/// start as a record's.
pub fn walk_frame(bytes: &[u8]) -> Option<(usize, u64)> {
    let (n, len) = read_len(bytes)?;
    let framed = (n + CRC_LEN + len).next_multiple_of(RECORD_ALIGN);
    let body = bytes.get(n + CRC_LEN..n + CRC_LEN + len)?;
    if framed > bytes.len() {
        return None;
    }
    let count = match *body.first()? {
        KIND_REBUILT | KIND_VERBATIM => 1,
        KIND_CHUNKS => {
            // `chunk_kind`, `seq0`, then `count`.
            let rest = body.get(2..)?;
            let (_, at) = read_uv(rest).ok()??;
            let (count, _) = read_uv(rest.get(at..)?).ok()??;
            // REC-20's bounds, which the decoder checks too: the bytes walked may be a
            // compressed segment's, never decoded yet, and every member gets an offset.
            // Each member takes at least one byte, and a run of several is capped.
            if count > len as u64 || (count >= 2 && len > RUN_BODY_MAX) {
                return None;
            }
            count
        }
        _ => return None,
    };
    (count > 0).then_some((framed, count))
}

/// Checks the frame at the start of `bytes` (which may continue past it): returns the body
/// and the body's offset within the record, and the frame's length (the offset of the
/// next record).
///
/// # Errors
/// [`CompactError`]: the frame's four, then [`Refusal::NonMinimalLen`] and
/// [`Refusal::Padding`] once the checksum matched.
pub fn decode_frame(bytes: &[u8]) -> Result<(&[u8], usize, usize), CompactError> {
    match bytes.first() {
        None => return Err(CompactError::Truncated),
        Some(0) => return Err(CompactError::End),
        Some(_) => {}
    }
    // REC-15: at most 5 bytes, a value below 2^32 and at least 6; minimality is checked
    // under the checksum, which covers these bytes.
    let head = bytes.get(..LEN_BYTES_MAX).unwrap_or(bytes);
    let n = match head.iter().position(|b| b & 0x80 == 0) {
        Some(last) => last + 1,
        None if head.len() < LEN_BYTES_MAX => return Err(CompactError::Truncated),
        None => return Err(CompactError::Length),
    };
    let len_bytes = head.get(..n).unwrap_or_default();
    let len = len_bytes
        .iter()
        .enumerate()
        .fold(0_u64, |v, (i, b)| v | u64::from(b & 0x7f) << (7 * i));
    if len > TEXT_BYTES_MAX || len < BODY_MIN_LEN as u64 {
        return Err(CompactError::Length);
    }
    let body_len = usize::try_from(len).map_err(|_| CompactError::Length)?;
    let body_at = n + CRC_LEN;
    let framed_len = (body_at + body_len).next_multiple_of(RECORD_ALIGN);
    let framed = bytes.get(..framed_len).ok_or(CompactError::Truncated)?;
    let crc = framed
        .get(n..body_at)
        .and_then(|c| c.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or(CompactError::Truncated)?;
    let body = framed
        .get(body_at..body_at + body_len)
        .ok_or(CompactError::Truncated)?;
    if crc32c::crc32c_append(crc32c::crc32c(len_bytes), body) != crc {
        return Err(CompactError::Checksum);
    }
    if n > 1 && len_bytes.last() == Some(&0) {
        return Err(CompactError::Refused {
            offset: 0,
            rule: Refusal::NonMinimalLen,
        });
    }
    let padding = framed.get(body_at + body_len..).unwrap_or_default();
    if let Some(at) = padding.iter().position(|b| *b != 0) {
        return Err(CompactError::Refused {
            offset: body_at + body_len + at,
            rule: Refusal::Padding,
        });
    }
    Ok((body, body_at, framed_len))
}

// ---------------------------------------------------------------------------------------
// Records

/// A decoded compact record: one event, or a run of chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record<'a> {
    /// Kind 1 or 2.
    Event(CompactEvent<'a>),
    /// Kind 3.
    Chunks(ChunkRun<'a>),
}

impl Record<'_> {
    /// The seq of the record's first event (RCV-5 compares it with the next seq).
    pub fn first_seq(&self) -> u64 {
        match self {
            Self::Event(e) => e.seq,
            Self::Chunks(run) => run.seq0,
        }
    }

    /// The number of events the record holds.
    pub fn count(&self) -> u64 {
        match self {
            Self::Event(_) => 1,
            Self::Chunks(run) => run.count,
        }
    }

    /// Appends the record (frame, body, padding) to `out`: exactly the bytes [`decode`]
    /// accepted it from (REC-20).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Event(e) => encode_event(e, out),
            Self::Chunks(run) => {
                let mut builder = ChunkRunBuilder::default();
                for member in run.members() {
                    // A decoded run continues and fits (REC-20), so every push succeeds.
                    let pushed = builder.push(member);
                    debug_assert!(pushed.is_ok(), "a decoded run re-encodes");
                }
                builder.encode(out);
            }
        }
    }
}

/// Decodes the record at the start of `bytes` (which may continue past it). Returns the
/// record, borrowing `bytes`, and its frame length (the offset of the next record).
///
/// # Errors
/// [`CompactError`] naming the first rule the bytes break.
pub fn decode(bytes: &[u8]) -> Result<(Record<'_>, usize), CompactError> {
    let (body, body_at, framed_len) = decode_frame(bytes)?;
    let mut cursor = Cursor::new(body, body_at);
    let record = match cursor.u8()? {
        kind @ (KIND_REBUILT | KIND_VERBATIM) => Record::Event(decode_event(kind, &mut cursor)?),
        KIND_CHUNKS => Record::Chunks(decode_run(&mut cursor)?),
        _ => return Err(cursor.refuse(Refusal::Kind)),
    };
    Ok((record, framed_len))
}

/// [`decode`] of a record this process decoded whole at the same place before (a reader
/// reading the members of a run one by one): the frame and its checksum are checked again
/// (REC-15: bytes that changed since are refused), a run's fields and lengths are parsed
/// as [`decode`] parses them, but its strings are not checked again as the insides of JSON
/// strings (REC-12's rule) nor its members' text lengths: what the earlier decode checked
/// of these same bytes. A member read from it is checked whole on its own
/// ([`ChunkRun::member_checked`]): a matching checksum does not prove the bytes the same.
/// An event record is decoded whole.
///
/// # Errors
/// As [`decode`], for what it checks.
pub fn decode_again(bytes: &[u8]) -> Result<(Record<'_>, usize), CompactError> {
    let (body, body_at, framed_len) = decode_frame(bytes)?;
    let mut cursor = Cursor::new(body, body_at);
    let record = match cursor.u8()? {
        KIND_CHUNKS => Record::Chunks(decode_run_as(&mut cursor, false)?),
        _ => return decode(bytes),
    };
    Ok((record, framed_len))
}

/// The writer's entry (REC-17): appends the record of one event to `out`, a chunk run of
/// one member for a chunk, else an event record of the kind [`form`] chooses.
///
/// # Errors
/// The [`Refusal`] the record would be refused for: a value out of its range (a seq, time,
/// source or replace bound that is not a safe integer, a type of 0 or more than 256
/// bytes), or spans outside the text or off its character boundaries. Nothing is appended
/// then.
pub fn encode(event: &EventRef<'_>, out: &mut Vec<u8>) -> Result<(), Refusal> {
    match choose(event)? {
        Choice::Chunk(member) => {
            let mut builder = ChunkRunBuilder::default();
            builder.push(member).map_err(|(_, why)| why)?;
            builder.encode(out);
        }
        Choice::Event(e) => {
            let start = out.len();
            encode_event(&e, out);
            // A kind 2 body holds the text and the runs besides: `len` must stay below 2^32.
            if out.len() - start > frame_len(u32::MAX as usize) {
                out.truncate(start);
                return Err(Refusal::TextLength);
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Sources as runs

/// `sourceEventSeqs` of a compact event: a list of seqs held either as the writer's list or
/// as a record's runs of consecutive seqs, decoded on access (never copied).
#[derive(Clone, Copy)]
pub struct Sources<'a>(SourcesRepr<'a>);

#[derive(Clone, Copy)]
enum SourcesRepr<'a> {
    List(Seqs<'a>),
    /// Invariant: `bytes` are `runs` runs a decoder checked (REC-20), holding `count` seqs.
    Runs {
        bytes: &'a [u8],
        runs: u64,
        count: u64,
    },
}

impl<'a> Sources<'a> {
    /// The sources of a list.
    pub fn from_seqs(seqs: Seqs<'a>) -> Self {
        match seqs.stored_runs() {
            Some((bytes, runs, count)) => Self(SourcesRepr::Runs {
                bytes,
                runs,
                count: count as u64,
            }),
            None => Self(SourcesRepr::List(seqs)),
        }
    }

    /// The seqs as the engine's [`Seqs`], runs kept as runs.
    pub fn to_seqs(&self) -> Seqs<'a> {
        match self.0 {
            SourcesRepr::List(seqs) => seqs,
            SourcesRepr::Runs { bytes, runs, count } => {
                Seqs::from_runs(bytes, runs, usize::try_from(count).unwrap_or(usize::MAX))
            }
        }
    }

    /// The number of seqs.
    pub fn len(&self) -> u64 {
        match self.0 {
            SourcesRepr::List(seqs) => seqs.len() as u64,
            SourcesRepr::Runs { count, .. } => count,
        }
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The maximal runs of consecutive seqs, in order: `(first seq, length)`.
    pub fn runs(&self) -> RunsIter<'a> {
        RunsIter(match self.0 {
            SourcesRepr::List(seqs) => RunsRepr::List(seqs.iter().peekable()),
            SourcesRepr::Runs { bytes, runs, .. } => RunsRepr::Stored(stored_runs(bytes, runs)),
        })
    }

    /// The seqs, in order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + 'a {
        self.runs().flat_map(|(start, len)| start..start + len)
    }

    /// The seqs, copied.
    pub fn to_vec(&self) -> Vec<u64> {
        self.iter().collect()
    }

    /// The bytes of the JSON array of the seqs (`[1,2]`), without building it.
    pub fn json_len(&self) -> u64 {
        let (digits, count) = self.runs().fold((0_u64, 0_u64), |(digits, count), run| {
            (
                digits.saturating_add(decimal_digits_of_run(run)),
                count.saturating_add(run.1),
            )
        });
        digits
            .saturating_add(count.saturating_sub(1))
            .saturating_add(2)
    }
}

/// Two lists are equal when they hold the same seqs, however they are held.
impl PartialEq for Sources<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.runs().eq(other.runs())
    }
}

impl Eq for Sources<'_> {}

impl fmt::Debug for Sources<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.runs().map(|(start, len)| start..start + len))
            .finish()
    }
}

/// The runs of a [`Sources`].
pub struct RunsIter<'a>(RunsRepr<'a>);

enum RunsRepr<'a> {
    List(std::iter::Peekable<crate::event::SeqsIter<'a>>),
    Stored(StoredRuns<'a>),
}

impl Iterator for RunsIter<'_> {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        match &mut self.0 {
            RunsRepr::List(seqs) => {
                let start = seqs.next()?;
                let mut len = 1;
                while seqs
                    .next_if(|&s| Some(s) == start.checked_add(len))
                    .is_some()
                {
                    len += 1;
                }
                Some((start, len))
            }
            RunsRepr::Stored(runs) => runs.next(),
        }
    }
}

/// The runs a record stores (REC-16's `sourceEventSeqs`), decoded one by one: `(first seq,
/// length)`.
#[derive(Debug, Clone)]
pub struct StoredRuns<'a> {
    bytes: &'a [u8],
    left: u64,
    /// The end (last seq + 1) of the run before.
    end: Option<u64>,
}

/// The `runs` runs a decoder checked in `bytes` (REC-20).
pub(crate) fn stored_runs(bytes: &[u8], runs: u64) -> StoredRuns<'_> {
    StoredRuns {
        bytes,
        left: runs,
        end: None,
    }
}

impl Iterator for StoredRuns<'_> {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        if self.left == 0 {
            return None;
        }
        // Checked by the decoder (REC-20): these reads succeed.
        let (raw, n) = read_uv(self.bytes).ok().flatten()?;
        let (extra, m) = read_uv(self.bytes.get(n..)?).ok().flatten()?;
        self.bytes = self.bytes.get(n + m..)?;
        self.left -= 1;
        let start = match self.end {
            None => raw,
            Some(end) => end.checked_add_signed(unzigzag(raw))?,
        };
        let len = extra.checked_add(1)?;
        self.end = start.checked_add(len);
        Some((start, len))
    }
}

/// The sum of the decimal lengths of the seqs `start .. start + len`.
fn decimal_digits_of_run((start, len): (u64, u64)) -> u64 {
    let last = start.saturating_add(len.saturating_sub(1));
    let mut total = 0_u64;
    let mut low = 0_u64;
    for digits in 1..=20_u32 {
        let high = 10_u64.checked_pow(digits).map_or(u64::MAX, |p| p - 1);
        let (a, b) = (start.max(low), last.min(high));
        if a <= b {
            total = total.saturating_add((b - a + 1).saturating_mul(u64::from(digits)));
        }
        if high >= last {
            break;
        }
        low = high + 1;
    }
    total
}

// ---------------------------------------------------------------------------------------
// Event records (kinds 1 and 2)

/// Where `surfaceOp` goes when both it and `sourceEventSeqs` are present (REC-18).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// `sourceEventSeqs` then `surfaceOp`: a normal append (dsh-formats §2.3).
    SourcesFirst,
    /// `surfaceOp` then `sourceEventSeqs`: a repair closer's (`flags` bit 5).
    SurfaceOpFirst,
}

/// How a compact event holds its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventText<'a> {
    /// Kind 1: `data` only; the text is REC-18's.
    Rebuilt {
        /// The `data` text.
        data: &'a str,
        /// Where `surfaceOp` goes.
        order: Order,
    },
    /// Kind 2: the whole text and the span of `data` in it.
    Verbatim {
        /// The text.
        text: &'a str,
        /// `data` is `text[data.0..data.1]`.
        data: (usize, usize),
    },
}

/// One event of a kind 1 or 2 record: its envelope fields and its text. Only [`decode`]
/// and [`choose`] make one, so every value is one the codec writes and reads back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactEvent<'a> {
    seq: u64,
    time: i64,
    event_type: &'a str,
    surface_op: Option<SurfaceOp>,
    sources: Option<Sources<'a>>,
    ignorable: bool,
    /// Within `data`.
    message: Option<(usize, usize)>,
    text: EventText<'a>,
}

impl<'a> CompactEvent<'a> {
    /// The seq.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The time.
    pub fn time(&self) -> i64 {
        self.time
    }

    /// The type.
    pub fn event_type(&self) -> &'a str {
        self.event_type
    }

    /// The surface operation.
    pub fn surface_op(&self) -> Option<SurfaceOp> {
        self.surface_op
    }

    /// The sources, when present.
    pub fn sources(&self) -> Option<Sources<'a>> {
        self.sources
    }

    /// The `ignorable: true` marker.
    pub fn ignorable(&self) -> bool {
        self.ignorable
    }

    /// How the text is held (the body's kind).
    pub fn text_form(&self) -> EventText<'a> {
        self.text
    }

    /// The `data` text, borrowed.
    pub fn data(&self) -> &'a str {
        match self.text {
            EventText::Rebuilt { data, .. } => data,
            EventText::Verbatim { text, data } => text.get(data.0..data.1).unwrap_or_default(),
        }
    }

    /// The message text, borrowed from `data`.
    pub fn message(&self) -> Option<&'a str> {
        let (start, end) = self.message?;
        self.data().get(start..end)
    }

    /// The span of the message within `data`.
    pub fn message_in_data(&self) -> Option<std::ops::Range<usize>> {
        self.message.map(|(start, end)| start..end)
    }

    /// The span of `data` within the text.
    pub fn data_span(&self) -> std::ops::Range<usize> {
        match self.text {
            EventText::Rebuilt { data, .. } => {
                let start = prefix_len(self);
                start..start + data.len()
            }
            EventText::Verbatim { data, .. } => data.0..data.1,
        }
    }

    /// The text's length, without building it.
    pub fn text_len(&self) -> u64 {
        match self.text {
            EventText::Rebuilt { data, .. } => rebuilt_len(self, data.len()),
            EventText::Verbatim { text, .. } => text.len() as u64,
        }
    }

    /// Appends the event's exact JSON text to `out`.
    pub fn write_text(&self, out: &mut String) {
        match self.text {
            EventText::Rebuilt { data, order } => {
                write_prefix(self, out);
                out.push_str(data);
                write_suffix(self, order, out);
            }
            EventText::Verbatim { text, .. } => out.push_str(text),
        }
    }

    /// The event's exact JSON text: borrowed for kind 2, built for kind 1.
    pub fn text(&self) -> Cow<'a, str> {
        match self.text {
            EventText::Verbatim { text, .. } => Cow::Borrowed(text),
            EventText::Rebuilt { .. } => {
                let mut out = String::new();
                self.write_text(&mut out);
                Cow::Owned(out)
            }
        }
    }

    /// An owned copy as the engine's [`Event`].
    pub fn to_event(&self) -> Event {
        let data = self.data_span();
        let message = self
            .message
            .map(|(start, end)| data.start + start..data.start + end);
        Event::new(
            self.text().into_owned(),
            data,
            message,
            EventFields {
                event_type: crate::event::type_name(self.event_type),
                seq: self.seq,
                time: self.time,
                surface_op: self.surface_op,
                sources: self.sources.map(|s| s.to_vec()),
                ignorable: self.ignorable,
            },
        )
    }

    fn flags(&self) -> u8 {
        let mut flags = match self.surface_op {
            None => 0,
            Some(SurfaceOp::Append) => FLAG_SURFACE_OP,
            Some(SurfaceOp::Replace { .. }) => FLAG_SURFACE_OP | FLAG_REPLACE,
        };
        if self.sources.is_some() {
            flags |= FLAG_SOURCES;
        }
        if self.ignorable {
            flags |= FLAG_IGNORABLE;
        }
        if self.message.is_some() {
            flags |= FLAG_MESSAGE;
        }
        if let EventText::Rebuilt {
            order: Order::SurfaceOpFirst,
            ..
        } = self.text
        {
            flags |= FLAG_SURFACE_OP_FIRST;
        }
        flags
    }
}

/// What REC-17 stores an event as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice<'a> {
    /// A chunk (REC-11): a member of a kind 3 run.
    Chunk(ChunkMember<'a>),
    /// Any other event: a kind 1 or 2 record.
    Event(CompactEvent<'a>),
}

/// REC-17, the writer's side: what `event` is stored as. The kind of an event record is
/// [`form`]'s.
///
/// # Errors
/// The [`Refusal`] a record of the event would be refused for (a value out of range), or
/// [`Refusal::Unencodable`] for spans outside the text or off its character boundaries.
pub fn choose<'a>(event: &EventRef<'a>) -> Result<Choice<'a>, Refusal> {
    if let Some(chunk) = event.chunk() {
        // A v1 chunk record (REC-11) is a chunk here too; its strings fit (u16 lengths).
        let member = ChunkMember {
            seq: event.seq,
            time: event.time,
            chunk,
        };
        check_member(&member)?;
        return Ok(Choice::Chunk(member));
    }
    if let Some((data, order)) = event.rebuilt() {
        return choose_rebuilt(event, data, order);
    }
    let mut e = checked(event)?;
    match form(&e, e.text) {
        Form::Chunk(chunk) => {
            let member = ChunkMember {
                seq: e.seq,
                time: e.time,
                chunk,
            };
            // `form` recognised the chunk in the text, its strings checked there.
            check_member_fields(&member)?;
            Ok(Choice::Chunk(member))
        }
        Form::Rebuilt(order) => {
            e.text = EventText::Rebuilt {
                data: e.data(),
                order,
            };
            Ok(Choice::Event(e))
        }
        Form::Verbatim => Ok(Choice::Event(e)),
    }
}

/// Whether [`choose`] accepts an event whose text is stored whole (an event appended, not
/// one read from a log), without deciding its record's form (no template comparison): a
/// writer checks every event of an append before it writes any (a refused append leaves no
/// trace).
///
/// # Errors
/// As [`choose`].
pub fn check_encodable(event: &EventRef<'_>) -> Result<(), Refusal> {
    if event.stored_text().is_some() {
        checked(event).map(drop)
    } else {
        choose(event).map(drop)
    }
}

/// The compact event of `event`, whose text is stored whole, held verbatim: every value
/// in range and every span on the text's character boundaries (REC-20).
fn checked<'a>(event: &EventRef<'a>) -> Result<CompactEvent<'a>, Refusal> {
    let text = event.stored_text().ok_or(Refusal::Unencodable)?;
    let data = event.data_span();
    if data.start > data.end
        || text.get(data.clone()).is_none()
        || text.len() as u64 > TEXT_BYTES_MAX
    {
        return Err(Refusal::Unencodable);
    }
    let message = match event.message_span() {
        None => None,
        // Within `data` and on character boundaries, as REC-20 holds a decoded span to.
        Some(m)
            if m.start >= data.start
                && m.start <= m.end
                && m.end <= data.end
                && text.get(m.clone()).is_some() =>
        {
            Some((m.start - data.start, m.end - data.start))
        }
        Some(_) => return Err(Refusal::Unencodable),
    };
    let e = CompactEvent {
        seq: event.seq,
        time: event.time,
        event_type: event.event_type,
        surface_op: event.surface_op,
        sources: event.sources.map(Sources::from_seqs),
        ignorable: event.ignorable,
        message,
        text: EventText::Verbatim {
            text,
            data: (data.start, data.end),
        },
    };
    check_fields(&e)?;
    if e.sources.is_some_and(|s| s.len() > text.len() as u64) {
        return Err(Refusal::SourceCount);
    }
    Ok(e)
}

/// [`choose`] for a view of a kind 1 record (read from a compact log, being copied: a
/// fork's own segment, a compaction): the same record again, checked as a decoded one is.
fn choose_rebuilt<'a>(
    event: &EventRef<'a>,
    data: &'a str,
    order: Order,
) -> Result<Choice<'a>, Refusal> {
    let span = event.data_span();
    let message = match event.message_span() {
        None => None,
        Some(m)
            if m.start >= span.start
                && m.start <= m.end
                && m.end <= span.end
                && data.get(m.start - span.start..m.end - span.start).is_some() =>
        {
            Some((m.start - span.start, m.end - span.start))
        }
        Some(_) => return Err(Refusal::Unencodable),
    };
    let e = CompactEvent {
        message,
        ..rebuilt_view(event, data, order)
    };
    check_fields(&e)?;
    match form(&e, e.text) {
        Form::Rebuilt(o) if o == order => Ok(Choice::Event(e)),
        // Only a decoded kind 1 record makes such a view, and REC-20 refused any other form.
        Form::Chunk(_) | Form::Rebuilt(_) | Form::Verbatim => Err(Refusal::Unencodable),
    }
}

/// The ranges REC-20 holds an event's fields to.
fn check_fields(e: &CompactEvent<'_>) -> Result<(), Refusal> {
    if e.seq > SAFE {
        return Err(Refusal::SeqRange);
    }
    if e.time.unsigned_abs() > SAFE {
        return Err(Refusal::TimeRange);
    }
    if e.event_type.is_empty() || e.event_type.len() > EVENT_TYPE_BYTES_MAX {
        return Err(Refusal::TypeLength);
    }
    if let Some(SurfaceOp::Replace { start, end }) = e.surface_op
        && (start > SAFE || end > SAFE)
    {
        return Err(Refusal::ReplaceRange);
    }
    if e.sources.is_some_and(|s| s.iter().any(|seq| seq > SAFE)) {
        return Err(Refusal::SourceRange);
    }
    Ok(())
}

/// The body an event's record takes (REC-17).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form<'a> {
    /// A chunk (REC-11) that a kind 3 run can hold: never an event record.
    Chunk(ChunkRef<'a>),
    /// Kind 1, with this order of `surfaceOp` and `sourceEventSeqs`.
    Rebuilt(Order),
    /// Kind 2.
    Verbatim,
}

/// REC-17's one decision for an event, given its fields (`text` aside) and its text held
/// either way: a chunk when REC-11 calls it one and a run can hold it, else kind 1 when the
/// text is exactly REC-18's text of its fields and `data`, else kind 2. The writer asks it
/// of the text it was given ([`choose`]); the decoder asks it of what a record holds and
/// refuses a record of another kind than the answer (REC-20), so the two cannot disagree.
///
/// Cost: a template comparison of the envelope around `data` (no JSON parse); for a text
/// held rebuilt, the chunk template over `data` only when the fields make it a candidate.
pub fn form<'a>(e: &CompactEvent<'_>, text: EventText<'a>) -> Form<'a> {
    let candidate = e.event_type == CHUNK_TYPE
        && e.surface_op.is_none()
        && e.sources.is_none()
        && !e.ignorable
        && e.message.is_none();
    if candidate {
        let chunk = match text {
            EventText::Rebuilt { data, .. } => ChunkRef::from_data(data),
            EventText::Verbatim { text, data } => ChunkRef::from_text(e.seq, e.time, text)
                .filter(|c| c.data_span(e.seq, e.time) == (data.0..data.1)),
        };
        if let Some(chunk) = chunk.filter(chunk_fits) {
            return Form::Chunk(chunk);
        }
    }
    let data_len = match text {
        EventText::Rebuilt { data, .. } => data.len(),
        EventText::Verbatim { data, .. } => data.1.saturating_sub(data.0),
    };
    if data_len == 0 || !is_plain(e.event_type) {
        return Form::Verbatim;
    }
    match text {
        EventText::Rebuilt { order, .. } => Form::Rebuilt(order),
        EventText::Verbatim { text, data } => {
            let (Some(before), Some(after)) = (text.get(..data.0), text.get(data.1..)) else {
                return Form::Verbatim;
            };
            let mut prefix = Matcher::new(before);
            write_prefix(e, &mut prefix);
            if !prefix.matched() {
                return Form::Verbatim;
            }
            let both = e.surface_op.is_some() && e.sources.is_some();
            for order in [Order::SourcesFirst, Order::SurfaceOpFirst] {
                if order == Order::SurfaceOpFirst && !both {
                    break;
                }
                let mut suffix = Matcher::new(after);
                write_suffix(e, order, &mut suffix);
                if suffix.matched() {
                    return Form::Rebuilt(order);
                }
            }
            Form::Verbatim
        }
    }
}

/// A type REC-18 writes between quotes as it is: no `"`, `\` or byte below `0x20`.
fn is_plain(event_type: &str) -> bool {
    !event_type
        .bytes()
        .any(|b| b == b'"' || b == b'\\' || b < 0x20)
}

/// Where REC-18's text goes: a string being built, or a comparison with a given text.
trait Sink {
    fn put(&mut self, s: &str);
    /// Whether what was put already differs (writing more is wasted).
    fn failed(&self) -> bool {
        false
    }
}

impl Sink for String {
    fn put(&mut self, s: &str) {
        self.push_str(s);
    }
}

/// Compares what is put with `rest`, piece by piece, without building anything.
struct Matcher<'t> {
    rest: &'t [u8],
    ok: bool,
}

impl<'t> Matcher<'t> {
    fn new(text: &'t str) -> Self {
        Self {
            rest: text.as_bytes(),
            ok: true,
        }
    }

    /// Whether everything put matched and the text is used up.
    fn matched(&self) -> bool {
        self.ok && self.rest.is_empty()
    }
}

impl Sink for Matcher<'_> {
    fn put(&mut self, s: &str) {
        match self.rest.strip_prefix(s.as_bytes()) {
            Some(rest) if self.ok => self.rest = rest,
            _ => self.ok = false,
        }
    }

    fn failed(&self) -> bool {
        !self.ok
    }
}

const TYPE_OPEN: &str = r#"{"type":""#;
const SEQ: &str = r#"","seq":"#;
const TIME: &str = r#","time":"#;
const DATA: &str = r#","data":"#;
const SOURCES_OPEN: &str = r#","sourceEventSeqs":["#;
const APPEND: &str = r#","surfaceOp":"append""#;
const REPLACE_START: &str = r#","surfaceOp":{"op":"replace","start":"#;
const REPLACE_END: &str = r#","end":"#;
const IGNORABLE: &str = r#","ignorable":true"#;

fn put_u64(sink: &mut impl Sink, n: u64) {
    let mut buf = [0_u8; 20];
    let mut at = buf.len();
    let mut n = n;
    loop {
        at -= 1;
        if let Some(slot) = buf.get_mut(at) {
            *slot = b'0' + (n % 10) as u8;
        }
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // ASCII digits: always UTF-8.
    sink.put(std::str::from_utf8(buf.get(at..).unwrap_or_default()).unwrap_or_default());
}

fn put_i64(sink: &mut impl Sink, n: i64) {
    if n < 0 {
        sink.put("-");
    }
    put_u64(sink, n.unsigned_abs());
}

/// The decimal length of `n`.
fn decimal_len(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

/// REC-18, the envelope before `data`: `{"type":"` type `","seq":` seq `,"time":` time
/// `,"data":`.
fn write_prefix(e: &CompactEvent<'_>, sink: &mut impl Sink) {
    sink.put(TYPE_OPEN);
    sink.put(e.event_type);
    sink.put(SEQ);
    put_u64(sink, e.seq);
    sink.put(TIME);
    put_i64(sink, e.time);
    sink.put(DATA);
}

fn prefix_len(e: &CompactEvent<'_>) -> usize {
    TYPE_OPEN.len()
        + e.event_type.len()
        + SEQ.len()
        + decimal_len(e.seq)
        + TIME.len()
        + decimal_len(e.time.unsigned_abs())
        + usize::from(e.time < 0)
        + DATA.len()
}

/// REC-18, the envelope after `data`: sources and `surfaceOp` in `order`, `ignorable`, `}`.
fn write_suffix(e: &CompactEvent<'_>, order: Order, sink: &mut impl Sink) {
    match order {
        Order::SourcesFirst => {
            write_sources(e, sink);
            write_surface_op(e, sink);
        }
        Order::SurfaceOpFirst => {
            write_surface_op(e, sink);
            write_sources(e, sink);
        }
    }
    if e.ignorable {
        sink.put(IGNORABLE);
    }
    sink.put("}");
}

/// `,"sourceEventSeqs":[…]` when present; stops early once a comparison failed, so comparing
/// a long list costs at most the text it is compared with.
fn write_sources(e: &CompactEvent<'_>, sink: &mut impl Sink) {
    let Some(sources) = e.sources else {
        return;
    };
    sink.put(SOURCES_OPEN);
    for (i, seq) in sources.iter().enumerate() {
        if sink.failed() {
            return;
        }
        if i > 0 {
            sink.put(",");
        }
        put_u64(sink, seq);
    }
    sink.put("]");
}

/// `,"surfaceOp":…` when present.
fn write_surface_op(e: &CompactEvent<'_>, sink: &mut impl Sink) {
    match e.surface_op {
        None => {}
        Some(SurfaceOp::Append) => sink.put(APPEND),
        Some(SurfaceOp::Replace { start, end }) => {
            sink.put(REPLACE_START);
            put_u64(sink, start);
            sink.put(REPLACE_END);
            put_u64(sink, end);
            sink.put("}");
        }
    }
}

/// REC-18's text of the event `view` shows, with `data`, appended to `out`: the text of a
/// view the engine made of a kind 1 record ([`EventRef::from_compact`]).
pub(crate) fn write_rebuilt_text(view: &EventRef<'_>, data: &str, order: Order, out: &mut String) {
    let e = rebuilt_view(view, data, order);
    write_prefix(&e, out);
    out.push_str(data);
    write_suffix(&e, order, out);
}

/// The length of [`write_rebuilt_text`]'s text, without building it.
pub(crate) fn rebuilt_text_len(view: &EventRef<'_>, data: &str, order: Order) -> u64 {
    rebuilt_len(&rebuilt_view(view, data, order), data.len())
}

/// The compact event behind a view of a kind 1 record: the fields REC-18 builds from.
fn rebuilt_view<'a>(view: &EventRef<'a>, data: &'a str, order: Order) -> CompactEvent<'a> {
    CompactEvent {
        seq: view.seq,
        time: view.time,
        event_type: view.event_type,
        surface_op: view.surface_op,
        sources: view.sources.map(Sources::from_seqs),
        ignorable: view.ignorable,
        message: None,
        text: EventText::Rebuilt { data, order },
    }
}

/// The length of REC-18's text of `e` with `data_len` bytes of `data`, without building it
/// (saturating: a length past [`TEXT_BYTES_MAX`] is refused anyway).
fn rebuilt_len(e: &CompactEvent<'_>, data_len: usize) -> u64 {
    // Every sum saturates: the sources' length alone may stand for more than a `u64`
    // counts (runs of 2^53 seqs, restarting at 0), and a wrapped length would pass the
    // check against `TEXT_BYTES_MAX`.
    let mut len = (prefix_len(e) + data_len + 1) as u64;
    if let Some(sources) = e.sources {
        len = len
            .saturating_add(SOURCES_OPEN.len() as u64 - 1)
            .saturating_add(sources.json_len());
    }
    len = len.saturating_add(match e.surface_op {
        None => 0,
        Some(SurfaceOp::Append) => APPEND.len() as u64,
        Some(SurfaceOp::Replace { start, end }) => {
            (REPLACE_START.len() + REPLACE_END.len() + 1 + decimal_len(start) + decimal_len(end))
                as u64
        }
    });
    if e.ignorable {
        len = len.saturating_add(IGNORABLE.len() as u64);
    }
    len
}

/// Appends the record of an event (frame, body, padding) to `out`.
pub fn encode_event(e: &CompactEvent<'_>, out: &mut Vec<u8>) {
    frame(out, |out| {
        let kind = match e.text {
            EventText::Rebuilt { .. } => KIND_REBUILT,
            EventText::Verbatim { .. } => KIND_VERBATIM,
        };
        out.push(kind);
        out.push(e.flags());
        put_uv(out, e.seq);
        put_zz(out, e.time);
        if let Some(code) = type_code(e.event_type) {
            out.push(code);
        } else {
            out.push(0);
            put_uv(out, e.event_type.len() as u64);
            out.extend_from_slice(e.event_type.as_bytes());
        }
        if let Some(SurfaceOp::Replace { start, end }) = e.surface_op {
            put_uv(out, start);
            put_uv(out, end);
        }
        if let Some(sources) = e.sources {
            put_uv(out, sources.runs().count() as u64);
            let mut end: Option<u64> = None;
            for (start, len) in sources.runs() {
                match end {
                    None => put_uv(out, start),
                    // Seqs are below 2^53 (REC-20): the gap fits an i64.
                    Some(end) => put_zz(out, start.cast_signed().wrapping_sub(end.cast_signed())),
                }
                put_uv(out, len - 1);
                end = Some(start + len);
            }
        }
        if let EventText::Verbatim { data, .. } = e.text {
            put_uv(out, data.0 as u64);
            put_uv(out, (data.1 - data.0) as u64);
        }
        if let Some((start, end)) = e.message {
            put_uv(out, start as u64);
            put_uv(out, (end - start) as u64);
        }
        match e.text {
            EventText::Rebuilt { data, .. } => out.extend_from_slice(data.as_bytes()),
            EventText::Verbatim { text, .. } => out.extend_from_slice(text.as_bytes()),
        }
    });
}

/// A kind 1 or 2 body after its `kind` byte (REC-16, REC-20).
fn decode_event<'a>(kind: u8, c: &mut Cursor<'a>) -> Result<CompactEvent<'a>, CompactError> {
    let flags = decode_flags(kind, c)?;
    let flags_at = c.field;
    let seq = c.uv_max(SAFE, Refusal::SeqRange)?;
    let time = c.zz()?;
    if time.unsigned_abs() > SAFE {
        return Err(c.refuse(Refusal::TimeRange));
    }
    let event_type = decode_type(kind, c)?;
    let surface_op = match (flags & FLAG_SURFACE_OP != 0, flags & FLAG_REPLACE != 0) {
        (false, _) => None,
        (true, false) => Some(SurfaceOp::Append),
        (true, true) => Some(SurfaceOp::Replace {
            start: c.uv_max(SAFE, Refusal::ReplaceRange)?,
            end: c.uv_max(SAFE, Refusal::ReplaceRange)?,
        }),
    };
    let sources = if flags & FLAG_SOURCES == 0 {
        None
    } else {
        Some(decode_sources(c)?)
    };
    let data_span = if kind == KIND_VERBATIM {
        Some((c.uv()?, c.uv()?))
    } else {
        None
    };
    let data_span_at = c.field;
    let message = if flags & FLAG_MESSAGE == 0 {
        None
    } else {
        Some((c.uv()?, c.uv()?))
    };
    let message_at = c.field;
    let payload = c.rest();
    let payload_at = c.field;
    let at = |offset: usize, rule| CompactError::Refused {
        offset: c.base + offset,
        rule,
    };
    let payload = std::str::from_utf8(payload).map_err(|_| at(payload_at, Refusal::TextUtf8))?;
    let order = if flags & FLAG_SURFACE_OP_FIRST == 0 {
        Order::SourcesFirst
    } else {
        Order::SurfaceOpFirst
    };
    let text = match data_span {
        None => {
            if payload.is_empty() {
                return Err(at(payload_at, Refusal::EmptyData));
            }
            EventText::Rebuilt {
                data: payload,
                order,
            }
        }
        Some((start, len)) => {
            let span = span_in(payload, start, len).ok_or(at(data_span_at, Refusal::DataSpan))?;
            EventText::Verbatim {
                text: payload,
                data: span,
            }
        }
    };
    let mut e = CompactEvent {
        seq,
        time,
        event_type,
        surface_op,
        sources,
        ignorable: flags & FLAG_IGNORABLE != 0,
        message: None,
        text,
    };
    if let Some((start, len)) = message {
        let data = e.data();
        e.message = Some(span_in(data, start, len).ok_or(at(message_at, Refusal::MessageSpan))?);
    }
    match text {
        EventText::Rebuilt { data, .. } => {
            if rebuilt_len(&e, data.len()) > TEXT_BYTES_MAX {
                return Err(at(payload_at, Refusal::TextLength));
            }
        }
        EventText::Verbatim { text, .. } => {
            if e.sources.is_some_and(|s| s.len() > text.len() as u64) {
                return Err(at(flags_at, Refusal::SourceCount));
            }
        }
    }
    // REC-17 through the writer's own decision: a record of another kind than `form`
    // chooses is one the writer never writes.
    let expected = match text {
        EventText::Rebuilt { order, .. } => Form::Rebuilt(order),
        EventText::Verbatim { .. } => Form::Verbatim,
    };
    match form(&e, text) {
        Form::Chunk(_) => Err(at(payload_at, Refusal::ShouldBeChunkRun)),
        found if found == expected => Ok(e),
        _ => Err(at(payload_at, Refusal::ShouldBeRebuilt)),
    }
}

/// `flags` (REC-16): no reserved bit, bit 1 only with bit 0, bit 5 only in kind 1 with bits
/// 0 and 2.
fn decode_flags(kind: u8, c: &mut Cursor<'_>) -> Result<u8, CompactError> {
    let flags = c.u8()?;
    if flags & FLAGS_RESERVED != 0 {
        return Err(c.refuse(Refusal::ReservedFlags));
    }
    if flags & FLAG_REPLACE != 0 && flags & FLAG_SURFACE_OP == 0 {
        return Err(c.refuse(Refusal::ReplaceWithoutOp));
    }
    let both = FLAG_SURFACE_OP | FLAG_SOURCES;
    if flags & FLAG_SURFACE_OP_FIRST != 0 && (kind != KIND_REBUILT || flags & both != both) {
        return Err(c.refuse(Refusal::OrderFlag));
    }
    Ok(flags)
}

/// `type_code`, then an inline type (REC-19, REC-20).
fn decode_type<'a>(kind: u8, c: &mut Cursor<'a>) -> Result<&'a str, CompactError> {
    let code = c.u8()?;
    if code != 0 {
        return TYPE_TABLE
            .get(usize::from(code) - 1)
            .copied()
            .ok_or_else(|| c.refuse(Refusal::TypeCode));
    }
    let len = c.uv()?;
    if len == 0 || len > EVENT_TYPE_BYTES_MAX as u64 {
        return Err(c.refuse(Refusal::TypeLength));
    }
    let bytes = c.take(len)?;
    let name = std::str::from_utf8(bytes).map_err(|_| c.refuse(Refusal::TypeUtf8))?;
    if type_code(name).is_some() {
        return Err(c.refuse(Refusal::TypeInTable));
    }
    if kind == KIND_REBUILT && !is_plain(name) {
        return Err(c.refuse(Refusal::TypeEscape));
    }
    Ok(name)
}

/// A span of `len` bytes at `start` in `text`, on character boundaries.
fn span_in(text: &str, start: u64, len: u64) -> Option<(usize, usize)> {
    let start = usize::try_from(start).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    (end <= text.len() && text.is_char_boundary(start) && text.is_char_boundary(end))
        .then_some((start, end))
}

/// `run_count`, then the runs (REC-16): every seq a safe integer, no zero gap.
fn decode_sources<'a>(c: &mut Cursor<'a>) -> Result<Sources<'a>, CompactError> {
    let runs = c.uv()?;
    let start_at = c.at;
    let mut end: Option<u64> = None;
    let mut count = 0_u64;
    // Each run takes at least two bytes: a count past the body fails within it.
    for _ in 0..runs {
        let start = match end {
            None => c.uv_max(SAFE, Refusal::SourceRange)?,
            Some(end) => {
                let gap = c.zz()?;
                if gap == 0 {
                    return Err(c.refuse(Refusal::SourceGap));
                }
                end.checked_add_signed(gap)
                    .filter(|s| *s <= SAFE)
                    .ok_or_else(|| c.refuse(Refusal::SourceRange))?
            }
        };
        let extra = c.uv_max(SAFE - start, Refusal::SourceRange)?;
        end = Some(start + extra + 1);
        count = count.saturating_add(extra + 1);
    }
    Ok(Sources(SourcesRepr::Runs {
        bytes: c.body.get(start_at..c.at).unwrap_or_default(),
        runs,
        count,
    }))
}

// ---------------------------------------------------------------------------------------
// Chunk runs (kind 3)

/// One chunk of a run: its seq, time and fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkMember<'a> {
    /// The seq.
    pub seq: u64,
    /// The time.
    pub time: i64,
    /// The fields and payload.
    pub chunk: ChunkRef<'a>,
}

impl<'a> ChunkMember<'a> {
    /// The event, as the engine views a chunk (REC-13 rebuilds its text).
    pub fn event(&self) -> EventRef<'a> {
        EventRef::from_chunk(self.seq, self.time, self.chunk)
    }
}

/// Whether a run can hold `chunk`: its `id` and `name` are at most 65,535 bytes.
fn chunk_fits(chunk: &ChunkRef<'_>) -> bool {
    chunk.id.len() <= STRING_BYTES_MAX && chunk.name.is_none_or(|n| n.len() <= STRING_BYTES_MAX)
}

/// The ranges and strings REC-20 holds a member to.
fn check_member(m: &ChunkMember<'_>) -> Result<(), Refusal> {
    let c = &m.chunk;
    let strings_ok = is_string_inside(c.id.as_bytes())
        && c.name.is_none_or(|n| is_string_inside(n.as_bytes()))
        && is_string_inside(c.payload.as_bytes());
    if !strings_ok {
        return Err(Refusal::ChunkString);
    }
    check_member_fields(m)
}

/// [`check_member`] but for its strings' contents: for a chunk recognised in an event's
/// text ([`ChunkRef::from_text`], [`ChunkRef::from_data`]), which checked them (REC-12).
fn check_member_fields(m: &ChunkMember<'_>) -> Result<(), Refusal> {
    if m.seq > SAFE {
        return Err(Refusal::SeqRange);
    }
    if m.time.unsigned_abs() > SAFE {
        return Err(Refusal::TimeRange);
    }
    if !chunk_fits(&m.chunk) {
        return Err(Refusal::StringLength);
    }
    let c = &m.chunk;
    if c.kind != ChunkKind::ToolCall && (!c.id.is_empty() || c.name.is_some()) {
        return Err(Refusal::ChunkString);
    }
    if c.text_len(m.seq, m.time) as u64 > TEXT_BYTES_MAX {
        return Err(Refusal::TextLength);
    }
    Ok(())
}

/// REC-17's continuation rule (DSH ROW-3): `next` is the chunk after `prev` in one run:
/// the next seq, the same kind, turn, step, index, id and name.
pub fn continues(prev: &ChunkMember<'_>, next: &ChunkMember<'_>) -> bool {
    let (a, b) = (&prev.chunk, &next.chunk);
    prev.seq.checked_add(1) == Some(next.seq)
        && a.kind == b.kind
        && a.turn == b.turn
        && a.step == b.step
        && a.index == b.index
        && a.id == b.id
        && a.name == b.name
}

/// A chunk run being gathered by a writer: [`ChunkRunBuilder::push`] takes a chunk only when
/// it continues the run and the body stays within the 4 KiB cap (REC-16, REC-17).
#[derive(Debug, Clone, Default)]
pub struct ChunkRunBuilder<'a> {
    members: Vec<ChunkMember<'a>>,
    body_len: usize,
}

impl<'a> ChunkRunBuilder<'a> {
    /// The members so far.
    pub fn members(&self) -> &[ChunkMember<'a>] {
        &self.members
    }

    /// The body length of the run so far (0 when empty).
    pub fn body_len(&self) -> usize {
        self.body_len
    }

    /// Adds `member` to the run.
    ///
    /// # Errors
    /// `member` back with the reason: [`Refusal::Discontinuous`] when it does not continue
    /// the last member, [`Refusal::RunTooLarge`] when the body would pass 4,096 bytes, or
    /// the range or string rule it breaks. The run is unchanged then.
    pub fn push(&mut self, member: ChunkMember<'a>) -> Result<(), (ChunkMember<'a>, Refusal)> {
        if let Err(why) = check_member(&member) {
            return Err((member, why));
        }
        let body_len = match self.members.last() {
            None => {
                let c = &member.chunk;
                let mut len = 2 + uv_len(member.seq) + 1 + uv_len(zigzag(member.time));
                len += uv_len(c.turn.into()) + uv_len(c.step.into()) + uv_len(c.index.into());
                if c.kind == ChunkKind::ToolCall {
                    len += uv_len(c.id.len() as u64) + c.id.len();
                }
                if let Some(name) = c.name {
                    len += uv_len(name.len() as u64) + name.len();
                }
                len + uv_len(c.payload.len() as u64) + c.payload.len()
            }
            Some(last) => {
                if !continues(last, &member) {
                    return Err((member, Refusal::Discontinuous));
                }
                let count = self.members.len() as u64;
                // The running time may leave the range only through a dt the member's
                // own check has bounded: both times are safe integers.
                let dt = member.time - last.time;
                let len = self.body_len
                    + uv_len(zigzag(dt))
                    + uv_len(member.chunk.payload.len() as u64)
                    + member.chunk.payload.len()
                    + (uv_len(count + 1) - uv_len(count));
                if len > RUN_BODY_MAX {
                    return Err((member, Refusal::RunTooLarge));
                }
                len
            }
        };
        self.members.push(member);
        self.body_len = body_len;
        Ok(())
    }

    /// Appends the run's record to `out` (nothing when the run is empty).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let Some(first) = self.members.first() else {
            return;
        };
        let c = &first.chunk;
        let start = out.len();
        frame(out, |out| {
            out.push(KIND_CHUNKS);
            out.push(super::chunk::kind_byte(c)); // the kinds of REC-12
            put_uv(out, first.seq);
            put_uv(out, self.members.len() as u64);
            put_zz(out, first.time);
            for n in [c.turn, c.step, c.index] {
                put_uv(out, n.into());
            }
            if c.kind == ChunkKind::ToolCall {
                put_uv(out, c.id.len() as u64);
                out.extend_from_slice(c.id.as_bytes());
            }
            if let Some(name) = c.name {
                put_uv(out, name.len() as u64);
                out.extend_from_slice(name.as_bytes());
            }
            for pair in self.members.windows(2) {
                if let [a, b] = pair {
                    put_zz(out, b.time - a.time);
                }
            }
            for m in &self.members {
                put_uv(out, m.chunk.payload.len() as u64);
            }
            for m in &self.members {
                out.extend_from_slice(m.chunk.payload.as_bytes());
            }
        });
        debug_assert_eq!(out.len() - start, frame_len(self.body_len));
    }
}

/// A chunk run a writer gathers in bytes it has not written yet (REC-17), owned: the
/// events of an append are gone once it returns, and the next append's chunk may still
/// join the run. [`OpenRun::join`] checks and adds a member in O(its payload), and
/// [`OpenRun::encode`] writes exactly the bytes [`ChunkRunBuilder::encode`] writes for the
/// same members, so a run can grow without its record being decoded again.
#[derive(Debug, Clone)]
pub struct OpenRun {
    /// REC-12's kind byte (the chunk kind, and whether a tool call has a name).
    kind_byte: u8,
    kind: ChunkKind,
    seq0: u64,
    count: u64,
    time0: i64,
    /// The last member's seq and time.
    last: (u64, i64),
    turn: u32,
    step: u32,
    index: u32,
    id: String,
    name: Option<String>,
    /// `dt` × (`count` − 1), `lens` × `count`, and the payloads, encoded.
    dts: Vec<u8>,
    lens: Vec<u8>,
    payloads: Vec<u8>,
}

impl OpenRun {
    /// A run of `member` alone.
    ///
    /// # Errors
    /// The rule `member` breaks (as [`ChunkRunBuilder::push`]).
    pub fn start(member: &ChunkMember<'_>) -> Result<Self, Refusal> {
        check_member(member)?;
        let c = &member.chunk;
        let mut lens = Vec::new();
        put_uv(&mut lens, c.payload.len() as u64);
        Ok(Self {
            kind_byte: super::chunk::kind_byte(c),
            kind: c.kind,
            seq0: member.seq,
            count: 1,
            time0: member.time,
            last: (member.seq, member.time),
            turn: c.turn,
            step: c.step,
            index: c.index,
            id: c.id.to_owned(),
            name: c.name.map(str::to_owned),
            dts: Vec::new(),
            lens,
            payloads: c.payload.as_bytes().to_vec(),
        })
    }

    /// The body's length.
    pub fn body_len(&self) -> usize {
        let mut len = 2 + uv_len(self.seq0) + uv_len(self.count) + uv_len(zigzag(self.time0));
        len += uv_len(self.turn.into()) + uv_len(self.step.into()) + uv_len(self.index.into());
        if self.kind == ChunkKind::ToolCall {
            len += uv_len(self.id.len() as u64) + self.id.len();
        }
        if let Some(name) = &self.name {
            len += uv_len(name.len() as u64) + name.len();
        }
        len + self.dts.len() + self.lens.len() + self.payloads.len()
    }

    /// The body length with `member` joined, when it continues the run (DSH ROW-3) and the
    /// body stays within 4,096 bytes; `None` otherwise. `member` is one [`choose`] made (its
    /// strings checked once there); its time is checked here, its id and name are the run's.
    pub fn joined_len(&self, member: &ChunkMember<'_>) -> Option<usize> {
        let c = &member.chunk;
        // Only a tool call has an id or a name: the run's first member and `member` were
        // checked (`check_member`), so other kinds compare as equal there without reading.
        let continues = self.last.0.checked_add(1) == Some(member.seq)
            && super::chunk::kind_byte(c) == self.kind_byte
            && c.turn == self.turn
            && c.step == self.step
            && c.index == self.index
            && (self.kind != ChunkKind::ToolCall
                || (c.id == self.id && c.name == self.name.as_deref()));
        if !continues || member.time.unsigned_abs() > SAFE {
            return None;
        }
        let dt = member.time - self.last.1;
        let len = self.body_len()
            + uv_len(zigzag(dt))
            + uv_len(c.payload.len() as u64)
            + c.payload.len()
            + (uv_len(self.count + 1) - uv_len(self.count));
        (len <= RUN_BODY_MAX).then_some(len)
    }

    /// Joins `member` when [`OpenRun::joined_len`] allows it; `false` (nothing changed)
    /// otherwise.
    pub fn join(&mut self, member: &ChunkMember<'_>) -> bool {
        self.join_within(member, usize::MAX)
    }

    /// [`OpenRun::join`] when the run's record then takes at most `frame_max` bytes
    /// ([`frame_len`]): a writer's room left in its segment.
    pub fn join_within(&mut self, member: &ChunkMember<'_>, frame_max: usize) -> bool {
        if self
            .joined_len(member)
            .is_none_or(|len| frame_len(len) > frame_max)
        {
            return false;
        }
        put_zz(&mut self.dts, member.time - self.last.1);
        put_uv(&mut self.lens, member.chunk.payload.len() as u64);
        self.payloads
            .extend_from_slice(member.chunk.payload.as_bytes());
        self.count += 1;
        self.last = (member.seq, member.time);
        true
    }

    /// Appends the run's record to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        frame(out, |out| {
            out.push(KIND_CHUNKS);
            out.push(self.kind_byte);
            put_uv(out, self.seq0);
            put_uv(out, self.count);
            put_zz(out, self.time0);
            for n in [self.turn, self.step, self.index] {
                put_uv(out, n.into());
            }
            if self.kind == ChunkKind::ToolCall {
                put_uv(out, self.id.len() as u64);
                out.extend_from_slice(self.id.as_bytes());
            }
            if let Some(name) = &self.name {
                put_uv(out, name.len() as u64);
                out.extend_from_slice(name.as_bytes());
            }
            out.extend_from_slice(&self.dts);
            out.extend_from_slice(&self.lens);
            out.extend_from_slice(&self.payloads);
        });
    }
}

/// A decoded chunk run: its shared fields and its members' bytes, decoded on access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkRun<'a> {
    seq0: u64,
    count: u64,
    time0: i64,
    /// The shared fields; `payload` empty.
    shared: ChunkRef<'a>,
    /// `dt` × (`count` − 1), checked.
    dts: &'a [u8],
    /// `lens` × `count`, checked.
    lens: &'a [u8],
    payloads: &'a [u8],
}

impl<'a> ChunkRun<'a> {
    /// The first member's seq.
    pub fn seq0(&self) -> u64 {
        self.seq0
    }

    /// The number of members.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The first member's time.
    pub fn time0(&self) -> i64 {
        self.time0
    }

    /// Member `k` (from 0), when the run holds it: the members before it are skipped by
    /// their lengths and times, their payloads not looked at.
    pub fn member(&self, k: u64) -> Option<ChunkMember<'a>> {
        if k >= self.count {
            return None;
        }
        let (mut dts, mut lens) = (self.dts, self.lens);
        let (mut time, mut skip) = (self.time0, 0_usize);
        for _ in 0..k {
            let (dt, n) = read_uv(dts).ok().flatten()?;
            dts = dts.get(n..)?;
            time = time.checked_add(unzigzag(dt))?;
            let (len, n) = read_uv(lens).ok().flatten()?;
            lens = lens.get(n..)?;
            skip = skip.checked_add(usize::try_from(len).ok()?)?;
        }
        let (len, _) = read_uv(lens).ok().flatten()?;
        let end = skip.checked_add(usize::try_from(len).ok()?)?;
        let payload = std::str::from_utf8(self.payloads.get(skip..end)?).ok()?;
        Some(ChunkMember {
            seq: self.seq0 + k,
            time,
            chunk: ChunkRef {
                payload,
                ..self.shared
            },
        })
    }

    /// [`ChunkRun::member`] of a run [`decode_again`] parsed, which did not check its
    /// strings: the member only when it is whole by REC-20 on its own (its payload, id and
    /// name each the inside of a JSON string, REC-12's rule; its seq, time and text length
    /// in range). Costs the member's bytes, not the run's: a later read returns no string a
    /// full decode of the same bytes would refuse, whatever happened to them since.
    pub fn member_checked(&self, k: u64) -> Option<ChunkMember<'a>> {
        self.member(k).filter(|member| check_member(member).is_ok())
    }

    /// The members, in seq order.
    pub fn members(&self) -> Members<'a> {
        Members {
            run: *self,
            next: 0,
            time: self.time0,
            dts: self.dts,
            lens: self.lens,
            payloads: self.payloads,
        }
    }
}

/// The members of a [`ChunkRun`].
#[derive(Debug, Clone)]
pub struct Members<'a> {
    run: ChunkRun<'a>,
    next: u64,
    time: i64,
    dts: &'a [u8],
    lens: &'a [u8],
    payloads: &'a [u8],
}

impl<'a> Iterator for Members<'a> {
    type Item = ChunkMember<'a>;

    fn next(&mut self) -> Option<ChunkMember<'a>> {
        if self.next >= self.run.count {
            return None;
        }
        // Checked by the decoder (REC-20): these reads succeed.
        if self.next > 0 {
            let (dt, n) = read_uv(self.dts).ok().flatten()?;
            self.dts = self.dts.get(n..)?;
            self.time = self.time.checked_add(unzigzag(dt))?;
        }
        let (len, n) = read_uv(self.lens).ok().flatten()?;
        self.lens = self.lens.get(n..)?;
        let (payload, rest) = self.payloads.split_at_checked(usize::try_from(len).ok()?)?;
        self.payloads = rest;
        let member = ChunkMember {
            seq: self.run.seq0 + self.next,
            time: self.time,
            chunk: ChunkRef {
                payload: std::str::from_utf8(payload).ok()?,
                ..self.run.shared
            },
        };
        self.next += 1;
        Some(member)
    }
}

/// A kind 3 body after its `kind` byte (REC-16, REC-20).
fn decode_run<'a>(c: &mut Cursor<'a>) -> Result<ChunkRun<'a>, CompactError> {
    decode_run_as(c, true)
}

/// [`decode_run`], checking the strings and texts of the members only when `check_strings`
/// ([`decode_again`]).
fn decode_run_as<'a>(
    c: &mut Cursor<'a>,
    check_strings: bool,
) -> Result<ChunkRun<'a>, CompactError> {
    let (kind, named) = match c.u8()? {
        1 => (ChunkKind::Text, false),
        2 => (ChunkKind::Reasoning, false),
        3 => (ChunkKind::ToolCall, false),
        4 => (ChunkKind::ToolCall, true),
        _ => return Err(c.refuse(Refusal::ChunkKind)),
    };
    let seq0 = c.uv_max(SAFE, Refusal::SeqRange)?;
    let count = c.uv()?;
    if count == 0 {
        return Err(c.refuse(Refusal::CountZero));
    }
    if count - 1 > SAFE - seq0 {
        return Err(c.refuse(Refusal::SeqRange));
    }
    if count >= 2 && c.body.len() > RUN_BODY_MAX {
        return Err(c.refuse(Refusal::RunTooLarge));
    }
    let time0 = c.zz()?;
    if time0.unsigned_abs() > SAFE {
        return Err(c.refuse(Refusal::TimeRange));
    }
    let max = u64::from(u32::MAX);
    let turn = c.uv_max(max, Refusal::U32Range)?;
    let step = c.uv_max(max, Refusal::U32Range)?;
    let index = c.uv_max(max, Refusal::U32Range)?;
    let mut string = |present: bool| -> Result<&'a str, CompactError> {
        if !present {
            return Ok("");
        }
        let len = c.uv_max(STRING_BYTES_MAX as u64, Refusal::StringLength)?;
        let bytes = c.take(len)?;
        let checked = if check_strings {
            json_string_inside(bytes)
        } else {
            std::str::from_utf8(bytes).ok()
        };
        checked.ok_or_else(|| c.refuse(Refusal::ChunkString))
    };
    let id = string(kind == ChunkKind::ToolCall)?;
    let name = string(named)?;
    let dts_at = c.at;
    let mut time = time0;
    // Each varint takes a byte: a count past the body fails within it.
    for _ in 1..count {
        let dt = c.zz()?;
        time = time
            .checked_add(dt)
            .filter(|t| t.unsigned_abs() <= SAFE)
            .ok_or_else(|| c.refuse(Refusal::TimeRange))?;
    }
    let lens_at = c.at;
    let mut total = 0_u64;
    for _ in 0..count {
        total = total.saturating_add(c.uv()?);
    }
    let lens_end = c.at;
    let payloads = c.rest();
    if total != payloads.len() as u64 {
        return Err(c.refuse(Refusal::PayloadLengths));
    }
    let run = ChunkRun {
        seq0,
        count,
        time0,
        shared: ChunkRef {
            kind,
            turn: u32::try_from(turn).unwrap_or_default(),
            step: u32::try_from(step).unwrap_or_default(),
            index: u32::try_from(index).unwrap_or_default(),
            id,
            name: named.then_some(name),
            payload: "",
        },
        dts: c.body.get(dts_at..lens_at).unwrap_or_default(),
        lens: c.body.get(lens_at..lens_end).unwrap_or_default(),
        payloads,
    };
    if !check_strings {
        return Ok(run);
    }
    // Every payload on its own is the inside of a JSON string (REC-12's rule).
    let mut lens = run.lens;
    let mut at = lens_end;
    let mut rest = payloads;
    while let Ok(Some((len, n))) = read_uv(lens) {
        lens = lens.get(n..).unwrap_or_default();
        let (payload, after) = rest
            .split_at_checked(usize::try_from(len).unwrap_or(usize::MAX))
            .ok_or_else(|| c.refuse(Refusal::PayloadLengths))?;
        if json_string_inside(payload).is_none() {
            return Err(CompactError::Refused {
                offset: c.base + at,
                rule: Refusal::ChunkString,
            });
        }
        at += payload.len();
        rest = after;
    }
    check_member_texts(&run, c.body.len(), c.base + lens_end)?;
    Ok(run)
}

/// REC-20: every member's text (REC-13) of `run`, whose body is `body_len` bytes, is below
/// 2^32 bytes, as a rebuilt text is (REC-18): a run of one may have a body of 2^32 − 1
/// bytes, and the envelope adds to it. A text is its payload, id and name (all in the body)
/// and an envelope of fixed strings and at most five numbers of at most 20 digits, so a
/// body that far below 2^32 holds none longer and is not walked. `payloads_at` is where
/// the payloads start, from the record's first byte.
fn check_member_texts(
    run: &ChunkRun<'_>,
    body_len: usize,
    payloads_at: usize,
) -> Result<(), CompactError> {
    let envelope_max = 512;
    if (body_len + envelope_max) as u64 <= TEXT_BYTES_MAX {
        return Ok(());
    }
    let mut at = payloads_at;
    for member in run.members() {
        if member.chunk.text_len(member.seq, member.time) as u64 > TEXT_BYTES_MAX {
            return Err(CompactError::Refused {
                offset: at,
                rule: Refusal::TextLength,
            });
        }
        at += member.chunk.payload.len();
    }
    Ok(())
}

/// `bytes` as a string when they are the inside of a JSON string (REC-12's rule).
fn json_string_inside(bytes: &[u8]) -> Option<&str> {
    if !is_string_inside(bytes) {
        return None;
    }
    std::str::from_utf8(bytes).ok()
}

#[cfg(test)]
#[path = "tests_compact.rs"]
mod tests;
