//! The one error type, its stable codes (contract §11) and their context.
//!
//! Every refusal is an [`Error`]: a [`ErrorKind`] naming what went wrong with its own
//! fields, plus the context every refusal shares (session id and seq, where known).
//! [`Error::code`] returns the contract's stable code; it is what callers and the CLI
//! match on, never the message text.

use std::fmt;
use std::path::PathBuf;

/// Convenience alias used throughout the crate.
///
/// ```
/// fn first_message(store: &surfacelog::Store, id: &str) -> surfacelog::Result<Option<String>> {
///     let (session, _) = store.open_session(id)?;
///     Ok(session.messages()?.first().map(|m| m.json.to_owned()))
/// }
/// # let _ = first_message;
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A refusal: what went wrong and where. Boxed, so `Result<T>` stays small.
///
/// ```
/// use surfacelog::{NoSurface, Outcome, Session, StoreOptions, kinds};
///
/// let mut session = Session::in_memory("s", &StoreOptions::new())?;
/// let error = session.append::<kinds::TurnStart>("{not json", NoSurface).unwrap_err();
/// assert_eq!(error.code(), "DATA_INVALID_JSON");
/// assert_eq!(error.outcome(), Outcome::NothingWritten); // the session is unchanged
/// assert_eq!(session.seq_next(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Error(Box<Inner>);

struct Inner {
    kind: ErrorKind,
    session: Option<String>,
    seq: Option<u64>,
    /// The file and offset a refusal of a file's version names (`at=… offset=…`).
    place: Option<(PathBuf, usize)>,
    /// The operating-system error of an `IO` error, for [`std::error::Error::source`].
    source: Option<std::io::Error>,
    /// Set by the writer when a write or sync failed (`log-format.md` DUR-5, DUR-10).
    fate_unknown: bool,
}

/// What a failed call did to the log: the guarantee that goes with an [`Error`]
/// ([`Error::outcome`]; `log-format.md` DUR-10). The stable code says what went wrong;
/// this says what is on disk afterwards.
///
/// ```
/// # use surfacelog::{NoSurface, Outcome, Session, StoreOptions, kinds};
/// # let mut session = Session::in_memory("s", &StoreOptions::new())?;
/// let error = session.append::<kinds::TurnStart>("{", NoSurface).unwrap_err();
/// assert_eq!(error.outcome(), Outcome::NothingWritten);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Refused before anything was written: the log, the surface and the session are as
    /// they were before the call, and the session stays usable. Every validation refusal
    /// (`SEQ_NOT_CONTIGUOUS`, `SURFACE_OP_REQUIRED`, ...) is one, and so is an `IO` error
    /// met before the write (a reader that cannot catch up, an open that fails).
    NothingWritten,
    /// A write or sync of the log failed (code `IO`; or `POISONED` for a `Sync` append whose
    /// records were written and whose sync, run by another appender, failed) while the
    /// call's events were being written or made durable: some, all or none of their bytes may have reached the
    /// disk. The writer is poisoned: every later append and flush is refused with
    /// `POISONED`. Reopening the session recovers from what is on disk: each event of the
    /// failed call is then there whole or not at all, never in part, and the ones that are
    /// there come before any event appended after the reopen (RCV-9).
    FateUnknown,
    /// `POISONED`: refused, writing nothing, because an earlier write or sync failed
    /// (reported as [`Outcome::FateUnknown`] to the call it failed in, or, for the
    /// background flusher of `Batch` durability, to none); the session is unusable until
    /// it is reopened.
    Poisoned,
}

