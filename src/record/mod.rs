//! Event ⇄ record bytes: the frame and body of `format-spec/log-format.md` §3–§4. Pure:
//! no I/O. One codec serves the writer, the readers, recovery and the fuzz target.
//!
//! Decoding treats its input as untrusted: every length and span read from the bytes is
//! checked before use, and a failure is a [`RecordError`], never a panic.
//!
//! The codec is canonical (REC-9): `decode(encode(e))` is `e`, and any bytes `decode`
//! accepts are exactly what `encode` writes for the event it returns, so a record has one
//! encoding and a reserved or implied field holding another value is refused. The tests and
//! the fuzz target (`fuzz/fuzz_targets/record.rs`) check both directions.
#![deny(clippy::indexing_slicing)]

pub mod chunk;
pub mod compact;

use std::ops::Range;

use crate::event::envelope::EVENT_TYPE_BYTES_MAX;
use crate::event::{Event, EventRef, Seqs, SurfaceOp};
use crate::limits::SAFE_INTEGER_MAX;

/// Bytes of the frame header: `len` and `crc` (REC-1, REC-2).
pub const FRAME_HEADER_LEN: usize = 8;
/// Bytes of the fixed part of the body (§4).
pub const BODY_FIXED_LEN: usize = 64;
/// The shortest body of any record (REC-1): a chunk record's fixed part (REC-12).
pub const BODY_MIN_LEN: usize = chunk::CHUNK_BODY_FIXED_LEN;
/// Records start at multiples of this (SEG-4, REC-3).
pub const RECORD_ALIGN: usize = 8;

const _: () = assert!(
    FRAME_HEADER_LEN.is_multiple_of(RECORD_ALIGN),
    "bodies stay 8-byte aligned"
);
const _: () = assert!(
    BODY_FIXED_LEN.is_multiple_of(RECORD_ALIGN),
    "sources stay 8-byte aligned (REC-8)"
);

const FLAG_SURFACE_OP: u16 = 1 << 0;
const FLAG_REPLACE: u16 = 1 << 1;
const FLAG_SOURCES: u16 = 1 << 2;
const FLAG_IGNORABLE: u16 = 1 << 3;
const FLAG_MESSAGE: u16 = 1 << 4;
const FLAGS_KNOWN: u16 =
    FLAG_SURFACE_OP | FLAG_REPLACE | FLAG_SOURCES | FLAG_IGNORABLE | FLAG_MESSAGE;

/// Why bytes are not a valid record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordError {
    /// `len` is 0: the end of the data (REC-1), not a record.
    End,
    /// The frame does not fit in the bytes available (a torn or garbage length).
    Truncated,
    /// `len` is out of range (REC-1).
    Length,
    /// The checksum does not match (REC-2).
    Checksum,
    /// The checksum matches but the body breaks REC-5 or REC-6.
    Body(&'static str),
}

/// The total size of the frame of a body of `body_len` bytes, padding included.
pub fn frame_len(body_len: usize) -> usize {
    (FRAME_HEADER_LEN + body_len).next_multiple_of(RECORD_ALIGN)
}

/// The body length of an event's record (REC-5).
pub fn body_len(event: &EventRef<'_>) -> usize {
    match (event.chunk(), event.stored_text()) {
        (Some(c), _) => chunk::body_len(&c),
        (None, _) => {
            BODY_FIXED_LEN
                + 8 * event.sources.map_or(0, |s| s.len())
                + event.event_type.len()
                + event.text_len()
        }
    }
}

/// REC-11: the view the writer stores of `event` in a segment that sets
/// `CHUNK_RECORDS`: a chunk record's when the event is a chunk whose text is exactly the
/// one REC-13 rebuilds from its fields, else `event` itself.
pub fn compact<'a>(event: &EventRef<'a>) -> EventRef<'a> {
    let Some(text) = event.stored_text() else {
        return *event;
    };
    let candidate = event.event_type == crate::event::chunk::CHUNK_TYPE
        && event.surface_op.is_none()
        && event.sources.is_none()
        && !event.ignorable
        && event.message_span().is_none();
    match candidate
        .then(|| crate::event::chunk::ChunkRef::from_text(event.seq, event.time, text))
        .flatten()
        .filter(chunk::fits)
    {
        Some(c) => EventRef::from_chunk(event.seq, event.time, c),
        None => *event,
    }
}

