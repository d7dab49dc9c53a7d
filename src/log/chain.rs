//! The segment chain of a log directory: one pass over its names and segment headers
//! (LOG-1, LOG-2, SEG-2, SEG-3) and its limit files (LIM-3), shared by the writer's
//! recovery and by readers. Only headers are read: a sealed segment's records are not
//! touched at open (log-format.md §7).

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::limit::{Limit, limit_name};
use super::map::map;
use super::reader::corrupt;
use super::segment::{HeaderError, SegmentHeader, parse_segment_name, segment_name, version_error};
use crate::error::{Error, Result};
use crate::storage::Storage;

/// A segment whose header checks out.
#[derive(Debug)]
pub(crate) struct Linked {
    pub header: SegmentHeader,
    pub path: PathBuf,
    /// The open file; `None` for a sealed segment handed over from a reader, which only
    /// reads it through its map (a fork's child, [`crate::log::LogReader::into_fork_chain`]).
    pub file: Option<File>,
    pub map: Mmap,
    /// Its limit file, checked (LIM-3).
    pub limit: Option<Limit>,
}

/// The last segment file when its header does not check out: being created (SEG-6), or
/// torn by a crash during creation (RCV-7). The caller decides.
#[derive(Debug)]
pub(crate) struct Unborn {
    pub path: PathBuf,
    pub map: Mmap,
    pub reason: &'static str,
}

/// The segments of a log, in order.
#[derive(Debug)]
pub(crate) struct Chain {
    pub segments: Vec<Linked>,
    pub unborn: Option<Unborn>,
}

impl Chain {
    /// The number of records segment `at` holds when it is sealed: known from the next
    /// segment's name (LOG-2) or from its limit (LIM-1), before any of them is read.
    pub fn sealed_count(&self, at: usize) -> Option<u64> {
        let segment = self.segments.get(at)?;
        let first = segment.header.first_seq;
        match (segment.limit, self.segments.get(at + 1)) {
            (Some(limit), _) => Some(limit.seq_next - first),
            (None, Some(next)) => Some(next.header.first_seq - first),
            (None, None) => None,
        }
    }
}

/// Opens and maps every segment of the log in `dir` and checks the chain: headers, identity,
/// indexes and names (SEG-2, SEG-3), and limits (LIM-3, LIM-5). `write` opens the files for
/// writing (the writer's recovery).
///
/// # Errors
/// `CORRUPT` for a broken chain or a limit that does not check out, `FORMAT_VERSION`, `IO`.
pub(crate) fn open_chain(storage: &dyn Storage, dir: &Path, write: bool) -> Result<Chain> {
    let names = storage
        .list_dir(dir)
        .map_err(|e| Error::io("list", dir, &e))?;
    let mut firsts: Vec<u64> = names.iter().filter_map(|n| parse_segment_name(n)).collect();
    firsts.sort_unstable();
    let mut limits: Vec<u64> = names.iter().filter_map(|n| parse_limit_name(n)).collect();
    limits.sort_unstable();
    let mut chain = Chain {
        segments: Vec::with_capacity(firsts.len()),
        unborn: None,
    };
    for (position, &first) in firsts.iter().enumerate() {
        let path = dir.join(segment_name(first));
        let file = storage
            .open_file(&path, write)
            .map_err(|e| Error::io("open", &path, &e))?;
        let map = map(&file).map_err(|e| Error::io("mmap", &path, &e))?;
        let header = match SegmentHeader::decode(&map) {
            Ok(header) => header,
            Err(HeaderError::Version(found)) => return Err(version_error(found)),
            Err(HeaderError::Invalid(reason)) if position + 1 == firsts.len() => {
                chain.unborn = Some(Unborn { path, map, reason });
                break;
            }
            Err(HeaderError::Invalid(reason)) => return Err(corrupt(&path, 0, reason)),
        };
        let log_id = chain
            .segments
            .first()
            .map_or(header.log_id, |s| s.header.log_id);
        if header.log_id != log_id
            || header.index != position as u64
            || header.first_seq != first
            || (position == 0 && first != 0)
        {
            return Err(corrupt(
                &path,
                0,
                "segment does not continue the log (SEG-3)",
            ));
        }
        let limit = match limits.binary_search(&first) {
            Ok(_) => Some(Limit::load(&dir.join(limit_name(first)), &header, &map)?),
            Err(_) => None,
        };
        chain.segments.push(Linked {
            header,
            path,
            file: Some(file),
            map,
            limit,
        });
    }
    check_limits(dir, &chain, &limits)?;
    Ok(chain)
}

/// LIM-5: every limit names a segment of the chain, and a limited segment that is not the
/// last ends where the next one starts.
fn check_limits(dir: &Path, chain: &Chain, limits: &[u64]) -> Result<()> {
    for &first in limits {
        if !chain.segments.iter().any(|s| s.header.first_seq == first) {
            let path = dir.join(limit_name(first));
            return Err(corrupt(
                &path,
                0,
                "a limit of no segment of the log (LIM-5)",
            ));
        }
    }
    for pair in chain.segments.windows(2) {
        if let [segment, next] = pair
            && let Some(limit) = segment.limit
            && limit.seq_next != next.header.first_seq
        {
            return Err(corrupt(
                &next.path,
                0,
                "segment does not continue its limited predecessor (LIM-5)",
            ));
        }
    }
    Ok(())
}

/// The `first_seq` a limit file name encodes, or `None` for other names.
fn parse_limit_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".lim")?;
    parse_segment_name(&format!("{digits}.seg"))
}

/// Opens, for writing, the segment a fork's child appends to: one the fork has just created
/// and synced with its header (`store.md` STORE-10), checked as [`open_chain`] checks one.
///
/// # Errors
/// `CORRUPT` when its header does not check out, `FORMAT_VERSION`, `IO`.
pub(crate) fn open_own_segment(storage: &dyn Storage, path: &Path) -> Result<Linked> {
    let file = storage
        .open_file(path, true)
        .map_err(|e| Error::io("open", path, &e))?;
    let map = map(&file).map_err(|e| Error::io("mmap", path, &e))?;
    let header = match SegmentHeader::decode(&map) {
        Ok(header) => header,
        Err(HeaderError::Version(found)) => return Err(version_error(found)),
        Err(HeaderError::Invalid(reason)) => return Err(corrupt(path, 0, reason)),
    };
    Ok(Linked {
        header,
        path: path.to_owned(),
        file: Some(file),
        map,
        limit: None,
    })
}
