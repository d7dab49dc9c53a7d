//! Followers: read-only handles that see events as a writer, in this process or another,
//! commits them (`store.md` STORE-11).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Store;
use super::checkpoint::{Checkpoint, DirIdentity};
use crate::error::{ErrorKind, Result};
use crate::event::{Event, EventRef, EventSource, MessageText, Overlay, SharedBytes};
use crate::log::LogReader;
use crate::session::repair::RepairState;
use crate::session::{Session, SessionLog};
use crate::surface::Surface;

/// The longest pause between two looks at the log while waiting by polling.
const POLL_INTERVAL_MAX: Duration = Duration::from_millis(10);

/// [`Follower::check_followed`] of the followed session `followed` (a field of its own, so
/// that it can be checked while the wake-up is borrowed).
fn check_followed(followed: Option<&(String, std::path::PathBuf, DirIdentity)>) -> Result<()> {
    let Some((id, dir, identity)) = followed else {
        return Ok(());
    };
    match dir_identity(dir) {
        Ok(now) if now == *identity => Ok(()),
        Ok(_) => Err(ErrorKind::SessionNotFound { id: id.clone() }.into()),
        Err(error) => Err(Store::unless_deleted(id, dir, error)),
    }
}

/// `error`, met reading the session `followed`, or `SESSION_NOT_FOUND` when that session
/// is gone (deleted, or deleted and created again): its paths then name another session's
/// files, or none, and what was met there (a later segment of the new log, a directory
/// that cannot be listed) is not damage to the session read (STORE-11).
fn unless_replaced(
    followed: Option<&(String, std::path::PathBuf, DirIdentity)>,
    error: crate::Error,
) -> crate::Error {
    match check_followed(followed) {
        Err(gone) if matches!(gone.kind(), ErrorKind::SessionNotFound { .. }) => gone,
        _ => error,
    }
}

/// `reader`'s refresh, for a follower of `followed` ([`unless_replaced`]).
fn refresh_followed(
    reader: &mut LogReader,
    followed: Option<&(String, std::path::PathBuf, DirIdentity)>,
) -> Result<u64> {
    reader
        .refresh()
        .map_err(|error| unless_replaced(followed, error))
}

/// The identity of the directory `dir`, for [`Follower::check_followed`]: its device,
/// inode and birth time, as CKP-8's. The inode number alone does not do: a directory
/// removed for good frees it, and the next one made (the session created again) may get
/// it while nothing of the old one is held open.
fn dir_identity(dir: &std::path::Path) -> Result<DirIdentity> {
    std::fs::symlink_metadata(dir)
        .map(|meta| DirIdentity::of(&meta))
        .map_err(|e| crate::Error::io("stat", dir, &e))
}

/// A read-only view of a stored session that follows its writer.
///
/// On Linux a wait sleeps on an inotify watch of the session's `log/` directory, so it
/// wakes when a writer, in this process or another, writes a record or creates a segment
/// (STORE-11); elsewhere, or when inotify cannot be had, it polls the log.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
/// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
/// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
/// # s.close()?;
/// use std::time::Duration;
/// let mut follower = store.follow("s")?;
/// assert!(follower.wait_for(2, Duration::from_secs(1))?); // seq 2 is committed
/// assert!(!follower.wait_for(3, Duration::from_millis(1))?); // seq 3 is not, yet
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Follower {
    reader: LogReader,
    /// The followed session: its id, its directory and that directory's identity (device,
    /// inode and birth time) when the follower was made; none in the loom model.
    followed: Option<(String, std::path::PathBuf, DirIdentity)>,
    /// How a wait sleeps until the log changes.
    #[cfg_attr(loom, allow(dead_code))]
    wake: Wake,
}

/// How [`Follower::wait_for`] sleeps between two looks at the log.
#[derive(Debug)]
enum Wake {
    /// Not tried yet: the first wait makes the watch.
    #[cfg(all(any(target_os = "linux", target_os = "android"), not(loom)))]
    Unset,
    /// An inotify watch of the log directory.
    #[cfg(all(any(target_os = "linux", target_os = "android"), not(loom)))]
    Notify(notify::Watch),
    /// Pauses growing up to [`POLL_INTERVAL_MAX`]: no inotify here, none could be had,
    /// or the follower was asked to poll.
    Poll,
}

