//! The full check of a store (`format-spec/store.md` STORE-16): every byte of every file
//! a session's state depends on, read once, in order, without a lock and without changing
//! anything. What opening checks lazily (a sealed segment on first access, a vouched
//! prefix when read, the checkpoint's nodes on first read) is checked here up front.
//!
//! Reads are plain positional reads (no map, so a file truncated meanwhile is an error,
//! never a `SIGBUS`), a record at a time: memory holds the largest record, one segment's
//! offsets, the checkpoint's nodes and the fold's surface, never a whole log.
#![deny(clippy::indexing_slicing)]

use std::collections::BTreeSet;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::checkpoint::{self, CHECKPOINT_FILE, CHECKPOINT_MAGIC, CHECKPOINT_VERSION};
use super::{Store, escape_id};
use crate::error::{Error, ErrorKind, Result};
use crate::event::header::NegativeZero;
use crate::event::{EventSource, Header, Vocabulary};
use crate::json::Json;
use crate::log::LogReader;
use crate::log::limit::{LIMIT_LEN, LIMIT_MAGIC, LIMIT_VERSION};
use crate::log::segment::{
    HeaderError, LogId, SEGMENT_HEADER_LEN, SegmentHeader, parse_first_seq, segment_name,
    seq_file_path,
};
use crate::record::{BODY_FIXED_LEN, FRAME_HEADER_LEN, RecordError, frame_len, u32_at, u64_at};
use crate::session::Prefix;
use crate::session::repair::RepairState;
use crate::storage::FsStorage;
use crate::surface::Surface;

/// How serious a [`Problem`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Damage, loss or a file that breaks its format: the session is not ok.
    Error,
    /// Something the format does not allow but that changes no data (a stray file in a
    /// log directory, a checkpoint of an older version that open ignores).
    Warning,
}

/// One thing found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file (or directory) it is in.
    pub file: PathBuf,
    /// The byte offset in `file`, when one is meaningful.
    pub offset: Option<u64>,
    /// The rule broken, as the specs name it (`SEG-2`, `IDX-1`, `CKP-3`, …).
    pub rule: &'static str,
    /// What is wrong, in words.
    pub message: String,
    /// Whether it makes the session not ok.
    pub severity: Severity,
}

/// What the check of one session found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionReport {
    /// The session's id: the one asked for, or else the one its `header.json` names, or
    /// else (no readable header) its directory's name.
    pub id: String,
    /// Every problem found, in the order found.
    pub problems: Vec<Problem>,
}

impl SessionReport {
    /// Whether no problem of [`Severity::Error`] was found.
    pub fn ok(&self) -> bool {
        self.problems
            .iter()
            .all(|p| p.severity == Severity::Warning)
    }
}

/// What [`verify`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// The store's directory; files are shown relative to it.
    pub dir: PathBuf,
    /// Problems of the store itself (its `STORE` identity file, its layout).
    pub store: Vec<Problem>,
    /// One report per session checked, in directory-name order (or in the order asked).
    pub sessions: Vec<SessionReport>,
}

impl VerifyReport {
    /// Whether no problem of [`Severity::Error`] was found anywhere.
    pub fn ok(&self) -> bool {
        self.store.iter().all(|p| p.severity == Severity::Warning)
            && self.sessions.iter().all(SessionReport::ok)
    }

    /// Every problem, as `(session id, problem)`; store problems have no id.
    pub fn problems(&self) -> impl Iterator<Item = (Option<&str>, &Problem)> {
        self.store.iter().map(|p| (None, p)).chain(
            self.sessions
                .iter()
                .flat_map(|s| s.problems.iter().map(|p| (Some(s.id.as_str()), p))),
        )
    }

    /// `file` relative to the store's directory, for display.
    pub fn relative<'a>(&self, file: &'a Path) -> &'a Path {
        file.strip_prefix(&self.dir).unwrap_or(file)
    }

    /// The report as human-readable lines: `<id>: <file> offset=<n> [RULE] message` per
    /// problem (`warning: ` before the message of a warning; `store` for the store's own
    /// problems), and `<id>: ok` for a session without errors.
    pub fn lines(&self) -> Vec<String> {
        let line = |who: &str, p: &Problem| {
            let offset = p.offset.map(|o| format!(" offset={o}")).unwrap_or_default();
            let warning = if p.severity == Severity::Warning {
                "warning: "
            } else {
                ""
            };
            format!(
                "{who}: {}{offset} [{}] {warning}{}",
                self.relative(&p.file).display(),
                p.rule,
                p.message
            )
        };
        let mut lines: Vec<String> = self.store.iter().map(|p| line("store", p)).collect();
        for session in &self.sessions {
            lines.extend(session.problems.iter().map(|p| line(&session.id, p)));
            if session.ok() {
                lines.push(format!("{}: ok", session.id));
            }
        }
        lines
    }

    /// The report as one JSON document: `{"store":[problem…],"sessions":[{"id","ok",
    /// "problems":[problem…]}],"ok"}`, each problem `{"file","offset","rule","severity",
    /// "message"}` (`offset` null when not meaningful, `file` relative to the store).
    pub fn to_json(&self) -> String {
        let push_str = |out: &mut String, s: &str| crate::json::push_js_string(out, s.as_bytes());
        let push_problems = |out: &mut String, problems: &[Problem]| {
            out.push('[');
            for (i, p) in problems.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str("{\"file\":");
                push_str(out, &self.relative(&p.file).to_string_lossy());
                out.push_str(",\"offset\":");
                match p.offset {
                    Some(offset) => out.push_str(&offset.to_string()),
                    None => out.push_str("null"),
                }
                out.push_str(",\"rule\":");
                push_str(out, p.rule);
                out.push_str(",\"severity\":");
                push_str(
                    out,
                    match p.severity {
                        Severity::Error => "error",
                        Severity::Warning => "warning",
                    },
                );
                out.push_str(",\"message\":");
                push_str(out, &p.message);
                out.push('}');
            }
            out.push(']');
        };
        let mut out = String::from("{\"store\":");
        push_problems(&mut out, &self.store);
        out.push_str(",\"sessions\":[");
        for (i, session) in self.sessions.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str("{\"id\":");
            push_str(&mut out, &session.id);
            out.push_str(if session.ok() {
                ",\"ok\":true"
            } else {
                ",\"ok\":false"
            });
            out.push_str(",\"problems\":");
            push_problems(&mut out, &session.problems);
            out.push('}');
        }
        out.push_str("],\"ok\":");
        out.push_str(if self.ok() { "true" } else { "false" });
        out.push('}');
        out
    }
}

