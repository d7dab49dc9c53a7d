//! DSH JSONL logs (`dsh-formats.md` §3, §5, §6): raw `session.jsonl` and Zstandard
//! `session.jsonl.zstd`, read as a stream and written byte-exact.
//!
//! Reading follows the reference loader's scan: the header record (HDR-3 to HDR-7), then
//! one storage record per line, packed rows decoded (ROW-8 to ROW-10), a torn tail
//! dropped and reported, and damage before a committed `turn/end` refused as `CORRUPT`
//! (RAW-3 to RAW-6, ZST-5 to ZST-16). The file is never written.
//!
//! Writing produces what the reference writer produces: the header line (HDR-1, HDR-2),
//! then every event as its stored JSON text, runs of three or more packable deltas packed
//! into rows (ROW-3 to ROW-7). A file the reference wrote and surfacelog imported is
//! therefore exported byte for byte.

use std::borrow::Cow;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::{legacy, rows};
use crate::error::{Error, ErrorKind, Result};
use crate::event::{EventSource, Header};
use crate::json::{
    Batch, Json, JsonErrorKind, Kind, Value, push_js_number, push_js_string, write_js,
};
use crate::limits::MAX_EVENT_BYTES_DEFAULT;

/// How a JSONL log is framed on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Raw text, `session.jsonl` (§5).
    None,
    /// A concatenation of Zstandard frames, `session.jsonl.zstd` (§6).
    Zstd,
}

/// The longest storage record (one line) a reader accepts. The format sets no bound; this
/// one keeps memory bounded on hostile input. It is the default `max_event_bytes`, so every
/// event a default session accepts fits.
pub const RECORD_BYTES_MAX: usize = MAX_EVENT_BYTES_DEFAULT;

/// How many plaintext bytes the writer puts in one Zstandard frame, at most (a record
/// larger than this gets a frame of its own). Each frame after the first is one batch to
/// a reader (ZST-3).
pub const FRAME_PLAINTEXT_BYTES: usize = 1 << 20;

/// How many consecutive `assistant/chunk` events the writer gathers before it packs and
/// writes those it can: all but a run of deltas still going on, which stays one row
/// however long (ROW-4), and is held until twice as many are gathered. Memory is bounded
/// by this many events plus twice the longest run.
pub const RUN_EVENTS_MAX: usize = 1 << 16;

/// What a scan of the records found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// Storage records accepted (lines after the header).
    pub records: u64,
    /// Logical events accepted (packed rows expanded).
    pub events: u64,
    /// The torn tail that was dropped, if any (RAW-6, ZST-11).
    pub torn: Option<TornTail>,
}

/// A dropped torn tail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The byte offset the file would be truncated to (`truncatedTo`).
    pub offset: u64,
    /// Why the tail is torn.
    pub reason: String,
}

/// What a [`JsonlReader`] reads: a file, or any byte source that can seek like one (a
/// Zstandard log's frames are found by skipping their blocks, then decoded from where
/// they lie, so no frame is held in memory whole).
pub trait Source: Read + Seek {}

impl<T: Read + Seek> Source for T {}

/// A JSONL log opened for reading: its header record has been read and checked.
pub struct JsonlReader {
    path: PathBuf,
    compression: Compression,
    file: BufReader<Box<dyn Source>>,
    /// The source's length when it was opened: bytes appended later are not read.
    len: u64,
    /// Zstandard: what decoding one frame leaves for the next.
    decoding: Decoding,
    /// The header record's JSON text (HDR-4), without its line feed.
    header: String,
    id: String,
    /// Raw mode: bytes of the first chunk read after the header's line feed.
    rest: Vec<u8>,
    /// Bytes of the file consumed so far.
    offset: u64,
}

impl std::fmt::Debug for JsonlReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonlReader")
            .field("path", &self.path)
            .field("compression", &self.compression)
            .field("id", &self.id)
            .field("offset", &self.offset)
            .finish_non_exhaustive()
    }
}

impl JsonlReader {
    /// Opens `path` and reads its header record (HDR-3 to HDR-7).
    ///
    /// `path` must be a regular file and not a symbolic link: it is opened with
    /// `O_NOFOLLOW | O_NONBLOCK` and checked with `fstat` before anything is read, so a
    /// FIFO or a device is refused at once instead of blocking or being read without end.
    ///
    /// # Errors
    /// `IO`; `UNSAFE_PATH` for a symbolic link or a file that is not regular; `CORRUPT`
    /// for a file without a header record, a header that is not JSON or not a session
    /// header; `FORMAT_VERSION` for a header of another version (HDR-5).
    pub fn open(path: &Path, compression: Compression) -> Result<Self> {
        let file = crate::storage::open_regular(path).map_err(|e| Error::io("open", path, &e))?;
        Self::from_reader(Box::new(file), path, compression)
    }

    /// [`JsonlReader::open`] over any seekable byte source, read from its start; `name`
    /// is what errors call it.
    ///
    /// # Errors
    /// As [`JsonlReader::open`].
    pub fn from_reader(
        mut source: Box<dyn Source>,
        name: &Path,
        compression: Compression,
    ) -> Result<Self> {
        let len = source
            .seek(SeekFrom::End(0))
            .and_then(|len| source.rewind().map(|()| len))
            .map_err(|e| Error::io("seek", name, &e))?;
        let mut reader = Self {
            path: name.to_owned(),
            compression,
            file: BufReader::with_capacity(1 << 20, source),
            len,
            decoding: Decoding::default(),
            header: String::new(),
            id: String::new(),
            rest: Vec::new(),
            offset: 0,
        };
        let record = match compression {
            Compression::None => reader.raw_header()?,
            Compression::Zstd => reader.zstd_header()?,
        };
        let text = String::from_utf8_lossy(&record[..record.len() - 1]).into_owned();
        let (header, id) = check_header(&text).map_err(|e| reader.locate(e))?;
        reader.header = header;
        reader.id = id;
        Ok(reader)
    }

    /// The header record's JSON text, as stored (unknown keys kept, HDR-14).
    pub fn header(&self) -> &str {
        &self.header
    }

