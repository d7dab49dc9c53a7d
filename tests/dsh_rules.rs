//! DSH import rules, each broken before its fix, or checked (`dsh-formats.md`): a decoder
//! error in a torn last Zstandard frame yields no record of it, a frame cut where the input
//! ends keeps what its complete blocks hold (ZST-16), and a log under a project directory
//! its header's `cwd` does not name is refused (DIR-9).

#![cfg(feature = "dsh")]

use std::io::Write;
use std::path::Path;

use surfacelog::internals::adapters::jsonl::{Compression, JsonlReader};
use surfacelog::{DshSource, VerbatimStore};

#[path = "common/zstd_frames.rs"]
mod zstd_frames;
use zstd_frames::{HEADER, block};

/// One Zstandard frame (checksum on) of `plain`.
fn frame(plain: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = zstd::stream::write::Encoder::new(&mut out, 3).unwrap();
    encoder.include_checksum(true).unwrap();
    encoder.write_all(plain).unwrap();
    encoder.finish().unwrap();
    out
}

/// Counts the events a read of `bytes` (Zstandard JSONL) hands out, with its scan.
fn read_zstd(
    dir: &Path,
    bytes: &[u8],
) -> (
    u64,
    surfacelog::Result<surfacelog::internals::adapters::jsonl::Scan>,
) {
    let path = dir.join("session.jsonl.zstd");
    std::fs::write(&path, bytes).unwrap();
    let reader = JsonlReader::open(&path, Compression::Zstd).unwrap();
    let mut count = 0;
    let scan = reader.read_events(
        &mut |_| {
            count += 1;
            Ok(())
        },
        &mut |_| {},
    );
    (count, scan)
}

/// ZST-16: "A decoder error yields no output." A torn last frame whose first block (raw,
/// 200 whole records) decodes but whose second block is not a valid compressed block must
/// give no records: the reference's flush-mode decompression throws and keeps nothing,
/// truncates at the torn frame's start and imports only the complete frames.
#[test]
fn zstd_torn_frame_with_a_decoder_error_yields_no_records() {
    let dir = tempfile::tempdir().unwrap();
    let mut records =
        b"{\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{\"turn\":1}}\n".to_vec();
    for seq in 1..200 {
        records.extend_from_slice(
            format!(
                "{{\"type\":\"session/title\",\"seq\":{seq},\"time\":1,\"data\":{{\"title\":\"{}\"}}}}\n",
                "t".repeat(100)
            )
            .as_bytes(),
        );
    }
    let header = frame(HEADER);
    let mut file = header.clone();
    file.extend_from_slice(&[0x28, 0xB5, 0x2F, 0xFD, 0x04, 0x58]);
    file.extend_from_slice(&block(false, 0, u32::try_from(records.len()).unwrap()));
    file.extend_from_slice(&records);
    // A compressed block of garbage: complete, but it fails to decode.
    file.extend_from_slice(&block(false, 2, 10));
    file.extend_from_slice(&[0xFF; 10]);
    // The file ends inside the last block: the frame is torn (ZST-9).
    file.extend_from_slice(&block(true, 0, 5));
    file.extend_from_slice(b"ab");
    let (count, scan) = read_zstd(dir.path(), &file);
    let scan = scan.unwrap();
    assert_eq!(
        count, 0,
        "records decoded before the decoder error are kept"
    );
    assert_eq!(scan.events, 0);
    assert_eq!(scan.torn.unwrap().offset, header.len() as u64);
}