/// What went wrong. Each variant maps to exactly one stable code ([`ErrorKind::code`]).
///
/// ```
/// use surfacelog::{ErrorKind, Store, StoreOptions};
///
/// # let dir = tempfile::tempdir()?;
/// let store = Store::open_or_create(dir.path(), StoreOptions::new())?;
/// store.create("s", None, None)?.close()?;
/// match store.create("s", None, None) {
///     Err(e) if matches!(e.kind(), ErrorKind::SessionExists { .. }) => {}
///     other => panic!("{other:?}"),
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// `ENVELOPE_INVALID`: an event object breaks the envelope table (contract §2).
    EnvelopeInvalid {
        /// Which rule.
        reason: String,
    },
    /// `SEQ_NOT_CONTIGUOUS`: the seq is not the expected next one (contract §4 step 1).
    SeqNotContiguous {
        /// The seq the log needs next.
        expected: u64,
        /// The seq given, as written.
        found: String,
    },
    /// `DATA_INVALID_JSON`: a JSON text is not valid RFC 8259 JSON (contract §2.1).
    /// surfacelog's own code: the contract requires validity but names no code.
    DataInvalidJson {
        /// Byte offset of the fault within the text.
        offset: usize,
        /// The grammar rule that failed.
        reason: &'static str,
    },
    /// `DATA_DUPLICATE_KEY`: an object repeats a key (contract §2.1).
    DataDuplicateKey {
        /// The repeated key, decoded.
        key: String,
        /// Byte offset of the second occurrence.
        offset: usize,
    },
    /// `DATA_NOT_LOSSLESS`: a `-0` where the entry point refuses it (contract §2.1).
    DataNotLossless {
        /// Byte offset of the number.
        offset: usize,
    },
    /// `EVENT_TOO_LARGE`: the event exceeds `max_event_bytes` (contract §2.1).
    EventTooLarge {
        /// Size of the event text in bytes.
        len: usize,
        /// The configured bound.
        max: usize,
    },
    /// `LEGACY_EVENT`: a retired event kind (contract §3).
    LegacyEvent {
        /// Which legacy form.
        reason: &'static str,
    },
    /// `MESSAGE_SHAPE`: a surface event's message breaks the shape rules (contract §3).
    MessageShape {
        /// The event type.
        event_type: String,
        /// The rule that failed.
        rule: &'static str,
    },
    /// `REQUEST_HEADER_SHAPE`: a `request/header` breaks its rules (contract §3).
    RequestHeaderShape {
        /// The rule that failed.
        rule: &'static str,
    },
    /// `SURFACE_OP_FORBIDDEN`: `surfaceOp` on a type that is not surface-eligible.
    SurfaceOpForbidden {
        /// The event type.
        event_type: String,
    },
    /// `SOURCES_FORBIDDEN`: `sourceEventSeqs` on a type that is not surface-eligible.
    SourcesForbidden {
        /// The event type.
        event_type: String,
    },
    /// `SURFACE_OP_REQUIRED`: a surface-eligible type without `surfaceOp`.
    SurfaceOpRequired {
        /// The event type.
        event_type: String,
    },
    /// `SURFACE_OP_INVALID`: `surfaceOp` is neither `"append"` nor a replace object.
    SurfaceOpInvalid,
    /// `SOURCES_INVALID`: `sourceEventSeqs` is not an array of non-negative safe integers.
    SourcesInvalid,
    /// `SOURCES_EMPTY`: `[]` on a type other than `assistant/message`.
    SourcesEmpty,
    /// `SOURCES_DUPLICATE`: a source seq is cited twice.
    SourcesDuplicate {
        /// The repeated seq.
        source: u64,
    },
    /// `SOURCES_NOT_EARLIER`: a source is not smaller than the event's own seq.
    SourcesNotEarlier {
        /// The offending seq.
        source: u64,
    },
    /// `REPLACE_START_NOT_ON_SURFACE`.
    ReplaceStartNotOnSurface {
        /// The replace's `start`.
        start: u64,
    },
    /// `REPLACE_END_NOT_ON_SURFACE`.
    ReplaceEndNotOnSurface {
        /// The replace's `end`.
        end: u64,
    },
    /// `REPLACE_REVERSED`: `start` sits after `end` on the surface.
    ReplaceReversed {
        /// The replace's `start`.
        start: u64,
        /// The replace's `end`.
        end: u64,
    },
    /// `REPLACE_SOURCES_INCOMPLETE`: shadowed nodes missing from `sourceEventSeqs`.
    ReplaceSourcesIncomplete {
        /// The shadowed seqs not cited, in surface order.
        missing: Vec<u64>,
    },
    /// `TOOL_REWRITE_NOT_SINGLE`: a `tool/result` replacement shadows more than one node.
    ToolRewriteNotSingle {
        /// How many nodes the range covers.
        shadowed: usize,
    },
    /// `TOOL_REWRITE_TARGET`: a `tool/result` replacement shadows another type.
    ToolRewriteTarget {
        /// The shadowed seq.
        target: u64,
    },
    /// `TOOL_REWRITE_CHANGED`: a tool-output prune changes more than the output.
    ToolRewriteChanged {
        /// The shadowed seq.
        target: u64,
    },
    /// An `INV_*` code: the optional invariants refused the event (contract §9).
    Invariant {
        /// Which invariant.
        violation: Invariant,
    },
    /// `HEADER_INVALID`: the session header breaks its table (contract §6).
    HeaderInvalid {
        /// Which rule.
        reason: String,
    },
    /// `FORMAT_VERSION`: a version this build does not read (contract §6).
    FormatVersion {
        /// The version found, as written.
        found: String,
        /// `true` when it is newer than this build ("upgrade"); `false` when older.
        newer: bool,
    },
    /// `SESSION_EXISTS`: the id names an existing session (contract §7).
    SessionExists {
        /// The id.
        id: String,
    },
    /// `SESSION_NOT_FOUND`: no session has this id.
    SessionNotFound {
        /// The id.
        id: String,
    },
    /// `INVALID_ID`: a session id a store cannot hold: the empty id, which names no
    /// directory (`store.md` STORE-3). surfacelog's own code: the contract requires a
    /// non-empty id (§6) but names no code for an id refused before any header is read.
    InvalidId {
        /// The id, as given.
        id: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// `INVALID_BOUNDARY`: a fork boundary (contract §7), or the seq of an as-of view, is
    /// not a seq of the session.
    InvalidBoundary {
        /// The boundary as given.
        boundary: String,
    },
    /// `COMPACTION_UNBALANCED`: a compaction range cuts a tool call from its result
    /// (contract §10). surfacelog's own code: the contract requires the check but names
    /// no code.
    CompactionUnbalanced {
        /// The range's first node.
        start: u64,
        /// The range's last node.
        end: u64,
        /// Open tool calls counted before `start`.
        open_before: i64,
        /// Open tool calls counted through `end`.
        open_after: i64,
    },
    /// `CORRUPT`: stored or imported data fails its structure (contract §11).
    Corrupt {
        /// Where: a file and offset, a record index, a line.
        location: String,
        /// What is wrong.
        reason: String,
    },
    /// `LOCKED`: another writer holds the log (contract §11, `log-format.md` LOG-1).
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// `POISONED`: an earlier write or sync failed; the writer refuses writes until the
    /// log is reopened (`log-format.md` DUR-5).
    Poisoned,
    /// `IO`: an operating-system call failed (contract §11).
    Io {
        /// The operation, e.g. `write` or `fsync`.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error's kind.
        kind: std::io::ErrorKind,
        /// The OS error's text.
        message: String,
    },
    /// `UNSAFE_PATH`: a file outside the store that an import reads or an export writes
    /// is a symbolic link, not a regular file, or open to other users (`dsh-formats.md`
    /// SQL-1, SQL-2); or a path of the store is a symbolic link, which the store never
    /// follows (`store.md` STORE-1). surfacelog's own code.
    UnsafePath {
        /// The file or directory.
        path: PathBuf,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// `STORE_NOT_FOUND`: [`Store::open`](crate::Store::open), which never creates, found
    /// no store at this path: no directory, or one without the `STORE` identity file
    /// (`store.md` STORE-23). surfacelog's own code.
    StoreNotFound {
        /// The directory asked for.
        path: PathBuf,
    },
    /// `UNKNOWN_EVENT_TYPE`: a strict import met a type outside DSH's vocabulary that is not
    /// `ignorable` (contract §11, `dsh-formats.md` LOAD-10).
    UnknownEventType {
        /// The type, decoded.
        event_type: String,
    },
    /// `NOT_REPRESENTABLE`: an export format cannot hold an event the log holds: a DSH
    /// JSONL file cannot hold an event whose type is a packed row's tag, which a reader
    /// would take for a row (`dsh-formats.md` §4.5; `SQLite` can, SQL-16). surfacelog's own
    /// code.
    NotRepresentable {
        /// The event's seq.
        seq: u64,
        /// Why the format cannot hold it.
        reason: &'static str,
    },
    /// `OPEN_TURN`: a fork boundary falls inside a turn (contract §7).
    OpenTurn {
        /// The boundary.
        boundary: u64,
        /// The seq of the `turn/start` left open.
        turn_start: u64,
    },
}

/// The optional invariants of contract §9, one per stable `INV_*` code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Invariant {
    /// `INV_SEQ_ORDER`.
    SeqOrder,
    /// `INV_TURN_ALREADY_OPEN`.
    TurnAlreadyOpen,
    /// `INV_TURN_NUMBER`.
    TurnNumber,
    /// `INV_TURN_END_MISMATCH`.
    TurnEndMismatch,
    /// `INV_TURN_END_STEP_OPEN`.
    TurnEndStepOpen,
    /// `INV_STEP_TURN`.
    StepTurn,
    /// `INV_STEP_ALREADY_OPEN`.
    StepAlreadyOpen,
    /// `INV_STEP_NUMBER`.
    StepNumber,
    /// `INV_OUTSIDE_STEP`.
    OutsideStep,
    /// `INV_TOOL_RESULT_UNMATCHED`.
    ToolResultUnmatched,
    /// `INV_REPLACEMENT_OUTSIDE_TURN`.
    ReplacementOutsideTurn,
    /// `INV_OUTSIDE_TURN`.
    OutsideTurn,
}

