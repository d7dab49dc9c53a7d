//! A session: one log, its header and its surface, behind the entry points of
//! contract §5 (append, seed, import, resume) and the views of §4.
//!
//! Every entry point admits an event completely (see `admit`) before committing it, so a
//! refused event takes no seq and changes nothing: not the log, not the surface, not
//! `replace_generation`, not the invariant state.

mod admit;
pub(crate) mod fork;
mod history;
mod invariants;
pub mod repair;
#[cfg(feature = "serde")]
mod serialize;
mod typed;

pub(crate) use admit::end_seed_event;
pub use fork::{Boundary, MemStore};
pub use history::{Compacted, Compaction, Prune};
pub use invariants::InvariantState;
pub use typed::{EventKind, NoSurface, SurfaceIntent, kinds};

use std::sync::Arc;

use admit::{Admitted, Ctx, Lossless, SurfaceFields};

use crate::clock::{Clock, SystemClock};
use crate::error::{ErrorKind, Result};
use crate::event::header::NegativeZero;
use crate::event::{
    Event, EventRef, EventSource, Field, Header, MemLog, MessageText, Overlay, SharedBytes,
    Vocabulary,
};
use crate::limits::{MAX_EVENT_BYTES_DEFAULT, SAFE_INTEGER_MAX};
use crate::surface::{self, Message, Savepoint, Surface};

/// The type of the end-seed marker (contract §5).
pub const END_SEED_TYPE: &str = "session/end-seed";

/// Per-session configuration.
#[derive(Debug, Clone)]
pub struct Options {
    /// Which types are surface-eligible and how they project. Default: `dsh-v0`.
    pub vocabulary: Arc<Vocabulary>,
    /// The largest accepted event, in bytes of JSON text; larger ones are refused with
    /// `EVENT_TOO_LARGE`. Default: 64 MiB. Values above 4 GiB − 1 are clamped.
    pub max_event_bytes: usize,
    /// Refuse, on the import path only, an event whose type DSH's loader does not know
    /// and that is not `ignorable` (`UNKNOWN_EVENT_TYPE`, contract §11, `dsh-formats.md`
    /// LOAD-10). The engine itself accepts every type. Default: off.
    pub strict_vocabulary: bool,
    /// Check the invariants of contract §9 before every commit. Costs a few lookups
    /// in the event's already parsed data and O(1) state per event. Default: off.
    pub invariants: bool,
    /// Where "now" comes from. Default: the system clock.
    pub clock: Arc<dyn Clock>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            vocabulary: Arc::new(Vocabulary::dsh_v0()),
            max_event_bytes: MAX_EVENT_BYTES_DEFAULT,
            strict_vocabulary: false,
            invariants: false,
            clock: Arc::new(SystemClock),
        }
    }
}

/// Where a session's events live: the in-memory [`MemLog`], or the on-disk log.
pub trait SessionLog: EventSource {
    /// Appends admitted events, in order; their seqs continue the log. On `Err` the log
    /// **must** hold none of them visibly (a failed write poisons the on-disk log).
    ///
    /// # Errors
    /// The log's I/O refusal (`IO`, `POISONED`).
    fn push_events(&mut self, events: Vec<Event>) -> Result<()>;

    /// [`SessionLog::push_events`] of one event (each commit's case), without building a
    /// vector for it.
    ///
    /// # Errors
    /// As [`SessionLog::push_events`].
    fn push_event(&mut self, event: Event) -> Result<()> {
        self.push_events(vec![event])
    }

    /// The crash-repair closers for the log as it is (contract §8). The default scans the
    /// whole log; a log that keeps the repair state as it goes answers from its tail.
    ///
    /// # Errors
    /// The error reading an event (`CORRUPT` with the file and offset).
    fn closers(&self) -> Result<Vec<String>>
    where
        Self: Sized,
    {
        repair::closers(self)
    }

    /// Told after each commit, with the surface it produced: a stored log checkpoints
    /// here every so many events. A checkpoint is a cache, so this cannot fail.
    fn committed(&mut self, surface: &Surface) {
        let _ = surface;
    }

    /// Makes every appended event durable and records the surface (`Session::flush`).
    ///
    /// # Errors
    /// The log's I/O refusal.
    fn sync(&mut self, surface: &Surface) -> Result<()> {
        let _ = surface;
        Ok(())
    }
}

impl SessionLog for MemLog {
    fn push_events(&mut self, events: Vec<Event>) -> Result<()> {
        for event in events {
            self.push(event);
        }
        Ok(())
    }

    fn push_event(&mut self, event: Event) -> Result<()> {
        self.push(event);
        Ok(())
    }
}

impl SessionLog for crate::log::DiskLog {
    fn push_events(&mut self, events: Vec<Event>) -> Result<()> {
        self.append_owned(events)
    }

    fn push_event(&mut self, event: Event) -> Result<()> {
        self.append_one(event)
    }

