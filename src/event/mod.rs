//! Events: the stored form, the borrowed view, and the small trait every log implements.
//!
//! An [`Event`] is the exact JSON text of one log entry plus the envelope fields the
//! engine needs without parsing (seq, time, type, surface fields) and the byte spans of
//! `data` and of the derived message inside that text. Everything above this module reads
//! events through [`EventSource`], so the surface and the views work the same over the
//! in-memory log here and the on-disk log, and a derived message is always a slice of
//! stored text.

pub mod chunk;
pub mod envelope;
pub mod header;
mod seqs;
mod shared;
pub mod vocabulary;

pub use seqs::{Seqs, SeqsIter};
pub use shared::{MessageText, SharedBytes};

pub use envelope::{Candidate, Field};
pub use header::Header;
pub use vocabulary::{Origin, Projection, SurfaceType, Vocabulary};

use std::borrow::Cow;
use std::ops::Range;

/// How a surface event entered the surface (contract §2, §4).
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
/// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
/// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
/// # s.close()?;
/// use surfacelog::SurfaceOp;
/// # let (session, _) = store.open_session("s")?;
/// assert_eq!(session.event(1)?.unwrap().surface_op, Some(SurfaceOp::Append));
/// assert_eq!(session.event(0)?.unwrap().surface_op, None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SurfaceOp {
    /// Appended at the tail.
    Append,
    /// Replaced the surface range `start..=end` (by position), both named by seq.
    Replace {
        /// The first shadowed node.
        start: u64,
        /// The last shadowed node.
        end: u64,
    },
}

/// One accepted event as the engine keeps it.
///
/// Invariant: `text` is a valid JSON object whose `data` member is exactly
/// `text[data]`, and `message`, when set, lies inside `data`.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
/// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
/// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
/// # s.close()?;
/// # let mut follower = store.follow("s")?;
/// let event = follower.events(0, std::time::Duration::ZERO).next().unwrap()?;
/// assert_eq!(event.seq(), 0);
/// assert_eq!(event.as_ref().event_type, "turn/start");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    text: Box<str>,
    /// A known type borrows its static name (`EventFields::event_type`).
    type_name: Cow<'static, str>,
    seq: u64,
    time: i64,
    data: Range<u32>,
    message: Option<Range<u32>>,
    surface_op: Option<SurfaceOp>,
    sources: Option<Box<[u64]>>,
    ignorable: bool,
}

/// The parts of an [`Event`] other than its text and spans, as given to [`Event::new`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFields {
    /// The type, decoded. [`type_name`] gives a known type's static name, which costs no
    /// allocation.
    pub event_type: Cow<'static, str>,
    /// The seq.
    pub seq: u64,
    /// The time, Unix epoch milliseconds.
    pub time: i64,
    /// The surface operation, for surface events.
    pub surface_op: Option<SurfaceOp>,
    /// The provenance seqs, when given.
    pub sources: Option<Vec<u64>>,
    /// The `ignorable: true` marker.
    pub ignorable: bool,
}

/// A borrowed view of one event, from any [`EventSource`].
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
/// let event = session.event(1)?.expect("seq 1 exists");
/// assert_eq!(event.event_type, "user/message");
/// assert!(session.event(99)?.is_none()); // past the end: None; damage would be an Err
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct EventRef<'a> {
    /// The event's JSON text: stored as it was appended, or a chunk's fields.
    text: Text<'a>,
    /// The type.
    pub event_type: &'a str,
    /// The seq (index in the log).
    pub seq: u64,
    /// The time, Unix epoch milliseconds.
    pub time: i64,
    /// The surface operation, for surface events.
    pub surface_op: Option<SurfaceOp>,
    /// The provenance seqs, when given.
    pub sources: Option<Seqs<'a>>,
    /// The `ignorable: true` marker.
    pub ignorable: bool,
    data: (u32, u32),
    message: Option<(u32, u32)>,
}

/// Where an [`EventRef`]'s text comes from.
#[derive(Debug, Clone, Copy)]
enum Text<'a> {
    /// The exact text, stored.
    Stored(&'a str),
    /// A chunk record's fields (`format-spec/log-format.md` REC-13 rebuilds the text).
    Chunk(chunk::ChunkRef<'a>),
    /// A compact record's `data` text: REC-18 rebuilds the envelope around it from the
    /// view's fields, with `surfaceOp` and `sourceEventSeqs` in `order`.
    Rebuilt {
        data: &'a str,
        order: crate::record::compact::Order,
    },
}

/// Two views are equal when they show the same event: the same text and fields,
/// whichever way the text is stored.
impl PartialEq for EventRef<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.seq == other.seq
            && self.time == other.time
            && self.event_type == other.event_type
            && self.surface_op == other.surface_op
            && self.sources == other.sources
            && self.ignorable == other.ignorable
            && self.data == other.data
            && self.message == other.message
            && self.text() == other.text()
    }
}

