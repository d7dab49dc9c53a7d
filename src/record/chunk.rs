//! The body of a chunk record (`format-spec/log-format.md` §4.1, REC-12): a chunk event's
//! fields and strings, from which its text is rebuilt (REC-13). Pure, like the rest of the
//! codec; decoding treats its input as untrusted and refuses every body the encoder never
//! writes (REC-9).
#![deny(clippy::indexing_slicing)]

use super::{RecordError, array_at, to_u32, u32_at, u64_at};
use crate::event::chunk::{ChunkKind, ChunkRef, is_string_inside};
use crate::limits::SAFE_INTEGER_MAX;

/// `flags` of a chunk record: bit 5 and no other (REC-12).
pub const FLAG_CHUNK: u16 = 1 << 5;
/// Bytes of the fixed part of a chunk record's body (REC-12).
pub const CHUNK_BODY_FIXED_LEN: usize = 40;

/// The body length of a chunk record.
pub fn body_len(chunk: &ChunkRef<'_>) -> usize {
    CHUNK_BODY_FIXED_LEN + chunk.id.len() + chunk.name.map_or(0, str::len) + chunk.payload.len()
}

/// Whether `chunk` fits a chunk record: its `id` and `name` fit their u16 lengths.
pub fn fits(chunk: &ChunkRef<'_>) -> bool {
    u16::try_from(chunk.id.len()).is_ok()
        && chunk.name.is_none_or(|n| u16::try_from(n.len()).is_ok())
}

/// The `kind` byte of a chunk (REC-12; a chunk run's `chunk_kind` uses the same, REC-16).
pub(super) fn kind_byte(chunk: &ChunkRef<'_>) -> u8 {
    match (chunk.kind, chunk.name) {
        (ChunkKind::Text, _) => 1,
        (ChunkKind::Reasoning, _) => 2,
        (ChunkKind::ToolCall, None) => 3,
        (ChunkKind::ToolCall, Some(_)) => 4,
    }
}

/// Appends the body of the chunk record of the event (`seq`, `time`, `chunk`) to `out`.
///
/// # Panics
/// If `chunk` does not [`fit`](fits) or its payload is 4 GiB or more: the writer checks
/// [`fits`] and events are bounded by `max_event_bytes` < 4 GiB.
pub fn encode_body(seq: u64, time: i64, chunk: &ChunkRef<'_>, out: &mut Vec<u8>) {
    let short = |s: &str| u16::try_from(s.len()).expect("the writer checks `fits`");
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&time.to_le_bytes());
    out.extend_from_slice(&FLAG_CHUNK.to_le_bytes());
    out.extend_from_slice(&[kind_byte(chunk), 0]);
    for field in [
        chunk.turn,
        chunk.step,
        chunk.index,
        to_u32(chunk.payload.len()),
    ] {
        out.extend_from_slice(&field.to_le_bytes());
    }
    out.extend_from_slice(&short(chunk.id).to_le_bytes());
    out.extend_from_slice(&chunk.name.map_or(0, short).to_le_bytes());
    out.extend_from_slice(chunk.id.as_bytes());
    out.extend_from_slice(chunk.name.unwrap_or_default().as_bytes());
    out.extend_from_slice(chunk.payload.as_bytes());
}

/// Decodes a chunk record's body whose checksum matched (REC-12): every field in range,
/// every reserved and implied field the one value the encoder writes, every string the
/// inside of a JSON string literal. Returns `seq`, `time` and the chunk.
///
/// # Errors
/// [`RecordError::Body`] naming the rule broken.
pub fn decode_body(body: &[u8]) -> Result<(u64, i64, ChunkRef<'_>), RecordError> {
    let short = RecordError::Body("short chunk body");
    let seq = u64_at(body, 0).ok_or(short)?;
    let time = i64::from_le_bytes(array_at(body, 8).ok_or(short)?);
    let flags = u16::from_le_bytes(array_at(body, 16).ok_or(short)?);
    let [kind, reserved] = array_at::<2>(body, 18).ok_or(short)?;
    let field = |at: usize| u32_at(body, at).ok_or(short);
    let (turn, step, index) = (field(20)?, field(24)?, field(28)?);
    let payload_len = field(32)? as usize;
    let length = |at: usize| {
        array_at(body, at)
            .map(u16::from_le_bytes)
            .map(usize::from)
            .ok_or(short)
    };
    let (id_len, name_len) = (length(36)?, length(38)?);
    if flags != FLAG_CHUNK {
        return Err(RecordError::Body(
            "a chunk record sets other flag bits (REC-12)",
        ));
    }
    if reserved != 0 {
        return Err(RecordError::Body("reserved field is not zero (REC-12)"));
    }
    if seq > SAFE_INTEGER_MAX.unsigned_abs() {
        return Err(RecordError::Body("seq is not a safe integer (REC-9)"));
    }
    if time.unsigned_abs() > SAFE_INTEGER_MAX.unsigned_abs() {
        return Err(RecordError::Body("time is not a safe integer (REC-9)"));
    }
    let kind = match kind {
        1 => ChunkKind::Text,
        2 => ChunkKind::Reasoning,
        3 | 4 => ChunkKind::ToolCall,
        _ => return Err(RecordError::Body("unknown chunk kind (REC-12)")),
    };
    let named = body.get(18) == Some(&4);
    if (kind != ChunkKind::ToolCall && id_len != 0) || (!named && name_len != 0) {
        return Err(RecordError::Body(
            "id or name length set for a kind without it (REC-12)",
        ));
    }
    let expected = CHUNK_BODY_FIXED_LEN
        .checked_add(id_len)
        .and_then(|n| n.checked_add(name_len))
        .and_then(|n| n.checked_add(payload_len));
    if expected != Some(body.len()) {
        return Err(RecordError::Body(
            "lengths do not add up to the body (REC-12)",
        ));
    }
    let string = |at: usize, len: usize| {
        let bytes = body.get(at..at + len).ok_or(short)?;
        if !is_string_inside(bytes) {
            return Err(RecordError::Body(
                "a string is not the inside of a JSON string (REC-12)",
            ));
        }
        std::str::from_utf8(bytes).map_err(|_| RecordError::Body("a string is not UTF-8 (REC-12)"))
    };
    let id = string(CHUNK_BODY_FIXED_LEN, id_len)?;
    let name = string(CHUNK_BODY_FIXED_LEN + id_len, name_len)?;
    let payload = string(CHUNK_BODY_FIXED_LEN + id_len + name_len, payload_len)?;
    let chunk = ChunkRef {
        kind,
        turn,
        step,
        index,
        id,
        name: named.then_some(name),
        payload,
    };
    Ok((seq, time, chunk))
}

