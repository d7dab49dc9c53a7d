//! The message pack (message-pack.md MSP-1 to MSP-3): its format, its binding to the log,
//! and its entries against a fresh fold of the log's first `seq_next` events.

use std::path::Path;
use std::sync::Arc;

use super::Found;
use crate::event::{EventSource, Vocabulary};
use crate::log::LogReader;
use crate::session::Prefix;
use crate::storage::FsStorage;
use crate::store::pack::{PACK_FILE, Pack, Unusable};
use crate::surface::Surface;

/// Checks the pack of the session directory `dir` whose log (in `log_dir`) checked out.
/// Every failure of MSP-1 and MSP-2 is a warning: the pack is a cache written without a
/// sync (MSP-6), so a crash may tear it, and open then ignores it. A pack that checks out
/// and is bound to the log but holds other texts (MSP-3) is an error: open would use it.
pub(super) fn check_pack(found: &mut Found, dir: &Path, log_dir: &Path, vocabulary: &Vocabulary) {
    let path = dir.join(PACK_FILE);
    let Ok(reader) = LogReader::open_with(log_dir, Arc::new(FsStorage)) else {
        return; // The log's own check reports it.
    };
    let pack = match Pack::load(&FsStorage, dir, &reader) {
        Ok(pack) => pack,
        Err(Unusable::Missing) => return,
        Err(Unusable::Corrupt(why)) => {
            let message = format!("{why}: open ignores it and reads messages from the log");
            found.warning(&path, None, "MSP-1", message);
            return;
        }
        Err(Unusable::Version) => {
            let message = "another version: open ignores it and reads messages from the log";
            found.warning(&path, None, "MSP-1", message.to_owned());
            return;
        }
        Err(Unusable::Stale) => {
            let message = "written from another log or a longer one: open ignores it";
            found.warning(&path, None, "MSP-2", message.to_owned());
            return;
        }
    };
    let prefix = Prefix {
        log: &reader,
        len: pack.seq_next(),
    };
    let mut surface = Surface::new();
    if surface.catch_up(&prefix, vocabulary).is_err() {
        return; // The fold of the whole log reports it.
    }
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
            Err(_) => return, // The log's own check reports it.
        }
    }
    if let Some((seq, _)) = entries.next() {
        let message = format!("entry {seq} is not a node of the surface");
        found.error(&path, None, "MSP-3", message);
    }
}
