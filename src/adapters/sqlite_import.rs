//! Importing a DSH `SQLite` database into the store (`dsh-formats.md` §8.13, §9): every
//! session, or a chosen one, all or nothing.

use std::path::Path;

use super::legacy::Originals;
use super::sqlite::DshDatabase;
use crate::error::Result;
use crate::store::{Imported, Store};

/// Imports session `id` of the schema-17 database at `db`, or every session it holds,
/// into `store`. Each session is read in seq order (torn rows dropped, SQL-27), checked on
/// the import path, and closed by crash repair (contract §8). The database is only read.
///
/// All or nothing: an id the store already holds is refused before anything is imported,
/// and when one session fails, the sessions this call already published are removed.
/// Returns each imported session with the SQL-27 torn marker, when rows were dropped.
///
/// # Errors
/// `SESSION_EXISTS`, `SESSION_NOT_FOUND`, any refusal of [`DshDatabase`] or of the import
/// path; nothing is left in the store.
pub fn import_sqlite(
    store: &Store,
    db: &Path,
    id: Option<&str>,
) -> Result<Vec<(Imported, Option<u64>)>> {
    let database = DshDatabase::open(db)?;
    let ids = match id {
        Some(id) => vec![id.to_owned()],
        None => database.session_ids()?,
    };
    for id in &ids {
        store.refuse_existing(id)?;
    }
    let mut done: Vec<(Imported, Option<u64>)> = Vec::with_capacity(ids.len());
    let outcome = ids.iter().try_for_each(|id| {
        let header = database.header(id)?;
        let mut import = store.import(id, &header)?;
        let mut originals = Originals::default();
        let end = database.read_events(id, &mut |text| {
            let event = crate::json::Json::parse(&text)?;
            super::import_event(&mut import, id, &event, &mut originals)
        })?;
        originals.keep(&mut import);
        done.push((import.finish()?, end.torn_marker));
        Ok(())
    });
    if let Err(error) = outcome {
        // STORE-14: every published session is taken back, each one that can be. One that
        // cannot (a writer opened it meanwhile, `LOCKED`) breaks "nothing is left": the
        // first such error is the one reported, not the refusal, once the others are gone.
        let mut kept = None;
        for (imported, _) in &done {
            if let Err(discard) = store.discard(imported) {
                kept.get_or_insert(discard);
            }
        }
        return Err(kept.unwrap_or(error));
    }
    Ok(done)
}
