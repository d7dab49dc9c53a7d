//! A store of sessions: one directory, one subdirectory per session holding its header
//! and its log (`format-spec/store.md`).
//!
//! Opening a session recovers its log (a torn tail is dropped and reported, damage is
//! refused), folds the surface, and appends the closers of an interrupted turn durably,
//! exactly once (contract §8).

pub mod checkpoint;
mod escape;
mod follow;
mod fork;
mod import;
pub mod pack;
mod shared;
mod stored_log;
mod summary;
pub mod verbatim;
mod verbatim_handles;
mod verify;

pub use escape::escape_id;
#[cfg(feature = "tokio")]
pub use follow::FollowStream;
pub use follow::{FollowEvents, Follower, ReadOnlyLog};
pub use import::{Import, Imported, ORIGINALS_FILE, originals_lines};
pub use shared::SharedSession;
pub use stored_log::StoredLog;
pub use summary::{SessionSummary, Summaries};
#[cfg(feature = "dsh")]
pub use verbatim::{DshImport, DshSource, RefusedLog};
pub use verbatim::{VerbatimRead, VerbatimStore};
pub use verify::{Problem, SessionReport, Severity, VerifyReport, verify};

use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};
use crate::event::Header;
use crate::event::header::NegativeZero;
use crate::json::Json;
use crate::log::{DiskLog, FileLock, LogDir, LogOptions, OpenReport};
use crate::session::{Options, Session};
use crate::storage::Storage;

/// The store format version this build reads and writes (`store.md` STORE-2).
pub const STORE_FORMAT_VERSION: u64 = 1;

/// A session whose log is on disk.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
/// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
/// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
/// # s.close()?;
/// use surfacelog::StoredSession;
/// fn user_turns(session: &StoredSession) -> surfacelog::Result<usize> {
///     Ok(session.messages()?.len())
/// }
/// let (s, _) = store.open_session("s")?;
/// assert_eq!(user_turns(&s)?, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub type StoredSession = Session<StoredLog>;

/// How a store opens its sessions: built from [`StoreOptions::new`] with the builder
/// methods, so that a default added in a later release is never reset by accident.
///
/// ```
/// use std::time::Duration;
/// use surfacelog::{Durability, StoreOptions};
///
/// let options = StoreOptions::new()
///     .durability(Durability::Batch { max_delay: Duration::from_millis(5) })
///     .invariants(true)
///     .checkpoint_every(50_000);
/// # let dir = tempfile::tempdir()?;
/// let store = surfacelog::Store::open_or_create(dir.path(), options)?;
/// # let _ = store;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// The sessions' options (vocabulary, limits, invariants, clock).
    pub(crate) session: Options,
    /// The logs' options (segment size, durability, storage).
    pub(crate) log: LogOptions,
    /// Events between two checkpoints of a session's surface.
    pub(crate) checkpoint_every: u64,
    /// MSP-5's `pack_min` (0: no message pack).
    pub(crate) message_pack: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        let log = LogOptions {
            segment_bytes: SESSION_SEGMENT_BYTES_DEFAULT,
            ..LogOptions::default()
        };
        Self {
            session: Options::default(),
            log,
            checkpoint_every: CHECKPOINT_EVERY_DEFAULT,
            message_pack: MESSAGE_PACK_DEFAULT,
        }
    }
}

/// The Zstandard level of a message pack compressed as it is written (MSP-8): the
/// fastest, since a pack is written at each close; the texts of a session repeat so much
/// that higher levels save little (measured on the 1M-event workload in the closing note
/// of issue 16).
const PACK_LEVEL: i32 = 1;

impl StoreOptions {
    /// The defaults: [`Durability::Sync`](crate::Durability::Sync), 8 MiB segments of
    /// compact records ([`StoreOptions::compact_records`]), a checkpoint every 10,000
    /// events, invariants off, events up to 64 MiB.
    ///
    /// ```
    /// use surfacelog::{Store, StoreOptions};
    ///
    /// # let dir = tempfile::tempdir()?;
    /// let store = Store::open_or_create(dir.path(), StoreOptions::new())?;
    /// # let _ = store;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// When appended events become durable (`log-format.md` §8). Default: `Sync`, each
    /// append durable before it returns; concurrent appends share one `fdatasync`.
    ///
    /// ```
    /// use surfacelog::{Durability, StoreOptions};
    ///
    /// // Durable at `flush()` and `close()`: a host that batches its own commits.
    /// let options = StoreOptions::new().durability(Durability::Manual);
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn durability(mut self, durability: crate::log::Durability) -> Self {
        self.log.durability = durability;
        self
    }

    /// The capacity of a new log segment, in bytes (SEG-7), clamped to 136 ..= 2^32 − 1.
    /// Smaller segments make opening (which scans the last one) and forking (which copies
    /// one) cheaper; larger ones mean fewer files. Default: 8 MiB.
    ///
    /// ```
    /// use surfacelog::StoreOptions;
    ///
    /// let options = StoreOptions::new().segment_bytes(1 << 20);
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn segment_bytes(mut self, bytes: u64) -> Self {
        self.log.segment_bytes = bytes;
        self
    }

    /// Whether new log segments of version 1 records store streamed chunks as chunk
    /// records (log-format.md §4.1, SEG-9; default on): about half the bytes of a session
    /// of streamed chunks. It matters once [`StoreOptions::compact_records`] (the default,
    /// which stores chunks in runs of its own) is off. Off, it turns compact records off
    /// too: the segments a writer creates hold version 1 records without chunk records,
    /// which builds from before chunk records read (their readers refuse a segment that
    /// sets either feature, `FORMAT_VERSION`); `compact` rewrites such a log's sealed
    /// segments later, into compact records in a store writing them (log-format.md §13).
    ///
    /// ```
    /// use surfacelog::StoreOptions;
    ///
    /// // Logs an older build of surfacelog can still open.
    /// let options = StoreOptions::new().chunk_records(false);
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn chunk_records(mut self, on: bool) -> Self {
        self.log.chunk_records = on;
        // Compact records store chunks in runs: a log an older build opens has neither.
        if !on {
            self.log.compact_records = false;
        }
        self
    }

    /// Whether new log segments hold compact records (log-format.md §4.2, SEG-9; default
    /// on): envelopes as varints, the text around `data` rebuilt when it has the
    /// reference layout, and consecutive streamed chunks of one append (or, without `Sync`
    /// durability, of one write of the write buffer) sharing one record; the message pack
    /// is compressed as it is written (with the `compress` feature, MSP-8). Builds from
    /// before compact records refuse such segments (`FORMAT_VERSION`). Takes precedence
    /// over [`StoreOptions::chunk_records`]; a later `chunk_records(false)` turns it off
    /// again. Off, new segments hold version 1 records (log-format.md §4), with chunk
    /// records unless those are off too. Either way a log's existing segments keep their
    /// format (its last one until the next roll), and [`Store::compact_log`] of a store
    /// writing compact records rewrites sealed segments of version 1 records into them.
    ///
    /// ```
    /// use surfacelog::StoreOptions;
    ///
    /// // Version 1 records (with chunk records): logs a build from before compact records
    /// // can still open.
    /// let options = StoreOptions::new().compact_records(false);
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn compact_records(mut self, on: bool) -> Self {
        self.log.compact_records = on;
        self
    }

    /// The Zstandard level a store writing compact records compresses each message pack
    /// at (message-pack.md MSP-8): a pack holds every message's text again, which would
    /// take a third of a compact log's bytes, and compressed it is about 1% of them. `None`
    /// for a store of version 1 records, and without the `compress` feature.
    #[must_use]
    pub(crate) fn pack_level(&self) -> Option<i32> {
        (cfg!(feature = "compress") && self.log.compact_records).then_some(PACK_LEVEL)
    }

    /// Events between two checkpoints of a session's surface (they are also written on
    /// flush and close): fewer means faster opens after a crash, more means less writing.
    /// Default: 10,000.
    ///
    /// ```
    /// use surfacelog::StoreOptions;
    ///
    /// let options = StoreOptions::new().checkpoint_every(1_000);
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn checkpoint_every(mut self, events: u64) -> Self {
        self.checkpoint_every = events;
        self
    }

    /// When a session's message texts are packed together beside its log
    /// (`format-spec/message-pack.md`), so that [`Session::messages`](crate::Session::messages)
    /// reads one contiguous file instead of one record per message scattered across the
    /// log: on flush and close, once at least `min_nodes` nodes of the surface are not in
    /// the pack and they are at least a quarter of those that are (MSP-5). The pack is a
    /// cache of about the size of the messages (4% of the log on a session of streamed
    /// turns); 0 writes none. Default: 1,024.
    ///
    /// ```
    /// use surfacelog::StoreOptions;
    ///
    /// // Pack small sessions too; `0` would never pack.
    /// let options = StoreOptions::new().message_pack(64);
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn message_pack(mut self, min_nodes: u64) -> Self {
        self.message_pack = min_nodes;
        self
    }

    /// Check the invariants of contract §9 (turns, steps, tool pairing) before every
    /// commit; an event that breaks one is refused with its `INV_*` code. Costs a few
    /// lookups per event. Default: off.
    ///
    /// ```
    /// use surfacelog::{Store, StoreOptions, NoSurface, kinds};
    ///
    /// # let dir = tempfile::tempdir()?;
    /// let store = Store::open_or_create(dir.path(), StoreOptions::new().invariants(true))?;
    /// let mut session = store.create("s", None, None)?;
    /// let error = session.append::<kinds::StepStart>(r#"{"turn":1,"step":1}"#, NoSurface);
    /// assert_eq!(error.unwrap_err().code(), "INV_STEP_TURN"); // no turn is open
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn invariants(mut self, on: bool) -> Self {
        self.session.invariants = on;
        self
    }

