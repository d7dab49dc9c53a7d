//! Fork of a stored session (contract §7): the child's log shares every segment of the
//! prefix with the source by hard links, the one holding the boundary up to a limit
//! (`store.md` STORE-10, `log-format.md` LIM-1), so the cost does not grow with the prefix.

use std::os::unix::fs::FileExt;
use std::path::Path;

use super::checkpoint::CHECKPOINT_FILE;
use super::{Store, StoredSession};
use crate::error::{Error, ErrorKind, Result};
use crate::event::{Event, EventSource, Header};
use crate::log::limit::{Limit, limit_name};
use crate::log::segment::{SEGMENT_HEADER_LEN, SegmentHeader, index_name, segment_name};
use crate::log::{LogReader, open_own_segment};
use crate::record::encode_events;
use crate::session::fork::{fork_len, open_turn_at};
use crate::session::{Boundary, END_SEED_TYPE, end_seed_event};
use crate::storage::Storage;

impl Store {
    /// Forks `source` into a new session `child` holding events `0..=boundary` (contract
    /// §7), with the fork header and the end-seed marker. Checks, in order:
    /// `SESSION_EXISTS`, `SESSION_NOT_FOUND`, `INVALID_BOUNDARY`, `OPEN_TURN`. The source
    /// is only read (its writer may be appending meanwhile) and never changed.
    ///
    /// The source is read as any reader reads it (`store.md` STORE-10): events a live
    /// writer still holds in its write buffer (`Batch`, `Manual`) are not forked; flush
    /// first to fork them.
    ///
    /// The child's segments are hard links to the source's, the one holding the boundary
    /// limited to it (`store.md` STORE-10); its checkpoint is the source's when that covers
    /// no more than the prefix. Cost: a link per segment and a few syncs, whatever the
    /// prefix length.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// use surfacelog::Boundary;
    /// let mut child = store.fork("s", Boundary::Last, "s-sub")?; // shares the log by hard links
    /// child.append::<surfacelog::kinds::TurnStart>(r#"{"turn":2}"#, surfacelog::NoSurface)?;
    /// assert_eq!(child.messages()?.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The first failed check, or `IO`; nothing is created then.
    pub fn fork(&self, source: &str, boundary: Boundary, child: &str) -> Result<StoredSession> {
        super::check_id(child)?;
        let child_dir = self.session_dir(child);
        if child_dir.exists() {
            return Err(Error::from(ErrorKind::SessionExists {
                id: child.to_owned(),
            })
            .in_session(child));
        }
        let source_dir = self.session_dir(source);
        let header = Self::read_header(&*self.options.log.storage, source, &source_dir)
            .map_err(|e| e.in_session(source))?;
        let storage = &self.options.log.storage;
        // RCV-14, as a follower and an inspection: the source's checkpoint, read before its
        // log, is a durable mark; a log shorter than it lost events, which a fork must not
        // take for the end of the source (nor carry into the child as its whole prefix).
        let durable_seq = super::checkpoint::Checkpoint::read(&**storage, &source_dir)
            .map_err(|e| e.in_session(source))?
            .as_ref()
            .map_or(0, super::checkpoint::Unverified::seq_next);
        let reader = LogReader::open_with(&source_dir.join("log"), storage.clone())
            .map_err(|e| Self::unless_deleted(source, &source_dir, e).in_session(source))?;
        super::checkpoint::check_not_ahead(&source_dir, reader.seq_next(), durable_seq)
            .map_err(|e| e.in_session(source))?;
        let len = fork_len(boundary, reader.seq_next()).map_err(|e| e.in_session(source))?;
        if let Some(turn_start) = open_turn_at(&reader, len).map_err(|e| e.in_session(source))? {
            return Err(Error::from(ErrorKind::OpenTurn {
                boundary: len - 1,
                turn_start,
            })
            .in_session(source));
        }
        // Contract §9: with invariants on, they run over the child's seed, which is the
        // prefix (the end-seed marker after it is unconstrained); a violation refuses the
        // fork before anything is created, as the seed path does.
        if self.options.session.invariants {
            crate::session::InvariantState::default()
                .replay(&reader, len)
                .map_err(|e| e.in_session(child))?;
        }
        let now = u64::try_from(self.options.session.clock.now_ms()).unwrap_or(0);
        let child_header = Header::for_fork(child, now, header.cwd(), source, len);
        // STORE-4: the child's header (the source's `cwd`, the child's id) must read back.
        super::check_header_size(&child_header).map_err(|e| e.in_session(child))?;
        // The end-seed marker (contract §5), unless the prefix already ends with one, as
        // `Session::end_seed` decides: written into the child's own last segment before
        // the child is published, so the child is never seen without it (STORE-13).
        let ends_seeded = match len.checked_sub(1) {
            Some(seq) => reader.event_at(seq)?.event_type == END_SEED_TYPE,
            None => false,
        };
        let marker = (!ends_seeded).then(|| end_seed_event(len, &*self.options.session.clock));
        let child_log = ChildLog {
            len,
            marker: marker.as_ref(),
            segment_bytes: self.options.log.segment_capacity(),
            segment_features: self.options.log.segment_features(),
        };
        let (mut limit, mut own_first) = (None, len);
        let lock = self.publish(child, |tmp| {
            // A source file gone while the child links it, the source's directory gone
            // too, is the source deleted meanwhile (STORE-9): `SESSION_NOT_FOUND`.
            (limit, own_first) = write_fork(&**storage, tmp, &child_header, &reader, &child_log)
                .map_err(|e| Self::unless_deleted(source, &source_dir, e))?;
            Ok(())
        })?;
        // The child's log is opened over the segments the reader has checked (the same
        // files), and its checkpoint is its source's (CKP-7): opening folds only the marker.
        let log_dir = self.session_dir(child).join("log");
        let own = open_own_segment(&**storage, &log_dir.join(segment_name(own_first)))?;
        let chain = reader.into_fork_chain(own_first, limit, own);
        let (session, _) = self.open_live_from(child, Some(len), Some(chain), Some(lock))?;
        Ok(session)
    }
}

