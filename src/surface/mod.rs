//! The surface (contract §4): the ordered seqs whose events produce LLM messages, kept by
//! an incremental fold over the log.
//!
//! Each event is first *checked* ([`Surface::check`], no mutation) and then *applied*
//! ([`Surface::apply`]), so a refused event leaves the surface untouched. Work per event
//! is independent of the log length; a replace costs O(log n) to locate its endpoints plus
//! a move of the nodes after it.
//!
//! The surface refers to events by seq and never owns their bytes: checks that need an
//! earlier event (the tool-output rewrite rule) read it through [`EventSource`].

mod deferred;
mod views;

pub use deferred::Refold;
pub use views::{Message, Transcript, each_lent_message, each_message, messages, transcript};

use std::borrow::Cow;
use std::collections::HashSet;

use crate::error::{ErrorKind, Result};
use crate::event::envelope::Envelope;
use crate::event::{
    Candidate, Event, EventFields, EventSource, Field, MemLog, Origin, SurfaceOp, Vocabulary,
};
use crate::json::{Json, Kind, Value, equal_except};

/// Sources lists longer than this are checked for duplicates with a hash set.
const SOURCES_PAIRWISE_MAX: usize = 16;

/// The surface of one log.
///
/// Every node has a *key*: the seq of the appended event whose position it holds. An
/// appended node's key is its own seq; a replacement inherits the key of the node at the
/// start of the range it shadowed. Invariant: keys strictly increase along `nodes`, so a
/// node's position is found by binary search on keys.
///
/// Memory: 8 bytes per node, plus 16 per replacement node currently on the surface. The
/// replace history grows with every replace, not with the surface, so it is recorded only
/// by a surface made with [`Surface::recording`] (the pure fold does).
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
/// let surface: &surfacelog::Surface = s.surface();
/// assert_eq!(surface.nodes(), [1]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct Surface {
    /// Invariant: node keys strictly increase (see the type's doc).
    nodes: Nodes,
    /// `(seq, key)` of each replacement node on the surface, sorted by seq; a node not
    /// listed is an appended event, whose key is its seq.
    replacement_keys: Vec<(u64, u64)>,
    replace_generation: u64,
    seq_next: u64,
    /// The replace history, when recorded.
    history: Option<History>,
}

/// A surface's state before a batch's steps ([`Surface::savepoint`]).
#[derive(Debug)]
pub(crate) struct Savepoint {
    seq_next: u64,
    nodes: NodesBefore,
    /// The whole surface just before the first replace applied since the savepoint.
    before_replace: Option<Box<Surface>>,
}

/// A surface's nodes at a savepoint.
#[derive(Debug)]
enum NodesBefore {
    /// Owned: how many there were.
    Owned(usize),
    /// Still read in place from a checkpoint (a shared handle, not read by the savepoint):
    /// put back as they were, checked or not, rather than as the copy a step made.
    Deferred(Nodes),
}

/// The nodes of a surface: owned, or read in place from a mapped checkpoint (CKP-7) and
/// checked on their first read (CKP-2) until the surface first changes, when they are
/// copied (copy on write). Opening a session then reads and copies none of its nodes; its
/// first read of them pays the check, and its first append or replace on the surface
/// the copy.
#[derive(Debug, Clone)]
enum Nodes {
    Owned(Vec<u64>),
    Deferred(deferred::Deferred),
}

impl Default for Nodes {
    fn default() -> Self {
        Self::Owned(Vec::new())
    }
}

impl std::ops::Deref for Nodes {
    type Target = [u64];

    fn deref(&self) -> &[u64] {
        match self {
            Self::Owned(nodes) => nodes,
            Self::Deferred(nodes) => nodes.nodes(),
        }
    }
}

impl Nodes {
    /// The nodes to change, copied out of the map (checked first, and again if they were
    /// checked before: the copy is what every later checkpoint holds) when borrowed.
    /// `None` when that check finds them lost (CKP-2: they changed in the map since the
    /// admission checked them, and the log cannot be folded again): they stay lost, so
    /// that every later read is `CORRUPT`, never copied as an empty surface that the
    /// change would then make look sound.
    fn to_mut(&mut self) -> Option<&mut Vec<u64>> {
        if let Self::Deferred(nodes) = self {
            nodes.check_again();
            let copy = nodes.nodes().to_vec();
            if nodes.state() == NodeState::Lost {
                return None;
            }
            *self = Self::Owned(copy);
        }
        match self {
            Self::Owned(nodes) => Some(nodes),
            Self::Deferred(_) => None,
        }
    }