    /// The largest accepted event, in bytes of JSON text; a larger one is refused with
    /// `EVENT_TOO_LARGE`. Default: 64 MiB; values above 4 GiB − 1 are clamped.
    ///
    /// ```
    /// use surfacelog::{Store, StoreOptions, NoSurface, kinds};
    ///
    /// # let dir = tempfile::tempdir()?;
    /// let store = Store::open_or_create(dir.path(), StoreOptions::new().max_event_bytes(64))?;
    /// let mut session = store.create("s", None, None)?;
    /// let big = format!(r#"{{"turn":1,"pad":"{}"}}"#, "x".repeat(100));
    /// let error = session.append::<kinds::TurnStart>(&big, NoSurface).unwrap_err();
    /// assert_eq!(error.code(), "EVENT_TOO_LARGE");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn max_event_bytes(mut self, bytes: usize) -> Self {
        self.session.max_event_bytes = bytes;
        self
    }

    /// Internals: refuse, on the import path only, a type DSH's loader does not know
    /// (`UNKNOWN_EVENT_TYPE`). Unstable.
    #[doc(hidden)]
    #[must_use]
    pub fn strict_vocabulary(mut self, on: bool) -> Self {
        self.session.strict_vocabulary = on;
        self
    }

    /// Internals: replaces the sessions' options. Unstable.
    #[doc(hidden)]
    #[must_use]
    pub fn session_options(mut self, options: Options) -> Self {
        self.session = options;
        self
    }

    /// Internals: replaces the logs' options. Unstable.
    #[doc(hidden)]
    #[must_use]
    pub fn log_options(mut self, options: LogOptions) -> Self {
        self.log = options;
        self
    }

    /// Internals: the file operations (tests inject failures here). Unstable.
    #[doc(hidden)]
    #[must_use]
    pub fn storage(mut self, storage: std::sync::Arc<dyn Storage>) -> Self {
        self.log.storage = storage;
        self
    }

    /// Internals: the sessions' clock. Unstable.
    #[doc(hidden)]
    #[must_use]
    pub fn clock(mut self, clock: std::sync::Arc<dyn crate::clock::Clock>) -> Self {
        self.session.clock = clock;
        self
    }

    /// Internals: the sessions' options. Unstable.
    #[doc(hidden)]
    pub fn get_session_options(&self) -> &Options {
        &self.session
    }

    /// Internals: the logs' options. Unstable.
    #[doc(hidden)]
    pub fn get_log_options(&self) -> &LogOptions {
        &self.log
    }
}

/// The segment capacity of a stored session's log: 8 MiB, smaller than the log's own
/// default, because opening a session scans its last segment (log-format.md §7) and a fork
/// copies one (STORE-10). Sessions rarely reach gigabytes; this bounds both costs.
pub const SESSION_SEGMENT_BYTES_DEFAULT: u64 = 8 << 20;

/// The default of [`StoreOptions::checkpoint_every`].
pub const CHECKPOINT_EVERY_DEFAULT: u64 = 10_000;

/// The default of [`StoreOptions::message_pack`].
pub const MESSAGE_PACK_DEFAULT: u64 = 1_024;

/// A directory of sessions.
///
/// ```
/// use surfacelog::{NoSurface, Store, StoreOptions, kinds};
///
/// # let dir = tempfile::tempdir()?;
/// let store = Store::open_or_create(dir.path(), StoreOptions::new())?;
/// let mut s = store.create("s", None, None)?;
/// s.append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)?;
/// drop(s); // a crash: turn 1 never ended
/// let (s, opened) = store.open_session("s")?;
/// assert_eq!(opened.closers, 1); // a `turn/end` closes it, once
/// assert_eq!(s.seq_next(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    options: StoreOptions,
    hook: Hook,
}

/// A point between two steps of a store operation, where a test hook runs (see
/// [`Store::with_hook`]): how the lifecycle races are driven deterministically in tests.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'a> {
    /// `delete` of this id holds the session's lock and has not renamed it yet (STORE-9).
    DeleteLocked(&'a str),
    /// A session with this id is built under `tmp/`, found free, and not renamed into
    /// `sessions/` yet (STORE-6).
    BeforePublish(&'a str),
    /// `open` of this id has checked that the session's paths are no links (STORE-1) and
    /// has not opened its log yet.
    SessionChecked(&'a str),
    /// `list_summaries` has opened the session directory of this name in `sessions/` and
    /// has not read its files yet (STORE-25).
    Summarizing(&'a str),
}

/// A test hook: called at each [`Step`].
type HookFn = dyn Fn(Step<'_>) + Send + Sync;

/// The test hook of a store: none outside tests.
#[derive(Clone, Default)]
struct Hook(Option<std::sync::Arc<HookFn>>);

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Hook(set)"
        } else {
            "Hook(none)"
        })
    }
}

/// A build directory under `tmp/` (STORE-6, STORE-17): its path, and a shared lock on
/// `tmp.lock` held until the directory is published or removed, so that no store
/// opening meanwhile takes it for the leftover of an interrupted build.
#[derive(Debug)]
pub(crate) struct Build {
    path: PathBuf,
    _lock: crate::log::FileLock,
}

impl Build {
    /// The build directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// The event of a refusal at `op` (open, inspect, follow, salvage) of session `id`: `warn` for a session
/// that is busy or absent, `error` for one that cannot be opened as it is (`CORRUPT`,
/// `FORMAT_VERSION`, `IO`, ...).
fn trace_refusal(op: &'static str, id: &str, error: &Error) {
    let code = error.code();
    let seq = error.seq();
    match code {
        "LOCKED" | "SESSION_NOT_FOUND" | "INVALID_ID" => {
            tracing::warn!(session = id, seq, code, op, %error, "session refused at open");
        }
        _ => tracing::error!(session = id, seq, code, op, %error, "session refused at open"),
    }
}

/// The events of what opening session `id`'s log repaired (RCV-7, RCV-9, RCV-12); `seq`
/// is the log's `seq_next` after recovery, where a torn tail was cut.
fn trace_log_recovery(id: &str, seq: u64, report: &OpenReport) {
    if let Some(torn) = &report.torn_tail {
        tracing::warn!(
            session = id,
            seq,
            code = torn.code(),
            path = %torn.segment.display(),
            offset = torn.offset,
            bytes = torn.bytes,
            quarantine = %torn.quarantine.display(),
            "torn tail set aside into a quarantine file (RCV-9, RCV-12)"
        );
    }
    if let Some(path) = &report.removed_segment {
        tracing::warn!(
            session = id,
            seq,
            path = %path.display(),
            "unborn last segment removed (RCV-7)"
        );
    }
}

/// The event of whether session `id`'s checkpoint was used (CKP-3): `debug` when used or
/// absent, `warn` when it was set aside and the surface is rebuilt from the log.
fn trace_checkpoint(id: &str, used: &Result<u64, checkpoint::Unusable>) {
    match used {
        Ok(seq) => tracing::debug!(session = id, seq, "checkpoint used (CKP-3)"),
        Err(checkpoint::Unusable::Missing) => {
            tracing::debug!(session = id, "no checkpoint; surface folded from the log");
        }
        Err(why) => tracing::warn!(
            session = id,
            why = ?why,
            "checkpoint ignored; surface rebuilt from the log and checkpoint rewritten (CKP-3)"
        ),
    }
}

/// The lock file of `tmp/`, beside it (STORE-17): builds hold it shared, the cleaning
/// at open exclusive.
const TMP_LOCK: &str = "tmp.lock";

/// What opening a stored session found and did.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
/// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
/// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
/// # s.close()?;
/// let (_, opened) = store.open_session("s")?;
/// assert_eq!(opened.closers, 0);
/// assert!(opened.log.torn_tail.is_none());
/// assert!(opened.checkpoint.is_ok()); // closed: its checkpoint was used
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    /// The log's recovery report (`TORN_TAIL` and friends).
    pub log: OpenReport,
    /// The number of repair closers appended (contract §8).
    pub closers: u64,
    /// Whether the surface checkpoint was used, or why not (`checkpoint.md` CKP-3).
    pub checkpoint: Result<u64, checkpoint::Unusable>,
}

/// What [`Store::salvage`] kept and set aside.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SalvageReport {
    /// The log's salvage: the events kept, the first lost seq, the quarantine files.
    pub log: crate::log::LogSalvage,
    /// Whether the checkpoint was removed because it covered more than what remains.
    pub checkpoint_removed: bool,
}

impl Default for Opened {
    fn default() -> Self {
        Self {
            log: OpenReport::default(),
            closers: 0,
            checkpoint: Err(checkpoint::Unusable::Missing),
        }
    }
}

impl Store {
    /// Opens the existing store in `dir`; never creates anything there (`store.md`
    /// STORE-23). What a tool that only reads, or a host that must not start a second,
    /// empty store at a mistyped path, calls.
    ///
    /// `dir` itself may be a symbolic link (it is the caller's path); no path inside it
    /// may be (STORE-1).
    ///
    /// ```
    /// use surfacelog::{Store, StoreOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let missing = dir.path().join("no-store");
    /// let error = Store::open(&missing, StoreOptions::new()).unwrap_err();
    /// assert_eq!(error.code(), "STORE_NOT_FOUND");
    /// assert!(!missing.exists()); // nothing was created
    ///
    /// Store::open_or_create(dir.path(), StoreOptions::new())?;
    /// let store = Store::open(dir.path(), StoreOptions::new())?;
    /// assert_eq!(store.dir(), dir.path());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `STORE_NOT_FOUND` naming `dir` when it does not exist or holds no `STORE` identity
    /// file, `FORMAT_VERSION` for a store of another version, `CORRUPT` for an unreadable
    /// identity file or a store directory without its `sessions/`, `trash/` or `tmp/`,
    /// `UNSAFE_PATH` for a symbolic link among the store's own paths (STORE-1), `IO`.
    pub fn open(dir: impl AsRef<Path>, options: StoreOptions) -> Result<Self> {
        Self::open_dir(dir.as_ref(), options, false, true)
    }

