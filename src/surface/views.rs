//! The views every session offers (contract §4): messages and transcript.
//!
//! Both borrow from the event source: a message is a slice of stored JSON text.

use super::Surface;
use crate::Result;
use crate::event::{EventSource, MessageText, SharedBytes, SurfaceOp};

/// One derived message: the JSON text of the message object, tagged with its seq.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::TurnStart>(r#"{"turn":1}"#, surfacelog::NoSurface)?;
/// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[{"type":"text","text":"hi"}]}"#, surfacelog::SurfaceIntent::append())?;
/// # s.append::<surfacelog::kinds::TurnEnd>(r#"{"turn":1,"reason":{"kind":"completed"}}"#, surfacelog::NoSurface)?;
/// # s.close()?;
/// let (s, _) = store.open_session("s")?;
/// let message = s.messages()?[0];
/// assert_eq!(message.seq, 1);
/// assert!(message.json.starts_with(r#"{"id":"u1","role":"user""#));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// The surface node the message comes from.
    pub seq: u64,
    /// The message object, exactly as stored.
    pub json: &'a str,
}

#[cfg(feature = "serde")]
impl<'a> Message<'a> {
    /// Parses the message's exact stored JSON text into `T` with `serde_json` (feature
    /// `serde`): what a host does to build its next model request from typed messages.
    /// `T` may borrow from the stored text (`&'a str` fields), or own its data.
    ///
    /// ```
    /// use serde::Deserialize;
    /// use surfacelog::{kinds, Session, SurfaceIntent, StoreOptions};
    ///
    /// #[derive(Deserialize)]
    /// struct Msg<'a> { role: &'a str }
    ///
    /// let mut session = Session::in_memory("s", &StoreOptions::new())?;
    /// let data = r#"{"id":"u","role":"user","source":{"kind":"user"},"content":[]}"#;
    /// session.append::<kinds::UserMessage>(data, SurfaceIntent::append())?;
    /// let messages = session.messages()?;
    /// assert_eq!(messages[0].parse::<Msg<'_>>().unwrap().role, "user");
    /// # Ok::<(), surfacelog::Error>(())
    /// ```
    ///
    /// # Errors
    /// `serde_json`'s error, with its line and column, when the message does not fit `T`.
    /// The text itself was verified when it was read: this is only the host's type.
    pub fn parse<T: serde::Deserialize<'a>>(&self) -> std::result::Result<T, serde_json::Error> {
        serde_json::from_str(self.json)
    }
}

/// The messages of the surface, in surface order, skipping nodes that produce none.
/// Cost: one event lookup per node; no JSON is parsed or copied.
///
/// # Errors
/// `CORRUPT` (with the file and offset) when a node's event cannot be read back, or is
/// missing from `source`: a message is never silently left out.
pub fn messages<'a>(surface: &Surface, source: &'a impl EventSource) -> Result<Vec<Message<'a>>> {
    let mut out = Vec::with_capacity(surface.nodes().len());
    each_message(surface, source, |message| out.push(message))?;
    Ok(out)
}

/// Calls `visit` with each message of the surface, in surface order, as it is read: a
/// caller that copies the messages (a binding to another language) copies each while its
/// record was just read, before the reader releases the pages of a segment it has read
/// through (log-format.md RD-4). [`messages`] is this, collected.
///
/// # Errors
/// As [`messages`]; the messages before the failing one have been visited.
pub fn each_message<'a>(
    surface: &Surface,
    source: &'a impl EventSource,
    mut visit: impl FnMut(Message<'a>),
) -> Result<()> {
    read_begins(surface, source)?;
    for window in windows(surface.nodes(), source) {
        for &seq in window {
            if let Some(json) = source.message_at(seq).map_err(|e| e.at_seq(seq))? {
                visit(Message { seq, json });
            }
        }
    }
    Ok(())
}

/// How many nodes a read of every message hands its source to read ahead at a time
/// (log-format.md RD-9), and how many such windows it keeps asked for ahead of the one
/// it reads: enough for the OS to read the records in large requests while the reads
/// check the records already loaded, few enough that what it loads is read soon and its
/// requests do not queue behind each other. Measured on the 1M-event workload of
/// `benches/footprint.rs` without its pack (57,596 messages, about 3 MB of log per window,
/// medians of open + all messages with the page cache dropped, modes interleaved in one
/// process): none 141-145 ms, 1 window ahead 123-125 ms, 2 117 ms, 4 114-119 ms, 8 123 ms,
/// all 57 at once 140 ms; warm, 4 windows cost about 1 ms more than none (36 ms).
const READ_AHEAD_NODES: usize = 1024;
/// See [`READ_AHEAD_NODES`].
const READ_AHEAD_WINDOWS: usize = 4;