impl Eq for EventRef<'_> {}

/// Read access to a log of events by seq. Implemented by the in-memory log and by the
/// on-disk log.
///
/// Implementations **must** return `Ok(Some(_))` or `Err(_)` for exactly the seqs
/// `0..seq_next()` and `Ok(None)` for every seq past them, and the event at a seq **must**
/// never change once returned (the log is append-only). "Past the end" and "damaged" are
/// different outcomes: a record that cannot be read back is an `Err` naming the file, the
/// offset and the rule (`CORRUPT`, `FORMAT_VERSION`, `IO`), never `None`.
pub trait EventSource {
    /// The number of events, which is also the next seq.
    fn seq_next(&self) -> u64;

    /// The event at `seq`: `Ok(None)` past the end, `Err` when it cannot be read back.
    ///
    /// # Errors
    /// `CORRUPT` (with the file and offset) for a record that does not check out,
    /// `FORMAT_VERSION` for a segment of another version, `IO` when its file cannot be read.
    fn event(&self, seq: u64) -> crate::Result<Option<EventRef<'_>>>;

    /// The event at `seq`, which must exist: past the end is an error too (`CORRUPT`: a
    /// surface node, a cited seq or a checkpoint that names an event the log does not
    /// hold means data is missing).
    ///
    /// # Errors
    /// As [`EventSource::event`], and `CORRUPT` for `seq` ≥ [`EventSource::seq_next`].
    fn event_at(&self, seq: u64) -> crate::Result<EventRef<'_>> {
        self.event(seq)?
            .ok_or_else(|| missing_event(seq, self.seq_next()))
    }

    /// The message of the event at `seq`, which must exist (its record's `message` range,
    /// log-format.md REC-7); `None` when the event has none. What deriving the surface's
    /// messages reads: a stored session takes it from its message pack when it has one
    /// (message-pack.md MSP-4), the same bytes without reading the record.
    ///
    /// # Errors
    /// As [`EventSource::event_at`].
    fn message_at(&self, seq: u64) -> crate::Result<Option<&str>> {
        Ok(self.event_at(seq)?.message())
    }

    /// [`EventSource::message_at`], with a message taken from [`EventSource::message_texts`]
    /// as its span of them, not checked as UTF-8 ([`MessageText::Lent`]). The default reads
    /// every message as [`EventSource::message_at`] does.
    ///
    /// # Errors
    /// As [`EventSource::message_at`].
    fn lent_message_at(&self, seq: u64) -> crate::Result<Option<MessageText<'_>>> {
        Ok(self.message_at(seq)?.map(MessageText::Text))
    }

    /// The bytes [`EventSource::message_at`] takes messages from when they are not the
    /// log's own (a stored session's message pack, MSP-4), shared: read and checked now
    /// when they were not yet. `None` when there are none (the default).
    fn message_texts(&self) -> Option<SharedBytes> {
        None
    }

    /// Called as a read of every message begins ([`crate::surface::each_message`]): a
    /// source whose messages come from bytes it checked once and kept mapped (a message
    /// pack, MSP-1) checks them again when it read them before (MSP-4: a map is not a
    /// copy); bytes this read loads are checked as they load. The default does nothing.
    fn messages_read_begins(&self) {}

    /// A hint that the events at `seqs` (in any order) are about to be read: a source that
    /// reads them from files may ask the OS to load their bytes now, in file order and in
    /// few requests, instead of one page fault per event (log-format.md RD-9). It reads
    /// and returns nothing: every later read checks its record as any read does (REC-4),
    /// and a seq it cannot place is left to that read to report. The default does nothing.
    fn read_ahead(&self, seqs: &[u64]) {
        let _ = seqs;
    }
}

/// `CORRUPT`: the event at `seq` is needed but the log ends at `seq_next`.
pub fn missing_event(seq: u64, seq_next: u64) -> crate::Error {
    crate::error::ErrorKind::Corrupt {
        location: format!("seq {seq}"),
        reason: format!("the event is missing: the log holds {seq_next} events"),
    }
    .into()
}

/// The type name an event keeps: a static string for the types of the DSH vocabulary
/// (`vocabulary::DSH_KNOWN_TYPES`), so the common events allocate nothing for it; an owned
/// copy otherwise.
pub fn type_name(event_type: &str) -> Cow<'static, str> {
    vocabulary::known_type(event_type)
        .map_or_else(|| Cow::Owned(event_type.to_owned()), Cow::Borrowed)
}