    /// [`Store::open`] for a read-only tool (`ls`, `show`, `tail`, `export`, `stats`,
    /// `verify`): the same checks, but the leftovers of interrupted builds in `tmp/` are
    /// left where they are (STORE-17 cleaning is a write; STORE-16: verify changes no
    /// file). The next writer's open cleans them.
    ///
    /// # Errors
    /// As [`Store::open`].
    #[doc(hidden)]
    pub fn open_read_only(dir: impl AsRef<Path>, options: StoreOptions) -> Result<Self> {
        Self::open_dir(dir.as_ref(), options, false, false)
    }

    /// Opens the store in `dir`, creating it (mode 0700, with its `STORE` identity file)
    /// when it does not exist (`store.md` STORE-19).
    ///
    /// `dir` itself may be a symbolic link (it is the caller's path); no path inside it
    /// may be (STORE-1).
    ///
    /// ```
    /// use surfacelog::{Store, StoreOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let store = Store::open_or_create(dir.path().join("sessions"), StoreOptions::new())?;
    /// assert!(store.list()?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `FORMAT_VERSION` for a store of another version, `CORRUPT` for an unreadable
    /// identity file, `UNSAFE_PATH` for a symbolic link (or, for `STORE`, a file that is
    /// not regular) among the store's own paths (STORE-1), `IO`.
    pub fn open_or_create(dir: impl AsRef<Path>, options: StoreOptions) -> Result<Self> {
        Self::open_dir(dir.as_ref(), options, true, true)
    }

    /// [`Store::open`] (`create` false) or [`Store::open_or_create`], with the event of
    /// a refusal.
    fn open_dir(dir: &Path, options: StoreOptions, create: bool, clean: bool) -> Result<Self> {
        Self::at_dir(dir, options, create, clean).inspect_err(|error| {
            tracing::error!(
                store = %dir.display(),
                code = error.code(),
                %error,
                "store refused at open"
            );
        })
    }

    /// [`Store::open_dir`], without the event of its refusal.
    fn at_dir(dir: &Path, mut options: StoreOptions, create: bool, clean: bool) -> Result<Self> {
        // STORE-23: without `create`, a directory without the identity file is no store,
        // and nothing is made.
        if !create && std::fs::symlink_metadata(dir.join("STORE")).is_err() {
            return Err(ErrorKind::StoreNotFound {
                path: dir.to_owned(),
            }
            .into());
        }
        // The caller's link to the store is resolved once, for the few operations on the
        // directory itself; every path inside is refused when it is a link (STORE-1).
        let root = match std::fs::symlink_metadata(dir) {
            Ok(meta) if meta.file_type().is_symlink() => {
                std::fs::canonicalize(dir).map_err(|e| Error::io("resolve", dir, &e))?
            }
            _ => dir.to_owned(),
        };
        // STORE-19: each directory made here is synced into its parent.
        let mut made: Vec<PathBuf> = root
            .ancestors()
            .take_while(|path| {
                !path.as_os_str().is_empty() && std::fs::symlink_metadata(path).is_err()
            })
            .map(Path::to_path_buf)
            .collect();
        if create {
            options
                .log
                .storage
                .create_dir_all(&root)
                .map_err(|e| Error::io("create_dir", &root, &e))?;
        }
        // STORE-1: every path inside is resolved from the root's handle from here on,
        // following no link (`storage::beneath`). Only the plain filesystem is replaced: a
        // fault-injecting or simulated storage of a test is used as given.
        if options.log.storage.is_plain_fs() {
            let beneath = crate::storage::beneath::BeneathStorage::new(&root, &[dir])
                .map_err(|e| Error::io("open", &root, &e))?;
            options.log.storage = std::sync::Arc::new(beneath);
        }
        let storage = &options.log.storage;
        // STORE-2 before anything is made: a `STORE` that is there is checked first, so a
        // store of another version, or a directory whose `STORE` is no identity file, is
        // refused with nothing created in it (a refused open leaves no trace). A new
        // store's `STORE` is written last, once its directories are (STORE-19, STORE-23).
        let checked = std::fs::symlink_metadata(dir.join("STORE")).is_ok();
        if checked && !read_identity(&**storage, dir)? {
            return Err(ErrorKind::StoreNotFound {
                path: dir.to_owned(),
            }
            .into());
        }
        for sub in ["sessions", "trash", "tmp"] {
            let path = dir.join(sub);
            refuse_symlink(&path)?;
            if std::fs::symlink_metadata(&path).is_err() {
                if !create {
                    return Err(ErrorKind::Corrupt {
                        location: path.display().to_string(),
                        reason: format!("the store has no {sub}/ (STORE-23)"),
                    }
                    .into());
                }
                // Synced through the resolved root: `dir` may be the caller's link.
                made.push(root.join(sub));
            }
            storage
                .create_dir_all(&path)
                .map_err(|e| Error::io("create_dir", &path, &e))?;
        }
        let mut parents: Vec<&Path> = made.iter().filter_map(|path| path.parent()).collect();
        parents.sort();
        parents.dedup();
        for parent in parents {
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            storage
                .sync_dir(parent)
                .map_err(|e| Error::io("fsync", parent, &e))?;
        }
        refuse_symlink(&dir.join(TMP_LOCK))?;
        if !checked && !read_identity(&**storage, dir)? {
            if !create {
                return Err(ErrorKind::StoreNotFound {
                    path: dir.to_owned(),
                }
                .into());
            }
            write_identity(&options, &root)?;
        }
        let store = Self {
            dir: dir.to_owned(),
            options,
            hook: Hook::default(),
        };
        if clean {
            store.clean_tmp(create);
        }
        Ok(store)
    }

