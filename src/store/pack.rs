//! The message pack beside a session's log (`format-spec/message-pack.md`): the message
//! texts of the surface's nodes as of some seq, together in seq order, so that deriving
//! all messages reads one contiguous file rather than a record per message.
#![deny(clippy::indexing_slicing)]

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use memmap2::Mmap;

use crate::event::{EventSource, MessageText, SharedBytes};
use crate::record::{u32_at, u64_at};
use crate::storage::Storage;
use crate::surface::Surface;

/// `"surfmsg\0"` (MSP-1).
pub const PACK_MAGIC: [u8; 8] = *b"surfmsg\0";
/// The message pack format version (MSP-1).
pub const PACK_VERSION: u32 = 1;
/// The version of a compressed pack (MSP-8): a version 1 pack's bytes after its fixed
/// fields in Zstandard blocks (log-format.md §14, CZ-3).
pub const PACK_VERSION_COMPRESSED: u32 = 2;
/// The pack's file name in a session directory.
pub const PACK_FILE: &str = "messages";
/// Where the entries start (MSP-1).
const ENTRIES_AT: usize = 48;
/// The bytes of one entry: `(seq, end)`.
const ENTRY: usize = 16;
/// The buffer a pack is written through (MSP-6): memory stays bounded whatever the
/// messages add up to.
const WRITE_BUFFER: usize = 1 << 20;

/// A pack file's bytes: mapped (a session's), or on the heap (a fuzz target's).
#[derive(Debug)]
enum Bytes {
    Map(Mmap),
    Heap(Box<[u8]>),
}

impl AsRef<[u8]> for Bytes {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::ops::Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Self::Map(map) => map,
            Self::Heap(bytes) => bytes,
        }
    }
}

/// A checked message pack (MSP-1; MSP-2 too when loaded for a log), mapped.
#[derive(Debug)]
pub struct Pack {
    /// Shared: [`Pack::texts`] lends the text area out (a binding's zero-copy read).
    map: Arc<Bytes>,
    seq_next: u64,
    count: usize,
    /// The entry after the one last found: the surface asks for its nodes mostly in seq
    /// order, so this is usually the next one asked for (a guess, checked; never wrong).
    next: AtomicUsize,
}

/// What the pack says of a node (MSP-4): its message as `T`, a text ([`Pack::message`]) or
/// a span of the text area ([`Pack::span`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup<T> {
    /// The pack has no entry for it (or, asked for a text, its text is not UTF-8): the log
    /// is read.
    NotPacked,
    /// The node's message, `None` for a node whose event has none.
    Packed(Option<T>),
}

/// Why a pack file is not used: it is a cache, so this is only reported (tracing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unusable {
    /// No file.
    Missing,
    /// A check of MSP-1 failed: the rule's reason.
    Corrupt(&'static str),
    /// Another version (MSP-1).
    Version,
    /// Written from another log, or a longer one (MSP-2).
    Stale,
}

impl Pack {
    /// Reads, maps and checks the pack of the session directory `dir` against `log`
    /// (MSP-1, MSP-2).
    ///
    /// # Errors
    /// Why it cannot be used.
    pub fn load(
        storage: &dyn Storage,
        dir: &Path,
        log: &impl EventSource,
    ) -> Result<Self, Unusable> {
        let path = dir.join(PACK_FILE);
        let Ok(file) = storage.open_read(&path) else {
            return Err(Unusable::Missing);
        };
        let len = file
            .metadata()
            .map_err(|_| Unusable::Corrupt("cannot stat"))?
            .len();
        if len < ENTRIES_AT as u64 {
            return Err(Unusable::Corrupt("shorter than its fixed fields"));
        }
        let map = match fixed_fields(&file) {
            Some(fixed) if u32_at(&fixed, 8) == Some(PACK_VERSION_COMPRESSED) => {
                unpacked(dir, &path, &file, &fixed)?
            }
            _ => crate::log::map_file(&file).map_err(|_| Unusable::Corrupt("cannot map"))?,
        };
        let pack = Self::check(Bytes::Map(map))?;
        pack.bind(log)?;
        Ok(pack)
    }

