//! What the full check found ([`VerifyReport`]: problems with their file, offset, rule and
//! severity, per session and for the store), and its text and JSON forms (STORE-16).

use std::path::{Path, PathBuf};

/// How serious a [`Problem`] is.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
/// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
/// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
/// # s.close()?;
/// use surfacelog::Severity;
/// let report = store.verify(None)?;
/// assert!(report.problems().all(|(_, p)| p.severity != Severity::Error));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Damage, loss or a file that breaks its format: the session is not ok.
    Error,
    /// Something the format does not allow but that changes no data (a stray file in a
    /// log directory, a checkpoint of an older version that open ignores).
    Warning,
}

/// One thing found wrong.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
/// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
/// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
/// # s.close()?;
/// for (session, problem) in store.verify(None)?.problems() {
///     eprintln!("{session:?} {} at {:?}: {} ({})", problem.file.display(), problem.offset, problem.message, problem.rule);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
/// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
/// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
/// # s.close()?;
/// let report = store.verify(Some(&["s"]))?;
/// assert_eq!(report.sessions[0].id, "s");
/// assert!(report.sessions[0].ok());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// assert!(store.verify(None)?.sessions.iter().all(|s| s.ok()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ok(&self) -> bool {
        self.problems
            .iter()
            .all(|p| p.severity == Severity::Warning)
    }
}

/// What [`verify`](super::verify) found.
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
/// assert!(report.ok());
/// assert_eq!(report.sessions.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// assert!(store.verify(None)?.ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ok(&self) -> bool {
        self.store.iter().all(|p| p.severity == Severity::Warning)
            && self.sessions.iter().all(SessionReport::ok)
    }

    /// Every problem, as `(session id, problem)`; store problems have no id.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// assert_eq!(store.verify(None)?.problems().count(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn problems(&self) -> impl Iterator<Item = (Option<&str>, &Problem)> {
        self.store.iter().map(|p| (None, p)).chain(
            self.sessions
                .iter()
                .flat_map(|s| s.problems.iter().map(|p| (Some(s.id.as_str()), p))),
        )
    }

    /// `file` relative to the store's directory, for display.
    #[doc(hidden)]
    pub fn relative<'a>(&self, file: &'a Path) -> &'a Path {
        file.strip_prefix(&self.dir).unwrap_or(file)
    }

    /// The report as human-readable lines: `<id>: <file> offset=<n> [RULE] message` per
    /// problem (`warning: ` before the message of a warning; `store` for the store's own
    /// problems), and `<id>: ok` for a session without errors.
    #[doc(hidden)]
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
}
