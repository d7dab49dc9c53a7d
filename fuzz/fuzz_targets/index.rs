//! Segment index decoder (log-format.md IDX-1 to IDX-4): arbitrary bytes are refused or
//! decoded, never a panic; an index built from the input's fields encodes and decodes back
//! to itself, and any one changed byte of it, or any shortening, is refused (its checksum).
#![no_main]

use libfuzzer_sys::fuzz_target;
use surfacelog::internals::log::{Index, decode_index, encode_index};

fuzz_target!(|bytes: &[u8]| {
    // As an index file, read for the identity it names (so the header checks get past the
    // identity) and for a fixed one.
    let mut log_id = [0; 16];
    if let Some(id) = bytes.get(16..32) {
        log_id.copy_from_slice(id);
    }
    let first_seq = bytes
        .get(32..40)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()));
    let _ = decode_index(bytes, &log_id, first_seq);
    let _ = decode_index(bytes, &[0; 16], 0);

    // As fields: first_seq, end, data_crc, a change (position, xor), then the offsets.
    let word = |at: usize| {
        bytes
            .get(at..at + 4)
            .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()))
    };
    let (end, data_crc, change) = (word(8), word(12), word(16));
    let offsets: Vec<u32> = bytes
        .get(20..)
        .unwrap_or_default()
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let encoded = encode_index(&log_id, first_seq, &offsets, end, data_crc);
    let decoded = decode_index(&encoded, &log_id, first_seq);
    assert_eq!(
        decoded,
        Some(Index {
            offsets,
            end: end as usize,
            data_crc: Some(data_crc)
        })
    );
    // IDX-2: another segment's index is refused.
    assert_eq!(
        decode_index(&encoded, &log_id, first_seq.wrapping_add(1)),
        None
    );
    let mut damaged = encoded.clone();
    let at = (change >> 8) as usize % damaged.len();
    let xor = (change & 0xff) as u8;
    damaged[at] ^= xor;
    if xor != 0 {
        assert_eq!(
            decode_index(&damaged, &log_id, first_seq),
            None,
            "byte {at} ^ {xor:#x} went unnoticed"
        );
    }
    let cut = (change as usize >> 16) % encoded.len();
    assert_eq!(
        decode_index(&encoded[..cut], &log_id, first_seq),
        None,
        "cut at {cut}"
    );
});