    /// The session id the header names.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Streams the logical events to `each`, in seq order, parsed; `progress` is
    /// told the number of file bytes consumed so far, now and then.
    ///
    /// # Errors
    /// `CORRUPT` with the file and line for damage before a committed `turn/end`
    /// (RAW-4) or inside complete Zstandard frames (ZST-6 to ZST-15); `IO`; the first
    /// error `each` returns, which ends the scan.
    pub fn read_events(
        self,
        each: &mut dyn FnMut(&Json<'_>) -> Result<()>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Scan> {
        self.read_events_at(&mut |event, _| each(event), progress)
    }

    /// [`JsonlReader::read_events`], telling `each` where in the file each event is: the
    /// byte offset of its record (raw) or of the frame its record ends in (Zstandard),
    /// for a refusal of the event to name (LOAD-7).
    ///
    /// # Errors
    /// As [`JsonlReader::read_events`].
    pub fn read_events_at(
        mut self,
        each: &mut dyn FnMut(&Json<'_>, u64) -> Result<()>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Scan> {
        let mut scanner = Scanner::new(self.offset);
        let result = match self.compression {
            Compression::None => self.raw_events(&mut scanner, each, progress),
            Compression::Zstd => self.zstd_events(&mut scanner, each, progress),
        };
        result.map_err(|e| self.locate(e))
    }

    /// HDR-3, raw: the bytes up to and including the first line feed.
    fn raw_header(&mut self) -> Result<Vec<u8>> {
        let mut record = Vec::new();
        let read = (&mut self.file)
            .take(RECORD_BYTES_MAX as u64 + 1)
            .read_until(b'\n', &mut record)
            .map_err(|e| Error::io("read", &self.path, &e))?;
        if record.last() != Some(&b'\n') {
            let reason = if read > RECORD_BYTES_MAX {
                "the header record is longer than the record limit"
            } else {
                "empty or header-less log: no line feed"
            };
            return Err(corrupt(&self.path, "line 1", reason));
        }
        self.offset = record.len() as u64;
        Ok(record)
    }

    /// HDR-3 and ZST-14: the plaintext of the first complete frame, one line exactly.
    fn zstd_header(&mut self) -> Result<Vec<u8>> {
        let len = match next_frame(&mut self.file, 0, self.len, &self.path)? {
            Frame::Complete(len) => len,
            Frame::Torn(_) | Frame::End => {
                let reason = "empty or header-less log: no complete first frame (ZST-12)";
                return Err(corrupt(&self.path, "byte 0", reason));
            }
        };
        let mut plain = Vec::new();
        decode_frame(
            &mut self.file,
            (0, len),
            &self.path,
            &mut self.decoding,
            &mut |piece| {
                plain.extend_from_slice(piece);
                if plain.len() > RECORD_BYTES_MAX {
                    let reason = "the header record is longer than the record limit";
                    return Err(corrupt(&self.path, "byte 0", reason));
                }
                Ok(())
            },
        )?;
        let one_line = plain
            .split_last()
            .is_some_and(|(last, before)| *last == b'\n' && !before.contains(&b'\n'));
        if !one_line {
            let reason = "the first frame does not hold exactly one line (ZST-14)";
            return Err(corrupt(&self.path, "byte 0", reason));
        }
        self.offset = len;
        Ok(plain)
    }

    /// RAW-3 to RAW-6: records are split at line feeds; the bytes after the last one are
    /// torn.
    fn raw_events(
        &mut self,
        scanner: &mut Scanner,
        each: &mut dyn FnMut(&Json<'_>, u64) -> Result<()>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Scan> {
        let mut chunk = vec![0; 1 << 20];
        let rest = std::mem::take(&mut self.rest);
        scanner.feed(&rest, each)?;
        loop {
            let n = match self.file.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io("read", &self.path, &e)),
            };
            scanner.feed(&chunk[..n], each)?;
            progress(scanner.end);
        }
        progress(scanner.end);
        Ok(scanner.finish_torn())
    }

    /// ZST-5 to ZST-16: complete frames must scan clean; a torn last frame yields what its
    /// bytes decode to, and is dropped.
    fn zstd_events(
        &mut self,
        scanner: &mut Scanner,
        each: &mut dyn FnMut(&Json<'_>, u64) -> Result<()>,
        progress: &mut dyn FnMut(u64),
    ) -> Result<Scan> {
        loop {
            let start = self.offset;
            match next_frame(&mut self.file, start, self.len, &self.path)? {
                Frame::End => break,
                Frame::Complete(len) => {
                    let frame = (start, len);
                    scanner.frame_at = Some(start);
                    decode_frame(
                        &mut self.file,
                        frame,
                        &self.path,
                        &mut self.decoding,
                        &mut |piece| scanner.feed(piece, each),
                    )?;
                    self.offset += len;
                    progress(self.offset);
                }
                Frame::Torn(len) => {
                    // ZST-15 first: what the complete frames held must have scanned clean.
                    scanner.require_clean()?;
                    scanner.frame_at = Some(start);
                    // ZST-16: a decoder error yields no output at all, so the frame is
                    // decoded once to find out, then again into the scanner, a piece at a
                    // time: memory stays bounded by the record limit, not the plaintext.
                    let (file, decoding) = (&mut self.file, &mut self.decoding);
                    if decode_torn(file, len, &self.path, decoding, &mut |_| Ok(()))? {
                        decode_torn(file, len, &self.path, decoding, &mut |piece| {
                            scanner.feed(piece, each)
                        })?;
                    }
                    let mut scan = scanner.finish_torn();
                    scan.torn = Some(TornTail {
                        offset: start,
                        reason: format!("torn last frame at byte {start} (ZST-11)"),
                    });
                    return Ok(scan);
                }
            }
        }
        scanner.require_clean()?;
        Ok(scanner.finish_torn())
    }

    /// Names the file in a `CORRUPT` location that gives only a line or byte.
    fn locate(&self, error: Error) -> Error {
        locate(&self.path, error)
    }
}

/// A `CORRUPT` error whose location is relative to the file (a line), or an error placed
/// at an offset alone, names the file too.
fn locate(path: &Path, error: Error) -> Error {
    let named = match error.kind() {
        ErrorKind::Corrupt { location, reason } if !location.starts_with('/') => {
            Some(ErrorKind::Corrupt {
                location: format!("{} {location}", path.display()),
                reason: reason.clone(),
            })
        }
        _ => None,
    };
    match named {
        Some(kind) => error.with_kind(kind).in_file(path),
        None => error.in_file(path),
    }
}

/// HDR-4 to HDR-7 on the header record's text. Returns the header JSON (without
/// surrounding whitespace) and its id.
fn check_header(text: &str) -> Result<(String, String)> {
    let not_header = || -> Error {
        ErrorKind::Corrupt {
            location: "line 1".to_owned(),
            reason: "first line is not a session header (HDR-6)".to_owned(),
        }
        .into()
    };
    let json = Json::parse(text).map_err(|e| -> Error {
        ErrorKind::Corrupt {
            location: "line 1".to_owned(),
            reason: format!("header line is not valid JSON (HDR-4): {}", Error::from(e)),
        }
        .into()
    })?;
    let root = json.root();
    if root.kind() != Kind::Object {
        return Err(not_header());
    }
    // HDR-5: a version that is a number other than 0 is refused before anything else.
    if let Some(version) = root.get("version").and_then(|v| v.as_f64())
        && version != 0.0
    {
        let found = root.get("version").map_or("", |v| v.raw()).to_owned();
        return Err(ErrorKind::FormatVersion {
            found,
            newer: version > 0.0,
        }
        .into());
    }
    // HDR-6: the shape gate.
    let safe_count = |v: Option<Value<'_, '_>>| {
        v.is_some_and(|v| v.as_safe_u64().is_some() && !v.raw().starts_with('-'))
    };
    let ok = root.get("type").is_some_and(|t| t.is_str("session"))
        && root
            .get("version")
            .is_some_and(|v| v.kind() == Kind::Number)
        && root.get("id").is_some_and(|v| v.kind() == Kind::String)
        && safe_count(root.get("createdAt"))
        && safe_count(root.get("delegationDepth"))
        && root.get("origin").is_none_or(|v| v.is_str("subagent"))
        && root
            .get("agentPreset")
            .is_none_or(|v| v.kind() == Kind::String);
    if !ok {
        return Err(not_header());
    }
    // HDR-7: retired fields.
    for retired in ["sandboxMode", "approvalPolicy"] {
        if root.get(retired).is_some() {
            return Err(ErrorKind::Corrupt {
                location: "line 1".to_owned(),
                reason: format!("the header carries the retired field {retired} (HDR-7)"),
            }
            .into());
        }
    }
    let id = root.get("id").ok_or_else(not_header)?;
    // JSON-5 keeps a lone surrogate in a string, and DIR-3 allows one in an id; a store's
    // ids are Unicode text (its directory names), so such a log cannot be imported.
    let id = id.as_str().map(Cow::into_owned).ok_or_else(|| -> Error {
        ErrorKind::InvalidId {
            id: id.raw().to_owned(),
            reason: "the header's id holds a lone surrogate, which a store's id cannot",
        }
        .into()
    })?;
    Ok((root.raw().to_owned(), id))
}

/// The record scanner of RAW-3/RAW-4, fed the event stream (everything after the header
/// record) in pieces.
#[derive(Debug)]
struct Scanner {
    /// Offset just past the last accepted record (RAW-4 `committed`).
    committed: u64,
    /// Offset just past the last complete record seen.
    end: u64,
    /// Complete records seen (the loader's line numbers count from 1 after the header).
    line: u64,
    /// The next seq the log needs.
    next_seq: u64,
    records: u64,
    /// The first problem (RAW-4 `issue`), with its line.
    issue: Option<String>,
    /// The record number (`line`) of the record with the first problem.
    issue_line: u64,
    /// An incomplete record carried to the next piece.
    partial: Vec<u8>,
    /// The member of a packed row being handed out, its buffers reused from member to
    /// member and row to row: memory is one member, however many a row holds.
    member: crate::json::Built,
    /// Zstandard: the file offset of the frame being scanned, where its records are
    /// (their own offsets are the plaintext's).
    frame_at: Option<u64>,
}

/// One storage record, classified.
enum Record<'t> {
    /// Unparsable: not JSON, `null`, or a malformed packed row.
    Unparsable(String),
    /// Decoded events: whether they are a packed row's members (then in the scanner's
    /// `members`; otherwise the record is one event itself, or no event at all when `count`
    /// is 0), how many, the first seq (as written), and whether they hold a `turn/end`.
    Events {
        members: bool,
        count: u64,
        first_seq: Option<f64>,
        /// The first seq as written, for the gap message (`None`: absent or no object).
        first_seq_text: Option<&'t str>,
        turn_end: bool,
    },
}

impl Scanner {
    fn new(base: u64) -> Self {
        Self {
            committed: base,
            end: base,
            line: 0,
            next_seq: 0,
            records: 0,
            issue: None,
            issue_line: 0,
            partial: Vec::new(),
            member: crate::json::Built::default(),
            frame_at: None,
        }
    }

