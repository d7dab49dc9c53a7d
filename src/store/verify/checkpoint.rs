//! The checkpoint (CKP-1 to CKP-4, CKP-8): its format and version, its coverage and chain
//! against the log, and its nodes, keys, generation and repair state against a fresh fold
//! of the log (contract §4, RD-1, RCV-6).

use std::path::Path;
use std::sync::Arc;

use super::Found;
use super::log::LogSummary;
use crate::error::{Error, Result};
use crate::event::{EventSource, Vocabulary};
use crate::log::LogReader;
use crate::record::{u32_at, u64_at};
use crate::session::Prefix;
use crate::session::repair::RepairState;
use crate::storage::FsStorage;
use crate::store::checkpoint::{self, CHECKPOINT_MAGIC, CHECKPOINT_VERSION};
use crate::store::pack::Pack;
use crate::surface::Surface;

/// The checkpoint's fields (CKP-1, the `nodes_crc` of CKP-2, CKP-4, CKP-8), or `None`
/// when there is none or it does not check out (reported).
pub(super) fn read_checkpoint(
    found: &mut Found,
    path: &Path,
) -> Result<Option<checkpoint::Fields>> {
    // STORE-1, STORE-16: a link or a file that is not regular where the checkpoint is
    // is a problem of this session, not a refusal of the whole check.
    if let Ok(meta) = std::fs::symlink_metadata(path)
        && !meta.is_file()
    {
        let what = if meta.file_type().is_symlink() {
            "a symbolic link inside the store"
        } else {
            "the checkpoint is not a regular file"
        };
        found.error(path, None, "STORE-1", what);
        return Ok(None);
    }
    let bytes = match crate::storage::read_regular(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(Error::io("read", path, &error)),
    };
    let version = u32_at(&bytes, 8).unwrap_or_default();
    if bytes.get(..8) == Some(&CHECKPOINT_MAGIC[..]) && version != CHECKPOINT_VERSION {
        // CKP-1: an older version that checks out by its own rules is ignored by open
        // (and replaced); anything else is a damaged version field or a newer file.
        if older_checkpoint_checks_out(&bytes, version) {
            found.warning(
                path,
                Some(8),
                "CKP-1",
                format!(
                    "a checkpoint of version {version}: open ignores it, folds the log and writes version {CHECKPOINT_VERSION}"
                ),
            );
        } else {
            found.error(
                path,
                Some(8),
                "CKP-1",
                format!("version {version}, and not a valid checkpoint of that version"),
            );
        }
        return Ok(None);
    }
    match checkpoint::fields(&bytes) {
        Ok(fields) => Ok(Some(fields)),
        Err((rule, message)) => {
            found.error(path, None, rule, message);
            Ok(None)
        }
    }
}

/// CKP-2, CKP-3, CKP-4, CKP-8 and contract §4: the checkpoint against the log and a
/// fresh fold of it; the fold of the whole log (only when the log checked out), which also
/// checks the message pack of the session directory `dir` on its way (MSP-1 to MSP-3).
pub(super) fn check_checkpoint(
    found: &mut Found,
    path: &Path,
    checkpoint: Option<&checkpoint::Fields>,
    log: &LogSummary,
    dir: &Path,
    vocabulary: &Vocabulary,
) {
    let log_dir = dir.join("log");
    let log_dir = log_dir.as_path();
    if let Some(cp) = checkpoint {
        if Surface::from_parts(
            cp.nodes.clone(),
            cp.keys.clone(),
            cp.generation,
            cp.seq_next,
        )
        .is_none()
        {
            found.error(
                path,
                None,
                "CKP-2",
                "the nodes and keys break the surface's invariants",
            );
        }
        check_coverage(found, path, cp, log);
        check_chain(found, path, cp, log, log_dir);
    }
    if log.clean {
        fold(found, path, checkpoint, log, dir, vocabulary);
    }
}

