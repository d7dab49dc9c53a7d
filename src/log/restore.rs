//! DUR-12: a log taken back to where it was before an append that failed with its fate
//! unknown (DUR-10), for a caller that promises "a failed write leaves storage unchanged"
//! (the verbatim store, `verbatim-store.md` VBT-6).
#![deny(clippy::indexing_slicing)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::index::{INDEX_HEADER_LEN, listed_count};
use super::reader::{corrupt, read_error};
use super::scan::{FileBytes, Source, nonzero_end, read_range, scan};
use super::segment::{
    LogId, SEGMENT_HEADER_LEN, SegmentHeader, index_name, parse_first_seq, parse_segment_name,
    seq_file_path,
};
use super::writer::{data_regions, stop_offset};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::record::decode_as;
use crate::storage::Storage;

/// The largest write of zeros a restore makes (step 3).
const ZEROS_MAX: usize = 64 << 10;

/// What the failed batch left in one segment, to be undone.
#[derive(Debug)]
struct Left {
    path: PathBuf,
    first_seq: u64,
    /// The log's identity, from the segment's header (SEG-1).
    log_id: LogId,
    /// Where the batch's bytes start in it: after the records kept.
    from: usize,
    /// Just past its last non-zero byte.
    to: usize,
}

/// DUR-12: takes the log in `dir` back to its first `seq_next` events after an append of
/// `batch` (whose first event has seq `seq_next`) failed. The caller holds the log's lock
/// through the failed writer, so nothing else wrote since; still, every record found at or
/// after `seq_next` must be the batch's event of that seq, and the records before it must
/// all be there, or nothing is changed (`CORRUPT`).
///
/// Steps, each durable before the next, so that a crash between them leaves a log that
/// recovery (§7) opens with the events before `seq_next` and, of the batch, a prefix
/// (the outcome DUR-10 allows after a failure): segments that begin at or after
/// `seq_next` removed one at a time, the last first, each with its index and followed by a
/// directory sync; the index of the kept last segment removed, and the directory synced,
/// when it may list the batch's records (it would make them a durable mark, RCV-13, once
/// zeroed); the batch's bytes in that segment overwritten with zeros (the file keeps its
/// length, SEG-8) and synced.
///
/// # Errors
/// `CORRUPT` when the log does not hold the events before `seq_next` or holds an event the
/// batch does not; `IO`.
pub(crate) fn restore(
    storage: &dyn Storage,
    dir: &Path,
    seq_next: u64,
    batch: &[Event],
) -> Result<()> {
    let names = storage
        .list_dir(dir)
        .map_err(|e| Error::io("list", dir, &e))?;
    let mut firsts: Vec<u64> = names.iter().filter_map(|n| parse_segment_name(n)).collect();
    firsts.sort_unstable();
    let limits: BTreeSet<u64> = names
        .iter()
        .filter_map(|n| parse_first_seq(n.strip_suffix(".lim")?))
        .collect();
    let mut keep = firsts
        .iter()
        .rposition(|&first| first < seq_next || first == 0)
        .ok_or_else(|| corrupt(dir, 0, "no segment holds the log's first events (DUR-12)"))?;
    // CZ-6: a compressed segment is sealed whole, before every append of this writer, and
    // never the last: the segment after it, which begins at `seq_next`, is kept (emptied of
    // the batch) instead of removed.
    if let Some(&first) = firsts.get(keep)
        && is_compressed_segment(storage, &seq_file_path(dir, first, ".seg"))
        && firsts.get(keep + 1) == Some(&seq_next)
    {
        keep += 1;
    }
    let (kept, later) = firsts.split_at(keep + 1);
    // Checked first, changed after: a refusal changes nothing.
    let mut removed = Vec::new();
    for &first in later {
        let path = seq_file_path(dir, first, ".seg");
        if limits.contains(&first) {
            return Err(corrupt(
                &path,
                0,
                "a fork's limited segment after the restored end (DUR-12)",
            ));
        }
        batch_records(storage, &path, first, seq_next, batch, true)?;
        removed.push(first);
    }
    let first = kept.last().copied().unwrap_or_default();
    let left = if limits.contains(&first) {
        // A limited segment is never appended to (LIM-4): the batch began after it.
        None
    } else {
        let path = seq_file_path(dir, first, ".seg");
        batch_records(storage, &path, first, seq_next, batch, false)?
    };
    // One at a time, each removal durable before the next: a crash keeps a prefix of the
    // chain (LOG-2), never a segment after a gap, nor the index of a segment removed (its
    // records would be lost durable records to every open, LOG-2), so the index goes first.
    for &first in removed.iter().rev() {
        for path in [
            seq_file_path(dir, first, ".idx"),
            seq_file_path(dir, first, ".seg"),
        ] {
            remove(storage, &path)?;
            sync_dir(storage, dir)?;
        }
    }
    if let Some(left) = left {
        let index = dir.join(index_name(left.first_seq));
        if lists_past(storage, &index, &left, seq_next) {
            remove(storage, &index)?;
            sync_dir(storage, dir)?;
        }
        let file = storage
            .open_file(&left.path, true)
            .map_err(|e| Error::io("open", &left.path, &e))?;
        // In steps of at most 64 KiB: the bytes may run to the segment's capacity.
        let zeros = vec![0; (left.to - left.from).min(ZEROS_MAX)];
        let mut at = left.from;
        while at < left.to {
            let step = zeros
                .get(..(left.to - at).min(zeros.len()))
                .unwrap_or_default();
            storage
                .write_at(&file, at as u64, step)
                .map_err(|e| Error::io("write", &left.path, &e))?;
            at += step.len();
        }
        storage
            .sync_data(&file)
            .map_err(|e| Error::io("fsync", &left.path, &e))?;
    }
    Ok(())
}