    fn sync(&mut self, _surface: &Surface) -> Result<()> {
        self.flush()
    }
}

/// One session: a log (in memory by default), its header and its surface.
///
/// ```
/// use surfacelog::{NoSurface, Session, StoreOptions, SurfaceIntent, kinds};
///
/// // In memory (tests, tools): the same API as a stored session.
/// let mut s = Session::in_memory("s", &StoreOptions::new())?;
/// s.append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)?;
/// s.append::<kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, SurfaceIntent::append())?;
/// assert_eq!(s.messages()?.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Session<L = MemLog> {
    header: Header,
    log: L,
    surface: Surface,
    /// `Some` exactly when `options.invariants` is set.
    invariants: Option<InvariantState>,
    first_live_seq: u64,
    options: Options,
}

/// The state of a session after event N (contract §4, "as of seq N").
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
/// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
/// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
/// # s.close()?;
/// let (session, _) = store.open_session("s")?;
/// let before = session.as_of(0)?; // after turn/start only
/// assert!(before.messages.is_empty());
/// assert_eq!(session.as_of(1)?.messages.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Snapshot<'a> {
    /// The surface after event N.
    pub surface: Surface,
    /// The messages after event N.
    pub messages: Vec<Message<'a>>,
    /// The transcript up to and including event N.
    pub transcript: Vec<u64>,
}

/// What reopening a stored log did (crash repair, contract §8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reopened {
    /// The number of stored events.
    pub stored: u64,
    /// The number of repair closers appended.
    pub closers: u64,
}

impl Session<MemLog> {
    /// A new, empty session `id` whose log is in memory, with the session options of
    /// `options` (invariants, event size limit): the same API as a stored session, for
    /// tests and tools. Its header is `{version: 0, id, createdAt: now}`.
    ///
    /// ```
    /// use surfacelog::{Session, StoreOptions};
    ///
    /// let s = Session::in_memory("scratch", &StoreOptions::new().invariants(true))?;
    /// assert_eq!((s.id(), s.seq_next()), ("scratch", 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `HEADER_INVALID` for an id no header can hold (the empty id).
    pub fn in_memory(id: &str, options: &crate::store::StoreOptions) -> Result<Self> {
        Self::create(id, None, None, options.session.clone())
    }

    /// Creates session `id` (contract §5). Without `header`, the header is
    /// `{version: 0, id, createdAt: now}`. With `seed` (even empty), every seed event goes
    /// through the seed path and the end-seed marker follows unless the seed already ends
    /// with one; without it the log starts empty.
    ///
    /// # Errors
    /// The first refused seed event or header rule; nothing is created.
    #[doc(hidden)]
    pub fn create(
        id: &str,
        header: Option<&str>,
        seed: Option<&[&str]>,
        options: Options,
    ) -> Result<Self> {
        Self::create_seeded(id, header, seed, options, Lossless::Strict)
    }

    /// [`Session::create`], its seed's `-0` treated as `lossless` says: refused for a
    /// seed given by a host, kept for a fork's copies of stored events.
    fn create_seeded(
        id: &str,
        header: Option<&str>,
        seed: Option<&[&str]>,
        options: Options,
        lossless: Lossless,
    ) -> Result<Self> {
        if id.is_empty() {
            let reason = "the session id is empty".to_owned();
            return Err(crate::Error::from(ErrorKind::HeaderInvalid { reason }).in_session(id));
        }
        let header = match header {
            Some(text) => Header::parse(text, id, NegativeZero::Refuse),
            None => Ok(Header::new(id, now_created_at(&*options.clock))),
        };
        let mut session = Self::empty(header.map_err(|e| e.in_session(id))?, options);
        if let Some(seed) = seed {
            for text in seed {
                session.ingest(text, lossless)?;
            }
            session.first_live_seq = session.log.seq_next();
            session.end_seed()?;
        }
        Ok(session)
    }

    /// Reopens a stored log (contract §5, import/reopen row): every event is checked with
    /// `-0` accepted, then crash repair appends the closers of contract §8. No end-seed
    /// marker is written; [`Session::resume`] adds it.
    ///
    /// # Errors
    /// The header's or the first refused event's code; nothing is kept.
    #[doc(hidden)]
    pub fn reopen(
        id: &str,
        header: &str,
        events: &[&str],
        options: Options,
    ) -> Result<(Self, Reopened)> {
        let header =
            Header::parse(header, id, NegativeZero::Accept).map_err(|e| e.in_session(id))?;
        let mut session = Self::empty(header, options);
        for text in events {
            session.ingest(text, Lossless::Lenient)?;
        }
        session.first_live_seq = session.log.seq_next();
        let closers = session.repair()?;
        let stored = session.first_live_seq;
        Ok((session, Reopened { stored, closers }))
    }