impl Store {
    /// The full check of this store's sessions (all of them, or the ones `ids` names):
    /// see [`verify`].
    ///
    /// # Errors
    /// As [`verify`].
    pub fn verify(&self, ids: Option<&[&str]>) -> Result<VerifyReport> {
        verify(&self.dir, &self.options.session.vocabulary, ids)
    }
}

/// The full check of the store in `dir` (`store.md` STORE-16), folding surfaces with
/// `vocabulary`: every session, or the ones `ids` names. Read-only: it takes no lock,
/// creates nothing (not even the store: a directory that does not exist is an error) and
/// changes no file. Every problem is reported with its file, offset and rule, and the
/// check goes on past it wherever the rest can still be checked.
///
/// A session whose writer is appending meanwhile may show its last segment's tail as
/// damaged (a record being written): verify a session that is not open for writing.
///
/// # Errors
/// `IO` when `dir` does not exist or a file cannot be read; `SESSION_NOT_FOUND` for an id
/// of `ids` that the store does not hold.
pub fn verify(dir: &Path, vocabulary: &Vocabulary, ids: Option<&[&str]>) -> Result<VerifyReport> {
    let metadata = std::fs::metadata(dir).map_err(|e| Error::io("stat", dir, &e))?;
    if !metadata.is_dir() {
        let error = std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory");
        return Err(Error::io("open", dir, &error));
    }
    let mut store = Found::default();
    check_identity_file(&mut store, dir);
    let sessions_dir = dir.join("sessions");
    let mut sessions = Vec::new();
    if let Some(ids) = ids {
        for &id in ids {
            let session_dir = sessions_dir.join(escape_id(id));
            if std::fs::symlink_metadata(&session_dir).is_err() {
                return Err(ErrorKind::SessionNotFound { id: id.to_owned() }.into());
            }
            sessions.push(check_session(&session_dir, Some(id), vocabulary)?);
        }
    } else {
        {
            let names = match std::fs::read_dir(&sessions_dir) {
                Ok(entries) => {
                    let mut names = Vec::new();
                    for entry in entries {
                        let entry = entry.map_err(|e| Error::io("list", &sessions_dir, &e))?;
                        names.push(entry.file_name());
                    }
                    names.sort();
                    names
                }
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                    store.error(&sessions_dir, None, "STORE-16", "no sessions/ directory");
                    Vec::new()
                }
                Err(error) => return Err(Error::io("list", &sessions_dir, &error)),
            };
            for name in names {
                let path = sessions_dir.join(&name);
                if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
                    store.warning(&path, None, "STORE-16", "a file in sessions/");
                    continue;
                }
                sessions.push(check_session(&path, None, vocabulary)?);
            }
        }
    }
    Ok(VerifyReport {
        dir: dir.to_owned(),
        store: store.problems,
        sessions,
    })
}

/// Problems as they are found.
#[derive(Debug, Default)]
struct Found {
    problems: Vec<Problem>,
}

impl Found {
    fn push(
        &mut self,
        severity: Severity,
        file: &Path,
        offset: Option<u64>,
        rule: &'static str,
        message: impl Into<String>,
    ) {
        self.problems.push(Problem {
            file: file.to_owned(),
            offset,
            rule,
            message: message.into(),
            severity,
        });
    }

    fn error(
        &mut self,
        file: &Path,
        offset: Option<u64>,
        rule: &'static str,
        message: impl Into<String>,
    ) {
        self.push(Severity::Error, file, offset, rule, message);
    }

    fn warning(
        &mut self,
        file: &Path,
        offset: Option<u64>,
        rule: &'static str,
        message: impl Into<String>,
    ) {
        self.push(Severity::Warning, file, offset, rule, message);
    }
}