#[cfg(test)]
mod tests {
    #![expect(clippy::indexing_slicing, reason = "tests index their own buffers")]
    use super::*;
    use proptest::prelude::*;

    fn chunks() -> impl Strategy<Value = (u64, i64, u8, [u32; 3], String, String, String)> {
        (
            0..=SAFE_INTEGER_MAX.unsigned_abs(),
            -SAFE_INTEGER_MAX..=SAFE_INTEGER_MAX,
            1..=4_u8,
            any::<[u32; 3]>(),
            r#"([a-z_0-9]|\\"){0,10}"#,
            r"[a-z]{0,6}",
            r"([ -!#-\[\]-~é]|\\n|\\u00e9){0,20}",
        )
    }

    fn chunk<'a>(
        kind: u8,
        numbers: [u32; 3],
        id: &'a str,
        name: &'a str,
        payload: &'a str,
    ) -> ChunkRef<'a> {
        let tool = kind >= 3;
        ChunkRef {
            kind: [
                ChunkKind::Text,
                ChunkKind::Reasoning,
                ChunkKind::ToolCall,
                ChunkKind::ToolCall,
            ][usize::from(kind - 1)],
            turn: numbers[0],
            step: numbers[1],
            index: numbers[2],
            id: if tool { id } else { "" },
            name: (kind == 4).then_some(name),
            payload,
        }
    }

    proptest! {
        /// `decode(encode(c)) = c`, and the body is exactly as long as `body_len` says.
        #[test]
        fn round_trip((seq, time, kind, numbers, id, name, payload) in chunks()) {
            let chunk = chunk(kind, numbers, &id, &name, &payload);
            let mut body = Vec::new();
            encode_body(seq, time, &chunk, &mut body);
            prop_assert_eq!(body.len(), body_len(&chunk));
            prop_assert_eq!(decode_body(&body), Ok((seq, time, chunk)));
        }

        /// REC-9 on chunk bodies: any single changed byte is either refused or decodes to
        /// a chunk that encodes back to exactly the changed bytes.
        #[test]
        fn canonical(
            (seq, time, kind, numbers, id, name, payload) in chunks(),
            at in any::<prop::sample::Index>(),
            value: u8,
        ) {
            let chunk = chunk(kind, numbers, &id, &name, &payload);
            let mut body = Vec::new();
            encode_body(seq, time, &chunk, &mut body);
            let at = at.index(body.len());
            body[at] = value;
            if let Ok((seq, time, decoded)) = decode_body(&body) {
                let mut again = Vec::new();
                encode_body(seq, time, &decoded, &mut again);
                prop_assert_eq!(again, body);
            }
        }
    }

    #[test]
    fn refuses_what_the_encoder_never_writes() {
        let mut good = Vec::new();
        encode_body(3, 4, &chunk(3, [1, 2, 0], "c", "", "x"), &mut good);
        assert!(decode_body(&good).is_ok());
        let refused = |edit: &dyn Fn(&mut Vec<u8>)| {
            let mut body = good.clone();
            edit(&mut body);
            decode_body(&body).unwrap_err()
        };
        for (why, edit) in [
            (
                "other flag bits",
                &(|b: &mut Vec<u8>| b[16] |= 1) as &dyn Fn(&mut Vec<u8>),
            ),
            ("reserved", &|b: &mut Vec<u8>| b[19] = 1),
            ("kind 0", &|b: &mut Vec<u8>| b[18] = 0),
            ("kind 5", &|b: &mut Vec<u8>| b[18] = 5),
            ("id for a text kind", &|b: &mut Vec<u8>| b[18] = 1),
            ("name length without a name", &|b: &mut Vec<u8>| b[38] = 1),
            ("time beyond 2^53", &|b: &mut Vec<u8>| {
                b[8..16].copy_from_slice(&(1_i64 << 53).to_le_bytes());
            }),
            ("short", &|b: &mut Vec<u8>| b.truncate(39)),
            ("long", &|b: &mut Vec<u8>| b.push(b'x')),
            ("a quote in the payload", &|b: &mut Vec<u8>| {
                *b.last_mut().unwrap() = b'"';
            }),
            ("a backslash ending the payload", &|b: &mut Vec<u8>| {
                *b.last_mut().unwrap() = b'\\';
            }),
            ("a control byte", &|b: &mut Vec<u8>| {
                *b.last_mut().unwrap() = b'\n';
            }),
            ("not UTF-8", &|b: &mut Vec<u8>| {
                *b.last_mut().unwrap() = 0xff;
            }),
        ] {
            assert!(matches!(refused(edit), RecordError::Body(_)), "{why}");
        }
    }
}