/// The batch's part of segment `path` (starting at seq `first`): `None` when it holds
/// nothing at or after seq `seq_next` (no record, no stray byte). Every record at or after
/// `seq_next` must be the batch's event of that seq; the records before `seq_next` in it
/// must all check out (REC-4). A segment `after` the restored end whose header does not
/// check out holds no record any reader takes (SEG-2): the failed writer created it and
/// was stopped before its header was written whole; it is removed whole like the others.
///
/// # Errors
/// `CORRUPT` for a header that does not check out, a missing event before `seq_next`, or
/// an event the batch does not hold; `IO`.
fn batch_records(
    storage: &dyn Storage,
    path: &Path,
    first: u64,
    seq_next: u64,
    batch: &[Event],
    after: bool,
) -> Result<Option<Left>> {
    let file = storage
        .open_file(path, false)
        .map_err(|e| Error::io("open", path, &e))?;
    let len = file
        .metadata()
        .map_err(|e| Error::io("stat", path, &e))?
        .len();
    let source = FileBytes {
        file: &file,
        len: usize::try_from(len).unwrap_or(usize::MAX),
    };
    let mut header = [0; SEGMENT_HEADER_LEN];
    let decoded = if len >= SEGMENT_HEADER_LEN as u64 {
        source
            .read_at(0, &mut header)
            .map_err(|e| read_error(path, 0, &e))?;
        SegmentHeader::decode(&header)
            .ok()
            .filter(|header| header.first_seq == first)
    } else {
        None
    };
    let Some(header) = decoded else {
        if after {
            return Ok(None);
        }
        return Err(corrupt(
            path,
            0,
            "a segment header that does not check out (DUR-12)",
        ));
    };
    let format = header.format();
    let found =
        scan(&source, format, SEGMENT_HEADER_LEN, first).map_err(|e| read_error(path, 0, &e))?;
    if found.seq_next < seq_next {
        return Err(corrupt(
            path,
            stop_offset(found.stop, found.end),
            &format!(
                "event {} of the log is not there to restore to (DUR-12)",
                found.seq_next
            ),
        ));
    }
    let batch_end = seq_next.saturating_add(batch.len() as u64);
    if found.seq_next > batch_end {
        return Err(corrupt(
            path,
            found.end,
            &format!(
                "the log holds events at or after {batch_end}, past the failed batch's (DUR-12)"
            ),
        ));
    }
    // Where the batch's records start: after the records before `seq_next`.
    let skip = usize::try_from(seq_next.saturating_sub(first)).unwrap_or(usize::MAX);
    let offsets = found.offsets.get(skip..).unwrap_or_default();
    let from = offsets.first().map_or(found.end, |&at| at as usize);
    // The batch's first record starts at its first seq: a record holding events of two
    // appends (a compact run across them, §4.2) is no failed batch's to take back.
    if skip > 0 && found.offsets.get(skip - 1) == offsets.first() {
        return Err(corrupt(
            path,
            from,
            &format!("event {seq_next} shares a record with the event before it (DUR-12)"),
        ));
    }
    let start = first.max(seq_next);
    for (k, &at) in offsets.iter().enumerate() {
        let at = at as usize;
        let seq = start + k as u64;
        // The next record's offset: the members of a compact run share theirs.
        let next = offsets
            .get(k + 1..)
            .and_then(|rest| rest.iter().find(|&&n| n as usize != at))
            .map_or(found.end, |&n| n as usize);
        let bytes = read_range(&source, at, next).map_err(|e| read_error(path, at, &e))?;
        let expected = usize::try_from(seq - seq_next)
            .ok()
            .and_then(|i| batch.get(i));
        let same = decode_as(format, &bytes)
            .ok()
            .and_then(|(record, _)| record.event(seq))
            .zip(expected)
            .is_some_and(|(stored, event)| stored == event.as_ref());
        if !same {
            return Err(corrupt(
                path,
                at,
                &format!("event {seq} is not the failed batch's (DUR-12)"),
            ));
        }
    }
    let regions = data_regions(&file, from, source.len);
    let to = nonzero_end(&source, from, &regions).map_err(|e| read_error(path, from, &e))?;
    Ok((to > from).then(|| Left {
        path: path.to_owned(),
        first_seq: first,
        log_id: header.log_id,
        from,
        to,
    }))
}