/// DIR-9: "the path built from the header's `cwd` and `id` (DIR-1) is the path that was
/// read". A log whose header has `cwd` `/home/u/proj` lives under `--home-u-proj--`; the
/// same log under another project directory is refused by the reference (checklist 49),
/// so `import_dsh` must report it in `refused`, not import it.
#[test]
fn import_dsh_refuses_a_log_under_a_project_its_cwd_does_not_name() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("dsh");
    let log = |project: &str, id: &str, cwd: Option<&str>| {
        let session = root.join(project).join(id);
        std::fs::create_dir_all(&session).unwrap();
        let cwd = cwd.map(|c| format!(",\"cwd\":\"{c}\"")).unwrap_or_default();
        std::fs::write(
            session.join("session.jsonl"),
            format!(
                "{{\"type\":\"session\",\"version\":0,\"id\":\"{id}\",\"createdAt\":1{cwd},\"delegationDepth\":0}}\n\
                 {{\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{{\"turn\":1}}}}\n"
            ),
        )
        .unwrap();
    };
    log("--home-u-proj--", "good", Some("/home/u/proj"));
    log("_no-cwd", "nocwd", None);
    log("--elsewhere--", "moved", Some("/home/u/proj"));
    log("--workspace--", "nocwdmoved", None);
    let store = VerbatimStore::new(dir.path().join("store"));
    let report = store.import_dsh(&DshSource::Jsonl(root)).unwrap();
    let mut imported = report.imported.clone();
    imported.sort();
    assert_eq!(imported, ["good", "nocwd"], "refused: {:?}", report.refused);
    let mut refused: Vec<_> = report
        .refused
        .iter()
        .map(|r| (r.id.clone().unwrap_or_default(), r.error.code()))
        .collect();
    refused.sort();
    assert_eq!(
        refused,
        [
            ("moved".to_owned(), "CORRUPT"),
            ("nocwdmoved".to_owned(), "CORRUPT")
        ]
    );
}

/// The end offsets of the blocks of `frame` (checksum on, single frame).
fn block_ends(frame: &[u8]) -> Vec<usize> {
    let fhd = frame[4];
    let single = fhd & 0x20 != 0;
    let dict = [0, 1, 2, 4][usize::from(fhd & 3)];
    let fcs = match fhd >> 6 {
        0 => usize::from(single),
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let mut at = 5 + usize::from(!single) + dict + fcs;
    let mut ends = Vec::new();
    loop {
        let h =
            u32::from(frame[at]) | u32::from(frame[at + 1]) << 8 | u32::from(frame[at + 2]) << 16;
        let size = (h >> 3) as usize;
        let payload = if (h >> 1) & 3 == 1 { 1 } else { size };
        at += 3 + payload;
        ends.push(at);
        if h & 1 != 0 {
            break;
        }
    }
    ends
}

/// The records read from `bytes` as a Zstandard log, and whether a torn tail was dropped.
fn count(dir: &std::path::Path, bytes: &[u8]) -> (u64, bool) {
    let path = dir.join("session.jsonl.zstd");
    std::fs::write(&path, bytes).unwrap();
    let reader = JsonlReader::open(&path, Compression::Zstd).unwrap();
    let mut n = 0;
    let scan = reader.read_events(
        &mut |_| {
            n += 1;
            Ok(())
        },
        &mut |_| {},
    );
    (n, scan.is_ok_and(|s| s.torn.is_some()))
}

/// ZST-16: a torn last frame cut where the input ends (not a decoder error) keeps the
/// complete records its decodable blocks hold, and nothing of a block cut short.
#[test]
fn a_torn_frame_cut_at_the_end_of_input_keeps_the_records_of_its_decodable_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let mut records =
        b"{\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{\"turn\":1}}\n".to_vec();
    let mut seq = 1u64;
    while records.len() < 600 << 10 {
        records.extend_from_slice(
            format!(
                "{{\"type\":\"session/title\",\"seq\":{seq},\"time\":1,\"data\":{{\"title\":\"{seq:x}{}\"}}}}\n",
                "t".repeat(usize::try_from(seq * 7919 % 300).unwrap())
            )
            .as_bytes(),
        );
        seq += 1;
    }
    let total = seq;
    let header = frame(HEADER);
    let body = frame(&records);
    let ends = block_ends(&body);
    assert!(ends.len() >= 3, "{ends:?}");
    let with = |cut: usize| {
        let mut file = header.clone();
        file.extend_from_slice(&body[..cut]);
        count(dir.path(), &file)
    };
    // Complete: every record.
    assert_eq!(with(body.len()), (total, false));
    // Cut inside the checksum: every record (checklist 46).
    assert_eq!(with(body.len() - 2), (total, true));
    // Cut right after the first and second blocks: their complete records (checklist 45).
    for &end in &ends[..2] {
        let (n, torn) = with(end);
        assert!(torn);
        assert!(n > 0 && n < total, "cut at {end}: {n} of {total}");
    }
    // Cut inside the first block: nothing.
    assert_eq!(with(ends[0] - 5), (0, true));
}