    /// Runs `hook` at each [`Step`] of this store's operations. For tests: it drives the
    /// races between the steps deterministically.
    #[doc(hidden)]
    #[must_use]
    pub fn with_hook(mut self, hook: impl Fn(Step<'_>) + Send + Sync + 'static) -> Self {
        self.hook = Hook(Some(std::sync::Arc::new(hook)));
        self
    }

    fn step(&self, step: Step<'_>) {
        if let Some(hook) = &self.hook.0 {
            hook(step);
        }
    }

    /// STORE-17: removes the leftovers of interrupted builds from `tmp/`, when no build
    /// is in progress in any process (the exclusive lock on `tmp.lock` is free). Best
    /// effort: the store is usable without it (a read-only store cannot be cleaned), and a
    /// leftover that cannot be removed now is tried again at the next open. `create`: the
    /// store is opened by `Store::open_or_create`, which makes `tmp.lock` when missing.
    fn clean_tmp(&self, create: bool) {
        let storage = &*self.options.log.storage;
        let tmp = self.dir.join("tmp");
        if refuse_symlink(&tmp).is_err() {
            return;
        }
        // Created with a new store only: every build takes `tmp.lock` (creating it) before
        // it makes anything under `tmp/`, so without it there is nothing to clean, and
        // `Store::open` of an existing store writes nothing (STORE-23).
        let path = self.dir.join(TMP_LOCK);
        let opened = if create {
            open_lock_file(storage, &path)
        } else {
            storage.open_file(&path, false)
        };
        let Ok(lock) = opened else {
            return;
        };
        if lock.try_lock().is_err() {
            return;
        }
        let _lock = crate::log::FileLock(lock);
        let Ok(names) = storage.list_dir(&tmp) else {
            return;
        };
        let mut removed = false;
        for name in &names {
            let path = tmp.join(name);
            match storage.remove_dir_all(&path) {
                Ok(()) => {
                    removed = true;
                    tracing::info!(
                        path = %path.display(),
                        "stale build removed from tmp/ (STORE-17)"
                    );
                }
                Err(error) => tracing::warn!(
                    path = %path.display(),
                    %error,
                    "stale build in tmp/ not removed; tried again at the next open (STORE-17)"
                ),
            }
        }
        if removed {
            let _ = storage.sync_dir(&tmp);
        }
    }

    /// The store's directory.
    ///
    /// ```
    /// use surfacelog::{Store, StoreOptions};
    /// # let tmp = tempfile::tempdir()?;
    /// let store = Store::open_or_create(tmp.path(), StoreOptions::new())?;
    /// assert_eq!(store.dir(), tmp.path());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Creates session `id` (contract §5): header and seed are checked as
    /// [`Session::create`] does, then written to a temporary directory that is renamed into
    /// place, so a failed create leaves nothing behind.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// let s = store.create("s1", None, None)?;
    /// assert_eq!(s.seq_next(), 0);
    /// assert_eq!(store.create("s1", None, None).unwrap_err().code(), "SESSION_EXISTS");
    /// // With a header of the host's own and a seed (a conversation started elsewhere).
    /// let seeded = store.create(
    ///     "s2",
    ///     Some(r#"{"version":0,"id":"s2","createdAt":1700000000000}"#),
    ///     Some(&[r#"{"type":"host/note","seq":0,"time":1,"data":{}}"#]),
    /// )?;
    /// assert_eq!(seeded.seq_next(), 2); // the seed event and the end-seed marker
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `INVALID_ID` for the empty id (STORE-3), `SESSION_EXISTS`, any refusal of
    /// [`Session::create`], `IO`.
    pub fn create(
        &self,
        id: &str,
        header: Option<&str>,
        seed: Option<&[&str]>,
    ) -> Result<StoredSession> {
        check_id(id)?;
        let final_dir = self.session_dir(id);
        self.refuse_store_links()?;
        if std::fs::symlink_metadata(&final_dir).is_ok() {
            return Err(Error::from(ErrorKind::SessionExists { id: id.to_owned() }).in_session(id));
        }
        let memory = Session::create(id, header, seed, self.options.session.clone())?;
        // STORE-4: every later read refuses a `header.json` (the text and a newline) over
        // HEADER_BYTES_MAX as damage; such a header is refused here, before anything is
        // written.
        check_header_size(memory.header()).map_err(|e| e.in_session(id))?;
        let lock = self
            .publish(id, |tmp| self.write_session(tmp, &memory))
            .map_err(|e| e.in_session(id))?;
        let (session, _) =
            self.open_live_from(id, Some(memory.first_live_seq()), None, Some(lock))?;
        Ok(session)
    }

    /// Opens session `id` to continue writing: recovers the log, folds the surface, and
    /// appends the repair closers of an interrupted turn (contract §8). Its first live seq
    /// is the number of stored events.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// let (s, opened) = store.open_session("s")?;
    /// assert_eq!((s.seq_next(), opened.closers), (3, 0));
    /// assert_eq!(store.open_session("s").unwrap_err().code(), "LOCKED"); // one writer
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `INVALID_ID` for the empty id (STORE-3), `SESSION_NOT_FOUND`, `LOCKED` when another
    /// writer has it open, `CORRUPT` (also for a damaged or missing `header.json`, STORE-4),
    /// `FORMAT_VERSION`, `HEADER_INVALID`, `IO`.
    pub fn open_session(&self, id: &str) -> Result<(StoredSession, Opened)> {
        self.open_live_from(id, None, None, None)
    }

    /// [`Store::open_session`], or, when `first_live_seq` is given, the first open of a
    /// session just created (by [`Store::create`] or [`Store::fork`]): it is live from that
    /// seq (the number of seed events, not counting the end-seed marker, contract §5), and
    /// it is not repaired, since crash repair applies only when a stored log is reopened
    /// (§5: a seed may end inside an open turn, kept as given). A fork's child is opened
    /// over `chain`, the segments its source's reader has just opened and checked, handed
    /// over rather than opened again. `lock` is the log's lock when its creator holds it
    /// already (taken before the publish, [`Store::publish`]).
    fn open_live_from(
        &self,
        id: &str,
        first_live_seq: Option<u64>,
        chain: Option<crate::log::Chain>,
        lock: Option<FileLock>,
    ) -> Result<(StoredSession, Opened)> {
        self.open_live_recovering(id, first_live_seq, chain, lock)
            .map_err(|error| error.in_session(id))
            .inspect_err(|error| trace_refusal("open", id, error))
    }

    /// [`Store::open_live_from`], without the event of its refusal.
    fn open_live_recovering(
        &self,
        id: &str,
        first_live_seq: Option<u64>,
        chain: Option<crate::log::Chain>,
        lock: Option<FileLock>,
    ) -> Result<(StoredSession, Opened)> {
        let dir = self.session_dir(id);
        // LOG-1, STORE-9: the directory whose header is read must be the one whose log is
        // locked; a delete (and a create of the same id) in between is seen below.
        let identity = dir_identity(&dir);
        let header = Self::read_header(&*self.options.log.storage, id, &dir)?;
        self.step(Step::SessionChecked(id));
        let log_dir = dir.join("log");
        // STORE-21: a session is published with its `log/`; without it, its events are
        // lost, never a new empty log.
        if std::fs::symlink_metadata(&log_dir)
            .is_err_and(|error| error.kind() == std::io::ErrorKind::NotFound)
        {
            return Err(Error::from(ErrorKind::Corrupt {
                location: log_dir.display().to_string(),
                reason: "the session has no log directory (STORE-21)".to_owned(),
            })
            .in_session(id));
        }
        // CKP-8: the checkpoint is read first, so that the log can be opened over the
        // chain it records for this log directory, without listing it (RCV-11).
        let read = checkpoint::Checkpoint::read(&*self.options.log.storage, &dir)
            .map_err(|e| e.in_session(id))?;
        let known = read
            .as_ref()
            .ok()
            .filter(|_| chain.is_none())
            .and_then(|c| c.chain_of(&log_dir));
        // RCV-14: a checkpoint is written only once the events it covers are durable
        // (CKP-5), so its `seq_next` is a durable mark: a log that holds fewer events lost
        // data (`CORRUPT`), and damage below it is never taken for a torn tail.
        let durable_seq = read.as_ref().map_or(0, checkpoint::Unverified::seq_next);
        let (log, report) = DiskLog::open_from(
            &log_dir,
            self.options.log.clone(),
            chain,
            known,
            durable_seq,
            lock.map_or(LogDir::Existing, LogDir::Locked),
        )
        .map_err(|e| Self::unless_deleted(id, &dir, e))?;
        // CKP-3: a checkpoint is used only when it matches this log; otherwise fold it all.
        let loaded = read.and_then(|c| c.verify(&log, self.log_origin(&dir)));
        let (log, report) = if loaded == Err(checkpoint::Unusable::Stale) && report.from_known_chain
        {
            // A chain from a checkpoint that is not this log's is not trusted either: the
            // log is opened again from a listing (CKP-8). The first open repaired nothing
            // (RCV-11); closing it may write its last segment's index, a cache (IDX-2).
            drop(log);
            DiskLog::open_from(
                &log_dir,
                self.options.log.clone(),
                None,
                None,
                0,
                LogDir::Existing,
            )
            .map_err(|e| Self::unless_deleted(id, &dir, e))?
        } else {
            (log, report)
        };
        // Under the lock: the session is still the one whose header was read, not deleted
        // (and perhaps created again) since (LOG-1, STORE-9).
        if identity.is_none() || dir_identity(&dir) != identity {
            drop(log);
            return Err(
                Error::from(ErrorKind::SessionNotFound { id: id.to_owned() }).in_session(id),
            );
        }
        // STORE-20: the log directory is synced before the first append is acknowledged
        // durable (`log-format.md` DUR-9), not here.
        let stored = crate::event::EventSource::seq_next(&log);
        let (surface, repair, used) = match loaded {
            Ok(cp) => {
                let seq = cp.surface.seq_next();
                (cp.surface, cp.repair, Ok(seq))
            }
            Err(why) => (
                crate::surface::Surface::new(),
                crate::session::repair::RepairState::default(),
                Err(why),
            ),
        };
        let from = surface.seq_next();
        let mut log = StoredLog::new(
            log,
            repair,
            from,
            dir.clone(),
            std::sync::Arc::clone(&self.options.log.storage),
            self.options.checkpoint_every,
            self.options.message_pack,
        )
        .map_err(|e| e.in_session(id))?
        .compressing_pack(self.options.pack_level());
        // CKP-5: a checkpoint that matched the log, covers all of it and whose chain opened
        // it is what a flush would write; it is written again only after an append.
        if used == Ok(stored) && report.from_known_chain {
            log.checkpoint_covers_all();
        }
        let live = first_live_seq.unwrap_or(stored).min(stored);
        trace_log_recovery(id, stored, &report);
        trace_checkpoint(id, &used);
        let mut session =
            Session::over_log_from(header, log, surface, live, self.options.session.clone())?;
        let closers = match first_live_seq {
            Some(_) => 0,
            None => session.repair()?,
        };
        if closers > 0 || used.is_err() {
            session.flush()?;
        }
        Ok((
            session,
            Opened {
                log: report,
                closers,
                checkpoint: used,
            },
        ))
    }

    /// Opens session `id` to continue the conversation: [`Store::open_session`], then the end-seed
    /// marker (contract §5).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// let (s, _) = store.resume("s")?;
    /// assert_eq!(s.event(3)?.unwrap().event_type, "session/end-seed");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`Store::open_session`].
    pub fn resume(&self, id: &str) -> Result<(StoredSession, Opened)> {
        let (mut session, opened) = self.open_session(id)?;
        session.end_seed()?;
        Ok((session, opened))
    }

    /// The headers of all sessions, read from their header files only: no log is opened
    /// (STORE-8). One damaged session does not hide the others: the listing holds the
    /// headers that read (sorted by id) and, in [`Listing::damaged`], a `CORRUPT` error
    /// naming the `header.json` of each session whose header is missing or damaged
    /// (STORE-4). A name in `sessions/` that is not a directory is no session (verify warns
    /// of it, STORE-16) and is not listed; a symbolic link there is reported in
    /// [`Listing::damaged`] as `UNSAFE_PATH` (STORE-1).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// let listing = store.list()?;
    /// assert_eq!(listing.iter().map(|h| h.id()).collect::<Vec<_>>(), ["s"]);
    /// assert!(listing.damaged.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `IO` for the `sessions/` directory.
    pub fn list(&self) -> Result<Listing> {
        let sessions = self.dir.join("sessions");
        refuse_symlink(&sessions)?;
        let names = self
            .options
            .log
            .storage
            .list_dir(&sessions)
            .map_err(|e| Error::io("list", &sessions, &e))?;
        let mut listing = Listing::default();
        for name in names {
            let dir = sessions.join(&name);
            let gone = || {
                std::fs::symlink_metadata(&dir)
                    .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
            };
            match std::fs::symlink_metadata(&dir) {
                // STORE-1: a link is not followed, and not passed over in silence either.
                Ok(meta) if meta.file_type().is_symlink() => {
                    listing.damaged.push(link_inside(&dir));
                    continue;
                }
                Ok(meta) if !meta.is_dir() => continue,
                // Deleted (or its create rolled back) since the directory was listed.
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                _ => {}
            }
            match read_header_file(&*self.options.log.storage, &dir, &name) {
                Ok(header) => listing.headers.push(header),
                // Deleted while its header was being read: not damage.
                Err(_) if gone() => {}
                Err(error) => listing.damaged.push(error),
            }
        }
        listing.headers.sort_by(|a, b| a.id().cmp(b.id()));
        Ok(listing)
    }

    /// Moves session `id` to the trash; [`Store::purge`] removes it for good.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// store.delete("s")?;
    /// assert_eq!(store.open_session("s").unwrap_err().code(), "SESSION_NOT_FOUND");
    /// store.purge()?; // gone for good
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `SESSION_NOT_FOUND`, `LOCKED` while a writer has it open, `IO`.
    pub fn delete(&self, id: &str) -> Result<()> {
        self.trash(id).map(|_| ())
    }

    /// Deletes session `id` and removes it for good at once: [`Store::delete`], then the
    /// removal of that session only from the trash (the rest of the trash is kept).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// store.remove("s")?;
    /// assert!(store.list()?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`Store::delete`]; `IO` when the trashed directory cannot be removed (it is
    /// then in the trash, for [`Store::purge`]).
    pub fn remove(&self, id: &str) -> Result<()> {
        let trashed = self.trash(id)?;
        self.refuse_store_links()?;
        self.remove_trashed(&trashed)?;
        let trash = self.dir.join("trash");
        self.options
            .log
            .storage
            .sync_dir(&trash)
            .map_err(|e| Error::io("fsync", &trash, &e))
    }

    /// STORE-9: renames session `id` into `trash/` while holding its lock, so that no
    /// writer can open it in between and append into the trash; syncs `sessions/` and
    /// `trash/`, so that the delete survives a crash. Returns the trashed directory.
    fn trash(&self, id: &str) -> Result<PathBuf> {
        self.trash_in(id).map_err(|e| e.in_session(id))
    }

    /// [`Store::trash`], its errors not yet naming the session.
    fn trash_in(&self, id: &str) -> Result<PathBuf> {
        let dir = self.session_dir(id);
        Self::read_header(&*self.options.log.storage, id, &dir)?;
        let storage = &*self.options.log.storage;
        // Deleted by another handle since its header was read: its `LOCK` moved with it.
        let lock = crate::log::take_lock(storage, &dir.join("log"))
            .map_err(|e| Self::unless_deleted(id, &dir, e))?;
        self.step(Step::DeleteLocked(id));
        // STORE-1: the rename stays inside the store (checked under the lock, after the
        // step a test drives its races at).
        self.refuse_store_links()?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let trash = self.dir.join("trash");
        let trashed = trash.join(format!("{}-{nanos}", escape_id(id)));
        storage
            .rename(&dir, &trashed)
            .map_err(|e| Error::io("rename", &dir, &e))?;
        let sessions = self.dir.join("sessions");
        for parent in [&sessions, &trash] {
            storage
                .sync_dir(parent)
                .map_err(|e| Error::io("fsync", parent, &e))?;
        }
        drop(lock);
        Ok(trashed)
    }

    /// Rewrites session `id`'s log in a more compact record encoding (log-format.md §13,
    /// CMP-1 to CMP-6): in a store writing compact records (the default,
    /// [`StoreOptions::compact_records`]) each sealed segment of version 1 records (§4: by an
    /// older build, or by a writer configured for them) is replaced by one of compact
    /// records (§4.2); in a store of version 1 records, each sealed segment written without
    /// chunk records (§4.1) by one that stores its streamed chunks as chunk records. Every
    /// event keeps its seq and its text byte for byte; the surface, the checkpoint and
    /// every reader see the same session. Not the conversation's compaction (a
    /// replacement on the surface, contract §10): this changes how the bytes are stored,
    /// not what the session holds.
    ///
    /// Holds the session's lock throughout. Leaves the last segment (the writer's, and a
    /// follower's), segments shared with a fork (hard links, limits) and segments that
    /// already use the target records as they are, and says so in the report. Checks every
    /// sealed segment before it writes anything: damage is refused with nothing changed.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// let report = store.compact_log("s")?;
    /// assert!(report.rewritten.is_empty()); // one segment: the last, left as it is
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `SESSION_NOT_FOUND`, `LOCKED` while a writer has it open, `CORRUPT` naming the file
    /// and offset of damage (nothing changed), `FORMAT_VERSION`, `IO` (every segment is
    /// then as it was or rewritten whole, CMP-3).
    pub fn compact_log(&self, id: &str) -> Result<crate::log::LogCompaction> {
        self.compact_log_with(id, crate::log::CompactOptions::new())
    }

    /// [`Store::compact_log`] with options: with [`CompactOptions::compress`], every
    /// sealed segment it may rewrite (the last, limited and shared ones stay as they are)
    /// is also compressed (log-format.md §14, CZ-5), those already using chunk records
    /// included. Readers decompress a compressed segment, every block checked, on their
    /// first access into it (CZ-4); the writer never appends to one (CZ-6).
    ///
    /// [`CompactOptions::compress`]: crate::CompactOptions::compress
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// use surfacelog::{CompactOptions, NoSurface, Store, StoreOptions, kinds};
    /// let store = Store::open_or_create(dir.path(), StoreOptions::new().segment_bytes(4096))?;
    /// let mut s = store.create("s", None, None)?;
    /// for turn in 1..=100 {
    ///     s.append::<kinds::TurnStart>(&format!(r#"{{"turn":{turn}}}"#), NoSurface)?;
    ///     let end = format!(r#"{{"turn":{turn},"reason":{{"kind":"completed"}}}}"#);
    ///     s.append::<kinds::TurnEnd>(&end, NoSurface)?;
    /// }
    /// s.close()?;
    /// let report = store.compact_log_with("s", CompactOptions::new().compress(true))?;
    /// assert!(!report.rewritten.is_empty());
    /// assert!(report.rewritten.iter().all(|segment| segment.compressed));
    /// assert!(report.bytes_saved() > 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`Store::compact_log`].
    pub fn compact_log_with(
        &self,
        id: &str,
        options: crate::log::CompactOptions,
    ) -> Result<crate::log::LogCompaction> {
        check_id(id)?;
        let dir = self.session_dir(id);
        Self::read_header(&*self.options.log.storage, id, &dir)?;
        let storage = &*self.options.log.storage;
        // A store writing compact records rewrites sealed segments into them (§4.2).
        let options = if self.options.log.compact_records {
            options.compact_records(true)
        } else {
            options
        };
        // MSP-8: the message pack, a cache, compressed with the log it was written from,
        // under the log's lock (no writer writes one meanwhile); a failure leaves it as it
        // was.
        let then = |report: &mut crate::log::LogCompaction| {
            #[cfg(feature = "compress")]
            if let Some(level) = options.compresses() {
                report.pack_bytes = pack::compress(storage, &dir, level).ok().flatten();
            }
            #[cfg(not(feature = "compress"))]
            let _ = report;
        };
        let report = crate::log::compact_then(storage, &dir.join("log"), options, then)
            .map_err(|e| Self::unless_deleted(id, &dir, e).in_session(id))
            .inspect_err(|error| trace_refusal("compact", id, error))?;
        tracing::info!(
            session = id,
            rewritten = report.rewritten.len(),
            bytes_saved = report.bytes_saved(),
            "log compacted (CMP-1)"
        );
        Ok(report)
    }

    /// Salvages session `id` (log-format.md SLV-1 to SLV-4): keeps the
    /// longest valid prefix of its log, moves everything after it into quarantine files
    /// beside the log (never deleted), and removes the checkpoint and the message pack when
    /// they cover more than what remains (caches, rebuilt later). Never automatic: nothing else in
    /// the engine drops data below a durable mark. Holds the session's lock throughout.
    ///
    /// # Errors
    /// `SESSION_NOT_FOUND`, `LOCKED` while a writer has it open, `IO`.
    #[doc(hidden)]
    pub fn salvage(&self, id: &str) -> Result<SalvageReport> {
        self.salvage_in(id).map_err(|e| e.in_session(id))
    }

    /// [`Store::salvage`], its errors not yet naming the session.
    fn salvage_in(&self, id: &str) -> Result<SalvageReport> {
        let dir = self.session_dir(id);
        Self::read_header(&*self.options.log.storage, id, &dir)?;
        let storage = &*self.options.log.storage;
        let checkpoint = dir.join(checkpoint::CHECKPOINT_FILE);
        let mut checkpoint_removed = false;
        // A cache file covering more than the log keeps is removed, the removal synced.
        let remove_synced = |path: &Path| -> Result<()> {
            storage
                .remove_file(path)
                .map_err(|e| Error::io("remove", path, &e))?;
            storage
                .sync_dir(&dir)
                .map_err(|e| Error::io("fsync", &dir, &e))
        };
        let log = crate::log::salvage(storage, &dir.join("log"), |kept| {
            // MSP-7: a message pack of a longer log goes too, and first: should its removal
            // fail (or a crash come) before the checkpoint's, the checkpoint still ahead of
            // the log makes the next open refuse it (CKP-3) until salvage runs again, so a
            // log regrown past the pack never meets it.
            let pack = dir.join(pack::PACK_FILE);
            if pack::covered_len(storage, &pack).is_some_and(|len| len > kept.seq_next) {
                remove_synced(&pack)?;
            }
            if checkpoint::covered_len(storage, &checkpoint).is_some_and(|len| len > kept.seq_next)
            {
                remove_synced(&checkpoint)?;
                checkpoint_removed = true;
            }
            Ok(())
        })
        .map_err(|e| e.in_session(id))
        .inspect_err(|error| trace_refusal("salvage", id, error))?;
        if log.set_aside.is_empty() {
            tracing::info!(
                session = id,
                seq = log.seq_next,
                "salvage: nothing to set aside"
            );
        } else {
            tracing::warn!(
                session = id,
                seq = log.seq_next,
                reason = log.reason.as_deref().unwrap_or(""),
                set_aside = ?log.set_aside,
                checkpoint_removed,
                "session salvaged: events from seq on set aside into quarantine files (SLV-1)"
            );
        }
        Ok(SalvageReport {
            log,
            checkpoint_removed,
        })
    }

    /// Removes everything in the trash (STORE-9), then syncs `trash/`; returns how many
    /// entries were removed (a session a concurrent restore holds is left to it,
    /// STORE-24).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// store.delete("s")?; // into the trash
    /// store.purge()?;     // the trash emptied
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `IO`.
    pub fn purge(&self) -> Result<u64> {
        self.purge_where(|_| true)
    }

    /// Removes the trash entries whose name `keep` does not spare, each under its log's
    /// lock (STORE-24: never one a restore is moving), then syncs `trash/`. Returns how
    /// many were removed.
    fn purge_where(&self, remove: impl Fn(&str) -> bool) -> Result<u64> {
        let trash = self.dir.join("trash");
        refuse_symlink(&trash)?;
        let names = self
            .options
            .log
            .storage
            .list_dir(&trash)
            .map_err(|e| Error::io("list", &trash, &e))?;
        let mut removed = 0;
        for name in names.iter().filter(|name| remove(name)) {
            // Only directories are trashed sessions (STORE-9): anything else put there is
            // not the store's to remove, and is left as it is.
            let path = trash.join(name);
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io("stat", &path, &e)),
            }
            if self.remove_trashed(&path)? {
                removed += 1;
            }
        }
        if removed > 0 {
            self.options
                .log
                .storage
                .sync_dir(&trash)
                .map_err(|e| Error::io("fsync", &trash, &e))?;
        }
        Ok(removed)
    }

    /// Removes the trashed session directory `path` for good, holding its log's lock so
    /// that a restore cannot be moving it meanwhile (STORE-24). `false` when it is gone
    /// already, or a restore holds it (it is then back in `sessions/`, or will be).
    fn remove_trashed(&self, path: &Path) -> Result<bool> {
        let storage = &*self.options.log.storage;
        let log = path.join("log");
        let _lock = match std::fs::symlink_metadata(&log) {
            Ok(meta) if meta.is_dir() => match crate::log::take_lock(storage, &log) {
                Ok(lock) => Some(lock),
                // Held by a restore, or moved away by one since the check above.
                Err(_) if std::fs::symlink_metadata(path).is_err() => return Ok(false),
                Err(e) if e.code() == "LOCKED" => return Ok(false),
                Err(e) => return Err(e),
            },
            // A trashed directory without a log (a damaged session): nothing can open it.
            _ => None,
        };
        // First renamed, durably, to a name no restore takes (`escape_id` never writes a
        // `.`), so that a removal cut short (a crash, an I/O error between two files)
        // leaves nothing a restore would bring back as the session, shortened.
        let doomed = match path.file_name().and_then(|n| n.to_str()) {
            Some(name) if !name.starts_with('.') => {
                let trash = self.dir.join("trash");
                let doomed = trash.join(format!("{PURGING}{name}"));
                match storage.rename(path, &doomed) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
                    Err(e) => return Err(Error::io("rename", path, &e)),
                }
                storage
                    .sync_dir(&trash)
                    .map_err(|e| Error::io("fsync", &trash, &e))?;
                doomed
            }
            _ => path.to_owned(),
        };
        match storage.remove_dir_all(&doomed) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io("remove", &doomed, &e)),
        }
    }

    /// Removes the sessions trashed more than `age` ago (by the time in their trash name,
    /// STORE-9), then syncs `trash/`. Returns how many were removed.
    ///
    /// ```
    /// use std::time::Duration;
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// store.create("s", None, None)?.close()?;
    /// store.delete("s")?;
    /// assert_eq!(store.purge_older_than(Duration::from_secs(3600))?, 0); // trashed just now
    /// assert_eq!(store.purge_older_than(Duration::ZERO)?, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `IO`.
    pub fn purge_older_than(&self, age: std::time::Duration) -> Result<u64> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        self.purge_where(|name| {
            trash_name_parts(name)
                .is_some_and(|(_, trashed_at)| now.saturating_sub(trashed_at) >= age.as_nanos())
        })
    }

    /// Moves the most recently trashed copy of session `id` back from the trash
    /// (`store.md` STORE-24), then syncs `trash/` and `sessions/`.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// store.create("s", None, None)?.close()?;
    /// store.delete("s")?;
    /// store.restore("s")?;
    /// assert!(store.open_session("s").is_ok());
    /// assert_eq!(store.restore("s").unwrap_err().code(), "SESSION_EXISTS");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `INVALID_ID` for the empty id, `SESSION_NOT_FOUND` when the trash holds no copy of
    /// it, `SESSION_EXISTS` when a session `id` exists, `IO`.
    pub fn restore(&self, id: &str) -> Result<()> {
        self.restore_in(id).map_err(|e| e.in_session(id))
    }

    /// [`Store::restore`], its errors not yet naming the session.
    fn restore_in(&self, id: &str) -> Result<()> {
        check_id(id)?;
        self.refuse_store_links()?;
        let storage = &*self.options.log.storage;
        let to = self.session_dir(id);
        let taken = || std::fs::symlink_metadata(&to).is_ok();
        if taken() {
            return Err(ErrorKind::SessionExists { id: id.to_owned() }.into());
        }
        let trash = self.dir.join("trash");
        let name = escape_id(id);
        // A copy that moves between the listing and its lock (another restore brought it
        // back, a purge took it) is looked for again: the trash is then what it holds
        // after that restore or purge.
        let mut attempts = 0;
        let (from, _lock) = loop {
            let from = self.newest_copy(id, &name)?;
            match crate::log::take_lock(storage, &from.join("log")) {
                Ok(lock) => break (from, lock),
                Err(_)
                    if attempts < 8
                        && std::fs::symlink_metadata(&from)
                            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) =>
                {
                    if taken() {
                        return Err(ErrorKind::SessionExists { id: id.to_owned() }.into());
                    }
                    attempts += 1;
                }
                Err(error) => return Err(error),
            }
        };
        // Held while it moves: a purge removes no trashed session a restore holds.
        if let Err(error) = storage.rename(&from, &to) {
            if taken() {
                return Err(ErrorKind::SessionExists { id: id.to_owned() }.into());
            }
            return Err(Error::io("rename", &from, &error));
        }
        let sessions = self.dir.join("sessions");
        for dir in [&sessions, &trash] {
            storage
                .sync_dir(dir)
                .map_err(|e| Error::io("fsync", dir, &e))?;
        }
        Ok(())
    }

    /// The trash entry [`Store::restore`] takes for session `id` (escaped `name`): the
    /// newest copy whose header names `id` (STORE-24).
    ///
    /// # Errors
    /// `SESSION_NOT_FOUND` when there is none, `CORRUPT` for a copy whose header does not
    /// read, `IO`.
    fn newest_copy(&self, id: &str, name: &str) -> Result<PathBuf> {
        let storage = &*self.options.log.storage;
        let trash = self.dir.join("trash");
        let names = storage
            .list_dir(&trash)
            .map_err(|e| Error::io("list", &trash, &e))?;
        let mut copies: Vec<(u128, &String)> = names
            .iter()
            .filter_map(|n| match trash_name_parts(n) {
                Some((escaped, at)) if escaped == name => Some((at, n)),
                _ => None,
            })
            .collect();
        copies.sort_unstable_by(|a, b| b.cmp(a));
        // STORE-4: a shortened name may be another id's; the header tells. A copy whose
        // header does not read is damage, never passed over for an older one.
        for (_, n) in &copies {
            let dir = trash.join(n);
            if read_header_file(storage, &dir, name)?.id() == id {
                return Ok(dir);
            }
        }
        Err(ErrorKind::SessionNotFound { id: id.to_owned() }.into())
    }

    /// STORE-6: `write` fills a directory under `tmp/`, which is then renamed to the
    /// session's directory; on any failure nothing is left behind. Returns the new log's
    /// lock, taken before the rename, for the creator's open.
    fn publish(&self, id: &str, write: impl FnOnce(&Path) -> Result<()>) -> Result<FileLock> {
        let build = self.tmp_dir(id)?;
        // LOG-1: the new log's lock is taken before the session is published and held
        // through the rename (a rename keeps the file, so the lock stays on the `LOCK` the
        // session then has): no other opener takes the session before its creator opens it.
        let written = write(build.path()).and_then(|()| {
            crate::log::take_lock(&*self.options.log.storage, &build.path().join("log"))
        });
        let lock = match written {
            Ok(lock) => lock,
            Err(error) => {
                let _ = self.options.log.storage.remove_dir_all(build.path());
                return Err(error);
            }
        };
        self.publish_dir(id, build.path())?;
        Ok(lock)
    }

    /// A fresh, unique directory name under `tmp/` for building session `id`, with the
    /// shared lock on `tmp.lock` that keeps it from being cleaned (STORE-17).
    ///
    /// # Errors
    /// `IO` for the lock.
    pub(crate) fn tmp_dir(&self, id: &str) -> Result<Build> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let tmp = self.dir.join("tmp");
        refuse_symlink(&tmp)?;
        let lock_path = self.dir.join(TMP_LOCK);
        let lock = open_lock_file(&*self.options.log.storage, &lock_path)
            .map_err(|e| Error::io("open", &lock_path, &e))?;
        // Waits only for a cleaning in progress, which is short (STORE-17).
        lock.lock_shared()
            .map_err(|e| Error::io("flock", &lock_path, &e))?;
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = tmp.join(format!("{}-{}-{n}", escape_id(id), std::process::id()));
        // A leftover of a dead process that had the same pid.
        let _ = self.options.log.storage.remove_dir_all(&path);
        Ok(Build {
            path,
            _lock: crate::log::FileLock(lock),
        })
    }

    /// STORE-6, second half: renames the filled directory `tmp` to session `id`'s place and
    /// syncs `sessions/`; removes `tmp` and refuses with `SESSION_EXISTS` when the id is
    /// taken, also when another creator took it between the check and the rename. The
    /// caller holds the lock of `tmp`'s log (LOG-1): a publish whose sync fails is taken
    /// back (STORE-27).
    fn publish_dir(&self, id: &str, tmp: &Path) -> Result<()> {
        let final_dir = self.session_dir(id);
        let taken = || std::fs::symlink_metadata(&final_dir).is_ok();
        if let Err(error) = self.refuse_store_links().and_then(|()| refuse_symlink(tmp)) {
            let _ = self.options.log.storage.remove_dir_all(tmp);
            return Err(error);
        }
        if taken() {
            let _ = self.options.log.storage.remove_dir_all(tmp);
            return Err(ErrorKind::SessionExists { id: id.to_owned() }.into());
        }
        self.step(Step::BeforePublish(id));
        let storage = &self.options.log.storage;
        // STORE-21: the build directory's entries (its `log/` above all) are durable
        // before it is published, whichever earlier sync of it was skipped.
        if let Err(error) = storage.sync_dir(tmp) {
            let _ = storage.remove_dir_all(tmp);
            return Err(Error::io("fsync", tmp, &error));
        }
        if let Err(error) = storage.rename(tmp, &final_dir) {
            let _ = self.options.log.storage.remove_dir_all(tmp);
            if taken() {
                return Err(ErrorKind::SessionExists { id: id.to_owned() }.into());
            }
            return Err(Error::io("rename", &final_dir, &error));
        }
        let sessions = self.dir.join("sessions");
        if let Err(error) = storage.sync_dir(&sessions) {
            // STORE-27: the publish failed, so it is taken back. The caller holds the new
            // log's lock (LOG-1), so no writer has the session: renamed back to its build
            // directory (one step: the session is whole under `sessions/` or not there),
            // then removed as an unpublished build is.
            if storage.rename(&final_dir, tmp).is_ok() {
                let _ = storage.remove_dir_all(tmp);
                let _ = storage.sync_dir(&sessions);
            }
            return Err(Error::io("fsync", &sessions, &error));
        }
        Ok(())
    }

    fn session_dir(&self, id: &str) -> PathBuf {
        self.dir.join("sessions").join(escape_id(id))
    }

    /// STORE-1: refuses (`UNSAFE_PATH`) when one of the store's own directories,
    /// `sessions/`, `trash/` or `tmp/`, is a symbolic link: the paths below them would
    /// lead out of the store.
    fn refuse_store_links(&self) -> Result<()> {
        for sub in ["sessions", "trash", "tmp"] {
            refuse_symlink(&self.dir.join(sub))?;
        }
        Ok(())
    }

    /// The log of the session in `dir`, as a checkpoint needs it to rebuild its nodes
    /// when they fail their check on first read (`checkpoint.md` CKP-2).
    fn log_origin(&self, dir: &Path) -> checkpoint::LogOrigin {
        checkpoint::LogOrigin {
            dir: dir.join("log"),
            storage: std::sync::Arc::clone(&self.options.log.storage),
            vocabulary: std::sync::Arc::clone(&self.options.session.vocabulary),
        }
    }

    /// The header of session `id` in `dir`, its directory (STORE-3, STORE-4).
    ///
    /// # Errors
    /// `INVALID_ID`; `SESSION_NOT_FOUND` when there is no such directory, or when its header
    /// names another id that escapes to the same name (STORE-4); `CORRUPT` with the path of
    /// `header.json` when it is missing or damaged; `FORMAT_VERSION`; `IO`.
    fn read_header(storage: &dyn Storage, id: &str, dir: &Path) -> Result<Header> {
        check_id(id)?;
        // STORE-1: `sessions/` is checked before the directory is looked up through it.
        if let Some(sessions) = dir.parent() {
            refuse_symlink(sessions)?;
        }
        match std::fs::symlink_metadata(dir) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(ErrorKind::SessionNotFound { id: id.to_owned() }.into());
            }
            _ => {}
        }
        // The directory's own name: `escape(id)` for every directory the store looks up.
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_else(|| escape_id(id));
        let header = read_header_file(storage, dir, &name).map_err(|error| {
            // STORE-9: deleted (renamed into the trash) between the look-up above and the
            // read of its header: not found, not damage (as `list` decides).
            if std::fs::symlink_metadata(dir)
                .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
            {
                ErrorKind::SessionNotFound { id: id.to_owned() }.into()
            } else {
                error.in_session(id)
            }
        })?;
        if header.id() != id {
            // STORE-4: a shortened name shared by two ids; this one is the other's.
            return Err(ErrorKind::SessionNotFound { id: id.to_owned() }.into());
        }
        Ok(header)
    }

    /// What an error met opening session `id`'s log after its header was read means: a
    /// file missing (`NotFound`) while the session's directory is gone is the session
    /// deleted meanwhile (`SESSION_NOT_FOUND`); any other error is itself.
    fn unless_deleted(id: &str, dir: &Path, error: Error) -> Error {
        let missing = matches!(
            error.kind(),
            ErrorKind::Io {
                kind: std::io::ErrorKind::NotFound,
                ..
            }
        );
        if missing
            && std::fs::symlink_metadata(dir)
                .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        {
            return ErrorKind::SessionNotFound { id: id.to_owned() }.into();
        }
        error.in_session(id)
    }

    /// Writes a new session directory: `header.json`, then the log.
    fn write_session(&self, dir: &Path, session: &Session) -> Result<()> {
        let storage = &self.options.log.storage;
        storage
            .create_dir_all(dir)
            .map_err(|e| Error::io("create_dir", dir, &e))?;
        let header = format!("{}\n", session.header().text());
        write_file_atomically(&self.options, dir, "header.json", header.as_bytes())?;
        let (mut log, _) = DiskLog::open(&dir.join("log"), self.options.log.clone())?;
        log.append(session.log().events())?;
        log.flush()?;
        // CKP-8: the directory keeps its identity when the session is published (a rename).
        let chain = checkpoint::RecordedChain::of(&log);
        log.close()?;
        let mut repair = crate::session::repair::RepairState::default();
        repair.observe_from(session.log(), 0)?;
        let mut checkpoint = checkpoint::Checkpoint::of(session.surface(), &repair, session.log())?;
        checkpoint.chain = chain;
        let bytes = checkpoint.encode();
        write_file_atomically(&self.options, dir, checkpoint::CHECKPOINT_FILE, &bytes)
    }
}

