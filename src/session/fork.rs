//! Fork (contract §7) and a small in-memory store that owns sessions by id.

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::{Options, Session, now_created_at};
use crate::error::{ErrorKind, Result};
use crate::event::{EventSource, Header};
use crate::json::Json;

/// Where a fork cuts the source log: an inclusive seq, or its last event.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
/// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
/// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
/// # s.close()?;
/// use surfacelog::Boundary;
/// let child = store.fork("s", Boundary::Seq(2), "s-child")?; // events 0..=2, turn 1
/// assert_eq!(store.fork("s", Boundary::Seq(1), "x").unwrap_err().code(), "OPEN_TURN");
/// assert_eq!(child.header().id(), "s-child");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boundary {
    /// The source's last event (an empty seed when the source has none).
    Last,
    /// This seq, inclusive.
    Seq(u64),
}

impl Boundary {
    /// Reads a boundary given as JSON (contract §7 step 3): a non-negative safe integer.
    /// `null` is a given boundary, and invalid, never "no boundary".
    ///
    /// ```
    /// use surfacelog::Boundary;
    ///
    /// assert_eq!(Boundary::from_json("7")?, Boundary::Seq(7));
    /// assert_eq!(Boundary::from_json("null").unwrap_err().code(), "INVALID_BOUNDARY");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `INVALID_BOUNDARY` for anything else.
    pub fn from_json(text: &str) -> Result<Self> {
        let json = Json::parse(text).ok();
        let seq = json.as_ref().and_then(|j| j.root().as_safe_u64());
        seq.map(Self::Seq).ok_or_else(|| {
            ErrorKind::InvalidBoundary {
                boundary: crate::error::excerpt(text.trim()),
            }
            .into()
        })
    }
}

impl Session {
    /// Forks this session into a new session `child_id` holding events `0..=boundary`
    /// through the seed path, with the header of contract §7. The source is unchanged.
    /// The copies keep a `-0` the source's reopen accepted, as the on-disk fork does.
    /// Does not check whether `child_id` exists: [`MemStore::fork`] does.
    ///
    /// # Errors
    /// `INVALID_BOUNDARY`, `OPEN_TURN`, or a seed refusal of the child.
    #[doc(hidden)]
    pub fn fork(&self, boundary: Boundary, child_id: &str) -> Result<Session> {
        let len = fork_len(boundary, self.seq_next())?;
        if let Some(turn_start) = open_turn_at(&self.log, len)? {
            return Err(ErrorKind::OpenTurn {
                boundary: len - 1,
                turn_start,
            }
            .into());
        }
        let now = now_created_at(&*self.options.clock);
        let header = Header::for_fork(child_id, now, self.header.cwd(), self.id(), len);
        let seed: Vec<Cow<'_, str>> = (0..len)
            .map(|seq| self.log.event_at(seq).map(|e| e.text()))
            .collect::<Result<_>>()?;
        let seed: Vec<&str> = seed.iter().map(AsRef::as_ref).collect();
        Session::create_seeded(
            child_id,
            Some(header.text()),
            Some(&seed),
            self.options.clone(),
            super::admit::Lossless::Inherited,
        )
    }
}

/// The number of events a fork copies (contract §7 step 3).
///
/// # Errors
/// `INVALID_BOUNDARY` for a seq past the end.
pub(crate) fn fork_len(boundary: Boundary, seq_next: u64) -> Result<u64> {
    match boundary {
        Boundary::Last => Ok(seq_next),
        Boundary::Seq(seq) if seq < seq_next => Ok(seq + 1),
        Boundary::Seq(seq) => Err(ErrorKind::InvalidBoundary {
            boundary: seq.to_string(),
        }
        .into()),
    }
}

/// The seq of the `turn/start` the first `len` events leave open, if any: the last
/// `turn/start` or `turn/end` among them is a `turn/start` (contract §7 step 4).
///
/// # Errors
/// The error reading an event (`CORRUPT` with the file and offset).
pub(crate) fn open_turn_at(source: &impl EventSource, len: u64) -> Result<Option<u64>> {
    for seq in (0..len).rev() {
        match source.event_at(seq)?.event_type {
            "turn/start" => return Ok(Some(seq)),
            "turn/end" => return Ok(None),
            _ => {}
        }
    }
    Ok(None)
}

/// Sessions held in memory, by id.
#[derive(Debug, Default)]
pub struct MemStore {
    sessions: BTreeMap<String, Session>,
    options: Options,
}

impl MemStore {
    /// An empty store whose sessions use `options`.
    pub fn new(options: Options) -> Self {
        Self {
            sessions: BTreeMap::new(),
            options,
        }
    }

    /// Creates a session (see [`Session::create`]).
    ///
    /// # Errors
    /// `SESSION_EXISTS`, or the creation's refusal.
    pub fn create(
        &mut self,
        id: &str,
        header: Option<&str>,
        seed: Option<&[&str]>,
    ) -> Result<&mut Session> {
        if self.sessions.contains_key(id) {
            return Err(ErrorKind::SessionExists { id: id.to_owned() }.into());
        }
        let session = Session::create(id, header, seed, self.options.clone())?;
        Ok(self.sessions.entry(id.to_owned()).or_insert(session))
    }

    /// The session `id`.
    pub fn get(&self, id: &str) -> Option<&Session> {
        self.sessions.get(id)
    }

    /// The session `id`, mutably.
    pub fn get_mut(&mut self, id: &str) -> Option<&mut Session> {
        self.sessions.get_mut(id)
    }

    /// The ids, in order.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.sessions.keys().map(String::as_str)
    }

    /// Forks `source` into `child` (contract §7), checking in order: `SESSION_EXISTS`,
    /// `SESSION_NOT_FOUND`, `INVALID_BOUNDARY`, `OPEN_TURN`.
    ///
    /// # Errors
    /// The first failed check; the store is unchanged.
    pub fn fork(&mut self, source: &str, boundary: Boundary, child: &str) -> Result<&Session> {
        if self.sessions.contains_key(child) {
            return Err(ErrorKind::SessionExists {
                id: child.to_owned(),
            }
            .into());
        }
        let parent = self.sessions.get(source);
        let parent = parent.ok_or_else(|| ErrorKind::SessionNotFound {
            id: source.to_owned(),
        })?;
        let session = parent
            .fork(boundary, child)
            .map_err(|e| e.in_session(source))?;
        Ok(self.sessions.entry(child.to_owned()).or_insert(session))
    }
}