    fn feed(
        &mut self,
        mut bytes: &[u8],
        each: &mut dyn FnMut(&Json<'_>, u64) -> Result<()>,
    ) -> Result<()> {
        while let Some(at) = find_newline(bytes) {
            let (piece, next) = (&bytes[..at], &bytes[at + 1..]);
            if self.partial.is_empty() {
                self.record(piece, each)?;
            } else {
                let mut whole = std::mem::take(&mut self.partial);
                self.check_length(whole.len() + piece.len())?;
                whole.extend_from_slice(piece);
                self.record(&whole, each)?;
            }
            bytes = next;
        }
        self.check_length(self.partial.len() + bytes.len())?;
        self.partial.extend_from_slice(bytes);
        Ok(())
    }

    fn check_length(&self, len: usize) -> Result<()> {
        if len > RECORD_BYTES_MAX {
            return Err(ErrorKind::Corrupt {
                location: Self::file_line(self.line + 1),
                reason: format!("a record longer than {RECORD_BYTES_MAX} bytes"),
            }
            .into());
        }
        Ok(())
    }

    /// RAW-4 for one complete record (without its line feed).
    fn record(
        &mut self,
        bytes: &[u8],
        each: &mut dyn FnMut(&Json<'_>, u64) -> Result<()>,
    ) -> Result<()> {
        self.line += 1;
        self.end += bytes.len() as u64 + 1;
        // JSON-1; validating first is much faster than the lossy decoder on valid text.
        let text = match std::str::from_utf8(bytes) {
            Ok(text) => Cow::Borrowed(text),
            Err(_) => String::from_utf8_lossy(bytes),
        };
        // A record that is JSON but for a repeated key is a record to the reference
        // (JSON.parse keeps the last value, JSON-4), judged as the others are (RAW-4); the
        // contract refuses it (§2.1) where the reference would accept it, below.
        let mut repeated = None;
        let json = match Json::parse(&text) {
            Err(error) if matches!(error.kind, JsonErrorKind::DuplicateKey(_)) => {
                repeated = Some(error);
                Json::parse_keeping_repeated_keys(&text)
            }
            parsed => parsed,
        };
        let record = match &json {
            Err(error) => Record::Unparsable(format!("{}", Error::from(error.clone()))),
            Ok(json) => classify(json.root()),
        };
        let line = self.line;
        match record {
            Record::Unparsable(why) => {
                if self.issue.is_none() {
                    self.issue = Some(format!("unparsable committed event at line {line} ({why})"));
                    self.issue_line = line;
                }
                Ok(())
            }
            Record::Events { turn_end, .. } if self.issue.is_some() => {
                if turn_end {
                    // RAW-4 step 2: a committed turn/end after the damage.
                    return Err(self.corrupt_committed());
                }
                Ok(())
            }
            Record::Events {
                members,
                count,
                first_seq,
                first_seq_text,
                turn_end,
            } => {
                #[expect(clippy::cast_precision_loss, reason = "seqs are safe integers")]
                let expected = self.next_seq as f64;
                if first_seq != Some(expected) {
                    self.issue_line = line;
                    self.issue = Some(format!(
                        "seq gap in committed region at line {line} (expected {}, got {})",
                        self.next_seq,
                        first_seq_text.map_or_else(|| "no seq".to_owned(), crate::error::excerpt),
                    ));
                    if turn_end {
                        return Err(self.corrupt_committed());
                    }
                    return Ok(());
                }
                if let Some(error) = repeated {
                    // Accepted by the reference: refused with the key's place, never
                    // dropped as a torn tail.
                    // Raw: the key's own byte. Zstandard: the frame holding the record
                    // (offsets in its plaintext are no file's).
                    let start = self.end - bytes.len() as u64 - 1;
                    let at = match self.frame_at {
                        Some(frame) => usize::try_from(frame).unwrap_or(usize::MAX),
                        None => usize::try_from(start)
                            .unwrap_or(usize::MAX)
                            .saturating_add(error.offset),
                    };
                    return Err(Error::from(error).at_place(Path::new(""), at));
                }
                // Where a refusal of one of its events is to be named (LOAD-7).
                let at = self.frame_at.unwrap_or(self.end - bytes.len() as u64 - 1);
                if let (true, Ok(json)) = (members, &json) {
                    rows::each_member(json.root(), &mut self.member, &mut |member| {
                        member.with_json(|json| each(json, at))
                    })?;
                } else if let (1, Ok(json)) = (count, &json) {
                    each(json, at)?;
                }
                self.next_seq += count;
                self.records += 1;
                self.committed = self.end;
                Ok(())
            }
        }
    }

    /// A location: the line of the file holding record `line` (the header is line 1;
    /// the reasons count records, as the reference's texts do).
    fn file_line(line: u64) -> String {
        format!("line {}", line + 1)
    }

    /// RAW-4 step 2: the damage, at the record where it is, before a committed `turn/end`.
    fn corrupt_committed(&self) -> Error {
        ErrorKind::Corrupt {
            location: Self::file_line(self.issue_line),
            reason: format!(
                "corrupt session log: {}",
                self.issue.as_deref().unwrap_or_default()
            ),
        }
        .into()
    }

    /// ZST-15: the complete frames must have been accepted to their last byte.
    fn require_clean(&self) -> Result<()> {
        if let Some(issue) = &self.issue {
            return Err(ErrorKind::Corrupt {
                location: Self::file_line(self.issue_line),
                reason: format!("complete frame contains a torn JSONL record: {issue}"),
            }
            .into());
        }
        if !self.partial.is_empty() {
            return Err(ErrorKind::Corrupt {
                location: Self::file_line(self.line + 1),
                reason: "complete frame contains a torn JSONL record: no final line feed"
                    .to_owned(),
            }
            .into());
        }
        Ok(())
    }

    /// RAW-5/RAW-6: whatever follows the last accepted record is the torn tail.
    fn finish_torn(&mut self) -> Scan {
        let file_end = self.end + self.partial.len() as u64;
        let torn = (self.committed != file_end).then(|| TornTail {
            offset: self.committed,
            reason: self
                .issue
                .clone()
                .unwrap_or_else(|| "the last record has no line feed (RAW-5)".to_owned()),
        });
        Scan {
            records: self.records,
            events: self.next_seq,
            torn,
        }
    }
}

/// The index of the first line feed in `bytes`, eight bytes at a time.
fn find_newline(bytes: &[u8]) -> Option<usize> {
    crate::json::find_byte(bytes, b'\n')
}

/// ROW-8 and §5.3: a packed row decodes to its members; any other object is one event;
/// `null` is unparsable (reference quirk); any other value has no valid seq.
fn classify<'t>(root: Value<'_, 't>) -> Record<'t> {
    match root.kind() {
        Kind::Null => Record::Unparsable("the record is null".to_owned()),
        // ROW-9 only: the members are built when they are handed out, one at a time.
        Kind::Object => match rows::check_row(root) {
            Some(Err(reason)) => Record::Unparsable(format!("malformed packed row: {reason}")),
            Some(Ok(count)) => {
                let seq0 = root.get("seq0");
                Record::Events {
                    count: count as u64,
                    members: true,
                    first_seq: seq0.and_then(|v| v.as_f64()),
                    first_seq_text: seq0.map(|v| v.raw()),
                    turn_end: false,
                }
            }
            None => {
                let seq = root.get("seq");
                Record::Events {
                    members: false,
                    count: 1,
                    first_seq: seq.and_then(|v| v.as_f64()),
                    first_seq_text: seq.map(|v| v.raw()),
                    turn_end: root.get("type").is_some_and(|t| t.is_str("turn/end")),
                }
            }
        },
        _ => Record::Events {
            members: false,
            count: 0,
            first_seq: None,
            first_seq_text: Some(root.raw()),
            turn_end: false,
        },
    }
}

/// One frame found by the structural scan of §6.2: its length in bytes from where it
/// starts.
enum Frame {
    /// A complete frame.
    Complete(u64),
    /// A frame the file ends inside (ZST-11): the bytes from its start to the end.
    Torn(u64),
    /// No bytes left.
    End,
}

/// ZST-5 to ZST-11: reads the frame at `start` (where `file` is) structurally, without
/// decompressing it or holding it: its headers are read, its blocks' payloads skipped.
/// `file_len` is the file's length; the file is left just past the frame.
fn next_frame(
    file: &mut BufReader<Box<dyn Source>>,
    start: u64,
    file_len: u64,
    path: &Path,
) -> Result<Frame> {
    let left = file_len.saturating_sub(start);
    if left == 0 {
        return Ok(Frame::End); // ZST-5
    }
    let torn = |file: &mut BufReader<Box<dyn Source>>| -> Result<Frame> {
        file.seek(SeekFrom::Start(file_len))
            .map_err(|e| Error::io("seek", path, &e))?;
        Ok(Frame::Torn(left))
    };
    // The frame's bytes so far, and the last few read (a header's).
    let mut at: u64 = 0;
    let mut head = [0u8; 18];
    // Reads the next `n` bytes of the frame into `head[..n]`; false when the file ends
    // first.
    let take = |file: &mut BufReader<Box<dyn Source>>, head: &mut [u8; 18], at: &mut u64, n| {
        if *at + n as u64 > left {
            return Ok(false);
        }
        file.read_exact(&mut head[..n])
            .map_err(|e| Error::io("read", path, &e))?;
        *at += n as u64;
        Ok::<_, Error>(true)
    };
    let place = |offset: u64| format!("byte {}", start + offset);
    if !take(file, &mut head, &mut at, 4)? {
        return torn(file);
    }
    if head[..4] != [0x28, 0xB5, 0x2F, 0xFD] {
        return Err(corrupt(path, &place(0), "invalid frame magic (ZST-6)"));
    }
    if !take(file, &mut head, &mut at, 1)? {
        return torn(file);
    }
    let descriptor = head[0];
    if descriptor & 0x18 != 0 {
        return Err(corrupt(
            path,
            &place(4),
            "reserved frame-header bit (ZST-7)",
        ));
    }
    let single_segment = descriptor & 0x20 != 0;
    let dictionary = [0, 1, 2, 4][usize::from(descriptor & 0x03)];
    let content_size = match descriptor >> 6 {
        0 => usize::from(single_segment),
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let header_rest = usize::from(!single_segment) + dictionary + content_size; // ZST-8
    if !take(file, &mut head, &mut at, header_rest)? {
        return torn(file);
    }
    loop {
        let block_at = at;
        if !take(file, &mut head, &mut at, 3)? {
            return torn(file); // ZST-9
        }
        let header = u32::from(head[0]) | u32::from(head[1]) << 8 | u32::from(head[2]) << 16;
        let last = header & 1 != 0;
        let block_type = (header >> 1) & 3;
        let size = u64::from(header >> 3);
        let payload = match block_type {
            1 => 1,
            3 => {
                return Err(corrupt(
                    path,
                    &place(block_at),
                    "reserved block type (ZST-9)",
                ));
            }
            _ => size,
        };
        if at + payload > left {
            return torn(file);
        }
        // Skipped, not read: the decoder reads it from here (`decode_frame`).
        #[expect(clippy::cast_possible_wrap, reason = "a block is under 2^21 bytes")]
        file.seek_relative(payload as i64)
            .map_err(|e| Error::io("seek", path, &e))?;
        at += payload;
        if last {
            break;
        }
    }
    if descriptor & 0x04 != 0 && !take(file, &mut head, &mut at, 4)? {
        return torn(file); // ZST-10
    }
    Ok(Frame::Complete(at))
}

/// A decoder's input: the `len` bytes of a frame of `file`, remembering an I/O error of
/// the file, which is the file's failure, not the frame's.
struct FrameBytes<'a> {
    bytes: std::io::Take<&'a mut BufReader<Box<dyn Source>>>,
    failed: Option<std::io::Error>,
}

impl<'a> FrameBytes<'a> {
    /// The frame of `len` bytes that `file` has just been moved past ([`next_frame`]).
    fn behind(file: &'a mut BufReader<Box<dyn Source>>, len: u64, path: &Path) -> Result<Self> {
        let back = i64::try_from(len).map_err(|_| {
            let error = std::io::Error::from(std::io::ErrorKind::InvalidInput);
            Error::io("seek", path, &error)
        })?;
        // Within the buffer when the frame is small: no system call.
        file.seek_relative(-back)
            .map_err(|e| Error::io("seek", path, &e))?;
        Ok(Self {
            bytes: file.take(len),
            failed: None,
        })
    }

    /// Reads what the decoder left of the frame, so that `file` is past it again.
    fn finish(mut self, path: &Path) -> Result<()> {
        if let Some(error) = self.failed {
            return Err(Error::io("read", path, &error));
        }
        std::io::copy(&mut self.bytes, &mut std::io::sink())
            .map_err(|e| Error::io("read", path, &e))?;
        Ok(())
    }
}

impl FrameBytes<'_> {
    /// Remembers `error`, the file's, for [`FrameBytes::finish`].
    fn failed(&mut self, error: &std::io::Error) {
        if error.kind() != std::io::ErrorKind::Interrupted {
            self.failed = Some(std::io::Error::new(error.kind(), error.to_string()));
        }
    }
}

impl Read for FrameBytes<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = {
            let available = self.fill_buf()?;
            let n = available.len().min(buf.len());
            buf[..n].copy_from_slice(&available[..n]);
            n
        };
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for FrameBytes<'_> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        let short = match self.bytes.fill_buf() {
            Ok(available) => available.is_empty() && self.bytes.limit() > 0,
            Err(error) => {
                self.failed(&error);
                return Err(error);
            }
        };
        if short {
            // The file ends before the frame's `len` bytes that were there when it was
            // scanned: it was cut while being read. That is the file's failure (IO), not
            // the frame's, and the file is no longer where the frame ends, so nothing more
            // of it may be decoded by seeking back from there.
            let error = std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the file is shorter than when it was opened",
            );
            self.failed(&error);
            return Err(error);
        }
        self.bytes.fill_buf()
    }

    fn consume(&mut self, n: usize) {
        self.bytes.consume(n);
    }
}