/// Which records a segment holds (`format-spec/log-format.md` SEG-9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// §4 records, and §4.1 chunk records in a segment that sets `CHUNK_RECORDS`.
    #[default]
    V1,
    /// §4.2 compact records: a segment that sets `COMPACT_RECORDS`.
    Compact,
}

/// A record of either [`Format`], decoded: one event, or a run of chunks (§4.2, kind 3),
/// the events `first_seq() .. first_seq() + count()`.
#[derive(Debug, Clone, Copy)]
pub enum Decoded<'a> {
    /// A record holding one event.
    One(EventRef<'a>),
    /// A compact chunk run.
    Run(compact::ChunkRun<'a>),
}

impl<'a> Decoded<'a> {
    /// The seq of the record's first event (RCV-5 compares it with the next seq).
    pub fn first_seq(&self) -> u64 {
        match self {
            Self::One(event) => event.seq,
            Self::Run(run) => run.seq0(),
        }
    }

    /// The number of events the record holds (at least 1).
    pub fn count(&self) -> u64 {
        match self {
            Self::One(_) => 1,
            Self::Run(run) => run.count(),
        }
    }

    /// The seq after the record's last event (REC-9, REC-20: at most 2^53).
    pub fn seq_end(&self) -> u64 {
        self.first_seq().saturating_add(self.count())
    }

    /// The event at `seq`, when the record holds it. For a run, the members before it
    /// are walked (a run's body is at most 4 KiB, REC-20).
    pub fn event(&self, seq: u64) -> Option<EventRef<'a>> {
        match self {
            Self::One(event) => (event.seq == seq).then_some(*event),
            Self::Run(run) => run.member(seq.checked_sub(run.seq0())?).map(|m| m.event()),
        }
    }

    /// [`Decoded::event`] of a record [`decode_again_as`] decoded: a run's member is
    /// returned only when its own strings and ranges hold (REC-20,
    /// [`compact::ChunkRun::member_checked`]), which that decode did not check.
    pub fn event_again(&self, seq: u64) -> Option<EventRef<'a>> {
        match self {
            Self::One(event) => (event.seq == seq).then_some(*event),
            Self::Run(run) => run
                .member_checked(seq.checked_sub(run.seq0())?)
                .map(|m| m.event()),
        }
    }

    /// The record's events, in seq order.
    pub fn events(&self) -> impl Iterator<Item = EventRef<'a>> + use<'a> {
        let (one, run) = match self {
            Self::One(event) => (Some(*event), None),
            Self::Run(run) => (None, Some(run.members().map(|m| m.event()))),
        };
        one.into_iter().chain(run.into_iter().flatten())
    }
}

