//! Compressed sealed segments (log-format.md §14, CZ-3, CZ-5): arbitrary bytes taken for a
//! compressed segment file are refused or decompressed, never a panic; the input as the
//! bodies of the record frames of a logical segment compresses (in 4 KiB blocks, so several) and decompresses
//! back to exactly it; and that file with any one byte changed is refused (`CORRUPT`),
//! never decompressed to other bytes.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use surfacelog::internals::log::segment::{
    CHUNK_RECORDS, SEGMENT_HEADER_LEN, SegmentHeader, compress, decompress,
};

fuzz_target!(|bytes: &[u8]| {
    let path = Path::new("fuzz.seg");
    let _ = decompress(bytes, path);

    let Some((&pick, records)) = bytes.split_first() else {
        return;
    };
    if records.is_empty() {
        return;
    }
    // The input as the bodies of record frames (CZ-1: a logical segment is records to its
    // end), as many as `pick` cuts it into; the frames' checksums are not checked here.
    let mut frames = Vec::new();
    for chunk in records.chunks(8 + usize::from(pick) % 200) {
        let body = chunk.len().next_multiple_of(8);
        frames.extend_from_slice(&u32::try_from(body).unwrap_or(u32::MAX).to_le_bytes());
        frames.extend_from_slice(&[0; 4]);
        frames.extend_from_slice(chunk);
        frames.resize(frames.len() + body - chunk.len(), 0);
    }
    let header = SegmentHeader {
        log_id: [pick; 16],
        index: u64::from(pick),
        first_seq: u64::from(pick) * 10,
        capacity: (SEGMENT_HEADER_LEN + frames.len()) as u64,
        incompat_features: CHUNK_RECORDS,
    };
    let mut logical = header.encode().to_vec();
    logical.extend_from_slice(&frames);
    let packed = compress(&logical, 4096, 1)
        .expect("compresses")
        .expect("a plain segment whose capacity is its length");
    assert_eq!(decompress(&packed, path).expect("decompresses"), logical);

    let at = (usize::from(pick) * 7919 + records.len()) % packed.len();
    let mut damaged = packed.clone();
    damaged[at] ^= pick | 1;
    match decompress(&damaged, path) {
        Ok(out) => panic!("byte {at} changed, yet decompressed to {} bytes", out.len()),
        Err(error) => assert!(
            matches!(error.code(), "CORRUPT" | "FORMAT_VERSION"),
            "byte {at}: {error}"
        ),
    }
});