impl Wake {
    /// The state of a new follower.
    fn new() -> Self {
        #[cfg(all(any(target_os = "linux", target_os = "android"), not(loom)))]
        return Self::Unset;
        #[cfg(not(all(any(target_os = "linux", target_os = "android"), not(loom))))]
        Self::Poll
    }
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
    /// The session directory and the storage its message pack is read through.
    dir: std::path::PathBuf,
    storage: Arc<dyn crate::storage::Storage>,
    /// The message pack (message-pack.md), read and checked against the events on disk
    /// on the first message read.
    pack: super::pack::LazyPack,
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
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// use std::time::Duration;
    /// // Another thread (or process) writes; this one follows, woken by each commit.
    /// let mut follower = store.follow("s")?;
    /// let texts: Vec<String> = follower
    ///     .events(0, Duration::from_millis(10))
    ///     .map(|e| e.map(|e| e.text().to_owned()))
    ///     .collect::<surfacelog::Result<_>>()?;
    /// assert_eq!(texts.len(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `SESSION_NOT_FOUND`, `CORRUPT`, `IO`.
    pub fn follow(&self, id: &str) -> Result<Follower> {
        self.follow_unlogged(id)
            .map_err(|error| error.in_session(id))
            .inspect_err(|error| super::trace_refusal("follow", id, error))
    }

    /// [`Store::follow`], without the event of its refusal (STORE-22).
    fn follow_unlogged(&self, id: &str) -> Result<Follower> {
        let dir = self.session_dir(id);
        Self::read_header(&*self.options.log.storage, id, &dir)?;
        // The session followed is the one whose directory this is now: deleted (and perhaps
        // created again) while its files are read below, the follower is refused with
        // `SESSION_NOT_FOUND`, as an open is (STORE-9), never made over another session's
        // directory, nor refused for what it met there.
        let identity = dir_identity(&dir).map_err(|e| Self::unless_deleted(id, &dir, e))?;
        let followed = (id.to_owned(), dir, identity);
        let gone = |error| unless_replaced(Some(&followed), error);
        let dir = &followed.1;
        // RCV-14, as `inspect`: the checkpoint, read before the log, is a durable mark; a
        // log shorter than it lost events (a last segment gone or cut to nothing reads
        // like one whose creation a crash cut short, RCV-7).
        let durable_seq = Checkpoint::read(&*self.options.log.storage, dir)
            .map_err(|e| gone(e.in_session(id)))?
            .as_ref()
            .map_or(0, super::checkpoint::Unverified::seq_next);
        let reader = LogReader::open_with(&dir.join("log"), self.options.log.storage.clone())
            .map_err(|e| gone(Self::unless_deleted(id, dir, e)))?;
        super::checkpoint::check_not_ahead(dir, reader.seq_next(), durable_seq)
            .map_err(|e| gone(e.in_session(id)))?;
        check_followed(Some(&followed))?;
        Ok(Follower {
            reader,
            followed: Some(followed),
            wake: Wake::new(),
        })
    }

    /// Refuses with `LOCKED` while a writer holds session `id` (`log-format.md` LOG-1): what
    /// a read-only path that must see a finished log (an export) checks first. It takes
    /// the lock for a moment and releases it.
    ///
    /// # Errors
    /// `LOCKED`, `SESSION_NOT_FOUND`, `IO`.
    #[doc(hidden)]
    pub fn check_no_writer(&self, id: &str) -> Result<()> {
        let dir = self.session_dir(id);
        Self::read_header(&*self.options.log.storage, id, &dir)?;
        crate::log::LogWriter::check_lock_with(&*self.options.log.storage, &dir.join("log"))
            .map_err(|e| e.in_session(id))
    }

    /// Opens session `id` read-only (no lock, nothing written, STORE-15): the events as
    /// stored. A read-only path never repairs: the closers of an interrupted turn are
    /// appended only by a writer holding the lock (`Store::open_session`); an explicit
    /// [`Session::repair`] on this session appends them in memory only (contract §8).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// let (_writer, _) = store.open_session("s")?; // a writer has it open...
    /// let reader = store.inspect("s")?;              // ...and a reader looks, changing nothing
    /// assert_eq!(reader.messages()?.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`Store::follow`].
    pub fn inspect(&self, id: &str) -> Result<Session<ReadOnlyLog>> {
        self.inspect_unlogged(id)
            .map_err(|error| error.in_session(id))
            .inspect_err(|error| super::trace_refusal("inspect", id, error))
    }

