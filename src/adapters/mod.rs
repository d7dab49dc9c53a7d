//! Adapters for the DSH interchange formats (`dsh-formats.md`).

pub mod jsonl;
pub mod rows;
pub mod sqlite;
pub mod sqlite_import;