/// Whether the segment file at `path` has a header that checks out and sets `COMPRESSED`
/// (CZ-2).
fn is_compressed_segment(storage: &dyn Storage, path: &Path) -> bool {
    storage.open_file(path, false).is_ok_and(|file| {
        SegmentHeader::decode(&super::map::read_head(&file, SEGMENT_HEADER_LEN))
            .is_ok_and(|header| super::compressed::is_compressed(&header))
    })
}

/// Whether the index file `path` of the segment `left` holds may list a record at or after
/// `seq_next`: its `count` (IDX-1) says more records than the segment keeps, or it is not
/// an index of that segment (IDX-4: a cache, removed). One that lists only kept records
/// stays: it is their durable mark (IDX-5, RCV-13). A missing one lists nothing.
fn lists_past(storage: &dyn Storage, path: &Path, left: &Left, seq_next: u64) -> bool {
    use std::io::Read;
    // The header alone: the offsets are not needed.
    let mut head = Vec::with_capacity(INDEX_HEADER_LEN);
    let read = storage
        .open_read(path)
        .and_then(|file| file.take(INDEX_HEADER_LEN as u64).read_to_end(&mut head));
    match read {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(_) => true,
        Ok(_) => listed_count(&head, &left.log_id, left.first_seq)
            .is_none_or(|count| left.first_seq.saturating_add(count as u64) > seq_next),
    }
}

/// Removes `path`; one that is not there is fine.
fn remove(storage: &dyn Storage, path: &Path) -> Result<()> {
    match storage.remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io("remove", path, &e)),
        _ => Ok(()),
    }
}

fn sync_dir(storage: &dyn Storage, dir: &Path) -> Result<()> {
    storage
        .sync_dir(dir)
        .map_err(|e| Error::io("fsync", dir, &e))
}

