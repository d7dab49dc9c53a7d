//! DSH SQLite schema 17 (`dsh-formats.md` §8): sessions imported from a DSH database and
//! exported into one, under the reference's file, identity, schema and row rules.
//!
//! Import ([`DshDatabase`]) opens the file read-only and never writes it (SQLite may create
//! the `-wal` and `-shm` side files, as for any reader of a WAL database): a torn tail is
//! reported ([`RowsEnd::torn_marker`]), never removed, and a session is streamed one
//! physical row at a time. Export ([`export_session`]) writes one session in one
//! transaction and refuses a database that is not exactly schema 17 instead of migrating
//! it. This is the only module that names rusqlite.
#![expect(
    clippy::doc_markdown,
    reason = "SQLite and ZigZag are names in prose, not code"
)]

/*
Maintainer notes.

- Identity is checked twice on export (SQL-3 and SQL-6): once before `journal_mode = WAL`,
  which changes the file, so that a foreign database is refused untouched; once inside
  the write transaction, which also initializes a pristine file (SQL-5). Initializing
  there rather than in the first check keeps a failed export from leaving a half-made
  store behind.
- SQL-27 needs three reads of the session in one read transaction: the column checks of
  SQL-25 (which fail the whole read wherever the row is, so they run before any event is
  handed out), the backward search for the last committed `turn/end`, and the forward
  decode. Only the last one loads `data` for every row.
- The owner checks of SQL-1/SQL-2 need the effective uid; without rustix's `process`
  feature it is read from `/proc/self/status` (Linux).
*/

use std::borrow::Cow;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior, params};

use crate::adapters::legacy::Originals;
use crate::adapters::rows::{self, RowFault, SqlPacker, SqlRecord, SqlRow};
use crate::error::{Error, ErrorKind, Result};
use crate::event::{EventSource, Header};
use crate::json::{Json, Kind, Value, encode_js_string, push_js_string, write_js};
use crate::limits::{EVENT_BYTES_LIMIT, SAFE_INTEGER_MAX};

/// `PRAGMA application_id` of a DSH database: the ASCII bytes "DSHP" (SQL-4).
const APPLICATION_ID: i64 = 0x4453_4850;

/// `PRAGMA user_version` of schema 17 (SQL-4).
const USER_VERSION: i64 = 17;

/// The three tables, exactly as SQL-7 gives them; executed verbatim on initialization.
const SCHEMA: [&str; 3] = [
    "CREATE TABLE persistence_state ( singleton INTEGER PRIMARY KEY CHECK (singleton = 1), store_id TEXT NOT NULL ) STRICT",
    "CREATE TABLE sessions ( id TEXT PRIMARY KEY, version INTEGER NOT NULL, created_at INTEGER NOT NULL, cwd TEXT, parent_session TEXT, seed_length INTEGER, origin TEXT, delegation_depth INTEGER, agent_preset TEXT, incarnation TEXT NOT NULL, revision INTEGER NOT NULL ) STRICT",
    "CREATE TABLE events ( session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, seq INTEGER NOT NULL, type TEXT NOT NULL, time INTEGER NOT NULL, data ANY NOT NULL, source_event_seqs ANY, surface_op TEXT, ignorable INTEGER CHECK (ignorable IS NULL OR ignorable IN (0, 1)), PRIMARY KEY (session_id, seq) ) STRICT",
];

/// `data` texts shorter than this are stored as TEXT without trying compression (SQL-17).
const DATA_COMPRESS_BYTES_MIN: usize = 4096;

/// The Zstandard level of `data` BLOBs (SQL-17).
const DATA_ZSTD_LEVEL: i32 = 3;

/// The busy timeout of every connection (§8.2).
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long to wait before asking again for WAL mode while the database is busy (§8.2).
const BUSY_RETRY: Duration = Duration::from_millis(10);

/// The columns every `events` read selects; `check_columns` and `decode_row` read them
/// by these positions. `typeof` lets SQL-25 run without loading `data`.
const EVENT_COLUMNS: &str = "seq, type, time, ignorable, typeof(data), \
    typeof(source_event_seqs), typeof(surface_op)";

/// A DSH schema-17 database opened for import (read only: never writes to it, never
/// repairs it).
#[derive(Debug)]
pub struct DshDatabase {
    connection: Connection,
    path: PathBuf,
}

/// How reading a session's rows ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowsEnd {
    /// Logical events passed to `each` (packed rows expanded).
    pub events: u64,
    /// SQL-27 torn marker: the seq of the first row of the torn tail, when rows were
    /// dropped.
    pub torn_marker: Option<u64>,
}

/// What an export wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExportReport {
    /// Physical rows inserted into `events`.
    pub rows: u64,
    /// How many of those rows are packed chunk rows (SQL-21).
    pub packed_rows: u64,
    /// Logical events the rows stand for.
    pub events: u64,
}

/// What the identity pragmas of SQL-3 say about a database that is not refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Identity {
    /// `user_version` 0, `application_id` 0 and no user objects: initialize it (SQL-5).
    Pristine,
    /// `user_version` 17 and the DSH `application_id`; the schema is still to compare.
    Dsh,
}

impl DshDatabase {
    /// Opens the DSH database at `path` for import: the file checks of SQL-1 and SQL-2, a
    /// read-only connection set up as in §8.2 (`trusted_schema = OFF`, `mmap_size = 0`),
    /// the identity of SQL-3/SQL-4, the schema comparison of SQL-8 and the store
    /// identity of SQL-14.
    ///
    /// # Errors
    /// `IO` (kind `NotFound`) when the file is missing; `UNSAFE_PATH` for a symbolic
    /// link, a file that is not regular, a file or parent directory open to other users
    /// or owned by someone else; `FORMAT_VERSION` for another `user_version`, a foreign
    /// `application_id`, an unversioned foreign database, a schema that differs, a file
    /// that is not SQLite, and a pristine (empty) file, which holds nothing to import;
    /// `CORRUPT` without a valid store identity.
    pub fn open(path: &Path) -> Result<Self> {
        fs::symlink_metadata(path).map_err(|e| Error::io("open", path, &e))?;
        let euid = effective_uid()?;
        check_parent(path, euid)?;
        check_file(path, euid)?;
        // SQL-2 again from the file itself, opened without following a link and without
        // blocking: a link or a FIFO swapped in since the check is refused (`UNSAFE_PATH`).
        crate::storage::open_regular(path).map_err(|e| Error::io("open", path, &e))?;
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_NOFOLLOW;
        let connection = Connection::open_with_flags(path, flags).map_err(sql(path))?;
        configure(&connection, path)?;
        // A deferred transaction: a read-only connection cannot take the write lock of
        // `BEGIN IMMEDIATE`, and one snapshot is all the checks need.
        let snapshot = connection.unchecked_transaction().map_err(sql(path))?;
        if identity(&snapshot, path)? == Identity::Pristine {
            return Err(ErrorKind::FormatVersion {
                found: "user_version=0 (pristine database, nothing to import)".to_owned(),
                newer: false,
            }
            .into());
        }
        check_schema(&snapshot, path)?;
        check_store_id(&snapshot, path)?;
        drop(snapshot);
        Ok(Self {
            connection,
            path: path.to_owned(),
        })
    }

    /// Ids of all sessions, in `ORDER BY id` order.
    ///
    /// # Errors
    /// `CORRUPT` for an id that is not non-empty text (SQL-12); `IO` from SQLite.
    pub fn session_ids(&self) -> Result<Vec<String>> {
        let on_error = sql(&self.path);
        let mut statement = self
            .connection
            .prepare("SELECT id FROM sessions ORDER BY id")
            .map_err(&on_error)?;
        let mut rows = statement.query([]).map_err(&on_error)?;
        let mut ids = Vec::new();
        while let Some(row) = rows.next().map_err(&on_error)? {
            let id = row.get_ref(0).map_err(&on_error)?;
            let id = text(id).filter(|id| !id.is_empty()).ok_or_else(|| {
                corrupt(
                    format!("{} table sessions", self.path.display()),
                    "stored id must be non-empty text",
                )
            })?;
            ids.push(id.into_owned());
        }
        Ok(ids)
    }

    /// The logical header of session `id`, validated as in SQL-12 and rebuilt as in
    /// SQL-13: compact JS-JSON with the keys `version`, `id`, `createdAt`, `cwd`,
    /// `parentSession`, `seedLength`, `origin`, `delegationDepth`, `agentPreset` in that
    /// order, NULL columns omitted (an absent `delegationDepth` stays absent).
    ///
    /// # Errors
    /// `SESSION_NOT_FOUND`; `CORRUPT` for a column outside SQL-12; `FORMAT_VERSION` for a
    /// `version` other than 0 (§3.3); `IO` from SQLite.
    pub fn header(&self, id: &str) -> Result<String> {
        let on_error = sql(&self.path);
        let mut statement = self
            .connection
            .prepare(
                "SELECT id, version, created_at, cwd, parent_session, seed_length, origin, \
                 delegation_depth, agent_preset, incarnation, revision \
                 FROM sessions WHERE id = ?1",
            )
            .map_err(&on_error)?;
        let mut rows = statement.query([id]).map_err(&on_error)?;
        let Some(row) = rows.next().map_err(&on_error)? else {
            return Err(ErrorKind::SessionNotFound { id: id.to_owned() }.into());
        };
        let columns: Vec<ValueRef<'_>> = (0..11)
            .map(|i| row.get_ref(i))
            .collect::<rusqlite::Result<_>>()
            .map_err(&on_error)?;
        header_text(&columns)
            .map_err(|reason| {
                let location = format!("{} table sessions, session {id:?}", self.path.display());
                corrupt(location, reason)
            })?
            .map_err(|e| e.in_session(id))
    }

