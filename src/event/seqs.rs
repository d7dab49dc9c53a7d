//! A list of seqs, borrowed either from memory or, little-endian, from a stored record.

use std::borrow::Cow;
use std::fmt;

/// A borrowed list of seqs (`sourceEventSeqs`). In memory it is a `&[u64]`; read from a
/// log record it is the record's little-endian bytes, decoded on access, so reading an
/// event never copies.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
/// use surfacelog::{NoSurface, SurfaceIntent, kinds};
/// let mut s = store.create("s", None, None)?;
/// let chunk = s.append::<kinds::AssistantChunk>(r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"hi"}}"#, NoSurface)?;
/// let message = s.append::<kinds::AssistantMessage>(
///     r#"{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","source":{"kind":"model","provider":"p","model":"m"},"content":[{"type":"text","text":"hi"}]}}"#,
///     SurfaceIntent::append_citing(vec![chunk]),
/// )?;
/// let event = s.event(message)?.unwrap();
/// let sources = event.sources.expect("the message cites its chunk");
/// assert_eq!(sources.to_vec(), vec![chunk]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy)]
pub struct Seqs<'a>(Repr<'a>);

#[derive(Clone, Copy)]
enum Repr<'a> {
    Native(&'a [u64]),
    /// Invariant: the length is a multiple of 8.
    Le(&'a [u8]),
    /// A compact record's runs of consecutive seqs (log-format.md §4.2), decoded on access.
    /// Invariant: `bytes` are `runs` runs a decoder checked (REC-20), holding `count` seqs.
    Runs {
        bytes: &'a [u8],
        runs: u64,
        count: usize,
    },
}

impl<'a> Seqs<'a> {
    /// Seqs stored as consecutive little-endian u64s.
    ///
    /// # Panics
    /// If the length is not a multiple of 8: the record decoder checks it first.
    #[doc(hidden)]
    pub fn from_le_bytes(bytes: &'a [u8]) -> Self {
        assert!(
            bytes.len().is_multiple_of(8),
            "seq bytes come in eights: len={}",
            bytes.len()
        );
        Self(Repr::Le(bytes))
    }

    /// Seqs stored as a compact record's runs (log-format.md §4.2): `runs` runs, `count`
    /// seqs, which the record's decoder checked (REC-20).
    pub(crate) fn from_runs(bytes: &'a [u8], runs: u64, count: usize) -> Self {
        Self(Repr::Runs { bytes, runs, count })
    }

    /// The stored runs, when the seqs are a compact record's: `(bytes, runs)`.
    pub(crate) fn stored_runs(&self) -> Option<(&'a [u8], u64, usize)> {
        match self.0 {
            Repr::Runs { bytes, runs, count } => Some((bytes, runs, count)),
            Repr::Native(_) | Repr::Le(_) => None,
        }
    }

    /// The number of seqs.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// use surfacelog::{NoSurface, SurfaceIntent, kinds};
    /// let mut s = store.create("s", None, None)?;
    /// let chunk = s.append::<kinds::AssistantChunk>(r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"hi"}}"#, NoSurface)?;
    /// let message = s.append::<kinds::AssistantMessage>(
    ///     r#"{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","source":{"kind":"model","provider":"p","model":"m"},"content":[{"type":"text","text":"hi"}]}}"#,
    ///     SurfaceIntent::append_citing(vec![chunk]),
    /// )?;
    /// let event = s.event(message)?.unwrap();
    /// let sources = event.sources.expect("the message cites its chunk");
    /// assert_eq!(sources.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn len(&self) -> usize {
        match self.0 {
            Repr::Native(seqs) => seqs.len(),
            Repr::Le(bytes) => bytes.len() / 8,
            Repr::Runs { count, .. } => count,
        }
    }

    /// `true` when there are none.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// use surfacelog::{NoSurface, SurfaceIntent, kinds};
    /// let mut s = store.create("s", None, None)?;
    /// let chunk = s.append::<kinds::AssistantChunk>(r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"hi"}}"#, NoSurface)?;
    /// let message = s.append::<kinds::AssistantMessage>(
    ///     r#"{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","source":{"kind":"model","provider":"p","model":"m"},"content":[{"type":"text","text":"hi"}]}}"#,
    ///     SurfaceIntent::append_citing(vec![chunk]),
    /// )?;
    /// let event = s.event(message)?.unwrap();
    /// let sources = event.sources.expect("the message cites its chunk");
    /// assert!(!sources.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The seqs in order.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// use surfacelog::{NoSurface, SurfaceIntent, kinds};
    /// let mut s = store.create("s", None, None)?;
    /// let chunk = s.append::<kinds::AssistantChunk>(r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"hi"}}"#, NoSurface)?;
    /// let message = s.append::<kinds::AssistantMessage>(
    ///     r#"{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","source":{"kind":"model","provider":"p","model":"m"},"content":[{"type":"text","text":"hi"}]}}"#,
    ///     SurfaceIntent::append_citing(vec![chunk]),
    /// )?;
    /// let event = s.event(message)?.unwrap();
    /// let sources = event.sources.expect("the message cites its chunk");
    /// assert_eq!(sources.iter().collect::<Vec<u64>>(), [chunk]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn iter(&self) -> SeqsIter<'a> {
        SeqsIter(match self.0 {
            Repr::Native(seqs) => IterRepr::Native(seqs.iter()),
            Repr::Le(bytes) => IterRepr::Le(bytes.chunks_exact(8)),
            Repr::Runs { bytes, runs, count } => IterRepr::Runs {
                runs: crate::record::compact::stored_runs(bytes, runs),
                next: 0,
                end: 0,
                left: count,
            },
        })
    }

    /// The seqs as a slice, copying only when they are stored little-endian.
    #[doc(hidden)]
    pub fn to_cow(&self) -> Cow<'a, [u64]> {
        match self.0 {
            Repr::Native(seqs) => Cow::Borrowed(seqs),
            Repr::Le(_) | Repr::Runs { .. } => Cow::Owned(self.iter().collect()),
        }
    }

    /// The seqs as a vector.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// use surfacelog::{NoSurface, SurfaceIntent, kinds};
    /// let mut s = store.create("s", None, None)?;
    /// let chunk = s.append::<kinds::AssistantChunk>(r#"{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"hi"}}"#, NoSurface)?;
    /// let message = s.append::<kinds::AssistantMessage>(
    ///     r#"{"turn":1,"step":1,"message":{"id":"a1","role":"assistant","source":{"kind":"model","provider":"p","model":"m"},"content":[{"type":"text","text":"hi"}]}}"#,
    ///     SurfaceIntent::append_citing(vec![chunk]),
    /// )?;
    /// let event = s.event(message)?.unwrap();
    /// let sources = event.sources.expect("the message cites its chunk");
    /// let owned: Vec<u64> = sources.to_vec();
    /// assert_eq!(owned, [chunk]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_vec(&self) -> Vec<u64> {
        self.to_cow().into_owned()
    }
}

