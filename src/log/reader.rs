//! Reading a log: any number of readers, in any process, alongside one writer (§6).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;

use super::index;
use super::map::map;
use super::scan::{Stop, scan};
use super::segment::{
    HeaderError, LogId, SEGMENT_HEADER_LEN, SegmentHeader, index_name, parse_segment_name,
    version_error,
};
use crate::error::{Error, ErrorKind, Result};
use crate::event::{EventRef, EventSource};
use crate::record::decode;
use crate::storage::{FsStorage, Storage};

/// A read-only view of a log: the committed prefix as of the last [`LogReader::refresh`].
///
/// Sealed segments are read through their maps without copying; every read checks the
/// record's checksum again (REC-4), so a reader never returns a partial record.
#[derive(Debug)]
pub struct LogReader {
    dir: PathBuf,
    storage: Arc<dyn Storage>,
    /// Offsets of a segment already scanned by this process's writer: (first seq,
    /// offsets, end). Taken instead of scanning that segment again.
    seed: Option<(u64, Vec<u32>, usize)>,
    log_id: LogId,
    segments: Vec<Segment>,
    seq_next: u64,
}

#[derive(Debug)]
struct Segment {
    header: SegmentHeader,
    path: PathBuf,
    map: Mmap,
    /// Offsets of the records read so far.
    offsets: Vec<u32>,
    /// Just past the last record read so far.
    end: usize,
}

impl LogReader {
    /// Opens the log in `dir` for reading.
    ///
    /// # Errors
    /// `CORRUPT` for a damaged sealed segment or a broken segment chain (LOG-2, SEG-3,
    /// RCV-6), `FORMAT_VERSION`, `IO`.
    pub fn open(dir: &Path) -> Result<Self> {
        Self::open_with(dir, Arc::new(FsStorage))
    }

    /// [`LogReader::open`] through a given storage.
    ///
    /// # Errors
    /// As [`LogReader::open`].
    pub fn open_with(dir: &Path, storage: Arc<dyn Storage>) -> Result<Self> {
        Self::open_seeded(dir, storage, None)
    }

    /// [`LogReader::open_with`], taking the offsets of the segment starting at `seed.0`
    /// from the writer that just recovered it instead of scanning it again.
    ///
    /// # Errors
    /// As [`LogReader::open`].
    pub(crate) fn open_seeded(
        dir: &Path,
        storage: Arc<dyn Storage>,
        seed: Option<(u64, Vec<u32>, usize)>,
    ) -> Result<Self> {
        let mut reader = Self {
            dir: dir.to_owned(),
            storage,
            seed,
            log_id: [0; 16],
            segments: Vec::new(),
            seq_next: 0,
        };
        reader.refresh()?;
        Ok(reader)
    }

    /// Picks up records committed since the last refresh, including new segments.
    /// Returns the new `seq_next`. Cost: proportional to the new records.
    ///
    /// # Errors
    /// As [`LogReader::open`].
    pub fn refresh(&mut self) -> Result<u64> {
        loop {
            if let Some(last) = self.segments.last_mut() {
                let found = scan(&last.map, last.end, self.seq_next);
                last.offsets.extend_from_slice(&found.offsets);
                last.end = found.end;
                self.seq_next = found.seq_next;
                // Not yet written or being written (RD-1); or a segment with no record yet,
                // which the writer has not rolled from.
                if !matches!(found.stop, Stop::End | Stop::Full) || last.offsets.is_empty() {
                    return Ok(self.seq_next);
                }
            }
            // The last segment ends here; the writer may have rolled (RD-2).
            if !self.open_next_segment()? {
                return Ok(self.seq_next);
            }
        }
    }

    /// The directory of the log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Iterates the events from `seq` to the end of what this reader has seen.
    pub fn iter_from(&self, seq: u64) -> impl Iterator<Item = EventRef<'_>> + '_ {
        (seq..self.seq_next).map_while(|seq| self.event(seq))
    }