impl Invariant {
    /// The stable code.
    pub fn code(self) -> &'static str {
        match self {
            Self::SeqOrder => "INV_SEQ_ORDER",
            Self::TurnAlreadyOpen => "INV_TURN_ALREADY_OPEN",
            Self::TurnNumber => "INV_TURN_NUMBER",
            Self::TurnEndMismatch => "INV_TURN_END_MISMATCH",
            Self::TurnEndStepOpen => "INV_TURN_END_STEP_OPEN",
            Self::StepTurn => "INV_STEP_TURN",
            Self::StepAlreadyOpen => "INV_STEP_ALREADY_OPEN",
            Self::StepNumber => "INV_STEP_NUMBER",
            Self::OutsideStep => "INV_OUTSIDE_STEP",
            Self::ToolResultUnmatched => "INV_TOOL_RESULT_UNMATCHED",
            Self::ReplacementOutsideTurn => "INV_REPLACEMENT_OUTSIDE_TURN",
            Self::OutsideTurn => "INV_OUTSIDE_TURN",
        }
    }
}

impl ErrorKind {
    /// The stable code of contract §11 (or of the section that defines it).
    ///
    /// ```
    /// use surfacelog::ErrorKind;
    ///
    /// let kind = ErrorKind::SessionNotFound { id: "s".to_owned() };
    /// assert_eq!(kind.code(), "SESSION_NOT_FOUND");
    /// ```
    pub fn code(&self) -> &'static str {
        match self {
            Self::EnvelopeInvalid { .. } => "ENVELOPE_INVALID",
            Self::SeqNotContiguous { .. } => "SEQ_NOT_CONTIGUOUS",
            Self::DataInvalidJson { .. } => "DATA_INVALID_JSON",
            Self::DataDuplicateKey { .. } => "DATA_DUPLICATE_KEY",
            Self::DataNotLossless { .. } => "DATA_NOT_LOSSLESS",
            Self::EventTooLarge { .. } => "EVENT_TOO_LARGE",
            Self::LegacyEvent { .. } => "LEGACY_EVENT",
            Self::MessageShape { .. } => "MESSAGE_SHAPE",
            Self::RequestHeaderShape { .. } => "REQUEST_HEADER_SHAPE",
            Self::SurfaceOpForbidden { .. } => "SURFACE_OP_FORBIDDEN",
            Self::SourcesForbidden { .. } => "SOURCES_FORBIDDEN",
            Self::SurfaceOpRequired { .. } => "SURFACE_OP_REQUIRED",
            Self::SurfaceOpInvalid => "SURFACE_OP_INVALID",
            Self::SourcesInvalid => "SOURCES_INVALID",
            Self::SourcesEmpty => "SOURCES_EMPTY",
            Self::SourcesDuplicate { .. } => "SOURCES_DUPLICATE",
            Self::SourcesNotEarlier { .. } => "SOURCES_NOT_EARLIER",
            Self::ReplaceStartNotOnSurface { .. } => "REPLACE_START_NOT_ON_SURFACE",
            Self::ReplaceEndNotOnSurface { .. } => "REPLACE_END_NOT_ON_SURFACE",
            Self::ReplaceReversed { .. } => "REPLACE_REVERSED",
            Self::ReplaceSourcesIncomplete { .. } => "REPLACE_SOURCES_INCOMPLETE",
            Self::ToolRewriteNotSingle { .. } => "TOOL_REWRITE_NOT_SINGLE",
            Self::ToolRewriteTarget { .. } => "TOOL_REWRITE_TARGET",
            Self::ToolRewriteChanged { .. } => "TOOL_REWRITE_CHANGED",
            Self::Invariant { violation } => violation.code(),
            Self::HeaderInvalid { .. } => "HEADER_INVALID",
            Self::FormatVersion { .. } => "FORMAT_VERSION",
            Self::SessionExists { .. } => "SESSION_EXISTS",
            Self::SessionNotFound { .. } => "SESSION_NOT_FOUND",
            Self::InvalidId { .. } => "INVALID_ID",
            Self::InvalidBoundary { .. } => "INVALID_BOUNDARY",
            Self::CompactionUnbalanced { .. } => "COMPACTION_UNBALANCED",
            Self::Corrupt { .. } => "CORRUPT",
            Self::Locked { .. } => "LOCKED",
            Self::Poisoned => "POISONED",
            Self::Io { .. } => "IO",
            Self::OpenTurn { .. } => "OPEN_TURN",
            Self::UnsafePath { .. } => "UNSAFE_PATH",
            Self::StoreNotFound { .. } => "STORE_NOT_FOUND",
            Self::UnknownEventType { .. } => "UNKNOWN_EVENT_TYPE",
            Self::NotRepresentable { .. } => "NOT_REPRESENTABLE",
        }
    }
}