/// What the child's log holds beyond the shared prefix.
struct ChildLog<'a> {
    /// The prefix's length: the child's first own seq.
    len: u64,
    /// The end-seed marker at seq `len`, if the child gets one.
    marker: Option<&'a Event>,
    /// The capacity of the child's own segment (SEG-7).
    segment_bytes: u64,
    /// The features of the child's own segment (SEG-9).
    segment_features: u16,
}

/// Writes the child's directory `dir`, not yet published (STORE-6): its header, its log
/// sharing the source's segments (STORE-10) and ending with a segment of its own that
/// holds the end-seed marker, and its checkpoint. Every file written is synced and every
/// other one is a link to a durable file, so the directories' syncs here and the
/// publish's rename and sync make the whole child durable at once (STORE-13). Returns the
/// limit of the boundary segment, if any, and the first seq of the child's own segment
/// (the prefix's length, or the first seq of the compact run it ends inside, §4.2).
fn write_fork(
    storage: &dyn Storage,
    dir: &Path,
    header: &Header,
    reader: &LogReader,
    child: &ChildLog<'_>,
) -> Result<(Option<Limit>, u64)> {
    let log_dir = dir.join("log");
    storage
        .create_dir_all(&log_dir)
        .map_err(|e| Error::io("create_dir", &log_dir, &e))?;
    // Every file written here is synced at the end, together (STORE-13).
    let mut syncs = Syncs::default();
    // No temporary file: the directory is not published yet (STORE-13).
    let text = format!("{}\n", header.text());
    syncs.write(storage, &dir.join("header.json"), text.as_bytes())?;
    let source_log = reader.dir();
    let prefix = reader.prefix(child.len)?;
    for &(path, limited) in &prefix.whole {
        link_whole(storage, path, limited, &log_dir)?;
    }
    let mut limit = None;
    // The run the prefix ends inside (log-format.md §4.2): its members before the end open
    // the child's own segment, which starts at the run's first seq.
    let (own_first, carried) = match &prefix.split {
        Some(split) => (split.first_seq, split.carried.as_slice()),
        None => (child.len, &[][..]),
    };
    // The segment the child's first append, the end-seed marker, goes to (LIM-4): after
    // the limited boundary segment, or the first segment of an empty prefix, or in place
    // of the segment the split run starts.
    let own = match prefix.boundary {
        None if let Some(split) = &prefix.split => SegmentHeader {
            log_id: split.header.log_id,
            index: split.header.index,
            first_seq: split.first_seq,
            capacity: child.segment_bytes,
            incompat_features: child.segment_features,
        },
        None => {
            let source_first = source_log.join(segment_name(0));
            let mut bytes = [0; SEGMENT_HEADER_LEN];
            storage
                .open_file(&source_first, false)
                .and_then(|file| file.read_exact_at(&mut bytes, 0))
                .map_err(|e| Error::io("read", &source_first, &e))?;
            let header =
                SegmentHeader::decode(&bytes).map_err(|_| corrupt_header(&source_first))?;
            // CZ-6: the child's own segment is plain, whatever the source's first is.
            SegmentHeader {
                incompat_features: header.incompat_features & !crate::log::segment::COMPRESSED,
                ..header
            }
        }
        Some(boundary) => {
            limit = Some(share_boundary(storage, &log_dir, &boundary, &mut syncs)?);
            SegmentHeader {
                log_id: boundary.header.log_id,
                index: boundary.header.index + 1,
                first_seq: own_first,
                capacity: child.segment_bytes,
                incompat_features: child.segment_features,
            }
        }
    };
    create_own_segment(storage, &log_dir, own, carried, child.marker, &mut syncs)?;
    link_caches(storage, source_log, dir, child.len);
    // The build directory itself is synced by its publish (STORE-21), not twice.
    syncs.dirs = vec![log_dir];
    syncs.run(storage)?;
    Ok((limit, own_first))
}