/// STORE-3: refuses an id no directory can hold (`INVALID_ID`): the empty id, whose
/// escape is the empty name, `sessions/` itself.
/// What [`Store::summarize`] reads of a session without reading its log (for `ls`).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// The events its checkpoint covers (CKP-1, its CRC checked): exact for a closed
    /// session, behind a live writer by at most `checkpoint_every`; `None` without a
    /// usable checkpoint.
    pub events: Option<u64>,
    /// The surface's node count as of that checkpoint.
    pub surface: Option<u64>,
    /// The blocks on disk of the session's files (`header.json`, `checkpoint`, those in
    /// `log/`), in bytes; directories are not counted.
    pub bytes: u64,
    /// The sum of those files' lengths.
    pub apparent_bytes: u64,
    /// The segment files of its log (LOG-1 names).
    pub segments: u64,
}

/// The prefix of a trashed session's name while a purge removes it (STORE-24): no restore
/// takes it, and a later purge (`purge`, or `purge_older_than` once it is that old: the
/// name keeps its time) finishes the removal.
const PURGING: &str = ".purging-";

/// A trash entry's name, `escape(id)-<nanoseconds since the Unix epoch>` (STORE-9): the
/// escaped id and the time it was trashed.
fn trash_name_parts(name: &str) -> Option<(&str, u128)> {
    let (escaped, at) = name.rsplit_once('-')?;
    if at.is_empty() || !at.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((escaped, at.parse().ok()?))
}

