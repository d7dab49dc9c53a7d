//! [`SharedBytes`]: bytes a session read that a caller may keep after the session is gone,
//! without copying them (a binding hands a message pack's texts to another language).

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

/// Bytes shared with the session that read them, kept valid by whoever holds a clone, even
/// after the session is closed: the text area of a session's message pack
/// (`format-spec/message-pack.md`), as mapped and checked when the session first derived
/// its messages (MSP-1, MSP-2). They never change: a pack is never written in place
/// (MSP-6), so the map keeps the file it checked.
///
/// [`Session::each_message`](crate::Session::each_message) takes most messages' texts from
/// here; [`SharedBytes::span_of`] says whether a text it visited is one of them, and where.
/// A caller that copies every message out (a binding to another language) then copies only
/// the others, and lends these bytes as they are.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new().message_pack(1))?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[]}"#, surfacelog::SurfaceIntent::append())?;
/// # s.close()?;
/// let (s, _) = store.open_session("s")?;
/// let texts = s.message_texts().expect("closing wrote a message pack");
/// let mut copied = Vec::new(); // only the texts that are not in `texts`
/// let mut spans = Vec::new();
/// s.each_message(|m| match texts.span_of(m.json) {
///     Some(span) => spans.push(span),
///     None => copied.extend_from_slice(m.json.as_bytes()),
/// })?;
/// drop(s); // the bytes stay valid
/// assert!(texts[spans[0].clone()].starts_with(br#"{"id":"u1""#));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct SharedBytes {
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    range: Range<usize>,
}

impl SharedBytes {
    /// The bytes `range` of `owner`; an empty range when it is not inside them.
    pub(crate) fn new(owner: Arc<dyn AsRef<[u8]> + Send + Sync>, range: Range<usize>) -> Self {
        let range = if (*owner).as_ref().get(range.clone()).is_some() {
            range
        } else {
            0..0
        };
        Self { owner, range }
    }

    /// Where `text` lies in these bytes when it is a slice of them (the same memory, not
    /// equal bytes elsewhere), `None` otherwise.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new().message_pack(1))?;
    /// # let mut s = store.create("s", None, None)?;
    /// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[]}"#, surfacelog::SurfaceIntent::append())?;
    /// # s.close()?;
    /// let (s, _) = store.open_session("s")?;
    /// let texts = s.message_texts().expect("a message pack");
    /// let messages = s.messages()?;
    /// let span = texts.span_of(messages[0].json).expect("read from the pack");
    /// assert_eq!(&texts[span], messages[0].json.as_bytes());
    /// assert_eq!(texts.span_of(&messages[0].json.to_owned()), None); // a copy is elsewhere
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn span_of(&self, text: &str) -> Option<Range<usize>> {
        // Addresses compared, never dereferenced: a text is inside these bytes exactly when
        // its first byte and its end lie within them.
        let base = self.as_ptr() as usize;
        let start = (text.as_ptr() as usize).checked_sub(base)?;
        let end = start.checked_add(text.len())?;
        (end <= self.len() && !text.is_empty()).then_some(start..end)
    }
}

/// A message's text as [`Session::each_lent_message`](crate::Session::each_lent_message)
/// visits it: lent from the session's message pack, or read from the log.
///
/// ```
/// use surfacelog::MessageText;
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new().message_pack(1))?;
/// # let mut s = store.create("s", None, None)?;
/// # s.append::<surfacelog::kinds::UserMessage>(r#"{"id":"u1","role":"user","source":{"kind":"user"},"content":[]}"#, surfacelog::SurfaceIntent::append())?;
/// # s.close()?;
/// let (s, _) = store.open_session("s")?;
/// let (mut lent, mut read) = (Vec::new(), Vec::new());
/// let texts = s.each_lent_message(|seq, text| match text {
///     MessageText::Lent(span) => lent.push(span),
///     MessageText::Text(json) => read.push((seq, json.to_owned())),
/// })?;
/// // The caller checks a lent text as UTF-8 when it makes a string of it.
/// let texts = texts.expect("lent");
/// let first = std::str::from_utf8(&texts[lent[0].clone()])?;
/// assert!(first.contains(r#""role":"user""#) && read.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageText<'a> {
    /// Bytes `range` of the [`SharedBytes`] that call returns (the message pack's text
    /// area): checked by the pack's checksums as the read began (MSP-4), but not yet as
    /// UTF-8. The caller checks that when it makes a string of them; bytes that are not
    /// UTF-8 are damage (`CORRUPT`), never a text.
    Lent(Range<usize>),
    /// The text, read from its log record and checked.
    Text(&'a str),
}

impl std::ops::Deref for SharedBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        (*self.owner)
            .as_ref()
            .get(self.range.clone())
            .unwrap_or_default()
    }
}

impl AsRef<[u8]> for SharedBytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedBytes")
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes 4..12 of a 16-byte owner, and the owner, to slice texts from.
    fn shared() -> (SharedBytes, Arc<Vec<u8>>) {
        let owner = Arc::new(b"0123abcdefgh4567".to_vec());
        (SharedBytes::new(owner.clone(), 4..12), owner)
    }

    fn text(owner: &[u8], range: Range<usize>) -> &str {
        std::str::from_utf8(&owner[range]).unwrap()
    }

    #[test]
    fn span_of_is_the_place_of_a_slice_of_these_bytes_only() {
        let (shared, owner) = shared();
        assert_eq!(&shared[..], b"abcdefgh");
        assert_eq!(shared.span_of(text(&owner, 4..12)), Some(0..8));
        assert_eq!(shared.span_of(text(&owner, 6..9)), Some(2..5));
        assert_eq!(
            shared.span_of(text(&owner, 11..12)),
            Some(7..8),
            "the last byte"
        );
        assert_eq!(
            shared.span_of(text(&owner, 3..6)),
            None,
            "starts a byte before"
        );
        assert_eq!(
            shared.span_of(text(&owner, 10..13)),
            None,
            "ends a byte past"
        );
        assert_eq!(shared.span_of(text(&owner, 12..14)), None, "after them");
        assert_eq!(
            shared.span_of(text(&owner, 12..12)),
            None,
            "empty, at their end"
        );
        assert_eq!(shared.span_of(text(&owner, 6..6)), None, "empty, inside");
        assert_eq!(shared.span_of("abcdefgh"), None, "equal bytes elsewhere");
    }

    #[test]
    fn a_range_outside_the_owner_lends_nothing() {
        let owner = Arc::new(vec![1_u8; 4]);
        let shared = SharedBytes::new(owner, 2..9);
        assert!(shared.is_empty());
        assert_eq!(format!("{shared:?}"), "SharedBytes { len: 0, .. }");
    }
}
