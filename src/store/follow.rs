//! Followers: read-only handles that see events as a writer, in this process or another,
//! commits them (`store.md` STORE-11).

use std::time::{Duration, Instant};

use super::Store;
use super::checkpoint::Checkpoint;
use crate::error::Result;
use crate::event::{Event, EventRef, EventSource, Overlay};
use crate::log::LogReader;
use crate::session::repair::RepairState;
use crate::session::{Session, SessionLog};
use crate::surface::Surface;

/// The longest pause between two looks at the log while waiting.
const POLL_INTERVAL_MAX: Duration = Duration::from_millis(10);

/// A read-only view of a stored session that follows its writer.
#[derive(Debug)]
pub struct Follower {
    reader: LogReader,
}

/// A stored log opened without the writer's lock, with events appended only in memory:
/// what a read-only inspection reads through. Its repair state (contract §8) is the
/// checkpoint's; the events after it are observed only when closers are asked for
/// (an explicit [`Session::repair`]), so an inspection does not scan them for nothing.
#[derive(Debug)]
pub struct ReadOnlyLog {
    log: Overlay<LogReader>,
    /// The repair state after the events before `observed`.
    repair: RepairState,
    observed: u64,
}

impl ReadOnlyLog {
    /// The events on disk, without the ones appended in memory.
    pub fn reader(&self) -> &LogReader {
        &self.log.base
    }
}

impl Store {
    /// A follower of session `id`. Takes no lock.
    ///
    /// # Errors
    /// `SESSION_NOT_FOUND`, `CORRUPT`, `IO`.
    pub fn follow(&self, id: &str) -> Result<Follower> {
        self.follow_unlogged(id)
            .inspect_err(|error| super::trace_refusal("follow", id, error))
    }

    /// [`Store::follow`], without the event of its refusal (STORE-22).
    fn follow_unlogged(&self, id: &str) -> Result<Follower> {
        let dir = self.session_dir(id);
        Self::read_header(&*self.options.log.storage, id, &dir)?;
        // RCV-14, as `inspect`: the checkpoint, read before the log, is a durable mark; a
        // log shorter than it lost events (a last segment gone or cut to nothing reads
        // like one whose creation a crash cut short, RCV-7).
        let durable_seq = Checkpoint::read(&*self.options.log.storage, &dir)
            .as_ref()
            .map_or(0, super::checkpoint::Unverified::seq_next);
        let reader = LogReader::open_with(&dir.join("log"), self.options.log.storage.clone())?;
        super::checkpoint::check_not_ahead(&dir, reader.seq_next(), durable_seq)
            .map_err(|e| e.in_session(id))?;
        Ok(Follower { reader })
    }

    /// Refuses with `LOCKED` while a writer holds session `id` (`log-format.md` LOG-1): what
    /// a read-only path that must see a finished log (an export) checks first. It takes
    /// the lock for a moment and releases it.
    ///
    /// # Errors
    /// `LOCKED`, `SESSION_NOT_FOUND`, `IO`.
    pub fn check_no_writer(&self, id: &str) -> Result<()> {
        let dir = self.session_dir(id);
        Self::read_header(&*self.options.log.storage, id, &dir)?;
        crate::log::LogWriter::check_lock_with(&*self.options.log.storage, &dir.join("log"))
    }

    /// Opens session `id` read-only (no lock, nothing written, STORE-15): the events as
    /// stored. A read-only path never repairs: the closers of an interrupted turn are
    /// appended only by a writer holding the lock (`Store::open`); an explicit
    /// [`Session::repair`] on this session appends them in memory only (contract §8).
    ///
    /// # Errors
    /// As [`Store::follow`].
    pub fn inspect(&self, id: &str) -> Result<Session<ReadOnlyLog>> {
        self.inspect_unlogged(id)
            .inspect_err(|error| super::trace_refusal("inspect", id, error))
    }

    /// [`Store::inspect`], without the event of its refusal (STORE-22).
    fn inspect_unlogged(&self, id: &str) -> Result<Session<ReadOnlyLog>> {
        let dir = self.session_dir(id);
        let header = Self::read_header(&*self.options.log.storage, id, &dir)?;
        // RCV-14: read before the log, so that a live writer's later checkpoint (written
        // once its events are written and durable, CKP-5) cannot seem ahead of this reader.
        let read = Checkpoint::read(&*self.options.log.storage, &dir);
        let durable_seq = read
            .as_ref()
            .map_or(0, super::checkpoint::Unverified::seq_next);
        let reader = LogReader::open_with(&dir.join("log"), self.options.log.storage.clone())?;
        let stored = reader.seq_next();
        super::checkpoint::check_not_ahead(&dir, stored, durable_seq)
            .map_err(|e| e.in_session(id))?;
        // STORE-15, CKP-3: the checkpoint is used only when it matches this log, as by `open`
        // (the file read above, not read again).
        let (surface, repair) = match read.and_then(|c| c.verify(&reader, self.log_origin(&dir))) {
            Ok(checkpoint) => (checkpoint.surface, checkpoint.repair),
            Err(_) => (Surface::new(), RepairState::default()),
        };
        let log = ReadOnlyLog {
            log: Overlay {
                base: reader,
                events: Vec::new(),
            },
            repair,
            observed: surface.seq_next(),
        };
        Session::over_log_from(header, log, surface, stored, self.options.session.clone())
    }
}

impl Follower {
    /// A follower of what `reader` reads: the loom model of [`Follower::wait_for`] runs it
    /// beside a writer of its own.
    #[cfg(all(test, loom))]
    pub(crate) fn over(reader: LogReader) -> Self {
        Self { reader }
    }

    /// Waits until event `seq` is committed, at most `timeout`. Returns `true` when it is.
    ///
    /// # Errors
    /// `CORRUPT`, `IO`.
    pub fn wait_for(&mut self, seq: u64, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_micros(100);
        loop {
            if self.reader.refresh()? > seq {
                return Ok(true);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            crate::sync::pause(pause.min(deadline - now));
            pause = (pause * 2).min(POLL_INTERVAL_MAX);
        }
    }

    /// The events committed as of the last wait.
    pub fn log(&self) -> &LogReader {
        &self.reader
    }
}

impl EventSource for ReadOnlyLog {
    fn seq_next(&self) -> u64 {
        self.log.seq_next()
    }

    fn event(&self, seq: u64) -> Result<Option<EventRef<'_>>> {
        self.log.event(seq)
    }
}

impl SessionLog for ReadOnlyLog {
    fn push_events(&mut self, events: Vec<Event>) -> Result<()> {
        self.log.events.extend(events);
        Ok(())
    }

    fn closers(&self) -> Result<Vec<String>> {
        let mut state = self.repair.clone();
        state.observe_from(&self.log, self.observed)?;
        state.closers(&self.log)
    }
}