/// STORE-2: the identity file.
fn check_identity_file(found: &mut Found, dir: &Path) {
    let path = dir.join("STORE");
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            if let Err(error) = super::check_identity(&path, &text) {
                found.error(&path, None, "STORE-2", error.to_string());
            }
        }
        Err(error) => found.error(
            &path,
            None,
            "STORE-2",
            format!("the store identity file cannot be read: {error}"),
        ),
    }
}

/// One session: its header, its log, its checkpoint against a fold of the log.
fn check_session(
    dir: &Path,
    asked: Option<&str>,
    vocabulary: &Vocabulary,
) -> Result<SessionReport> {
    let mut found = Found::default();
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    for path in [dir.to_owned(), dir.join("header.json"), dir.join("log")] {
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
            found.error(&path, None, "STORE-1", "a symbolic link inside the store");
        }
    }
    let named = check_header(&mut found, dir, &name, asked)?;
    let log_dir = dir.join("log");
    let checkpoint_path = dir.join(CHECKPOINT_FILE);
    let checkpoint = read_checkpoint(&mut found, &checkpoint_path)?;
    let target = checkpoint.as_ref().and_then(|c| c.seq_next.checked_sub(1));
    let log = check_log(&mut found, &log_dir, target)?;
    check_checkpoint(
        &mut found,
        &checkpoint_path,
        checkpoint.as_ref(),
        &log,
        &log_dir,
        vocabulary,
    );
    let id = asked.map(str::to_owned).or(named).unwrap_or(name);
    Ok(SessionReport {
        id,
        problems: found.problems,
    })
}

/// STORE-3, STORE-4, contract §6: `header.json` is a valid header, then one 0A, and names
/// the id its directory is the escape of. Returns that id.
fn check_header(
    found: &mut Found,
    dir: &Path,
    name: &str,
    asked: Option<&str>,
) -> Result<Option<String>> {
    let path = dir.join("header.json");
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            found.error(&path, None, "STORE-16", "the session has no header.json");
            return Ok(None);
        }
        Err(error) => return Err(Error::io("read", &path, &error)),
    };
    let Ok(text) = std::str::from_utf8(&bytes) else {
        found.error(&path, None, "STORE-16", "header.json is not UTF-8");
        return Ok(None);
    };
    let Some(body) = text.strip_suffix('\n').filter(|b| !b.ends_with('\n')) else {
        found.error(
            &path,
            Some(bytes.len() as u64),
            "STORE-16",
            "header.json does not end with exactly one line feed",
        );
        return Ok(None);
    };
    let id = match Json::parse(body) {
        Ok(json) => json
            .root()
            .get("id")
            .and_then(|v| v.as_str())
            .map(std::borrow::Cow::into_owned),
        Err(error) => {
            found.error(
                &path,
                Some(error.offset as u64),
                "contract §6",
                Error::from(error).to_string(),
            );
            return Ok(None);
        }
    };
    let Some(id) = id else {
        found.error(&path, None, "contract §6", "the header has no string id");
        return Ok(None);
    };
    if let Err(error) = Header::parse(body, &id, NegativeZero::Accept) {
        found.error(&path, None, "contract §6", error.to_string());
    }
    let escaped = escape_id(&id);
    if escaped != name {
        let rule = if escaped.contains('~') {
            "STORE-4"
        } else {
            "STORE-3"
        };
        found.error(
            &path,
            None,
            rule,
            format!(
                "header.json names session {id:?}, whose directory is {escaped:?}, not {name:?}"
            ),
        );
    } else if let Some(asked) = asked.filter(|&a| a != id) {
        // STORE-4: a shortened name shared by two ids holds the other one.
        return Err(ErrorKind::SessionNotFound {
            id: asked.to_owned(),
        }
        .into());
    }
    Ok(Some(id))
}

/// What the scan of a log found, for the checkpoint's check.
#[derive(Debug, Default)]
struct LogSummary {
    /// The number of records the log holds, when its segments could be followed to the
    /// end (`None` when a broken frame hides where a segment ends).
    len: Option<u64>,
    /// CRC-32C of the text of the record at the seq asked for (the checkpoint's last).
    target_text_crc: Option<u32>,
    /// The segments, in order: `first_seq` and whether a limit file limits it.
    chain: Vec<(u64, bool)>,
    /// Whether the log had no error at all (the fold is only done then).
    clean: bool,
}

/// A limit file's fields once its format checks out (LIM-2).
#[derive(Debug, Clone, Copy)]
struct LimitFields {
    seq_next: u64,
    last_offset: u32,
    end: u32,
}

/// An index file's fields once its format checks out (IDX-1, IDX-2, IDX-4).
#[derive(Debug)]
struct IndexFields {
    header_len: u64,
    offsets: Vec<u32>,
    end: u64,
    data_crc: Option<u32>,
}

/// What the scan of one segment's records found.
#[derive(Debug, Default)]
struct Records {
    offsets: Vec<u32>,
    /// Just past the last record scanned.
    end: u64,
    /// Whether the scan reached the end of the segment's records (an end marker, the
    /// limit, the file's end or the count the chain gives) without losing the frames.
    complete: bool,
    /// Whether any record failed.
    damaged: bool,
    /// CRC-32C of bytes 64..`index.end` when the scan passed a record boundary there.
    crc_at_index_end: Option<u32>,
}