    /// Bytes of heap memory held (none while read in place from a map).
    fn heap_bytes(&self) -> usize {
        match self {
            Self::Owned(nodes) => nodes.capacity() * size_of::<u64>(),
            Self::Deferred(nodes) => nodes.heap_bytes(),
        }
    }
}

/// Where a surface's nodes are and whether they have been checked (`checkpoint.md` CKP-2,
/// CKP-7): [`Surface::node_state`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// Held in memory: folded, or copied at the surface's first change.
    Owned,
    /// Read in place from a mapped checkpoint, not read yet: the first read checks them.
    Unchecked,
    /// Read in place from a mapped checkpoint, and they passed their check.
    Checked,
    /// The checkpoint's nodes failed their check; these come from a fold of the log.
    Refolded,
    /// The checkpoint's nodes failed their check and the log could not be folded either
    /// (it is damaged under the checkpoint): the surface reads as empty.
    Lost,
}

/// Equal surfaces have the same nodes, keys, generation and next seq: the state the fold
/// depends on. Whether history is recorded does not matter.
impl PartialEq for Surface {
    fn eq(&self, other: &Self) -> bool {
        *self.nodes == *other.nodes
            && self.replacement_keys == other.replacement_keys
            && self.replace_generation == other.replace_generation
            && self.seq_next == other.seq_next
    }
}

impl Eq for Surface {}

/// Every replace applied, in log order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct History {
    entries: Vec<ReplaceEntry>,
    /// The shadowed seqs of all entries, concatenated in log order.
    shadowed: Vec<u64>,
}

/// One replace in the fold result: `{seq, start, end, shadowedSeqs}` (contract §4).
///
/// ```
/// use surfacelog::{Compaction, Session, StoreOptions, SurfaceIntent, kinds};
///
/// let mut s = Session::in_memory("s", &StoreOptions::new())?;
/// let user = |id: &str| format!(r#"{{"id":"{id}","role":"user","source":{{"kind":"user"}},"content":[]}}"#);
/// let first = s.append::<kinds::UserMessage>(&user("a"), SurfaceIntent::append())?;
/// let last = s.append::<kinds::UserMessage>(&user("b"), SurfaceIntent::append())?;
/// let summary = r#"[{"type":"text","text":"a and b"}]"#;
/// let message = format!(r#"{{"id":"sum","role":"user","source":{{"kind":"plugin","plugin":"compaction"}},"content":{summary}}}"#);
/// let done = s.compact(&Compaction {
///     compaction_id: "c1",
///     turn: None,
///     start: first,
///     end: last,
///     summary,
///     summary_extra: None,
///     message: &message,
/// })?;
/// let history = s.replacements()?;
/// let r = history.replacements().next().unwrap();
/// assert_eq!((r.seq, r.start, r.end), (done.message, first, last));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replacement<'s> {
    /// The replacing event.
    pub seq: u64,
    /// The range's first node.
    pub start: u64,
    /// The range's last node.
    pub end: u64,
    /// The nodes taken off the surface, in surface order.
    pub shadowed: &'s [u64],
}