/// Where the fold of the whole log stops on its way to compare.
enum Stop<'a> {
    /// The checkpoint, at its `seq_next` (CKP-2, CKP-4).
    Checkpoint(&'a checkpoint::Fields),
    /// The message pack, at its `seq_next` (MSP-3).
    Pack(&'a Pack),
}

/// The fold of the whole log of the session directory `dir`, compared on its way with the
/// checkpoint and with the message pack, each at its `seq_next`: one fold for the three.
fn fold(
    found: &mut Found,
    path: &Path,
    checkpoint: Option<&checkpoint::Fields>,
    log: &LogSummary,
    dir: &Path,
    vocabulary: &Vocabulary,
) {
    let log_dir = dir.join("log");
    let log_dir = log_dir.as_path();
    let reader = match LogReader::open_with(log_dir, Arc::new(FsStorage)) {
        Ok(reader) => reader,
        Err(error) => {
            found.error(
                log_dir,
                None,
                "STORE-16",
                format!("the log does not open for reading: {error}"),
            );
            return;
        }
    };
    let total = reader.seq_next();
    if log.len != Some(total) {
        found.error(
            log_dir,
            None,
            "RD-1",
            format!(
                "a reader finds {total} events, the scan {:?} (a writer appending?)",
                log.len
            ),
        );
        return;
    }
    let pack = super::pack::load_pack(found, dir, &reader);
    let mut stops: Vec<(u64, Stop<'_>)> = Vec::new();
    if let Some(cp) = checkpoint.filter(|cp| cp.seq_next <= total) {
        stops.push((cp.seq_next, Stop::Checkpoint(cp)));
    }
    if let Some(pack) = pack.as_ref().filter(|p| p.seq_next() <= total) {
        stops.push((pack.seq_next(), Stop::Pack(pack)));
    }
    stops.sort_by_key(|(at, _)| *at);
    let mut surface = Surface::new();
    for (len, stop) in stops {
        let prefix = Prefix { log: &reader, len };
        if let Err(error) = surface.catch_up(&prefix, vocabulary) {
            found.error(
                log_dir,
                None,
                "contract §4",
                format!("the fold refuses the log: {error}"),
            );
            return;
        }
        match stop {
            Stop::Checkpoint(cp) => compare(found, path, cp, &surface, &prefix),
            Stop::Pack(pack) => super::pack::compare_pack(found, dir, pack, &surface, &reader),
        }
    }
    if let Err(error) = surface.catch_up(&reader, vocabulary) {
        found.error(
            log_dir,
            None,
            "contract §4",
            format!("the fold refuses the log: {error}"),
        );
    } else if surface.seq_next() != total {
        found.error(
            log_dir,
            None,
            "RCV-6",
            format!("the fold read {} of {total} events", surface.seq_next()),
        );
    }
}

/// CKP-2, CKP-4: the checkpoint's nodes, keys, generation and repair state equal the
/// fold's and the repair scan's after the same events.
fn compare(
    found: &mut Found,
    path: &Path,
    cp: &checkpoint::Fields,
    surface: &Surface,
    prefix: &Prefix<'_>,
) {
    if surface.seq_next() != cp.seq_next {
        found.error(
            path,
            None,
            "RCV-6",
            format!(
                "the fold read {} of {} events",
                surface.seq_next(),
                cp.seq_next
            ),
        );
        return;
    }
    let nodes = surface.nodes();
    if nodes != cp.nodes.as_slice() {
        let i = nodes.iter().zip(&cp.nodes).position(|(a, b)| a != b);
        let i = i.unwrap_or(nodes.len().min(cp.nodes.len()));
        found.error(
            path,
            Some(48 + 8 * i as u64),
            "CKP-2",
            format!(
                "the nodes differ from a fold of the log's first {} events (from node {i}; {} nodes, the fold has {})",
                cp.seq_next,
                cp.nodes.len(),
                nodes.len()
            ),
        );
    }
    if surface.replacement_keys() != cp.keys.as_slice() {
        found.error(
            path,
            None,
            "CKP-2",
            "the replacement keys differ from the fold's",
        );
    }
    if surface.replace_generation() != cp.generation {
        found.error(
            path,
            Some(24),
            "CKP-2",
            format!(
                "replace_generation is {}, the fold's is {}",
                cp.generation,
                surface.replace_generation()
            ),
        );
    }
    compare_repair(found, path, cp, prefix);
}

/// CKP-3: the checkpoint covers no more events than the log holds, and its
/// `last_text_crc` is the CRC of the text of its last event.
fn check_coverage(found: &mut Found, path: &Path, cp: &checkpoint::Fields, log: &LogSummary) {
    if let Some(len) = log.len.filter(|&len| cp.seq_next > len) {
        found.error(
            path,
            Some(16),
            "CKP-3",
            format!(
                "covers {} events, the log holds {len}: events it vouched for are missing",
                cp.seq_next
            ),
        );
    } else if cp.seq_next == 0 && cp.last_text_crc != 0
        || log
            .target_text_crc
            .is_some_and(|crc| crc != cp.last_text_crc)
    {
        found.error(
            path,
            Some(12),
            "CKP-3",
            format!(
                "last_text_crc is not the CRC of event {}'s text",
                cp.seq_next.saturating_sub(1)
            ),
        );
    }
}

/// CKP-8: the segment chain the checkpoint records is a prefix of the log's.
/// CKP-8: a chain recorded for this log directory (its identity equals `log_dir`'s) lists
/// a prefix of the log's segments. A chain recorded for another directory (a fork's child
/// starts with its source's checkpoint, CKP-7; a copied store) is not this log's and is
/// never used for it, so it is not compared.
fn check_chain(
    found: &mut Found,
    path: &Path,
    cp: &checkpoint::Fields,
    log: &LogSummary,
    log_dir: &Path,
) {
    if let Some(chain) = &cp.chain
        && checkpoint::dir_identity(log_dir) == Some(chain.log_dir)
    {
        let recorded = chain.segments.iter().map(|s| (s.first_seq, s.limited));
        let prefix = chain.segments.len() <= log.chain.len()
            && recorded.zip(&log.chain).all(|(a, b)| a == *b);
        if !prefix {
            found.error(
                path,
                None,
                "CKP-8",
                "the recorded segment chain is not the log's",
            );
        }
    }
}

/// CKP-4: the checkpoint's repair state is a repair scan's of the same events.
fn compare_repair(found: &mut Found, path: &Path, cp: &checkpoint::Fields, prefix: &Prefix<'_>) {
    let mut repair = RepairState::default();
    if let Err(error) = repair.observe_from(prefix, 0) {
        found.error(
            path,
            None,
            "RD-7",
            format!("the log cannot be read back: {error}"),
        );
        return;
    }
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    repair.encode(&mut ours);
    cp.repair.encode(&mut theirs);
    if ours != theirs {
        found.error(
            path,
            None,
            "CKP-4",
            "the repair state differs from a scan of the log",
        );
    }
}

/// Whether `bytes` is a checkpoint of an older `version` whose checksums match (CKP-1's
/// version history): version 1 has one CRC over every byte before it; version 2 has
/// `nodes_crc` and a `crc` over the rest, as version 3 without the chain section.
fn older_checkpoint_checks_out(bytes: &[u8], version: u32) -> bool {
    let Some((rest, crc)) = bytes.split_last_chunk::<4>() else {
        return false;
    };
    let crc = u32::from_le_bytes(*crc);
    match version {
        1 => crc32c::crc32c(rest) == crc,
        2 => {
            let nodes_end = u64_at(bytes, 32)
                .and_then(|n| usize::try_from(n).ok())
                .and_then(|n| n.checked_mul(8))
                .and_then(|n| n.checked_add(48));
            let Some((before, nodes_crc)) = rest.split_last_chunk::<4>() else {
                return false;
            };
            let (Some(fixed), Some(nodes), Some(after)) = (
                bytes.get(..48),
                nodes_end.and_then(|end| before.get(48..end)),
                nodes_end.and_then(|end| before.get(end..)),
            ) else {
                return false;
            };
            let expected = crc32c::crc32c_append(
                crc32c::crc32c_append(crc32c::crc32c(fixed), after),
                nodes_crc,
            );
            crc32c::crc32c(nodes) == u32::from_le_bytes(*nodes_crc) && expected == crc
        }
        _ => false,
    }
}