/// Iterator over [`Seqs`].
#[derive(Debug, Clone)]
pub struct SeqsIter<'a>(IterRepr<'a>);

#[derive(Debug, Clone)]
enum IterRepr<'a> {
    Native(std::slice::Iter<'a, u64>),
    Le(std::slice::ChunksExact<'a, u8>),
    /// The seqs `next..end` of the current run, then the runs left.
    Runs {
        runs: crate::record::compact::StoredRuns<'a>,
        next: u64,
        end: u64,
        left: usize,
    },
}

impl Iterator for SeqsIter<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        match &mut self.0 {
            IterRepr::Native(iter) => iter.next().copied(),
            IterRepr::Le(chunks) => chunks.next().map(|c| {
                let mut bytes = [0; 8];
                bytes.copy_from_slice(c);
                u64::from_le_bytes(bytes)
            }),
            IterRepr::Runs {
                runs,
                next,
                end,
                left,
            } => {
                if *next == *end {
                    let (start, len) = runs.next()?;
                    *next = start;
                    *end = start.saturating_add(len);
                }
                let seq = *next;
                *next += 1;
                *left = left.saturating_sub(1);
                Some(seq)
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.0 {
            IterRepr::Native(iter) => iter.size_hint(),
            IterRepr::Le(chunks) => chunks.size_hint(),
            IterRepr::Runs { left, .. } => (*left, Some(*left)),
        }
    }
}

impl ExactSizeIterator for SeqsIter<'_> {}

impl<'a> IntoIterator for &Seqs<'a> {
    type Item = u64;
    type IntoIter = SeqsIter<'a>;

    fn into_iter(self) -> SeqsIter<'a> {
        self.iter()
    }
}

impl<'a> From<&'a [u64]> for Seqs<'a> {
    fn from(seqs: &'a [u64]) -> Self {
        Self(Repr::Native(seqs))
    }
}

impl PartialEq for Seqs<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Seqs<'_> {}

impl PartialEq<[u64]> for Seqs<'_> {
    fn eq(&self, other: &[u64]) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter().copied())
    }
}

impl fmt::Debug for Seqs<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}