    /// A pack of `bytes` checked as MSP-1 says, not bound to any log (MSP-2): what a fuzz
    /// target reads.
    ///
    /// # Errors
    /// Why it cannot be used.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, Unusable> {
        Self::check(Bytes::Heap(bytes.into_boxed_slice()))
    }

    /// MSP-1 over the bytes of a pack file.
    fn check(map: Bytes) -> Result<Self, Unusable> {
        let (seq_next, count) = check_bytes(&map)?;
        Ok(Self {
            map: Arc::new(map),
            seq_next,
            count,
            next: AtomicUsize::new(0),
        })
    }

    /// MSP-1 again over the bytes read before (MSP-4): a mapped file is read again from
    /// the page cache, or from the disk, on each access, so bytes checked once are
    /// checked again before they are returned again.
    ///
    /// # Errors
    /// Why the bytes no longer check out.
    fn check_again(&self) -> Result<(), Unusable> {
        let (seq_next, count) = check_bytes(&self.map)?;
        if (seq_next, count) == (self.seq_next, self.count) {
            Ok(())
        } else {
            Err(Unusable::Corrupt("its fixed fields changed"))
        }
    }

    /// MSP-2: the pack was written from `log`'s first `seq_next` events.
    fn bind(&self, log: &impl EventSource) -> Result<(), Unusable> {
        let crc = u32_at(&self.map, 12).unwrap_or_default();
        if bound(log, self.seq_next, crc) {
            Ok(())
        } else {
            Err(Unusable::Stale)
        }
    }

    /// The text area (MSP-1), shared: valid as long as it is held, whatever becomes of
    /// this pack.
    pub fn texts(&self) -> SharedBytes {
        let text_at = ENTRIES_AT + self.count * ENTRY;
        SharedBytes::new(self.map.clone(), text_at..self.map.len())
    }

    /// The events the pack was written after (MSP-2).
    pub fn seq_next(&self) -> u64 {
        self.seq_next
    }

    /// Every entry in file order (MSP-3): its seq and its text (`None` for a node without a
    /// message, or text that is not UTF-8, which [`Pack::message`] does not use either).
    pub fn entries(&self) -> impl Iterator<Item = (u64, Option<&str>)> + '_ {
        (0..self.count).map(|i| match self.text_of(i) {
            Lookup::Packed(text) => (self.entry(i).0, text),
            Lookup::NotPacked => (self.entry(i).0, None),
        })
    }

    /// `(seq, end)` of entry `i`.
    fn entry(&self, i: usize) -> (u64, u64) {
        let at = ENTRIES_AT + i * ENTRY;
        (
            u64_at(&self.map, at).unwrap_or_default(),
            u64_at(&self.map, at + 8).unwrap_or_default(),
        )
    }

    /// The message of node `seq` as the pack holds it (MSP-4).
    pub fn message(&self, seq: u64) -> Lookup<&str> {
        match self.find_node(seq).map(|i| self.text_of(i)) {
            Some(text) => text,
            None => Lookup::NotPacked,
        }
    }

    /// Where the message of node `seq` lies in the text area ([`Pack::texts`]) when the pack
    /// holds it (MSP-4): [`Pack::message`] without the check that the text is UTF-8, for a
    /// caller that lends the bytes and checks each text when it makes a string of it.
    pub fn span(&self, seq: u64) -> Lookup<Range<usize>> {
        match self.find_node(seq).and_then(|i| self.span_of(i)) {
            Some((span, _)) if span.is_empty() => Lookup::Packed(None),
            Some((span, _)) => Lookup::Packed(Some(span)),
            None => Lookup::NotPacked,
        }
    }

    /// The entry of node `seq`, if the pack has one.
    fn find_node(&self, seq: u64) -> Option<usize> {
        if seq >= self.seq_next {
            return None;
        }
        let guess = self.next.load(Ordering::Relaxed);
        let found = if guess < self.count && self.entry(guess).0 == seq {
            guess
        } else {
            self.find(seq)?
        };
        self.next.store(found + 1, Ordering::Relaxed);
        Some(found)
    }

    /// The text of entry `i` (MSP-3): empty for a node without a message; text that is not
    /// UTF-8 is left to the log.
    fn text_of(&self, i: usize) -> Lookup<&str> {
        match self.span_of(i) {
            Some((span, _)) if span.is_empty() => Lookup::Packed(None),
            Some((_, bytes)) => std::str::from_utf8(bytes)
                .map_or(Lookup::NotPacked, |text| Lookup::Packed(Some(text))),
            None => Lookup::NotPacked,
        }
    }

    /// Where entry `i`'s text lies in the text area (MSP-3; empty for a node without a
    /// message), and its bytes; `None` when that is not inside the file.
    fn span_of(&self, i: usize) -> Option<(Range<usize>, &[u8])> {
        let start = match i.checked_sub(1) {
            Some(before) => self.entry(before).1,
            None => 0,
        };
        let span = usize::try_from(start).ok()?..usize::try_from(self.entry(i).1).ok()?;
        let text_at = ENTRIES_AT + self.count * ENTRY;
        let bytes = self.map.get(text_at..)?.get(span.clone())?;
        Some((span, bytes))
    }

    /// The index of the entry of `seq` (binary search).
    fn find(&self, seq: u64) -> Option<usize> {
        let (mut low, mut high) = (0, self.count);
        while low < high {
            let mid = low + (high - low) / 2;
            match self.entry(mid).0.cmp(&seq) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }
}

