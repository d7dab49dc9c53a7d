//! The log of a stored session: the on-disk log plus what the store keeps beside it, the
//! repair scan state, the surface checkpoint (`format-spec/checkpoint.md`) and the
//! message pack (`format-spec/message-pack.md`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::checkpoint::{CHECKPOINT_FILE, Checkpoint, RecordedChain};
use super::pack::{self, LazyPack};
use crate::error::Result;
use crate::event::{Event, EventRef, EventSource, MessageText, SharedBytes};
use crate::log::DiskLog;
use crate::session::SessionLog;
use crate::session::repair::RepairState;
use crate::storage::Storage;
use crate::surface::{NodeState, Surface};

/// A stored session's log. Appends go to the on-disk log; the repair scan (contract §8) is
/// kept up to date as events are appended, and the surface is checkpointed every
/// `every` events, and on flush and on close when the checkpoint on disk does not already
/// cover every event (CKP-5).
///
/// The repair scan is lazy: a `turn/end` resets it without being read, and the events
/// after the last one are read only when the closers or a checkpoint need the state. A
/// session's open turn is short, so appends do not parse their data a second time.
#[derive(Debug)]
pub struct StoredLog {
    log: DiskLog,
    /// The repair state after the events before `observed`.
    repair: RepairState,
    observed: u64,
    /// The session directory, where the checkpoint (`checkpoint.md`) and the message pack
    /// are.
    dir: PathBuf,
    /// The storage the checkpoint is written through (no-follow opens, STORE-1).
    storage: Arc<dyn Storage>,
    every: u64,
    since: u64,
    /// Whether the checkpoint file holds the state after every event of the log: used at
    /// open with no event after it, or written since the last append. Flush and close
    /// then write none (CKP-5), unless its nodes failed their check: a session opened,
    /// read and closed writes nothing.
    checkpointed: bool,
    /// Whether a checkpoint was written since the surface's nodes failed their check
    /// (CKP-2, [`NodeState::Refolded`]): the damaged checkpoint is then replaced, and is
    /// not written again at each flush.
    refold_written: bool,
    /// The message pack, read and checked on the first message read (MSP-1, MSP-2).
    pack: LazyPack,
    /// The `seq_next` of the pack file as this writer knows it (0: none), for MSP-5;
    /// `None` until first needed.
    pack_covers: Option<u64>,
    /// MSP-5's `pack_min`; 0: no pack is written.
    pack_min: u64,
    /// The Zstandard level a pack is compressed at once written (MSP-8), when it is.
    pack_level: Option<i32>,
}

impl StoredLog {
    /// Whether appends return once written, their `Sync` wait deferred (DUR-11).
    pub(crate) fn set_defer_sync(&mut self, defer: bool) {
        self.log.set_defer_sync(defer);
    }

    /// Writes the buffered records to the OS, without a sync.
    ///
    /// # Errors
    /// As `LogWriter::write_out`.
    pub(crate) fn write_out(&self) -> Result<()> {
        self.log.write_out()
    }

    /// The wait for deferred appends (DUR-11).
    pub(crate) fn durable_wait(&self) -> crate::log::DurableWait {
        self.log.durable_wait()
    }

    /// Wraps `log`, whose first `from` events `repair` has observed; its checkpoint is
    /// written into the session directory `dir` through `storage`, and a message pack
    /// beside it whenever MSP-5 says, with `pack_min`.
    ///
    /// # Errors
    /// The error reading an event after `from` (`CORRUPT` with the file and offset).
    pub(crate) fn new(
        log: DiskLog,
        mut repair: RepairState,
        from: u64,
        dir: PathBuf,
        storage: Arc<dyn Storage>,
        every: u64,
        pack_min: u64,
    ) -> Result<Self> {
        repair.observe_from(&log, from)?;
        let observed = log.seq_next();
        pack::remove_if_ahead(&*storage, &dir, observed)?;
        Ok(Self {
            log,
            repair,
            observed,
            dir,
            storage,
            every: every.max(1),
            since: 0,
            checkpointed: false,
            refold_written: false,
            pack: LazyPack::default(),
            pack_covers: None,
            pack_min,
            pack_level: None,
        })
    }

