//! Surface nodes read in place from a mapped checkpoint file, read and checked on their
//! first read (`format-spec/checkpoint.md` CKP-2, CKP-7), so that opening a session reads
//! none of them.
//!
//! The first read checks the nodes' CRC-32C and the surface invariants over them, once,
//! for every handle sharing them. Nodes that fail are never returned: the session's log
//! is folded again to give them ([`Refold`]); when that fold fails too (the log itself
//! is damaged under the checkpoint), the nodes read as empty and
//! [`NodeState::Lost`](super::NodeState::Lost) says so.
//!
//! A map is not a copy: its pages may be read again from the disk or the page cache at
//! any access, so nodes that passed are checked again ([`Deferred::check_again`], their
//! CRC-32C) as each later read that relies on them begins (the messages, the surface
//! handed to a caller, the copy at the surface's first change, a checkpoint or message
//! pack written from it). Nodes that fail then are not used from then on, as at the
//! first read.

use std::fmt;
use std::sync::{Arc, OnceLock};

use crate::log::FileWords;

/// Folds a session's log again up to the checkpoint's `seq_next` and returns the nodes,
/// when a checkpoint's nodes fail their check; `Ok(None)` when that fold does not end in
/// the checkpoint's replacement keys and generation, the error when it fails (the log
/// damaged under the checkpoint, or unreadable: `IO`).
pub type Refold = Box<dyn Fn() -> crate::Result<Option<Vec<u64>>> + Send + Sync>;

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
    /// What a later check found when the nodes that passed the first no longer did (they
    /// changed in the map since): used instead of them from then on.
    again: OnceLock<Outcome>,
}

/// What the first read found.
enum Outcome {
    /// The mapped nodes passed: they are read in place.
    Checked,
    /// They failed; these nodes come from a fold of the log.
    Refolded(Vec<u64>),
    /// They failed, and so did the fold of the log: the nodes read as empty. With the
    /// I/O error that made the fold fail, when one did (the log may be sound).
    Lost(Option<IoCause>),
}

/// An `IO` error as [`crate::ErrorKind::Io`] holds it, kept to be reported again.
struct IoCause {
    op: &'static str,
    path: std::path::PathBuf,
    kind: std::io::ErrorKind,
    message: String,
}

impl Shared {
    /// The nodes of a fold of the log, for nodes that failed their check; lost when that
    /// fold fails too.
    fn refolded(&self) -> Outcome {
        match (self.refold)() {
            Ok(Some(nodes)) if super::parts_valid(&nodes, &self.keys, self.seq_next) => {
                Outcome::Refolded(nodes)
            }
            Err(error) => match error.kind() {
                crate::ErrorKind::Io {
                    op,
                    path,
                    kind,
                    message,
                } => Outcome::Lost(Some(IoCause {
                    op,
                    path: path.clone(),
                    kind: *kind,
                    message: message.clone(),
                })),
                _ => Outcome::Lost(None),
            },
            Ok(_) => Outcome::Lost(None),
        }
    }
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
                again: OnceLock::new(),
            }),
        }
    }

    /// The nodes, checked (or refolded) on the first call.
    pub(crate) fn nodes(&self) -> &[u64] {
        let shared = &*self.shared;
        let outcome = match shared.again.get() {
            Some(again) => again,
            None => shared.outcome.get_or_init(|| {
                let sound = shared.words.crc() == Some(shared.crc)
                    && super::parts_valid(shared.words.as_slice(), &shared.keys, shared.seq_next);
                if sound {
                    return Outcome::Checked;
                }
                shared.refolded()
            }),
        };
        match outcome {
            Outcome::Checked => shared.words.as_slice(),
            Outcome::Refolded(nodes) => nodes,
            Outcome::Lost(_) => &[],
        }
    }

    /// CKP-2 again, as a read that relies on the nodes begins: nodes that passed their
    /// first check and are read in place from the map have their CRC-32C computed again,
    /// and when it no longer matches (the bytes changed in the map since), they are not
    /// used from now on: the nodes come from a fold of the log, or read as lost, as when
    /// the first check fails. Nodes not read yet are left to their first read (which
    /// checks them); nodes read into memory, or already refolded or lost, are not read
    /// again.
    pub(crate) fn check_again(&self) {
        let shared = &*self.shared;
        if shared.again.get().is_some()
            || !matches!(shared.outcome.get(), Some(Outcome::Checked))
            || shared.words.crc() == Some(shared.crc)
        {
            return;
        }
        tracing::warn!(
            target: "surfacelog",
            seq = shared.seq_next,
            "checkpoint nodes changed in the map since their check: no longer used (CKP-2)"
        );
        shared.again.get_or_init(|| shared.refolded());
    }

    /// The number of nodes the checkpoint lists, without reading them.
    pub(crate) fn listed_len(&self) -> usize {
        self.shared.words.len()
    }

    /// Bytes of heap memory held (refolded nodes, or nodes read rather than mapped).
    pub(crate) fn heap_bytes(&self) -> usize {
        let refolded = [self.shared.outcome.get(), self.shared.again.get()]
            .into_iter()
            .map(|outcome| match outcome {
                Some(Outcome::Refolded(nodes)) => nodes.capacity() * size_of::<u64>(),
                _ => 0,
            })
            .sum::<usize>();
        refolded + self.shared.words.heap_bytes()
    }

    /// The state of the check (see [`NodeState`](super::NodeState)).
    pub(crate) fn state(&self) -> super::NodeState {
        match self
            .shared
            .again
            .get()
            .or_else(|| self.shared.outcome.get())
        {
            None => super::NodeState::Unchecked,
            Some(Outcome::Checked) => super::NodeState::Checked,
            Some(Outcome::Refolded(_)) => super::NodeState::Refolded,
            Some(Outcome::Lost(_)) => super::NodeState::Lost,
        }
    }
}

impl Deferred {
    /// The I/O error that made the fold behind lost nodes fail, made again: the nodes
    /// are lost for this session, but the log under them may be sound (CKP-2).
    pub(crate) fn lost_io(&self) -> Option<crate::Error> {
        let outcome = self
            .shared
            .again
            .get()
            .or_else(|| self.shared.outcome.get());
        let Some(Outcome::Lost(Some(cause))) = outcome else {
            return None;
        };
        Some(
            crate::ErrorKind::Io {
                op: cause.op,
                path: cause.path.clone(),
                kind: cause.kind,
                message: cause.message.clone(),
            }
            .into(),
        )
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
