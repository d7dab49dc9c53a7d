//! The session header (contract §6): immutable, kept outside the log, unknown keys kept.

use crate::error::{ErrorKind, Result};
use crate::json::{Json, Kind, Value, push_js_number, push_js_string};

/// A validated session header. The JSON text is kept as given, so unknown keys survive
/// export unchanged; the known fields are parsed out.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
/// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
/// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
/// # s.close()?;
/// let (session, _) = store.open_session("s")?;
/// let header: &surfacelog::Header = session.header();
/// assert_eq!(header.id(), "s");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    text: String,
    id: String,
    created_at: u64,
    /// Decoded, WTF-8: JSON-5 allows lone surrogates in strings.
    cwd: Option<Vec<u8>>,
    seed_length: Option<u64>,
    /// `parentSession` (contract §7), when it is a string of Unicode scalars.
    parent: Option<String>,
}

/// Whether `-0` is refused (seeds) or read as `0` (import and reopen), contract §2.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NegativeZero {
    /// Refuse with `DATA_NOT_LOSSLESS`.
    Refuse,
    /// Accept and read as `0`.
    Accept,
}

impl Header {
    /// The header of a session created without one: `{version: 0, id, createdAt}`.
    #[doc(hidden)]
    pub fn new(id: &str, created_at: u64) -> Self {
        Self::build(id, created_at, None, None, None)
    }

    /// The header of a fork child (contract §7): `cwd` only when the source has one.
    #[doc(hidden)]
    pub fn for_fork(
        id: &str,
        created_at: u64,
        cwd: Option<&[u8]>,
        parent: &str,
        seed_length: u64,
    ) -> Self {
        Self::build(id, created_at, cwd, Some(parent), Some(seed_length))
    }

    /// Parses and validates a header for session `id` (contract §6).
    ///
    /// # Errors
    /// `DATA_INVALID_JSON`/`DATA_DUPLICATE_KEY` for bad JSON, `DATA_NOT_LOSSLESS` for a
    /// refused `-0`, `FORMAT_VERSION` for a version other than 0, `HEADER_INVALID` for
    /// every other rule.
    #[doc(hidden)]
    pub fn parse(text: &str, id: &str, negative_zero: NegativeZero) -> Result<Self> {
        let json = Json::parse(text)?;
        if let (NegativeZero::Refuse, Some(offset)) = (negative_zero, json.negative_zero()) {
            return Err(ErrorKind::DataNotLossless { offset }.into());
        }
        Self::from_value(json.root(), id)
    }

    /// Validates a parsed header value for session `id`; see [`Header::parse`].
    ///
    /// # Errors
    /// As [`Header::parse`], less the JSON rules.
    #[doc(hidden)]
    pub fn from_value(root: Value<'_, '_>, id: &str) -> Result<Self> {
        if root.kind() != Kind::Object {
            return Err(invalid("header is not an object"));
        }
        let version = root
            .get("version")
            .ok_or_else(|| invalid("version is missing"))?;
        let version_value = version
            .as_f64()
            .ok_or_else(|| invalid("version is not a number"))?;
        if version_value != 0.0 {
            let found = version.raw().to_owned();
            return Err(ErrorKind::FormatVersion {
                found,
                newer: version_value > 0.0,
            }
            .into());
        }
        let header_id = root.get("id").and_then(|v| v.as_str());
        if header_id.as_deref().is_none_or(str::is_empty) {
            return Err(invalid("id is not a non-empty string"));
        }
        if header_id.as_deref() != Some(id) {
            return Err(invalid("id does not equal the session id"));
        }
        let created_at = root.get("createdAt").and_then(|v| v.as_safe_u64());
        let created_at =
            created_at.ok_or_else(|| invalid("createdAt is not a non-negative safe integer"))?;
        let cwd = optional(root, "cwd", |v| {
            v.as_wtf8()
                .filter(|s| s.starts_with(b"/"))
                .map(std::borrow::Cow::into_owned)
        })?;
        optional(root, "parentSession", |v| v.as_wtf8().map(|_| ()))?;
        let parent = root
            .get("parentSession")
            .and_then(|v| v.as_str())
            .map(std::borrow::Cow::into_owned);
        let seed_length = optional(root, "seedLength", |v| v.as_safe_u64())?;
        optional(root, "origin", |v| v.is_str("subagent").then_some(()))?;
        optional(root, "delegationDepth", |v| v.as_safe_u64())?;
        optional(root, "agentPreset", |v| v.as_wtf8().map(|_| ()))?;
        Ok(Self {
            text: root.raw().to_owned(),
            id: id.to_owned(),
            created_at,
            cwd,
            seed_length,
            parent,
        })
    }