/// A sealed segment of the prefix, shared whole with its index and, when `limited`, its
/// limit.
fn link_whole(storage: &dyn Storage, path: &Path, limited: bool, log_dir: &Path) -> Result<()> {
    let Some(name) = path.file_name() else {
        return Ok(());
    };
    link(storage, path, &log_dir.join(name))?;
    let extensions: &[&str] = if limited { &["idx", "lim"] } else { &["idx"] };
    for &extension in extensions {
        let from = path.with_extension(extension);
        let to = log_dir.join(name).with_extension(extension);
        match storage.hard_link(&from, &to) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // An index is a cache (IDX-2); a limit is not (LIM-5).
            Err(_) if extension == "idx" => {}
            Err(e) => return Err(Error::io("link", &to, &e)),
        }
    }
    Ok(())
}

/// Creates the child's own segment (SEG-6) with `header` and, right after it, the record
/// of `marker`, in one write, synced with the rest of the child (STORE-13): the
/// directory's sync then makes the file's entry durable, and nothing reads it before the
/// publish.
fn create_own_segment(
    storage: &dyn Storage,
    log_dir: &Path,
    mut header: SegmentHeader,
    carried: &[Event],
    marker: Option<&Event>,
    syncs: &mut Syncs,
) -> Result<()> {
    let mut bytes = header.encode().to_vec();
    let events = carried.iter().chain(marker).map(Event::as_ref);
    encode_events(header.incompat_features, events, &mut bytes)
        .map(drop)
        .map_err(|why| {
            Error::from(ErrorKind::EnvelopeInvalid {
                reason: format!("no compact record holds it: {}", why.reason()),
            })
        })?;
    // SEG-7: the capacity leaves room for the record and an end marker.
    let needed = bytes.len() as u64 + 8;
    header.capacity = header.capacity.max(needed).min(u64::from(u32::MAX));
    if let Some(head) = bytes.get_mut(..SEGMENT_HEADER_LEN) {
        head.copy_from_slice(&header.encode());
    }
    let path = log_dir.join(segment_name(header.first_seq));
    // SEG-6: long enough for its bytes, in the steps the writer grows it by.
    let len = crate::log::segment::grown_len(bytes.len() as u64, header.capacity);
    let file = storage
        .create_file(&path, len)
        .map_err(|e| Error::io("create", &path, &e))?;
    storage
        .write_at(&file, 0, &bytes)
        .map_err(|e| Error::io("write", &path, &e))?;
    syncs.files.push((path, file));
    Ok(())
}

fn corrupt_header(path: &Path) -> Error {
    ErrorKind::Corrupt {
        location: format!("{} offset=0", path.display()),
        reason: "the source's first segment header does not check out".to_owned(),
    }
    .into()
}

/// STORE-10: the boundary segment is linked and limited to the prefix (LIM-1), with an
/// index of the records it keeps. Unless they are known to be durable (DUR-4, IDX-5), its
/// bytes are synced first: the source's writer may not have made them durable yet, and
/// the child must not lose them.
fn share_boundary(
    storage: &dyn Storage,
    log_dir: &Path,
    boundary: &crate::log::BoundarySegment<'_>,
    syncs: &mut Syncs,
) -> Result<Limit> {
    let first = boundary.header.first_seq;
    if !boundary.durable {
        let source = storage
            .open_file(boundary.path, false)
            .map_err(|e| Error::io("open", boundary.path, &e))?;
        syncs.files.push((boundary.path.to_owned(), source));
    }
    let linked = log_dir.join(segment_name(first));
    link(storage, boundary.path, &linked)?;
    same_file(storage, boundary.identity, &linked)?;
    let last_offset = boundary.offsets.last().copied().unwrap_or_default();
    let end = u32::try_from(boundary.end).unwrap_or(u32::MAX);
    let limit = Limit {
        log_id: boundary.header.log_id,
        first_seq: first,
        seq_next: first + boundary.offsets.len() as u64,
        last_offset,
        end,
    };
    syncs.write(storage, &log_dir.join(limit_name(first)), &limit.encode())?;
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
    Ok(limit)
}

