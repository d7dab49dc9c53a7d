//! Races of a writer's open with another handle's delete and create of the same id
//! (`log-format.md` LOG-1, `store.md` STORE-6, STORE-9): never two writers of one log,
//! never a deleted session's log made again, never a creator robbed of its new session.

#[path = "../common/mod.rs"]
mod common;

mod create;
mod delete;
mod delete_and_create;
mod lock_io;