/// What decoding a Zstandard log's frames reuses from one frame to the next (DSH writes a
/// frame per append): the decoder's context, made once, and the buffer the text comes out
/// in.
#[derive(Default)]
struct Decoding {
    context: Option<zstd::zstd_safe::DCtx<'static>>,
    piece: Vec<u8>,
}

/// Decodes the frame of `len` bytes that `file` has just been moved past into `sink`, a
/// piece at a time, and leaves `file` past it again. `Ok(Err(e))` is the decoder's error
/// `e` (the frame's bytes); the file's own read errors are `Err` (`IO`).
fn decode_pieces(
    file: &mut BufReader<Box<dyn Source>>,
    len: u64,
    path: &Path,
    decoding: &mut Decoding,
    sink: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<std::result::Result<(), std::io::Error>> {
    let context = match &mut decoding.context {
        Some(context) => context,
        empty => empty.insert(zstd::zstd_safe::DCtx::try_create().ok_or_else(|| {
            let error = std::io::Error::other("zstd could not allocate a decoder context");
            Error::io("decode", path, &error)
        })?),
    };
    if decoding.piece.is_empty() {
        decoding.piece = vec![0; 64 << 10];
    }
    let piece = &mut decoding.piece;
    let mut input = FrameBytes::behind(file, len, path)?;
    let outcome = {
        // The context's session is reset for each frame: nothing of one that failed is left.
        let mut decoder =
            zstd::stream::read::Decoder::with_context(&mut input, context).single_frame();
        loop {
            match decoder.read(piece) {
                Ok(0) => break Ok(()),
                Ok(n) => sink(&piece[..n])?,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        }
    };
    input.finish(path)?;
    Ok(outcome)
}

/// ZST-13: decompresses the complete frame of `len` bytes at `start` that `file` has just
/// been moved past into `sink`, a piece at a time, checking its content checksum; memory
/// does not grow with the frame.
fn decode_frame(
    file: &mut BufReader<Box<dyn Source>>,
    (start, len): (u64, u64),
    path: &Path,
    decoding: &mut Decoding,
    sink: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    decode_pieces(file, len, path, decoding, sink)?.map_err(|e| {
        corrupt(
            path,
            &format!("byte {start}"),
            &format!("frame failed validation (ZST-13): {e}"),
        )
    })
}

/// ZST-16: streams what the `len` bytes of the torn frame that `file` has just been moved
/// past decode to before they run out into `sink`, a piece at a time. Returns `false` when the decoder
/// fails on the bytes (a decoder error yields no output, ZST-16; what `sink` was given
/// before the error is then to be dropped by the caller, which is why it decodes a first
/// time into a sink that keeps nothing). The end of the bytes inside the frame is not an
/// error.
fn decode_torn(
    file: &mut BufReader<Box<dyn Source>>,
    len: u64,
    path: &Path,
    decoding: &mut Decoding,
    sink: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<bool> {
    Ok(match decode_pieces(file, len, path, decoding, sink)? {
        Ok(()) => true,
        // The input ran out inside the frame: what it held has been handed out.
        Err(e) => e.kind() == std::io::ErrorKind::UnexpectedEof,
    })
}

fn corrupt(path: &Path, at: &str, reason: &str) -> Error {
    ErrorKind::Corrupt {
        location: format!("{} {at}", path.display()),
        reason: reason.to_owned(),
    }
    .into()
}

/// The JSONL header line of a session (HDR-1, HDR-2), without its line feed. A header
/// that is already a header line the reference reads (HDR-4 to HDR-7, as one read from a
/// JSONL file is) is written exactly as it is (HDR-14); any other is built in the
/// reference's key order (§2.3), with `delegationDepth` 0 when absent and unknown keys
/// after the known ones.
pub fn header_line(header: &Header) -> String {
    let text = header.text();
    let Ok(json) = Json::parse(text) else {
        return text.to_owned();
    };
    let root = json.root();
    // A header line read from a DSH file is kept as it was, whatever its key order
    // (HDR-14). A header given to `create` may carry `"type":"session"` too, as an
    // unknown key (contract §6), without the `delegationDepth` HDR-6 requires: only one
    // that passes the reader's own gate is kept; the others are built here.
    if check_header(text).is_ok() {
        return text.to_owned();
    }
    let mut line = String::from("{\"type\":\"session\"");
    write_known(&mut line, root, true);
    for (key, value) in root.members() {
        let name = key.as_str().unwrap_or_default();
        if !KNOWN_HEADER_KEYS.contains(&name.as_ref()) && name != "type" {
            line.push(',');
            write_js(&mut line, key);
            line.push(':');
            write_js(&mut line, value);
        }
    }
    line.push('}');
    line
}

/// The logical header (HDR-8, SQL-13): the known fields only, in the reference's order,
/// absent ones omitted. This is the `header` a DSH loader reports.
pub fn logical_header(header: &Header) -> String {
    let Ok(json) = Json::parse(header.text()) else {
        return header.text().to_owned();
    };
    let mut out = String::from("{");
    write_known(&mut out, json.root(), false);
    if out.len() > 1 && out.as_bytes()[1] == b',' {
        out.remove(1);
    }
    out.push('}');
    out
}

/// The header keys of `dsh-formats.md` §1.1, in the order the reference writes them.
pub(crate) const KNOWN_HEADER_KEYS: [&str; 9] = [
    "version",
    "id",
    "createdAt",
    "cwd",
    "parentSession",
    "seedLength",
    "origin",
    "delegationDepth",
    "agentPreset",
];

/// Appends `,"key":value` for each known key present; with `jsonl`, `delegationDepth` is
/// written as 0 when absent (HDR-2).
fn write_known(out: &mut String, root: Value<'_, '_>, jsonl: bool) {
    for key in KNOWN_HEADER_KEYS {
        let value = root.get(key);
        if value.is_none() && !(jsonl && key == "delegationDepth") {
            continue;
        }
        out.push(',');
        push_js_string(out, key.as_bytes());
        out.push(':');
        match value {
            Some(value) => write_js(out, value),
            None => push_js_number(out, 0.0),
        }
    }
}

/// What an export wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Exported {
    /// Events written.
    pub events: u64,
    /// Storage records (lines) written after the header, packed rows counted once.
    pub records: u64,
    /// Packed rows among them.
    pub packed_rows: u64,
    /// Bytes of JSONL text (before compression).
    pub text_bytes: u64,
}

/// Writes `events` as a DSH JSONL log with header `header` to `out` (§5.1, §6.1).
///
/// With `pack`, runs of three or more packable deltas become packed rows (ROW-3 to
/// ROW-7; the whole log is treated as one batch). Every other event is written as its
/// stored text, which is what the reference wrote when it came from a DSH file; a text
/// that spans lines (whitespace the JSON grammar allows) is rewritten compactly so that
/// it stays one record.
///
/// An event that the import projected (§9.2) is written as its original text, from
/// `originals` (`store.md` STORE-26), so that the export is the file that was imported.
///
/// # Errors
/// `IO` from `out` (reported against `path`), `CORRUPT` when an event cannot be read back.
pub fn write_jsonl(
    header: &Header,
    events: &dyn EventSource,
    originals: &legacy::Originals,
    pack: bool,
    compression: Compression,
    out: &mut dyn Write,
    path: &Path,
) -> Result<Exported> {
    let mut buffered = std::io::BufWriter::with_capacity(1 << 20, out);
    let mut sink = Sink::new(&mut buffered, compression, path);
    sink.write_line(header_line(header).as_bytes())?;
    sink.end_frame()?; // ZST-2: the header is a frame of its own.
    let mut exported = Exported::default();
    // The chunks seen since the last other event: only they can form runs.
    let mut run: Vec<Cow<'_, str>> = Vec::new();
    let mut gather = RUN_EVENTS_MAX;
    let end = events.seq_next();
    for seq in 0..end {
        let event = events.event_at(seq)?;
        if event.event_type == "assistant/chunk" {
            run.push(event.text());
            if run.len() >= gather {
                write_chunks(&mut run, pack, true, &mut sink, &mut exported)?;
                // What is held back is read again at the next write: gathering at least as
                // many again keeps a long run's reads linear in its length.
                gather = (run.len() + RUN_EVENTS_MAX).max(run.len() * 2);
            }
            continue;
        }
        gather = RUN_EVENTS_MAX;
        if rows::is_row_tag(event.event_type) {
            // A reader would take the record for a packed row (§4.5): refused, not written.
            return Err(ErrorKind::NotRepresentable {
                seq,
                reason: "a DSH JSONL file cannot hold an event whose type is a packed row's tag",
            }
            .into());
        }
        write_chunks(&mut run, pack, false, &mut sink, &mut exported)?;
        let text = originals
            .of(&event)
            .map_or_else(|| event.text(), Cow::Borrowed);
        write_record(&mut sink, &text, &mut exported)?;
    }
    write_chunks(&mut run, pack, false, &mut sink, &mut exported)?;
    exported.events = end;
    exported.text_bytes = sink.text_bytes;
    sink.finish()?;
    Ok(exported)
}

/// Writes the pending `assistant/chunk` events: with `pack`, runs of three or more
/// become rows (ROW-3 to ROW-7); the others are written as stored. With `hold_open_run`,
/// a run of deltas that more chunks may continue is not written but stays in `run`
/// (ROW-4: one row however long).
fn write_chunks(
    run: &mut Vec<Cow<'_, str>>,
    pack: bool,
    hold_open_run: bool,
    sink: &mut Sink<'_>,
    exported: &mut Exported,
) -> Result<()> {
    let written = if pack && (hold_open_run || run.len() >= rows::ROW_MEMBERS_MIN) {
        let texts: Vec<&str> = run.iter().map(AsRef::as_ref).collect();
        let (records, held) = if hold_open_run {
            rows::pack_stored_open(&texts)
        } else {
            (rows::pack_stored(&texts), 0)
        };
        exported.packed_rows += records.iter().filter(|r| is_row_text(r)).count() as u64;
        for record in &records {
            write_record(sink, record, exported)?;
        }
        run.len() - held
    } else {
        for text in run.iter() {
            write_record(sink, text, exported)?;
        }
        run.len()
    };
    run.drain(..written);
    Ok(())
}

/// One storage record and its line feed; a text that spans lines (whitespace the JSON
/// grammar allows) is rewritten compactly so that it stays one record (RAW-1). Only a
/// line feed ends a record (RAW-3): a carriage return, whitespace too (JSON-2), is kept
/// as read, so that such a record comes back byte for byte (§2.4).
fn write_record(sink: &mut Sink<'_>, record: &str, exported: &mut Exported) -> Result<()> {
    let bytes = record.as_bytes();
    if bytes.contains(&b'\n') {
        let mut compact = String::with_capacity(record.len());
        write_js(&mut compact, Json::parse(record)?.root());
        sink.write_line(compact.as_bytes())?;
    } else {
        sink.write_line(record.as_bytes())?;
    }
    exported.records += 1;
    Ok(())
}

/// Whether a record written by [`rows::pack`] is a packed row: rows start with their tag.
fn is_row_text(record: &str) -> bool {
    ["text-chunks", "reasoning-chunks", "tool-call-chunks"]
        .iter()
        .any(|tag| {
            record
                .strip_prefix("{\"type\":\"")
                .is_some_and(|r| r.starts_with(tag))
        })
}

/// Where export bytes go: straight out, or through Zstandard frames of at most
/// [`FRAME_PLAINTEXT_BYTES`] plaintext each, every one with a content checksum (ZST-4).
struct Sink<'o> {
    out: &'o mut dyn Write,
    compression: Compression,
    path: &'o Path,
    frame: Vec<u8>,
    text_bytes: u64,
}

impl<'o> Sink<'o> {
    fn new(out: &'o mut dyn Write, compression: Compression, path: &'o Path) -> Self {
        Self {
            out,
            compression,
            path,
            frame: Vec::new(),
            text_bytes: 0,
        }
    }

    /// Writes one record and its line feed. In Zstandard, they go into one frame: a frame
    /// is ended before a record that would not fit, never between a record and its line
    /// feed, so every frame ends with a complete record (ZST-3); a record longer than a
    /// frame gets a frame of its own.
    fn write_line(&mut self, line: &[u8]) -> Result<()> {
        self.text_bytes += line.len() as u64 + 1;
        match self.compression {
            Compression::None => {
                let io = |e: std::io::Error| Error::io("write", self.path, &e);
                self.out.write_all(line).map_err(io)?;
                self.out.write_all(b"\n").map_err(io)
            }
            Compression::Zstd => {
                if !self.frame.is_empty()
                    && self.frame.len() + line.len() + 1 > FRAME_PLAINTEXT_BYTES
                {
                    self.end_frame()?;
                }
                self.frame.extend_from_slice(line);
                self.frame.push(b'\n');
                Ok(())
            }
        }
    }

    /// Writes the pending plaintext as one frame (Zstandard only).
    fn end_frame(&mut self) -> Result<()> {
        if self.compression == Compression::None || self.frame.is_empty() {
            return Ok(());
        }
        let io = |e: std::io::Error| Error::io("write", self.path, &e);
        let mut encoder = zstd::stream::write::Encoder::new(&mut *self.out, 3).map_err(io)?;
        encoder.include_checksum(true).map_err(io)?;
        encoder.write_all(&self.frame).map_err(io)?;
        encoder.finish().map_err(io)?;
        self.frame.clear();
        Ok(())
    }

    fn finish(mut self) -> Result<()> {
        self.end_frame()?;
        self.out
            .flush()
            .map_err(|e| Error::io("write", self.path, &e))
    }
}

/// Exports `events` with `header` to a new JSONL file at `path`: [`write_jsonl`] through
/// [`publish_file`], so the file appears whole or not at all.
///
/// # Errors
/// As [`publish_file`] and [`write_jsonl`].
pub fn export_file(
    path: &Path,
    header: &Header,
    events: &dyn EventSource,
    pack: bool,
    compression: Compression,
) -> Result<Exported> {
    let originals = legacy::Originals::default();
    export_file_to(
        path,
        Publish::New,
        header,
        events,
        &originals,
        pack,
        compression,
    )
}

/// [`export_file`], replacing an existing file when `publish` is [`Publish::Replace`].
///
/// # Errors
/// As [`publish_with`] and [`write_jsonl`].
pub fn export_file_to(
    path: &Path,
    publish: Publish,
    header: &Header,
    events: &dyn EventSource,
    originals: &legacy::Originals,
    pack: bool,
    compression: Compression,
) -> Result<Exported> {
    publish_with(path, publish, |file| {
        write_jsonl(header, events, originals, pack, compression, file, path)
    })
}

/// Whether a published file may take the place of an existing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publish {
    /// Never: an existing target is refused (`UNSAFE_PATH`), also one that appears
    /// while the file is written (the rename does not replace).
    New,
    /// Atomically: readers see the old file or the new one, never a mix.
    Replace,
}

