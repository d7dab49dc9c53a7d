//! The full check of a store (`format-spec/store.md` STORE-16): every byte of every file
//! a session's state depends on, read once, in order, without a lock and without changing
//! anything. What opening checks lazily (a sealed segment on first access, a vouched
//! prefix when read, the checkpoint's nodes on first read) is checked here up front.
//!
//! Reads are plain positional reads (no map, so a file truncated meanwhile is an error,
//! never a `SIGBUS`), a record at a time: memory holds the largest record, one segment's
//! offsets, the checkpoint's nodes and the fold's surface, never a whole log.
//!
//! One file per layer, in the order a session is checked: `layout` (the store's and a
//! session's files and names, STORE-*), `log` (the log directory and its chain, LOG-*),
//! `segment` (SEG-*), `records` (REC-*), `limit` (LIM-*), `index` (IDX-*) and
//! `checkpoint` (CKP-*, against a fresh fold); `report` holds what is found and prints it.
#![deny(clippy::indexing_slicing)]

mod checkpoint;
mod index;
mod layout;
mod limit;
mod log;
mod pack;
mod records;
mod report;
mod segment;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

pub use report::{Problem, SessionReport, Severity, VerifyReport};

use super::Store;
use super::checkpoint::CHECKPOINT_FILE;
use crate::error::{Error, Result};
use crate::event::Vocabulary;

impl Store {
    /// The full check of this store's sessions (all of them, or the ones `ids` names):
    /// see [`verify`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// let report = store.verify(None)?;
    /// assert!(report.ok(), "{:?}", report.lines());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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
    layout::check_identity_file(&mut store, dir);
    let sessions_dir = dir.join("sessions");
    let mut sessions = Vec::new();
    if let Some(ids) = ids {
        for &id in ids {
            let session_dir = layout::asked_session_dir(&sessions_dir, id)?;
            sessions.push(check_session(&session_dir, Some(id), vocabulary)?);
        }
    } else {
        for session_dir in layout::session_dirs(&mut store, &sessions_dir)? {
            sessions.push(check_session(&session_dir, None, vocabulary)?);
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

    /// Makes the problems found after the first `before` warnings: damage of a file that
    /// is only a cache and may be torn by a crash (an index, IDX-2).
    fn downgrade_since(&mut self, before: usize) {
        for problem in self.problems.iter_mut().skip(before) {
            problem.severity = Severity::Warning;
            problem.message.push_str(
                " (an index is a cache written without a sync: a crash may leave it torn; \
                 readers then scan the segment instead, IDX-2)",
            );
        }
    }

    /// Whether a problem of [`Severity::Error`] was found after the first `before`.
    fn errors_since(&self, before: usize) -> bool {
        self.problems
            .iter()
            .skip(before)
            .any(|p| p.severity == Severity::Error)
    }
}

/// One session: its header, its log, its checkpoint and its message pack against a fold
/// of the log.
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
    layout::check_no_symlinks(&mut found, dir);
    let named = layout::check_header(&mut found, dir, &name, asked)?;
    layout::check_originals(&mut found, dir)?;
    let log_dir = dir.join("log");
    let checkpoint_path = dir.join(CHECKPOINT_FILE);
    let checkpoint = checkpoint::read_checkpoint(&mut found, &checkpoint_path)?;
    let target = checkpoint.as_ref().and_then(|c| c.seq_next.checked_sub(1));
    let log = log::check_log(&mut found, &log_dir, target)?;
    checkpoint::check_checkpoint(
        &mut found,
        &checkpoint_path,
        checkpoint.as_ref(),
        &log,
        dir,
        vocabulary,
    );
    let id = asked.map(str::to_owned).or(named).unwrap_or(name);
    Ok(SessionReport {
        id,
        problems: found.problems,
    })
}

/// Reads `buf.len()` bytes of `file` at `at`.
fn read_at(file: &File, path: &Path, buf: &mut [u8], at: u64) -> Result<()> {
    file.read_exact_at(buf, at)
        .map_err(|e| Error::io("read", path, &e))
}
