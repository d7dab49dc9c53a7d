//! Recovery from arbitrary bytes (log-format.md §7, RCV-*): the input is the last segment
//! of a log, after a valid header (of version 1 records or of compact records, §4.2) or
//! whole, with or without an index or a limit beside it.
//! A reader and a writer open it; neither may panic. A reader returns only events that are
//! the segment's own records, in order; when the writer's recovery accepts the log, every
//! event the reader returned is still there, identical, and the writer keeps exactly the
//! events the reader could read when the reader read them all without an error (damage is
//! never taken for the end of the log).
#![no_main]

#[path = "common/scratch.rs"]
mod scratch;

use libfuzzer_sys::fuzz_target;
use surfacelog::internals::event::EventSource;
use surfacelog::internals::log::limit::{Limit, limit_name};
use surfacelog::internals::log::segment::{
    COMPACT_RECORDS, SEGMENT_HEADER_LEN, SegmentHeader, index_name, segment_name,
};
use surfacelog::internals::record::decode_as;
use surfacelog::internals::log::{Durability, LogOptions, LogReader, LogWriter, encode_index};

/// The log's identity in a made header.
const LOG_ID: [u8; 16] = *b"fuzz-recovery-id";
/// The capacity a made header names, and the writer's segment size.
const CAPACITY: u64 = 64 << 10;

// The flags byte: 1 the input is the whole file (no made header); 2 an index built from
// the records found; 4 a limit at one of them; 8 the file padded with zeros to its
// capacity; bits 4..7 pick the record the index or limit stops at; 128 the made header
// sets `COMPACT_RECORDS` (§4.2).
fuzz_target!(|bytes: &[u8]| {
    let Some((&flags, body)) = bytes.split_first() else {
        return;
    };
    let dir = scratch::base("recovery").join("log");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();

    let header = SegmentHeader {
        log_id: LOG_ID,
        index: 0,
        first_seq: 0,
        capacity: CAPACITY,
        incompat_features: if flags & 128 == 128 { COMPACT_RECORDS } else { 0 },
    };
    let mut file = if flags & 1 == 1 {
        body.to_vec()
    } else {
        let mut file = header.encode().to_vec();
        file.extend_from_slice(body);
        file
    };
    // The events a sequential decode finds after the header, each with its record's
    // offset and end (a run's members share them, IDX-1): what a reader may return.
    let mut records: Vec<(u32, u32, String)> = Vec::new();
    if let Ok(found) = SegmentHeader::decode(&file) {
        let mut at = SEGMENT_HEADER_LEN;
        while let Ok((record, len)) = decode_as(found.format(), &file[at..]) {
            let next = found.first_seq + records.len() as u64;
            if record.first_seq() != next {
                break;
            }
            for seq in next..record.seq_end() {
                let Some(event) = record.event(seq) else {
                    break;
                };
                records.push((at as u32, (at + len) as u32, event.text().into_owned()));
            }
            at += len;
        }
    }
    if flags & 8 == 8 && (file.len() as u64) < CAPACITY {
        file.resize(CAPACITY as usize, 0);
    }
    std::fs::write(dir.join(segment_name(0)), &file).unwrap();
    // An index or a limit stops at a record's last event (IDX-2, LIM-3): the last
    // member of a run.
    let ends: Vec<usize> = (0..records.len())
        .filter(|&i| records.get(i + 1).is_none_or(|next| next.0 != records[i].0))
        .collect();
    let pick = usize::from((flags >> 4) & 7);
    if flags & 2 == 2 && !ends.is_empty() {
        let last = ends[pick % ends.len()];
        let offsets: Vec<u32> = records[..=last].iter().map(|r| r.0).collect();
        let end = records[last].1;
        let crc = crc32c(&file[SEGMENT_HEADER_LEN..end as usize]);
        let index = encode_index(&LOG_ID, 0, &offsets, end, crc);
        std::fs::write(dir.join(index_name(0)), index).unwrap();
    }
    if flags & 4 == 4 && !ends.is_empty() {
        let last = ends[pick % ends.len()];
        let limit = Limit {
            log_id: LOG_ID,
            first_seq: 0,
            seq_next: last as u64 + 1,
            last_offset: records[last].0,
            end: records[last].1,
        };
        std::fs::write(dir.join(limit_name(0)), limit.encode()).unwrap();
    }

    // The reader first: it changes nothing.
    let mut seen: Vec<String> = Vec::new();
    let mut read_all = false;
    if let Ok(reader) = LogReader::open(&dir) {
        read_all = true;
        for seq in 0..reader.seq_next() {
            match reader.event(seq) {
                Ok(Some(event)) => {
                    let own = records.get(seq as usize).map(|r| r.2.as_str());
                    assert_eq!(
                        Some(&*event.text()),
                        own,
                        "the reader returned seq {seq}, which is not the segment's"
                    );
                    seen.push(event.text().into_owned());
                }
                Ok(None) => panic!("seq {seq} below seq_next {} is missing", reader.seq_next()),
                Err(_) => {
                    read_all = false;
                    break;
                }
            }
        }
    }

    let options = LogOptions {
        segment_bytes: CAPACITY,
        durability: Durability::Manual,
        ..LogOptions::default()
    };
    let Ok((writer, _report)) = LogWriter::open(&dir, options) else {
        return;
    };
    let kept = writer.seq_next();
    drop(writer);
    assert!(
        kept >= seen.len() as u64,
        "recovery kept {kept} events, the reader had returned {}",
        seen.len()
    );
    if read_all && flags & 4 == 0 {
        assert_eq!(
            kept,
            seen.len() as u64,
            "the reader took damage for the end of the log"
        );
    }
    let reader = LogReader::open(&dir).expect("a recovered log opens");
    assert_eq!(reader.seq_next(), kept);
    for (seq, text) in seen.iter().enumerate() {
        let event = reader
            .event(seq as u64)
            .expect("a recovered event reads")
            .expect("kept");
        assert_eq!(event.text(), text.as_str(), "seq {seq} changed by recovery");
    }
});

fn crc32c(bytes: &[u8]) -> u32 {
    // CRC-32C (Castagnoli), bitwise: only the index's data checksum needs it here.
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