    /// Reopens a stored log to continue the conversation: [`Session::reopen`], then the
    /// end-seed marker (contract §5).
    ///
    /// # Errors
    /// As [`Session::reopen`].
    #[doc(hidden)]
    pub fn resume(
        id: &str,
        header: &str,
        events: &[&str],
        options: Options,
    ) -> Result<(Self, Reopened)> {
        let (mut session, report) = Self::reopen(id, header, events, options)?;
        session.end_seed()?;
        Ok((session, report))
    }

    fn empty(header: Header, options: Options) -> Self {
        Self::with_log(header, MemLog::new(), options)
    }
}

impl<L: SessionLog> Session<L> {
    /// A session over an existing log whose events were admitted when they were written
    /// (the on-disk log): folds the surface and, when enabled, checks the invariants over
    /// every event (contract §5, the import/reopen row), as a reopen in memory does. Cost:
    /// one pass over the log; no other check of an event is made again.
    ///
    /// # Errors
    /// A fold refusal (the log does not hold a valid surface); with invariants on, the
    /// first event that violates them (`INV_*`, with its seq).
    #[doc(hidden)]
    pub fn over_log(header: Header, log: L, first_live_seq: u64, options: Options) -> Result<Self> {
        Self::over_log_from(header, log, Surface::new(), first_live_seq, options)
    }

    /// [`Session::over_log`] starting from a surface already folded over a prefix of the
    /// log (a checkpoint): only the events after it are folded.
    ///
    /// # Errors
    /// As [`Session::over_log`].
    #[doc(hidden)]
    pub fn over_log_from(
        header: Header,
        log: L,
        surface: Surface,
        first_live_seq: u64,
        options: Options,
    ) -> Result<Self> {
        let mut session = Self::with_log(header, log, options);
        session.surface = surface;
        session
            .surface
            .catch_up(&session.log, &session.options.vocabulary)
            .map_err(|e| e.in_session(session.header.id()))?;
        // The fold reads every event after the surface it started from: an event the log
        // cannot return (a record damaged since it was written, log-format.md REC-4, or a
        // segment that does not check out, SEG-2, SEG-3) refused it above, with its file
        // and offset.
        if let Some(state) = session.invariants.as_mut() {
            state
                .replay(&session.log, session.log.seq_next())
                .map_err(|e| e.in_session(session.header.id()))?;
        }
        session.first_live_seq = first_live_seq;
        Ok(session)
    }

    /// Appends an event whose type is known statically; the compiler requires a
    /// [`SurfaceIntent`] exactly for surface types (contract §5, "Type-level API").
    /// `data` is JSON text, stored as given. Returns the new seq.
    ///
    /// ```
    /// use surfacelog::{NoSurface, Session, StoreOptions, SurfaceIntent, kinds};
    ///
    /// let mut s = Session::in_memory("s", &StoreOptions::new())?;
    /// s.append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)?;
    /// let seq = s.append::<kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, SurfaceIntent::append())?;
    /// assert_eq!(s.event(seq)?.unwrap().data(), r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#); // exactly as given
    /// // A surface type without an intent does not compile:
    /// // s.append::<kinds::UserMessage>(data, NoSurface);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The first failed check of contract §5; nothing is appended.
    pub fn append<K: EventKind>(&mut self, data: &str, intent: K::Intent) -> Result<u64> {
        self.append_dynamic(K::TYPE, data, intent.into())
    }

    /// Appends an event whose type is a runtime string. `intent` must be `Some` exactly
    /// for surface-eligible types (`SURFACE_OP_REQUIRED`, `SURFACE_OP_FORBIDDEN`).
    ///
    /// ```
    /// use surfacelog::{Session, StoreOptions, SurfaceIntent};
    ///
    /// let mut s = Session::in_memory("s", &StoreOptions::new())?;
    /// // A type known only at run time (read from a host's own queue, say).
    /// s.append_dynamic("user/message", r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, Some(SurfaceIntent::append()))?;
    /// s.append_dynamic("host/heartbeat", "{}", None)?; // any type; log-only
    /// let refused = s.append_dynamic("user/message", r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, None).unwrap_err();
    /// assert_eq!(refused.code(), "SURFACE_OP_REQUIRED");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The first failed check of contract §5; nothing is appended.
    pub fn append_dynamic(
        &mut self,
        event_type: &str,
        data: &str,
        intent: Option<SurfaceIntent>,
    ) -> Result<u64> {
        let time = now_ms(&*self.options.clock);
        let admitted =
            self.admit_append(&self.ctx(), event_type, data, surface_fields(intent), time);
        self.commit(admitted)
    }

