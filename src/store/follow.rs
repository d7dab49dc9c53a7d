//! Followers: read-only handles that see events as a writer, in this process or another,
//! commits them (`store.md` STORE-11).

use std::time::{Duration, Instant};

use super::Store;
use crate::error::Result;
use crate::event::{Event, EventSource, Overlay};
use crate::log::LogReader;
use crate::session::{Session, SessionLog};

/// The longest pause between two looks at the log while waiting.
const POLL_INTERVAL_MAX: Duration = Duration::from_millis(10);

/// A read-only view of a stored session that follows its writer.
#[derive(Debug)]
pub struct Follower {
    reader: LogReader,
}

/// A stored log opened without the writer's lock, with events appended only in memory:
/// what a read-only inspection uses to show repair closers without writing them.
pub type ReadOnlyLog = Overlay<LogReader>;

impl Store {
    /// A follower of session `id`. Takes no lock.
    ///
    /// # Errors
    /// `SESSION_NOT_FOUND`, `CORRUPT`, `IO`.
    pub fn follow(&self, id: &str) -> Result<Follower> {
        let dir = self.session_dir(id);
        Self::read_header(id, &dir)?;
        let reader = LogReader::open_with(&dir.join("log"), self.options.log.storage.clone())?;
        Ok(Follower { reader })
    }

    /// Opens session `id` read-only (no lock, nothing written): the crash-repair closers
    /// are shown in memory only (contract §8).
    ///
    /// # Errors
    /// As [`Store::follow`].
    pub fn inspect(&self, id: &str) -> Result<Session<ReadOnlyLog>> {
        let dir = self.session_dir(id);
        let header = Self::read_header(id, &dir)?;
        let reader = LogReader::open_with(&dir.join("log"), self.options.log.storage.clone())?;
        let stored = reader.seq_next();
        let log = ReadOnlyLog {
            base: reader,
            events: Vec::new(),
        };
        let mut session = Session::over_log(header, log, stored, self.options.session.clone())?;
        session.repair()?;
        Ok(session)
    }
}

impl Follower {
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
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(POLL_INTERVAL_MAX);
        }
    }

    /// The events committed as of the last wait.
    pub fn log(&self) -> &LogReader {
        &self.reader
    }
}

impl SessionLog for ReadOnlyLog {
    fn push_events(&mut self, events: Vec<Event>) -> Result<()> {
        self.events.extend(events);
        Ok(())
    }
}