/// How many events a cache file covers, read from its fixed fields.
type CoveredLen = fn(&dyn Storage, &Path) -> Option<u64>;

/// The source's checkpoint serves the child when it covers no more than the prefix: the
/// child's log holds the same bytes, so CKP-3 accepts it there. It is shared by a link:
/// checkpoints are replaced by rename, never written in place (CKP-5). A cache: a failure
/// only costs the child a full fold at its first open.
/// The message pack is shared the same way, on the same condition (MSP-6).
fn link_caches(storage: &dyn Storage, source_log: &Path, dir: &Path, len: u64) {
    let Some(source_dir) = source_log.parent() else {
        return;
    };
    let caches: [(&str, CoveredLen); 2] = [
        (CHECKPOINT_FILE, super::checkpoint::covered_len),
        (super::pack::PACK_FILE, super::pack::covered_len),
    ];
    for (name, covered_len) in caches {
        let target = dir.join(name);
        if storage.hard_link(&source_dir.join(name), &target).is_err() {
            continue;
        }
        // Read what was linked, not the name, which the source's writer may replace
        // meanwhile.
        if covered_len(storage, &target).is_none_or(|covered| covered > len) {
            let _ = storage.remove_file(&target);
        }
    }
}

/// CMP-5: the boundary segment the fork linked by name is the file its reader checked
/// (device and inode): compaction may have given the name to a rewritten file meanwhile,
/// whose records lie at other offsets than the limit's. `IO` then, and the fork publishes
/// nothing; trying again forks from the new file.
fn same_file(storage: &dyn Storage, read: Option<(u64, u64)>, linked: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Some(read) = read else {
        return Ok(());
    };
    let identity = |meta: std::fs::Metadata| (meta.dev(), meta.ino());
    let now = storage
        .open_file(linked, false)
        .and_then(|file| file.metadata())
        .map(identity)
        .map_err(|e| Error::io("stat", linked, &e))?;
    if read == now {
        return Ok(());
    }
    let error = std::io::Error::other(
        "the source's segment was replaced while it was being forked (compacted, CMP-5): \
         fork again",
    );
    Err(Error::io("link", linked, &error))
}

fn link(storage: &dyn Storage, from: &Path, to: &Path) -> Result<()> {
    storage
        .hard_link(from, to)
        .map_err(|e| Error::io("link", to, &e))
}

/// The files and directories a fork syncs before it publishes its child (STORE-13).
#[derive(Debug, Default)]
struct Syncs {
    files: Vec<(std::path::PathBuf, std::fs::File)>,
    dirs: Vec<std::path::PathBuf>,
}

impl Syncs {
    /// Creates `path` with `bytes`, to be synced.
    fn write(&mut self, storage: &dyn Storage, path: &Path, bytes: &[u8]) -> Result<()> {
        let file = storage
            .create_file(path, 0)
            .map_err(|e| Error::io("create", path, &e))?;
        storage
            .write_at(&file, 0, bytes)
            .map_err(|e| Error::io("write", path, &e))?;
        self.files.push((path.to_owned(), file));
        Ok(())
    }

    /// Syncs every file's data and every directory, all at once, and returns when all are
    /// durable: the first error, if any. At once, because nothing orders them among
    /// themselves (each sync makes its own file or directory durable; only the publish
    /// must follow all of them), and a filesystem commits concurrent syncs together (one
    /// journal commit on ext4 instead of one per call).
    fn run(&self, storage: &dyn Storage) -> Result<()> {
        std::thread::scope(|scope| {
            let files = self.files.iter().map(|(path, file)| {
                scope.spawn(move || {
                    storage
                        .sync_data(file)
                        .map_err(|e| Error::io("fsync", path, &e))
                })
            });
            let dirs = self.dirs.iter().map(|dir| {
                scope.spawn(move || {
                    storage
                        .sync_dir(dir)
                        .map_err(|e| Error::io("fsync", dir, &e))
                })
            });
            let handles: Vec<_> = files.chain(dirs).collect();
            handles
                .into_iter()
                .map(|handle| {
                    handle
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .fold(Ok(()), Result::and)
        })
    }
}