/// STORE-4: every read refuses a `header.json` (the text and a newline) over
/// [`HEADER_BYTES_MAX`] as damage, so a session is never written with one
/// (`HEADER_INVALID`).
pub(crate) fn check_header_size(header: &Header) -> Result<()> {
    if header.text().len() as u64 + 1 > HEADER_BYTES_MAX {
        let reason = format!(
            "the header is larger than {} bytes (STORE-4)",
            HEADER_BYTES_MAX - 1
        );
        return Err(ErrorKind::HeaderInvalid { reason }.into());
    }
    Ok(())
}

/// The device and inode of directory `dir`, none when it cannot be looked up.
fn dir_identity(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(dir)
        .ok()
        .map(|meta| (meta.dev(), meta.ino()))
}

pub(crate) fn check_id(id: &str) -> Result<()> {
    if id.is_empty() {
        return Err(ErrorKind::InvalidId {
            id: id.to_owned(),
            reason: "the empty id names no session (STORE-3)",
        }
        .into());
    }
    Ok(())
}

/// What [`Store::list`] found: the headers that read, sorted by id, and the sessions whose
/// header is missing or damaged. It reads as the slice of headers.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
/// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
/// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
/// # s.close()?;
/// let listing = store.list()?;
/// for header in listing.iter() {
///     println!("{} created {}", header.id(), header.created_at());
/// }
/// for damaged in &listing.damaged {
///     eprintln!("error[{}]: {damaged}", damaged.code());
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Default)]
pub struct Listing {
    /// The headers of the sessions whose `header.json` reads, sorted by id.
    pub headers: Vec<Header>,
    /// One `CORRUPT` error per session whose `header.json` is missing or damaged, naming
    /// the file (STORE-4); its log is not read, so it may be intact: `verify` checks it.
    /// `UNSAFE_PATH` naming the link for a session directory, or a path in it, that is a
    /// symbolic link (STORE-1).
    pub damaged: Vec<Error>,
}