/// Reads `buf.len()` bytes of `file` at `at`.
fn read_at(file: &File, path: &Path, buf: &mut [u8], at: u64) -> Result<()> {
    file.read_exact_at(buf, at)
        .map_err(|e| Error::io("read", path, &e))
}

/// The log directory: names (LOG-1), chain (LOG-2), every segment (SEG-1 to SEG-7), every
/// record (REC-1 to REC-8, seq order), every index (IDX-1 to IDX-4), every limit (LIM-2,
/// LIM-3, LIM-5). `target` is a seq whose text CRC the checkpoint's check needs.
fn check_log(found: &mut Found, log_dir: &Path, target: Option<u64>) -> Result<LogSummary> {
    let errors_before = found.problems.len();
    let mut summary = LogSummary::default();
    let Some(Listing {
        segments,
        indexes,
        limits,
    }) = list_log(found, log_dir)?
    else {
        return Ok(summary);
    };
    let segments: Vec<u64> = segments.into_iter().collect();
    for &first in indexes.difference(&segments.iter().copied().collect()) {
        found.error(
            &seq_file_path(log_dir, first, ".idx"),
            None,
            "LOG-1",
            "an index of no segment: the segment is missing",
        );
    }
    for &first in limits.difference(&segments.iter().copied().collect()) {
        found.error(
            &seq_file_path(log_dir, first, ".lim"),
            None,
            "LIM-5",
            "a limit of no segment of the log: the segment is missing",
        );
    }
    if segments.first() != Some(&0) {
        found.error(
            &log_dir.join(segment_name(0)),
            None,
            "LOG-2",
            "the log has no segment 0",
        );
    }
    let mut log_id: Option<LogId> = None;
    // The seq the next segment must start at, when the previous one could be followed.
    let mut expected: Option<u64> = Some(0);
    for (position, &first) in segments.iter().enumerate() {
        let next = segments.get(position + 1).copied();
        let path = seq_file_path(log_dir, first, ".seg");
        match expected {
            Some(seq) if seq < first => found.error(
                &seq_file_path(log_dir, seq, ".seg"),
                None,
                "LOG-2",
                format!(
                    "missing: no segment holds seqs {seq}..{first} (the one before ends at {seq}, the next starts at {first})"
                ),
            ),
            Some(seq) if seq > first => found.error(
                &path,
                None,
                "SEG-3",
                format!("starts at seq {first}, but the segment before holds records up to seq {}", seq - 1),
            ),
            _ => {}
        }
        let limited = limits.contains(&first);
        summary.chain.push((first, limited));
        let segment = check_segment(
            found,
            &SegmentPlace {
                log_dir,
                path: &path,
                position: position as u64,
                first,
                next,
                limited,
                indexed: indexes.contains(&first),
                target,
            },
            &mut log_id,
            &mut summary.target_text_crc,
        )?;
        expected = segment;
    }
    summary.len = if segments.is_empty() { None } else { expected };
    summary.clean = !found
        .problems
        .iter()
        .skip(errors_before)
        .any(|p| p.severity == Severity::Error);
    Ok(summary)
}

/// The names of a log directory's segments, indexes and limits, by `first_seq`.
struct Listing {
    segments: BTreeSet<u64>,
    indexes: BTreeSet<u64>,
    limits: BTreeSet<u64>,
}

/// LOG-1: lists the log directory; a name LOG-1 does not allow is a warning. `None`
/// (reported) when there is no log directory.
fn list_log(found: &mut Found, log_dir: &Path) -> Result<Option<Listing>> {
    let entries = match std::fs::read_dir(log_dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            found.error(log_dir, None, "LOG-3", "the session has no log directory");
            return Ok(None);
        }
        Err(error) => return Err(Error::io("list", log_dir, &error)),
    };
    let mut listing = Listing {
        segments: BTreeSet::new(),
        indexes: BTreeSet::new(),
        limits: BTreeSet::new(),
    };
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("list", log_dir, &e))?;
        let path = entry.path();
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        let name = entry.file_name();
        let name = name.to_str().unwrap_or_default();
        let parsed = [
            (".seg", &mut listing.segments),
            (".idx", &mut listing.indexes),
            (".lim", &mut listing.limits),
        ]
        .into_iter()
        .find_map(|(suffix, set)| {
            let first = parse_first_seq(name.strip_suffix(suffix)?)?;
            Some((first, set))
        });
        let temporary = Path::new(name).extension().is_some_and(|e| e == "tmp");
        match parsed {
            Some((first, set)) if is_file => {
                set.insert(first);
            }
            Some(_) => found.error(&path, None, "LOG-1", "not a regular file"),
            None if name == "LOCK" || temporary => {}
            None => found.warning(
                &path,
                None,
                "LOG-1",
                "a file LOG-1 does not allow in a log directory",
            ),
        }
    }
    Ok(Some(listing))
}

/// Where a segment is in its log.
struct SegmentPlace<'a> {
    log_dir: &'a Path,
    path: &'a Path,
    position: u64,
    first: u64,
    /// The next segment's `first_seq`, when there is one.
    next: Option<u64>,
    limited: bool,
    indexed: bool,
    target: Option<u64>,
}

