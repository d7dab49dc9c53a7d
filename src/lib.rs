//! surfacelog: the storage engine agent hosts embed to keep their sessions.
//!
//! An agent session is an append-only, event-sourced log. The **surface** is the derived,
//! ordered list of the events that become LLM messages; history manipulation (compaction,
//! pruning) never deletes, it appends an event that replaces a range of the surface and
//! cites what it shadowed. The normative behaviour is the contract
//! (`format-spec/upstream/contract.md`), cited here as "contract §N"; the log format is
//! `format-spec/log-format.md`, cited by rule ID.
//!
//! # Getting started
//!
//! A [`Store`] is a directory of sessions. A [`StoredSession`] appends events (each one
//! JSON text, stored exactly as given, checked before it is committed) and derives the
//! surface's [`Message`]s, ready for the next model request:
//!
//! ```
//! use surfacelog::{kinds, NoSurface, Store, StoreOptions, SurfaceIntent};
//!
//! let dir = tempfile::tempdir()?;
//! let store = Store::open_or_create(dir.path(), StoreOptions::new())?;
//! let mut session = store.create("s1", None, None)?;
//! session.append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)?;
//! let seq = session.append::<kinds::UserMessage>(
//!     r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#,
//!     SurfaceIntent::append(),
//! )?;
//! assert_eq!(session.messages()?[0].seq, seq);
//! session.close()?; // durable and checkpointed
//!
//! // After a crash or a restart: recovery, then the closers of an interrupted turn.
//! let (session, opened) = store.open_session("s1")?;
//! assert_eq!(opened.closers, 1); // turn 1 was never ended: a `turn/end` closes it
//! assert_eq!(session.messages()?.len(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The public API is the items at this crate root. [`Session`] is the same API over an
//! in-memory log (for tests and tools); [`Store::follow`] waits for a writer's events,
//! [`Store::inspect`] reads a session without opening it for writing, [`Store::fork`]
//! starts a session from another's history. Every refusal is an [`Error`] with a stable
//! [`Error::code`] and an [`Error::outcome`] saying what it left behind.
//!
//! # Cargo features
//!
//! - `dsh` (default): import and export of DSH's JSONL, Zstandard JSONL and `SQLite` session
//!   formats (bundled `SQLite` and `zstd`: C code).
//! - `cli` (default): the `surfacelog` binary's dependencies.
//! - `compress` (default): compressed sealed segments (`log-format.md` §14), written by
//!   `Store::compact_log_with` and read back transparently (`zstd`: C code). A build without
//!   it refuses a log holding one with `FORMAT_VERSION`.
//! - `serde`: `Session::append_serialize` and `Message::parse`.
//! - `tokio`: `Follower::into_stream`, a `Stream` of committed events.
//!
//! With `default-features = false` the engine alone builds, pure Rust.
//!
//! # Architecture invariants
//!
//! - The pure core (JSON, envelope and vocabulary, surface fold) sees no I/O, clock or
//!   randomness, so it is deterministic and fuzzable. The clock is injected.
//! - The surface refers to events by seq and never owns their bytes.
//! - Nothing recurses on input: JSON of any depth is parsed, compared, written and
//!   dropped iteratively.
//! - A refused event leaves no trace: entry points admit completely, then commit.
//! - Two words, two meanings: *recovery* is byte-level and only a writer's (quarantine a
//!   torn tail past the last durable mark, refuse damage below it), *repair* is event-level
//!   (contract §8).
//! - Lazy is fine, silent is not: every read returns a `Result`; a record that does not
//!   check out is an error naming its file and offset, never skipped, never the end of the
//!   log; read-only paths change no file and invent nothing.
//! - Only the storage and log layers touch the filesystem, through a `Storage` trait so
//!   tests inject failures. The only `unsafe` is the read-only memory map of segment files.
//!
//! The engine's modules are reachable under `internals`, for the crate's own CLI, benches,
//! fuzz targets and tests: unstable, hidden from this documentation, not for hosts.

#![deny(missing_docs)]

#[doc(hidden)]
pub mod internals;
mod sync;

#[cfg(feature = "dsh")]
pub(crate) use internals::adapters;
pub(crate) use internals::{
    clock, error, event, json, limits, log, record, session, storage, store, surface,
};

pub use internals::error::{Error, ErrorKind, Outcome, Result};
pub use internals::event::{Event, EventRef, Header, MessageText, Seqs, SharedBytes, SurfaceOp};
pub use internals::log::{
    CompactOptions, Durability, KeptReason, LogCompaction, OpenReport, RewrittenSegment, TornTail,
};
pub use internals::session::{
    Boundary, Compacted, Compaction, EventKind, NoSurface, Prune, Session, Snapshot, SurfaceIntent,
    kinds,
};
#[cfg(feature = "tokio")]
pub use internals::store::FollowStream;
pub use internals::store::checkpoint::Unusable as CheckpointUnusable;
#[cfg(feature = "dsh")]
pub use internals::store::{DshImport, DshSource, RefusedLog};
pub use internals::store::{
    FollowEvents, Follower, Listing, Opened, Problem, SessionReport, Severity, SharedSession,
    Store, StoreOptions, StoredSession, VerbatimRead, VerbatimStore, VerifyReport,
};
pub use internals::surface::{Message, Replacement, Surface};
