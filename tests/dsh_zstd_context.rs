//! The Zstandard decoder context shared by a log's frames: frames the decoder refuses (a
//! window above the default limit, a dictionary id) are refused as with a fresh decoder
//! per frame, and a failure inside one frame leaves nothing for the next.

#![cfg(feature = "dsh")]

use std::io::Cursor;
use std::path::Path;

use surfacelog::internals::adapters::jsonl::{Compression, JsonlReader};

#[path = "common/zstd_frames.rs"]
mod zstd_frames;
use zstd_frames::{HEADER, block, seqs_read};

/// A frame with descriptor `fhd`, then `rest` of the header, one raw block of `plain`.
fn frame(fhd: u8, rest: &[u8], plain: &[u8]) -> Vec<u8> {
    let mut f = vec![0x28, 0xB5, 0x2F, 0xFD, fhd];
    f.extend_from_slice(rest);
    f.extend_from_slice(&block(true, 0, u32::try_from(plain.len()).unwrap()));
    f.extend_from_slice(plain);
    f
}

fn line(seq: u64) -> String {
    format!(
        "{{\"type\":\"session/title\",\"seq\":{seq},\"time\":1,\"data\":{{\"title\":\"t\"}}}}\n"
    )
}

fn read(data: Vec<u8>) -> (Vec<String>, Result<(), String>) {
    let source = Box::new(Cursor::new(data));
    let reader = match JsonlReader::from_reader(source, Path::new("f"), Compression::Zstd) {
        Ok(reader) => reader,
        Err(e) => return (Vec::new(), Err(e.code().to_owned())),
    };
    let (seqs, scan) = seqs_read(reader);
    (seqs, scan.map_err(|e| e.code().to_owned()))
}

fn file(frames: &[Vec<u8>]) -> Vec<u8> {
    let mut data = zstd::stream::encode_all(HEADER, 3).unwrap();
    for f in frames {
        data.extend_from_slice(f);
    }
    data
}

fn good(seq: u64) -> Vec<u8> {
    zstd::stream::encode_all(line(seq).as_bytes(), 3).unwrap()
}

#[test]
fn a_window_above_the_default_limit_is_corrupt_in_a_complete_frame() {
    // Window descriptor: exponent 18 -> 2^28, 2^31 (both above ZSTD's default 2^27).
    for wd in [0x90u8, 0xA8] {
        let big = frame(0x00, &[wd], line(1).as_bytes());
        let (seqs, out) = read(file(&[good(0), big, good(2)]));
        assert_eq!(out, Err("CORRUPT".to_owned()), "wd {wd:#x}: {seqs:?}");
    }
    // Exactly 2^27 is allowed.
    let ok = frame(0x00, &[0x88], line(1).as_bytes());
    let (seqs, out) = read(file(&[good(0), ok, good(2)]));
    assert_eq!(out, Ok(()));
    assert_eq!(seqs, ["0", "1", "2"]);
}

#[test]
fn a_frame_naming_a_dictionary_is_corrupt() {
    for (fhd, rest) in [(0x01u8, vec![0x58, 7]), (0x03, vec![0x58, 1, 2, 3, 4])] {
        let dict = frame(fhd, &rest, line(1).as_bytes());
        let (seqs, out) = read(file(&[good(0), dict, good(2)]));
        assert_eq!(out, Err("CORRUPT".to_owned()), "fhd {fhd:#x}: {seqs:?}");
    }
}

#[test]
fn a_refused_torn_frame_yields_nothing_and_the_frames_before_it_stand() {
    // Torn (no last block yet) frames the decoder refuses: nothing from them.
    let mut big = frame(0x00, &[0x90], line(1).as_bytes());
    big.truncate(big.len() - 3);
    let (seqs, out) = read(file(&[good(0), big]));
    assert_eq!((seqs, out), (vec!["0".to_owned()], Ok(())));
    let mut dict = frame(0x01, &[0x58, 7], line(1).as_bytes());
    dict.truncate(dict.len() - 3);
    let (seqs, out) = read(file(&[good(0), dict]));
    assert_eq!((seqs, out), (vec!["0".to_owned()], Ok(())));
}

#[test]
fn a_torn_raw_frame_after_many_frames_yields_its_whole_records() {
    // The torn frame's second pass follows a first pass that stopped inside it.
    let mut frames: Vec<Vec<u8>> = (0..50).map(good).collect();
    let mut plain = String::new();
    for seq in 50..60 {
        plain.push_str(&line(seq));
    }
    let mut torn = frame(0x00, &[0x58], plain.as_bytes());
    torn.truncate(torn.len() - 5);
    frames.push(torn);
    let (seqs, out) = read(file(&frames));
    assert_eq!(out, Ok(()));
    let want: Vec<String> = (0..59).map(|s| s.to_string()).collect();
    assert_eq!(seqs, want);
}

#[test]
fn a_frame_with_a_bad_checksum_is_corrupt_after_good_frames() {
    let mut frames: Vec<Vec<u8>> = (0..5).map(good).collect();
    let mut bad = frame(0x04, &[0x58], line(5).as_bytes());
    bad.extend_from_slice(&[1, 2, 3, 4]);
    frames.push(bad);
    frames.push(good(6));
    let (_, out) = read(file(&frames));
    assert_eq!(out, Err("CORRUPT".to_owned()));
}