/// One segment with its limit and index. Returns the seq after its last record when its
/// records could be followed to their end.
fn check_segment(
    found: &mut Found,
    place: &SegmentPlace<'_>,
    log_id: &mut Option<LogId>,
    target_crc: &mut Option<u32>,
) -> Result<Option<u64>> {
    let path = place.path;
    let file = File::open(path).map_err(|e| Error::io("open", path, &e))?;
    let file_len = file
        .metadata()
        .map_err(|e| Error::io("stat", path, &e))?
        .len();
    let header = check_segment_header(found, place, &file, file_len, log_id)?;
    let limit = if place.limited {
        check_limit(found, place, header.as_ref())?
    } else {
        None
    };
    let index = if place.indexed {
        check_index(found, place, header.as_ref(), file_len)?
    } else {
        None
    };
    let data_end = header.map_or(file_len, |h| h.capacity.min(file_len));
    // LIM-1, LIM-4: a limited segment's records end at the limit; past it the bytes are
    // another log's. With a limit that does not check out, the next segment's first seq
    // bounds them (LIM-5).
    let (stop, count, zero_tail) = match (place.limited, limit) {
        (true, Some(limit)) => (
            u64::from(limit.end).min(data_end),
            Some(limit.seq_next - place.first),
            false,
        ),
        (true, None) => (
            data_end,
            place.next.map(|n| n.saturating_sub(place.first)),
            false,
        ),
        (false, _) => (data_end, None, true),
    };
    let scan = Scan {
        file: &file,
        path,
        first: place.first,
        stop,
        count,
        index_end: index.as_ref().map(|i| i.end),
        target: place.target,
    };
    let records = scan.run(found, target_crc)?;
    if records.complete && zero_tail {
        check_zero_tail(found, &file, path, records.end, file_len)?;
    }
    if let Some(limit) = limit {
        check_limit_records(found, &limit_path(place), limit, place.first, &records);
    }
    if let Some(index) = index {
        let holds_all = place.next.is_some() || place.limited;
        check_index_records(found, place, &index, &records, holds_all);
    }
    let held = records.offsets.len() as u64;
    Ok(records.complete.then_some(place.first + held))
}

fn limit_path(place: &SegmentPlace<'_>) -> PathBuf {
    seq_file_path(place.log_dir, place.first, ".lim")
}

/// SEG-1 to SEG-3, SEG-6, SEG-7: the header, and its place in the log.
fn check_segment_header(
    found: &mut Found,
    place: &SegmentPlace<'_>,
    file: &File,
    file_len: u64,
    log_id: &mut Option<LogId>,
) -> Result<Option<SegmentHeader>> {
    let path = place.path;
    if file_len < SEGMENT_HEADER_LEN as u64 {
        found.error(
            path,
            Some(0),
            "SEG-2",
            format!("{file_len} bytes: shorter than its header"),
        );
        return Ok(None);
    }
    let mut bytes = [0; SEGMENT_HEADER_LEN];
    read_at(file, path, &mut bytes, 0)?;
    let header = match SegmentHeader::decode(&bytes) {
        Ok(header) => header,
        Err(HeaderError::Invalid(reason)) => {
            found.error(path, Some(0), "SEG-2", reason);
            return Ok(None);
        }
        Err(HeaderError::Version(unsupported)) => {
            let error = crate::log::segment::version_error(unsupported);
            found.error(path, Some(8), "VER-1", error.to_string());
            return Ok(None);
        }
    };
    match log_id {
        None => *log_id = Some(header.log_id),
        Some(id) if *id != header.log_id => {
            found.error(
                path,
                Some(16),
                "SEG-3",
                "log_id differs from the log's (segment 0's)",
            );
        }
        Some(_) => {}
    }
    if header.index != place.position {
        found.error(
            path,
            Some(32),
            "SEG-3",
            format!(
                "segment_index is {}, its position among the segments is {}",
                header.index, place.position
            ),
        );
    }
    if header.first_seq != place.first {
        found.error(
            path,
            Some(40),
            "SEG-3",
            format!(
                "first_seq is {}, its name says {}",
                header.first_seq, place.first
            ),
        );
    }
    if header.capacity > u64::from(u32::MAX) || header.capacity < SEGMENT_HEADER_LEN as u64 {
        found.error(
            path,
            Some(48),
            "SEG-7",
            format!("capacity {}", header.capacity),
        );
    }
    if header.capacity != file_len {
        found.error(
            path,
            Some(file_len.min(header.capacity)),
            "SEG-6",
            format!(
                "the file is {file_len} bytes long, its capacity is {}: truncated or extended",
                header.capacity
            ),
        );
    }
    Ok(Some(header))
}

