//! Fork of a stored session (contract §7): the child's log shares every segment of the
//! prefix with the source by hard links, the one holding the boundary up to a limit
//! (`store.md` STORE-10, `log-format.md` LIM-1), so the cost does not grow with the prefix.

use std::path::Path;

use super::checkpoint::CHECKPOINT_FILE;
use super::{Store, StoredSession};
use crate::error::{Error, ErrorKind, Result};
use crate::event::{EventSource, Header};
use crate::log::LogReader;
use crate::log::limit::{Limit, limit_name};
use crate::log::segment::{SEGMENT_HEADER_LEN, SegmentHeader, index_name, segment_name};
use crate::session::Boundary;
use crate::session::fork::{fork_len, open_turn_at};
use crate::storage::Storage;

impl Store {
    /// Forks `source` into a new session `child` holding events `0..=boundary` (contract
    /// §7), with the fork header and the end-seed marker. Checks, in order:
    /// `SESSION_EXISTS`, `SESSION_NOT_FOUND`, `INVALID_BOUNDARY`, `OPEN_TURN`. The source
    /// is only read (its writer may be appending meanwhile) and never changed.
    ///
    /// The child's segments are hard links to the source's, the one holding the boundary
    /// limited to it (`store.md` STORE-10); its checkpoint is the source's when that covers
    /// no more than the prefix. Cost: a link per segment and a few syncs, whatever the
    /// prefix length.
    ///
    /// # Errors
    /// The first failed check, or `IO`; nothing is created then.
    pub fn fork(&self, source: &str, boundary: Boundary, child: &str) -> Result<StoredSession> {
        let child_dir = self.session_dir(child);
        if child_dir.exists() {
            return Err(ErrorKind::SessionExists {
                id: child.to_owned(),
            }
            .into());
        }
        let source_dir = self.session_dir(source);
        let header = Self::read_header(source, &source_dir)?;
        let storage = &self.options.log.storage;
        let reader = LogReader::open_with(&source_dir.join("log"), storage.clone())
            .map_err(|e| e.in_session(source))?;
        let len = fork_len(boundary, reader.seq_next())?;
        if let Some(turn_start) = open_turn_at(&reader, len) {
            return Err(ErrorKind::OpenTurn {
                boundary: len - 1,
                turn_start,
            }
            .into());
        }
        let now = u64::try_from(self.options.session.clock.now_ms()).unwrap_or(0);
        let child_header = Header::for_fork(child, now, header.cwd(), source, len);
        let segment_bytes = self.options.log.segment_bytes;
        self.publish(child, |tmp| {
            write_fork(&**storage, tmp, &child_header, &reader, len, segment_bytes)
                .map_err(|e| e.in_session(source))
        })?;
        let (mut session, _) = self.open(child)?;
        session.end_seed()?;
        // The end-seed is made durable without writing a checkpoint: the one the child
        // shares with its source covers the prefix, and opening folds only what follows.
        session.log().flush_log()?;
        Ok(session)
    }
}

/// Writes the child's directory `dir`, not yet published (STORE-6): its header, its log
/// sharing the source's segments (STORE-10), and its checkpoint. Every file written is
/// synced and every other one is a link to a durable file, so the directories' syncs here
/// and the publish's rename and sync make the whole child durable at once (STORE-13).
fn write_fork(
    storage: &dyn Storage,
    dir: &Path,
    header: &Header,
    reader: &LogReader,
    len: u64,
    segment_bytes: u64,
) -> Result<()> {
    let log_dir = dir.join("log");
    storage
        .create_dir_all(&log_dir)
        .map_err(|e| Error::io("create_dir", &log_dir, &e))?;
    // No temporary file: the directory is not published yet (STORE-13).
    let text = format!("{}\n", header.text());
    write_synced(storage, &dir.join("header.json"), text.as_bytes())?;
    let source_log = reader.dir();
    let prefix = reader.prefix(len)?;
    for path in &prefix.whole {
        let Some(name) = path.file_name() else {
            continue;
        };
        link(path, &log_dir.join(name))?;
        for extension in ["idx", "lim"] {
            let from = path.with_extension(extension);
            let to = log_dir.join(name).with_extension(extension);
            match std::fs::hard_link(&from, &to) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                // An index is a cache (IDX-2); a limit is not (LIM-5).
                Err(_) if extension == "idx" => {}
                Err(e) => return Err(Error::io("link", &to, &e)),
            }
        }
    }
    match prefix.boundary {
        // An empty prefix: a fresh first segment of the same log, holding no record.
        None => {
            use std::os::unix::fs::FileExt;
            let source_first = source_log.join(segment_name(0));
            let mut header = [0; SEGMENT_HEADER_LEN];
            let capacity = storage
                .open_file(&source_first, false)
                .and_then(|file| {
                    file.read_exact_at(&mut header, 0)?;
                    Ok(file.metadata()?.len())
                })
                .map_err(|e| Error::io("read", &source_first, &e))?;
            let target = log_dir.join(segment_name(0));
            let file = storage
                .create_file(&target, capacity)
                .map_err(|e| Error::io("create", &target, &e))?;
            storage
                .write_at(&file, 0, &header)
                .map_err(|e| Error::io("write", &target, &e))?;
            storage
                .sync_data(&file)
                .map_err(|e| Error::io("fsync", &target, &e))?;
        }
        Some(boundary) => {
            share_boundary(storage, &log_dir, &boundary)?;
            // The segment the child's first append, the end-seed marker, goes to (LIM-4),
            // made here so that its creation needs no directory sync of its own.
            let next = SegmentHeader {
                log_id: boundary.header.log_id,
                index: boundary.header.index + 1,
                first_seq: len,
                capacity: segment_bytes.clamp(SEGMENT_HEADER_LEN as u64 + 1, u64::from(u32::MAX)),
            };
            crate::log::create_segment_file(storage, &log_dir, &next)?;
        }
    }
    link_checkpoint(source_log, dir, len);
    for synced in [&log_dir, dir] {
        storage
            .sync_dir(synced)
            .map_err(|e| Error::io("fsync", synced, &e))?;
    }
    Ok(())
}