/// [`publish_with`] of a new file ([`Publish::New`]).
///
/// # Errors
/// As [`publish_with`].
pub fn publish_file<T>(path: &Path, write: impl FnOnce(&mut File) -> Result<T>) -> Result<T> {
    publish_with(path, Publish::New, write)
}

/// Writes a file at `path` through a temporary file in the same directory that is synced
/// and renamed into place, then syncs the directory: readers see the whole file or
/// nothing. A directory that other users may write to is accepted only with the sticky
/// bit (as `/tmp`), where no other user can rename or remove this process's files.
/// Creates the file with mode 0600.
///
/// # Errors
/// `UNSAFE_PATH` for a target that exists (with [`Publish::New`]) or a directory other
/// users may write to without the sticky bit, `IO`, or `write`'s own error; no file is
/// left behind on any of them (a new file whose directory sync fails after its rename is
/// removed again). The one exception: with [`Publish::Replace`], when that last sync
/// fails, the old file is gone already and the new one stays, whole.
pub fn publish_with<T>(
    path: &Path,
    publish: Publish,
    write: impl FnOnce(&mut File) -> Result<T>,
) -> Result<T> {
    publish_syncing(path, publish, write, &|dir| File::open(dir)?.sync_all())
}

/// [`publish_with`], syncing the directory with `sync_dir`.
fn publish_syncing<T>(
    path: &Path,
    publish: Publish,
    write: impl FnOnce(&mut File) -> Result<T>,
    sync_dir: &dyn Fn(&Path) -> std::io::Result<()>,
) -> Result<T> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    };
    let dir_meta = std::fs::metadata(&dir).map_err(|e| Error::io("stat", &dir, &e))?;
    if dir_meta.mode() & 0o022 != 0 && dir_meta.mode() & 0o1000 == 0 {
        return Err(ErrorKind::UnsafePath {
            path: dir,
            reason: "the target directory is writable by other users and not sticky",
        }
        .into());
    }
    let exists = || {
        Error::from(ErrorKind::UnsafePath {
            path: path.to_owned(),
            reason: "the target already exists (exports never overwrite without --force)",
        })
    };
    if publish == Publish::New && std::fs::symlink_metadata(path).is_ok() {
        return Err(exists());
    }
    let name = path
        .file_name()
        .map_or_else(|| "export".into(), |n| n.to_string_lossy().into_owned());
    // A name of this process's, created exclusively: one a crashed run of the same pid
    // left, or another export of this process to the same target is writing, is passed
    // over for the next (`-1`, `-2`, …), never written into or removed.
    let (tmp, mut file) = {
        let mut attempt = 0_u32;
        loop {
            let tmp = match attempt {
                0 => dir.join(format!(".{name}.tmp-{}", std::process::id())),
                n => dir.join(format!(".{name}.tmp-{}-{n}", std::process::id())),
            };
            let opened = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(i32::try_from(rustix::fs::OFlags::NOFOLLOW.bits()).unwrap_or(0))
                .mode(0o600)
                .open(&tmp);
            match opened {
                Ok(file) => break (tmp, file),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 64 => {
                    attempt += 1;
                }
                Err(e) => return Err(Error::io("create", &tmp, &e)),
            }
        }
    };
    let done = write(&mut file).and_then(|value| {
        file.sync_all().map_err(|e| Error::io("fsync", &tmp, &e))?;
        let flags = match publish {
            Publish::New => rustix::fs::RenameFlags::NOREPLACE,
            Publish::Replace => rustix::fs::RenameFlags::empty(),
        };
        match rustix::fs::renameat_with(rustix::fs::CWD, &tmp, rustix::fs::CWD, path, flags) {
            Ok(()) => {}
            Err(rustix::io::Errno::EXIST) => return Err(exists()),
            Err(errno) => {
                return Err(Error::io("rename", path, &std::io::Error::from(errno)));
            }
        }
        if let Err(error) = sync_dir(&dir) {
            // The rename is not known durable, so the export failed. A new file is taken
            // back, so that a failed export leaves none (only if the name still holds the
            // file this call wrote); a replaced one is gone already, and the new one, whole,
            // stays with the error.
            let ours = file.metadata().ok().map(|m| (m.dev(), m.ino()));
            let there = std::fs::symlink_metadata(path)
                .ok()
                .map(|m| (m.dev(), m.ino()));
            if publish == Publish::New && ours.is_some() && ours == there {
                let _ = std::fs::remove_file(path);
                let _ = sync_dir(&dir);
            }
            return Err(Error::io("fsync", &dir, &error));
        }
        Ok(value)
    });
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done
}