/// LIM-2, LIM-3 (but for the record at `last_offset`, checked after the scan): the
/// fields of a limit file whose format checks out.
fn check_limit(
    found: &mut Found,
    place: &SegmentPlace<'_>,
    header: Option<&SegmentHeader>,
) -> Result<Option<LimitFields>> {
    let path = limit_path(place);
    let len = std::fs::metadata(&path)
        .map_err(|e| Error::io("stat", &path, &e))?
        .len();
    if len != LIMIT_LEN as u64 {
        found.error(
            &path,
            None,
            "LIM-2",
            format!("{len} bytes, not {LIMIT_LEN}"),
        );
        return Ok(None);
    }
    let bytes = std::fs::read(&path).map_err(|e| Error::io("read", &path, &e))?;
    let field32 = |at| u32_at(&bytes, at).unwrap_or_default();
    let field64 = |at| u64_at(&bytes, at).unwrap_or_default();
    if bytes.get(..8) != Some(&LIMIT_MAGIC[..]) {
        found.error(&path, Some(0), "LIM-2", "wrong magic");
        return Ok(None);
    }
    if crc32c::crc32c(bytes.get(..60).unwrap_or_default()) != field32(60) {
        found.error(&path, Some(60), "LIM-2", "crc mismatch");
        return Ok(None);
    }
    // LIM-7: compatible feature bits (bytes 12..14) are ignored; no incompatible one
    // (bytes 14..16) is known to this build.
    let incompat = field32(12) >> 16;
    if field32(8) != LIMIT_VERSION || incompat != 0 || field32(56) != 0 {
        found.error(
            &path,
            Some(8),
            "LIM-2",
            "another limit_version, unknown incompat features, or a reserved field not 0",
        );
        return Ok(None);
    }
    let limit = LimitFields {
        seq_next: field64(40),
        last_offset: field32(48),
        end: field32(52),
    };
    let mut ok = true;
    if let Some(header) = header {
        if bytes.get(16..32) != Some(&header.log_id[..]) {
            found.error(
                &path,
                Some(16),
                "LIM-3",
                "log_id differs from its segment's",
            );
            ok = false;
        }
        if u64::from(limit.end) > header.capacity {
            found.error(
                &path,
                Some(52),
                "LIM-2",
                "end is past the segment's capacity",
            );
            ok = false;
        }
    }
    if field64(32) != place.first {
        found.error(
            &path,
            Some(32),
            "LIM-3",
            "first_seq differs from its segment's",
        );
        ok = false;
    }
    if limit.seq_next <= place.first {
        found.error(
            &path,
            Some(40),
            "LIM-2",
            "seq_next is not greater than first_seq",
        );
        ok = false;
    }
    if (limit.last_offset as usize) < SEGMENT_HEADER_LEN || limit.last_offset >= limit.end {
        found.error(
            &path,
            Some(48),
            "LIM-2",
            "last_offset and end do not frame a record",
        );
        ok = false;
    }
    if let Some(next) = place.next.filter(|&n| n != limit.seq_next) {
        found.error(
            &path,
            Some(40),
            "LIM-5",
            format!(
                "seq_next is {}, the next segment starts at {next}",
                limit.seq_next
            ),
        );
    }
    Ok(ok.then_some(limit))
}

/// LIM-3: the record at `last_offset` is the limited segment's last for this log, with
/// seq `seq_next − 1`, ending at `end`.
fn check_limit_records(
    found: &mut Found,
    path: &Path,
    limit: LimitFields,
    first: u64,
    records: &Records,
) {
    let count = limit.seq_next - first;
    let last = usize::try_from(count - 1)
        .ok()
        .and_then(|i| records.offsets.get(i));
    if records.complete && records.offsets.len() as u64 != count {
        found.error(
            path,
            Some(40),
            "LIM-3",
            format!(
                "the limit says {count} records, the segment holds {} before its end",
                records.offsets.len()
            ),
        );
    } else if last.is_some_and(|&at| at != limit.last_offset) {
        found.error(
            path,
            Some(48),
            "LIM-3",
            format!(
                "last_offset {} is not the offset of record {}",
                limit.last_offset,
                limit.seq_next - 1
            ),
        );
    } else if records.complete && !records.damaged && records.end != u64::from(limit.end) {
        found.error(
            path,
            Some(52),
            "LIM-3",
            "end is not where its last record ends",
        );
    }
}

