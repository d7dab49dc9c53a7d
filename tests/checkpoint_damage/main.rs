//! A session's caches beside its log, the checkpoint and the message pack (`checkpoint.md`,
//! `message-pack.md`), damaged, stale or lost: every read equals a fresh fold of the log or
//! fails `CORRUPT`, never a shorter or empty answer, and read-only paths write nothing.

#[path = "../common/mod.rs"]
mod common;

mod fork;
mod lost;
mod readonly;
mod sweep;