/// Imports the JSONL log at `path` into `store` as one new session (the header's id, or
/// `id`, which must equal it: LOAD-1). The torn tail is dropped, the surviving events are
/// checked on the import path, an interrupted turn is closed (contract §8), and the
/// session is published only when all of it succeeded. `path` is only read.
///
/// # Errors
/// Any refusal of [`JsonlReader::open`], [`JsonlReader::read_events`] or
/// [`Store::import`](crate::store::Store::import); nothing is stored.
pub fn import_jsonl(
    store: &crate::store::Store,
    path: &Path,
    compression: Compression,
    id: Option<&str>,
    progress: &mut dyn FnMut(u64),
) -> Result<(crate::store::Imported, Scan)> {
    let reader = JsonlReader::open(path, compression)?;
    let id = id.unwrap_or(reader.id()).to_owned();
    let mut import = store.import(&id, reader.header())?;
    let scan = read_into(reader, &mut import, progress)?;
    let imported = import.finish()?;
    Ok((imported, scan))
}

/// The text bytes of parsed events the reading thread gathers before handing them to the
/// importing one.
const BATCH_TEXT_BYTES: usize = 256 << 10;

/// Full batches waiting for the importing thread: with the one being filled and the one
/// being imported, at most this many plus two batches exist, which bounds memory.
const BATCHES_QUEUED: usize = 2;