    /// Streams session `id`'s logical events in seq order to `each`, as JS-JSON texts in
    /// the key order of a scalar row (§2.3): `type`, `seq`, `time`, `data`, then
    /// `sourceEventSeqs`, `surfaceOp` and `ignorable` when present. Packed rows expand to their
    /// members (ROW-10). A scalar row's `data` and `surface_op` texts are passed on as
    /// stored (the concatenation of §10), after they were checked to be JSON.
    ///
    /// Every row's columns are checked first (SQL-25), then the last committed
    /// `turn/end` row is found (SQL-27), then rows are decoded forward (SQL-26). The first
    /// row that fails to decode or does not continue the seqs is corruption at or before
    /// that `turn/end` row, and otherwise the start of a torn tail: reading stops there
    /// and [`RowsEnd::torn_marker`] names its seq. Memory is bounded by one row.
    ///
    /// # Errors
    /// `SESSION_NOT_FOUND`; `CORRUPT` naming the row's seq; `IO` from SQLite; the first
    /// `Err` of `each`, which stops the read.
    pub fn read_events(
        &self,
        id: &str,
        each: &mut dyn FnMut(String) -> Result<()>,
    ) -> Result<RowsEnd> {
        let on_error = sql(&self.path);
        // One snapshot for the three passes: a concurrent writer cannot move the rows.
        let snapshot = self.connection.unchecked_transaction().map_err(&on_error)?;
        let exists: bool = snapshot
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1)",
                [id],
                |row| row.get(0),
            )
            .map_err(&on_error)?;
        if !exists {
            return Err(ErrorKind::SessionNotFound { id: id.to_owned() }.into());
        }
        self.check_all_columns(&snapshot, id)?;
        let committed = self.last_committed_turn_end(&snapshot, id)?;
        self.decode_forward(&snapshot, id, committed, each)
            .map_err(|e| e.in_session(id))
    }

    /// SQL-25: every row's columns, wherever the row is.
    fn check_all_columns(&self, snapshot: &Connection, id: &str) -> Result<()> {
        let on_error = sql(&self.path);
        let query = format!("SELECT {EVENT_COLUMNS} FROM events WHERE session_id = ?1");
        let mut statement = snapshot.prepare(&query).map_err(&on_error)?;
        let mut rows = statement.query([id]).map_err(&on_error)?;
        while let Some(row) = rows.next().map_err(&on_error)? {
            check_columns(row, &self.path, id)?;
        }
        Ok(())
    }

    /// SQL-27 backward pass: the seq of the last row that decodes and holds a `turn/end`.
    /// Only scalar rows can hold one, so only rows of that type are tried.
    fn last_committed_turn_end(&self, snapshot: &Connection, id: &str) -> Result<Option<u64>> {
        let on_error = sql(&self.path);
        let query = format!(
            "SELECT {EVENT_COLUMNS}, data, source_event_seqs, surface_op FROM events \
             WHERE session_id = ?1 AND type = 'turn/end' ORDER BY seq DESC"
        );
        let mut statement = snapshot.prepare(&query).map_err(&on_error)?;
        let mut rows = statement.query([id]).map_err(&on_error)?;
        while let Some(row) = rows.next().map_err(&on_error)? {
            let envelope = check_columns(row, &self.path, id)?;
            // A row the reference decodes, a repeated key included (`RowFault`).
            if !matches!(decode_row(&envelope, row), Err(RowFault::Malformed(_))) {
                return Ok(Some(envelope.seq));
            }
        }
        Ok(None)
    }

    /// SQL-27 forward pass: decodes rows in seq order and hands out their events.
    fn decode_forward(
        &self,
        snapshot: &Connection,
        id: &str,
        committed: Option<u64>,
        each: &mut dyn FnMut(String) -> Result<()>,
    ) -> Result<RowsEnd> {
        let on_error = sql(&self.path);
        let query = format!(
            "SELECT {EVENT_COLUMNS}, data, source_event_seqs, surface_op FROM events \
             WHERE session_id = ?1 ORDER BY seq"
        );
        let mut statement = snapshot.prepare(&query).map_err(&on_error)?;
        let mut rows = statement.query([id]).map_err(&on_error)?;
        let mut end = RowsEnd {
            events: 0,
            torn_marker: None,
        };
        while let Some(row) = rows.next().map_err(&on_error)? {
            let envelope = check_columns(row, &self.path, id)?;
            // The row must continue the seqs (SQL-27); a packed row's members follow its
            // `seq`, so checking the row's first seq is enough. A row with a repeated key
            // decodes for the reference, so it is judged by its seq as any other is.
            let gap = || RowFault::Malformed(format!("expected seq {}", end.events));
            let decoded = match decode_row(&envelope, row) {
                Err(RowFault::RepeatedKey(_)) if envelope.seq != end.events => Err(gap()),
                decoded => decoded.and_then(|events| {
                    if envelope.seq == end.events {
                        Ok(events)
                    } else {
                        Err(gap())
                    }
                }),
            };
            match decoded {
                Ok(events) => {
                    for event in events {
                        each(event)?;
                        end.events += 1;
                    }
                }
                Err(RowFault::RepeatedKey(error)) => {
                    return Err(Error::from(error).at_seq(envelope.seq));
                }
                Err(RowFault::Malformed(reason))
                    if committed.is_some_and(|c| envelope.seq <= c) =>
                {
                    let reason = format!(
                        "invalid committed physical row at seq {}: {reason}",
                        envelope.seq
                    );
                    let location = row_location(&self.path, id, envelope.seq);
                    return Err(corrupt(location, &reason).at_seq(envelope.seq));
                }
                Err(RowFault::Malformed(_)) => {
                    end.torn_marker = Some(envelope.seq);
                    break;
                }
            }
        }
        Ok(end)
    }
}

/// Exports session `header.id()` with the events of `events` (all of them, seq 0 on)
/// into the schema-17 database at `path`, in one transaction.
///
/// A missing file is created as SQL-1 and SQL-2 ask (parent directories 0700, the file
/// create-exclusive with mode 0600, then checked); the connection is set up as in §8.2
/// (WAL, `synchronous = FULL`, with read-backs). A pristine file is initialized with the
/// exact SQL-7 tables, a random store id and the identity pragmas (SQL-5); any other file
/// must already be schema 17 (SQL-3 to SQL-8), it is never migrated. Inside one
/// `BEGIN IMMEDIATE` transaction the `sessions` row is inserted with a fresh incarnation
/// (SQL-9) and then the events: with `pack`, runs of packable deltas become packed rows
/// (SQL-21 to SQL-23, the whole log being one batch); every other event is a scalar row
/// (SQL-15, SQL-17, SQL-19). The revision ends at 1 (SQL-10). On failure nothing is
/// committed, and a file (and directories) this call created are removed; an existing
/// database is left byte for byte as it was when the refusal is for the events or the id
/// (`store.md` STORE-15: both are checked before the connection's setup changes the file).
///
/// # Errors
/// `SESSION_EXISTS` when the database holds session `id`; `UNSAFE_PATH` and
/// `FORMAT_VERSION` as for [`DshDatabase::open`]; `CORRUPT` for an event source that
/// does not return a valid event; `IO` from the file system or SQLite.
pub fn export_session(
    path: &Path,
    header: &Header,
    events: &dyn EventSource,
    pack: bool,
) -> Result<ExportReport> {
    export_session_with(path, header, events, &Originals::default(), pack)
}

/// [`export_session`], writing an event that the import projected (`dsh-formats.md` §9.2)
/// from its original text in `originals` (`store.md` STORE-26).
///
/// # Errors
/// As [`export_session`].
pub fn export_session_with(
    path: &Path,
    header: &Header,
    events: &dyn EventSource,
    originals: &Originals,
    pack: bool,
) -> Result<ExportReport> {
    check_rows(events, originals, pack).map_err(|e| e.in_session(header.id()))?;
    let created = prepare_file(path)?;
    let exported = export_into(path, header, events, originals, pack);
    if exported.is_err() {
        created.undo(path);
    }
    exported.map_err(|e| e.in_session(header.id()))
}