    /// The segments holding the first `len` events, in order: each segment's path, its
    /// bytes, and the offset just past the last of those events in it. For a fork: all
    /// but the last can be shared as they are; the last is cut at that offset.
    pub(crate) fn prefix_segments(&self, len: u64) -> Vec<(&Path, &[u8], usize)> {
        let len = len.min(self.seq_next);
        let mut parts = Vec::new();
        for segment in &self.segments {
            let first = segment.header.first_seq;
            if first >= len && !(len == 0 && first == 0) {
                break;
            }
            let count = usize::try_from(len - first)
                .unwrap_or(usize::MAX)
                .min(segment.offsets.len());
            let end = match count
                .checked_sub(1)
                .and_then(|last| segment.offsets.get(last))
            {
                Some(&at) => segment
                    .map
                    .get(at as usize..)
                    .and_then(|rest| decode(rest).ok())
                    .map_or(SEGMENT_HEADER_LEN, |(_, frame)| at as usize + frame),
                None => SEGMENT_HEADER_LEN,
            };
            parts.push((segment.path.as_path(), &segment.map[..], end));
        }
        parts
    }

    /// Opens the segment after the last one if its file exists with a valid header.
    /// A next file whose header is not written yet is not there yet (the writer is
    /// creating it, SEG-6).
    fn open_next_segment(&mut self) -> Result<bool> {
        let expected_index = self.segments.last().map_or(0, |s| s.header.index + 1);
        let first_seq = self.seq_next;
        let path = self.dir.join(super::segment::segment_name(first_seq));
        let Ok(file) = self.storage.open_file(&path, false) else {
            if expected_index == 0 {
                return Err(corrupt(&path, 0, "the log has no first segment"));
            }
            return Ok(false);
        };
        let map = map(&file).map_err(|e| Error::io("mmap", &path, &e))?;
        let header = match SegmentHeader::decode(&map) {
            Ok(header) => header,
            Err(HeaderError::Version(found)) => return Err(version_error(found)),
            // Being created (SEG-6): not there yet, unless later segments exist.
            Err(HeaderError::Invalid(reason)) => {
                return if self.later_segment_exists(first_seq)? {
                    Err(corrupt(&path, 0, reason))
                } else {
                    Ok(false)
                };
            }
        };
        if expected_index == 0 {
            self.log_id = header.log_id;
        }
        if header.log_id != self.log_id
            || header.index != expected_index
            || header.first_seq != first_seq
        {
            return Err(corrupt(
                &path,
                0,
                "segment does not continue the log (SEG-3)",
            ));
        }
        let mut segment = Segment {
            header,
            path,
            map,
            offsets: Vec::new(),
            end: SEGMENT_HEADER_LEN,
        };
        match self.seed.take() {
            Some((seed_first, offsets, end)) if seed_first == first_seq => {
                segment.offsets = offsets;
                segment.end = end;
            }
            other => {
                self.seed = other;
                self.load_index(&mut segment);
            }
        }
        self.seq_next = first_seq + segment.offsets.len() as u64;
        self.segments.push(segment);
        Ok(true)
    }

    /// `true` when a segment file starting after `first_seq` exists.
    fn later_segment_exists(&self, first_seq: u64) -> Result<bool> {
        let names = self
            .storage
            .list_dir(&self.dir)
            .map_err(|e| Error::io("list", &self.dir, &e))?;
        Ok(names
            .iter()
            .filter_map(|n| parse_segment_name(n))
            .any(|first| first > first_seq))
    }

    /// Takes a sealed segment's offsets from its index when it checks out (IDX-2).
    fn load_index(&self, segment: &mut Segment) {
        let path = self.dir.join(index_name(segment.header.first_seq));
        if let Some((offsets, end)) =
            index::load(&path, &segment.map, &self.log_id, segment.header.first_seq)
        {
            segment.offsets = offsets;
            segment.end = end;
        }
    }
}

impl EventSource for LogReader {
    fn seq_next(&self) -> u64 {
        self.seq_next
    }

    fn event(&self, seq: u64) -> Option<EventRef<'_>> {
        if seq >= self.seq_next {
            return None;
        }
        let at = self
            .segments
            .partition_point(|s| s.header.first_seq <= seq)
            .checked_sub(1)?;
        let segment = self.segments.get(at)?;
        let index = usize::try_from(seq - segment.header.first_seq).ok()?;
        let offset = *segment.offsets.get(index)? as usize;
        let (event, _) = decode(segment.map.get(offset..)?).ok()?;
        debug_assert_eq!(
            event.seq,
            seq,
            "offset table points at the wrong record in {}",
            segment.path.display()
        );
        Some(event)
    }
}

/// `CORRUPT` at a file and offset.
pub(crate) fn corrupt(path: &Path, offset: usize, reason: &str) -> Error {
    ErrorKind::Corrupt {
        location: format!("{} offset={offset}", path.display()),
        reason: reason.to_owned(),
    }
    .into()
}