/// Appends the records of `events` (in seq order) as a segment setting `incompat_features`
/// holds them (SEG-9): compact records when it sets `COMPACT_RECORDS`, consecutive
/// continuing chunks sharing runs (REC-17); otherwise one record per event, a chunk
/// record (REC-11) where it sets `CHUNK_RECORDS`. For the records a writer other than the
/// log's writes (a fork's own segment, a compaction's rewrite). Returns where in `out`
/// each event's record starts (a run's members share their record's).
///
/// # Errors
/// The [`compact::Refusal`] of an event no compact record holds (out of range: events
/// read from a log or made by the engine never are). Nothing is appended then.
pub fn encode_events<'a>(
    incompat_features: u16,
    events: impl IntoIterator<Item = EventRef<'a>>,
    out: &mut Vec<u8>,
) -> Result<Vec<usize>, compact::Refusal> {
    use crate::log::segment::{CHUNK_RECORDS, COMPACT_RECORDS};
    let start = out.len();
    let mut starts = Vec::new();
    let mut run = compact::ChunkRunBuilder::default();
    let close =
        |run: &mut compact::ChunkRunBuilder<'a>, out: &mut Vec<u8>, starts: &mut Vec<usize>| {
            if !run.members().is_empty() {
                starts.extend(std::iter::repeat_n(out.len(), run.members().len()));
                run.encode(out);
                *run = compact::ChunkRunBuilder::default();
            }
        };
    for event in events {
        if incompat_features & COMPACT_RECORDS == 0 {
            let stored = if incompat_features & CHUNK_RECORDS == 0 {
                event
            } else {
                compact(&event)
            };
            starts.push(out.len());
            encode(&stored, out);
            continue;
        }
        let pushed = match compact::choose(&event) {
            Ok(compact::Choice::Chunk(member)) => match run.push(member) {
                Ok(()) => Ok(()),
                Err((member, _)) => {
                    close(&mut run, out, &mut starts);
                    run.push(member).map_err(|(_, why)| why)
                }
            },
            Ok(compact::Choice::Event(e)) => {
                close(&mut run, out, &mut starts);
                starts.push(out.len());
                compact::encode_event(&e, out);
                Ok(())
            }
            Err(why) => Err(why),
        };
        if let Err(why) = pushed {
            out.truncate(start);
            return Err(why);
        }
    }
    close(&mut run, out, &mut starts);
    Ok(starts)
}

/// Decodes the record of `format` at the start of `bytes` (which may continue past it).
/// Returns it and its frame length (the offset of the next record).
///
/// # Errors
/// [`RecordError`] naming the first rule the bytes break. A compact record's REC-20
/// refusal is [`RecordError::Body`].
pub fn decode_as(format: Format, bytes: &[u8]) -> Result<(Decoded<'_>, usize), RecordError> {
    match format {
        Format::V1 => decode(bytes).map(|(event, len)| (Decoded::One(event), len)),
        Format::Compact => from_compact(compact::decode(bytes)),
    }
}

/// [`decode_as`] of a record decoded whole at the same place before (a reader reading a
/// run's members one by one): a compact run's strings are not checked again
/// ([`compact::decode_again`]); everything else is.
///
/// # Errors
/// As [`decode_as`].
pub fn decode_again_as(format: Format, bytes: &[u8]) -> Result<(Decoded<'_>, usize), RecordError> {
    match format {
        Format::V1 => decode_as(format, bytes),
        Format::Compact => from_compact(compact::decode_again(bytes)),
    }
}