    /// [`Store::inspect`], without the event of its refusal (STORE-22).
    fn inspect_unlogged(&self, id: &str) -> Result<Session<ReadOnlyLog>> {
        let dir = self.session_dir(id);
        // As `read_header` first: an id no directory can hold, or `sessions/` a link (STORE-1),
        // is refused as such, before the directory is looked up through it for its identity.
        super::check_id(id)?;
        if let Some(sessions) = dir.parent() {
            super::refuse_symlink(sessions)?;
        }
        // The session inspected is the one whose directory this is now: deleted (and
        // perhaps created again) while its files are read below, the inspection is refused
        // with `SESSION_NOT_FOUND`, as a follower is (STORE-11), never made of one session's
        // header and another's log, nor refused for what it met in the other's files.
        let identity = dir_identity(&dir).map_err(|e| Self::unless_deleted(id, &dir, e))?;
        let inspected = (id.to_owned(), dir, identity);
        let gone = |error| unless_replaced(Some(&inspected), error);
        let dir = &inspected.1;
        let header = Self::read_header(&*self.options.log.storage, id, dir).map_err(gone)?;
        // RCV-14: read before the log, so that a live writer's later checkpoint (written
        // once its events are written and durable, CKP-5) cannot seem ahead of this reader.
        let read = Checkpoint::read(&*self.options.log.storage, dir)
            .map_err(|e| gone(e.in_session(id)))?;
        let durable_seq = read
            .as_ref()
            .map_or(0, super::checkpoint::Unverified::seq_next);
        let reader = LogReader::open_with(&dir.join("log"), self.options.log.storage.clone())
            .map_err(|e| gone(Self::unless_deleted(id, dir, e)))?;
        let stored = reader.seq_next();
        super::checkpoint::check_not_ahead(dir, stored, durable_seq)
            .map_err(|e| gone(e.in_session(id)))?;
        check_followed(Some(&inspected))?;
        let dir = inspected.1;
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
            dir,
            storage: Arc::clone(&self.options.log.storage),
            pack: super::pack::LazyPack::default(),
        };
        // A read-only session appends nothing, so it keeps no invariant state: the
        // invariants check appends (contract §9), and a reader never refuses a log for them.
        let options = crate::session::Options {
            invariants: false,
            ..self.options.session.clone()
        };
        Session::over_log_from(header, log, surface, stored, options)
    }
}

impl Follower {
    /// A follower of what `reader` reads: the loom model of [`Follower::wait_for`] runs it
    /// beside a writer of its own.
    #[cfg(all(test, loom))]
    pub(crate) fn over(reader: LogReader) -> Self {
        Self {
            reader,
            followed: None,
            wake: Wake::new(),
        }
    }

    /// At a wait's timeout: `SESSION_NOT_FOUND` once the followed session is gone (deleted,
    /// or deleted and created again: another directory under its name), whose log would
    /// otherwise be waited on for good.
    fn check_followed(&self) -> Result<()> {
        check_followed(self.followed.as_ref())
    }

