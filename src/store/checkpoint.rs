//! The surface checkpoint beside a session's log (`format-spec/checkpoint.md`): the
//! surface and the repair scan state as of some seq, so that opening a session folds only
//! the events after it.
#![deny(clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;

use crate::event::{EventSource, Vocabulary};
use crate::log::{LogReader, MappedWords};
use crate::record::{u32_at, u64_at};
use crate::session::repair::RepairState;
use crate::storage::Storage;
use crate::surface::{Refold, Surface};

/// `"surfchk\0"` (CKP-1).
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"surfchk\0";
/// The checkpoint format version (CKP-1).
pub const CHECKPOINT_VERSION: u32 = 2;
/// The checkpoint's file name in a session directory.
pub const CHECKPOINT_FILE: &str = "checkpoint";
/// Where the nodes start (CKP-1): after the fixed fields, 8-byte aligned.
const NODES_AT: usize = 48;

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
}

/// Why a checkpoint was not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unusable {
    /// No checkpoint file.
    Missing,
    /// The bytes are not a valid checkpoint (CKP-1, CKP-2, CKP-4).
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
            let reader = LogReader::open_with(&self.dir, Arc::clone(&self.storage)).ok()?;
            let prefix = crate::session::Prefix {
                log: &reader,
                len: seq_next,
            };
            let surface = Surface::fold(&prefix, &self.vocabulary).ok()?;
            let same = surface.seq_next() == seq_next
                && surface.replace_generation() == generation
                && surface.replacement_keys() == keys.as_slice();
            same.then(|| surface.nodes().to_vec())
        })
    }
}