/// IDX-1, IDX-2, IDX-4: an index file's format, checksum and identity.
fn check_index(
    found: &mut Found,
    place: &SegmentPlace<'_>,
    header: Option<&SegmentHeader>,
    segment_len: u64,
) -> Result<Option<IndexFields>> {
    let path = seq_file_path(place.log_dir, place.first, ".idx");
    let len = std::fs::metadata(&path)
        .map_err(|e| Error::io("stat", &path, &e))?
        .len();
    // No index lists more records than its segment can hold: one per 72 bytes.
    let most = 56 + 4 * (segment_len / 72 + 1);
    if len > most {
        found.error(
            &path,
            None,
            "IDX-1",
            format!("{len} bytes: more offsets than the segment can hold"),
        );
        return Ok(None);
    }
    let bytes = std::fs::read(&path).map_err(|e| Error::io("read", &path, &e))?;
    let field32 = |at| u32_at(&bytes, at);
    if bytes.get(..8) != Some(&b"surfidx\0"[..]) {
        found.error(&path, Some(0), "IDX-1", "wrong magic");
        return Ok(None);
    }
    // IDX-4: version 1 has no data_crc and a shorter header; version 2 is current.
    let (header_len, crc_at, data_crc) = match field32(8) {
        Some(1) => (48_usize, 44, None),
        Some(2) => {
            if field32(48) != Some(0) {
                found.error(&path, Some(48), "IDX-1", "reserved field not 0");
                return Ok(None);
            }
            (56, 52, field32(44))
        }
        version => {
            found.error(
                &path,
                Some(8),
                "IDX-4",
                format!("index_version {}", version.unwrap_or(0)),
            );
            return Ok(None);
        }
    };
    let count = field32(12).unwrap_or_default() as usize;
    if Some(bytes.len()) != count.checked_mul(4).and_then(|n| n.checked_add(header_len)) {
        found.error(
            &path,
            Some(12),
            "IDX-1",
            format!("{} bytes, not a header and {count} offsets", bytes.len()),
        );
        return Ok(None);
    }
    let crc = crc32c::crc32c_append(
        crc32c::crc32c(bytes.get(..crc_at).unwrap_or_default()),
        bytes.get(header_len..).unwrap_or_default(),
    );
    if Some(crc) != field32(crc_at) {
        found.error(&path, Some(crc_at as u64), "IDX-2", "crc mismatch");
        return Ok(None);
    }
    if header.is_some_and(|h| bytes.get(16..32) != Some(&h.log_id[..])) {
        found.error(
            &path,
            Some(16),
            "IDX-2",
            "log_id differs from its segment's",
        );
        return Ok(None);
    }
    if u64_at(&bytes, 32) != Some(place.first) {
        found.error(
            &path,
            Some(32),
            "IDX-2",
            "first_seq differs from its segment's",
        );
        return Ok(None);
    }
    let (words, _) = bytes.get(header_len..).unwrap_or_default().as_chunks::<4>();
    Ok(Some(IndexFields {
        header_len: header_len as u64,
        offsets: words.iter().map(|w| u32::from_le_bytes(*w)).collect(),
        end: u64::from(field32(40).unwrap_or_default()),
        data_crc,
    }))
}

/// IDX-1, IDX-2, IDX-3: the index lists the records the scan found, at their offsets,
/// ends where they end, and its `data_crc` is the CRC of those bytes.
fn check_index_records(
    found: &mut Found,
    place: &SegmentPlace<'_>,
    index: &IndexFields,
    records: &Records,
    holds_all: bool,
) {
    let path = seq_file_path(place.log_dir, place.first, ".idx");
    let (listed, held) = (index.offsets.len(), records.offsets.len());
    if records.complete && (listed > held || holds_all && listed != held) {
        found.error(
            &path,
            Some(12),
            if holds_all { "IDX-3" } else { "IDX-2" },
            format!("lists {listed} records, the segment holds {held}"),
        );
    }
    let mismatch = index
        .offsets
        .iter()
        .zip(&records.offsets)
        .position(|(a, b)| a != b);
    if let Some(i) = mismatch {
        let (at, listed_at) = (
            records.offsets.get(i).copied().unwrap_or_default(),
            index.offsets.get(i).copied().unwrap_or_default(),
        );
        found.error(
            &path,
            Some(index.header_len + 4 * i as u64),
            "IDX-2",
            format!(
                "lists record {} at offset {listed_at}, the segment has it at {at}",
                place.first + i as u64
            ),
        );
        return;
    }
    let end = match listed.checked_sub(1) {
        None => Some(SEGMENT_HEADER_LEN as u64),
        Some(_) if listed < held => records.offsets.get(listed).map(|&o| u64::from(o)),
        Some(_) if listed == held && records.complete => Some(records.end),
        Some(_) => None,
    };
    if end.is_some_and(|end| end != index.end) {
        found.error(
            &path,
            Some(40),
            "IDX-1",
            "end is not where its last record ends",
        );
    } else if let (Some(expected), false) = (index.data_crc, records.damaged)
        && records.crc_at_index_end.is_some_and(|crc| crc != expected)
    {
        found.error(
            &path,
            Some(44),
            "IDX-1",
            "data_crc does not match the segment's bytes 64..end",
        );
    }
}

/// A scan of one segment's records.
struct Scan<'a> {
    file: &'a File,
    path: &'a Path,
    first: u64,
    /// The offset this log's records end before.
    stop: u64,
    /// How many records this log has in the segment, when known (a limit, LIM-1).
    count: Option<u64>,
    /// Where the index says its records end (its `data_crc` covers 64..there).
    index_end: Option<u64>,
    target: Option<u64>,
}

