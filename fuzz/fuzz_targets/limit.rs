//! Segment limit decoder (log-format.md LIM-2, LIM-3, LIM-7): arbitrary bytes are refused
//! or decoded against the vector segment, never a panic; a limit at any record of it
//! encodes and decodes back to itself, and any changed byte of it is refused.
#![no_main]

use libfuzzer_sys::fuzz_target;
use surfacelog::internals::log::limit::{LIMIT_LEN, Limit};
use surfacelog::internals::log::segment::SegmentHeader;

/// The specification's vector segment: three records, from offset 64.
const SEGMENT: &[u8] = include_bytes!("../../format-spec/vectors/segment-v1.seg");

/// The records of [`SEGMENT`]: where each starts and ends.
fn records() -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let mut at = 64;
    while let Ok((_, len)) = surfacelog::internals::record::decode(&SEGMENT[at..]) {
        out.push((at as u32, (at + len) as u32));
        at += len;
    }
    assert_eq!(out.len(), 3, "the vector segment holds three records");
    out
}

fuzz_target!(|bytes: &[u8]| {
    let header = SegmentHeader::decode(SEGMENT).expect("the vector segment's header");
    // Arbitrary bytes as the limit file, over the vector segment and over the input.
    let _ = Limit::decode(bytes, &header, SEGMENT);
    let _ = Limit::decode(&bytes[..bytes.len().min(LIMIT_LEN)], &header, bytes);

    // A valid limit, then one changed byte.
    let Some((&pick, rest)) = bytes.split_first() else {
        return;
    };
    let records = records();
    let index = usize::from(pick) % records.len();
    let (last_offset, end) = records[index];
    let index = index as u64;
    let limit = Limit {
        log_id: header.log_id,
        first_seq: header.first_seq,
        seq_next: header.first_seq + index + 1,
        last_offset,
        end,
    };
    let encoded = limit.encode();
    assert_eq!(Limit::decode(&encoded, &header, SEGMENT), Ok(limit));
    for change in rest.chunks_exact(2) {
        let mut damaged = encoded;
        let at = usize::from(change[0]) % LIMIT_LEN;
        damaged[at] ^= change[1];
        if damaged != encoded {
            assert!(
                Limit::decode(&damaged, &header, SEGMENT).is_err(),
                "byte {at} ^ {:#x}",
                change[1]
            );
        }
    }
    // A segment whose limited record is damaged: the limit is refused (LIM-3).
    let mut segment = SEGMENT.to_vec();
    if let Some(&at) = rest.first() {
        let at = last_offset as usize + usize::from(at) % (end - last_offset) as usize;
        segment[at] ^= rest.get(1).copied().unwrap_or(1) | 1;
        assert!(
            Limit::decode(&encoded, &header, &segment).is_err(),
            "a damaged last record at {at}"
        );
    }
});