impl Error {
    /// The stable code (contract §11).
    ///
    /// ```
    /// # use surfacelog::{NoSurface, Session, StoreOptions, kinds};
    /// # let mut session = Session::in_memory("s", &StoreOptions::new())?;
    /// let error = session.append::<kinds::TurnStart>(r#"{"turn":1,"turn":2}"#, NoSurface).unwrap_err();
    /// assert_eq!(error.code(), "DATA_DUPLICATE_KEY"); // match on codes, never on messages
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn code(&self) -> &'static str {
        self.0.kind.code()
    }

    /// What went wrong, with its fields.
    ///
    /// ```
    /// use surfacelog::{ErrorKind, Store, StoreOptions};
    /// # let dir = tempfile::tempdir()?;
    /// # let store = Store::open_or_create(dir.path(), StoreOptions::new())?;
    /// let error = store.open_session("nobody").unwrap_err();
    /// assert!(matches!(error.kind(), ErrorKind::SessionNotFound { id } if id == "nobody"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn kind(&self) -> &ErrorKind {
        &self.0.kind
    }

    /// The session the refusal concerns, when known.
    ///
    /// ```
    /// # use surfacelog::{NoSurface, Session, StoreOptions, kinds};
    /// let mut session = Session::in_memory("s1", &StoreOptions::new())?;
    /// let error = session.append::<kinds::TurnStart>("{", NoSurface).unwrap_err();
    /// assert_eq!(error.session(), Some("s1"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn session(&self) -> Option<&str> {
        self.0.session.as_deref()
    }

    /// The seq of the refused event, when the refusal concerns one.
    ///
    /// ```
    /// # use surfacelog::{NoSurface, Session, StoreOptions, kinds};
    /// let mut session = Session::in_memory("s1", &StoreOptions::new())?;
    /// session.append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)?;
    /// let error = session.append::<kinds::TurnStart>("{", NoSurface).unwrap_err();
    /// assert_eq!(error.seq(), Some(1)); // the seq the refused event would have taken
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn seq(&self) -> Option<u64> {
        self.0.seq
    }

    /// What the failed call left on disk (`log-format.md` DUR-10): nothing, for a refusal;
    /// an unknown part of its events, for a write or sync that failed (the session is
    /// then poisoned until reopened); nothing, for `POISONED`.
    ///
    /// ```
    /// use surfacelog::{Error, Outcome};
    ///
    /// fn after_failed_append(error: &Error) -> &'static str {
    ///     match error.outcome() {
    ///         Outcome::NothingWritten => "retry or fix the input; the session is as it was",
    ///         Outcome::FateUnknown | Outcome::Poisoned => "reopen the session, then look at its tail",
    ///         _ => "unknown outcome",
    ///     }
    /// }
    /// # let _ = after_failed_append;
    /// ```
    pub fn outcome(&self) -> Outcome {
        if self.0.fate_unknown {
            Outcome::FateUnknown
        } else if self.0.kind == ErrorKind::Poisoned {
            Outcome::Poisoned
        } else {
            Outcome::NothingWritten
        }
    }

    /// Whether the fate of the failed call's events is unknown until the session is
    /// reopened: `outcome() == Outcome::FateUnknown`.
    ///
    /// ```
    /// # use surfacelog::{NoSurface, Session, StoreOptions, kinds};
    /// # let mut session = Session::in_memory("s", &StoreOptions::new())?;
    /// let error = session.append::<kinds::TurnStart>("{", NoSurface).unwrap_err();
    /// assert!(!error.is_fate_unknown()); // a validation refusal wrote nothing
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_fate_unknown(&self) -> bool {
        self.0.fate_unknown
    }

    /// Marks a failure of the writer's write or sync path: the events being written may be
    /// on disk in part (DUR-5, DUR-10).
    #[must_use]
    pub(crate) fn with_fate_unknown(mut self) -> Self {
        self.0.fate_unknown = true;
        self
    }

    /// The error of an append whose records were taken back after it failed
    /// (`log-format.md` DUR-12): nothing of it is on disk any more.
    #[must_use]
    pub(crate) fn restored(mut self) -> Self {
        self.0.fate_unknown = false;
        self
    }

    /// An `IO` error for `op` on `path`; `UNSAFE_PATH` naming `path` for the `ELOOP` of an
    /// open that follows no symbolic link (`store.md` STORE-1), for the `EXDEV` of a path
    /// that would leave the store's directory (`RESOLVE_BENEATH`), and for a file that must
    /// be regular and is not ([`crate::storage::NotRegular`]).
    #[doc(hidden)]
    pub fn io(op: &'static str, path: impl Into<PathBuf>, error: &std::io::Error) -> Self {
        if error.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
            return ErrorKind::UnsafePath {
                path: path.into(),
                reason: "a symbolic link where none is followed (STORE-1), or a loop of links",
            }
            .into();
        }
        if error.raw_os_error() == Some(rustix::io::Errno::XDEV.raw_os_error()) {
            // `RESOLVE_BENEATH` refusing a path that leaves the store's directory, or a
            // rename across a mount point inside it (STORE-1).
            return ErrorKind::UnsafePath {
                path: path.into(),
                reason: "a path that leaves the store's directory (STORE-1)",
            }
            .into();
        }
        if let Some(link) = error
            .get_ref()
            .and_then(|e| e.downcast_ref::<crate::storage::beneath::LinkAt>())
        {
            return ErrorKind::UnsafePath {
                path: link.0.clone(),
                reason: "a symbolic link inside the store (STORE-1)",
            }
            .into();
        }
        let not_regular = error
            .get_ref()
            .and_then(|e| e.downcast_ref::<crate::storage::NotRegular>());
        if not_regular.is_some() {
            return ErrorKind::UnsafePath {
                path: path.into(),
                reason: "not a regular file",
            }
            .into();
        }
        let kind = error.kind();
        let mut io: Self = ErrorKind::Io {
            op,
            path: path.into(),
            kind,
            message: error.to_string(),
        }
        .into();
        io.0.source = Some(copy_io(error));
        io
    }

    /// Adds the session id, unless one is already set.
    #[doc(hidden)]
    #[must_use]
    pub fn in_session(mut self, session: &str) -> Self {
        if self.0.session.is_none() {
            self.0.session = Some(session.to_owned());
        }
        self
    }

    /// The same error again, for a refusal kept to be reported by every later call that
    /// meets it (a sealed segment that does not check out): its kind and context.
    #[must_use]
    pub(crate) fn repeat(&self) -> Self {
        Self(Box::new(Inner {
            kind: self.0.kind.clone(),
            session: self.0.session.clone(),
            seq: self.0.seq,
            place: self.0.place.clone(),
            source: self.0.source.as_ref().map(copy_io),
            fate_unknown: self.0.fate_unknown,
        }))
    }

    /// Adds the file and offset it concerns (RD-7), unless they are set already.
    #[must_use]
    pub(crate) fn at_place(mut self, path: &std::path::Path, offset: usize) -> Self {
        if self.0.place.is_none() {
            self.0.place = Some((path.to_owned(), offset));
        }
        self
    }

    /// The same error with kind `kind`, its context (session, seq, place) kept.
    #[must_use]
    #[cfg_attr(not(feature = "dsh"), expect(dead_code, reason = "the DSH scanners'"))]
    pub(crate) fn with_kind(mut self, kind: ErrorKind) -> Self {
        self.0.kind = kind;
        self
    }

    /// Names the file of a place given as an offset alone (an empty path), as a scanner
    /// that knows offsets but not its file's name gives it.
    #[must_use]
    #[cfg_attr(not(feature = "dsh"), expect(dead_code, reason = "the DSH scanners'"))]
    pub(crate) fn in_file(mut self, path: &std::path::Path) -> Self {
        if let Some((place, _)) = &mut self.0.place
            && place.as_os_str().is_empty()
        {
            path.clone_into(place);
        }
        self
    }

    /// Adds the seq, unless one is already set.
    #[doc(hidden)]
    #[must_use]
    pub fn at_seq(mut self, seq: u64) -> Self {
        if self.0.seq.is_none() {
            self.0.seq = Some(seq);
        }
        self
    }
}

