//! The surface checkpoint beside a session's log (`format-spec/checkpoint.md`): the
//! surface and the repair scan state as of some seq, so that opening a session folds only
//! the events after it.
#![deny(clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::event::{EventSource, Vocabulary};
use crate::log::{KnownSegment, LogReader};
use crate::record::{u32_at, u64_at};
use crate::session::repair::RepairState;
use crate::storage::Storage;
use crate::surface::{Refold, Surface};

/// `"surfchk\0"` (CKP-1).
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"surfchk\0";
/// The checkpoint format version (CKP-1).
pub const CHECKPOINT_VERSION: u32 = 3;
/// The checkpoint's file name in a session directory.
pub const CHECKPOINT_FILE: &str = "checkpoint";
/// Where the nodes start (CKP-1): after the fixed fields, 8-byte aligned.
const NODES_AT: usize = 48;
/// The bytes of one segment of the chain (CKP-8): its `first_seq`, then its flags.
const SEGMENT_ENTRY: usize = 9;
/// The bytes of the chain section before its segments (CKP-8): `chain_len`, `log_dir`.
const CHAIN_HEADER: usize = 28;

/// What a checkpoint holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The surface after the first `surface.seq_next()` events.
    pub surface: Surface,
    /// The repair scan after the same events.
    pub repair: RepairState,
    /// CRC-32C of the text of event `seq_next − 1` (0 for an empty log): ties the
    /// checkpoint to this log's record (CKP-3).
    pub last_text_crc: u32,
    /// The log's segments when the checkpoint was written, so that opening need not list
    /// the log directory (CKP-8); `None` when not recorded.
    pub chain: Option<RecordedChain>,
}

/// The log's segment chain as a checkpoint records it (CKP-8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedChain {
    /// The identity of the log directory the segments are in ([`dir_identity`]).
    pub log_dir: DirIdentity,
    /// The segments, in order.
    pub segments: Vec<KnownSegment>,
}

impl RecordedChain {
    /// The chain of `log` as its reader knows it, with its directory's identity (CKP-8);
    /// `None` when the identity cannot be read.
    pub fn of(log: &crate::log::DiskLog) -> Option<Self> {
        Some(Self {
            log_dir: dir_identity(log.dir())?,
            segments: log.known_segments(),
        })
    }
}

/// The identity of a directory as CKP-8 records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirIdentity {
    /// The device number.
    pub dev: u64,
    /// The inode number (never 0 for a directory that exists).
    pub ino: u64,
    /// When it was created, in nanoseconds since the Unix epoch (its birth time); 0 when
    /// the filesystem does not say. An inode number freed by a deletion can be given to
    /// the next directory made, so the number alone does not tell two directories apart.
    pub birth: u64,
}

/// The identity of the directory `dir` (CKP-8); `None` when it cannot be read or is not
/// a directory.
pub fn dir_identity(dir: &Path) -> Option<DirIdentity> {
    let metadata = std::fs::symlink_metadata(dir).ok()?;
    metadata.is_dir().then(|| DirIdentity::of(&metadata))
}

impl DirIdentity {
    /// The identity of the file `metadata` describes.
    pub(crate) fn of(metadata: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        let birth = metadata
            .created()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        Self {
            dev: metadata.dev(),
            ino: metadata.ino(),
            birth,
        }
    }
}

/// Why a checkpoint was not used.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
/// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
/// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
/// # s.close()?;
/// use surfacelog::CheckpointUnusable;
/// let (_, opened) = store.open_session("s")?;
/// assert_ne!(opened.checkpoint, Err(CheckpointUnusable::Corrupt));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unusable {
    /// No checkpoint file.
    Missing,
    /// The bytes are not a valid checkpoint (CKP-1, CKP-2, CKP-4, CKP-8).
    Corrupt,
    /// It covers more events than the log holds, or another log's events (CKP-3).
    Stale,
}

/// The log a checkpoint belongs to, as [`Checkpoint::load`] needs it to rebuild the nodes
/// when they fail their check on first read (CKP-2): the session's log directory, the
/// storage it is read through, and the vocabulary its surface is folded with.
#[derive(Debug, Clone)]
pub struct LogOrigin {
    /// The session's log directory (`<session>/log`).
    pub dir: PathBuf,
    /// The storage the log is read through.
    pub storage: Arc<dyn Storage>,
    /// The vocabulary the session folds its surface with.
    pub vocabulary: Arc<Vocabulary>,
}