/// What an accepted event does to the surface; produced by [`Surface::check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A log-only event: the surface is unchanged.
    LogOnly {
        /// The event's seq.
        seq: u64,
    },
    /// The seq goes to the tail.
    Append {
        /// The event's seq.
        seq: u64,
    },
    /// Positions `first..=last` are replaced by the seq.
    Replace {
        /// The event's seq.
        seq: u64,
        /// Position of `start`.
        first: usize,
        /// Position of `end`.
        last: usize,
        /// The `start` seq.
        start: u64,
        /// The `end` seq.
        end: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReplaceEntry {
    seq: u64,
    start: u64,
    end: u64,
    /// End of this entry's run in `History::shadowed`.
    shadowed_end: usize,
}

impl Surface {
    /// An empty surface expecting seq 0, without replace history.
    #[doc(hidden)]
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty surface expecting seq 0 that records the replace history
    /// ([`Surface::replacements`]).
    #[doc(hidden)]
    pub fn recording() -> Self {
        Self {
            history: Some(History::default()),
            ..Self::default()
        }
    }

    /// `true` when this surface records the replace history.
    #[doc(hidden)]
    pub fn records_history(&self) -> bool {
        self.history.is_some()
    }

    /// Folds a whole log from seq 0 (the *pure fold* of contract §4), without history.
    ///
    /// # Errors
    /// The first refused event's code, with its seq.
    #[doc(hidden)]
    pub fn fold(source: &impl EventSource, vocabulary: &Vocabulary) -> Result<Self> {
        let mut surface = Self::new();
        surface.catch_up(source, vocabulary)?;
        Ok(surface)
    }

    /// The pure fold of a complete log given as JSON texts (contract §4): only steps
    /// 1–5 run; envelope keys, message shapes and the JSON number rules are not checked.
    /// Returns the surface and the events as an in-memory log.
    ///
    /// # Errors
    /// A text that is not JSON, an event that is not an object, or the first refused
    /// event's code.
    #[doc(hidden)]
    pub fn fold_json(events: &[&str], vocabulary: &Vocabulary) -> Result<(Self, MemLog)> {
        let mut surface = Self::recording();
        let mut log = MemLog::new();
        for text in events {
            let json = Json::parse(text)?;
            let envelope = Envelope::read(json.root())?;
            let candidate = envelope.candidate();
            let step = surface.check(&candidate, vocabulary, &log)?;
            let base = json.root().span().start;
            let local = |span: std::ops::Range<usize>| span.start - base..span.end - base;
            let data = envelope.data.map_or(0..0, |d| local(d.span()));
            let message = envelope.data.and_then(|d| {
                vocabulary
                    .surface_type(&candidate.event_type)?
                    .project(d)
                    .map(|m| local(m.span()))
            });
            let fields = EventFields {
                event_type: crate::event::type_name(&candidate.event_type),
                seq: surface.seq_next,
                time: envelope.time.and_then(|t| t.as_safe_int()).unwrap_or(0),
                surface_op: match candidate.surface_op {
                    Field::Valid(op) => Some(op),
                    Field::Absent | Field::Invalid => None,
                },
                sources: match candidate.sources {
                    Field::Valid(sources) => Some(sources.into_owned()),
                    Field::Absent | Field::Invalid => None,
                },
                ignorable: envelope.ignorable.is_some_and(|i| i.is_true()),
            };
            surface.apply(step);
            log.push(Event::new(
                json.root().raw().to_owned(),
                data,
                message,
                fields,
            ));
        }
        Ok((surface, log))
    }

    /// Folds the events of `source` past [`Surface::seq_next`]: the incremental fold.
    ///
    /// # Errors
    /// The first refused event's code, or the error reading it (`CORRUPT` with the file
    /// and offset); the events before it stay applied.
    #[doc(hidden)]
    pub fn catch_up(&mut self, source: &impl EventSource, vocabulary: &Vocabulary) -> Result<()> {
        loop {
            let seq = self.seq_next;
            let Some(event) = source.event(seq).map_err(|e| e.at_seq(seq))? else {
                return Ok(());
            };
            // Only a replace can need the data (the tool-output rewrite rule); not touching
            // it otherwise keeps the fold off the event text.
            let replace = matches!(event.surface_op, Some(SurfaceOp::Replace { .. }));
            let data = if replace {
                event.data()
            } else {
                Cow::Borrowed("")
            };
            let candidate = Candidate {
                seq: Ok(event.seq),
                event_type: event.event_type.into(),
                surface_op: event.surface_op.map_or(Field::Absent, Field::Valid),
                sources: event
                    .sources
                    .map_or(Field::Absent, |s| Field::Valid(s.to_cow())),
                data: &data,
            };
            let step = self.check(&candidate, vocabulary, source)?;
            self.apply(step);
        }
    }

    /// Checks one candidate event against contract §4, steps 1–5, in order, without
    /// changing anything.
    ///
    /// # Errors
    /// The first failing rule's code, with the seq when it is known.
    #[doc(hidden)]
    pub fn check(
        &self,
        event: &Candidate<'_>,
        vocabulary: &Vocabulary,
        source: &dyn EventSource,
    ) -> Result<Step> {
        let seq = match &event.seq {
            Ok(seq) if *seq == self.seq_next => *seq,
            Ok(seq) => return Err(self.not_contiguous(seq.to_string())),
            Err(text) => return Err(self.not_contiguous(text.clone())),
        };
        self.check_at(seq, event, vocabulary, source)
            .map_err(|e| e.at_seq(seq))
    }

    /// Applies a step returned by [`Surface::check`] on this very state.
    ///
    /// # Panics
    /// If the step was not checked against the current state (a bug, not bad input).
    #[doc(hidden)]
    pub fn apply(&mut self, step: Step) {
        match step {
            Step::LogOnly { seq } | Step::Append { seq } => {
                assert!(
                    seq == self.seq_next,
                    "apply out of order: seq={seq} seq_next={}",
                    self.seq_next
                );
                if matches!(step, Step::Append { .. })
                    && let Some(nodes) = self.nodes.to_mut()
                {
                    nodes.push(seq);
                }
            }
            Step::Replace {
                seq,
                first,
                last,
                start,
                end,
            } => {
                assert!(
                    seq == self.seq_next,
                    "apply out of order: seq={seq} seq_next={}",
                    self.seq_next
                );
                // Copied first: nodes found lost now (CKP-2) stay lost, unchanged.
                if self.nodes.to_mut().is_none() {
                    self.seq_next += 1;
                    return;
                }
                assert!(
                    self.nodes[first] == start && self.nodes[last] == end,
                    "stale replace step"
                );
                let key = self.key_of(start);
                self.forget_keys(first, last);
                if let Some(history) = &mut self.history {
                    history
                        .shadowed
                        .extend_from_slice(&self.nodes[first..=last]);
                    let shadowed_end = history.shadowed.len();
                    history.entries.push(ReplaceEntry {
                        seq,
                        start,
                        end,
                        shadowed_end,
                    });
                }
                if let Some(nodes) = self.nodes.to_mut() {
                    nodes.splice(first..=last, [seq]);
                }
                // seq is larger than every seq before it, so the list stays sorted.
                self.replacement_keys.push((seq, key));
                self.replace_generation += 1;
            }
        }
        self.seq_next += 1;
        debug_assert!(
            self.keys_increase(),
            "surface keys out of order after seq {}",
            self.seq_next - 1
        );
    }

    /// Where the surface is now, for [`Surface::undo`] to return to after steps applied
    /// with [`Surface::apply_undoable`]: a batch admitted event by event, then refused or
    /// not written, leaves the surface as it was.
    pub(crate) fn savepoint(&self) -> Savepoint {
        let nodes = match &self.nodes {
            Nodes::Owned(nodes) => NodesBefore::Owned(nodes.len()),
            Nodes::Deferred(_) => NodesBefore::Deferred(self.nodes.clone()),
        };
        Savepoint {
            seq_next: self.seq_next,
            nodes,
            before_replace: None,
        }
    }

    /// [`Surface::apply`], keeping what [`Surface::undo`] needs in `savepoint`. Appends and
    /// log-only steps only grow the surface at its end, so taking them back is a cut; the
    /// first replace after the savepoint copies the surface first (a replace takes nodes
    /// off, and rewrites the keys and the history). So a batch costs its own size, not the
    /// surface's, unless it replaces.
    pub(crate) fn apply_undoable(&mut self, step: Step, savepoint: &mut Savepoint) {
        if matches!(step, Step::Replace { .. }) && savepoint.before_replace.is_none() {
            savepoint.before_replace = Some(Box::new(self.clone()));
        }
        self.apply(step);
    }

    /// Takes back every step applied with [`Surface::apply_undoable`] since `savepoint`
    /// was taken of this surface.
    pub(crate) fn undo(&mut self, savepoint: Savepoint) {
        if let Some(before) = savepoint.before_replace {
            *self = *before;
        }
        // Between the savepoint and the first replace (or now), steps only appended nodes
        // after the savepoint's and counted seqs.
        match savepoint.nodes {
            NodesBefore::Deferred(nodes) => self.nodes = nodes,
            NodesBefore::Owned(len) => {
                if self.nodes.len() > len
                    && let Some(nodes) = self.nodes.to_mut()
                {
                    nodes.truncate(len);
                }
            }
        }
        self.seq_next = savepoint.seq_next;
    }

    /// The seqs on the surface, in surface order.
    ///
    /// For a surface loaded from a checkpoint, the first read checks the nodes (CRC and
    /// invariants, `checkpoint.md` CKP-2): O(n) once, then free here; a session checks
    /// their CRC again as each later read of them begins ([`crate::Session::surface`], the
    /// messages), since a map is not a copy. See [`Surface::node_state`].
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
    /// assert_eq!(s.surface().nodes(), [1]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn nodes(&self) -> &[u64] {
        &self.nodes
    }

    /// The number of replaces applied.
    #[doc(hidden)]
    pub fn replace_generation(&self) -> u64 {
        self.replace_generation
    }

    /// The next seq the fold expects.
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
    /// assert_eq!(s.surface().seq_next(), s.seq_next()); // it has seen every event
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn seq_next(&self) -> u64 {
        self.seq_next
    }

    /// Every replace applied, in log order, with what it shadowed. Empty unless the
    /// surface records history ([`Surface::recording`]); see [`Surface::records_history`].
    ///
    /// ```
    /// use surfacelog::{Compaction, Session, StoreOptions, SurfaceIntent, kinds};
    ///
    /// let mut s = Session::in_memory("s", &StoreOptions::new())?;
    /// let user = |id: &str| format!(r#"{{"id":"{id}","role":"user","source":{{"kind":"user"}},"content":[]}}"#);
    /// let first = s.append::<kinds::UserMessage>(&user("a"), SurfaceIntent::append())?;
    /// let last = s.append::<kinds::UserMessage>(&user("b"), SurfaceIntent::append())?;
    /// let summary = r#"[{"type":"text","text":"a and b"}]"#;
    /// let message = format!(r#"{{"id":"sum","role":"user","source":{{"kind":"plugin","plugin":"compaction"}},"content":{summary}}}"#);
    /// let done = s.compact(&Compaction {
    ///     compaction_id: "c1",
    ///     turn: None,
    ///     start: first,
    ///     end: last,
    ///     summary,
    ///     summary_extra: None,
    ///     message: &message,
    /// })?;
    /// let history = s.replacements()?; // refolded, recording every replace
    /// assert_eq!(history.replacements().len(), 1);
    /// assert_eq!(s.surface().nodes(), [done.message]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn replacements(&self) -> impl ExactSizeIterator<Item = Replacement<'_>> + '_ {
        let (entries, shadowed) = match &self.history {
            Some(history) => (history.entries.as_slice(), history.shadowed.as_slice()),
            None => (&[][..], &[][..]),
        };
        entries.iter().enumerate().map(move |(i, entry)| {
            let begin = if i == 0 {
                0
            } else {
                entries[i - 1].shadowed_end
            };
            Replacement {
                seq: entry.seq,
                start: entry.start,
                end: entry.end,
                shadowed: &shadowed[begin..entry.shadowed_end],
            }
        })
    }

    /// The position of `seq` on the surface, or `None` when it is not a node.
    /// Cost: O(log n · log r) for n nodes and r replaces.
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
    /// assert_eq!(s.surface().position(1), Some(0));
    /// assert_eq!(s.surface().position(0), None); // turn/start is no node
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn position(&self, seq: u64) -> Option<usize> {
        let key = self.key_of(seq);
        let at = self
            .nodes
            .binary_search_by_key(&key, |node| self.key_of(*node))
            .ok()?;
        (self.nodes[at] == seq).then_some(at)
    }

    /// The keys of the replacement nodes on the surface, `(seq, key)` sorted by seq: with
    /// [`Surface::nodes`], the whole state a checkpoint needs.
    #[doc(hidden)]
    pub fn replacement_keys(&self) -> &[(u64, u64)] {
        &self.replacement_keys
    }

    /// A surface from checkpointed parts, without history. Returns `None` unless the
    /// parts satisfy the type's invariants (keys sorted and unique, node keys strictly
    /// increasing, every seq below `seq_next`): bytes from a file are input, not trusted.
    #[doc(hidden)]
    pub fn from_parts(
        nodes: Vec<u64>,
        replacement_keys: Vec<(u64, u64)>,
        replace_generation: u64,
        seq_next: u64,
    ) -> Option<Self> {
        Self::from_node_parts(
            Nodes::Owned(nodes),
            replacement_keys,
            replace_generation,
            seq_next,
        )
    }

    /// A surface whose `nodes` are read in place from a checkpoint file (CKP-7), read and
    /// checked on their first read (CKP-2): their CRC-32C against `nodes_crc`, then the
    /// invariants of [`Surface::from_parts`]; nodes that fail are replaced by those of
    /// `refold`. Checked now: the replacement keys alone (sorted, unique, each key at most
    /// its seq, every seq below `seq_next`), and that there are at least as many nodes as
    /// keys. Returns `None` when those fail.
    pub(crate) fn from_deferred_parts(
        nodes: crate::log::FileWords,
        nodes_crc: u32,
        replacement_keys: Vec<(u64, u64)>,
        replace_generation: u64,
        seq_next: u64,
        refold: Refold,
    ) -> Option<Self> {
        if !keys_valid(&replacement_keys, seq_next) || nodes.len() < replacement_keys.len() {
            return None;
        }
        let nodes =
            deferred::Deferred::new(nodes, nodes_crc, replacement_keys.clone(), seq_next, refold);
        Some(Self {
            nodes: Nodes::Deferred(nodes),
            replacement_keys,
            replace_generation,
            seq_next,
            history: None,
        })
    }

    /// CKP-2 again, as a read that relies on the nodes begins: nodes read in place from a
    /// mapped checkpoint that passed their first check have their CRC-32C checked again (a
    /// map is not a copy: its bytes may have changed since); nodes that fail are not used
    /// from then on ([`NodeState::Refolded`], [`NodeState::Lost`]). Nodes not read yet are
    /// checked by their first read, as before. Owned nodes cost nothing. Cost: O(n) for
    /// mapped nodes, a CRC-32C of their bytes.
    pub(crate) fn check_again(&self) {
        if let Nodes::Deferred(nodes) = &self.nodes {
            nodes.check_again();
        }
    }

    /// Whether the nodes were lost ([`NodeState::Lost`]): reads them first, so that
    /// deferred nodes are checked (CKP-2).
    #[doc(hidden)]
    pub fn nodes_lost(&self) -> bool {
        self.nodes.is_empty() && self.node_state() == NodeState::Lost
    }

    /// `CORRUPT` when the nodes were lost ([`NodeState::Lost`], CKP-2): what every read
    /// that derives something from the nodes returns instead of an empty surface, so that
    /// the loss is never taken for a conversation without messages.
    ///
    /// # Errors
    /// `CORRUPT` naming the checkpoint's `seq_next`; `IO` when the fold of the log that
    /// would have replaced the nodes failed reading it (the session must be opened
    /// again to try anew).
    pub(crate) fn check_not_lost(&self) -> Result<()> {
        if self.nodes_lost() {
            // The fold failed reading the log (`IO`): that error, not damage.
            if let Nodes::Deferred(nodes) = &self.nodes
                && let Some(io) = nodes.lost_io()
            {
                return Err(io);
            }
            return Err(ErrorKind::Corrupt {
                location: format!("surface checkpoint at seq {}", self.seq_next),
                reason: "the checkpoint's nodes failed their check and the log under it \
                         could not be folded again"
                    .into(),
            }
            .into());
        }
        Ok(())
    }

    /// Where the nodes are and whether they have been checked: see [`NodeState`].
    #[doc(hidden)]
    pub fn node_state(&self) -> NodeState {
        match &self.nodes {
            Nodes::Owned(_) => NodeState::Owned,
            Nodes::Deferred(nodes) => nodes.state(),
        }
    }

    fn from_node_parts(
        nodes: Nodes,
        replacement_keys: Vec<(u64, u64)>,
        replace_generation: u64,
        seq_next: u64,
    ) -> Option<Self> {
        let valid = keys_valid(&replacement_keys, seq_next)
            && parts_valid(&nodes, &replacement_keys, seq_next);
        valid.then_some(Self {
            nodes,
            replacement_keys,
            replace_generation,
            seq_next,
            history: None,
        })
    }

    /// The positions of `start` and `end`, in surface order (contract §4 step 5).
    ///
    /// # Errors
    /// `REPLACE_START_NOT_ON_SURFACE`, `REPLACE_END_NOT_ON_SURFACE`, `REPLACE_REVERSED`.
    #[doc(hidden)]
    pub fn range(&self, start: u64, end: u64) -> Result<(usize, usize)> {
        let first = self
            .position(start)
            .ok_or(ErrorKind::ReplaceStartNotOnSurface { start })?;
        let last = self
            .position(end)
            .ok_or(ErrorKind::ReplaceEndNotOnSurface { end })?;
        if first > last {
            return Err(ErrorKind::ReplaceReversed { start, end }.into());
        }
        Ok((first, last))
    }

    /// Bytes of heap memory held: nodes, replacement keys, and the history when recorded.
    #[doc(hidden)]
    pub fn heap_bytes(&self) -> usize {
        let history = self.history.as_ref().map_or(0, |h| {
            h.entries.capacity() * size_of::<ReplaceEntry>()
                + h.shadowed.capacity() * size_of::<u64>()
        });
        self.nodes.heap_bytes()
            + self.replacement_keys.capacity() * size_of::<(u64, u64)>()
            + history
    }

    fn check_at(
        &self,
        seq: u64,
        event: &Candidate<'_>,
        vocabulary: &Vocabulary,
        source: &dyn EventSource,
    ) -> Result<Step> {
        let event_type = event.event_type.as_ref();
        let Some(surface_type) = vocabulary.surface_type(event_type) else {
            if event.surface_op.is_present() {
                return Err(ErrorKind::SurfaceOpForbidden {
                    event_type: event_type.into(),
                }
                .into());
            }
            if event.sources.is_present() {
                return Err(ErrorKind::SourcesForbidden {
                    event_type: event_type.into(),
                }
                .into());
            }
            return Ok(Step::LogOnly { seq });
        };
        let op = match event.surface_op {
            Field::Absent => {
                return Err(ErrorKind::SurfaceOpRequired {
                    event_type: event_type.into(),
                }
                .into());
            }
            Field::Invalid => return Err(ErrorKind::SurfaceOpInvalid.into()),
            Field::Valid(op) => op,
        };
        // CKP-2: no surface op lands on a surface whose nodes were lost (the first read of
        // deferred nodes checks them here, as the apply would), nor on nodes changed in the
        // map since they were checked: the range below is found in the nodes checked now.
        self.check_again();
        self.check_not_lost()?;
        let sources: &[u64] = match &event.sources {
            Field::Absent => &[],
            Field::Invalid => return Err(ErrorKind::SourcesInvalid.into()),
            Field::Valid(sources) => {
                check_sources(seq, sources, surface_type.origin == Origin::Model)?;
                sources
            }
        };
        let SurfaceOp::Replace { start, end } = op else {
            return Ok(Step::Append { seq });
        };
        let (first, last) = self.range(start, end)?;
        let shadowed = &self.nodes[first..=last];
        check_covered(shadowed, sources)?;
        if surface_type.origin == Origin::Tool {
            check_tool_rewrite(event_type, event.data, shadowed, source)?;
        }
        Ok(Step::Replace {
            seq,
            first,
            last,
            start,
            end,
        })
    }

    /// Drops the keys of the replacement nodes at positions `first..=last`, which are
    /// about to be shadowed: one pass over the keys, whatever the number shadowed.
    fn forget_keys(&mut self, first: usize, last: usize) {
        let keys = &self.replacement_keys;
        let is_key = |seq: &u64| keys.binary_search_by_key(seq, |e| e.0).is_ok();
        let mut gone: Vec<u64> = self.nodes[first..=last]
            .iter()
            .copied()
            .filter(is_key)
            .collect();
        match gone.as_slice() {
            [] => {}
            [seq] => {
                if let Ok(at) = self.replacement_keys.binary_search_by_key(seq, |e| e.0) {
                    self.replacement_keys.remove(at);
                }
            }
            _ => {
                gone.sort_unstable();
                self.replacement_keys
                    .retain(|(seq, _)| gone.binary_search(seq).is_err());
            }
        }
    }

    /// The key of a node (see the type's doc). For a seq that is not a replacement on the
    /// surface this is the seq itself, which no other node can have as its key.
    fn key_of(&self, seq: u64) -> u64 {
        key_in(&self.replacement_keys, seq)
    }

    fn keys_increase(&self) -> bool {
        self.nodes
            .windows(2)
            .all(|w| self.key_of(w[0]) < self.key_of(w[1]))
    }

    fn not_contiguous(&self, found: String) -> crate::Error {
        ErrorKind::SeqNotContiguous {
            expected: self.seq_next,
            found,
        }
        .into()
    }
}