/// [`export_session`] once the file exists and passed its checks.
fn export_into(
    path: &Path,
    header: &Header,
    events: &dyn EventSource,
    originals: &Originals,
    pack: bool,
) -> Result<ExportReport> {
    let started = Instant::now();
    let on_error = sql(path);
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_NOFOLLOW;
    let mut connection = Connection::open_with_flags(path, flags).map_err(&on_error)?;
    configure(&connection, path)?;
    {
        // §8.2 step 4, before WAL mode changes the file: a foreign database is refused
        // untouched. Nothing is written; dropping the transaction rolls it back.
        let check = connection
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&on_error)?;
        if identity(&check, path)? == Identity::Dsh {
            check_schema(&check, path)?;
            check_store_id(&check, path)?;
            // STORE-15: refused here, before step 5 changes the file; checked again in
            // the write transaction (SQL-6).
            check_absent(&check, path, header.id())?;
        }
    }
    set_journal_wal(&connection, path, started)?;
    set_synchronous_full(&connection, path)?;
    let transaction = connection
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(&on_error)?;
    // SQL-6: re-validated inside the write transaction.
    if identity(&transaction, path)? == Identity::Pristine {
        initialize(&transaction, path)?;
    }
    check_schema(&transaction, path)?;
    check_store_id(&transaction, path)?;
    let id = header.id();
    check_absent(&transaction, path, id)?;
    insert_session(&transaction, path, header)?;
    let report = insert_events(&transaction, path, id, events, originals, pack)?;
    // SQL-10: this export is the session's one append, so the revision ends at 1.
    transaction
        .execute(
            "UPDATE sessions SET revision = revision + 1 WHERE id = ?1",
            [id],
        )
        .map_err(&on_error)?;
    transaction.commit().map_err(&on_error)?;
    Ok(report)
}

/// `SESSION_EXISTS` when the database holds a session row or events of session `id`.
fn check_absent(connection: &Connection, path: &Path, id: &str) -> Result<()> {
    let exists: bool = connection
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1) \
             OR EXISTS (SELECT 1 FROM events WHERE session_id = ?1)",
            [id],
            |row| row.get(0),
        )
        .map_err(sql(path))?;
    if exists {
        return Err(ErrorKind::SessionExists { id: id.to_owned() }.into());
    }
    Ok(())
}

/// Encodes `sourceEventSeqs` as SQL-19 asks: the first value as an unsigned LEB128
/// varint, every later one as the varint of the ZigZag code of its difference from the
/// one before. `[]` is the empty BLOB. Values must be safe integers (as every seq is).
pub(crate) fn encode_seqs(seqs: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(seqs.len() * 2);
    let mut previous: Option<u64> = None;
    for &seq in seqs {
        debug_assert!(
            seq <= SAFE_INTEGER_MAX.unsigned_abs(),
            "seq={seq} is not safe"
        );
        let code = match previous {
            None => seq,
            Some(previous) => {
                let difference = i128::from(seq) - i128::from(previous);
                let zigzag = if difference >= 0 {
                    2 * difference
                } else {
                    -2 * difference - 1
                };
                u64::try_from(zigzag).expect("differences of safe integers fit 54 bits")
            }
        };
        push_varint(&mut out, code);
        previous = Some(seq);
    }
    out
}

/// Decodes a `source_event_seqs` BLOB with the strictness of SQL-20. Order and
/// duplicates are kept as stored.
///
/// # Errors
/// `"truncated varint"`, `"non-canonical varint"`, `"varint is out of range"` or
/// `"decoded seq is out of range"` (the reference's reasons, Appendix B).
pub(crate) fn decode_seqs(blob: &[u8]) -> Result<Vec<u64>, &'static str> {
    const SAFE_MAX: u64 = SAFE_INTEGER_MAX.unsigned_abs();
    let mut seqs: Vec<u64> = Vec::new();
    let mut rest = blob;
    while !rest.is_empty() {
        let (code, after) = read_varint(rest)?;
        rest = after;
        let seq = match seqs.last() {
            // SQL-20: the first value is a seq, at most 2^53 − 1.
            None if code > SAFE_MAX => return Err("varint is out of range"),
            None => code,
            // Later values are ZigZag differences, at most 2^54 − 2.
            Some(_) if code > 2 * SAFE_MAX => return Err("varint is out of range"),
            Some(&previous) => {
                let difference = if code % 2 == 0 {
                    i128::from(code / 2)
                } else {
                    -(i128::from(code) + 1) / 2
                };
                u64::try_from(i128::from(previous) + difference)
                    .ok()
                    .filter(|seq| *seq <= SAFE_MAX)
                    .ok_or("decoded seq is out of range")?
            }
        };
        seqs.push(seq);
    }
    Ok(seqs)
}

/// One `events` row's columns after SQL-25.
#[derive(Debug)]
struct Envelope {
    seq: u64,
    event_type: String,
    time: i64,
    /// `None` for NULL, `Some(true)` for 1, `Some(false)` for 0 (a packed row).
    ignorable: Option<bool>,
}

/// SQL-25 on the `EVENT_COLUMNS` of `row`.
fn check_columns(row: &rusqlite::Row<'_>, path: &Path, id: &str) -> Result<Envelope> {
    let column = |i: usize| row.get_ref(i).unwrap_or(ValueRef::Null);
    let storage = |i: usize| match column(i) {
        ValueRef::Text(name) => name.to_vec(),
        _ => Vec::new(),
    };
    let seq = match column(0) {
        ValueRef::Integer(seq) => u64::try_from(seq).ok().filter(|s| *s <= SAFE_MAX_U64),
        _ => None,
    };
    let location = || match column(0) {
        ValueRef::Integer(seq) => row_location(path, id, seq),
        other => row_location(path, id, format!("{other:?}")),
    };
    let fail = |reason: &str| Err(corrupt(location(), reason).in_session(id));
    let Some(seq) = seq else {
        return fail("stored seq must be a non-negative safe integer");
    };
    let Some(event_type) = text(column(1)).filter(|t| !t.is_empty()) else {
        return fail("stored type must be non-empty text");
    };
    let time = match column(2) {
        // `unsigned_abs`: the lowest i64 has no absolute value of its type (`abs` overflows).
        ValueRef::Integer(time) if time.unsigned_abs() <= SAFE_MAX_U64 => time,
        _ => return fail("stored time must be a safe integer"),
    };
    let ignorable = match column(3) {
        ValueRef::Null => None,
        ValueRef::Integer(0) => Some(false),
        ValueRef::Integer(1) => Some(true),
        _ => return fail("stored ignorable must be null, 0 or 1"),
    };
    if !matches!(storage(4).as_slice(), b"text" | b"blob") {
        return fail("stored data must be text or a blob");
    }
    if !matches!(storage(5).as_slice(), b"null" | b"blob") {
        return fail("stored source_event_seqs must be a blob or null");
    }
    if !matches!(storage(6).as_slice(), b"null" | b"text") {
        return fail("stored surface_op must be text or null");
    }
    Ok(Envelope {
        seq,
        event_type: event_type.into_owned(),
        time,
        ignorable,
    })
}

const SAFE_MAX_U64: u64 = SAFE_INTEGER_MAX.unsigned_abs();

/// SQL-26: the events of one row whose columns passed SQL-25; `row` carries `data`,
/// `source_event_seqs` and `surface_op` after the `EVENT_COLUMNS`.
fn decode_row(envelope: &Envelope, row: &rusqlite::Row<'_>) -> Result<Vec<String>, RowFault> {
    let column = |i: usize| {
        row.get_ref(i)
            .map_err(|e| RowFault::Malformed(e.to_string()))
    };
    let (data, sources, surface_op) = (column(7)?, column(8)?, column(9)?);
    if envelope.ignorable == Some(false) {
        // SQL-21: 0 is the packed-row discriminator, never the type.
        if !rows::is_row_tag(&envelope.event_type) {
            return Err("packed discriminator requires a chunk tag".into());
        }
        if sources != ValueRef::Null || surface_op != ValueRef::Null {
            return Err("packed surface fields must be null".into());
        }
        let data = data_text(data, rows::SQL_ROW_DATA_BYTES_MAX)?;
        return rows::expand_sql_row(&envelope.event_type, envelope.seq, envelope.time, &data);
    }
    let data = data_text(data, EVENT_BYTES_LIMIT)?;
    let mut repeated = None;
    let data = rows::parse_row_json(&data, "data", &mut repeated)?;
    let mut event = String::with_capacity(data.text().len() + 96);
    event.push_str("{\"type\":");
    push_js_string(&mut event, envelope.event_type.as_bytes());
    event.push_str(",\"seq\":");
    event.push_str(&envelope.seq.to_string());
    event.push_str(",\"time\":");
    event.push_str(&envelope.time.to_string());
    event.push_str(",\"data\":");
    event.push_str(data.root().raw());
    if let ValueRef::Blob(blob) = sources {
        let seqs = decode_seqs(blob)
            .map_err(|reason| format!("malformed source_event_seqs storage value: {reason}"))?;
        let seqs: Vec<String> = seqs.iter().map(u64::to_string).collect();
        event.push_str(",\"sourceEventSeqs\":[");
        event.push_str(&seqs.join(","));
        event.push(']');
    }
    if let Some(surface_op) = text(surface_op) {
        // Passed on unvalidated (SQL-26), but it must be JSON to be part of the event.
        let surface_op = rows::parse_row_json(&surface_op, "surface_op", &mut repeated)?;
        event.push_str(",\"surfaceOp\":");
        event.push_str(surface_op.root().raw());
    }
    if envelope.ignorable == Some(true) {
        event.push_str(",\"ignorable\":true");
    }
    event.push('}');
    // Decodable to the reference, which keeps a repeated key's last value.
    match repeated {
        Some(error) => Err(RowFault::RepeatedKey(error)),
        None => Ok(vec![event]),
    }
}