impl LogOrigin {
    /// The nodes of a fold of the log's first `seq_next` events, when that fold succeeds
    /// and ends with these replacement `keys` and `generation` (those of the checkpoint,
    /// which its CRC vouches for); `None` otherwise.
    fn refold(self, seq_next: u64, keys: Vec<(u64, u64)>, generation: u64) -> Refold {
        Box::new(move || {
            let reader = LogReader::open_with(&self.dir, Arc::clone(&self.storage))?;
            let prefix = crate::session::Prefix {
                log: &reader,
                len: seq_next,
            };
            let surface = Surface::fold(&prefix, &self.vocabulary)?;
            let same = surface.seq_next() == seq_next
                && surface.replace_generation() == generation
                && surface.replacement_keys() == keys.as_slice();
            if same {
                tracing::warn!(
                    log = %self.dir.display(),
                    seq = seq_next,
                    "checkpoint nodes failed their check; rebuilt from the log (CKP-2)"
                );
            }
            Ok(same.then(|| surface.nodes().to_vec()))
        })
    }
}

/// Everything of a checkpoint but its nodes, checked as far as it can be without the log
/// or the nodes (CKP-1, the keys part of CKP-2, CKP-4, CKP-8).
#[derive(Debug)]
struct Parts {
    last_text_crc: u32,
    seq_next: u64,
    generation: u64,
    node_count: usize,
    keys: Vec<(u64, u64)>,
    repair: RepairState,
    chain: Option<RecordedChain>,
    nodes_crc: u32,
}

impl Parts {
    /// The node count of the fixed fields (bytes 0..48), and where the nodes end; `None`
    /// when the magic or the version is not this format's (CKP-1). The magic and the
    /// version are read first, before any other field or CRC (log-format.md VER-2), so
    /// that another version is ignored whatever its layout. The count is read before the
    /// CRC vouches for it, only to find the bytes after the nodes; every use is checked
    /// arithmetic.
    fn nodes_end(fixed: &[u8]) -> Option<(usize, usize)> {
        if fixed.get(..8) != Some(&CHECKPOINT_MAGIC[..])
            || u32_at(fixed, 8) != Some(CHECKPOINT_VERSION)
        {
            return None;
        }
        let node_count = usize::try_from(u64_at(fixed, 32)?).ok()?;
        let end = node_count.checked_mul(8)?.checked_add(NODES_AT)?;
        Some((node_count, end))
    }

    /// Parses and checks the fixed fields `fixed` (bytes 0..48) and `tail`, every byte
    /// after the nodes.
    fn parse(fixed: &[u8], tail: &[u8]) -> Result<Self, Unusable> {
        let (node_count, _) = Self::nodes_end(fixed).ok_or(Unusable::Corrupt)?;
        let (rest, crc) = tail.split_last_chunk::<4>().ok_or(Unusable::Corrupt)?;
        let (after, nodes_crc) = rest.split_last_chunk::<4>().ok_or(Unusable::Corrupt)?;
        let nodes_crc = u32::from_le_bytes(*nodes_crc);
        if fixed.len() != NODES_AT || file_crc(fixed, after, nodes_crc) != u32::from_le_bytes(*crc)
        {
            return Err(Unusable::Corrupt);
        }
        let field = |at| u64_at(fixed, at).ok_or(Unusable::Corrupt);
        let key_count = usize::try_from(field(40)?).map_err(|_| Unusable::Corrupt)?;
        let keys_bytes = key_count
            .checked_mul(16)
            .and_then(|n| after.get(..n))
            .ok_or(Unusable::Corrupt)?;
        let keys: Vec<(u64, u64)> = keys_bytes
            .chunks_exact(16)
            .map(|c| {
                (
                    u64_at(c, 0).unwrap_or_default(),
                    u64_at(c, 8).unwrap_or_default(),
                )
            })
            .collect();
        let mut at = keys_bytes.len();
        let repair_len = u32_at(after, at).ok_or(Unusable::Corrupt)? as usize;
        at += 4;
        let repair_bytes = at
            .checked_add(repair_len)
            .and_then(|end| after.get(at..end))
            .ok_or(Unusable::Corrupt)?;
        let repair = RepairState::decode(repair_bytes).ok_or(Unusable::Corrupt)?;
        at += repair_len;
        let chain = decode_chain(after.get(at..).ok_or(Unusable::Corrupt)?)?;
        Ok(Self {
            last_text_crc: u32_at(fixed, 12).ok_or(Unusable::Corrupt)?,
            seq_next: field(16)?,
            generation: field(24)?,
            node_count,
            keys,
            repair,
            chain,
            nodes_crc,
        })
    }

    /// CKP-3: whether the checkpoint belongs to `log` (it reads one event, not the nodes).
    /// An event that cannot be read back does not match: the fold that follows reads it
    /// and reports the damage.
    fn matches(&self, log: &impl EventSource) -> bool {
        self.seq_next <= log.seq_next()
            && last_text_crc(log, self.seq_next).is_ok_and(|crc| crc == self.last_text_crc)
    }
}