/// MSP-1 over the bytes of a pack file: its `seq_next` and entry count when they check out.
fn check_bytes(bytes: &[u8]) -> Result<(u64, usize), Unusable> {
    if bytes.get(..8) != Some(&PACK_MAGIC[..]) {
        return Err(Unusable::Corrupt("bad magic"));
    }
    if u32_at(bytes, 8) != Some(PACK_VERSION) {
        return Err(Unusable::Version);
    }
    let field = |at| u64_at(bytes, at).ok_or(Unusable::Corrupt("short"));
    let (seq_next, count, text_len) = (field(16)?, field(24)?, field(32)?);
    let entries_len = usize::try_from(count)
        .ok()
        .and_then(|c| c.checked_mul(ENTRY))
        .ok_or(Unusable::Corrupt("count out of range"))?;
    let text_at = ENTRIES_AT
        .checked_add(entries_len)
        .ok_or(Unusable::Corrupt("count out of range"))?;
    let expected = usize::try_from(text_len)
        .ok()
        .and_then(|t| text_at.checked_add(t));
    if expected != Some(bytes.len()) {
        return Err(Unusable::Corrupt(
            "length is not 48 + 16 × count + text_len",
        ));
    }
    let (Some(fixed), Some(entries), Some(text)) = (
        bytes.get(..44),
        bytes.get(ENTRIES_AT..text_at),
        bytes.get(text_at..),
    ) else {
        return Err(Unusable::Corrupt("short"));
    };
    if u32_at(bytes, 44) != Some(crc32c::crc32c_append(crc32c::crc32c(fixed), entries)) {
        return Err(Unusable::Corrupt("crc does not match"));
    }
    if u32_at(bytes, 40) != Some(crc32c::crc32c(text)) {
        return Err(Unusable::Corrupt("text_crc does not match"));
    }
    let (mut seq_before, mut end_before) = (None::<u64>, 0);
    for entry in entries.chunks_exact(ENTRY) {
        let (seq, end) = (
            u64_at(entry, 0).unwrap_or_default(),
            u64_at(entry, 8).unwrap_or_default(),
        );
        if seq >= seq_next || seq_before.is_some_and(|before| seq <= before) {
            return Err(Unusable::Corrupt("seqs not increasing below seq_next"));
        }
        if end < end_before || end > text_len {
            return Err(Unusable::Corrupt("ends decrease or pass text_len"));
        }
        (seq_before, end_before) = (Some(seq), end);
    }
    if end_before != text_len {
        return Err(Unusable::Corrupt("the last end is not text_len"));
    }
    Ok((seq_next, entries_len / ENTRY))
}

/// A session's message pack as its log reads it (MSP-4): read and checked against the
/// log on the first message asked for, `None` inside when there is none usable; checked
/// again (MSP-1) as each later read of every message begins.
#[derive(Debug, Default)]
pub(crate) struct LazyPack {
    pack: std::sync::OnceLock<Option<Pack>>,
    /// The pack failed a check again: not used since (the messages come from the log).
    broken: AtomicBool,
}

impl LazyPack {
    /// The message of node `seq` of `log`: from the pack of session directory `dir` when it
    /// has the node, from the log record otherwise.
    ///
    /// # Errors
    /// The error reading the record.
    pub(crate) fn message_at<'a>(
        &'a self,
        storage: &dyn Storage,
        dir: &Path,
        log: &'a impl EventSource,
        seq: u64,
    ) -> crate::Result<Option<&'a str>> {
        if let Some(Lookup::Packed(message)) = self.get(storage, dir, log).map(|p| p.message(seq)) {
            return Ok(message);
        }
        Ok(log.event_at(seq)?.message())
    }

    /// [`LazyPack::message_at`], with a message the pack holds as its span of the pack's
    /// text area ([`Pack::span`]: its bytes not checked as UTF-8).
    ///
    /// # Errors
    /// The error reading the record.
    pub(crate) fn lent_message_at<'a>(
        &'a self,
        storage: &dyn Storage,
        dir: &Path,
        log: &'a impl EventSource,
        seq: u64,
    ) -> crate::Result<Option<MessageText<'a>>> {
        if let Some(Lookup::Packed(span)) = self.get(storage, dir, log).map(|p| p.span(seq)) {
            return Ok(span.map(MessageText::Lent));
        }
        Ok(log.event_at(seq)?.message().map(MessageText::Text))
    }

    /// RD-9: passes on to `log` the seqs of `seqs` whose messages it will read, those past
    /// the events of the pack of session directory `dir` (read and checked against `log` now
    /// when it was not yet, as [`LazyPack::message_at`] does), or all of them when there
    /// is no usable pack. A node the pack lacks below its `seq_next` (its text not UTF-8,
    /// MSP-3) is read without a hint.
    pub(crate) fn read_ahead(
        &self,
        storage: &dyn Storage,
        dir: &Path,
        log: &impl EventSource,
        seqs: &[u64],
    ) {
        match self.get(storage, dir, log).map(Pack::seq_next) {
            None => log.read_ahead(seqs),
            Some(covered) => {
                if seqs.iter().any(|&seq| seq >= covered) {
                    let rest: Vec<u64> = seqs.iter().copied().filter(|&s| s >= covered).collect();
                    log.read_ahead(&rest);
                }
            }
        }
    }

    /// The text area of the pack of session directory `dir` (read and checked against
    /// `log` now when it was not yet, as [`LazyPack::message_at`] does), `None` when there
    /// is no usable pack.
    pub(crate) fn texts(
        &self,
        storage: &dyn Storage,
        dir: &Path,
        log: &impl EventSource,
    ) -> Option<SharedBytes> {
        self.get(storage, dir, log).map(Pack::texts)
    }

    /// The pack of session directory `dir`, read and checked against `log` on the first
    /// call (MSP-1, MSP-2); `None` when there is no usable one.
    fn get(&self, storage: &dyn Storage, dir: &Path, log: &impl EventSource) -> Option<&Pack> {
        if self.broken.load(Ordering::Acquire) {
            return None;
        }
        self.pack
            .get_or_init(|| load_traced(storage, dir, log))
            .as_ref()
    }

    /// MSP-4: a read of every message begins. A pack read before is checked again (MSP-1);
    /// one that fails is not used from now on (traced as a load that fails is). A pack not
    /// read yet is checked when this read loads it. No other read's check stands for this
    /// one's: a count of the reads under way, shared by reads that overlap, could stay
    /// above zero (a read that never ends, its caller's visit panicking; reads that keep
    /// overlapping) and have every later read skip its check.
    pub(crate) fn read_begins(&self, dir: &Path) {
        let Some(Some(pack)) = self.pack.get() else {
            return;
        };
        if self.broken.load(Ordering::Acquire) {
            return;
        }
        if let Err(why) = pack.check_again() {
            tracing::warn!(
                target: "surfacelog",
                dir = %dir.display(),
                ?why,
                "message pack changed since it was read: no longer used (message-pack.md MSP-4)"
            );
            self.broken.store(true, Ordering::Release);
        }
    }

    /// Whether the pack was read and found unusable, or failed a check since.
    pub(crate) fn unusable(&self) -> bool {
        matches!(self.pack.get(), Some(None)) || self.broken.load(Ordering::Acquire)
    }
}