/// SQL-18: the JSON text of a `data` value. TEXT is read as SQLite holds it (invalid
/// UTF-8 replaced, as a JavaScript binding reads it); a BLOB is one Zstandard frame whose
/// output, at most `output_bytes_max` long, must be strict UTF-8.
fn data_text(data: ValueRef<'_>, output_bytes_max: usize) -> Result<String, String> {
    match data {
        ValueRef::Text(bytes) => Ok(String::from_utf8_lossy(bytes).into_owned()),
        ValueRef::Blob(frame) => {
            let output = decompress(frame, output_bytes_max)?;
            String::from_utf8(output).map_err(|_| "decompressed data is not UTF-8".to_owned())
        }
        _ => Err("data is neither text nor a blob".to_owned()),
    }
}

/// Decompresses exactly one Zstandard frame with nothing after it; more than
/// `output_bytes_max` bytes of output is an error, found without producing them all.
fn decompress(frame: &[u8], output_bytes_max: usize) -> Result<Vec<u8>, String> {
    if frame.is_empty() {
        return Err("data blob is empty".to_owned());
    }
    let not_zstd = |e: std::io::Error| format!("data blob is not a Zstandard frame: {e}");
    let mut decoder = zstd::stream::read::Decoder::with_buffer(frame)
        .map_err(not_zstd)?
        .single_frame();
    let mut output = Vec::new();
    let limit = u64::try_from(output_bytes_max).unwrap_or(u64::MAX);
    (&mut decoder)
        .take(limit.saturating_add(1))
        .read_to_end(&mut output)
        .map_err(not_zstd)?;
    if output.len() > output_bytes_max {
        return Err(format!("data exceeds {output_bytes_max} UTF-8 bytes"));
    }
    decoder.finish_frame().map_err(not_zstd)?;
    if !decoder.finish().is_empty() {
        return Err("data blob has bytes after its Zstandard frame".to_owned());
    }
    Ok(output)
}