/// The key of `seq` given the replacement keys (see [`Surface`]'s doc).
fn key_in(replacement_keys: &[(u64, u64)], seq: u64) -> u64 {
    match replacement_keys.binary_search_by_key(&seq, |e| e.0) {
        Ok(at) => replacement_keys[at].1,
        Err(_) => seq,
    }
}

/// The checks of [`Surface::from_parts`] on the replacement keys alone: sorted by seq and
/// unique, each key at most its seq, every seq below `seq_next`.
fn keys_valid(replacement_keys: &[(u64, u64)], seq_next: u64) -> bool {
    let sorted = replacement_keys.windows(2).all(|w| w[0].0 < w[1].0);
    sorted
        && replacement_keys
            .iter()
            .all(|(s, k)| *s < seq_next && k <= s)
}

/// The checks of [`Surface::from_parts`] that read the nodes, given keys that passed
/// [`keys_valid`]: every node is below `seq_next`, node keys strictly increase, and every
/// replacement seq is a node. Without replacements a key is the seq, so this is one
/// comparison per node; with them, only a node at or above the smallest replacement seq
/// can be one, so only those are looked up (instead of two binary searches per node).
fn parts_valid(nodes: &[u64], replacement_keys: &[(u64, u64)], seq_next: u64) -> bool {
    let Some(&(smallest, _)) = replacement_keys.first() else {
        let below = nodes.last().is_none_or(|last| *last < seq_next);
        return below && strictly_increasing(nodes);
    };
    let key = |node: u64| {
        if node < smallest {
            node
        } else {
            key_in(replacement_keys, node)
        }
    };
    let below = nodes.iter().all(|node| *node < seq_next);
    let increasing = nodes.windows(2).all(|w| key(w[0]) < key(w[1]));
    // Keys increase along the nodes, so a replacement seq is found by its key.
    let listed = || {
        replacement_keys.iter().all(|&(seq, k)| {
            nodes
                .binary_search_by_key(&k, |node| key(*node))
                .is_ok_and(|at| nodes[at] == seq)
        })
    };
    below && increasing && listed()
}