/// [`Pack::load`]: `None` when there is no usable pack, the reason traced (`warn`) when
/// there is a file that is not used.
fn load_traced(storage: &dyn Storage, dir: &Path, log: &impl EventSource) -> Option<Pack> {
    match Pack::load(storage, dir, log) {
        Ok(pack) => Some(pack),
        Err(Unusable::Missing) => None,
        Err(why) => {
            tracing::warn!(
                target: "surfacelog",
                dir = %dir.display(),
                ?why,
                "message pack ignored (message-pack.md MSP-1, MSP-2)"
            );
            None
        }
    }
}

/// Whether a writer whose pack covers `covered_before` (its `seq_next`, 0 without one)
/// writes a new one for `surface` (MSP-5).
pub fn due(surface: &Surface, covered_before: u64, pack_min: u64) -> bool {
    if pack_min == 0 || surface.nodes_lost() {
        return false;
    }
    let nodes = surface.nodes();
    let fresh = nodes.iter().filter(|&&seq| seq >= covered_before).count() as u64;
    let covered = nodes.len() as u64 - fresh;
    fresh >= pack_min && fresh.saturating_mul(4) >= covered
}

/// Writes the pack of `surface`, every message read from its record in `log` (MSP-3:
/// never through another pack), to `dir`'s `messages` file (MSP-6), and returns its
/// `seq_next`.
///
/// # Errors
/// The error reading a message (`CORRUPT`), or writing or renaming the file.
pub fn write(
    storage: &dyn Storage,
    dir: &Path,
    surface: &Surface,
    log: &impl EventSource,
) -> crate::Result<u64> {
    let (seqs, seq_next, last_text_crc) = contents(dir, surface, log)?;
    stream(storage, dir, &seqs, seq_next, last_text_crc, log)?;
    Ok(seq_next)
}

/// [`write`] of the pack [`contents`] gave, streamed through the bounded buffer of
/// [`build`] (MSP-6).
fn stream(
    storage: &dyn Storage,
    dir: &Path,
    seqs: &[u64],
    seq_next: u64,
    last_text_crc: u32,
    log: &impl EventSource,
) -> crate::Result<()> {
    use crate::Error;
    install(storage, dir, |tmp| {
        let file = storage
            .create_file(tmp, 0)
            .map_err(|e| Error::io("create", tmp, &e))?;
        build(seqs, seq_next, last_text_crc, log, &mut |offset, bytes| {
            storage
                .write_at(&file, offset, bytes)
                .map_err(|e| Error::io("write", tmp, &e))
        })
    })
}

/// [`write`] of a pack compressed at Zstandard level `level` (MSP-8): built in memory,
/// compressed, written, and read back and decompressed to the same bytes before it takes
/// the name. Written plain when compressing would not shrink it; streamed as [`write`]
/// writes it (MSP-6, a bounded buffer) when its logical length passes
/// [`PACK_IN_MEMORY_MAX`]: a session's close never holds more of it.
///
/// # Errors
/// As [`write`]; `CORRUPT` when the written file does not read back.
#[cfg(feature = "compress")]
pub(crate) fn write_compressed(
    storage: &dyn Storage,
    dir: &Path,
    surface: &Surface,
    log: &impl EventSource,
    level: i32,
) -> crate::Result<u64> {
    write_compressed_within(storage, dir, surface, log, level, PACK_IN_MEMORY_MAX)
}

