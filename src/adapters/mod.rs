//! Adapters for the DSH interchange formats (`dsh-formats.md`).

pub mod jsonl;
pub mod legacy;
pub mod rows;
pub mod sqlite;
pub mod sqlite_import;

use crate::error::{Error, ErrorKind, Result};
use crate::json::Value;

/// Imports one event read from a DSH log: refuses a retired type (LOAD-9), applies the
/// import-compatibility projections (LOAD-4, [`legacy::project`]) and pushes the event,
/// projected or as read, keeping the original text of a projected one in `originals`.
///
/// # Errors
/// The refusal of LOAD-9, of a projection, or of the import path.
pub(crate) fn import_event(
    import: &mut crate::store::Import<'_>,
    session: &str,
    event: &crate::json::Json<'_>,
    originals: &mut legacy::Originals,
) -> Result<()> {
    let root = event.root();
    refuse_retired(root)?;
    match legacy::project(session, root, &mut |seq| import.message_id_at(seq))? {
        Some(projected) => {
            let seq = import.push(&projected)?;
            originals.insert(seq, root.raw(), &projected);
        }
        None => {
            import.push_parsed(event)?;
        }
    }
    Ok(())
}

/// LOAD-9: a DSH log holding a `mode/set` event is refused when it is imported, as the
/// reference refuses it at load (`LEGACY_EVENT`, naming the seq). The legacy events of
/// contract §3 (`request/header-delta`, a `fallback` request header) are refused on every
/// entry point already; the contract does not retire `mode/set`, so a host may still
/// append one.
pub(crate) fn refuse_retired(event: Value<'_, '_>) -> Result<()> {
    if !event.get("type").is_some_and(|t| t.is_str("mode/set")) {
        return Ok(());
    }
    let error = Error::from(ErrorKind::LegacyEvent {
        reason: "mode/set is retired (dsh-formats.md LOAD-9)",
    });
    Err(match event.get("seq").and_then(|s| s.as_safe_u64()) {
        Some(seq) => error.at_seq(seq),
        None => error,
    })
}