impl Checkpoint {
    /// The checkpoint of `surface` and `repair` over `log`.
    pub fn of(surface: &Surface, repair: &RepairState, log: &impl EventSource) -> Self {
        Self {
            surface: surface.clone(),
            repair: repair.clone(),
            last_text_crc: last_text_crc(log, surface.seq_next()),
        }
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
        let (fixed, rest) = out.split_at(NODES_AT);
        let (node_bytes, after) = rest.split_at(nodes_end - NODES_AT);
        let nodes_crc = crc32c::crc32c(node_bytes);
        let crc = file_crc(fixed, after, nodes_crc);
        out.extend_from_slice(&nodes_crc.to_le_bytes());
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Reads a checkpoint and checks all of it against `log` (CKP-1 to CKP-3), nodes
    /// included.
    ///
    /// # Errors
    /// Why it cannot be used; the caller then folds the whole log.
    pub fn decode(bytes: &[u8], log: &impl EventSource) -> Result<Self, Unusable> {
        Self::decode_from(bytes, None, log)
    }

    /// [`Checkpoint::decode`] of `bytes`, which are all of `map` when it is given: the
    /// surface then reads its nodes in place from the map instead of copying them, and
    /// checks them on their first read, rebuilding them from `origin` if they fail (CKP-2,
    /// CKP-7).
    fn decode_from(
        bytes: &[u8],
        map: Option<(&Arc<Mmap>, LogOrigin)>,
        log: &impl EventSource,
    ) -> Result<Self, Unusable> {
        let (rest, crc) = bytes.split_last_chunk::<4>().ok_or(Unusable::Corrupt)?;
        let (body, nodes_crc) = rest.split_last_chunk::<4>().ok_or(Unusable::Corrupt)?;
        let nodes_crc = u32::from_le_bytes(*nodes_crc);
        if body.get(..8) != Some(&CHECKPOINT_MAGIC[..])
            || u32_at(body, 8) != Some(CHECKPOINT_VERSION)
        {
            return Err(Unusable::Corrupt);
        }
        // The counts are read before the CRC vouches for them, only to find where the
        // nodes end; every use is checked arithmetic.
        let field = |at| u64_at(body, at).ok_or(Unusable::Corrupt);
        let count = |at| usize::try_from(field(at)?).map_err(|_| Unusable::Corrupt);
        let (node_count, key_count) = (count(32)?, count(40)?);
        let nodes_end = node_count
            .checked_mul(8)
            .and_then(|n| n.checked_add(NODES_AT))
            .ok_or(Unusable::Corrupt)?;
        let (Some(fixed), Some(node_bytes), Some(after)) = (
            body.get(..NODES_AT),
            body.get(NODES_AT..nodes_end),
            body.get(nodes_end..),
        ) else {
            return Err(Unusable::Corrupt);
        };
        if file_crc(fixed, after, nodes_crc) != u32::from_le_bytes(*crc) {
            return Err(Unusable::Corrupt);
        }
        let crc_of_last = u32_at(body, 12).ok_or(Unusable::Corrupt)?;
        let (seq_next, generation) = (field(16)?, field(24)?);
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
        let repair_len = u32_at(after, keys_bytes.len()).ok_or(Unusable::Corrupt)? as usize;
        let repair_bytes = after
            .get(keys_bytes.len() + 4..)
            .filter(|r| r.len() == repair_len)
            .ok_or(Unusable::Corrupt)?;
        let repair = RepairState::decode(repair_bytes).ok_or(Unusable::Corrupt)?;
        // CKP-3 first: it reads one event of the log, not the nodes.
        if seq_next > log.seq_next() || last_text_crc(log, seq_next) != crc_of_last {
            return Err(Unusable::Stale);
        }
        // Read in place, checked on first read, when they can be; otherwise copied
        // (`map` keeps the exact length, so the vector is allocated once) and checked now.
        let mapped = map.and_then(|(map, origin)| {
            MappedWords::new(Arc::clone(map), NODES_AT, node_count).map(|w| (w, origin))
        });
        let surface = if let Some((words, origin)) = mapped {
            let refold = origin.refold(seq_next, keys.clone(), generation);
            Surface::from_deferred_parts(words, nodes_crc, keys, generation, seq_next, refold)
        } else {
            if crc32c::crc32c(node_bytes) != nodes_crc {
                return Err(Unusable::Corrupt);
            }
            let nodes = node_bytes
                .chunks_exact(8)
                .map(|c| u64_at(c, 0).unwrap_or_default())
                .collect();
            Surface::from_parts(nodes, keys, generation, seq_next)
        }
        .ok_or(Unusable::Corrupt)?;
        Ok(Self {
            surface,
            repair,
            last_text_crc: crc_of_last,
        })
    }

    /// Reads the checkpoint file of a session directory, whose log `origin` describes.
    ///
    /// # Errors
    /// Why it cannot be used.
    ///
    /// The file is mapped rather than read, and the surface reads its nodes in place from
    /// the map until it first changes (CKP-7): opening neither reads nor copies them. They
    /// are checked on their first read (CKP-2); nodes that fail then are replaced by a
    /// fold of the log `origin` names.
    pub fn load(dir: &Path, log: &impl EventSource, origin: LogOrigin) -> Result<Self, Unusable> {
        let Ok(file) = std::fs::File::open(dir.join(CHECKPOINT_FILE)) else {
            return Err(Unusable::Missing);
        };
        let map = Arc::new(crate::log::map_file(&file).map_err(|_| Unusable::Corrupt)?);
        Self::decode_from(&map, Some((&map, origin)), log)
    }
}

/// The number of events the checkpoint file at `path` says it covers, from its header
/// alone (CKP-1): what a fork needs to decide whether to share it. Nothing else is
/// checked; opening does (CKP-1 to CKP-3).
pub fn covered_len(path: &Path) -> Option<u64> {
    use std::io::Read;
    let mut header = [0; 24];
    std::fs::File::open(path)
        .ok()?
        .read_exact(&mut header)
        .ok()?;
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
fn last_text_crc(log: &impl EventSource, seq_next: u64) -> u32 {
    seq_next
        .checked_sub(1)
        .and_then(|seq| log.event(seq))
        .map_or(0, |e| crc32c::crc32c(e.text.as_bytes()))
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
        let checkpoint = Checkpoint::of(&surface, &RepairState::default(), &log);
        (checkpoint, log)
    }

    #[test]
    fn a_checkpoint_decodes_to_what_was_encoded() {
        let (checkpoint, log) = sample();
        let bytes = checkpoint.encode();
        assert_eq!(Checkpoint::decode(&bytes, &log), Ok(checkpoint));
        let empty = Checkpoint::of(&Surface::new(), &RepairState::default(), &MemLog::new());
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
}