/// The largest logical pack a writer builds in memory to compress it (MSP-8): larger ones
/// are streamed plain. A session's pack of the 1M-event workload is 25 MB.
#[cfg(feature = "compress")]
pub(crate) const PACK_IN_MEMORY_MAX: u64 = 32 << 20;

/// [`write_compressed`] of a pack compressed only when its logical length is at most
/// `logical_max` bytes: past it, the in-memory build stops and [`write`] streams it.
#[cfg(feature = "compress")]
fn write_compressed_within(
    storage: &dyn Storage,
    dir: &Path,
    surface: &Surface,
    log: &impl EventSource,
    level: i32,
    logical_max: u64,
) -> crate::Result<u64> {
    let (seqs, seq_next, last_text_crc) = contents(dir, surface, log)?;
    let mut bytes = Vec::new();
    let mut too_large = false;
    let built = build(&seqs, seq_next, last_text_crc, log, &mut |offset, chunk| {
        // Not compressed (MSP-8): it is not held whole either.
        if offset.saturating_add(chunk.len() as u64) > logical_max {
            too_large = true;
            return Err(crate::Error::from(crate::error::ErrorKind::Corrupt {
                location: dir.join(PACK_FILE).display().to_string(),
                reason: "a pack too large to compress (MSP-8)".to_owned(),
            }));
        }
        // The texts come in order after a gap for the entries, which come last, then the
        // fixed fields before them.
        let at = usize::try_from(offset).unwrap_or(usize::MAX);
        if at >= bytes.len() {
            bytes.resize(at, 0);
            bytes.extend_from_slice(chunk);
            return Ok(());
        }
        let end = at + chunk.len();
        if end > bytes.len() {
            bytes.resize(end, 0);
        }
        if let Some(place) = bytes.get_mut(at..end) {
            place.copy_from_slice(chunk);
        }
        Ok(())
    });
    if too_large {
        drop(bytes);
        stream(storage, dir, &seqs, seq_next, last_text_crc, log)?;
        return Ok(seq_next);
    }
    built?;
    if install_bytes(storage, dir, &bytes, level)?.is_none() {
        install(storage, dir, |tmp| {
            created_with(storage, tmp, &bytes).map(drop)
        })?;
    }
    Ok(seq_next)
}

/// The new file `tmp`, holding `bytes`.
#[cfg(feature = "compress")]
fn created_with(storage: &dyn Storage, tmp: &Path, bytes: &[u8]) -> crate::Result<std::fs::File> {
    let file = storage
        .create_file(tmp, 0)
        .map_err(|e| crate::Error::io("create", tmp, &e))?;
    storage
        .write_at(&file, 0, bytes)
        .map_err(|e| crate::Error::io("write", tmp, &e))?;
    Ok(file)
}

/// What a pack of `surface` holds besides its texts: its nodes, sorted; its `seq_next`;
/// and the CRC of the log's last text (MSP-2).
fn contents(
    dir: &Path,
    surface: &Surface,
    log: &impl EventSource,
) -> crate::Result<(Vec<u64>, u64, u32)> {
    let seq_next = surface.seq_next();
    let last = seq_next.checked_sub(1).ok_or_else(|| {
        crate::Error::from(crate::error::ErrorKind::Corrupt {
            location: dir.join(PACK_FILE).display().to_string(),
            reason: "an empty log has no message pack".to_owned(),
        })
    })?;
    let last_text_crc = crc32c::crc32c(log.event_at(last)?.text().as_bytes());
    let mut seqs = surface.nodes().to_vec();
    seqs.sort_unstable();
    Ok((seqs, seq_next, last_text_crc))
}

/// MSP-6: writes `messages.tmp` with `fill` and renames it over `messages`; a temporary
/// file is never left behind (it would hold the texts until the next pack).
fn install(
    storage: &dyn Storage,
    dir: &Path,
    fill: impl FnOnce(&Path) -> crate::Result<()>,
) -> crate::Result<()> {
    let tmp = dir.join(format!("{PACK_FILE}.tmp"));
    let path = dir.join(PACK_FILE);
    let _ = storage.remove_file(&tmp);
    let renamed = fill(&tmp).and_then(|()| {
        storage
            .rename(&tmp, &path)
            .map_err(|e| crate::Error::io("rename", &path, &e))
    });
    if renamed.is_err() {
        let _ = storage.remove_file(&tmp);
    }
    renamed
}