/// SQL-12 and SQL-13: the header text of a `sessions` row (its 11 columns in table
/// order), or the reason the row is invalid. The inner `Err` is the version refusal of
/// §3.3, applied after the row checks.
fn header_text(columns: &[ValueRef<'_>]) -> Result<Result<String>, &'static str> {
    let [
        id,
        version,
        created_at,
        cwd,
        parent,
        seed_length,
        origin,
        depth,
        preset,
        incarnation,
        revision,
    ] = columns
    else {
        return Err("the sessions row does not have 11 columns");
    };
    let id = text(*id)
        .filter(|id| !id.is_empty())
        .ok_or("stored id must be non-empty text")?;
    let version = safe_integer(*version).ok_or("stored version must be a safe integer")?;
    let required = "stored created_at must be a non-negative safe integer";
    let created_at = non_negative(*created_at, required)?.ok_or(required)?;
    let cwd = optional_text(*cwd, "stored cwd must be null or text")?;
    if cwd.as_ref().is_some_and(|cwd| !cwd.starts_with('/')) {
        return Err("stored cwd must be an absolute path");
    }
    let parent = optional_text(*parent, "stored parent_session must be null or text")?;
    let seed_length = non_negative(
        *seed_length,
        "stored seed_length must be null or a non-negative safe integer",
    )?;
    let origin = optional_text(*origin, "stored origin must be null or subagent")?;
    if origin.as_ref().is_some_and(|origin| origin != "subagent") {
        return Err("stored origin must be null or subagent");
    }
    let depth = non_negative(
        *depth,
        "stored delegation_depth must be null or a non-negative safe integer",
    )?;
    let preset = optional_text(*preset, "stored agent_preset must be null or text")?;
    if !text(*incarnation).is_some_and(|i| is_uuid(&i)) {
        return Err("stored incarnation must be a UUID");
    }
    let required = "stored revision must be a non-negative safe integer";
    non_negative(*revision, required)?.ok_or(required)?;
    if version != 0 {
        let found = format!("version={version}");
        let newer = version > 0;
        return Ok(Err(ErrorKind::FormatVersion { found, newer }.into()));
    }
    let string = |s: Option<Cow<'_, str>>| s.map(|s| encode_js_string(s.as_bytes()));
    let number = |n: Option<u64>| n.map(|n| n.to_string());
    // SQL-13: this key order, NULL columns omitted.
    let members = [
        ("version", Some(version.to_string())),
        ("id", string(Some(id))),
        ("createdAt", Some(created_at.to_string())),
        ("cwd", string(cwd)),
        ("parentSession", string(parent)),
        ("seedLength", number(seed_length)),
        ("origin", string(origin)),
        ("delegationDepth", number(depth)),
        ("agentPreset", string(preset)),
    ];
    Ok(Ok(json_object(&members)))
}

/// A compact JSON object of the present `(key, JSON text)` members, in order. The keys
/// are plain ASCII and need no escaping.
fn json_object(members: &[(&str, Option<String>)]) -> String {
    let mut out = String::from("{");
    for (key, value) in members {
        if let Some(value) = value {
            if out.len() > 1 {
                out.push(',');
            }
            out.push('"');
            out.push_str(key);
            out.push_str("\":");
            out.push_str(value);
        }
    }
    out.push('}');
    out
}

/// SQL-9: the `sessions` row of `header`, with a fresh incarnation and revision 0.
/// The header's unknown keys and a JSONL `type` key have no column and are dropped.
fn insert_session(transaction: &Connection, path: &Path, header: &Header) -> Result<()> {
    let json = Json::parse(header.text())?;
    let root = json.root();
    let string = |key: &str| {
        root.get(key)
            .and_then(|v| v.as_wtf8())
            .map(|s| wtf8_text(&s))
    };
    let integer = |key: &str| root.get(key).and_then(|v| v.as_safe_int());
    let created_at = i64::try_from(header.created_at()).expect("createdAt is a safe integer");
    transaction
        .execute(
            "INSERT INTO sessions (id, version, created_at, cwd, parent_session, seed_length, \
             origin, delegation_depth, agent_preset, incarnation, revision) \
             VALUES (?1, 0, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 0)",
            params![
                header.id(),
                created_at,
                header.cwd().map(wtf8_text),
                string("parentSession"),
                integer("seedLength"),
                string("origin"),
                integer("delegationDepth"),
                string("agentPreset"),
                uuid_v4()?,
            ],
        )
        .map_err(sql(path))?;
    Ok(())
}

/// How many events [`insert_events`] reads and parses at a time.
const EXPORT_WINDOW: u64 = 4096;

/// Inserts every event of `events` as rows of session `id`, in log order (ROW-5), packing
/// when asked ([`each_row`]).
fn insert_events(
    transaction: &Connection,
    path: &Path,
    id: &str,
    events: &dyn EventSource,
    originals: &Originals,
    pack: bool,
) -> Result<ExportReport> {
    let mut insert = transaction
        .prepare(
            "INSERT INTO events (session_id, seq, type, time, data, source_event_seqs, \
             surface_op, ignorable) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )
        .map_err(sql(path))?;
    let mut report = ExportReport::default();
    each_row(events, originals, pack, &mut |record| {
        insert_record(&mut insert, path, id, record, &mut report)
    })?;
    Ok(report)
}

/// `store.md` STORE-15: a refused export leaves the database as it was. Every event is
/// read (and so checked, REC-4) and made into its row's columns, the check of each that
/// can refuse it, before the database is opened: the connection's setup changes the file
/// (§8.2 step 5), so a refusal found while the rows are inserted would leave that trace.
fn check_rows(events: &dyn EventSource, originals: &Originals, pack: bool) -> Result<()> {
    each_row(events, originals, pack, &mut |record| {
        match record {
            SqlRecord::Scalar(json) => scalar_columns(json.root()),
            SqlRecord::Packed(row) => packed_columns(row),
        }
        .map(drop)
    })
}

/// Gives each row of `events` to `row`, in order: with `pack`, runs of packable deltas
/// become packed rows (SQL-21 to SQL-23, the whole log being one batch); every other event
/// is a scalar row (SQL-15). An event the import projected is written from its original
/// text in `originals` (STORE-26).
fn each_row(
    events: &dyn EventSource,
    originals: &Originals,
    pack: bool,
    row: &mut dyn FnMut(SqlRecord<'_>) -> Result<()>,
) -> Result<()> {
    // Texts are parsed a window at a time: a chunk record's text is rebuilt (an owned
    // string), so the window holds them while the packer looks at them, and the run
    // still open at a window's end is carried into the next one as texts.
    let end = events.seq_next();
    let mut carried: Vec<String> = Vec::new();
    let mut seq: u64 = 0;
    loop {
        let window_end = end.min(seq.saturating_add(EXPORT_WINDOW));
        let mut texts: Vec<Cow<'_, str>> = carried.drain(..).map(Cow::Owned).collect();
        for s in seq..window_end {
            let event = events.event_at(s)?;
            texts.push(match originals.of(&event) {
                Some(original) => Cow::Borrowed(original),
                None => event.text(),
            });
        }
        seq = window_end;
        let mut packer = SqlPacker::default();
        let mut ready = Vec::new();
        for text in &texts {
            let json = Json::parse(text)?;
            if pack {
                packer.push(json, &mut ready);
            } else {
                ready.push(SqlRecord::Scalar(json));
            }
            for record in ready.drain(..) {
                row(record)?;
            }
        }
        if seq == end {
            packer.finish(&mut ready);
            for record in ready.drain(..) {
                row(record)?;
            }
            return Ok(());
        }
        // The open run is the last `pending` texts (at most SQL_ROW_MEMBERS_MAX).
        let open = texts.len() - packer.pending();
        drop((packer, ready));
        carried = texts.drain(open..).map(Cow::into_owned).collect();
    }
}

/// One physical row: a scalar event (SQL-15) or a packed row (SQL-21).
fn insert_record(
    insert: &mut rusqlite::Statement<'_>,
    path: &Path,
    id: &str,
    record: SqlRecord<'_>,
    report: &mut ExportReport,
) -> Result<()> {
    let columns = match record {
        SqlRecord::Scalar(json) => scalar_columns(json.root())?,
        SqlRecord::Packed(row) => {
            report.packed_rows += 1;
            packed_columns(row)?
        }
    };
    let data = data_value(columns.data, path)?;
    insert
        .execute(params![
            id,
            columns.seq,
            columns.event_type,
            columns.time,
            data,
            columns.sources,
            columns.surface_op,
            columns.ignorable
        ])
        .map_err(sql(path))?;
    report.rows += 1;
    report.events += columns.members;
    Ok(())
}

/// The columns of one `events` row, `data` still as text: SQL-17 decides its storage.
#[derive(Debug)]
struct RowColumns {
    seq: i64,
    event_type: String,
    time: i64,
    data: String,
    sources: Option<Vec<u8>>,
    surface_op: Option<String>,
    ignorable: Option<i64>,
    /// How many events the row stands for.
    members: u64,
}

/// SQL-15: the columns of a scalar event. The event comes from a session, so its
/// envelope is valid; a source that breaks that is refused rather than trusted.
fn scalar_columns(event: Value<'_, '_>) -> Result<RowColumns> {
    let seq = event.get("seq").and_then(|s| s.as_safe_u64());
    let invalid = || invalid_source(seq.unwrap_or_default());
    let seq = seq
        .and_then(|s| i64::try_from(s).ok())
        .ok_or_else(invalid)?;
    let event_type = event
        .get("type")
        .and_then(|t| t.as_str())
        .ok_or_else(invalid)?;
    let time = event
        .get("time")
        .and_then(|t| t.as_safe_int())
        .ok_or_else(invalid)?;
    let data = event.get("data").ok_or_else(invalid)?;
    let mut data_text = String::with_capacity(data.raw().len());
    write_js(&mut data_text, data);
    let sources = match event.get("sourceEventSeqs") {
        None => None,
        Some(list) if list.kind() == Kind::Array => {
            let seqs: Option<Vec<u64>> = list.elements().map(|s| s.as_safe_u64()).collect();
            // SQL-19: `[]` is the empty BLOB, not NULL.
            Some(encode_seqs(&seqs.ok_or_else(invalid)?))
        }
        Some(_) => return Err(invalid()),
    };
    let surface_op = event.get("surfaceOp").map(|op| {
        let mut text = String::new();
        write_js(&mut text, op);
        text
    });
    Ok(RowColumns {
        seq,
        event_type: event_type.into_owned(),
        time,
        data: data_text,
        sources,
        surface_op,
        ignorable: event
            .get("ignorable")
            .is_some_and(|i| i.is_true())
            .then_some(1),
        members: 1,
    })
}

/// SQL-21: the columns of a packed row; `ignorable` 0 is the discriminator.
fn packed_columns(row: SqlRow) -> Result<RowColumns> {
    Ok(RowColumns {
        seq: i64::try_from(row.seq0).map_err(|_| invalid_source(row.seq0))?,
        event_type: row.tag.to_owned(),
        time: row.time0,
        data: row.data,
        sources: None,
        surface_op: None,
        ignorable: Some(0),
        members: u64::try_from(row.members).expect("at most 1,024 members"),
    })
}

/// SQL-17: TEXT below 4,096 bytes; otherwise a one-shot Zstandard frame at level 3 when
/// it is strictly shorter, else TEXT.
fn data_value(text: String, path: &Path) -> Result<SqlValue> {
    if text.len() < DATA_COMPRESS_BYTES_MIN {
        return Ok(SqlValue::Text(text));
    }
    let frame = zstd::bulk::compress(text.as_bytes(), DATA_ZSTD_LEVEL)
        .map_err(|e| Error::io("zstd", path, &e))?;
    Ok(if frame.len() < text.len() {
        SqlValue::Blob(frame)
    } else {
        SqlValue::Text(text)
    })
}

/// §8.2 steps 1 to 3, with their read-backs.
fn configure(connection: &Connection, path: &Path) -> Result<()> {
    let on_error = sql(path);
    connection.busy_timeout(BUSY_TIMEOUT).map_err(&on_error)?;
    connection
        .execute_batch("PRAGMA trusted_schema = OFF")
        .map_err(&on_error)?;
    read_back(connection, path, "trusted_schema", 0)?;
    connection
        .execute_batch("PRAGMA mmap_size = 0")
        .map_err(&on_error)?;
    read_back(connection, path, "mmap_size", 0)?;
    connection
        .execute_batch("PRAGMA foreign_keys = ON")
        .map_err(&on_error)
}

/// §8.2 step 5: WAL mode, retried every 10 ms while the database is busy, until the busy
/// timeout counted from `started` has passed.
fn set_journal_wal(connection: &Connection, path: &Path, started: Instant) -> Result<()> {
    loop {
        let mode = connection.query_row("PRAGMA journal_mode = WAL", [], |row| {
            row.get::<_, String>(0)
        });
        match mode {
            Ok(mode) if mode.eq_ignore_ascii_case("wal") => return Ok(()),
            Ok(mode) => {
                return Err(setup_error(
                    path,
                    &format!("journal_mode is {mode}, not wal"),
                ));
            }
            Err(e) if is_busy(&e) && started.elapsed() < BUSY_TIMEOUT => {
                std::thread::sleep(BUSY_RETRY);
            }
            Err(e) => return Err(sql(path)(e)),
        }
    }
}

/// §8.2 step 6 and SQL-3: every commit durable.
fn set_synchronous_full(connection: &Connection, path: &Path) -> Result<()> {
    connection
        .execute_batch("PRAGMA synchronous = FULL")
        .map_err(sql(path))?;
    read_back(connection, path, "synchronous", 2)
}

/// Requires `PRAGMA name` to return `expected` (§8.2).
fn read_back(connection: &Connection, path: &Path, name: &str, expected: i64) -> Result<()> {
    let value: i64 = connection
        .pragma_query_value(None, name, |row| row.get(0))
        .map_err(sql(path))?;
    if value == expected {
        Ok(())
    } else {
        Err(setup_error(
            path,
            &format!("PRAGMA {name} reads {value}, not {expected}"),
        ))
    }
}

/// SQL-3 and SQL-4: refuses a database of another application or version.
fn identity(connection: &Connection, path: &Path) -> Result<Identity> {
    let on_error = sql(path);
    let pragma = |name: &str| -> Result<i64> {
        connection
            .pragma_query_value(None, name, |row| row.get(0))
            .map_err(&on_error)
    };
    let user_version = pragma("user_version")?;
    let application_id = pragma("application_id")?;
    let user_objects: i64 = connection
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name NOT GLOB 'sqlite_*'",
            [],
            |row| row.get(0),
        )
        .map_err(&on_error)?;
    let refuse = |found: String, newer: bool| -> Result<Identity> {
        Err(ErrorKind::FormatVersion { found, newer }.into())
    };
    if user_version == 0 && (application_id != 0 || user_objects > 0) {
        let found = format!(
            "unversioned database: application_id={application_id} user_objects={user_objects}"
        );
        return refuse(found, false);
    }
    if user_version != 0 && user_version != USER_VERSION {
        return refuse(
            format!("user_version={user_version}"),
            user_version > USER_VERSION,
        );
    }
    if user_version != 0 && application_id != APPLICATION_ID {
        return refuse(format!("application_id={application_id}"), false);
    }
    Ok(if user_version == 0 {
        Identity::Pristine
    } else {
        Identity::Dsh
    })
}

/// SQL-5: the three tables, the store identity (SQL-14) and the identity pragmas.
fn initialize(transaction: &Connection, path: &Path) -> Result<()> {
    let on_error = sql(path);
    for statement in SCHEMA {
        transaction.execute_batch(statement).map_err(&on_error)?;
    }
    transaction
        .execute(
            "INSERT INTO persistence_state (singleton, store_id) VALUES (1, ?1)",
            [uuid_v4()?],
        )
        .map_err(&on_error)?;
    transaction
        .execute_batch(&format!(
            "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {USER_VERSION};"
        ))
        .map_err(&on_error)
}

/// One schema object as SQL-8 compares it: type, name, table name, normalized SQL.
type SchemaObject = (String, String, String, Option<String>);

/// SQL-8: the user objects must equal, field by field, those of a fresh database made
/// from the SQL-7 statements.
fn check_schema(connection: &Connection, path: &Path) -> Result<()> {
    let found = schema_objects(connection).map_err(sql(path))?;
    let expected = reference_schema().map_err(sql(Path::new(":memory:")))?;
    if found == expected {
        return Ok(());
    }
    let describe = |(kind, name, ..): &SchemaObject| format!("{kind} {name}");
    let unexpected = found
        .iter()
        .find(|o| !expected.iter().any(|e| e.0 == o.0 && e.1 == o.1));
    let missing = expected
        .iter()
        .find(|e| !found.iter().any(|o| o.0 == e.0 && o.1 == e.1));
    let difference = match (unexpected, missing) {
        (Some(object), _) => format!("unexpected {}", describe(object)),
        (None, Some(object)) => format!("missing {}", describe(object)),
        (None, None) => {
            let changed = found.iter().zip(&expected).find(|(f, e)| f != e);
            changed.map_or_else(String::new, |(f, _)| format!("{} differs", describe(f)))
        }
    };
    Err(ErrorKind::FormatVersion {
        found: format!("user_version=17 with another schema: {difference}"),
        newer: false,
    }
    .into())
}

/// The user objects of `sqlite_schema` ordered by type then name, SQL normalized (SQL-8).
fn schema_objects(connection: &Connection) -> rusqlite::Result<Vec<SchemaObject>> {
    let mut statement = connection.prepare(
        "SELECT type, name, tbl_name, sql FROM sqlite_schema \
         WHERE name NOT GLOB 'sqlite_*' ORDER BY type, name",
    )?;
    let mut rows = statement.query([])?;
    let mut objects = Vec::new();
    while let Some(row) = rows.next()? {
        let field = |i: usize| -> rusqlite::Result<Option<String>> {
            Ok(text(row.get_ref(i)?).map(Cow::into_owned))
        };
        let sql = field(3)?.map(|sql| normalize_sql(&sql));
        objects.push((
            field(0)?.unwrap_or_default(),
            field(1)?.unwrap_or_default(),
            field(2)?.unwrap_or_default(),
            sql,
        ));
    }
    Ok(objects)
}

/// The SQL-8 reference list, from a fresh in-memory database made from SQL-7.
fn reference_schema() -> rusqlite::Result<Vec<SchemaObject>> {
    let connection = Connection::open_in_memory()?;
    for statement in SCHEMA {
        connection.execute_batch(statement)?;
    }
    schema_objects(&connection)
}

/// SQL-7: every run of whitespace becomes one space, and the ends are trimmed. Whitespace
/// is JavaScript's `\s`, as the reference's normalization uses.
fn normalize_sql(sql: &str) -> String {
    let is_space = |c: char| {
        matches!(
            c,
            '\t' | '\n' | '\u{b}' | '\u{c}' | '\r' | ' ' | '\u{a0}' | '\u{1680}' | '\u{2000}'
                ..='\u{200a}'
                    | '\u{2028}'
                    | '\u{2029}'
                    | '\u{202f}'
                    | '\u{205f}'
                    | '\u{3000}'
                    | '\u{feff}'
        )
    };
    sql.split(is_space)
        .filter(|word| !word.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// SQL-14: exactly one `persistence_state` row, whose `store_id` is a UUID.
fn check_store_id(connection: &Connection, path: &Path) -> Result<()> {
    let on_error = sql(path);
    let mut statement = connection
        .prepare("SELECT singleton, store_id FROM persistence_state")
        .map_err(&on_error)?;
    let mut rows = statement.query([]).map_err(&on_error)?;
    let mut valid = 0;
    let mut count = 0;
    while let Some(row) = rows.next().map_err(&on_error)? {
        count += 1;
        let singleton = row.get_ref(0).map_err(&on_error)?;
        let store_id = text(row.get_ref(1).map_err(&on_error)?);
        if singleton == ValueRef::Integer(1) && store_id.is_some_and(|id| is_uuid(&id)) {
            valid += 1;
        }
    }
    if count == 1 && valid == 1 {
        Ok(())
    } else {
        Err(corrupt(
            "table persistence_state".to_owned(),
            "no valid store identity",
        ))
    }
}

/// What [`prepare_file`] created, so that a failed export can remove it again.
#[derive(Debug, Default)]
struct Created {
    file: bool,
    /// Directories made for the file, outermost first.
    directories: Vec<PathBuf>,
}

impl Created {
    /// Removes what this call created (best effort: the export already failed). SQLite's
    /// side files go too; the connection is closed by then, so they are stale.
    fn undo(&self, path: &Path) {
        if self.file {
            for suffix in ["", "-wal", "-shm", "-journal"] {
                let mut side = path.as_os_str().to_owned();
                side.push(suffix);
                let _ = fs::remove_file(side);
            }
        }
        for directory in self.directories.iter().rev() {
            let _ = fs::remove_dir(directory);
        }
    }
}

/// SQL-1 and SQL-2 for an export: creates the parent directories (0700) and the file
/// (create-exclusive, 0600) when missing, and checks both.
fn prepare_file(path: &Path) -> Result<Created> {
    let euid = effective_uid()?;
    let parent = parent_of(path);
    let mut created = Created::default();
    let mut missing = parent;
    while !missing.as_os_str().is_empty() && fs::symlink_metadata(missing).is_err() {
        created.directories.insert(0, missing.to_owned());
        match missing.parent() {
            Some(up) => missing = up,
            None => break,
        }
    }
    if !created.directories.is_empty() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|e| Error::io("mkdir", parent, &e))?;
    }
    let checked = check_parent(path, euid).and_then(|()| match fs::symlink_metadata(path) {
        Ok(_) => check_file(path, euid),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| Error::io("create", path, &e))?;
            created.file = true;
            check_file(path, euid)
        }
        Err(e) => Err(Error::io("stat", path, &e)),
    });
    match checked {
        Ok(()) => Ok(created),
        Err(e) => {
            created.undo(path);
            Err(e)
        }
    }
}

/// SQL-1: the parent is a real directory, ours, not group- or world-writable.
fn check_parent(path: &Path, euid: u32) -> Result<()> {
    let parent = parent_of(path);
    let metadata = fs::symlink_metadata(parent).map_err(|e| Error::io("stat", parent, &e))?;
    if !metadata.file_type().is_dir() {
        return Err(unsafe_path(
            parent,
            "session database parent must be a real directory",
        ));
    }
    if metadata.uid() != euid || metadata.mode() & 0o022 != 0 {
        return Err(unsafe_path(
            parent,
            "session database parent must be owned by the current user and not group/world-writable",
        ));
    }
    Ok(())
}

/// SQL-2: the file is a regular file (not a symbolic link), ours, with no group or other
/// permission bits.
fn check_file(path: &Path, euid: u32) -> Result<()> {
    let metadata = fs::symlink_metadata(path).map_err(|e| Error::io("stat", path, &e))?;
    if !metadata.file_type().is_file() {
        return Err(unsafe_path(
            path,
            "session database must be a regular file, not a symbolic link",
        ));
    }
    if metadata.uid() != euid || metadata.mode() & 0o077 != 0 {
        return Err(unsafe_path(
            path,
            "session database must be owned by the current user and accessible only by that user",
        ));
    }
    Ok(())
}

/// The directory holding `path` (`.` for a bare file name).
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// The effective uid, for the owner checks of SQL-1 and SQL-2.
fn effective_uid() -> Result<u32> {
    const STATUS: &str = "/proc/self/status";
    let status = fs::read_to_string(STATUS).map_err(|e| Error::io("read", STATUS, &e))?;
    // `Uid:` lists the real, effective, saved and file-system uids.
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|uids| uids.split_whitespace().nth(1))
        .and_then(|euid| euid.parse().ok())
        .ok_or_else(|| {
            let error = std::io::Error::new(std::io::ErrorKind::InvalidData, "no Uid line");
            Error::io("read", STATUS, &error)
        })
}