    /// Appends several events as one unit: either all are committed, in order, or none
    /// (the first refusal is returned and the session is unchanged). Each event is checked
    /// against the state the ones before it leave. Returns their seqs.
    ///
    /// ```
    /// use surfacelog::{Session, StoreOptions, SurfaceIntent};
    ///
    /// let mut s = Session::in_memory("s", &StoreOptions::new())?;
    /// let seqs = s.append_all(&[
    ///     ("turn/start", r#"{"turn":1}"#, None),
    ///     ("user/message", r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, Some(SurfaceIntent::append())),
    /// ])?;
    /// assert_eq!(seqs, [0, 1]);
    /// // All or nothing: the second event is refused, so the first is not appended either.
    /// let refused = s.append_all(&[("turn/end", r#"{"turn":1}"#, None), ("user/message", "{", None)]);
    /// assert!(refused.is_err());
    /// assert_eq!(s.seq_next(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The first failed check of contract §5; nothing is appended.
    pub fn append_all(
        &mut self,
        events: &[(&str, &str, Option<SurfaceIntent>)],
    ) -> Result<Vec<u64>> {
        self.append_batch(events, |session, ctx, (event_type, data, intent), time| {
            session.admit_append(ctx, event_type, data, surface_fields(intent.clone()), time)
        })
    }

    /// [`Session::append_all`] for events whose surface fields arrive as JSON texts, as
    /// [`Session::append_json`] takes them: each is `(type, data, surfaceOp, sourceEventSeqs)`,
    /// `None` a missing key. All are committed, in order, or none (the first refusal is
    /// returned, with the seq it would have had, and the session is unchanged). What a
    /// binding to another language calls with a batch of its own events.
    ///
    /// ```
    /// use surfacelog::{Session, StoreOptions};
    ///
    /// let mut s = Session::in_memory("s", &StoreOptions::new())?;
    /// let user = r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#;
    /// let seqs = s.append_all_json(&[
    ///     ("turn/start", r#"{"turn":1}"#, None, None),
    ///     ("user/message", user, Some(r#""append""#), None),
    /// ])?;
    /// assert_eq!(seqs, [0, 1]);
    /// let refused = s.append_all_json(&[("host/note", "{}", None, None), ("user/message", user, Some("null"), None)]);
    /// assert_eq!(refused.unwrap_err().code(), "SURFACE_OP_INVALID");
    /// assert_eq!(s.seq_next(), 2); // the note was not appended either
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The first failed check of contract §5; nothing is appended.
    pub fn append_all_json(
        &mut self,
        events: &[(&str, &str, Option<&str>, Option<&str>)],
    ) -> Result<Vec<u64>> {
        self.append_batch(
            events,
            |session, ctx, &(event_type, data, surface_op, sources), time| {
                session.admit_append_json(ctx, event_type, data, surface_op, sources, time)
            },
        )
    }