    /// The header's JSON text.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// let s = store.create("s", Some(r#"{"version":0,"id":"s","createdAt":1700000000000,"cwd":"/src"}"#), None)?;
    /// assert_eq!(s.header().text(), r#"{"version":0,"id":"s","createdAt":1700000000000,"cwd":"/src"}"#);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The session id.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// let s = store.create("chat-7", None, None)?;
    /// assert_eq!(s.header().id(), "chat-7");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn id(&self) -> &str {
        &self.id
    }

    /// `createdAt`, Unix epoch milliseconds.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// let s = store.create("s", Some(r#"{"version":0,"id":"s","createdAt":1700000000000}"#), None)?;
    /// assert_eq!(s.header().created_at(), 1_700_000_000_000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn created_at(&self) -> u64 {
        self.created_at
    }

    /// `cwd`, when present, decoded as WTF-8 (a lone surrogate is kept as its 3-byte
    /// form; everything else is UTF-8).
    #[doc(hidden)]
    pub fn cwd(&self) -> Option<&[u8]> {
        self.cwd.as_deref()
    }

    /// `parentSession`: the session this one was forked from (contract §7), when present
    /// (and a string of Unicode scalars).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// store.create("s", None, None)?.close()?;
    /// let child = store.fork("s", surfacelog::Boundary::Last, "s-sub")?;
    /// assert_eq!(child.header().parent_session(), Some("s"));
    /// assert_eq!(store.open_session("s")?.0.header().parent_session(), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn parent_session(&self) -> Option<&str> {
        self.parent.as_deref()
    }

    /// `seedLength`, when present.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// let s = store.create("s", None, Some(&[]))?; // an empty seed: only the end-seed marker
    /// assert_eq!(s.header().seed_length(), None); // set by fork (contract §7)
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn seed_length(&self) -> Option<u64> {
        self.seed_length
    }

    fn build(
        id: &str,
        created_at: u64,
        cwd: Option<&[u8]>,
        parent: Option<&str>,
        seed_length: Option<u64>,
    ) -> Self {
        let mut text = String::from("{\"version\":0,\"id\":");
        push_js_string(&mut text, id.as_bytes());
        text.push_str(",\"createdAt\":");
        text.push_str(&created_at.to_string());
        if let Some(cwd) = cwd {
            text.push_str(",\"cwd\":");
            push_js_string(&mut text, cwd);
        }
        if let Some(parent) = parent {
            text.push_str(",\"parentSession\":");
            push_js_string(&mut text, parent.as_bytes());
        }
        if let Some(seed_length) = seed_length {
            text.push_str(",\"seedLength\":");
            #[expect(clippy::cast_precision_loss, reason = "seqs are safe integers")]
            push_js_number(&mut text, seed_length as f64);
        }
        text.push('}');
        Self {
            text,
            id: id.to_owned(),
            created_at,
            cwd: cwd.map(<[u8]>::to_vec),
            seed_length,
            parent: parent.map(str::to_owned),
        }
    }
}

/// An optional known key: absent, or a value that `read` accepts (`null` never is).
fn optional<T>(
    root: Value<'_, '_>,
    key: &str,
    read: impl Fn(Value<'_, '_>) -> Option<T>,
) -> Result<Option<T>> {
    match root.get(key) {
        None => Ok(None),
        Some(value) => read(value)
            .map(Some)
            .ok_or_else(|| invalid(&format!("{key} has the wrong type or value"))),
    }
}

fn invalid(reason: &str) -> crate::Error {
    ErrorKind::HeaderInvalid {
        reason: reason.to_owned(),
    }
    .into()
}