/// Whether `words` strictly increase: one branch-free pass that the compiler vectorizes,
/// then, only when it fails, the exact comparison of each pair. For `p` below 2^63,
/// `p < q` exactly when `q − p − 1` (wrapping) is below 2^63 too, so OR-ing `p` and
/// `q − p − 1` over every pair leaves bit 63 clear only when every pair increases. A
/// word at or above 2^63 (never a seq, which is a safe integer) sets it, and so does a
/// pair of increasing words 2^63 or more apart: the exact pass decides those.
fn strictly_increasing(words: &[u64]) -> bool {
    let next = words.get(1..).unwrap_or_default();
    let bits = words.iter().zip(next).fold(0, |bits, (&p, &q)| {
        bits | p | q.wrapping_sub(p).wrapping_sub(1)
    });
    bits >> 63 == 0 || words.windows(2).all(|w| w[0] < w[1])
}

/// Contract §4 step 3, after the array shape: non-empty (unless allowed), no duplicates,
/// every element earlier than the event.
fn check_sources(seq: u64, sources: &[u64], empty_allowed: bool) -> Result<()> {
    if sources.is_empty() && !empty_allowed {
        return Err(ErrorKind::SourcesEmpty.into());
    }
    if sources.len() <= SOURCES_PAIRWISE_MAX {
        for (i, a) in sources.iter().enumerate() {
            if sources[i + 1..].contains(a) {
                return Err(ErrorKind::SourcesDuplicate { source: *a }.into());
            }
        }
    } else {
        let mut seen = HashSet::with_capacity(sources.len());
        if let Some(dup) = sources.iter().find(|s| !seen.insert(**s)) {
            return Err(ErrorKind::SourcesDuplicate { source: *dup }.into());
        }
    }
    match sources.iter().find(|s| **s >= seq) {
        Some(source) => Err(ErrorKind::SourcesNotEarlier { source: *source }.into()),
        None => Ok(()),
    }
}

