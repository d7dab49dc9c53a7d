//! The Zstandard JSONL reader over a file that gets shorter while it is read (a DSH
//! process repairing the log truncates it at the torn frame's start, ZST-17): `IO`, never
//! records of an earlier frame read a second time (before the fix, the second decode of
//! a torn frame sought back by the frame's length from wherever the first left the file).

#![cfg(feature = "dsh")]

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use surfacelog::internals::adapters::jsonl::{Compression, JsonlReader};

#[path = "common/zstd_frames.rs"]
mod zstd_frames;
use zstd_frames::{HEADER, block, seqs_read};

/// A frame without checksum holding `plain` in one raw block.
fn raw_frame(plain: &[u8]) -> Vec<u8> {
    let mut f = vec![0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x58];
    f.extend_from_slice(&block(true, 0, u32::try_from(plain.len()).unwrap()));
    f.extend_from_slice(plain);
    f
}

fn title(seq: u64) -> String {
    format!(
        "{{\"type\":\"session/title\",\"seq\":{seq},\"time\":1,\"data\":{{\"title\":\"t\"}}}}\n"
    )
}

/// A file whose length was `full` when it was opened, and which is cut to `cut` bytes
/// the moment the reader seeks to that length (where its structural scan leaves it
/// after finding a torn frame): another process truncated the torn frame.
struct CutAfterScan {
    data: Vec<u8>,
    full: u64,
    cut: usize,
    pos: u64,
}

impl Read for CutAfterScan {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let at = usize::try_from(self.pos).unwrap().min(self.data.len());
        let n = buf.len().min(self.data.len() - at);
        buf[..n].copy_from_slice(&self.data[at..at + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for CutAfterScan {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => {
                if p == self.full {
                    self.data.truncate(self.cut);
                }
                i128::from(p)
            }
            SeekFrom::End(d) => i128::from(self.full) + i128::from(d),
            SeekFrom::Current(d) => i128::from(self.pos) + i128::from(d),
        };
        self.pos = u64::try_from(pos)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        Ok(self.pos)
    }
}

/// [H][F1][T]: T is torn and exactly as long as F1. The torn frame is truncated away after
/// the structural scan found it. Its bytes are gone, so it yields nothing (or the read
/// fails as IO): the records of F1 must not be handed to the scanner a second time.
#[test]
fn a_torn_frame_cut_away_during_the_read_does_not_reread_the_frame_before_it() {
    let header = zstd::stream::encode_all(HEADER, 3).unwrap();
    let mut one =
        b"{\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{\"turn\":1}}\n".to_vec();
    one.extend_from_slice(title(1).as_bytes());
    one.extend_from_slice(b"{\"type\":\"turn/end\",\"seq\":2,\"time\":1,\"data\":{\"turn\":1}}\n");
    let f1 = raw_frame(&one);
    let mut more = String::new();
    for seq in 3..40 {
        more.push_str(&title(seq));
    }
    let t = raw_frame(more.as_bytes())[..f1.len()].to_vec();
    let mut data = header.clone();
    data.extend_from_slice(&f1);
    let torn_start = data.len();
    data.extend_from_slice(&t);
    let full = data.len() as u64;

    // The file as it is once cut: what the read must agree with, if it succeeds.
    let source = Box::new(CutAfterScan {
        data: data[..torn_start].to_vec(),
        full: torn_start as u64,
        cut: torn_start,
        pos: 0,
    });
    let reader = JsonlReader::from_reader(source, Path::new("cut"), Compression::Zstd).unwrap();
    let (expected, scan) = seqs_read(reader);
    scan.unwrap();
    assert_eq!(expected, ["0", "1", "2"]);

    let source = Box::new(CutAfterScan {
        data,
        full,
        cut: torn_start,
        pos: 0,
    });
    let reader = JsonlReader::from_reader(source, Path::new("cut"), Compression::Zstd).unwrap();
    let (seqs, scan) = seqs_read(reader);
    match scan {
        Ok(()) => assert_eq!(seqs, expected, "events handed out: {seqs:?}"),
        Err(e) => assert_eq!(e.code(), "IO", "{e}"),
    }
}
