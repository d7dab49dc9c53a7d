//! Memory of the Zstandard JSONL reader on huge frames: a torn frame that stands for
//! gigabytes of text goes to the scanner a piece at a time, bounded by the record limit
//! (ZST-16), and a complete frame is never held whole (both were, before the fix). Alone
//! in their file, and one at a time, because they read the process's peak resident size
//! (`VmHWM`), reset before each read.

#![cfg(all(feature = "dsh", target_os = "linux"))]

use std::path::Path;

use surfacelog::internals::adapters::jsonl::{Compression, JsonlReader};

#[path = "common/zstd_frames.rs"]
mod zstd_frames;
use zstd_frames::{HEADER, block};

const MIB: u64 = 1 << 20;

#[path = "common/peak.rs"]
mod peak;
use peak::{peak_rss, reset_peak};

fn header_frame() -> Vec<u8> {
    zstd::stream::encode_all(HEADER, 3).unwrap()
}

/// Reads `bytes` as a Zstandard JSONL log; returns the growth of the peak resident set
/// and whether the read succeeded.
fn read(dir: &Path, bytes: &[u8]) -> (u64, bool) {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _alone = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let path = dir.join("session.jsonl.zstd");
    std::fs::write(&path, bytes).unwrap();
    let before = reset_peak();
    let reader = JsonlReader::open(&path, Compression::Zstd).unwrap();
    let ok = reader.read_events(&mut |_| Ok(()), &mut |_| {}).is_ok();
    (peak_rss().saturating_sub(before), ok)
}

/// A torn last frame of 64 KiB whose RLE blocks stand for 2 GiB of plaintext (one record
/// that never ends): the reader must not hold that plaintext. Every record it could keep is
/// at most `RECORD_BYTES_MAX` (64 MiB) long, so its memory stays well under 512 MiB.
#[test]
fn a_torn_frame_is_not_decompressed_whole_into_memory() {
    let dir = tempfile::tempdir().unwrap();
    let mut file = header_frame();
    file.extend_from_slice(&[0x28, 0xB5, 0x2F, 0xFD, 0x04, 0x58]);
    let first = b"{\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{\"turn\":1}}\n{\"type\":\"x\",\"seq\":1,\"time\":1,\"data\":\"";
    file.extend_from_slice(&block(false, 0, u32::try_from(first.len()).unwrap()));
    file.extend_from_slice(first);
    for _ in 0..16384 {
        file.extend_from_slice(&block(false, 1, 128 << 10));
        file.push(b'a');
    }
    // No last block, no checksum: the frame is torn (ZST-9).
    assert!(file.len() < 72 << 10);
    let (growth, _) = read(dir.path(), &file);
    assert!(
        growth < 512 * MIB,
        "peak resident set grew by {} MiB",
        growth / MIB
    );
}

/// A complete frame of 256 MiB (raw blocks, one record that never ends) is not read whole
/// into memory before it is decoded (it was before the fix, so the 64 MiB record limit
/// came too late): its blocks are skipped, then decoded from the file.
#[test]
fn a_huge_complete_frame_is_not_read_whole_into_memory() {
    let dir = tempfile::tempdir().unwrap();
    let mut file = header_frame();
    // No checksum, not single segment, window 2 MiB.
    file.extend_from_slice(&[0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x58]);
    let first = b"{\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{\"turn\":1}}\n{\"type\":\"x\",\"seq\":1,\"time\":1,\"data\":\"";
    file.extend_from_slice(&block(false, 0, u32::try_from(first.len()).unwrap()));
    file.extend_from_slice(first);
    let payload = vec![b'a'; 128 << 10];
    let blocks = 2048; // 256 MiB
    for i in 0..blocks {
        file.extend_from_slice(&block(i == blocks - 1, 0, 128 << 10));
        file.extend_from_slice(&payload);
    }
    let file_len = file.len() as u64;
    let (growth, ok) = read(dir.path(), &file);
    drop(file);
    assert!(!ok, "a record longer than the limit is refused");
    assert!(
        growth < file_len / 2,
        "peak resident set grew by {} MiB for a {} MiB file",
        growth / MIB,
        file_len / MIB
    );
}
