//! Surface nodes read in place from a mapped checkpoint file, read and checked on their
//! first read (`format-spec/checkpoint.md` CKP-2, CKP-7), so that opening a session reads
//! none of them.
//!
//! The first read checks the nodes' CRC-32C and the surface invariants over them, once,
//! for every handle sharing them. Nodes that fail are never returned: the session's log
//! is folded again to give them ([`Refold`]); when that fold fails too (the log itself
//! is damaged under the checkpoint), the nodes read as empty and
//! [`NodeState::Lost`](super::NodeState::Lost) says so.

use std::fmt;
use std::sync::{Arc, OnceLock};

use crate::log::FileWords;

/// Folds a session's log again up to the checkpoint's `seq_next` and returns the nodes,
/// when a checkpoint's nodes fail their check; `None` when that fold fails or does not end
/// in the checkpoint's replacement keys and generation.
pub type Refold = Box<dyn Fn() -> Option<Vec<u64>> + Send + Sync>;

/// Nodes in a checkpoint file whose reading and check are deferred to their first read.
/// Clones share the nodes and the outcome of the check.
#[derive(Clone)]
pub(crate) struct Deferred {
    shared: Arc<Shared>,
}

struct Shared {
    words: FileWords,
    /// CRC-32C of the node bytes (CKP-1).
    crc: u32,
    /// The surface's replacement keys and next seq, which the invariants are checked
    /// against (a surface with deferred nodes has not changed since it was loaded: its
    /// first change copies them, `Nodes::to_mut`).
    keys: Vec<(u64, u64)>,
    seq_next: u64,
    refold: Refold,
    outcome: OnceLock<Outcome>,
}

/// What the first read found.
enum Outcome {
    /// The mapped nodes passed: they are read in place.
    Checked,
    /// They failed; these nodes come from a fold of the log.
    Refolded(Vec<u64>),
    /// They failed, and so did the fold of the log: the nodes read as empty.
    Lost,
}

impl Deferred {
    /// Nodes `words`, with their CRC-32C as the checkpoint gives it, for a surface with
    /// `keys` expecting `seq_next`.
    pub(crate) fn new(
        words: FileWords,
        crc: u32,
        keys: Vec<(u64, u64)>,
        seq_next: u64,
        refold: Refold,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                words,
                crc,
                keys,
                seq_next,
                refold,
                outcome: OnceLock::new(),
            }),
        }
    }

    /// The nodes, checked (or refolded) on the first call.
    pub(crate) fn nodes(&self) -> &[u64] {
        let shared = &*self.shared;
        let outcome = shared.outcome.get_or_init(|| {
            let sound = shared.words.crc() == Some(shared.crc)
                && super::parts_valid(shared.words.as_slice(), &shared.keys, shared.seq_next);
            if sound {
                return Outcome::Checked;
            }
            match (shared.refold)() {
                Some(nodes) if super::parts_valid(&nodes, &shared.keys, shared.seq_next) => {
                    Outcome::Refolded(nodes)
                }
                _ => Outcome::Lost,
            }
        });
        match outcome {
            Outcome::Checked => shared.words.as_slice(),
            Outcome::Refolded(nodes) => nodes,
            Outcome::Lost => &[],
        }
    }

    /// The number of nodes the checkpoint lists, without reading them.
    pub(crate) fn listed_len(&self) -> usize {
        self.shared.words.len()
    }

    /// Bytes of heap memory held (refolded nodes, or nodes read rather than mapped).
    pub(crate) fn heap_bytes(&self) -> usize {
        let refolded = match self.shared.outcome.get() {
            Some(Outcome::Refolded(nodes)) => nodes.capacity() * size_of::<u64>(),
            _ => 0,
        };
        refolded + self.shared.words.heap_bytes()
    }

    /// The state of the check (see [`NodeState`](super::NodeState)).
    pub(crate) fn state(&self) -> super::NodeState {
        match self.shared.outcome.get() {
            None => super::NodeState::Unchecked,
            Some(Outcome::Checked) => super::NodeState::Checked,
            Some(Outcome::Refolded(_)) => super::NodeState::Refolded,
            Some(Outcome::Lost) => super::NodeState::Lost,
        }
    }
}

impl fmt::Debug for Deferred {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deferred")
            .field("listed", &self.listed_len())
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}