impl Scan<'_> {
    /// REC-1 to REC-8 and seq order over the segment's records, one record in memory at a
    /// time. A bad record whose length frames it is passed over so that the rest of the
    /// segment is checked; a second bad record in a row, or a length that frames nothing,
    /// ends the scan of the segment.
    fn run(&self, found: &mut Found, target_crc: &mut Option<u32>) -> Result<Records> {
        let mut records = Records {
            end: SEGMENT_HEADER_LEN as u64,
            ..Records::default()
        };
        let (mut pos, mut seq, mut crc) = (SEGMENT_HEADER_LEN as u64, self.first, 0_u32);
        let mut buf = Vec::new();
        let mut bad_in_a_row = 0;
        loop {
            if self.index_end == Some(pos) {
                records.crc_at_index_end = Some(crc);
            }
            if self
                .count
                .is_some_and(|c| records.offsets.len() as u64 >= c)
                || pos + FRAME_HEADER_LEN as u64 > self.stop
            {
                records.complete = true;
                break;
            }
            let mut frame_header = [0; FRAME_HEADER_LEN];
            read_at(self.file, self.path, &mut frame_header, pos)?;
            let len = u32_at(&frame_header, 0).unwrap_or_default();
            if len == 0 {
                records.complete = true;
                break;
            }
            let frame = frame_len(len as usize) as u64;
            if (len as usize) < BODY_FIXED_LEN || pos + frame > self.stop {
                found.error(
                    self.path,
                    Some(pos),
                    "REC-1",
                    format!("a length of {len} frames no record before the end of the segment's records; the rest of the segment is not checked"),
                );
                records.damaged = true;
                break;
            }
            buf.resize(usize::try_from(frame).unwrap_or(usize::MAX), 0);
            read_at(self.file, self.path, &mut buf, pos)?;
            match crate::record::decode(&buf) {
                Ok((event, _)) => {
                    bad_in_a_row = 0;
                    if event.seq == seq {
                        if self.target == Some(seq) {
                            *target_crc = Some(crc32c::crc32c(event.text.as_bytes()));
                        }
                    } else {
                        found.error(
                            self.path,
                            Some(pos),
                            "RCV-5",
                            format!("a record with seq {} where seq {seq} is next", event.seq),
                        );
                        records.damaged = true;
                    }
                }
                Err(error) => {
                    let (rule, message) = match error {
                        RecordError::Checksum => ("REC-2", "record checksum mismatch".to_owned()),
                        RecordError::Body(reason) => ("RCV-8", format!("record body: {reason}")),
                        RecordError::End | RecordError::Truncated | RecordError::Length => {
                            ("REC-1", "record length".to_owned())
                        }
                    };
                    found.error(self.path, Some(pos), rule, format!("seq {seq}: {message}"));
                    records.damaged = true;
                    bad_in_a_row += 1;
                    if bad_in_a_row > 1 {
                        found.error(
                            self.path,
                            Some(pos),
                            "REC-4",
                            "two bad records in a row: the rest of the segment is not checked",
                        );
                        break;
                    }
                }
            }
            crc = crc32c::crc32c_append(crc, &buf);
            records.offsets.push(u32::try_from(pos).unwrap_or(u32::MAX));
            pos += frame;
            seq += 1;
            records.end = pos;
        }
        Ok(records)
    }
}

/// SEG-5: the bytes after the last record are zero up to the end of the file.
fn check_zero_tail(found: &mut Found, file: &File, path: &Path, from: u64, len: u64) -> Result<()> {
    let mut buf = vec![0; 64 << 10];
    let mut at = from;
    while at < len {
        let n = usize::try_from((len - at).min(buf.len() as u64)).unwrap_or(buf.len());
        let chunk = buf.get_mut(..n).unwrap_or_default();
        read_at(file, path, chunk, at)?;
        if let Some(i) = chunk.iter().position(|b| *b != 0) {
            found.error(
                path,
                Some(at + i as u64),
                "SEG-5",
                format!("a non-zero byte after the last record (which ends at {from}): damage, or a torn tail no writer has recovered"),
            );
            return Ok(());
        }
        at += n as u64;
    }
    Ok(())
}

/// The checkpoint's fields (CKP-1, the `nodes_crc` of CKP-2, CKP-4, CKP-8), or `None`
/// when there is none or it does not check out (reported).
fn read_checkpoint(found: &mut Found, path: &Path) -> Result<Option<checkpoint::Fields>> {
    let bytes = match std::fs::read(path) {
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

/// CKP-2, CKP-3, CKP-4, CKP-8 and contract §4: the checkpoint against the log and a
/// fresh fold of it; the fold of the whole log (only when the log checked out).
fn check_checkpoint(
    found: &mut Found,
    path: &Path,
    checkpoint: Option<&checkpoint::Fields>,
    log: &LogSummary,
    log_dir: &Path,
    vocabulary: &Vocabulary,
) {
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
        if let Some(chain) = &cp.chain {
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
    if log.clean {
        fold(found, path, checkpoint, log, log_dir, vocabulary);
    }
}

/// The fold of the whole log, compared with the checkpoint at its `seq_next`.
fn fold(
    found: &mut Found,
    path: &Path,
    checkpoint: Option<&checkpoint::Fields>,
    log: &LogSummary,
    log_dir: &Path,
    vocabulary: &Vocabulary,
) {
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
    let mut surface = Surface::new();
    if let Some(cp) = checkpoint.filter(|cp| cp.seq_next <= total) {
        let prefix = Prefix {
            log: &reader,
            len: cp.seq_next,
        };
        if let Err(error) = surface.catch_up(&prefix, vocabulary) {
            found.error(
                log_dir,
                None,
                "contract §4",
                format!("the fold refuses the log: {error}"),
            );
            return;
        }
        compare(found, path, cp, &surface, &prefix);
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