/// A random (version 4) UUID in lowercase (SQL-14), from the kernel's random source.
fn uuid_v4() -> Result<String> {
    const RANDOM: &str = "/dev/urandom";
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut bytes = [0u8; 16];
    fs::File::open(RANDOM)
        .and_then(|mut source| source.read_exact(&mut bytes))
        .map_err(|e| Error::io("read", RANDOM, &e))?;
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let mut uuid = String::with_capacity(36);
    for (i, byte) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            uuid.push('-');
        }
        uuid.push(char::from(HEX[usize::from(byte >> 4)]));
        uuid.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    Ok(uuid)
}

/// SQL-14: `^[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`,
/// case-insensitive.
fn is_uuid(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => *b == b'-',
            14 => (b'1'..=b'8').contains(b),
            19 => matches!(b.to_ascii_lowercase(), b'8' | b'9' | b'a' | b'b'),
            _ => b.is_ascii_hexdigit(),
        })
}

/// One unsigned LEB128 varint (SQL-19).
fn push_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(u8::try_from(value & 0x7f).expect("seven bits") | 0x80);
        value >>= 7;
    }
    out.push(u8::try_from(value).expect("below 0x80"));
}

/// One varint and the bytes after it, with the checks of SQL-20: at most 9 bytes,
/// complete, canonical.
fn read_varint(bytes: &[u8]) -> Result<(u64, &[u8]), &'static str> {
    const VARINT_BYTES_MAX: usize = 9;
    let mut value = 0u64;
    for (i, &byte) in bytes.iter().enumerate() {
        if i == VARINT_BYTES_MAX {
            return Err("varint is out of range");
        }
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            if i > 0 && byte == 0 {
                return Err("non-canonical varint");
            }
            return Ok((value, &bytes[i + 1..]));
        }
    }
    if bytes.len() > VARINT_BYTES_MAX {
        return Err("varint is out of range");
    }
    Err("truncated varint")
}