/// A checkpoint file read and checked but for its nodes and CKP-3 (which needs the log):
/// what opening reads before the log, so that the log can be opened over the chain it
/// records (CKP-8).
#[derive(Debug)]
pub(crate) struct Unverified {
    parts: Parts,
    /// The file, whose nodes are read on first need (CKP-7).
    file: std::fs::File,
}

impl Unverified {
    /// The number of events it covers (`seq_next`), which its `crc` vouches for: a durable
    /// mark of the log (log-format.md RCV-14), since a checkpoint is written only after the
    /// events it covers are durable (CKP-5).
    pub(crate) fn seq_next(&self) -> u64 {
        self.parts.seq_next
    }

    /// The number of surface nodes, which its `crc` vouches for.
    pub(crate) fn node_count(&self) -> u64 {
        self.parts.node_count as u64
    }

    /// The segment chain recorded for the log directory `log_dir`, when it is that
    /// directory's (CKP-8: the same device and inode numbers and birth time).
    pub(crate) fn chain_of(&self, log_dir: &Path) -> Option<&[KnownSegment]> {
        let chain = self.parts.chain.as_ref()?;
        (dir_identity(log_dir) == Some(chain.log_dir)).then_some(chain.segments.as_slice())
    }

    /// The checkpoint, when it belongs to `log` (CKP-3). Its surface reads the nodes in
    /// place from the file, mapped now but read on their first read, and checks them then
    /// (CKP-2, CKP-7); nodes that fail are replaced by a fold of the log `origin` names.
    ///
    /// # Errors
    /// `Stale` (CKP-3); `Corrupt` when the keys do not fit the nodes (CKP-2).
    pub(crate) fn verify(
        self,
        log: &impl EventSource,
        origin: LogOrigin,
    ) -> Result<Checkpoint, Unusable> {
        let Self { parts, file } = self;
        if !parts.matches(log) {
            return Err(Unusable::Stale);
        }
        let words = crate::log::FileWords::new(file, NODES_AT, parts.node_count);
        let refold = origin.refold(parts.seq_next, parts.keys.clone(), parts.generation);
        let surface = Surface::from_deferred_parts(
            words,
            parts.nodes_crc,
            parts.keys,
            parts.generation,
            parts.seq_next,
            refold,
        )
        .ok_or(Unusable::Corrupt)?;
        Ok(Checkpoint {
            surface,
            repair: parts.repair,
            last_text_crc: parts.last_text_crc,
            chain: parts.chain,
        })
    }
}

impl Checkpoint {
    /// The checkpoint of `surface` and `repair` over `log`, recording no chain (CKP-8).
    ///
    /// # Errors
    /// The error reading the last covered event (`CORRUPT` with its file and offset): no
    /// checkpoint is made over a log that cannot be read back.
    pub fn of(
        surface: &Surface,
        repair: &RepairState,
        log: &impl EventSource,
    ) -> crate::Result<Self> {
        Ok(Self {
            surface: surface.clone(),
            repair: repair.clone(),
            last_text_crc: last_text_crc(log, surface.seq_next())?,
            chain: None,
        })
    }

