//! The surface checkpoint beside a session's log (`format-spec/checkpoint.md`): the
//! surface and the repair scan state as of some seq, so that opening a session folds only
//! the events after it.
#![deny(clippy::indexing_slicing)]

use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;

use crate::event::EventSource;
use crate::log::MappedWords;
use crate::record::{u32_at, u64_at};
use crate::session::repair::RepairState;
use crate::surface::Surface;

/// `"surfchk\0"` (CKP-1).
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"surfchk\0";
/// The checkpoint format version (CKP-1).
pub const CHECKPOINT_VERSION: u32 = 1;
/// The checkpoint's file name in a session directory.
pub const CHECKPOINT_FILE: &str = "checkpoint";

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
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Reads a checkpoint and checks it against `log` (CKP-2, CKP-3).
    ///
    /// # Errors
    /// Why it cannot be used; the caller then folds the whole log.
    pub fn decode(bytes: &[u8], log: &impl EventSource) -> Result<Self, Unusable> {
        Self::decode_from(bytes, None, log)
    }

    /// [`Checkpoint::decode`] of `bytes`, which are all of `map` when it is given: the
    /// surface then borrows its nodes from the map instead of copying them (CKP-7).
    fn decode_from(
        bytes: &[u8],
        map: Option<&Arc<Mmap>>,
        log: &impl EventSource,
    ) -> Result<Self, Unusable> {
        let (body, crc) = bytes.split_last_chunk::<4>().ok_or(Unusable::Corrupt)?;
        if crc32c::crc32c(body) != u32::from_le_bytes(*crc)
            || body.get(..8) != Some(&CHECKPOINT_MAGIC[..])
        {
            return Err(Unusable::Corrupt);
        }
        if u32_at(body, 8) != Some(CHECKPOINT_VERSION) {
            return Err(Unusable::Corrupt);
        }
        let crc_of_last = u32_at(body, 12).ok_or(Unusable::Corrupt)?;
        let field = |at| u64_at(body, at).ok_or(Unusable::Corrupt);
        let (seq_next, generation) = (field(16)?, field(24)?);
        let node_count = usize::try_from(field(32)?).map_err(|_| Unusable::Corrupt)?;
        let key_count = usize::try_from(field(40)?).map_err(|_| Unusable::Corrupt)?;
        let nodes_end = node_count
            .checked_mul(8)
            .and_then(|n| n.checked_add(48))
            .ok_or(Unusable::Corrupt)?;
        let keys_end = key_count
            .checked_mul(16)
            .and_then(|n| n.checked_add(nodes_end))
            .ok_or(Unusable::Corrupt)?;
        let node_bytes = body.get(48..nodes_end).ok_or(Unusable::Corrupt)?;
        // Read in place when they can be; otherwise copied (`map` keeps the exact length,
        // so the vector is allocated once).
        let mapped = map.and_then(|map| MappedWords::new(Arc::clone(map), 48, node_count));
        let nodes = || -> Vec<u64> {
            node_bytes
                .chunks_exact(8)
                .map(|c| u64_at(c, 0).unwrap_or_default())
                .collect()
        };
        let keys: Vec<(u64, u64)> = body
            .get(nodes_end..keys_end)
            .ok_or(Unusable::Corrupt)?
            .chunks_exact(16)
            .map(|c| {
                (
                    u64_at(c, 0).unwrap_or_default(),
                    u64_at(c, 8).unwrap_or_default(),
                )
            })
            .collect();
        let repair_len = u32_at(body, keys_end).ok_or(Unusable::Corrupt)? as usize;
        let repair_bytes = body
            .get(keys_end + 4..)
            .filter(|r| r.len() == repair_len)
            .ok_or(Unusable::Corrupt)?;
        let repair = RepairState::decode(repair_bytes).ok_or(Unusable::Corrupt)?;
        let surface = match mapped {
            Some(words) => Surface::from_mapped_parts(words, keys, generation, seq_next),
            None => Surface::from_parts(nodes(), keys, generation, seq_next),
        }
        .ok_or(Unusable::Corrupt)?;
        if seq_next > log.seq_next() || last_text_crc(log, seq_next) != crc_of_last {
            return Err(Unusable::Stale);
        }
        Ok(Self {
            surface,
            repair,
            last_text_crc: crc_of_last,
        })
    }

    /// Reads the checkpoint file of a session directory.
    ///
    /// # Errors
    /// Why it cannot be used.
    /// The file is mapped rather than read, and the surface reads its nodes in place from
    /// the map until it first changes (CKP-7): opening copies none of them.
    pub fn load(dir: &Path, log: &impl EventSource) -> Result<Self, Unusable> {
        let Ok(file) = std::fs::File::open(dir.join(CHECKPOINT_FILE)) else {
            return Err(Unusable::Missing);
        };
        let map = Arc::new(crate::log::map_file(&file).map_err(|_| Unusable::Corrupt)?);
        Self::decode_from(&map, Some(&map), log)
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

/// CRC-32C of the text of event `seq_next − 1`, or 0 for an empty prefix.
fn last_text_crc(log: &impl EventSource, seq_next: u64) -> u32 {
    seq_next
        .checked_sub(1)
        .and_then(|seq| log.event(seq))
        .map_or(0, |e| crc32c::crc32c(e.text.as_bytes()))
}