/// The version 1 pack of the nodes `seqs` (sorted), handed to `write_at` piece by piece
/// at their offsets (MSP-1, MSP-3).
fn build(
    seqs: &[u64],
    seq_next: u64,
    last_text_crc: u32,
    log: &impl EventSource,
    write_at: &mut dyn FnMut(u64, &[u8]) -> crate::Result<()>,
) -> crate::Result<()> {
    // One pass: each message read (verified, REC-4) once, its text streamed through a
    // bounded buffer into the text area, which starts after the entries (their number is
    // the surface's), and its entry kept; the entries and the fixed fields are written
    // last.
    let text_at = (ENTRIES_AT + seqs.len() * ENTRY) as u64;
    let mut entries = Vec::with_capacity(seqs.len() * ENTRY);
    let (mut buffer, mut written, mut text_crc) = (Vec::with_capacity(WRITE_BUFFER), 0u64, 0);
    for &seq in seqs {
        if let Some(text) = log.event_at(seq)?.message() {
            if buffer.len() + text.len() > WRITE_BUFFER && !buffer.is_empty() {
                text_crc = crc32c::crc32c_append(text_crc, &buffer);
                write_at(text_at + written, &buffer)?;
                written += buffer.len() as u64;
                buffer.clear();
            }
            buffer.extend_from_slice(text.as_bytes());
        }
        let end = written + buffer.len() as u64;
        entries.extend_from_slice(&seq.to_le_bytes());
        entries.extend_from_slice(&end.to_le_bytes());
    }
    text_crc = crc32c::crc32c_append(text_crc, &buffer);
    write_at(text_at + written, &buffer)?;
    let text_len = written + buffer.len() as u64;
    let mut fixed = Vec::with_capacity(ENTRIES_AT);
    fixed.extend_from_slice(&PACK_MAGIC);
    fixed.extend_from_slice(&PACK_VERSION.to_le_bytes());
    fixed.extend_from_slice(&last_text_crc.to_le_bytes());
    fixed.extend_from_slice(&seq_next.to_le_bytes());
    fixed.extend_from_slice(&(seqs.len() as u64).to_le_bytes());
    fixed.extend_from_slice(&text_len.to_le_bytes());
    fixed.extend_from_slice(&text_crc.to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&fixed), &entries);
    fixed.extend_from_slice(&crc.to_le_bytes());
    write_at(ENTRIES_AT as u64, &entries)?;
    // MSP-6: no sync (a cache, as an index is, IDX-2): a crash may leave the file torn
    // under its name, which MSP-1 refuses, or the old pack, still bound to its log.
    write_at(0, &fixed)
}

/// MSP-2: a pack of `seq_next` events whose last text has the CRC `last_text_crc` was
/// written from `log`'s first events.
fn bound(log: &impl EventSource, seq_next: u64, last_text_crc: u32) -> bool {
    let Some(last) = seq_next.checked_sub(1) else {
        return false;
    };
    if seq_next > log.seq_next() {
        return false;
    }
    matches!(
        log.event(last),
        Ok(Some(event)) if crc32c::crc32c(event.text().as_bytes()) == last_text_crc
    )
}

/// `seq_next` and `last_text_crc` of the pack file at `path` when its fixed fields are
/// this version's, compressed or not (MSP-8), nothing else checked.
fn header(storage: &dyn Storage, path: &Path) -> Option<(u64, u32)> {
    use std::io::Read;
    let mut fixed = [0; 24];
    storage.open_read(path).ok()?.read_exact(&mut fixed).ok()?;
    // MSP-8: a build without the `compress` feature cannot read version 2.
    let readable = |version| {
        version == PACK_VERSION
            || (cfg!(feature = "compress") && version == PACK_VERSION_COMPRESSED)
    };
    let ours = fixed.get(..8) == Some(&PACK_MAGIC[..]) && u32_at(&fixed, 8).is_some_and(readable);
    if !ours {
        return None;
    }
    Some((u64_at(&fixed, 16)?, u32_at(&fixed, 12)?))
}

/// The fixed fields of the pack `file` (its first 48 bytes), read with `pread`.
fn fixed_fields(file: &std::fs::File) -> Option<[u8; ENTRIES_AT]> {
    use std::os::unix::fs::FileExt;
    let mut fixed = [0; ENTRIES_AT];
    file.read_exact_at(&mut fixed, 0).ok()?;
    Some(fixed)
}

/// MSP-8: the version 1 pack a compressed pack stands for: its fixed fields with version
/// 1, `48 + 16 × count + text_len` bytes in all.
#[cfg(feature = "compress")]
fn logical_of(fixed: &[u8; ENTRIES_AT]) -> Option<crate::log::compressed::Logical> {
    let count = u64_at(fixed, 24)?;
    let text_len = u64_at(fixed, 32)?;
    let len = count
        .checked_mul(ENTRY as u64)?
        .checked_add(text_len)?
        .checked_add(ENTRIES_AT as u64)?;
    let mut head = fixed.to_vec();
    head.get_mut(8..12)?
        .copy_from_slice(&PACK_VERSION.to_le_bytes());
    Some(crate::log::compressed::Logical {
        head,
        len,
        records: None,
    })
}

/// MSP-8: the compressed pack `file` (at `path`, whose fixed fields are `fixed`)
/// decompressed, every block checked, into an unlinked temporary file in the session
/// directory `dir`, and that file's map (log-format.md CZ-4): the version 1 pack it stands
/// for, which MSP-1 then checks as any other.
///
/// # Errors
/// `Corrupt` when it does not decompress and check out.
#[cfg(feature = "compress")]
fn unpacked(
    dir: &Path,
    path: &Path,
    file: &std::fs::File,
    fixed: &[u8; ENTRIES_AT],
) -> Result<Mmap, Unusable> {
    let logical = logical_of(fixed).ok_or(Unusable::Corrupt("count or text_len out of range"))?;
    crate::log::compressed::materialize_logical(dir, path, file, &logical)
        .map(|(_, map)| map)
        .map_err(|_| Unusable::Corrupt("a compressed pack that does not decompress (MSP-8)"))
}