    /// Waits until event `seq` is committed, at most `timeout` (a timeout too long to
    /// add to the clock waits without end). Returns `true` when it is.
    ///
    /// On Linux it sleeps until the log directory changes (inotify), looking at the log
    /// at least every 50 ms all the same (what a missed change costs at most); elsewhere, or when
    /// inotify cannot be had (no watches left, a log on a storage that is not a plain
    /// directory), it polls with pauses up to 10 ms.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// use std::time::Duration;
    /// let mut follower = store.follow("s")?;
    /// let (mut writer, _) = store.open_session("s")?;
    /// let t = std::thread::spawn(move || {
    ///     writer.append::<surfacelog::kinds::TurnStart>(r#"{"turn":2}"#, surfacelog::NoSurface)
    /// });
    /// assert!(follower.wait_for(3, Duration::from_secs(10))?);
    /// t.join().unwrap()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `CORRUPT`, `IO`; `SESSION_NOT_FOUND` at a timeout once the session is deleted (or
    /// deleted and created again: the follower follows the session it was made for), and,
    /// waiting without a timeout, at the first look after that.
    pub fn wait_for(&mut self, seq: u64, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now().checked_add(timeout);
        #[cfg(all(any(target_os = "linux", target_os = "android"), not(loom)))]
        {
            if matches!(self.wake, Wake::Unset) {
                self.wake = notify::Watch::new(self.reader.dir()).map_or(Wake::Poll, Wake::Notify);
            }
            if let Wake::Notify(watch) = &mut self.wake {
                // No lost wake-up: the watch exists before this look at the log, so a
                // write after the look leaves an event that ends the sleep.
                loop {
                    if refresh_followed(&mut self.reader, self.followed.as_ref())? > seq {
                        return Ok(true);
                    }
                    let now = Instant::now();
                    let left = match deadline {
                        Some(deadline) if now >= deadline => {
                            return self.check_followed().map(|()| false);
                        }
                        Some(deadline) => deadline - now,
                        // No deadline: the session is looked for at each fallback look.
                        None => {
                            check_followed(self.followed.as_ref())?;
                            notify::FALLBACK_INTERVAL
                        }
                    };
                    if !watch.sleep(left.min(notify::FALLBACK_INTERVAL)) {
                        // The watch broke (its directory replaced, a poll error): make
                        // it anew at the next wait; poll for the rest of this one.
                        self.wake = Wake::Unset;
                        break;
                    }
                }
            }
        }
        self.wait_polling(seq, deadline)
    }

    /// [`Follower::wait_for`] by polling only: the strategy a follower falls back to,
    /// kept callable so that the wake-up latency of both can be compared (benches).
    ///
    /// # Errors
    /// `CORRUPT`, `IO`.
    #[doc(hidden)]
    pub fn wait_for_polling(&mut self, seq: u64, timeout: Duration) -> Result<bool> {
        self.wait_polling(seq, Instant::now().checked_add(timeout))
    }

    /// Polls the log with growing pauses until event `seq` is committed or `deadline`
    /// (none: no end) passes.
    fn wait_polling(&mut self, seq: u64, deadline: Option<Instant>) -> Result<bool> {
        let mut pause = Duration::from_micros(100);
        loop {
            if refresh_followed(&mut self.reader, self.followed.as_ref())? > seq {
                return Ok(true);
            }
            let now = Instant::now();
            let pause_now = match deadline {
                Some(deadline) if now >= deadline => return self.check_followed().map(|()| false),
                Some(deadline) => pause.min(deadline - now),
                None => {
                    self.check_followed()?;
                    pause
                }
            };
            crate::sync::pause(pause_now);
            pause = (pause * 2).min(POLL_INTERVAL_MAX);
        }
    }

    /// The committed events from seq `from` on, each waited for at most
    /// `timeout_per_event` ([`Follower::wait_for`]): an iterator of owned events that
    /// ends when one is not committed in time, or after the first error.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// let mut follower = store.follow("s")?;
    /// for event in follower.events(0, std::time::Duration::from_millis(10)) {
    ///     println!("{}", event?.text());
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn events(&mut self, from: u64, timeout_per_event: Duration) -> FollowEvents<'_> {
        FollowEvents {
            follower: self,
            next: from,
            timeout: timeout_per_event,
            done: false,
        }
    }

    /// The events committed as of the last wait.
    #[doc(hidden)]
    pub fn log(&self) -> &LogReader {
        &self.reader
    }
}

/// The iterator of [`Follower::events`]: owned copies of the committed events, in seq
/// order, each waited for. It ends (returns `None`) when an event is not committed within
/// the timeout, and after yielding an error.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
/// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
/// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
/// # s.close()?;
/// let mut follower = store.follow("s")?;
/// let mut events = follower.events(1, std::time::Duration::from_millis(10));
/// assert_eq!(events.next().unwrap()?.seq(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct FollowEvents<'a> {
    follower: &'a mut Follower,
    next: u64,
    timeout: Duration,
    done: bool,
}

impl FollowEvents<'_> {
    /// The seq of the next event to yield.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// let mut follower = store.follow("s")?;
    /// let mut events = follower.events(0, std::time::Duration::from_millis(10));
    /// events.next();
    /// assert_eq!(events.next_seq(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn next_seq(&self) -> u64 {
        self.next
    }
}