    /// Admits `events` one after the other, each against the state the ones before it
    /// leave, then commits them all at once, or returns the first refusal with nothing
    /// changed: [`Session::append_all`] and [`Session::append_all_json`].
    fn append_batch<T>(
        &mut self,
        events: &[T],
        admit: impl Fn(&Self, &Ctx<'_>, &T, i64) -> Result<Admitted>,
    ) -> Result<Vec<u64>> {
        let time = now_ms(&*self.options.clock);
        // The batch's steps go onto the session's own surface as its events are admitted,
        // and are taken back if it is refused or not written (or a bug panics): a copy of
        // the surface per batch would make every batch cost the session's size.
        let mut savepoint = self.surface.savepoint();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.stage_batch(events, &admit, time, &mut savepoint)
        }));
        match outcome {
            Ok(Ok(seqs)) => {
                self.log.committed(&self.surface);
                Ok(seqs)
            }
            Ok(Err(error)) => {
                self.surface.undo(savepoint);
                Err(error)
            }
            Err(panic) => {
                self.surface.undo(savepoint);
                std::panic::resume_unwind(panic)
            }
        }
    }

    /// [`Session::append_batch`]'s work: each event admitted against the surface as the
    /// ones before it leave it (their steps applied with `savepoint`), then all written;
    /// the invariant state is replaced only then. On a refusal the surface keeps the steps
    /// applied so far, for the caller to undo.
    fn stage_batch<T>(
        &mut self,
        events: &[T],
        admit: &impl Fn(&Self, &Ctx<'_>, &T, i64) -> Result<Admitted>,
        time: i64,
        savepoint: &mut Savepoint,
    ) -> Result<Vec<u64>> {
        let mut invariants = self.invariants.clone();
        let mut staged = Overlay {
            base: &self.log as &dyn EventSource,
            events: Vec::with_capacity(events.len()),
        };
        for event in events {
            let ctx = Ctx {
                surface: &self.surface,
                invariants: invariants.as_ref(),
                source: &staged,
            };
            let admitted = admit(self, &ctx, event, time).map_err(|e| {
                e.in_session(self.header.id())
                    .at_seq(self.surface.seq_next())
            })?;
            self.surface.apply_undoable(admitted.step, savepoint);
            if let (Some(state), Some(effect)) = (invariants.as_mut(), admitted.invariants) {
                state.apply(effect);
            }
            staged.events.push(admitted.event);
        }
        let staged = staged.events;
        let seqs = staged.iter().map(Event::seq).collect();
        self.log
            .push_events(staged)
            .map_err(|e| e.in_session(self.header.id()))?;
        self.invariants = invariants;
        Ok(seqs)
    }

    /// Appends an event whose surface fields arrive as JSON texts, as a JSON entry point
    /// receives them: `None` is a missing key, `Some("null")` a present, invalid one.
    ///
    /// ```
    /// use surfacelog::{Session, StoreOptions};
    ///
    /// let mut s = Session::in_memory("s", &StoreOptions::new())?;
    /// // The envelope's surface fields as a JSON entry point receives them.
    /// s.append_json("user/message", r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, Some(r#""append""#), None)?;
    /// let bad = s.append_json("user/message", r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, Some("null"), None).unwrap_err();
    /// assert_eq!(bad.code(), "SURFACE_OP_INVALID");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The first failed check of contract §5; nothing is appended.
    pub fn append_json(
        &mut self,
        event_type: &str,
        data: &str,
        surface_op: Option<&str>,
        sources: Option<&str>,
    ) -> Result<u64> {
        let time = now_ms(&*self.options.clock);
        let admitted =
            self.admit_append_json(&self.ctx(), event_type, data, surface_op, sources, time);
        self.commit(admitted)
    }

    /// The header.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// let s = store.create("s", None, None)?;
    /// assert_eq!(s.header().id(), "s");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The session id.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// let s = store.create("s", None, None)?;
    /// assert_eq!(s.id(), "s");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn id(&self) -> &str {
        self.header.id()
    }

    /// The next seq, equal to the number of events.
    ///
    /// ```
    /// use surfacelog::{NoSurface, Session, StoreOptions, kinds};
    ///
    /// let mut s = Session::in_memory("s", &StoreOptions::new())?;
    /// assert_eq!(s.seq_next(), 0);
    /// let seq = s.append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)?;
    /// assert_eq!((seq, s.seq_next()), (0, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn seq_next(&self) -> u64 {
        self.log.seq_next()
    }

    /// The number of seed or stored events the session started from (contract §5).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// let (s, _) = store.resume("s")?; // reopened: the stored events are not live
    /// assert_eq!(s.first_live_seq(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn first_live_seq(&self) -> u64 {
        self.first_live_seq
    }

    /// The event at `seq`: `Ok(None)` past the end.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// let (s, _) = store.open_session("s")?;
    /// assert_eq!(s.event(0)?.map(|e| e.event_type), Some("turn/start"));
    /// assert!(s.event(100)?.is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `CORRUPT` (with the file and offset), `FORMAT_VERSION` or `IO` when its record
    /// cannot be read back: damage is never reported as the end of the log.
    pub fn event(&self, seq: u64) -> Result<Option<EventRef<'_>>> {
        self.log
            .event(seq)
            .map_err(|e| e.in_session(self.header.id()).at_seq(seq))
    }

    /// The log.
    #[doc(hidden)]
    pub fn log(&self) -> &L {
        &self.log
    }

    /// The log, to change how it appends (DUR-11).
    pub(crate) fn log_mut(&mut self) -> &mut L {
        &mut self.log
    }

    /// The surface.
    ///
    /// Nodes read in place from a mapped checkpoint (CKP-7) that were checked by an
    /// earlier read have their CRC-32C checked again as this call begins, since a map is
    /// not a copy (CKP-2); nodes that no longer check out are taken from a fold of the log
    /// from then on. Cost: O(1) once the surface has changed since its open (its nodes are
    /// then owned) or before its nodes were first read; otherwise O(n), the CRC-32C of 8
    /// bytes a node.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// let (s, _) = store.open_session("s")?;
    /// assert_eq!(s.surface().nodes(), [1]); // the user message
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn surface(&self) -> &Surface {
        self.surface.check_again();
        &self.surface
    }

    /// The options.
    #[doc(hidden)]
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The messages: the projections of the surface nodes, each tagged with its seq.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// let (s, _) = store.open_session("s")?;
    /// let messages = s.messages()?;
    /// // Verbatim slices of the stored text: join them into the next model request.
    /// let request = format!(r#"{{"messages":[{}]}}"#, messages.iter().map(|m| m.json).collect::<Vec<_>>().join(","));
    /// assert!(request.contains(r#""role":"user""#));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `CORRUPT` (with the file and offset) when a node's record cannot be read back: a
    /// message is never left out silently. A stored session reads the messages of the
    /// nodes its message pack holds from the pack instead (`format-spec/message-pack.md`,
    /// checked whole by its own CRCs and bound to the log): damage to those records is
    /// found by the reads that need them, and by `verify`.
    pub fn messages(&self) -> Result<Vec<Message<'_>>> {
        surface::messages(&self.surface, &self.log).map_err(|e| e.in_session(self.header.id()))
    }

    /// Calls `visit` with each message of the surface, in order, as it is read: what a
    /// caller that copies every message (a binding to another language) uses, so that it
    /// copies each one while its page is mapped rather than after the reader has released
    /// the pages of the segments it read through (log-format.md RD-4). Measured on a
    /// 1M-event session: copying the 6.7 MB of messages after [`Session::messages`]
    /// returned took 27.5 ms in all, against 22 ms for the messages alone.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[]}"#, surfacelog::SurfaceIntent::append())?;
    /// let mut copied = String::new();
    /// s.each_message(|m| copied.push_str(m.json))?;
    /// assert!(copied.starts_with(r#"{"id":"u1""#));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`Session::messages`]; the messages before the failing one have been visited.
    pub fn each_message<'a>(&'a self, visit: impl FnMut(Message<'a>)) -> Result<()> {
        surface::each_message(&self.surface, &self.log, visit)
            .map_err(|e| e.in_session(self.header.id()))
    }

    /// [`Session::each_message`] for a caller that lends the texts of the session's message
    /// pack instead of taking them as `&str` (a binding to another language, which makes a
    /// string of each text when it is first used): `visit` gets each message's seq and its
    /// text, as its span of the returned bytes ([`MessageText::Lent`], checked by the pack's
    /// checksums as this read began, MSP-4, but not as UTF-8: the caller checks that when it
    /// makes a string, and bytes that are not UTF-8 are damage) or as read from the log
    /// ([`MessageText::Text`]). Returns the pack's text area when a span was lent. It skips
    /// what [`Session::each_message`] pays per message to check its text as UTF-8, work a
    /// caller that checks each text later would do twice.
    ///
    /// ```
    /// use surfacelog::MessageText;
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new().message_pack(1))?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.close()?;
    /// let (s, _) = store.open_session("s")?;
    /// let mut spans = Vec::new();
    /// let texts = s.each_lent_message(|seq, text| match text {
    ///     MessageText::Lent(span) => spans.push((seq, span)),
    ///     MessageText::Text(json) => unreachable!("{json} is in the pack"),
    /// })?;
    /// let texts = texts.expect("a span was lent");
    /// drop(s); // the bytes stay valid
    /// let (seq, span) = spans[0].clone();
    /// assert_eq!(seq, 0);
    /// assert!(std::str::from_utf8(&texts[span])?.starts_with(r#"{"id":"u1""#));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`Session::each_message`]; the messages before the failing one have been visited.
    pub fn each_lent_message<'a>(
        &'a self,
        visit: impl FnMut(u64, MessageText<'a>),
    ) -> Result<Option<SharedBytes>> {
        surface::each_lent_message(&self.surface, &self.log, visit)
            .map_err(|e| e.in_session(self.header.id()))
    }

    /// The bytes [`Session::each_message`] and [`Session::messages`] take most messages'
    /// texts from, shared: the text area of the session's message pack
    /// (`format-spec/message-pack.md`), read and checked now when no message was read yet
    /// (MSP-1, MSP-2). `None` for a session without a usable pack (every message then
    /// comes from its log record, as after a read found the pack changed, MSP-4) and for
    /// an in-memory session. A caller that copies every message out can lend these bytes
    /// instead and copy only the others: asked for during [`Session::each_message`] (whose
    /// start checks the pack again, MSP-4), they are the bytes that read checked; see
    /// [`SharedBytes::span_of`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new().message_pack(1))?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[]}"#, surfacelog::SurfaceIntent::append())?;
    /// assert!(s.message_texts().is_none()); // no pack yet: it is written on close
    /// s.close()?;
    /// let (s, _) = store.open_session("s")?;
    /// let texts = s.message_texts().expect("a message pack");
    /// assert_eq!(&texts[..], s.messages()?[0].json.as_bytes());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn message_texts(&self) -> Option<SharedBytes> {
        self.log.message_texts()
    }

    /// The transcript: seqs of events appended with `surfaceOp: "append"`, in log order.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// let (s, _) = store.open_session("s")?;
    /// assert_eq!(s.transcript()?, [1]); // every appended message, compacted or not
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `CORRUPT` (with the file and offset) when an event cannot be read back: the
    /// transcript never ends early.
    pub fn transcript(&self) -> Result<Vec<u64>> {
        surface::transcript(&self.log, self.log.seq_next())
            .collect::<Result<_>>()
            .map_err(|e| e.in_session(self.header.id()))
    }

    /// Every replace applied, in log order, with the seqs it shadowed (contract §4, "The
    /// fold result also lists every replace applied"). The session's surface does not
    /// keep this history (it grows with every replace); this refolds the log recording it.
    /// Cost: a fold of the whole log.
    ///
    /// ```
    /// use surfacelog::{Compaction, Session, StoreOptions, SurfaceIntent, kinds};
    ///
    /// let mut s = Session::in_memory("s", &StoreOptions::new())?;
    /// let user = |id: &str| format!(r#"{{"id":"{id}","role":"user","source":{{"kind":"user"}},"content":[]}}"#);
    /// let first = s.append::<kinds::UserMessage>(&user("a"), SurfaceIntent::append())?;
    /// let last = s.append::<kinds::UserMessage>(&user("b"), SurfaceIntent::append())?;
    /// let summary = r#"[{"type":"text","text":"a and b"}]"#;
    /// let message = format!(r#"{{"id":"sum","role":"user","source":{{"kind":"plugin","plugin":"compaction"}},"content":{summary}}}"#);
    /// let _done = s.compact(&Compaction {
    ///     compaction_id: "c1",
    ///     turn: None,
    ///     start: first,
    ///     end: last,
    ///     summary,
    ///     summary_extra: None,
    ///     message: &message,
    /// })?;
    /// let history = s.replacements()?;
    /// let replace = history.replacements().next().expect("one replace");
    /// assert_eq!(replace.shadowed, [first, last]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// None for a log this session accepted; a fold refusal otherwise.
    pub fn replacements(&self) -> Result<Surface> {
        let mut surface = Surface::recording();
        surface.catch_up(&self.log, &self.options.vocabulary)?;
        Ok(surface)
    }

    /// The surface, messages and transcript exactly as they were after event `seq`
    /// (time travel). Cost: a fold of events `0..=seq`.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// let (s, _) = store.open_session("s")?;
    /// let then = s.as_of(1)?;
    /// assert_eq!(then.transcript, [1]);
    /// assert_eq!(then.messages[0].seq, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `INVALID_BOUNDARY` when `seq` is not in the log; `CORRUPT` when an event up to it
    /// cannot be read back.
    pub fn as_of(&self, seq: u64) -> Result<Snapshot<'_>> {
        if seq >= self.log.seq_next() {
            return Err(crate::Error::from(ErrorKind::InvalidBoundary {
                boundary: seq.to_string(),
            })
            .in_session(self.header.id()));
        }
        let prefix = Prefix {
            log: &self.log,
            len: seq + 1,
        };
        let surface = Surface::fold(&prefix, &self.options.vocabulary)?;
        let messages = surface::messages(&surface, &self.log)?;
        let transcript = surface::transcript(&self.log, seq + 1).collect::<Result<_>>()?;
        Ok(Snapshot {
            surface,
            messages,
            transcript,
        })
    }

    fn with_log(header: Header, log: L, options: Options) -> Self {
        let invariants = options.invariants.then(InvariantState::default);
        Self {
            header,
            log,
            surface: Surface::new(),
            invariants,
            first_live_seq: 0,
            options,
        }
    }

    /// Admits and commits one event given as JSON.
    fn ingest(&mut self, text: &str, lossless: Lossless) -> Result<u64> {
        let admitted = self.admit_json(&self.ctx(), text, lossless);
        self.commit(admitted)
    }

    /// The session's own state, to check the next event against.
    fn ctx(&self) -> Ctx<'_> {
        Ctx {
            surface: &self.surface,
            invariants: self.invariants.as_ref(),
            source: &self.log,
        }
    }

    /// Admits one stored event through the import path (contract §5, import/reopen row:
    /// every check, `-0` accepted) and appends it: how an importer fills a session from a
    /// log written elsewhere, one event at a time. Returns its seq.
    ///
    /// # Errors
    /// The first failed check; nothing is appended.
    #[doc(hidden)]
    pub fn import_event(&mut self, text: &str) -> Result<u64> {
        self.ingest(text, Lossless::Lenient)
    }

    /// [`Session::import_event`] of an event already parsed: its root value is the event
    /// object, kept exactly as its text spells it.
    ///
    /// # Errors
    /// The first failed check; nothing is appended.
    #[doc(hidden)]
    pub fn import_parsed(&mut self, event: &crate::json::Json<'_>) -> Result<u64> {
        let admitted = self.admit_parsed(&self.ctx(), event, Lossless::Lenient);
        self.commit(admitted)
    }

    /// Marks every event appended so far as stored history: the first live seq becomes the
    /// number of events (what [`Session::reopen`] does after loading a log).
    #[doc(hidden)]
    pub fn mark_stored(&mut self) {
        self.first_live_seq = self.log.seq_next();
    }

    /// Crash repair (contract §8): appends the closers of a turn the log leaves open, if
    /// any. Returns how many were appended; a second call appends none.
    ///
    /// # Errors
    /// A refusal of a closer (the log's I/O, or a log that does not hold a valid surface).
    #[doc(hidden)]
    pub fn repair(&mut self) -> Result<u64> {
        let closers = self
            .log
            .closers()
            .map_err(|e| e.in_session(self.header.id()))?;
        let seq = self.log.seq_next();
        for text in &closers {
            self.ingest(text, Lossless::Closer)?;
        }
        if !closers.is_empty() {
            tracing::warn!(
                session = self.header.id(),
                seq,
                count = closers.len(),
                "repair closers appended: the last turn was interrupted (contract §8)"
            );
        }
        Ok(closers.len() as u64)
    }

    /// Makes every appended event durable; a stored session also writes its checkpoint.
    ///
    /// ```
    /// use surfacelog::{Durability, NoSurface, Store, StoreOptions, kinds};
    ///
    /// # let dir = tempfile::tempdir()?;
    /// let store = Store::open_or_create(dir.path(), StoreOptions::new().durability(Durability::Manual))?;
    /// let mut s = store.create("s", None, None)?;
    /// s.append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)?; // written, not durable yet
    /// s.flush()?; // durable now
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The log's I/O refusal.
    pub fn flush(&mut self) -> Result<()> {
        self.log
            .sync(&self.surface)
            .map_err(|e| e.in_session(self.header.id()))
    }

    /// Flushes and closes the session.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// let s = store.create("s", None, None)?;
    /// s.close()?; // durable, checkpointed, and the lock released
    /// assert!(store.open_session("s").is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`Session::flush`].
    pub fn close(mut self) -> Result<()> {
        self.flush()
    }

    /// Appends the end-seed marker unless the last event already is one (contract §5):
    /// what `resume` does after reopening.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # use surfacelog::{NoSurface, kinds};
    /// let mut s = store.create("s", None, None)?;
    /// s.append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)?;
    /// s.end_seed()?;
    /// s.end_seed()?; // once only
    /// assert_eq!(s.event(1)?.unwrap().event_type, "session/end-seed");
    /// assert_eq!(s.seq_next(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The log's refusal to append, or the error reading its last event.
    pub fn end_seed(&mut self) -> Result<()> {
        let last = match self.log.seq_next().checked_sub(1) {
            Some(seq) => Some(self.log.event_at(seq)?),
            None => None,
        };
        if last.is_some_and(|e| e.event_type == END_SEED_TYPE) {
            return Ok(());
        }
        self.append_dynamic(END_SEED_TYPE, "{}", None).map(|_| ())
    }

    fn commit(&mut self, admitted: Result<Admitted>) -> Result<u64> {
        // Every refusal names the session and the seq the event would have taken.
        let seq_next = self.surface.seq_next();
        let admitted = admitted.map_err(|e| e.in_session(self.header.id()).at_seq(seq_next))?;
        let seq = admitted.event.seq();
        self.log
            .push_event(admitted.event)
            .map_err(|e| e.in_session(self.header.id()))?;
        self.surface.apply(admitted.step);
        self.log.committed(&self.surface);
        if let (Some(state), Some(effect)) = (self.invariants.as_mut(), admitted.invariants) {
            state.apply(effect);
        }
        Ok(seq)
    }
}