#[cfg(test)]
mod tests {
    #![expect(
        clippy::indexing_slicing,
        clippy::case_sensitive_file_extension_comparisons,
        reason = "tests slice their own vectors and name their own files"
    )]
    use std::path::Path;

    use super::super::scan::tests::event;
    use super::restore;
    use crate::event::Event;
    use crate::log::{Durability, LogOptions, LogReader, LogWriter};
    use crate::storage::FsStorage;

    /// Events of `seqs` whose data is `pad` bytes of padding: logs differ by `pad` alone.
    fn events(seqs: std::ops::Range<u64>, pad: usize) -> Vec<Event> {
        seqs.map(|seq| event(seq, pad)).collect()
    }

    /// Every file of `dir` with its bytes.
    fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read(&path).unwrap())
            })
            .collect();
        files.sort();
        files
    }

    /// DUR-12's steps under power loss: a log of 20 events over segments of 1 KiB, taken back
    /// to 5 events with the power going at each I/O point of the restore, on a simulated disk
    /// that drops, tears and reorders what was not synced. Recovery then opens every state
    /// the crash left, holding the first 5 events and a prefix of the others, never a
    /// segment after a gap (LOG-2) or a durable mark over zeros (RCV-13).
    #[test]
    fn a_crash_while_restoring_leaves_a_log_recovery_opens() {
        use crate::storage::sim::SimStorage;
        let options = LogOptions {
            segment_bytes: 1024,
            durability: Durability::Sync,
            ..LogOptions::default()
        };
        let all = events(0..20, 80);
        // Inside the first segment (its index lists records of the batch), and at the
        // start of the third (the kept segment's index lists kept records only, and nothing
        // of it is zeroed).
        let boundary = {
            let root = tempfile::tempdir().unwrap();
            let (writer, _) = LogWriter::open(root.path(), options.clone()).unwrap();
            writer.append(&all).unwrap();
            writer.close().unwrap();
            let mut firsts: Vec<u64> = std::fs::read_dir(root.path())
                .unwrap()
                .filter_map(|e| {
                    let name = e.unwrap().file_name().to_string_lossy().into_owned();
                    crate::log::segment::parse_segment_name(&name)
                })
                .collect();
            firsts.sort_unstable();
            firsts[2]
        };
        let mut crashes = 0;
        for seq_next in [5, boundary] {
            let back = usize::try_from(seq_next).unwrap();
            for seed in 0..24 {
                for k in 1.. {
                    let at = format!("seq_next {seq_next}, seed {seed}, point {k}");
                    let root = tempfile::tempdir().unwrap();
                    let dir = root.path().join("log");
                    let (writer, _) = LogWriter::open(&dir, options.clone()).unwrap();
                    writer.append(&all).unwrap();
                    writer.close().unwrap();
                    let sim = SimStorage::new(root.path(), seed).unwrap();
                    sim.crash_at(k);
                    let done = restore(&sim, &dir, seq_next, &all[back..]).is_ok();
                    let points = sim.points();
                    sim.crash().unwrap();
                    let (writer, _) = LogWriter::open(&dir, options.clone())
                        .unwrap_or_else(|e| panic!("{at}: {e}"));
                    drop(writer);
                    let kept = read(&dir);
                    assert!(kept.len() >= back, "{at}: {} events", kept.len());
                    assert_eq!(kept, all[..kept.len()], "{at}");
                    if done {
                        assert_eq!(kept.len(), back, "{at}");
                        assert!(points < k, "the restore ended before the power went");
                        break;
                    }
                    crashes += 1;
                }
            }
        }
        assert!(crashes > 2 * 24 * 5, "{crashes} crash points");
    }

    /// Every event of the log in `dir`, each checked (REC-4).
    fn read(dir: &Path) -> Vec<Event> {
        let reader = LogReader::open(dir).unwrap();
        reader.iter_from(0).map(|e| e.unwrap().to_event()).collect()
    }

    /// A streamed chunk of turn 1 (REC-11), so that compact records put consecutive ones of
    /// an append in one run (log-format.md §4.2).
    fn chunk(seq: u64) -> Event {
        let text = format!(
            r#"{{"type":"assistant/chunk","seq":{seq},"time":{seq},"data":{{"turn":1,"step":1,"chunk":{{"type":"text-delta","index":0,"text":"part {seq}"}}}}}}"#
        );
        let start = text.find(r#"{"turn""#).unwrap();
        let end = text.len() - 1;
        Event::new(
            text,
            start..end,
            None,
            crate::event::EventFields {
                event_type: crate::event::chunk::CHUNK_TYPE.to_owned().into(),
                seq,
                time: i64::try_from(seq).unwrap(),
                surface_op: None,
                sources: None,
                ignorable: false,
            },
        )
    }

    /// DUR-12, §4.2: in a compact log, a batch's chunks share runs of its own (REC-17): a
    /// restore to the batch's first seq takes exactly its runs back, across a roll too;
    /// one to a seq inside a run is refused and changes nothing.
    #[test]
    fn restores_a_batch_of_compact_runs() {
        for segment_bytes in [1 << 20, 700] {
            let dir = tempfile::tempdir().unwrap();
            let options = LogOptions {
                segment_bytes,
                durability: Durability::Sync,
                compact_records: true,
                ..LogOptions::default()
            };
            let all: Vec<Event> = (0..60).map(chunk).collect();
            let (writer, _) = LogWriter::open(dir.path(), options.clone()).unwrap();
            writer.append(&all[..20]).unwrap();
            writer.append(&all[20..]).unwrap();
            writer.close().unwrap();
            let before = files(dir.path());
            let error = restore(&FsStorage, dir.path(), 25, &all[25..]).unwrap_err();
            assert_eq!(error.code(), "CORRUPT", "{error}");
            assert_eq!(files(dir.path()), before);
            restore(&FsStorage, dir.path(), 20, &all[20..]).unwrap();
            assert_eq!(read(dir.path()), all[..20]);
            let (writer, report) = LogWriter::open(dir.path(), options).unwrap();
            assert!(report.torn_tail.is_none(), "{report:?}");
            assert_eq!(writer.seq_next(), 20);
            writer.append(&all[20..]).unwrap();
            writer.close().unwrap();
            assert_eq!(read(dir.path()), all);
        }
    }

    /// DUR-12's guards: a restore that would drop an event the failed batch does not
    /// hold, or that finds an event before the restored end missing, changes nothing; one
    /// over exactly the batch's events takes the log back, segments removed, and the log
    /// appends again from there.
    #[test]
    fn restores_only_the_batch() {
        let dir = tempfile::tempdir().unwrap();
        let options = LogOptions {
            segment_bytes: 1024,
            durability: Durability::Sync,
            ..LogOptions::default()
        };
        let all = events(0..30, 80);
        let (writer, _) = LogWriter::open(dir.path(), options.clone()).unwrap();
        writer.append(&all).unwrap();
        writer.close().unwrap();
        let before = files(dir.path());
        let segments = before.iter().filter(|(n, _)| n.ends_with(".seg")).count();
        assert!(segments >= 4, "{segments} segments");
        let refusals: [(u64, Vec<Event>); 3] = [
            // Another event at seq 20 than the log holds.
            (10, [&all[10..20], &events(20..30, 81)[..]].concat()),
            // The log holds events past the batch's last.
            (10, all[10..29].to_vec()),
            // Not a batch of this log's end at all.
            (40, events(40..45, 80)),
        ];
        for (seq_next, batch) in refusals {
            let error = restore(&FsStorage, dir.path(), seq_next, &batch).unwrap_err();
            assert_eq!(error.code(), "CORRUPT", "{error}");
            assert_eq!(files(dir.path()), before);
        }
        restore(&FsStorage, dir.path(), 10, &all[10..]).unwrap();
        assert_eq!(read(dir.path()), all[..10]);
        let (writer, report) = LogWriter::open(dir.path(), options).unwrap();
        assert!(report.torn_tail.is_none(), "{report:?}");
        assert_eq!(writer.seq_next(), 10);
        writer.append(&events(10..30, 82)).unwrap();
        writer.close().unwrap();
        assert_eq!(
            read(dir.path()),
            [&all[..10], &events(10..30, 82)[..]].concat()
        );
    }
}