/// A compact record decoded, as a [`Decoded`].
fn from_compact(
    decoded: Result<(compact::Record<'_>, usize), compact::CompactError>,
) -> Result<(Decoded<'_>, usize), RecordError> {
    {
        {
            let (record, len) = decoded.map_err(|error| match error {
                compact::CompactError::End => RecordError::End,
                compact::CompactError::Truncated => RecordError::Truncated,
                compact::CompactError::Length => RecordError::Length,
                compact::CompactError::Checksum => RecordError::Checksum,
                compact::CompactError::Refused { rule, .. } => RecordError::Body(rule.reason()),
            })?;
            let decoded = match record {
                compact::Record::Event(e) => Decoded::One(
                    EventRef::from_compact(&e)
                        .ok_or(RecordError::Body(compact::Refusal::TextLength.reason()))?,
                ),
                compact::Record::Chunks(run) if run.count() == 1 => Decoded::One(
                    run.members()
                        .next()
                        .ok_or(RecordError::Body("a run holds no member (REC-20)"))?
                        .event(),
                ),
                compact::Record::Chunks(run) => Decoded::Run(run),
            };
            Ok((decoded, len))
        }
    }
}

/// The frame length the first bytes of a record of `format` announce (its length field
/// alone, nothing checked): what a reader reads to check the whole record. `None` when
/// `head` is too short to hold the length field or holds no valid one.
pub fn announced_len(format: Format, head: &[u8]) -> Option<usize> {
    match format {
        Format::V1 => u32_at(head, 0).map(|body| frame_len(body as usize)),
        Format::Compact => compact::announced_len(head),
    }
}

/// The record of `format` at the start of `bytes`, by its frame alone (no checksum or
/// body checked: bytes this process's writer has just written, each read checks its
/// record again, REC-4): its frame length and how many events it holds. `None` for a
/// zero first byte (the end of the data, REC-1, SEG-5) and `Some(Err(()))` for a frame
/// that is not whole in `bytes` or holds no events.
pub fn walk_frame(format: Format, bytes: &[u8]) -> Option<Result<(usize, u64), ()>> {
    match format {
        Format::V1 => {
            let Some(len) = u32_at(bytes, 0) else {
                return Some(Err(()));
            };
            if len == 0 {
                return None;
            }
            let body_len = len as usize;
            let frame = frame_len(body_len);
            Some(if body_len < BODY_MIN_LEN || frame > bytes.len() {
                Err(())
            } else {
                Ok((frame, 1))
            })
        }
        Format::Compact => match bytes.first() {
            Some(0) => None,
            _ => Some(compact::walk_frame(bytes).ok_or(())),
        },
    }
}

/// Appends the record of `event` (frame, body, padding) to `out`.
///
/// # Panics
/// If a length does not fit its field: events are bounded by `max_event_bytes` < 4 GiB
/// and types by 256 bytes, which admission enforces.
pub fn encode(event: &EventRef<'_>, out: &mut Vec<u8>) {
    let start = out.len();
    let body_len = body_len(event);
    out.extend_from_slice(&to_u32(body_len).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    match (event.chunk(), event.stored_text()) {
        (Some(c), _) => chunk::encode_body(event.seq, event.time, &c, out),
        // A text held whole is borrowed; a compact record's rebuilt one is built (REC-18).
        (None, _) => encode_body(event, &event.text(), out),
    }
    debug_assert_eq!(out.len() - start, FRAME_HEADER_LEN + body_len);
    // REC-2: the checksum covers `len` and the body, not itself.
    let len_bytes = out.get(start..start + 4).unwrap_or_default();
    let crc = crc32c::crc32c_append(
        crc32c::crc32c(len_bytes),
        out.get(start + FRAME_HEADER_LEN..).unwrap_or_default(),
    );
    out.resize(start + frame_len(body_len), 0);
    if let Some(slot) = out.get_mut(start + 4..start + 8) {
        slot.copy_from_slice(&crc.to_le_bytes());
    }
    debug_assert!(
        decode(out.get(start..).unwrap_or_default()).is_ok_and(|(e, _)| e == *event),
        "an encoded record decodes to its event"
    );
}

/// The body of a §4 record: the envelope fields, the type and the stored `text`.
fn encode_body(event: &EventRef<'_>, text: &str, out: &mut Vec<u8>) {
    let mut flags = 0;
    let (mut replace_start, mut replace_end) = (0, 0);
    match event.surface_op {
        None => {}
        Some(SurfaceOp::Append) => flags |= FLAG_SURFACE_OP,
        Some(SurfaceOp::Replace { start, end }) => {
            flags |= FLAG_SURFACE_OP | FLAG_REPLACE;
            (replace_start, replace_end) = (start, end);
        }
    }
    if event.sources.is_some() {
        flags |= FLAG_SOURCES;
    }
    if event.ignorable {
        flags |= FLAG_IGNORABLE;
    }
    let message = event.message_span();
    if message.is_some() {
        flags |= FLAG_MESSAGE;
    }
    let data = event.data_span();
    let message = message.unwrap_or(0..0);
    out.extend_from_slice(&event.seq.to_le_bytes());
    out.extend_from_slice(&event.time.to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    let type_len = u16::try_from(event.event_type.len()).expect("types are at most 256 bytes");
    out.extend_from_slice(&type_len.to_le_bytes());
    let source_count = event.sources.map_or(0, |s| s.len());
    for field in [
        source_count,
        text.len(),
        data.start,
        data.end,
        message.start,
        message.end,
        0,
    ] {
        out.extend_from_slice(&to_u32(field).to_le_bytes());
    }
    out.extend_from_slice(&replace_start.to_le_bytes());
    out.extend_from_slice(&replace_end.to_le_bytes());
    for source in event.sources.iter().flat_map(Seqs::iter) {
        out.extend_from_slice(&source.to_le_bytes());
    }
    out.extend_from_slice(event.event_type.as_bytes());
    out.extend_from_slice(text.as_bytes());
}

/// [`encode`] for an owned event.
pub fn encode_event(event: &Event, out: &mut Vec<u8>) {
    encode(&event.as_ref(), out);
}

/// Decodes the record at the start of `bytes` (which may continue past it). Returns the
/// event and the record's frame length (the offset of the next record).
///
/// Accepted bytes are canonical (REC-9): [`encode`] of the event gives back exactly the
/// frame's bytes, padding included.
///
/// # Errors
/// [`RecordError`] naming the first rule the bytes break.
pub fn decode(bytes: &[u8]) -> Result<(EventRef<'_>, usize), RecordError> {
    let len = u32_at(bytes, 0).ok_or(RecordError::Truncated)?;
    if len == 0 {
        return Err(RecordError::End);
    }
    let body_len = usize::try_from(len).map_err(|_| RecordError::Length)?;
    // REC-1: no body is shorter than a chunk record's fixed part (REC-12).
    if body_len < BODY_MIN_LEN {
        return Err(RecordError::Length);
    }
    let framed = bytes
        .get(..frame_len(body_len))
        .ok_or(RecordError::Truncated)?;
    let body = framed
        .get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + body_len)
        .ok_or(RecordError::Truncated)?;
    let crc = u32_at(framed, 4).ok_or(RecordError::Truncated)?;
    let covered = framed
        .get(..FRAME_HEADER_LEN + body_len)
        .ok_or(RecordError::Truncated)?;
    let computed =
        crc32c::crc32c_append(crc32c::crc32c(covered.get(..4).unwrap_or_default()), body);
    if computed != crc {
        return Err(RecordError::Checksum);
    }
    if framed
        .get(FRAME_HEADER_LEN + body_len..)
        .is_some_and(|pad| pad.iter().any(|b| *b != 0))
    {
        return Err(RecordError::Body("padding is not zero (REC-2)"));
    }
    // REC-12: `flags` says which body this is.
    let flags = array_at(body, 16)
        .map(u16::from_le_bytes)
        .unwrap_or_default();
    let event = if flags & chunk::FLAG_CHUNK != 0 {
        let (seq, time, c) = chunk::decode_body(body)?;
        EventRef::from_chunk(seq, time, c)
    } else if body_len < BODY_FIXED_LEN {
        return Err(RecordError::Length);
    } else {
        decode_body(body)?
    };
    Ok((event, framed.len()))
}

/// REC-5, REC-6 and REC-9 over a body whose checksum matched: every field is in range,
/// and every reserved or implied field holds the one value the encoder writes, so that
/// re-encoding what is accepted gives back exactly the same bytes.
fn decode_body(body: &[u8]) -> Result<EventRef<'_>, RecordError> {
    let short = RecordError::Body("short body");
    let field = |at: usize| u32_at(body, at).map(|v| v as usize).ok_or(short);
    let seq = u64_at(body, 0).ok_or(short)?;
    let time = i64::from_le_bytes(array_at(body, 8).ok_or(short)?);
    let flags = u16::from_le_bytes(array_at(body, 16).ok_or(short)?);
    let type_len = usize::from(u16::from_le_bytes(array_at(body, 18).ok_or(short)?));
    let (source_count, text_len) = (field(20)?, field(24)?);
    let data = field(28)?..field(32)?;
    let message = field(36)?..field(40)?;
    let replace = (
        u64_at(body, 48).ok_or(short)?,
        u64_at(body, 56).ok_or(short)?,
    );
    // REC-9: the checks below refuse every value the encoder never writes.
    if seq > SAFE_INTEGER_MAX.unsigned_abs() {
        return Err(RecordError::Body("seq is not a safe integer (REC-9)"));
    }
    if time.unsigned_abs() > SAFE_INTEGER_MAX.unsigned_abs() {
        return Err(RecordError::Body("time is not a safe integer (REC-9)"));
    }
    if flags & !FLAGS_KNOWN != 0 {
        return Err(RecordError::Body("unknown flag bits (REC-6)"));
    }
    if field(44)? != 0 {
        return Err(RecordError::Body("reserved field is not zero (REC-6)"));
    }
    if flags & FLAG_REPLACE != 0 && flags & FLAG_SURFACE_OP == 0 {
        return Err(RecordError::Body("replace flag without surfaceOp (REC-6)"));
    }
    if flags & FLAG_REPLACE == 0 && replace != (0, 0) {
        return Err(RecordError::Body(
            "replace range without the replace flag (REC-9)",
        ));
    }
    if flags & FLAG_SOURCES == 0 && source_count != 0 {
        return Err(RecordError::Body("sources without their flag (REC-9)"));
    }
    if flags & FLAG_MESSAGE == 0 && message != (0..0) {
        return Err(RecordError::Body(
            "message span without the message flag (REC-9)",
        ));
    }
    if type_len == 0 || type_len > EVENT_TYPE_BYTES_MAX {
        return Err(RecordError::Body("type length outside 1..=256 (REC-9)"));
    }
    let sources_len = source_count
        .checked_mul(8)
        .ok_or(RecordError::Body("source count"))?;
    let expected = BODY_FIXED_LEN
        .checked_add(sources_len)
        .and_then(|n| n.checked_add(type_len))
        .and_then(|n| n.checked_add(text_len));
    if expected != Some(body.len()) {
        return Err(RecordError::Body(
            "lengths do not add up to the body (REC-5)",
        ));
    }
    let sources_end = BODY_FIXED_LEN + sources_len;
    let type_end = sources_end + type_len;
    let sources = body
        .get(BODY_FIXED_LEN..sources_end)
        .ok_or(RecordError::Body("sources"))?;
    let type_bytes = body
        .get(sources_end..type_end)
        .ok_or(RecordError::Body("type"))?;
    let text_bytes = body.get(type_end..).ok_or(RecordError::Body("text"))?;
    let event_type = std::str::from_utf8(type_bytes)
        .map_err(|_| RecordError::Body("type is not UTF-8 (REC-6)"))?;
    let text = std::str::from_utf8(text_bytes)
        .map_err(|_| RecordError::Body("text is not UTF-8 (REC-6)"))?;
    check_span(&data, text.len(), text)?;
    let message = if flags & FLAG_MESSAGE == 0 {
        None
    } else {
        if message.start < data.start || message.end > data.end {
            return Err(RecordError::Body("message outside data (REC-6)"));
        }
        check_span(&message, text.len(), text)?;
        Some(message)
    };
    let surface_op = match (flags & FLAG_SURFACE_OP != 0, flags & FLAG_REPLACE != 0) {
        (false, _) => None,
        (true, false) => Some(SurfaceOp::Append),
        (true, true) => Some(SurfaceOp::Replace {
            start: replace.0,
            end: replace.1,
        }),
    };
    let sources = (flags & FLAG_SOURCES != 0).then(|| Seqs::from_le_bytes(sources));
    let ignorable = flags & FLAG_IGNORABLE != 0;
    Ok(EventRef::from_parts(
        text,
        event_type,
        (seq, time, surface_op, sources, ignorable),
        data,
        message,
    ))
}

/// REC-6: a span lies within the text, on character boundaries.
fn check_span(span: &Range<usize>, len: usize, text: &str) -> Result<(), RecordError> {
    let inside = span.start <= span.end && span.end <= len;
    if !inside || !text.is_char_boundary(span.start) || !text.is_char_boundary(span.end) {
        return Err(RecordError::Body("span outside the text (REC-6)"));
    }
    Ok(())
}

fn array_at<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
    bytes.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// The little-endian u32 at `at`, if the bytes reach that far.
pub fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    array_at(bytes, at).map(u32::from_le_bytes)
}

/// The little-endian u64 at `at`, if the bytes reach that far.
pub fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    array_at(bytes, at).map(u64::from_le_bytes)
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).expect("record fields fit in u32: events are below 4 GiB")
}

#[cfg(test)]
mod tests;
