//! What the DSH Zstandard tests build their logs from (`dsh-formats.md` §6): a session
//! header record, and a block header written by hand (ZST-9), so that a test can make
//! frames a compressor never writes (torn, refused, of raw blocks), and how they read one.
#![allow(dead_code, reason = "each test uses what it needs")]

use surfacelog::internals::adapters::jsonl::JsonlReader;

/// The header record of session `b1`, with its line feed.
pub const HEADER: &[u8] =
    b"{\"type\":\"session\",\"version\":0,\"id\":\"b1\",\"createdAt\":5,\"delegationDepth\":0}\n";

/// The 3 bytes of a block header (ZST-9): `last`, the block type `kind` (0 raw, 1 RLE,
/// 2 compressed) and `size`.
pub fn block(last: bool, kind: u32, size: u32) -> [u8; 3] {
    let v = u32::from(last) | kind << 1 | size << 3;
    let [low, mid, high, _] = v.to_le_bytes();
    [low, mid, high]
}

/// The seqs (their text) of the events `reader` hands out, in order, and how its read
/// ended.
pub fn seqs_read(reader: JsonlReader) -> (Vec<String>, surfacelog::Result<()>) {
    let mut seqs = Vec::new();
    let scan = reader.read_events(
        &mut |e| {
            seqs.push(e.root().get("seq").unwrap().raw().to_owned());
            Ok(())
        },
        &mut |_| {},
    );
    (seqs, scan.map(drop))
}