impl Iterator for FollowEvents<'_> {
    type Item = Result<Event>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let read = self
            .follower
            .wait_for(self.next, self.timeout)
            .and_then(|committed| {
                if !committed {
                    return Ok(None);
                }
                let event = self.follower.reader.event_at(self.next)?;
                Ok(Some(event.to_event()))
            });
        match read {
            Ok(Some(event)) => {
                self.next += 1;
                Some(Ok(event))
            }
            Ok(None) => {
                self.done = true;
                None
            }
            Err(error) => {
                self.done = true;
                Some(Err(error))
            }
        }
    }
}

impl std::iter::FusedIterator for FollowEvents<'_> {}

/// The inotify wait of a follower (Linux).
#[cfg(all(any(target_os = "linux", target_os = "android"), not(loom)))]
mod notify {
    use std::mem::MaybeUninit;
    use std::os::fd::{AsFd, OwnedFd};
    use std::path::Path;
    use std::time::Duration;

    use rustix::event::{PollFd, PollFlags, Timespec};
    use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
    use rustix::io::Errno;

    /// The longest a follower sleeps on its watch before it looks at the log anyway: what
    /// a missed change costs at most.
    pub(super) const FALLBACK_INTERVAL: Duration = Duration::from_millis(50);

    /// An inotify instance watching one log directory.
    #[derive(Debug)]
    pub(super) struct Watch {
        fd: OwnedFd,
    }

    impl Watch {
        /// Watches `dir` for what a writer does: a record written into a segment or a
        /// segment grown (`IN_MODIFY`, reported on the directory's watch for its files),
        /// a segment created or renamed into place. `None` when inotify cannot be had.
        pub(super) fn new(dir: &Path) -> Option<Self> {
            let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
            inotify::add_watch(
                &fd,
                dir,
                WatchFlags::MODIFY
                    | WatchFlags::CREATE
                    | WatchFlags::MOVED_TO
                    | WatchFlags::CLOSE_WRITE
                    | WatchFlags::DELETE_SELF
                    | WatchFlags::MOVE_SELF,
            )
            .ok()?;
            Some(Self { fd })
        }

        /// Sleeps until the directory changes or `timeout` passes, then drains the events.
        /// `false` when the watch is no longer good (its directory gone or moved, an
        /// error): the caller makes a new one.
        pub(super) fn sleep(&mut self, timeout: Duration) -> bool {
            let timespec = Timespec {
                tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(timeout.subsec_nanos()),
            };
            let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
            match rustix::event::poll(&mut fds, Some(&timespec)) {
                Ok(_) | Err(Errno::INTR) => {}
                Err(_) => return false,
            }
            self.drain()
        }

        /// Reads the pending events; `false` when one says the watch ended.
        fn drain(&mut self) -> bool {
            let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
            let mut reader = inotify::Reader::new(self.fd.as_fd(), &mut buf);
            loop {
                match reader.next() {
                    Ok(event) => {
                        if event.events().intersects(
                            ReadFlags::IGNORED | ReadFlags::DELETE_SELF | ReadFlags::MOVE_SELF,
                        ) {
                            return false;
                        }
                    }
                    Err(Errno::INTR) => {}
                    Err(Errno::AGAIN) => return true,
                    Err(_) => return false,
                }
            }
        }
    }
}

impl EventSource for ReadOnlyLog {
    fn seq_next(&self) -> u64 {
        self.log.seq_next()
    }