    /// Compresses each message pack this log writes at Zstandard `level` (message-pack.md
    /// MSP-8), when given (and built with the `compress` feature).
    pub(crate) fn compressing_pack(mut self, level: Option<i32>) -> Self {
        self.pack_level = level;
        self
    }

    /// The session directory: where the checkpoint and the pack are.
    fn session_dir(&self) -> &Path {
        &self.dir
    }

    /// Writes a message pack of `surface` when MSP-5 says so. A failure is ignored: the pack
    /// is a cache, and the old one stays bound to the log it was written from (MSP-6).
    fn write_pack(&mut self, surface: &Surface) {
        if self.pack_min == 0 {
            return;
        }
        // What the pack on disk covers when it is bound to this log (MSP-2); one found
        // unusable when read covers nothing.
        let covers = self
            .pack_covers
            .unwrap_or_else(|| pack::bound_len(&*self.storage, self.session_dir(), &self.log));
        let covers = if self.pack.unusable() { 0 } else { covers };
        self.pack_covers = Some(covers);
        if !pack::due(surface, covers, self.pack_min) {
            return;
        }
        // MSP-3: every text read from its log record, never from the old pack; MSP-8:
        // compressed as it is written when the store says so.
        let (storage, dir) = (&*self.storage, self.session_dir());
        let written = match self.pack_level {
            #[cfg(feature = "compress")]
            Some(level) => pack::write_compressed(storage, dir, surface, &self.log, level),
            _ => pack::write(storage, dir, surface, &self.log),
        };
        if let Ok(covers) = written {
            self.pack_covers = Some(covers);
            self.pack = LazyPack::default();
        }
    }

    /// Records that the checkpoint this log was opened with covers every event of it
    /// (CKP-3, CKP-8: it matched the log and its chain opened it), so that flush and close
    /// do not write it again until an event is appended.
    pub(crate) fn checkpoint_covers_all(&mut self) {
        self.checkpointed = true;
    }

    /// Writes the checkpoint of `surface` now (CKP-5) unless the one on disk already
    /// covers every event, and with `pack` the message pack when MSP-5 says so. A failure
    /// is ignored: both are caches, rebuilt when missing or stale.
    pub(crate) fn write_checkpoint(&mut self, surface: &Surface, pack: bool) {
        self.since = 0;
        // CKP-2: nodes still read in place from the map are checked again before anything
        // is written from them (a map is not a copy), and refolded when they changed.
        surface.check_again();
        // Nodes that failed their check on first read (CKP-2) came from a fold: the
        // checkpoint on disk is damaged, and is written again, once.
        let refolded = || surface.node_state() == NodeState::Refolded;
        if !self.checkpointed || (refolded() && !self.refold_written) {
            self.checkpointed = self.write_checkpoint_file(surface);
            // Asked after the write, whose read of the nodes may be their first.
            self.refold_written |= self.checkpointed && refolded();
        }
        if pack {
            self.write_pack(surface);
        }
    }

    /// Writes the checkpoint file of `surface`: whether it was written.
    fn write_checkpoint_file(&mut self, surface: &Surface) -> bool {
        // CKP-2: a surface whose checkpointed nodes were lost is never checkpointed (the
        // first read of its nodes, here, decides).
        if surface.nodes_lost() {
            return false;
        }
        // A log that cannot be read back gets no checkpoint: the next open reads it again
        // and reports the damage.
        if self.repair.observe_from(&self.log, self.observed).is_err() {
            return false;
        }
        self.observed = self.log.seq_next();
        let Ok(mut checkpoint) = Checkpoint::of(surface, &self.repair, &self.log) else {
            return false;
        };
        checkpoint.chain = RecordedChain::of(&self.log);
        let bytes = checkpoint.encode();
        let path = self.dir.join(CHECKPOINT_FILE);
        write_atomically(&*self.storage, &path, &bytes).is_ok()
    }
}