/// STORE-10: the boundary segment is linked and limited to the prefix (LIM-1), with an
/// index of the records it keeps. Unless they are known to be durable (DUR-4, IDX-5), its
/// bytes are synced first: the source's writer may not have made them durable yet, and
/// the child must not lose them.
fn share_boundary(
    storage: &dyn Storage,
    log_dir: &Path,
    boundary: &crate::log::BoundarySegment<'_>,
) -> Result<()> {
    let first = boundary.header.first_seq;
    if !boundary.durable {
        let source = storage
            .open_file(boundary.path, false)
            .map_err(|e| Error::io("open", boundary.path, &e))?;
        storage
            .sync_data(&source)
            .map_err(|e| Error::io("fsync", boundary.path, &e))?;
    }
    link(boundary.path, &log_dir.join(segment_name(first)))?;
    let last_offset = boundary.offsets.last().copied().unwrap_or_default();
    let end = u32::try_from(boundary.end).unwrap_or(u32::MAX);
    let limit = Limit {
        log_id: boundary.header.log_id,
        first_seq: first,
        seq_next: first + boundary.offsets.len() as u64,
        last_offset,
        end,
    };
    write_synced(storage, &log_dir.join(limit_name(first)), &limit.encode())?;
    // A cache (IDX-2): not synced.
    let data = boundary
        .bytes
        .get(SEGMENT_HEADER_LEN..boundary.end)
        .unwrap_or_default();
    let index = crate::log::encode_index(
        &boundary.header.log_id,
        first,
        boundary.offsets,
        end,
        crc32c::crc32c(data),
    );
    let index_path = log_dir.join(index_name(first));
    let _ = storage
        .create_file(&index_path, 0)
        .and_then(|file| storage.write_at(&file, 0, &index));
    Ok(())
}

/// The source's checkpoint serves the child when it covers no more than the prefix: the
/// child's log holds the same bytes, so CKP-3 accepts it there. It is shared by a link:
/// checkpoints are replaced by rename, never written in place (CKP-5). A cache: a failure
/// only costs the child a full fold at its first open.
fn link_checkpoint(source_log: &Path, dir: &Path, len: u64) {
    let Some(source_dir) = source_log.parent() else {
        return;
    };
    let target = dir.join(CHECKPOINT_FILE);
    if std::fs::hard_link(source_dir.join(CHECKPOINT_FILE), &target).is_err() {
        return;
    }
    // Read what was linked, not the name, which the source's writer may replace meanwhile.
    let covers = super::checkpoint::covered_len(&target);
    if covers.is_none_or(|covered| covered > len) {
        let _ = std::fs::remove_file(&target);
    }
}

fn link(from: &Path, to: &Path) -> Result<()> {
    std::fs::hard_link(from, to).map_err(|e| Error::io("link", to, &e))
}

/// Creates `path` with `bytes` and syncs it.
fn write_synced(storage: &dyn Storage, path: &Path, bytes: &[u8]) -> Result<()> {
    let file = storage
        .create_file(path, 0)
        .map_err(|e| Error::io("create", path, &e))?;
    storage
        .write_at(&file, 0, bytes)
        .map_err(|e| Error::io("write", path, &e))?;
    storage
        .sync_data(&file)
        .map_err(|e| Error::io("fsync", path, &e))
}