/// `nodes` in windows of [`READ_AHEAD_NODES`], in surface order; `source` is told to read
/// ahead (RD-9) the first [`READ_AHEAD_WINDOWS`] at once, then, as each window is handed
/// out, the next one not yet told. Only a hint: each read still checks its record
/// (REC-4) and reports damage (RD-7), and the messages are visited in surface order
/// whatever the order of their records in the files (a replace puts later seqs before
/// earlier ones; the source reads each window's records ahead in file order).
fn windows<'n>(
    nodes: &'n [u64],
    source: &'n impl EventSource,
) -> impl Iterator<Item = &'n [u64]> + 'n {
    let mut ahead = nodes.chunks(READ_AHEAD_NODES);
    for window in ahead.by_ref().take(READ_AHEAD_WINDOWS) {
        source.read_ahead(window);
    }
    nodes.chunks(READ_AHEAD_NODES).inspect(move |_| {
        if let Some(next) = ahead.next() {
            source.read_ahead(next);
        }
    })
}

/// What a read of every message does first. CKP-2: nodes read in place from a map are
/// checked again (a map is not a copy), and nodes that were lost are an error, never a
/// surface without messages; MSP-4: the source's message pack is checked again.
fn read_begins(surface: &Surface, source: &impl EventSource) -> Result<()> {
    surface.check_again();
    surface.check_not_lost()?;
    source.messages_read_begins();
    Ok(())
}

/// [`each_message`] for a caller that lends the texts of `source`'s message pack rather
/// than taking them as strings (a binding that makes each text a string of its own
/// language when it is first used, checking it then): `visit` gets each message's seq and
/// its text, as a span of `source.message_texts()` for a message in it
/// ([`MessageText::Lent`]), or read from the log. Returns those bytes when a span was
/// lent: taken as the read began, so they are the bytes it checked (MSP-4).
///
/// # Errors
/// As [`each_message`].
pub fn each_lent_message<'a>(
    surface: &Surface,
    source: &'a impl EventSource,
    mut visit: impl FnMut(u64, MessageText<'a>),
) -> Result<Option<SharedBytes>> {
    read_begins(surface, source)?;
    // None: no pack to lend from (or none usable), so every text comes from the log.
    let texts = source.message_texts();
    let mut lent = false;
    for window in windows(surface.nodes(), source) {
        for &seq in window {
            let text = if texts.is_some() {
                source.lent_message_at(seq)
            } else {
                source.message_at(seq).map(|m| m.map(MessageText::Text))
            };
            if let Some(text) = text.map_err(|e| e.at_seq(seq))? {
                lent |= matches!(text, MessageText::Lent(_));
                visit(seq, text);
            }
        }
    }
    Ok(texts.filter(|_| lent))
}

/// The transcript: seqs of the events whose `surfaceOp` is `"append"`, in log order.
#[derive(Debug)]
pub struct Transcript<'a, S> {
    source: &'a S,
    next: u64,
    end: u64,
}

/// The transcript of events `0..end` of `source`: what a person saw (replacements are
/// model-only). Cost: a scan of those events' envelopes.
pub fn transcript<S: EventSource>(source: &S, end: u64) -> Transcript<'_, S> {
    Transcript {
        source,
        next: 0,
        end: end.min(source.seq_next()),
    }
}

/// Yields each transcript seq, or the error reading an event (`CORRUPT` with the file
/// and offset), after which it ends: a damaged event never ends the transcript silently.
impl<S: EventSource> Iterator for Transcript<'_, S> {
    type Item = Result<u64>;

    fn next(&mut self) -> Option<Result<u64>> {
        while self.next < self.end {
            let seq = self.next;
            self.next += 1;
            match self.source.event_at(seq) {
                Ok(event) if event.surface_op == Some(SurfaceOp::Append) => return Some(Ok(seq)),
                Ok(_) => {}
                Err(error) => {
                    self.next = self.end;
                    return Some(Err(error.at_seq(seq)));
                }
            }
        }
        None
    }
}