/// A value as text: TEXT columns read as SQLite holds them (invalid UTF-8 replaced).
fn text(value: ValueRef<'_>) -> Option<Cow<'_, str>> {
    match value {
        ValueRef::Text(bytes) => Some(String::from_utf8_lossy(bytes)),
        _ => None,
    }
}

/// `None` for NULL, the text for TEXT, `Err(reason)` for anything else.
fn optional_text<'v>(
    value: ValueRef<'v>,
    reason: &'static str,
) -> Result<Option<Cow<'v, str>>, &'static str> {
    match value {
        ValueRef::Null => Ok(None),
        other => text(other).map(Some).ok_or(reason),
    }
}

/// SQL-12: a safe integer column (`unsigned_abs`: `abs` overflows on the lowest i64).
fn safe_integer(value: ValueRef<'_>) -> Option<i64> {
    match value {
        ValueRef::Integer(n) if n.unsigned_abs() <= SAFE_MAX_U64 => Some(n),
        _ => None,
    }
}

/// `None` for NULL, the value for a non-negative safe integer, `Err(reason)` otherwise.
fn non_negative(value: ValueRef<'_>, reason: &'static str) -> Result<Option<u64>, &'static str> {
    match value {
        ValueRef::Null => Ok(None),
        other => safe_integer(other)
            .and_then(|n| u64::try_from(n).ok())
            .map(Some)
            .ok_or(reason),
    }
}

/// WTF-8 as SQLite text: each lone surrogate becomes U+FFFD, as a JavaScript string does
/// when it is encoded as UTF-8 for SQLite.
fn wtf8_text(wtf8: &[u8]) -> String {
    let mut out = String::with_capacity(wtf8.len());
    let mut rest = wtf8;
    loop {
        match std::str::from_utf8(rest) {
            Ok(valid) => {
                out.push_str(valid);
                return out;
            }
            Err(error) => {
                let (valid, invalid) = rest.split_at(error.valid_up_to());
                out.push_str(std::str::from_utf8(valid).expect("checked valid"));
                out.push('\u{fffd}');
                // A surrogate is `ED A0..BF 80..BF` in WTF-8; other damage (not WTF-8)
                // loses what the UTF-8 decoder would skip.
                let surrogate = invalid.len() >= 3 && (0xA0..=0xBF).contains(&invalid[1]);
                let skip = if surrogate {
                    3
                } else {
                    error.error_len().unwrap_or(invalid.len())
                };
                rest = &invalid[skip..];
            }
        }
    }
}

/// Where a row is: the database file, the table, the session and the row's seq.
fn row_location(path: &Path, id: &str, seq: impl std::fmt::Display) -> String {
    format!(
        "{} table events, session {id:?}, row seq {seq}",
        path.display()
    )
}

fn corrupt(location: String, reason: &str) -> Error {
    ErrorKind::Corrupt {
        location,
        reason: reason.to_owned(),
    }
    .into()
}

fn invalid_source(seq: u64) -> Error {
    corrupt(
        format!("event source, seq {seq}"),
        "the event source did not return a valid event",
    )
    .at_seq(seq)
}

fn unsafe_path(path: &Path, reason: &'static str) -> Error {
    ErrorKind::UnsafePath {
        path: path.to_owned(),
        reason,
    }
    .into()
}

fn setup_error(path: &Path, message: &str) -> Error {
    ErrorKind::Io {
        op: "sqlite",
        path: path.to_owned(),
        kind: std::io::ErrorKind::Other,
        message: message.to_owned(),
    }
    .into()
}

fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// Maps a rusqlite error on the database at `path`: a file that is not a database is a
/// foreign format, SQLite's own corruption report is `CORRUPT`, the rest is `IO`.
fn sql(path: &Path) -> impl Fn(rusqlite::Error) -> Error + '_ {
    move |error| match error.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => ErrorKind::FormatVersion {
            found: "not a SQLite database".to_owned(),
            newer: false,
        }
        .into(),
        Some(ErrorCode::DatabaseCorrupt) => {
            corrupt(format!("database {}", path.display()), &error.to_string())
        }
        _ => setup_error(path, &error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The worked examples of SQL-19: array, BLOB bytes.
    const SEQS_VECTORS: [(&[u64], &[u8]); 9] = [
        (&[5], &[0x05]),
        (&[5, 3, 9], &[0x05, 0x03, 0x0C]),
        (&[], &[]),
        (&[0, 1_000_000], &[0x00, 0x80, 0x89, 0x7A]),
        (&[5, 3, 4], &[0x05, 0x03, 0x02]),
        (&[127, 128], &[0x7F, 0x02]),
        (&[300], &[0xAC, 0x02]),
        (&[10, 9], &[0x0A, 0x01]),
        (
            &[9_007_199_254_740_991, 0],
            &[
                0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0xFD, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
                0xFF, 0x1F,
            ],
        ),
    ];

    #[test]
    fn sql_19_worked_examples_encode_and_decode() {
        for (seqs, blob) in SEQS_VECTORS {
            assert_eq!(encode_seqs(seqs), blob, "encoding {seqs:?}");
            assert_eq!(decode_seqs(blob).unwrap(), seqs, "decoding {blob:02X?}");
        }
    }

    #[test]
    fn sql_20_invalid_blobs_are_refused_with_the_reference_reason() {
        let cases: [(&[u8], &str); 5] = [
            (&[0x05, 0x80], "truncated varint"),
            (&[0x85, 0x00], "non-canonical varint"),
            (
                &[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01],
                "varint is out of range",
            ),
            (
                &[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F],
                "varint is out of range",
            ),
            (&[0x00, 0x01], "decoded seq is out of range"),
        ];
        for (blob, reason) in cases {
            assert_eq!(decode_seqs(blob), Err(reason), "blob {blob:02X?}");
        }
    }

    #[test]
    fn sql_20_decoder_keeps_duplicates_and_single_zero_byte() {
        assert_eq!(decode_seqs(&[0x05, 0x03, 0x00]).unwrap(), [5, 3, 3]);
        assert_eq!(decode_seqs(&[0x00]).unwrap(), [0]);
        // A later value may reach 2^54 − 2, but the sum must stay a seq.
        let mut blob = encode_seqs(&[SAFE_MAX_U64]);
        push_varint(&mut blob, 2 * SAFE_MAX_U64 + 1);
        assert_eq!(decode_seqs(&blob), Err("varint is out of range"));
        let mut blob = encode_seqs(&[1]);
        push_varint(&mut blob, 2 * SAFE_MAX_U64);
        assert_eq!(decode_seqs(&blob), Err("decoded seq is out of range"));
    }

    proptest! {
        #[test]
        fn sql_19_seqs_round_trip(seqs in prop::collection::vec(0..=SAFE_MAX_U64, 0..40)) {
            prop_assert_eq!(decode_seqs(&encode_seqs(&seqs)).unwrap(), seqs);
        }

        #[test]
        fn sql_20_decoder_never_panics(blob in prop::collection::vec(any::<u8>(), 0..24)) {
            if let Ok(seqs) = decode_seqs(&blob) {
                prop_assert_eq!(encode_seqs(&seqs), blob);
            }
        }
    }

    #[test]
    fn sql_14_uuids_are_random_v4_lowercase() {
        let a = uuid_v4().unwrap();
        let b = uuid_v4().unwrap();
        assert_ne!(a, b);
        for uuid in [&a, &b] {
            assert!(is_uuid(uuid), "{uuid}");
            assert_eq!(uuid, &uuid.to_lowercase());
            assert_eq!(&uuid[14..15], "4");
        }
        assert!(is_uuid("123E4567-E89B-12D3-A456-426614174000"));
        assert!(
            !is_uuid("123e4567-e89b-02d3-a456-426614174000"),
            "version 0"
        );
        assert!(
            !is_uuid("123e4567-e89b-12d3-c456-426614174000"),
            "variant c"
        );
        assert!(!is_uuid("123e4567e89b12d3a456426614174000"));
        assert!(!is_uuid("123e4567-e89b-12d3-a456-42661417400g"));
    }

    #[test]
    fn lone_surrogates_become_one_replacement_character_each() {
        assert_eq!(wtf8_text(b"a\xED\xA0\x80b"), "a\u{fffd}b");
        assert_eq!(wtf8_text(b"\xED\xBF\xBF"), "\u{fffd}");
        let three = "\u{fffd}\u{fffd}\u{fffd}";
        assert_eq!(wtf8_text(three.as_bytes()), three, "real U+FFFD are kept");
        assert_eq!(wtf8_text(b"ok \xC3\xA9"), "ok \u{e9}");
    }

    #[test]
    fn sql_7_normalization_collapses_javascript_whitespace() {
        assert_eq!(
            normalize_sql("\n  CREATE TABLE t (\n\t a INTEGER\u{a0}) STRICT \r\n"),
            "CREATE TABLE t ( a INTEGER ) STRICT"
        );
        assert_eq!(
            normalize_sql("a\u{85}b"),
            "a\u{85}b",
            "NEL is not \\s in JavaScript"
        );
        let reference = reference_schema().unwrap();
        let names: Vec<&str> = reference.iter().map(|o| o.1.as_str()).collect();
        assert_eq!(names, ["events", "persistence_state", "sessions"]);
        assert_eq!(reference[0].3.as_deref(), Some(SCHEMA[2]));
    }

    #[test]
    fn sql_17_text_below_4096_bytes_and_one_shot_frames_above() {
        let short = format!("\"{}\"", "x".repeat(4093));
        assert_eq!(short.len(), 4095);
        assert!(matches!(
            data_value(short, Path::new("t")).unwrap(),
            SqlValue::Text(_)
        ));
        let long = format!(r#"{{"text":"{}"}}"#, "x".repeat(5000));
        let SqlValue::Blob(frame) = data_value(long.clone(), Path::new("t")).unwrap() else {
            panic!("5,000 x's compress");
        };
        // One-shot: single segment, no checksum, 2-byte content size minus 256 (§8.10).
        let size = u16::try_from(long.len() - 256).unwrap().to_le_bytes();
        assert_eq!(frame[..7], [0x28, 0xB5, 0x2F, 0xFD, 0x60, size[0], size[1]]);
        assert_eq!(decompress(&frame, long.len()).unwrap(), long.as_bytes());
    }

    #[test]
    fn sql_18_blobs_must_be_exactly_one_bounded_frame() {
        let frame = zstd::bulk::compress(&[b'a'; 5000], 3).unwrap();
        assert_eq!(decompress(&frame, 5000).unwrap().len(), 5000);
        assert_eq!(
            decompress(&frame, 4999),
            Err("data exceeds 4999 UTF-8 bytes".to_owned())
        );
        let mut trailing = frame.clone();
        trailing.push(0);
        assert!(
            decompress(&trailing, 5000)
                .unwrap_err()
                .contains("after its")
        );
        let mut twice = frame.clone();
        twice.extend_from_slice(&frame);
        assert!(
            decompress(&twice, 10_000).is_err(),
            "a second frame is refused"
        );
        assert!(
            decompress(&frame[..frame.len() - 1], 5000).is_err(),
            "truncated"
        );
        assert!(decompress(b"{\"a\":1}", 5000).is_err(), "not zstd");
        assert!(decompress(b"", 5000).is_err(), "empty");
    }

    fn text_delta(seq: u64, text: &str) -> String {
        let mut out = format!(
            r#"{{"type":"assistant/chunk","seq":{seq},"time":7,"data":{{"turn":1,"step":1,"chunk":{{"type":"text-delta","index":0,"text":"#
        );
        push_js_string(&mut out, text.as_bytes());
        out.push_str("}}}");
        out
    }

    /// The rows SQL-23 cuts `texts` into: `Err(seq)` for a scalar, `Ok(members)` for a row.
    fn cut(texts: &[String]) -> Vec<Result<usize, u64>> {
        let events: Vec<String> = (0u64..).zip(texts).map(|(s, t)| text_delta(s, t)).collect();
        let mut packer = SqlPacker::default();
        let mut out = Vec::new();
        for event in &events {
            packer.push(Json::parse(event).unwrap(), &mut out);
        }
        packer.finish(&mut out);
        out.iter()
            .map(|record| match record {
                SqlRecord::Packed(row) => {
                    assert!(row.data.len() <= rows::SQL_ROW_DATA_BYTES_MAX);
                    Ok(row.members)
                }
                SqlRecord::Scalar(json) => {
                    Err(json.root().get("seq").unwrap().as_safe_u64().unwrap())
                }
            })
            .collect()
    }

    /// One generated event: a delta (kind, index, tool-call name, text length, time
    /// step) or, for kind 3, an event that cannot be packed.
    fn generated(seq: u64, time: i64, (kind, index, named, len): (u8, u8, bool, usize)) -> String {
        let text = "w".repeat(len);
        let chunk = match kind {
            0 => format!(r#"{{"type":"text-delta","index":{index},"text":"{text}"}}"#),
            1 => format!(r#"{{"type":"reasoning-delta","index":{index},"text":"{text}"}}"#),
            2 if named => format!(
                r#"{{"type":"tool-call-delta","index":{index},"id":"c","name":"n","argumentsDelta":"{text}"}}"#
            ),
            2 => format!(
                r#"{{"type":"tool-call-delta","index":{index},"id":"c","argumentsDelta":"{text}"}}"#
            ),
            _ => format!(r#"{{"type":"block-start","index":{index}}}"#),
        };
        format!(
            r#"{{"type":"assistant/chunk","seq":{seq},"time":{time},"data":{{"turn":1,"step":1,"chunk":{chunk}}}}}"#
        )
    }

    /// A generated event for [`generated`] and its time step; one text in `1 + small`
    /// is 300,000 bytes long.
    fn generated_event(small: u32) -> impl Strategy<Value = ((u8, u8, bool, usize), i64)> {
        (
            (
                prop_oneof![6 => Just(0u8), 1 => 0u8..4],
                prop_oneof![6 => Just(0u8), 1 => Just(1u8)],
                prop_oneof![6 => Just(false), 1 => Just(true)],
                prop_oneof![small => 0usize..4, 1 => Just(300_000usize)],
            ),
            -2i64..3,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// SQL-21 to SQL-23 against ROW-10: whatever the packer cuts, expanding its rows
        /// gives back the batch, and every row keeps the SQLite limits.
        #[test]
        fn sql_23_packed_rows_expand_to_the_batch(
            events in prop_oneof![
                // Long runs of small deltas, now and then broken.
                prop::collection::vec(generated_event(40), 0..400),
                // A few deltas of which about half are 300,000 bytes: the 1 MiB cut.
                prop::collection::vec(generated_event(1), 0..12),
            ]
        ) {
            let mut time = 0;
            let texts: Vec<String> = (0u64..)
                .zip(&events)
                .map(|(seq, (event, step))| {
                    time += step;
                    generated(seq, time, *event)
                })
                .collect();
            let mut packer = SqlPacker::default();
            let mut out = Vec::new();
            for text in &texts {
                packer.push(Json::parse(text).unwrap(), &mut out);
            }
            packer.finish(&mut out);
            let mut expanded = Vec::new();
            for record in &out {
                match record {
                    SqlRecord::Scalar(json) => expanded.push(json.text().to_owned()),
                    SqlRecord::Packed(row) => {
                        prop_assert!((3..=1024).contains(&row.members));
                        prop_assert!(row.data.len() <= rows::SQL_ROW_DATA_BYTES_MAX);
                        let members = rows::expand_sql_row(row.tag, row.seq0, row.time0, &row.data);
                        let members = members.unwrap();
                        prop_assert_eq!(members.len(), row.members);
                        expanded.extend(members);
                    }
                }
            }
            prop_assert_eq!(expanded, texts);
        }
    }

    #[test]
    fn sql_23_split_examples() {
        let z = |n: usize| vec!["z".to_owned(); n];
        assert_eq!(cut(&z(1027)), [Ok(1024), Ok(3)]);
        assert_eq!(cut(&z(1025)), [Ok(1024), Err(1024)]);
        assert_eq!(cut(&z(2)), [Err(0), Err(1)]);
        let sized = |big: usize, count: usize, small: usize| {
            let mut texts = vec!["b".repeat(big); count];
            texts.extend(vec!["s".repeat(small); 3]);
            texts
        };
        assert_eq!(cut(&sized(400_000, 3, 100)), [Err(0), Ok(5)]);
        assert_eq!(cut(&sized(300_000, 4, 10)), [Ok(3), Ok(4)]);
    }

    #[test]
    fn sql_26_packed_rows_need_3_to_1024_members_and_a_tag() {
        let data = |n: usize| {
            let texts = vec!["\"t\""; n].join(",");
            let dt = vec!["0"; n.saturating_sub(1)].join(",");
            format!(r#"{{"turn":1,"step":1,"index":0,"dt":[{dt}],"texts":[{texts}]}}"#)
        };
        assert_eq!(
            rows::expand_sql_row("text-chunks", 4, 9, &data(3))
                .unwrap()
                .len(),
            3
        );
        assert_eq!(
            rows::expand_sql_row("text-chunks", 4, 9, &data(1024))
                .unwrap()
                .len(),
            1024
        );
        for n in [1, 2, 1025] {
            let error = rows::expand_sql_row("text-chunks", 4, 9, &data(n)).unwrap_err();
            assert_eq!(
                error,
                "texts must contain 3..1024 strings".into(),
                "{n} members"
            );
        }
        let error = rows::expand_sql_row("assistant/chunk", 4, 9, &data(3)).unwrap_err();
        assert_eq!(error, "packed discriminator requires a chunk tag".into());
        // A repeated key is not malformed: the reference decodes it (JSON-4).
        let repeated = format!("{},\"turn\":1}}", &data(3)[..data(3).len() - 1]);
        assert!(matches!(
            rows::expand_sql_row("text-chunks", 4, 9, &repeated),
            Err(rows::RowFault::RepeatedKey(_))
        ));
        let injected = format!("{},\"x\":1", data(3));
        assert!(rows::expand_sql_row("text-chunks", 4, 9, &injected).is_err());
        let member = &rows::expand_sql_row("text-chunks", 4, 9, &data(3)).unwrap()[2];
        assert_eq!(
            member,
            r#"{"type":"assistant/chunk","seq":6,"time":9,"data":{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":"t"}}}"#
        );
    }
}