impl Event {
    /// Assembles an event from its text, the span of `data` and of the message inside
    /// the text, and its envelope fields.
    ///
    /// # Panics
    /// If a span lies outside the text or the message outside the data: the callers
    /// compute spans from a parse of this very text.
    #[doc(hidden)]
    pub fn new(
        text: String,
        data: Range<usize>,
        message: Option<Range<usize>>,
        fields: EventFields,
    ) -> Self {
        assert!(data.end <= text.len(), "data span outside the event text");
        if let Some(m) = &message {
            assert!(
                data.start <= m.start && m.end <= data.end,
                "message outside data"
            );
        }
        let span = |r: Range<usize>| span32(r.start)..span32(r.end);
        Self {
            text: text.into_boxed_str(),
            type_name: fields.event_type,
            seq: fields.seq,
            time: fields.time,
            data: span(data),
            message: message.map(span),
            surface_op: fields.surface_op,
            sources: fields.sources.map(Vec::into_boxed_slice),
            ignorable: fields.ignorable,
        }
    }

    /// A borrowed view.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// # let mut follower = store.follow("s")?;
    /// # let event = follower.events(0, std::time::Duration::ZERO).next().unwrap()?;
    /// assert_eq!(event.as_ref().data(), r#"{"turn":1}"#);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[doc(hidden)]
    pub fn as_ref(&self) -> EventRef<'_> {
        EventRef {
            text: Text::Stored(&self.text),
            event_type: &self.type_name,
            seq: self.seq,
            time: self.time,
            surface_op: self.surface_op,
            sources: self.sources.as_deref().map(Seqs::from),
            ignorable: self.ignorable,
            data: (self.data.start, self.data.end),
            message: self.message.as_ref().map(|m| (m.start, m.end)),
        }
    }

    /// The seq.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// # let mut follower = store.follow("s")?;
    /// # let event = follower.events(0, std::time::Duration::ZERO).next().unwrap()?;
    /// assert_eq!(event.seq(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The event's exact JSON text.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// # let mut follower = store.follow("s")?;
    /// # let event = follower.events(0, std::time::Duration::ZERO).next().unwrap()?;
    /// assert!(event.text().starts_with('{')); // the stored JSON text, exactly
    /// assert!(event.text().contains(r#""type":"turn/start""#));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl<'a> EventRef<'a> {
    /// A view of an event whose bytes live elsewhere (the on-disk log): `data` and
    /// `message` are spans within `text`.
    ///
    /// # Panics
    /// If a span lies outside the text: the log validates spans before building views.
    #[doc(hidden)]
    pub fn from_parts(
        text: &'a str,
        event_type: &'a str,
        fields: (u64, i64, Option<SurfaceOp>, Option<Seqs<'a>>, bool),
        data: Range<usize>,
        message: Option<Range<usize>>,
    ) -> Self {
        let (seq, time, surface_op, sources, ignorable) = fields;
        assert!(data.end <= text.len(), "data span outside the event text");
        let span = |r: Range<usize>| (span32(r.start), span32(r.end));
        Self {
            text: Text::Stored(text),
            event_type,
            seq,
            time,
            surface_op,
            sources,
            ignorable,
            data: span(data),
            message: message.map(span),
        }
    }

    /// An owned copy, which outlives the log it was read from.
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
    /// let owned = session.event(0)?.unwrap().to_event(); // outlives the session
    /// drop(session);
    /// assert_eq!(owned.seq(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[doc(hidden)]
    pub fn to_event(&self) -> Event {
        Event::new(
            self.text().into_owned(),
            self.data_span(),
            self.message_span(),
            EventFields {
                event_type: type_name(self.event_type),
                seq: self.seq,
                time: self.time,
                surface_op: self.surface_op,
                sources: self.sources.map(|s| s.to_vec()),
                ignorable: self.ignorable,
            },
        )
    }

    /// The exact JSON text of `data`.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// # let (session, _) = store.open_session("s")?;
    /// let event = session.event(0)?.unwrap();
    /// assert_eq!(event.data(), r#"{"turn":1}"#);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn data(&self) -> Cow<'a, str> {
        if let Text::Rebuilt { data, .. } = self.text {
            return Cow::Borrowed(data);
        }
        match self.text() {
            Cow::Borrowed(text) => Cow::Borrowed(&text[self.data_span()]),
            Cow::Owned(text) => Cow::Owned(text[self.data_span()].to_owned()),
        }
    }

    /// The event's exact JSON text: borrowed from the log when it is stored as text,
    /// rebuilt when it is stored as a chunk record (`format-spec/log-format.md` REC-13).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// # let (session, _) = store.open_session("s")?;
    /// let event = session.event(0)?.unwrap();
    /// assert!(event.text().starts_with(r#"{"type":"turn/start","seq":0,"#));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn text(&self) -> Cow<'a, str> {
        match self.text {
            Text::Stored(text) => Cow::Borrowed(text),
            Text::Chunk(chunk) => Cow::Owned(chunk.text(self.seq, self.time)),
            Text::Rebuilt { .. } => {
                let mut out = String::with_capacity(self.text_len());
                self.write_text(&mut out);
                Cow::Owned(out)
            }
        }
    }

    /// The text's length in bytes, without rebuilding it.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// # let (session, _) = store.open_session("s")?;
    /// let event = session.event(0)?.unwrap();
    /// assert_eq!(event.text_len(), event.text().len());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn text_len(&self) -> usize {
        match self.text {
            Text::Stored(text) => text.len(),
            Text::Chunk(chunk) => chunk.text_len(self.seq, self.time),
            // A view is made only of a text whose length fits (`from_compact`).
            Text::Rebuilt { data, order } => {
                usize::try_from(crate::record::compact::rebuilt_text_len(self, data, order))
                    .unwrap_or(usize::MAX)
            }
        }
    }

    /// Appends the event's exact JSON text to `out` (no allocation of its own).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// # let (session, _) = store.open_session("s")?;
    /// let mut out = String::new();
    /// session.event(0)?.unwrap().write_text(&mut out);
    /// assert!(out.ends_with(r#""data":{"turn":1}}"#));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write_text(&self, out: &mut String) {
        match self.text {
            Text::Stored(text) => out.push_str(text),
            Text::Chunk(chunk) => chunk.write_text(self.seq, self.time, out),
            Text::Rebuilt { data, order } => {
                crate::record::compact::write_rebuilt_text(self, data, order, out);
            }
        }
    }

    /// The text as stored, when it is stored whole (neither a chunk record nor a compact
    /// record that rebuilds its envelope).
    #[doc(hidden)]
    pub fn stored_text(&self) -> Option<&'a str> {
        match self.text {
            Text::Stored(text) => Some(text),
            Text::Chunk(_) | Text::Rebuilt { .. } => None,
        }
    }

    /// The chunk fields, when the event is stored as a chunk record.
    #[doc(hidden)]
    pub fn chunk(&self) -> Option<chunk::ChunkRef<'a>> {
        match self.text {
            Text::Stored(_) | Text::Rebuilt { .. } => None,
            Text::Chunk(chunk) => Some(chunk),
        }
    }

    /// The `data` text and the order of `surfaceOp` and `sourceEventSeqs`, when the event
    /// is held as a compact record that rebuilds its envelope (log-format.md REC-18).
    #[doc(hidden)]
    pub fn rebuilt(&self) -> Option<(&'a str, crate::record::compact::Order)> {
        match self.text {
            Text::Rebuilt { data, order } => Some((data, order)),
            Text::Stored(_) | Text::Chunk(_) => None,
        }
    }

    /// A view of an event of a compact record (log-format.md §4.2): its text borrowed when
    /// the record holds it whole (kind 2), its envelope rebuilt from the fields around the
    /// borrowed `data` otherwise (kind 1, REC-18). `None` when the text would be 4 GiB or
    /// longer (a reader refuses texts past `max_event_bytes` first).
    #[doc(hidden)]
    pub fn from_compact(event: &crate::record::compact::CompactEvent<'a>) -> Option<Self> {
        use crate::record::compact::EventText;
        if event.text_len() >= u64::from(u32::MAX) {
            return None;
        }
        let data = event.data_span();
        let message = event
            .message_in_data()
            .map(|m| (span32(data.start + m.start), span32(data.start + m.end)));
        Some(Self {
            text: match event.text_form() {
                EventText::Verbatim { text, .. } => Text::Stored(text),
                EventText::Rebuilt { data, order } => Text::Rebuilt { data, order },
            },
            event_type: event.event_type(),
            seq: event.seq(),
            time: event.time(),
            surface_op: event.surface_op(),
            sources: event.sources().map(|s| s.to_seqs()),
            ignorable: event.ignorable(),
            data: (span32(data.start), span32(data.end)),
            message,
        })
    }

    /// A view of a chunk event stored as a chunk record (`format-spec/log-format.md`
    /// §4.1): an `assistant/chunk`, log-only, with no message.
    #[doc(hidden)]
    pub fn from_chunk(seq: u64, time: i64, chunk: chunk::ChunkRef<'a>) -> Self {
        let data = chunk.data_span(seq, time);
        Self {
            text: Text::Chunk(chunk),
            event_type: chunk::CHUNK_TYPE,
            seq,
            time,
            surface_op: None,
            sources: None,
            ignorable: false,
            data: (span32(data.start), span32(data.end)),
            message: None,
        }
    }

    /// The exact JSON text of the message this event projects to, if any.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
    /// # s.close()?;
    /// # let (session, _) = store.open_session("s")?;
    /// let user = session.event(1)?.unwrap();
    /// assert!(user.message().unwrap().contains(r#""role":"user""#));
    /// assert_eq!(session.event(0)?.unwrap().message(), None); // turn/start is no message
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn message(&self) -> Option<&'a str> {
        let (start, end) = self.message?;
        match self.text {
            Text::Stored(text) => Some(&text[start as usize..end as usize]),
            // REC-11: a chunk record holds a log-only event, which has no message.
            Text::Chunk(_) => None,
            // The message lies in `data` (REC-20), which starts at `self.data.0`.
            Text::Rebuilt { data, .. } => {
                let from = self.data.0;
                data.get((start - from) as usize..(end - from) as usize)
            }
        }
    }

    /// The byte span of `data` within [`EventRef::text`].
    #[doc(hidden)]
    pub fn data_span(&self) -> Range<usize> {
        self.data.0 as usize..self.data.1 as usize
    }

    /// The byte span of the message within [`EventRef::text`].
    #[doc(hidden)]
    pub fn message_span(&self) -> Option<Range<usize>> {
        self.message
            .map(|(start, end)| start as usize..end as usize)
    }
}