/// Contract §4 step 5: the sources must cite every shadowed node.
fn check_covered(shadowed: &[u64], sources: &[u64]) -> Result<()> {
    let missing: Vec<u64> = if sources.len() <= SOURCES_PAIRWISE_MAX {
        shadowed
            .iter()
            .copied()
            .filter(|s| !sources.contains(s))
            .collect()
    } else {
        let cited: HashSet<u64> = sources.iter().copied().collect();
        shadowed
            .iter()
            .copied()
            .filter(|s| !cited.contains(s))
            .collect()
    };
    if missing.is_empty() {
        Ok(())
    } else {
        Err(ErrorKind::ReplaceSourcesIncomplete { missing }.into())
    }
}

/// Contract §4 step 5, tool-output prune: one node, of the same type, and only
/// `message.content[0].content` changed (and still an array).
fn check_tool_rewrite(
    event_type: &str,
    data: &str,
    shadowed: &[u64],
    source: &dyn EventSource,
) -> Result<()> {
    let &[target] = shadowed else {
        return Err(ErrorKind::ToolRewriteNotSingle {
            shadowed: shadowed.len(),
        }
        .into());
    };
    let old = source.event(target)?.filter(|e| e.event_type == event_type);
    let old = old.ok_or(ErrorKind::ToolRewriteTarget { target })?;
    let changed = || ErrorKind::ToolRewriteChanged { target };
    let old_data = old.data();
    let (Ok(new_json), Ok(old_json)) = (Json::parse(data), Json::parse(&old_data)) else {
        return Err(changed().into());
    };
    let new_output = pruned_output(new_json.root()).filter(|c| c.kind() == Kind::Array);
    let new_output = new_output.ok_or_else(changed)?;
    let old_output = pruned_output(old_json.root());
    if equal_except(
        new_json.root(),
        Some(new_output),
        old_json.root(),
        old_output,
    ) {
        Ok(())
    } else {
        Err(changed().into())
    }
}

/// `data.message.content[0].content`, the one value a prune may change.
pub(crate) fn pruned_output<'j, 'a>(data: Value<'j, 'a>) -> Option<Value<'j, 'a>> {
    data.get("message")?
        .get("content")?
        .elements()
        .next()?
        .get("content")
}

#[cfg(test)]
mod tests;