impl EventSource for StoredLog {
    fn seq_next(&self) -> u64 {
        self.log.seq_next()
    }

    fn event(&self, seq: u64) -> Result<Option<EventRef<'_>>> {
        self.log.event(seq)
    }

    /// MSP-4: from the pack when it has the node, from the log record otherwise.
    fn message_at(&self, seq: u64) -> Result<Option<&str>> {
        self.pack
            .message_at(&*self.storage, self.session_dir(), &self.log, seq)
    }

    fn lent_message_at(&self, seq: u64) -> Result<Option<MessageText<'_>>> {
        self.pack
            .lent_message_at(&*self.storage, self.session_dir(), &self.log, seq)
    }

    fn message_texts(&self) -> Option<SharedBytes> {
        self.pack
            .texts(&*self.storage, self.session_dir(), &self.log)
    }

    fn messages_read_begins(&self) {
        self.pack.read_begins(self.session_dir());
    }

    /// RD-9 for the nodes whose messages come from the log: those past the pack's events
    /// (MSP-4), or all when there is no usable pack.
    fn read_ahead(&self, seqs: &[u64]) {
        self.pack
            .read_ahead(&*self.storage, self.session_dir(), &self.log, seqs);
    }
}

impl SessionLog for StoredLog {
    fn push_events(&mut self, events: Vec<Event>) -> Result<()> {
        let (from, count) = (self.log.seq_next(), events.len() as u64);
        // From the attempt on, the checkpoint on disk is not taken to cover the log,
        // whatever the append's outcome.
        self.checkpointed = false;
        self.log.append_owned(events)?;
        // A turn/end resets the repair scan (contract §8): what came before it is never
        // read again. Done once appended, so a refused append changes nothing.
        for seq in (from..from + count).rev() {
            if self.log.event_at(seq)?.event_type == "turn/end" {
                self.repair = RepairState::default();
                self.observed = seq + 1;
                break;
            }
        }
        self.since += count;
        Ok(())
    }

    fn push_event(&mut self, event: Event) -> Result<()> {
        let seq = self.log.seq_next();
        let turn_end = event.as_ref().event_type == "turn/end";
        self.checkpointed = false;
        self.log.append_one(event)?;
        // As in `push_events`: once appended, a turn/end resets the repair scan.
        if turn_end {
            self.repair = RepairState::default();
            self.observed = seq + 1;
        }
        self.since += 1;
        Ok(())
    }

    fn closers(&self) -> Result<Vec<String>> {
        let mut state = self.repair.clone();
        state.observe_from(&self.log, self.observed)?;
        state.closers(&self.log)
    }

    fn committed(&mut self, surface: &Surface) {
        // CKP-5, RCV-14: a checkpoint covers only durable events, so the log is flushed
        // first (in `Sync` durability that waits for nothing). A failed flush poisons the
        // writer, which the next append reports; no checkpoint is written then.
        // MSP-5: no message pack here, inside an append: its rewrite costs about its size.
        if self.since >= self.every && self.log.sync().is_ok() {
            self.write_checkpoint(surface, false);
        }
    }

    fn sync(&mut self, surface: &Surface) -> Result<()> {
        self.log.flush()?;
        self.write_checkpoint(surface, true);
        Ok(())
    }
}

/// Temporary file, sync, rename, directory sync (CKP-5), through `storage`: a
/// `checkpoint.tmp` left by a crash, or planted as a symbolic link, is removed (the link
/// itself, never its target) and created anew, exclusively and without following a link
/// (STORE-1).
fn write_atomically(storage: &dyn Storage, path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    crate::storage::replace_file(storage, &tmp, path, bytes, 0)?;
    if let Some(dir) = path.parent() {
        storage
            .sync_dir(dir)
            .map_err(|e| crate::Error::io("fsync", dir, &e))?;
    }
    Ok(())
}