impl<S: EventSource + ?Sized> EventSource for &S {
    fn seq_next(&self) -> u64 {
        (**self).seq_next()
    }

    fn event(&self, seq: u64) -> crate::Result<Option<EventRef<'_>>> {
        (**self).event(seq)
    }

    fn message_at(&self, seq: u64) -> crate::Result<Option<&str>> {
        (**self).message_at(seq)
    }

    fn lent_message_at(&self, seq: u64) -> crate::Result<Option<MessageText<'_>>> {
        (**self).lent_message_at(seq)
    }

    fn message_texts(&self) -> Option<SharedBytes> {
        (**self).message_texts()
    }

    fn messages_read_begins(&self) {
        (**self).messages_read_begins();
    }

    fn read_ahead(&self, seqs: &[u64]) {
        (**self).read_ahead(seqs);
    }
}

/// A log followed by events kept in memory: a batch being admitted, or the repair
/// closers of a read-only inspection.
#[derive(Debug)]
pub struct Overlay<S> {
    /// The log.
    pub base: S,
    /// The events after it, in order.
    pub events: Vec<Event>,
}

impl<S: EventSource> EventSource for Overlay<S> {
    fn seq_next(&self) -> u64 {
        self.base.seq_next() + self.events.len() as u64
    }

    fn event(&self, seq: u64) -> crate::Result<Option<EventRef<'_>>> {
        match seq.checked_sub(self.base.seq_next()) {
            None => self.base.event(seq),
            Some(index) => Ok(usize::try_from(index)
                .ok()
                .and_then(|index| self.events.get(index))
                .map(Event::as_ref)),
        }
    }

    /// The events kept in memory need no reading ahead; the base skips seqs past its end.
    fn read_ahead(&self, seqs: &[u64]) {
        self.base.read_ahead(seqs);
    }
}

/// The in-memory log: a vector of events. The on-disk log offers the same trait.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemLog {
    events: Vec<Event>,
}

impl MemLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends an event.
    ///
    /// # Panics
    /// If `event.seq()` is not the next seq: the session checks contiguity first, so a
    /// mismatch here is a bug that would corrupt the log.
    pub fn push(&mut self, event: Event) {
        let seq_next = self.seq_next();
        assert!(
            event.seq == seq_next,
            "append out of order: seq={} seq_next={seq_next}",
            event.seq
        );
        self.events.push(event);
    }

    /// The events in log order.
    pub fn events(&self) -> &[Event] {
        &self.events
    }
}

impl EventSource for MemLog {
    fn seq_next(&self) -> u64 {
        self.events.len() as u64
    }

    fn event(&self, seq: u64) -> crate::Result<Option<EventRef<'_>>> {
        Ok(usize::try_from(seq)
            .ok()
            .and_then(|index| self.events.get(index))
            .map(Event::as_ref))
    }
}

fn span32(offset: usize) -> u32 {
    u32::try_from(offset).expect("event texts are bounded by max_event_bytes < 4 GiB")
}