/// Without the `compress` feature a compressed pack is another version (MSP-1).
#[cfg(not(feature = "compress"))]
fn unpacked(
    _dir: &Path,
    _path: &Path,
    _file: &std::fs::File,
    _fixed: &[u8; ENTRIES_AT],
) -> Result<Mmap, Unusable> {
    Err(Unusable::Version)
}

/// MSP-8: replaces the version 1 pack of the session directory `dir`, when it checks out
/// (MSP-1), by its compressed form at Zstandard level `level` ([`install_bytes`]). Its
/// length before and after, or `None` when there is no such pack or it would not shrink.
/// A failure leaves the old pack (a cache: never an error for the session).
///
/// # Errors
/// `IO`, `CORRUPT` when the written file does not read back.
#[cfg(feature = "compress")]
pub(crate) fn compress(
    storage: &dyn Storage,
    dir: &Path,
    level: i32,
) -> crate::Result<Option<(u64, u64)>> {
    let path = dir.join(PACK_FILE);
    let Ok(bytes) = crate::storage::read_file(storage, &path) else {
        return Ok(None);
    };
    if check_bytes(&bytes).is_err() {
        return Ok(None);
    }
    match install_bytes(storage, dir, &bytes, level)? {
        Some(packed) => Ok(Some((bytes.len() as u64, packed))),
        None => Ok(None),
    }
}

/// MSP-8: installs the version 1 pack `bytes` as `dir`'s pack, compressed at Zstandard
/// level `level`, through `messages.tmp` as MSP-6 writes one, after reading the new file
/// back and decompressing it to the same bytes; its compressed length. `None`, with
/// nothing written, when compressing would not shrink it or it is too large for a
/// compressed pack.
///
/// # Errors
/// `IO`, `CORRUPT` when the written file does not read back.
#[cfg(feature = "compress")]
fn install_bytes(
    storage: &dyn Storage,
    dir: &Path,
    bytes: &[u8],
    level: i32,
) -> crate::Result<Option<u64>> {
    use crate::Error;
    let layout = bytes
        .get(..ENTRIES_AT)
        .and_then(|b| <[u8; ENTRIES_AT]>::try_from(b).ok())
        .and_then(|fixed| logical_of(&fixed).map(|layout| (fixed, layout)));
    let Some((fixed, layout)) = layout.filter(|(_, l)| u32::try_from(l.len).is_ok()) else {
        return Ok(None);
    };
    let mut stored = fixed;
    if let Some(version) = stored.get_mut(8..12) {
        version.copy_from_slice(&PACK_VERSION_COMPRESSED.to_le_bytes());
    }
    let path = dir.join(PACK_FILE);
    let packed = crate::log::compressed::compress_logical(
        &stored,
        bytes,
        crate::log::compressed::BLOCK_BYTES,
        level,
    )
    .map_err(|e| Error::io("compress", &path, &e))?;
    if packed.len() >= bytes.len() {
        return Ok(None);
    }
    install(storage, dir, |tmp| {
        let file = created_with(storage, tmp, &packed)?;
        crate::log::compressed::check_logical(&file, tmp, &layout, bytes)
    })?;
    Ok(Some(packed.len() as u64))
}

/// The `seq_next` of the pack file at `path` when its fixed fields are this version's,
/// without checking anything else: what salvage and fork need (MSP-6, MSP-7).
pub fn covered_len(storage: &dyn Storage, path: &Path) -> Option<u64> {
    header(storage, path).map(|(seq_next, _)| seq_next)
}

/// The `seq_next` of the pack of session directory `dir` when it is bound to `log`
/// (MSP-2, its fixed fields read, one event of the log read), 0 otherwise: what the
/// writer's MSP-5 counts from.
pub(crate) fn bound_len(storage: &dyn Storage, dir: &Path, log: &impl EventSource) -> u64 {
    match header(storage, &dir.join(PACK_FILE)) {
        Some((seq_next, crc)) if bound(log, seq_next, crc) => seq_next,
        _ => 0,
    }
}