impl std::ops::Deref for Listing {
    type Target = [Header];

    fn deref(&self) -> &[Header] {
        &self.headers
    }
}

/// STORE-4: the header in the session directory `dir`, whose name is `name`. The header
/// must read as UTF-8, parse as a valid header (contract §6) and name an id that escapes
/// to `name`: a session directory is created only with its header, so anything else is
/// damage (`CORRUPT` with the path), never another session.
/// The largest `header.json` read (STORE-4): a header is a few hundred bytes; a larger
/// file is damage, refused before it is read into memory.
pub(crate) const HEADER_BYTES_MAX: u64 = 16 << 20;

/// `CORRUPT` for a `header.json` larger than [`HEADER_BYTES_MAX`].
pub(crate) fn header_too_large(path: &Path) -> Error {
    ErrorKind::Corrupt {
        location: path.display().to_string(),
        reason: format!("header.json is larger than {HEADER_BYTES_MAX} bytes (STORE-4)"),
    }
    .into()
}

fn read_header_file(storage: &dyn Storage, dir: &Path, name: &str) -> Result<Header> {
    let path = dir.join("header.json");
    refuse_session_links(dir)?;
    let corrupt = |reason: String| {
        Error::from(ErrorKind::Corrupt {
            location: path.display().to_string(),
            reason,
        })
    };
    let bytes = match crate::storage::read_file_at_most(storage, &path, HEADER_BYTES_MAX) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Err(header_too_large(&path)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(corrupt(
                "the session has no header.json (STORE-4); its log is kept".to_owned(),
            ));
        }
        Err(error) => return Err(Error::io("read", &path, &error)),
    };
    parse_header_file(&path, &bytes, name)
}