fn surface_fields(intent: Option<SurfaceIntent>) -> SurfaceFields<'static> {
    match intent {
        Some(intent) => SurfaceFields {
            surface_op: Field::Valid(intent.op),
            sources: intent
                .sources
                .map_or(Field::Absent, |s| Field::Valid(s.into())),
        },
        None => SurfaceFields {
            surface_op: Field::Absent,
            sources: Field::Absent,
        },
    }
}

/// The first `len` events of a log, for time travel and to fold a checkpoint's prefix
/// again.
pub(crate) struct Prefix<'a> {
    /// The whole log.
    pub(crate) log: &'a dyn EventSource,
    /// How many of its events are seen.
    pub(crate) len: u64,
}

impl EventSource for Prefix<'_> {
    fn seq_next(&self) -> u64 {
        self.len
    }

    fn event(&self, seq: u64) -> Result<Option<EventRef<'_>>> {
        if seq < self.len {
            self.log.event(seq)
        } else {
            Ok(None)
        }
    }

    /// Passed on: a hint reads nothing, so seqs past the prefix change nothing it returns.
    fn read_ahead(&self, seqs: &[u64]) {
        self.log.read_ahead(seqs);
    }
}

/// "now", clamped into the safe-integer range every stored time must be in (contract §2),
/// so that a misconfigured clock cannot write a log that reopen would refuse.
fn now_ms(clock: &dyn Clock) -> i64 {
    clock.now_ms().clamp(-SAFE_INTEGER_MAX, SAFE_INTEGER_MAX)
}

/// "now" as a `createdAt`: clamped to the non-negative safe integers (contract §6).
fn now_created_at(clock: &dyn Clock) -> u64 {
    u64::try_from(now_ms(clock)).unwrap_or(0)
}

#[cfg(test)]
mod tests;