/// MSP-7: a writer opening a log of `len` events removes a pack written from a longer
/// one (a salvage cut the log under it), before anything is appended, so that a log
/// regrown past the pack never meets it.
///
/// # Errors
/// The error removing it (`IO`): opening the log fails rather than keep it.
pub(crate) fn remove_if_ahead(storage: &dyn Storage, dir: &Path, len: u64) -> crate::Result<()> {
    let path = dir.join(PACK_FILE);
    if covered_len(storage, &path).is_some_and(|covered| covered > len) {
        storage
            .remove_file(&path)
            .map_err(|e| crate::Error::io("remove", &path, &e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MSP-5's claims, on a surface that only grows (one node per event, the seqs
    /// `0..n`), flushed every `step` events: the texts written over the session's life add
    /// up to about five times its final pack (a geometric series of ratio 4/5, plus what
    /// `pack_min` and the flush interval round up), and once past `pack_min` nodes, at most
    /// a fifth of them (plus one flush's worth) is ever outside the pack.
    #[test]
    #[expect(
        clippy::cast_precision_loss,
        reason = "ratios of counts far below 2^52"
    )]
    fn a_growing_surface_is_packed_a_bounded_number_of_times() {
        // (pack_min, flush interval, final length): each flush builds a surface, so the
        // length is kept to a few thousand flushes.
        let runs = [
            (1_024, 97, 100_000),
            (16, 5, 10_000),
            (1, 1, 3_000),
            (1_024, 10_000, 500_000),
        ];
        for (pack_min, step, end) in runs {
            let (mut covered, mut written) = (0u64, 0u64);
            let mut n = 0;
            while n < end {
                n = (n + step).min(end);
                let surface = Surface::from_parts((0..n).collect(), Vec::new(), 0, n).unwrap();
                if due(&surface, covered, pack_min) {
                    written += n;
                    covered = n;
                }
                let fresh = n - covered;
                if n >= 5 * pack_min {
                    assert!(
                        fresh <= n / 5 + step,
                        "{fresh} of {n} nodes unpacked (pack_min {pack_min}, step {step})"
                    );
                }
            }
            let amplification = written as f64 / covered as f64;
            assert!(
                amplification <= 5.5,
                "{amplification:.2}x (pack_min {pack_min}, step {step})"
            );
        }
        // 0 never packs; a surface whose nodes were lost never does either (CKP-2).
        let surface = Surface::from_parts((0..5_000).collect(), Vec::new(), 0, 5_000).unwrap();
        assert!(!due(&surface, 0, 0));
        assert!(due(&surface, 0, 1_024));
    }

    /// A log of `n` events, each with a message, and the surface of all of them.
    #[cfg(feature = "compress")]
    fn messages_log(n: u64) -> (crate::event::MemLog, Surface) {
        let mut log = crate::event::MemLog::new();
        for seq in 0..n {
            let text = format!(
                r#"{{"type":"user/message","seq":{seq},"time":0,"data":{{"text":"message {} of a session that repeats itself"}}}}"#,
                seq % 7
            );
            let data = text.find(r#"{"text""#).unwrap()..text.len() - 1;
            let message = data.start + 9..data.end - 1;
            let fields = crate::event::EventFields {
                event_type: "user/message".into(),
                seq,
                time: 0,
                surface_op: None,
                sources: None,
                ignorable: false,
            };
            log.push(crate::event::Event::new(text, data, Some(message), fields));
        }
        let surface = Surface::from_parts((0..n).collect(), Vec::new(), 0, n).unwrap();
        (log, surface)
    }

    /// MSP-8, MSP-6: a compact store's pack is built in memory only up to a limit
    /// ([`PACK_IN_MEMORY_MAX`]): one whose logical length passes it is streamed as a plain
    /// pack through the bounded buffer instead, the very bytes [`write`] writes, and no
    /// `messages.tmp` is left. Within the limit it is compressed. (Fails when the
    /// in-memory build goes on past the limit: a session's close then holds its whole
    /// pack in memory.)
    #[cfg(feature = "compress")]
    #[test]
    fn a_pack_too_large_to_compress_is_streamed_not_built_in_memory() {
        let (log, surface) = messages_log(2_000);
        let storage = crate::storage::FsStorage;
        let plain = tempfile::tempdir().unwrap();
        assert_eq!(
            write(&storage, plain.path(), &surface, &log).unwrap(),
            2_000
        );
        let expected = std::fs::read(plain.path().join(PACK_FILE)).unwrap();
        let version = |bytes: &[u8]| u32_at(bytes, 8);
        assert_eq!(version(&expected), Some(PACK_VERSION));
        for limit in [0, 48, expected.len() as u64 / 2, expected.len() as u64 - 1] {
            let dir = tempfile::tempdir().unwrap();
            let written =
                write_compressed_within(&storage, dir.path(), &surface, &log, 1, limit).unwrap();
            assert_eq!(written, 2_000);
            let pack = std::fs::read(dir.path().join(PACK_FILE)).unwrap();
            assert!(pack == expected, "limit {limit}: not the plain pack");
            assert!(!dir.path().join(format!("{PACK_FILE}.tmp")).exists());
        }
        let dir = tempfile::tempdir().unwrap();
        let limit = expected.len() as u64;
        write_compressed_within(&storage, dir.path(), &surface, &log, 1, limit).unwrap();
        let pack = std::fs::read(dir.path().join(PACK_FILE)).unwrap();
        assert_eq!(version(&pack), Some(PACK_VERSION_COMPRESSED));
        assert!(pack.len() < expected.len());
        assert!(!dir.path().join(format!("{PACK_FILE}.tmp")).exists());
    }
}
