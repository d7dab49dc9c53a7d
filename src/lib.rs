//! surfacelog: the storage engine agent hosts embed to keep their sessions.
//!
//! An agent session is an append-only, event-sourced log. The **surface** is the derived,
//! ordered list of the events that become LLM messages; history manipulation (compaction,
//! pruning) never deletes, it appends an event that replaces a range of the surface and
//! cites what it shadowed. The normative behaviour is the contract
//! (`format-spec/upstream/contract.md`), cited here as "contract §N"; the log format is
//! `format-spec/log-format.md`, cited by rule ID.
//!
//! # The data path
//!
//! An event enters through a [`session::Session`] entry point (append, seed, reopen), is
//! validated as lossless JSON ([`json`]), read as an envelope and projected through the
//! vocabulary ([`event`]), checked against the surface ([`surface`]) and the optional
//! invariants, and only then committed to the log. Views (messages, transcript, as-of)
//! read the log through [`event::EventSource`] and return slices of stored JSON text.
//!
//! ```
//! use surfacelog::session::{kinds, NoSurface, Options, Session, SurfaceIntent};
//!
//! let mut session = Session::create("demo", None, None, Options::default())?;
//! session.append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)?;
//! let seq = session.append::<kinds::UserMessage>(
//!     r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#,
//!     SurfaceIntent::append(),
//! )?;
//! assert_eq!(session.messages()?[0].seq, seq);
//! # Ok::<(), surfacelog::Error>(())
//! ```
//!
//! # Architecture invariants
//!
//! - Dependencies point backwards along the path: [`json`], [`event`] and [`surface`] see
//!   no I/O, clock or randomness, so they are deterministic and fuzzable. The clock is
//!   injected ([`clock`]).
//! - The surface refers to events by seq and never owns their bytes.
//! - Nothing recurses on input: JSON of any depth is parsed, compared, written and
//!   dropped iteratively.
//! - A refused event leaves no trace: entry points admit completely, then commit.
//! - Two words, two meanings: *recovery* is byte-level and only a writer's ([`log`]:
//!   quarantine a torn tail past the last durable mark, refuse damage below it), *repair*
//!   is event-level ([`session::repair`], contract §8).
//! - Lazy is fine, silent is not: every read returns a `Result`; a record that does not
//!   check out is an error naming its file and offset, never skipped, never the end of the
//!   log; read-only paths change no file and invent nothing.
//! - Only [`storage`] and [`log`] touch the filesystem; the log's file operations go
//!   through the [`storage::Storage`] trait so tests inject failures. The only `unsafe`
//!   is the read-only memory map of segment files (`log::map`).

#[cfg(feature = "dsh")]
pub mod adapters;
pub mod clock;
pub mod error;
pub mod event;
pub mod json;
pub mod limits;
pub mod log;
pub mod record;
pub mod session;
pub mod storage;
pub mod store;
pub mod surface;
mod sync;

pub use error::{Error, ErrorKind, Outcome, Result};