/// Streams the events of `reader` into `import` on two threads: this one reads, splits
/// records, decodes rows and parses (with `progress`); another runs the import path's
/// checks and writes the log. Parsed events cross over in batches through a bounded
/// queue, and emptied batches come back for reuse.
///
/// The outcome is the one a single thread would give: the events read before a read
/// failure are imported first, and a refusal by the import path wins over a read failure
/// found after it.
fn read_into(
    reader: JsonlReader,
    import: &mut crate::store::Import<'_>,
    progress: &mut dyn FnMut(u64),
) -> Result<Scan> {
    use std::sync::mpsc;
    let path = reader.path.clone();
    let session_id = reader.id().to_owned();
    let stopped = || {
        Error::io(
            "import",
            &path,
            &std::io::Error::other("the import stopped"),
        )
    };
    // Each batch goes with the place of each of its events in the file (LOAD-7).
    let (full_tx, full_rx) = mpsc::sync_channel::<(Batch, Vec<u64>)>(BATCHES_QUEUED);
    let (empty_tx, empty_rx) = mpsc::channel::<(Batch, Vec<u64>)>();
    std::thread::scope(|scope| {
        let importer = std::thread::Builder::new()
            .name("surfacelog-import".into())
            .spawn_scoped(scope, move || -> Result<()> {
                let mut originals = legacy::Originals::default();
                for (mut batch, mut places) in full_rx {
                    let mut place = places.iter();
                    batch.for_each(|event| {
                        let at = place.next().copied().unwrap_or_default();
                        // LOAD-7: a refused event is named where it is in the file.
                        super::import_event(import, &session_id, event, &mut originals).map_err(
                            |e| {
                                e.at_place(Path::new(""), usize::try_from(at).unwrap_or(usize::MAX))
                            },
                        )
                    })?;
                    batch.clear();
                    places.clear();
                    // The reader may be gone already; the batch is then simply dropped.
                    let _ = empty_tx.send((batch, places));
                }
                originals.keep(import);
                Ok(())
            })
            .map_err(|e| Error::io("spawn", &path, &e))?;
        let mut batch = (Batch::new(), Vec::new());
        let read = reader.read_events_at(
            &mut |event, at| {
                batch.0.push(event);
                batch.1.push(at);
                if batch.0.text_bytes() >= BATCH_TEXT_BYTES {
                    let next = empty_rx.try_recv().unwrap_or_default();
                    full_tx
                        .send(std::mem::replace(&mut batch, next))
                        .map_err(|_| stopped())?;
                }
                Ok(())
            },
            progress,
        );
        if !batch.0.is_empty() {
            // Fails only when the importer stopped, and then its error is returned below.
            let _ = full_tx.send(batch);
        }
        drop(full_tx);
        let imported = importer.join().unwrap_or_else(|_| Err(stopped()));
        imported.map_err(|e| locate(&path, e))?;
        read
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::path::Path;

    use proptest::prelude::*;

    use super::{Publish, publish_syncing};

    /// A new export whose directory sync fails after its rename is taken back: the call
    /// fails and leaves no file, neither the export nor its temporary file. Before, the
    /// error was returned with the file left at the destination, where the next export
    /// to it was then refused (`UNSAFE_PATH`: the target exists).
    #[test]
    fn a_new_file_whose_directory_sync_fails_is_taken_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        let failing = |_: &Path| Err(std::io::Error::other("injected directory sync failure"));
        let write = |file: &mut std::fs::File| {
            file.write_all(b"{}\n")
                .map_err(|e| crate::Error::io("write", Path::new("out"), &e))
        };
        let error = publish_syncing(&path, Publish::New, write, &failing).unwrap_err();
        assert_eq!(error.code(), "IO", "{error}");
        assert!(
            std::fs::read_dir(dir.path()).unwrap().next().is_none(),
            "the failed export left a file"
        );
        // With a working sync, the same export is published.
        publish_syncing(&path, Publish::New, write, &|d: &Path| {
            std::fs::File::open(d)?.sync_all()
        })
        .unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"{}\n");
    }

    /// A temporary file a crashed export of the same pid left beside the target is passed
    /// over, and left as it is: the export is published all the same. Before, the export
    /// refused (`IO`: the file exists) until someone removed it.
    #[test]
    fn a_temporary_file_left_by_a_crashed_export_of_the_same_pid_is_passed_over() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        let stale = dir
            .path()
            .join(format!(".out.jsonl.tmp-{}", std::process::id()));
        std::fs::write(&stale, b"partial").unwrap();
        let write = |file: &mut std::fs::File| {
            file.write_all(b"{}\n")
                .map_err(|e| crate::Error::io("write", Path::new("out"), &e))
        };
        publish_syncing(&path, Publish::New, write, &|d: &Path| {
            std::fs::File::open(d)?.sync_all()
        })
        .unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"{}\n");
        assert_eq!(
            std::fs::read(&stale).unwrap(),
            b"partial",
            "not ours to touch"
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    proptest! {
        /// The word-at-a-time search agrees with a byte-at-a-time one.
        #[test]
        fn find_newline_matches_a_bytewise_search(
            bytes in prop::collection::vec(prop_oneof![1 => Just(b'\n'), 20 => any::<u8>()], 0..100),
            cut in 0usize..16,
        ) {
            let bytes = &bytes[cut.min(bytes.len())..];
            prop_assert_eq!(super::find_newline(bytes), bytes.iter().position(|&b| b == b'\n'));
        }
    }
}