    /// The bytes of the checkpoint (CKP-1).
    pub fn encode(&self) -> Vec<u8> {
        let nodes = self.surface.nodes();
        let keys = self.surface.replacement_keys();
        let mut out = Vec::with_capacity(64 + 8 * nodes.len() + 16 * keys.len());
        out.extend_from_slice(&CHECKPOINT_MAGIC);
        out.extend_from_slice(&CHECKPOINT_VERSION.to_le_bytes());
        out.extend_from_slice(&self.last_text_crc.to_le_bytes());
        for n in [
            self.surface.seq_next(),
            self.surface.replace_generation(),
            nodes.len() as u64,
            keys.len() as u64,
        ] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        for node in nodes {
            out.extend_from_slice(&node.to_le_bytes());
        }
        let nodes_end = out.len();
        for (seq, key) in keys {
            out.extend_from_slice(&seq.to_le_bytes());
            out.extend_from_slice(&key.to_le_bytes());
        }
        let mut repair = Vec::new();
        self.repair.encode(&mut repair);
        out.extend_from_slice(
            &u32::try_from(repair.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        out.extend_from_slice(&repair);
        encode_chain(self.chain.as_ref(), &mut out);
        let (fixed, rest) = out.split_at(NODES_AT);
        let (node_bytes, after) = rest.split_at(nodes_end - NODES_AT);
        let nodes_crc = crc32c::crc32c(node_bytes);
        let crc = file_crc(fixed, after, nodes_crc);
        out.extend_from_slice(&nodes_crc.to_le_bytes());
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Reads a checkpoint and checks all of it against `log` (CKP-1 to CKP-3, CKP-8),
    /// nodes included.
    ///
    /// # Errors
    /// Why it cannot be used; the caller then folds the whole log.
    pub fn decode(bytes: &[u8], log: &impl EventSource) -> Result<Self, Unusable> {
        let (_, nodes_end) = bytes
            .get(..NODES_AT)
            .and_then(Parts::nodes_end)
            .ok_or(Unusable::Corrupt)?;
        let (Some(fixed), Some(node_bytes), Some(tail)) = (
            bytes.get(..NODES_AT),
            bytes.get(NODES_AT..nodes_end),
            bytes.get(nodes_end..),
        ) else {
            return Err(Unusable::Corrupt);
        };
        let parts = Parts::parse(fixed, tail)?;
        if !parts.matches(log) {
            return Err(Unusable::Stale);
        }
        if crc32c::crc32c(node_bytes) != parts.nodes_crc {
            return Err(Unusable::Corrupt);
        }
        let nodes = node_bytes
            .chunks_exact(8)
            .map(|c| u64_at(c, 0).unwrap_or_default())
            .collect();
        let surface = Surface::from_parts(nodes, parts.keys, parts.generation, parts.seq_next)
            .ok_or(Unusable::Corrupt)?;
        Ok(Self {
            surface,
            repair: parts.repair,
            last_text_crc: parts.last_text_crc,
            chain: parts.chain,
        })
    }

    /// Reads the checkpoint file of the session directory `dir` but for its nodes, and
    /// checks what it read (CKP-1, the keys part of CKP-2, CKP-4, CKP-8): two reads, of the
    /// fixed fields and of everything after the nodes, whatever the number of nodes.
    /// Inside: `Missing` when there is no file, `Corrupt` for bytes that are not a
    /// checkpoint.
    ///
    /// # Errors
    /// `IO` when the file is there but cannot be opened or read (`EACCES`, `EIO`,
    /// `EMFILE`): never taken for a missing checkpoint, since a checkpoint is a durable mark
    /// (RCV-14) that an open must not lose sight of.
    pub(crate) fn read(
        storage: &dyn Storage,
        dir: &Path,
    ) -> crate::error::Result<Result<Unverified, Unusable>> {
        let path = dir.join(CHECKPOINT_FILE);
        let file = match storage.open_read(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Err(Unusable::Missing));
            }
            Err(e) => return Err(crate::error::Error::io("open", &path, &e)),
        };
        let len = file
            .metadata()
            .map_err(|e| crate::error::Error::io("stat", &path, &e))?
            .len();
        Self::read_open(file, len, &path)
    }

    /// [`Checkpoint::read`] of the checkpoint file at `path`, open as `file`, `len` bytes
    /// long.
    ///
    /// # Errors
    /// `IO` when a read fails (a file shorter than it says is `Corrupt` inside).
    pub(crate) fn read_open(
        file: std::fs::File,
        len: u64,
        path: &Path,
    ) -> crate::error::Result<Result<Unverified, Unusable>> {
        use std::os::unix::fs::FileExt;
        let read = |buf: &mut [u8], at: u64| match file.read_exact_at(buf, at) {
            Ok(()) => Ok(Ok(())),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(Err(Unusable::Corrupt)),
            Err(e) => Err(crate::error::Error::io("read", path, &e)),
        };
        let mut fixed = [0; NODES_AT];
        if let Err(why) = read(&mut fixed, 0)? {
            return Ok(Err(why));
        }
        let Some((_, nodes_end)) = Parts::nodes_end(&fixed) else {
            return Ok(Err(Unusable::Corrupt));
        };
        // The bytes after the nodes (keys, repair state, chain) are read whole: a length
        // past `TAIL_BYTES_MAX` is damage, refused before anything is allocated for it.
        let Some(tail_len) = usize::try_from(len)
            .ok()
            .and_then(|len| len.checked_sub(nodes_end))
            .filter(|&tail| tail as u64 <= TAIL_BYTES_MAX)
        else {
            return Ok(Err(Unusable::Corrupt));
        };
        let mut tail = vec![0; tail_len];
        if let Err(why) = read(&mut tail, nodes_end as u64)? {
            return Ok(Err(why));
        }
        Ok(Parts::parse(&fixed, &tail).map(|parts| Unverified { parts, file }))
    }

    /// Reads the checkpoint file of a session directory, whose log `origin` describes,
    /// and checks it against `log`: CKP-1, the keys part of CKP-2, CKP-4 and CKP-8, then
    /// CKP-3. Inside: why it cannot be used.
    ///
    /// # Errors
    /// `IO` when the file is there but cannot be read.
    ///
    /// The nodes are not read here: the file is mapped, and the surface reads them in
    /// place until it first changes (CKP-7). They are checked on their first read (CKP-2);
    /// nodes that fail then are replaced by a fold of the log `origin` names.
    pub fn load(
        dir: &Path,
        log: &impl EventSource,
        origin: LogOrigin,
    ) -> crate::error::Result<Result<Self, Unusable>> {
        let storage = Arc::clone(&origin.storage);
        Ok(Self::read(&*storage, dir)?.and_then(|read| read.verify(log, origin)))
    }
}

/// A checkpoint's fields as its file holds them, checked as far as CKP-1, the `nodes_crc`
/// of CKP-2, CKP-4 and CKP-8 go without the log: what a full check (`store.md` STORE-16)
/// compares with a fold of the log.
#[derive(Debug)]
pub(crate) struct Fields {
    pub last_text_crc: u32,
    pub seq_next: u64,
    pub generation: u64,
    pub nodes: Vec<u64>,
    pub keys: Vec<(u64, u64)>,
    pub repair: RepairState,
    pub chain: Option<RecordedChain>,
}

/// The fields of the checkpoint `bytes` of this version ([`Fields`]), or the rule they
/// break and why.
pub(crate) fn fields(bytes: &[u8]) -> Result<Fields, (&'static str, &'static str)> {
    let fixed = bytes
        .get(..NODES_AT)
        .ok_or(("CKP-1", "shorter than its fixed fields"))?;
    let (_, nodes_end) =
        Parts::nodes_end(fixed).ok_or(("CKP-1", "wrong magic, version or node count"))?;
    let (Some(node_bytes), Some(tail)) = (bytes.get(NODES_AT..nodes_end), bytes.get(nodes_end..))
    else {
        return Err(("CKP-1", "node_count runs past the end of the file"));
    };
    let parts = Parts::parse(fixed, tail).map_err(|_| {
        (
            "CKP-1",
            "checksum mismatch, or malformed keys, repair state or chain (CKP-2, CKP-4, CKP-8)",
        )
    })?;
    if crc32c::crc32c(node_bytes) != parts.nodes_crc {
        return Err(("CKP-2", "the nodes do not match nodes_crc"));
    }
    Ok(Fields {
        last_text_crc: parts.last_text_crc,
        seq_next: parts.seq_next,
        generation: parts.generation,
        nodes: node_bytes
            .chunks_exact(8)
            .map(|c| u64_at(c, 0).unwrap_or_default())
            .collect(),
        keys: parts.keys,
        repair: parts.repair,
        chain: parts.chain,
    })
}

/// Appends the chain section (CKP-8): `chain_len`, the log directory's identity, then a
/// `first_seq` and a flags byte per segment (bit 0: limited). No chain is a `chain_len`
/// of 0 and a zero identity.
fn encode_chain(chain: Option<&RecordedChain>, out: &mut Vec<u8>) {
    let zero = DirIdentity {
        dev: 0,
        ino: 0,
        birth: 0,
    };
    let (segments, identity) = chain.map_or((&[][..], zero), |c| (&c.segments[..], c.log_dir));
    let len = u32::try_from(segments.len()).unwrap_or(0);
    out.extend_from_slice(&len.to_le_bytes());
    for word in [identity.dev, identity.ino, identity.birth] {
        out.extend_from_slice(&word.to_le_bytes());
    }
    for segment in segments.iter().take(len as usize) {
        out.extend_from_slice(&segment.first_seq.to_le_bytes());
        out.push(u8::from(segment.limited));
    }
}

/// The chain section (CKP-8), which must be all of `bytes`: `Ok(None)` for no chain;
/// `Corrupt` when it is malformed (a wrong length, a flags byte other than 0 or 1, a
/// nonzero identity without segments, or segments with inode number 0).
fn decode_chain(bytes: &[u8]) -> Result<Option<RecordedChain>, Unusable> {
    let malformed = Unusable::Corrupt;
    let len = u32_at(bytes, 0).ok_or(malformed)? as usize;
    let word = |at| u64_at(bytes, at).ok_or(malformed);
    let log_dir = DirIdentity {
        dev: word(4)?,
        ino: word(12)?,
        birth: word(20)?,
    };
    let entries = bytes.get(CHAIN_HEADER..).ok_or(malformed)?;
    if Some(entries.len()) != len.checked_mul(SEGMENT_ENTRY) {
        return Err(malformed);
    }
    if len == 0 {
        let zero = log_dir.dev == 0 && log_dir.ino == 0 && log_dir.birth == 0;
        return if zero { Ok(None) } else { Err(malformed) };
    }
    if log_dir.ino == 0 {
        return Err(malformed);
    }
    let segments = entries
        .chunks_exact(SEGMENT_ENTRY)
        .map(|entry| {
            let limited = match entry.get(8) {
                Some(0) => false,
                Some(1) => true,
                _ => return Err(malformed),
            };
            let first_seq = u64_at(entry, 0).ok_or(malformed)?;
            Ok(KnownSegment { first_seq, limited })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(RecordedChain { log_dir, segments }))
}

/// RCV-14: `CORRUPT` when the checkpoint of the session directory `dir` covers
/// `durable_seq` events (its `seq_next`, read with its `crc`) and the log holds only
/// `stored`: a checkpoint is written only after the events it covers are durable (CKP-5),
/// so the events between were lost, never a stale cache to rebuild away.
///
/// # Errors
/// `CORRUPT` naming the checkpoint and the missing seqs.
pub(crate) fn check_not_ahead(dir: &Path, stored: u64, durable_seq: u64) -> crate::Result<()> {
    if stored >= durable_seq {
        return Ok(());
    }
    Err(crate::error::ErrorKind::Corrupt {
        location: dir.join(CHECKPOINT_FILE).display().to_string(),
        reason: format!(
            "the log ends at seq {stored} but its checkpoint covers {durable_seq} events: \
             seqs {stored}..{durable_seq} are missing (RCV-14)"
        ),
    }
    .into())
}

/// The most bytes a checkpoint's part after its nodes may hold (CKP-1): its keys (16 bytes
/// per replacement on the surface), repair state and chain take far less; a longer file
/// is damage, never read into memory.
const TAIL_BYTES_MAX: u64 = 256 << 20;

/// The number of events the checkpoint file at `path` says it covers, from its header
/// alone (CKP-1): what a fork needs to decide whether to share it. Nothing else is
/// checked; opening does (CKP-1 to CKP-3).
pub fn covered_len(storage: &dyn Storage, path: &Path) -> Option<u64> {
    use std::io::Read;
    let mut header = [0; 24];
    storage.open_read(path).ok()?.read_exact(&mut header).ok()?;
    let ours = header.get(..8) == Some(&CHECKPOINT_MAGIC[..])
        && u32_at(&header, 8) == Some(CHECKPOINT_VERSION);
    ours.then(|| u64_at(&header, 16))?
}

/// The file's `crc` (CKP-1): CRC-32C of the fixed fields, then of the bytes from the keys
/// to the repair state (`after`), then of `nodes_crc`: every byte before it but the nodes.
fn file_crc(fixed: &[u8], after: &[u8], nodes_crc: u32) -> u32 {
    let crc = crc32c::crc32c_append(crc32c::crc32c(fixed), after);
    crc32c::crc32c_append(crc, &nodes_crc.to_le_bytes())
}

/// CRC-32C of the text of event `seq_next − 1`, or 0 for an empty prefix.
///
/// # Errors
/// The error reading that event.
fn last_text_crc(log: &impl EventSource, seq_next: u64) -> crate::Result<u32> {
    match seq_next.checked_sub(1) {
        Some(seq) => Ok(crc32c::crc32c(log.event_at(seq)?.text().as_bytes())),
        None => Ok(0),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::indexing_slicing, reason = "tests index known-good encodings")]
    use super::*;
    use crate::event::MemLog;

    fn user(seq: u64, tail: &str) -> String {
        format!(
            r#"{{"type":"user/message","seq":{seq},"time":0,"data":{{"id":"u{seq}","role":"user","source":{{"kind":"user"}},"content":[]}}{tail}}}"#
        )
    }

    /// Five user messages, the middle three replaced by a sixth: nodes and a key; then
    /// two more with log-only events between them, so that a node can change into
    /// another seq that the invariants alone would accept (only `nodes_crc` refuses it).
    fn sample() -> (Checkpoint, MemLog) {
        let append = r#","surfaceOp":"append""#;
        let mut texts: Vec<String> = (0..5).map(|s| user(s, append)).collect();
        texts.push(user(
            5,
            r#","sourceEventSeqs":[1,2,3],"surfaceOp":{"op":"replace","start":1,"end":3}"#,
        ));
        let log_only =
            |seq| format!(r#"{{"type":"turn/start","seq":{seq},"time":0,"data":{{"turn":1}}}}"#);
        texts.extend([
            log_only(6),
            user(7, append),
            log_only(8),
            log_only(9),
            user(10, append),
        ]);
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let (surface, log) = Surface::fold_json(&texts, &Vocabulary::dsh_v0()).unwrap();
        assert_eq!(surface.nodes(), [0, 5, 4, 7, 10]);
        assert_eq!(surface.replacement_keys(), [(5, 1)]);
        let mut checkpoint = Checkpoint::of(&surface, &RepairState::default(), &log).unwrap();
        checkpoint.chain = Some(RecordedChain {
            log_dir: DirIdentity {
                dev: 7,
                ino: 1 << 40,
                birth: 1_700_000_000_123_456_789,
            },
            segments: vec![
                KnownSegment {
                    first_seq: 0,
                    limited: false,
                },
                KnownSegment {
                    first_seq: 6,
                    limited: true,
                },
            ],
        });
        (checkpoint, log)
    }

    /// The bytes of `checkpoint` with its chain section (CKP-8) replaced by `section`, the
    /// CRC redone.
    fn with_chain_section(checkpoint: &Checkpoint, section: &[u8]) -> Vec<u8> {
        let bytes = checkpoint.encode();
        let mut plain = checkpoint.clone();
        plain.chain = None;
        let old_len = bytes.len() - plain.encode().len() + CHAIN_HEADER;
        let section_at = bytes.len() - 8 - old_len;
        let mut out = bytes[..section_at].to_vec();
        out.extend_from_slice(section);
        let nodes_end = 48 + 8 * checkpoint.surface.nodes().len();
        let nodes_crc = crc32c::crc32c(&out[48..nodes_end]);
        out.extend_from_slice(&nodes_crc.to_le_bytes());
        let crc = file_crc(&out[..48], &out[nodes_end..out.len() - 4], nodes_crc);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// CKP-8: the chain section round-trips, and one that is malformed is refused even
    /// under a matching CRC: a flags byte other than 0 or 1, a length that does not fit,
    /// an identity without segments.
    #[test]
    fn the_chain_section_round_trips_and_a_malformed_one_is_refused() {
        let (checkpoint, log) = sample();
        let mut section = Vec::new();
        encode_chain(checkpoint.chain.as_ref(), &mut section);
        assert_eq!(section.len(), CHAIN_HEADER + 2 * SEGMENT_ENTRY);
        let redone = with_chain_section(&checkpoint, &section);
        assert_eq!(
            redone,
            checkpoint.encode(),
            "the section is found where it is"
        );
        assert_eq!(Checkpoint::decode(&redone, &log), Ok(checkpoint.clone()));
        let mut bad_flag = section.clone();
        bad_flag[CHAIN_HEADER + 8] = 2;
        let mut short = section.clone();
        short.pop();
        let mut long = section.clone();
        long.push(0);
        let mut identity_only = vec![0; 4];
        identity_only.extend_from_slice(&section[4..CHAIN_HEADER]);
        let mut no_inode = section.clone();
        no_inode[12..20].fill(0);
        for (what, bad) in [
            ("flag", bad_flag),
            ("short", short),
            ("long", long),
            ("identity only", identity_only),
            ("inode 0", no_inode),
        ] {
            assert_eq!(
                Checkpoint::decode(&with_chain_section(&checkpoint, &bad), &log),
                Err(Unusable::Corrupt),
                "{what}"
            );
        }
        let mut none = checkpoint.clone();
        none.chain = None;
        let mut empty = Vec::new();
        encode_chain(None, &mut empty);
        assert_eq!(empty, [0; CHAIN_HEADER]);
        assert_eq!(Checkpoint::decode(&none.encode(), &log), Ok(none));
    }

    #[test]
    fn a_checkpoint_decodes_to_what_was_encoded() {
        let (checkpoint, log) = sample();
        let bytes = checkpoint.encode();
        assert_eq!(Checkpoint::decode(&bytes, &log), Ok(checkpoint));
        let empty =
            Checkpoint::of(&Surface::new(), &RepairState::default(), &MemLog::new()).unwrap();
        assert_eq!(
            Checkpoint::decode(&empty.encode(), &MemLog::new()),
            Ok(empty)
        );
    }

    /// CKP-1, CKP-2: `crc` and `nodes_crc` together cover every byte, so a checkpoint
    /// checked whole refuses any flipped bit; so does a shorter or longer file.
    #[test]
    fn every_flipped_bit_and_every_other_length_is_refused() {
        let (checkpoint, log) = sample();
        let bytes = checkpoint.encode();
        for at in 0..bytes.len() {
            for bit in 0..8 {
                let mut damaged = bytes.clone();
                damaged[at] ^= 1 << bit;
                assert!(
                    Checkpoint::decode(&damaged, &log).is_err(),
                    "bit {bit} of byte {at}"
                );
            }
        }
        for len in 0..bytes.len() {
            assert!(
                Checkpoint::decode(&bytes[..len], &log).is_err(),
                "{len} bytes"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(Checkpoint::decode(&longer, &log).is_err());
    }

    /// CKP-1: a version 2 checkpoint (no chain section) is ignored, not migrated, even
    /// with its CRC redone.
    #[test]
    fn a_version_2_checkpoint_is_corrupt() {
        let (mut checkpoint, log) = sample();
        checkpoint.chain = None;
        let bytes = checkpoint.encode();
        let nodes_end = 48 + 8 * checkpoint.surface.nodes().len();
        let without_chain = |version: u32| {
            let mut old = bytes[..bytes.len() - 8 - CHAIN_HEADER].to_vec();
            old[8..12].copy_from_slice(&version.to_le_bytes());
            let nodes_crc = crc32c::crc32c(&old[48..nodes_end]);
            let crc = file_crc(&old[..48], &old[nodes_end..], nodes_crc);
            old.extend_from_slice(&nodes_crc.to_le_bytes());
            old.extend_from_slice(&crc.to_le_bytes());
            old
        };
        assert_eq!(
            Checkpoint::decode(&without_chain(2), &log),
            Err(Unusable::Corrupt)
        );
        assert_eq!(
            Checkpoint::decode(&without_chain(3), &log),
            Err(Unusable::Corrupt),
            "and it is no version 3 file either"
        );
    }

    /// CKP-1: a version 1 checkpoint (one CRC over every byte) is ignored, not migrated.
    #[test]
    fn a_version_1_checkpoint_is_corrupt() {
        let (checkpoint, log) = sample();
        let bytes = checkpoint.encode();
        let mut old = bytes[..bytes.len() - 8].to_vec();
        old[8..12].copy_from_slice(&1_u32.to_le_bytes());
        let crc = crc32c::crc32c(&old);
        old.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(Checkpoint::decode(&old, &log), Err(Unusable::Corrupt));
    }

    /// CKP-1, log-format.md VER-2: a later version is ignored on its magic and version
    /// alone: neither its node count nor its CRCs are read, whatever they hold.
    #[test]
    fn a_later_version_is_ignored_before_its_fields_and_crcs() {
        let (checkpoint, log) = sample();
        let mut later = checkpoint.encode();
        later[8..12].copy_from_slice(&4_u32.to_le_bytes());
        // A node count no file holds, and CRCs that are not version 3's.
        later[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        let last = later.len() - 1;
        later[last] ^= 0xFF;
        assert_eq!(Checkpoint::decode(&later, &log), Err(Unusable::Corrupt));
        assert_eq!(Parts::nodes_end(&later[..NODES_AT]), None);
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        std::fs::write(dir.join(CHECKPOINT_FILE), &later).unwrap();
        let read = Checkpoint::read(&crate::storage::FsStorage, dir)
            .unwrap()
            .map(|_| ());
        let covered = covered_len(&crate::storage::FsStorage, &dir.join(CHECKPOINT_FILE));
        assert_eq!(read, Err(Unusable::Corrupt));
        assert_eq!(covered, None);
    }

    /// CKP-4, byte by byte: an open turn with a value, an open step without one, and one
    /// pending call with a step and no `tool/call` yet.
    #[test]
    fn the_repair_state_is_encoded_as_ckp_4_says() {
        let mut state = RepairState::default();
        state.observe(0, "turn/start", r#"{"turn":1}"#);
        state.observe(1, "step/start", "{}");
        state.observe(
            2,
            "assistant/message",
            r#"{"step":"s","message":{"content":[{"type":"tool-call","id":"c1"}]}}"#,
        );
        let mut bytes = Vec::new();
        state.encode(&mut bytes);
        let expected: &[&[u8]] = &[
            &[1, 1, 1, 0, 0, 0, b'1'],             // open_turn: present, the string "1"
            &[1, 0],                               // open_step: present, no value
            &[1, 0, 0, 0],                         // pending_count
            &[2, 0, 0, 0, b'c', b'1'],             // call_id
            &[1, 1, 3, 0, 0, 0, b'"', b's', b'"'], // step: always present, the string "\"s\""
            &[0],                                  // call_seq: none
        ];
        assert_eq!(bytes, expected.concat());
        assert_eq!(RepairState::decode(&bytes), Some(state));
        // A step tag of 00 (absent) is not an encoding of a pending call.
        // (The step starts at byte 19; with `00` there the call seq follows at once.)
        let absent_step = [&bytes[..19], &[0, 0]].concat();
        assert_eq!(RepairState::decode(&absent_step), None);
        let present_step = [&bytes[..19], &[1, 0, 0]].concat();
        assert!(RepairState::decode(&present_step).is_some());
    }
}