/// STORE-4: the header whose file `path` holds `bytes`, in the session directory named
/// `name`.
fn parse_header_file(path: &Path, bytes: &[u8], name: &str) -> Result<Header> {
    let corrupt = |reason: String| {
        Error::from(ErrorKind::Corrupt {
            location: path.display().to_string(),
            reason,
        })
    };
    let text = std::str::from_utf8(bytes).map_err(|e| {
        corrupt(format!(
            "header.json is not UTF-8 offset={} (STORE-4)",
            e.valid_up_to()
        ))
    })?;
    let text = text.trim_end();
    let json = Json::parse(text)
        .map_err(|e| corrupt(format!("header.json: {} (STORE-4)", Error::from(e))))?;
    let header_id = json.root().get("id").and_then(|v| v.as_str());
    let Some(header_id) = header_id.filter(|id| escape_id(id) == name) else {
        return Err(corrupt(format!(
            "header.json names no id that escapes to the directory's name {name:?} (STORE-4)"
        )));
    };
    Header::parse(text, &header_id, NegativeZero::Accept).map_err(|e| match e.kind() {
        // Another version is not damage; it is named at the header's `version`.
        ErrorKind::FormatVersion { .. } => {
            // The header's own member (its key), not the first `"version"` of the text,
            // which may be a member of a nested object of the host's.
            let at = json
                .root()
                .get("version")
                .and_then(|v| text[..v.span().start].rfind("\"version\""))
                .unwrap_or(0);
            e.at_place(path, at)
        }
        _ => corrupt(format!("header.json: {e} (STORE-4)")),
    })
}

/// STORE-1: the store follows no symbolic link it did not create. `UNSAFE_PATH` naming
/// `path` when it is one; a path that is missing or cannot be examined is left to the
/// operation that uses it.
pub(crate) fn refuse_symlink(path: &Path) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(link_inside(path)),
        _ => Ok(()),
    }
}

/// The `UNSAFE_PATH` refusal of the symbolic link `path` inside the store (STORE-1).
fn link_inside(path: &Path) -> Error {
    ErrorKind::UnsafePath {
        path: path.to_owned(),
        reason: "a symbolic link inside the store (STORE-1)",
    }
    .into()
}

/// STORE-1 for the session directory `dir` in `sessions/`, before anything in it is
/// opened: `sessions/`, the directory, and the paths the store and its log open in it
/// (`header.json`, `log/`, the log's `LOCK`, `checkpoint` and `checkpoint.tmp`). The
/// segments, indexes and other files of the log are opened without following a link in
/// their last component (`storage::FsStorage`), which also reports `UNSAFE_PATH`.
fn refuse_session_links(dir: &Path) -> Result<()> {
    if let Some(sessions) = dir.parent() {
        refuse_symlink(sessions)?;
    }
    refuse_symlink(dir)?;
    let log = dir.join("log");
    let checkpoint = dir.join(checkpoint::CHECKPOINT_FILE);
    let paths = [
        dir.join("header.json"),
        log.clone(),
        log.join("LOCK"),
        checkpoint.with_extension("tmp"),
        checkpoint,
        dir.join(pack::PACK_FILE),
        dir.join(format!("{}.tmp", pack::PACK_FILE)),
    ];
    paths.iter().try_for_each(|path| refuse_symlink(path))
}

fn check_identity(path: &Path, text: &str) -> Result<()> {
    let corrupt = || {
        Error::from(ErrorKind::Corrupt {
            location: path.display().to_string(),
            reason: "not a store identity file".to_owned(),
        })
    };
    let json = Json::parse(text.trim_end()).map_err(|_| corrupt())?;
    let root = json.root();
    if !root
        .get("format")
        .is_some_and(|f| f.is_str("surfacelog-store"))
    {
        return Err(corrupt());
    }
    match root.get("version").and_then(|v| v.as_safe_u64()) {
        Some(STORE_FORMAT_VERSION) => Ok(()),
        Some(found) => Err(ErrorKind::FormatVersion {
            found: found.to_string(),
            newer: found > STORE_FORMAT_VERSION,
        }
        .into()),
        None => Err(corrupt()),
    }
}

/// STORE-2: reads and checks the identity file `STORE` of the store in `dir`: `false` when
/// there is none.
///
/// # Errors
/// `CORRUPT` for a file that is no identity file (or larger than 1 MiB), `FORMAT_VERSION`,
/// `IO`.
fn read_identity(storage: &dyn crate::storage::Storage, dir: &Path) -> Result<bool> {
    let identity = dir.join("STORE");
    // An identity file is a line; anything past 1 MiB is not one.
    match crate::storage::read_file_at_most(storage, &identity, 1 << 20)
        .map(|bytes| bytes.unwrap_or_else(|| vec![0xFF]))
    {
        Ok(bytes) => {
            let text = String::from_utf8(bytes).map_err(|_| {
                Error::from(ErrorKind::Corrupt {
                    location: identity.display().to_string(),
                    reason: "not a store identity file".to_owned(),
                })
            })?;
            check_identity(&identity, &text)?;
            Ok(true)
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(error) => Err(Error::io("read", &identity, &error)),
    }
}

/// Opens the lock file `path`, creating it (mode 0600) when it does not exist, also when
/// another process creates it at the same time.
fn open_lock_file(
    storage: &dyn crate::storage::Storage,
    path: &Path,
) -> std::io::Result<std::fs::File> {
    match storage.open_file(path, false) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            match storage.create_file(path, 0) {
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                    storage.open_file(path, false)
                }
                other => other,
            }
        }
        other => other,
    }
}

/// STORE-2, STORE-5: writes the identity file of a new store through a temporary name
/// of this process and call, so that several processes creating the same store at once
/// do not write into each other's temporary file; each renames its own identical file
/// into place. When the rename fails but another creator's valid `STORE` is there, the
/// store exists and that is success.
fn write_identity(options: &StoreOptions, dir: &Path) -> Result<()> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = dir.join(format!("STORE.{}-{n}-{nanos}.tmp", std::process::id()));
    let identity = dir.join("STORE");
    let text = format!("{{\"format\":\"surfacelog-store\",\"version\":{STORE_FORMAT_VERSION}}}\n");
    let storage = &options.log.storage;
    let written = crate::storage::replace_file(&**storage, &tmp, &identity, text.as_bytes(), 0)
        .and_then(|()| {
            storage
                .sync_dir(dir)
                .map_err(|e| Error::io("fsync", dir, &e))
        });
    if let Err(error) = written {
        let _ = storage.remove_file(&tmp);
        // Another creator's `STORE`, or this call's own whose directory sync failed: it
        // is the store's only once the directory's sync succeeds (STORE-5, STORE-19).
        let found = crate::storage::read_file(&**storage, &identity)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok());
        return match found {
            Some(found) if check_identity(&identity, &found).is_ok() => storage
                .sync_dir(dir)
                .map_err(|e| Error::io("fsync", dir, &e)),
            _ => Err(error),
        };
    }
    Ok(())
}

/// Temporary file, sync, rename, directory sync (`store.md` STORE-5).
fn write_file_atomically(
    options: &StoreOptions,
    dir: &Path,
    name: &str,
    bytes: &[u8],
) -> Result<()> {
    let storage = &options.log.storage;
    let tmp = dir.join(format!("{name}.tmp"));
    crate::storage::replace_file(&**storage, &tmp, &dir.join(name), bytes, 0)?;
    storage
        .sync_dir(dir)
        .map_err(|e| Error::io("fsync", dir, &e))
}

#[cfg(test)]
mod header_tests {
    use super::Store;

    /// A shortened name shared by two ids (STORE-4) cannot be made without a hash
    /// collision; the directory is handed over directly instead.
    #[test]
    fn store_4_a_header_of_another_id_under_the_same_name_is_not_found() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().join("a");
        std::fs::create_dir(&dir).unwrap();
        let text = "{\"version\":0,\"id\":\"a\",\"createdAt\":0}\n";
        std::fs::write(dir.join("header.json"), text).unwrap();
        let error = Store::read_header(&crate::storage::FsStorage, "b", &dir).unwrap_err();
        assert_eq!(error.code(), "SESSION_NOT_FOUND", "{error}");
        assert_eq!(
            Store::read_header(&crate::storage::FsStorage, "a", &dir)
                .unwrap()
                .id(),
            "a"
        );
        // Under a name its id does not escape to, the same header is damage.
        let other = scratch.path().join("c");
        std::fs::rename(&dir, &other).unwrap();
        let error = Store::read_header(&crate::storage::FsStorage, "c", &other).unwrap_err();
        assert_eq!(error.code(), "CORRUPT", "{error}");
    }
}