    fn event(&self, seq: u64) -> Result<Option<EventRef<'_>>> {
        self.log.event(seq)
    }

    /// MSP-4: from the pack when it has the node (a node of the events on disk; the pack
    /// is bound to them, MSP-2), from the log record otherwise.
    fn message_at(&self, seq: u64) -> Result<Option<&str>> {
        if seq >= self.log.base.seq_next() {
            return Ok(self.log.event_at(seq)?.message());
        }
        self.pack
            .message_at(&*self.storage, &self.dir, &self.log.base, seq)
    }

    fn lent_message_at(&self, seq: u64) -> Result<Option<MessageText<'_>>> {
        if seq >= self.log.base.seq_next() {
            return Ok(self.log.event_at(seq)?.message().map(MessageText::Text));
        }
        self.pack
            .lent_message_at(&*self.storage, &self.dir, &self.log.base, seq)
    }

    fn message_texts(&self) -> Option<SharedBytes> {
        self.pack.texts(&*self.storage, &self.dir, &self.log.base)
    }

    fn messages_read_begins(&self) {
        self.pack.read_begins(&self.dir);
    }

    /// RD-9 for the nodes whose messages come from the log (as in `StoredLog`).
    fn read_ahead(&self, seqs: &[u64]) {
        self.pack
            .read_ahead(&*self.storage, &self.dir, &self.log.base, seqs);
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

/// How long the thread behind a [`FollowStream`] waits for the next event before it looks
/// whether the stream was dropped.
#[cfg(feature = "tokio")]
const STREAM_WAIT: Duration = Duration::from_millis(50);

/// Committed events as an async [`futures_core::Stream`] (feature `tokio`): what
/// [`Follower::into_stream`] returns. Each item is the next event in seq order, an owned
/// copy, yielded as soon as the writer commits it (the follower's wake-up, STORE-11); a
/// damaged record is an `Err` item, after which the stream ends. Dropping the stream stops
/// the thread that follows the log within 50 ms.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
/// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
/// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
/// # s.close()?;
/// use std::future::poll_fn;
/// use std::pin::Pin;
/// use futures_core::Stream;
///
/// let mut stream = store.follow("s")?.into_stream(0)?;
/// let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
/// let first = runtime.block_on(poll_fn(|cx| Pin::new(&mut stream).poll_next(cx)));
/// assert_eq!(first.unwrap()?.seq(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[cfg(feature = "tokio")]
#[derive(Debug)]
pub struct FollowStream {
    events: tokio::sync::mpsc::Receiver<Result<Event>>,
}

#[cfg(feature = "tokio")]
impl futures_core::Stream for FollowStream {
    type Item = Result<Event>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.events.poll_recv(cx)
    }
}

#[cfg(feature = "tokio")]
impl Follower {
    /// The events from `from` on as an async stream, for hosts on tokio (or any executor:
    /// the stream needs no runtime). The follower moves to a thread of its own, which
    /// waits for each event as [`Follower::wait_for`] does (woken by the writer's commit,
    /// across processes) and hands it over through a bounded channel, so a slow consumer
    /// holds the follower back instead of growing memory. The stream never ends by itself
    /// while the session exists; it ends after an error (`IO` naming the log directory when
    /// the thread panicked, as a storage that panics can make it).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// use std::future::poll_fn;
    /// use std::pin::Pin;
    /// use futures_core::Stream;
    ///
    /// let mut stream = store.follow("s")?.into_stream(0)?;
    /// let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
    /// let first = runtime.block_on(poll_fn(|cx| Pin::new(&mut stream).poll_next(cx)));
    /// assert_eq!(first.unwrap()?.seq(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `IO` when the thread cannot be started.
    pub fn into_stream(self, from: u64) -> Result<FollowStream> {
        let (sender, events) = tokio::sync::mpsc::channel(64);
        let dir = self.reader.dir().to_owned();
        std::thread::Builder::new()
            .name("surfacelog-follow".into())
            .spawn(move || {
                // A panic in the thread (a storage that panics) ends the stream with an
                // error, never as if the stream were done.
                let run = std::panic::AssertUnwindSafe(|| follow_into(self, from, &sender));
                if let Err(panic) = std::panic::catch_unwind(run) {
                    let what = panic
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    let error =
                        std::io::Error::other(format!("the follow thread panicked: {what}"));
                    let _ = sender.blocking_send(Err(crate::Error::io("follow", dir, &error)));
                }
            })
            .map_err(|e| crate::Error::io("spawn", std::path::Path::new("follow"), &e))?;
        Ok(FollowStream { events })
    }
}

/// The thread behind [`Follower::into_stream`]: sends each committed event from `next` on
/// until the receiver is dropped or an error has been sent.
#[cfg(feature = "tokio")]
fn follow_into(
    mut follower: Follower,
    mut next: u64,
    sender: &tokio::sync::mpsc::Sender<Result<Event>>,
) {
    while !sender.is_closed() {
        let read = follower.wait_for(next, STREAM_WAIT).and_then(|committed| {
            committed
                .then(|| follower.reader.event_at(next).map(|e| e.to_event()))
                .transpose()
        });
        match read {
            Ok(None) => {}
            Ok(Some(event)) => {
                next += 1;
                if sender.blocking_send(Ok(event)).is_err() {
                    return;
                }
            }
            Err(error) => {
                let _ = sender.blocking_send(Err(error));
                return;
            }
        }
    }
}
