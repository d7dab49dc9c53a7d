//! The message pack (message-pack.md MSP-1 to MSP-3): its format, its binding to the log,
//! and its entries against a fresh fold of the log's first `seq_next` events (the fold the
//! checkpoint's check runs, stopped there on its way: `checkpoint::fold`).

use std::path::Path;

use super::Found;
use crate::event::EventSource;
use crate::log::LogReader;
use crate::storage::FsStorage;
use crate::store::pack::{PACK_FILE, Pack, Unusable};
use crate::surface::Surface;

/// The pack of the session directory `dir`, read and bound to the log `reader` reads
/// (MSP-1, MSP-2), for [`compare_pack`]; `None` when there is none, or when it does not
/// check out or is not bound, which is a warning: the pack is a cache written without a
/// sync (MSP-6), so a crash may tear it, and open then ignores it.
pub(super) fn load_pack(found: &mut Found, dir: &Path, reader: &LogReader) -> Option<Pack> {
    let path = dir.join(PACK_FILE);
    let (rule, message) = match Pack::load(&FsStorage, dir, reader) {
        Ok(pack) => return Some(pack),
        Err(Unusable::Missing) => return None,
        Err(Unusable::Corrupt(why)) => (
            "MSP-1",
            format!("{why}: open ignores it and reads messages from the log"),
        ),
        Err(Unusable::Version) => (
            "MSP-1",
            "another version: open ignores it and reads messages from the log".to_owned(),
        ),
        Err(Unusable::Stale) => (
            "MSP-2",
            "written from another log or a longer one: open ignores it".to_owned(),
        ),
    };
    found.warning(&path, None, rule, message);
    None
}

/// MSP-3: the entries of `pack` (of the session directory `dir`) against `surface`, a fresh
/// fold of the first `pack.seq_next()` events of the log `reader` reads, and each entry's
/// text against its record's message. A pack that checks out and is bound to the log but
/// holds other texts is an error: open would use it.
pub(super) fn compare_pack(
    found: &mut Found,
    dir: &Path,
    pack: &Pack,
    surface: &Surface,
    reader: &LogReader,
) {
    let path = dir.join(PACK_FILE);
    let mut nodes = surface.nodes().to_vec();
    nodes.sort_unstable();
    let mut entries = pack.entries();
    for &seq in &nodes {
        let Some((entry_seq, text)) = entries.next() else {
            let message = format!(
                "no entry for node {seq} of the surface after {} events",
                pack.seq_next()
            );
            found.error(&path, None, "MSP-3", message);
            return;
        };
        if entry_seq != seq {
            let message = format!("entry {entry_seq} where the surface has node {seq}");
            found.error(&path, None, "MSP-3", message);
            return;
        }
        match reader.event_at(seq) {
            Ok(event) if event.message() == text => {}
            Ok(_) => {
                let message = format!("the text of node {seq} is not its record's message");
                found.error(&path, None, "MSP-3", message);
                return;
            }
            Err(_) => return, // The fold of the whole log reports it.
        }
    }
    if let Some((seq, _)) = entries.next() {
        let message = format!("entry {seq} is not a node of the surface");
        found.error(&path, None, "MSP-3", message);
    }
}