/// A copy of `error` for [`Error::source`](std::error::Error::source): the same raw OS
/// error when it has one (so the same kind and text), else the same kind and text.
/// (`io::Error` is not `Clone`; callers hand it by reference.)
fn copy_io(error: &std::io::Error) -> std::io::Error {
    match error.raw_os_error() {
        Some(code) => std::io::Error::from_raw_os_error(code),
        None => std::io::Error::new(error.kind(), error.to_string()),
    }
}

/// At most 64 characters of an input text, for error context (inputs can be huge).
pub(crate) fn excerpt(text: &str) -> String {
    const CHARS_MAX: usize = 64;
    match text.char_indices().nth(CHARS_MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

impl From<ErrorKind> for Error {
    fn from(kind: ErrorKind) -> Self {
        Self(Box::new(Inner {
            kind,
            session: None,
            seq: None,
            place: None,
            source: None,
            fate_unknown: false,
        }))
    }
}

impl From<crate::json::JsonError> for Error {
    fn from(error: crate::json::JsonError) -> Self {
        use crate::json::JsonErrorKind;
        let offset = error.offset;
        match error.kind {
            JsonErrorKind::Syntax(reason) => ErrorKind::DataInvalidJson { offset, reason },
            JsonErrorKind::DuplicateKey(key) => ErrorKind::DataDuplicateKey { key, offset },
            JsonErrorKind::TooLarge => ErrorKind::EventTooLarge {
                len: offset,
                max: crate::json::JSON_TEXT_BYTES_MAX,
            },
        }
        .into()
    }
}

impl From<Invariant> for Error {
    fn from(violation: Invariant) -> Self {
        ErrorKind::Invariant { violation }.into()
    }
}

impl fmt::Display for ErrorKind {
    #[expect(clippy::too_many_lines, reason = "one arm per error kind")]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::EnvelopeInvalid { reason } => write!(f, "invalid event envelope: {reason}"),
            Self::SeqNotContiguous { expected, found } => {
                write!(
                    f,
                    "seq is not the next one expected={expected} found={found}"
                )
            }
            Self::DataInvalidJson { offset, reason } => {
                write!(f, "invalid json: {reason} offset={offset}")
            }
            Self::DataDuplicateKey { key, offset } => {
                write!(f, "object repeats a key key={key:?} offset={offset}")
            }
            Self::DataNotLossless { offset } => {
                write!(
                    f,
                    "negative zero cannot be written back losslessly offset={offset}"
                )
            }
            Self::EventTooLarge { len, max } => {
                write!(
                    f,
                    "event is too large len_bytes={len} max_event_bytes={max}"
                )
            }
            Self::LegacyEvent { reason } => write!(f, "legacy event refused: {reason}"),
            Self::MessageShape { event_type, rule } => {
                write!(f, "message shape violated type={event_type} rule={rule:?}")
            }
            Self::RequestHeaderShape { rule } => {
                write!(f, "request header shape violated rule={rule:?}")
            }
            Self::SurfaceOpForbidden { event_type } => {
                write!(
                    f,
                    "surfaceOp on a type that is not surface-eligible type={event_type}"
                )
            }
            Self::SourcesForbidden { event_type } => write!(
                f,
                "sourceEventSeqs on a type that is not surface-eligible type={event_type}"
            ),
            Self::SurfaceOpRequired { event_type } => {
                write!(
                    f,
                    "surface-eligible event without surfaceOp type={event_type}"
                )
            }
            Self::SurfaceOpInvalid => {
                write!(
                    f,
                    "surfaceOp is neither \"append\" nor {{op:\"replace\",start,end}}"
                )
            }
            Self::SourcesInvalid => {
                write!(
                    f,
                    "sourceEventSeqs is not an array of non-negative safe integers"
                )
            }
            Self::SourcesEmpty => write!(f, "sourceEventSeqs is empty"),
            Self::SourcesDuplicate { source } => {
                write!(f, "sourceEventSeqs repeats a seq source={source}")
            }
            Self::SourcesNotEarlier { source } => {
                write!(
                    f,
                    "sourceEventSeqs cites a seq that is not earlier source={source}"
                )
            }
            Self::ReplaceStartNotOnSurface { start } => {
                write!(f, "replace start is not on the surface start={start}")
            }
            Self::ReplaceEndNotOnSurface { end } => {
                write!(f, "replace end is not on the surface end={end}")
            }
            Self::ReplaceReversed { start, end } => {
                write!(
                    f,
                    "replace start sits after end on the surface start={start} end={end}"
                )
            }
            Self::ReplaceSourcesIncomplete { missing } => {
                write!(
                    f,
                    "replace does not cite every shadowed node missing={missing:?}"
                )
            }
            Self::ToolRewriteNotSingle { shadowed } => {
                write!(
                    f,
                    "tool/result replacement must shadow one node shadowed={shadowed}"
                )
            }
            Self::ToolRewriteTarget { target } => {
                write!(
                    f,
                    "tool/result replacement must shadow a tool/result target={target}"
                )
            }
            Self::ToolRewriteChanged { target } => write!(
                f,
                "tool/result replacement changes more than the tool output target={target}"
            ),
            Self::Invariant { violation } => {
                write!(f, "invariant violated code={}", violation.code())
            }
            Self::HeaderInvalid { reason } => write!(f, "invalid session header: {reason}"),
            Self::FormatVersion { found, newer: true } => {
                write!(
                    f,
                    "format version is newer than this build, upgrade found={found}"
                )
            }
            Self::FormatVersion {
                found,
                newer: false,
            } => {
                write!(
                    f,
                    "format version is older and has no upgrade path found={found}"
                )
            }
            Self::SessionExists { id } => write!(f, "session already exists id={id:?}"),
            Self::SessionNotFound { id } => write!(f, "session not found id={id:?}"),
            Self::InvalidId { id, reason } => write!(f, "invalid session id: {reason} id={id:?}"),
            Self::InvalidBoundary { boundary } => {
                write!(
                    f,
                    "boundary is not a seq of the session (a fork's, or an as-of view's) boundary={boundary}"
                )
            }
            Self::CompactionUnbalanced {
                start,
                end,
                open_before,
                open_after,
            } => write!(
                f,
                "compaction range is not tool-pairing balanced start={start} end={end} \
                 open_before={open_before} open_after={open_after}"
            ),
            Self::Corrupt { location, reason } => write!(f, "corrupt data: {reason} at={location}"),
            Self::Locked { path } => {
                write!(f, "another writer holds the log path={}", path.display())
            }
            Self::Poisoned => {
                write!(
                    f,
                    "an earlier write or sync failed; reopen the log to continue"
                )
            }
            Self::Io {
                op, path, message, ..
            } => {
                write!(f, "i/o error: {message} op={op} path={}", path.display())
            }
            Self::OpenTurn {
                boundary,
                turn_start,
            } => write!(
                f,
                "fork boundary falls inside a turn boundary={boundary} turn_start={turn_start}"
            ),
            Self::UnsafePath { path, reason } => {
                write!(f, "unsafe path: {reason} path={}", path.display())
            }
            Self::StoreNotFound { path } => {
                write!(f, "no store here (STORE-23) path={}", path.display())
            }
            Self::UnknownEventType { event_type } => {
                write!(
                    f,
                    "event type is not in the vocabulary and not ignorable type={event_type:?}"
                )
            }
            Self::NotRepresentable { seq, reason } => {
                write!(f, "the export format cannot hold event {seq}: {reason}")
            }
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.kind, f)?;
        if let Some((path, offset)) = &self.0.place {
            write!(f, " at={} offset={offset}", path.display())?;
        }
        if let Some(session) = &self.0.session {
            write!(f, " session={session:?}")?;
        }
        if let Some(seq) = self.0.seq {
            write!(f, " seq={seq}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Error[{}]: {self}", self.code())
    }
}

impl std::error::Error for Error {
    /// The operating-system error of an `IO` error.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0
            .source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
