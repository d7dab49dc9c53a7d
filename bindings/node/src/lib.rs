//! The native half of the npm package `surfacelog`: a thin napi-rs layer over the crate's
//! facade. `index.js` wraps it (errors with `.code`, object forms of JSON) and `index.d.ts`
//! declares what hosts call; nothing here is meant to be called directly.
//!
//! Every call that may touch the disk (opening, appending, flushing, reading events or
//! messages, closing) runs on the libuv thread pool as a promise ([`AsyncTask`]), never
//! on the event loop. JSON crosses as text both ways, so event data keeps its exact bytes.
//! A refusal rejects with an `Error` whose message is `surfacelog:` followed by a JSON
//! object `{code, message, session?, seq?, outcome}`, which `index.js` turns into an
//! error with those properties.

pub mod dsh;

use std::sync::{Arc, Mutex, PoisonError};

use napi::bindgen_prelude::*;
use napi_derive::napi;
use surfacelog::internals::event::EventSource;
use surfacelog::internals::session::SessionLog;
use surfacelog::internals::store::ReadOnlyLog;
use surfacelog::{
    Boundary, CompactOptions, Durability, EventRef, MessageText, SharedBytes, Store, StoreOptions,
    StoredSession,
};

/// The prefix of a surfacelog refusal's message, before its JSON payload.
const ERROR_PREFIX: &str = "surfacelog:";

/// A refusal of the engine as a JS error: its contract code and context as JSON.
fn refusal(error: &surfacelog::Error) -> napi::Error {
    let outcome = match error.outcome() {
        surfacelog::Outcome::NothingWritten => "nothingWritten",
        surfacelog::Outcome::FateUnknown => "fateUnknown",
        surfacelog::Outcome::Poisoned => "poisoned",
        _ => "other",
    };
    let payload = serde_json::json!({
        "code": error.code(),
        "message": error.to_string(),
        "session": error.session(),
        "seq": error.seq(),
        "outcome": outcome,
    });
    napi::Error::new(Status::GenericFailure, format!("{ERROR_PREFIX}{payload}"))
}

/// A refusal of the binding itself (a closed session, a bad argument), with `code`.
fn misuse(code: &str, message: &str) -> napi::Error {
    let payload = serde_json::json!({
        "code": code,
        "message": message,
        "session": null,
        "seq": null,
        "outcome": "nothingWritten",
    });
    napi::Error::new(Status::GenericFailure, format!("{ERROR_PREFIX}{payload}"))
}

/// A seq as a JS number: seqs stay far below 2^53.
#[expect(
    clippy::cast_possible_wrap,
    reason = "seqs are below 2^53 (contract §2: safe integers)"
)]
fn js_seq(seq: u64) -> i64 {
    seq as i64
}

/// A JS number as a seq: `INVALID_BOUNDARY`-free checks are the engine's; this only
/// refuses what no seq can be.
fn seq_of(value: i64, what: &str) -> Result<u64> {
    u64::try_from(value).map_err(|_| misuse("INVALID_ARGUMENT", &format!("{what}: a seq is ≥ 0")))
}

/// How [`open_store`] opens a store.
#[napi(object)]
#[derive(Default)]
pub struct StoreOpenOptions {
    /// `"sync"` (default: an append resolves once durable), `"manual"` (durable at
    /// `flush()` and `close()`), or `"batch"` (durable within `batchDelayMs`).
    pub durability: Option<String>,
    /// For `"batch"`: the longest an appended event stays not durable, in ms (default 10).
    pub batch_delay_ms: Option<u32>,
    /// The capacity of a new log segment in bytes (default 8 MiB).
    pub segment_bytes: Option<f64>,
    /// Refuse to create a missing store (`STORE_NOT_FOUND`); default `false`.
    pub must_exist: Option<bool>,
    /// Store streamed chunks as chunk records in version 1 records (default `true`);
    /// `false` turns compact records off too, and keeps the log readable by builds from
    /// before chunk records.
    pub chunk_records: Option<bool>,
    /// Store events as compact records (log-format.md §4.2; default `true`): about a third
    /// of the bytes of version 1 records; builds from before them refuse such a log.
    /// `false`: version 1 records.
    pub compact_records: Option<bool>,
}

/// The store options from the JS ones.
fn store_options(options: &StoreOpenOptions) -> Result<StoreOptions> {
    let durability = match options.durability.as_deref() {
        None | Some("sync") => Durability::Sync,
        Some("manual") => Durability::Manual,
        Some("batch") => Durability::Batch {
            max_delay: std::time::Duration::from_millis(u64::from(
                options.batch_delay_ms.unwrap_or(10),
            )),
        },
        Some(other) => {
            return Err(misuse(
                "INVALID_ARGUMENT",
                &format!("durability {other:?}: one of \"sync\", \"manual\", \"batch\""),
            ));
        }
    };
    let mut store = StoreOptions::new()
        .durability(durability)
        .compact_records(options.compact_records.unwrap_or(true))
        .chunk_records(options.chunk_records.unwrap_or(true));
    if let Some(bytes) = options.segment_bytes {
        // A whole number: 1.5 bytes is a mistake to report, never one to round.
        if !(bytes.is_finite() && bytes >= 0.0 && bytes.fract() == 0.0) {
            return Err(misuse(
                "INVALID_ARGUMENT",
                "segmentBytes: a whole byte count",
            ));
        }
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a whole, non-negative byte count, clamped by the engine"
        )]
        let bytes = bytes as u64;
        store = store.segment_bytes(bytes);
    }
    Ok(store)
}

/// Opens the store in `dir`, creating it unless `mustExist`.
#[napi(ts_return_type = "Promise<NativeStore>")]
pub fn open_store(
    dir: String,
    options: Option<StoreOpenOptions>,
) -> AsyncTask<Job<Store, NativeStore>> {
    let options = options.unwrap_or_default();
    job(
        move || {
            let store_options = store_options(&options)?;
            let opened = if options.must_exist.unwrap_or(false) {
                Store::open(&dir, store_options)
            } else {
                Store::open_or_create(&dir, store_options)
            };
            opened.map_err(|e| refusal(&e))
        },
        |store| NativeStore {
            inner: Arc::new(store),
        },
    )
}

/// A store of sessions.
#[napi]
pub struct NativeStore {
    inner: Arc<Store>,
}

/// Work run once on the libuv thread pool, its output turned into a JS value by
/// `into_js` back on the event loop: every promise of this module is one.
pub struct Job<T: Send + 'static, J> {
    run: Option<Box<dyn FnOnce() -> Result<T> + Send>>,
    into_js: fn(T) -> J,
}

impl<T: Send + 'static, J: ToNapiValue + TypeName> Task for Job<T, J> {
    type Output = T;
    type JsValue = J;

    fn compute(&mut self) -> Result<T> {
        let run = self
            .run
            .take()
            .ok_or_else(|| misuse("INVALID_ARGUMENT", "the task ran twice"))?;
        run()
    }

    fn resolve(&mut self, _env: Env, output: T) -> Result<J> {
        Ok((self.into_js)(output))
    }
}

/// A [`Job`] of `run` and `into_js`.
fn job<T: Send + 'static, J: ToNapiValue + TypeName>(
    run: impl FnOnce() -> Result<T> + Send + 'static,
    into_js: fn(T) -> J,
) -> AsyncTask<Job<T, J>> {
    AsyncTask::new(Job {
        run: Some(Box::new(run)),
        into_js,
    })
}

/// A store operation as a [`Job`]: its refusal becomes the JS error.
fn store_task<T: Send + 'static, J: ToNapiValue + TypeName>(
    store: &Arc<Store>,
    run: impl FnOnce(&Store) -> surfacelog::Result<T> + Send + 'static,
    into_js: fn(T) -> J,
) -> AsyncTask<Job<T, J>> {
    let store = store.clone();
    job(move || run(&store).map_err(|e| refusal(&e)), into_js)
}

/// A session opened for writing, with what opening it did.
pub struct OpenedSession {
    session: StoredSession,
    report: OpenReport,
}

/// What opening a session did (contract §8, log-format.md §7).
#[napi(object)]
#[derive(Clone, Default)]
pub struct OpenReport {
    /// A torn tail set aside into a quarantine file, if any: `{segment, offset, bytes,
    /// quarantine}`.
    pub torn_tail: Option<TornTail>,
    /// How many repair closers were appended (synthetic tool results, step and turn ends).
    pub closers: i64,
    /// Whether the surface checkpoint was used.
    pub checkpoint_used: bool,
}

/// A torn tail recovery set aside (RCV-9, RCV-12).
#[napi(object)]
#[derive(Clone)]
pub struct TornTail {
    /// The segment file.
    pub segment: String,
    /// Where the dropped bytes started.
    pub offset: f64,
    /// How many bytes were set aside.
    pub bytes: f64,
    /// The quarantine file holding them.
    pub quarantine: String,
}

#[expect(
    clippy::cast_precision_loss,
    reason = "offsets and byte counts of a segment fit in 2^53"
)]
fn open_report(opened: &surfacelog::Opened) -> OpenReport {
    OpenReport {
        torn_tail: opened.log.torn_tail.as_ref().map(|t| TornTail {
            segment: t.segment.display().to_string(),
            offset: t.offset as f64,
            bytes: t.bytes as f64,
            quarantine: t.quarantine.display().to_string(),
        }),
        closers: js_seq(opened.closers),
        checkpoint_used: opened.checkpoint.is_ok(),
    }
}

fn opened_session((session, opened): (StoredSession, surfacelog::Opened)) -> OpenedSession {
    OpenedSession {
        report: open_report(&opened),
        session,
    }
}

fn new_session(opened: OpenedSession) -> NativeSession {
    NativeSession::new(Held::Writer(opened.session), opened.report)
}

/// A session header as listed: its id and exact text.
#[napi(object)]
pub struct ListedSession {
    /// The session id.
    pub id: String,
    /// The header's JSON text, exactly as created.
    pub header: String,
}

/// A session the listing could not read (its `header.json` damaged, a link): its error.
#[napi(object)]
pub struct DamagedSession {
    /// The contract code (`CORRUPT`, `UNSAFE_PATH`).
    pub code: String,
    /// The message, naming the file.
    pub message: String,
}

/// The store's sessions.
#[napi(object)]
pub struct Listing {
    /// The sessions whose header reads, sorted by id.
    pub sessions: Vec<ListedSession>,
    /// The sessions that cannot be listed, each with its error.
    pub damaged: Vec<DamagedSession>,
}

#[napi]
impl NativeStore {
    /// Creates session `id` with an optional header (JSON text) and seed events (JSON
    /// texts), and opens it for writing.
    #[napi(ts_return_type = "Promise<NativeSession>")]
    pub fn create(
        &self,
        id: String,
        header: Option<String>,
        seed: Option<Vec<String>>,
    ) -> AsyncTask<Job<OpenedSession, NativeSession>> {
        store_task(
            &self.inner,
            move |store| {
                let seed: Option<Vec<&str>> = seed
                    .as_ref()
                    .map(|s| s.iter().map(String::as_str).collect());
                let session = store.create(&id, header.as_deref(), seed.as_deref())?;
                Ok(OpenedSession {
                    session,
                    report: OpenReport::default(),
                })
            },
            new_session,
        )
    }

    /// Opens session `id` for writing: recovery, then the repair closers of an
    /// interrupted turn (contract §8).
    #[napi(ts_return_type = "Promise<NativeSession>")]
    pub fn open_session(&self, id: String) -> AsyncTask<Job<OpenedSession, NativeSession>> {
        store_task(
            &self.inner,
            move |store| store.open_session(&id).map(opened_session),
            new_session,
        )
    }

    /// [`NativeStore::open_session`], then the end-seed marker when the log ends with a
    /// seed (contract §5): a session resumed by a host.
    #[napi(ts_return_type = "Promise<NativeSession>")]
    pub fn resume(&self, id: String) -> AsyncTask<Job<OpenedSession, NativeSession>> {
        store_task(
            &self.inner,
            move |store| store.resume(&id).map(opened_session),
            new_session,
        )
    }

    /// Forks `id` at seq `at` (inclusive; `null` for its last event) into a new session
    /// `child`, opened for writing (contract §7).
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for a negative `at`; the fork's own refusals reject the promise.
    #[napi(ts_return_type = "Promise<NativeSession>")]
    pub fn fork(
        &self,
        id: String,
        at: Option<i64>,
        child: String,
    ) -> Result<AsyncTask<Job<OpenedSession, NativeSession>>> {
        let boundary = match at {
            None => Boundary::Last,
            Some(seq) => Boundary::Seq(seq_of(seq, "at")?),
        };
        Ok(store_task(
            &self.inner,
            move |store| {
                let session = store.fork(&id, boundary, &child)?;
                Ok(OpenedSession {
                    session,
                    report: OpenReport::default(),
                })
            },
            new_session,
        ))
    }

    /// The store's sessions.
    #[napi(ts_return_type = "Promise<Listing>")]
    pub fn list(&self) -> AsyncTask<Job<surfacelog::Listing, Listing>> {
        store_task(&self.inner, Store::list, |listing| Listing {
            sessions: listing
                .headers
                .iter()
                .map(|h| ListedSession {
                    id: h.id().to_owned(),
                    header: h.text().to_owned(),
                })
                .collect(),
            damaged: listing
                .damaged
                .iter()
                .map(|e| DamagedSession {
                    code: e.code().to_owned(),
                    message: e.to_string(),
                })
                .collect(),
        })
    }

    /// Moves session `id` to the store's trash (`restore` brings it back).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn delete(&self, id: String) -> AsyncTask<Job<(), ()>> {
        store_task(&self.inner, move |store| store.delete(&id), |()| ())
    }

    /// Opens session `id` read-only: no lock, no repair, nothing written.
    #[napi(ts_return_type = "Promise<NativeSession>")]
    pub fn inspect(&self, id: String) -> AsyncTask<Job<Held, NativeSession>> {
        store_task(
            &self.inner,
            move |store| store.inspect(&id).map(Held::ReadOnly),
            |held| NativeSession::new(held, OpenReport::default()),
        )
    }

    /// Rewrites session `id`'s sealed segments with chunk records (log-format.md §13),
    /// and with `level` (a Zstandard level, 1 to 22) also compressed, its message pack too
    /// (§14, message-pack.md MSP-8): the bytes saved, the pack's included.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for a level that is not an integer from 1 to 22.
    #[napi(ts_return_type = "Promise<number>")]
    pub fn compact_log(&self, id: String, level: Option<f64>) -> Result<AsyncTask<Job<u64, f64>>> {
        let options = match level {
            None => CompactOptions::new(),
            Some(level) if level.fract() == 0.0 && (1.0..=22.0).contains(&level) => {
                #[expect(clippy::cast_possible_truncation, reason = "an integer from 1 to 22")]
                let level = level as i32;
                CompactOptions::new().compression_level(level)
            }
            Some(_) => {
                return Err(misuse(
                    "INVALID_ARGUMENT",
                    "level: an integer from 1 to 22 (Zstandard)",
                ));
            }
        };
        Ok(store_task(
            &self.inner,
            move |store| {
                store.compact_log_with(&id, options).map(|report| {
                    let pack = report
                        .pack_bytes
                        .map_or(0, |(before, after)| before.saturating_sub(after));
                    report.bytes_saved() + pack
                })
            },
            #[expect(clippy::cast_precision_loss, reason = "a byte count below 2^53")]
            |bytes| bytes as f64,
        ))
    }
}

/// An event as read: its envelope fields and exact text.
#[napi(object)]
pub struct EventOut {
    /// Its seq.
    pub seq: i64,
    /// Its type.
    #[napi(js_name = "type")]
    pub event_type: String,
    /// Its time, in ms since the Unix epoch.
    pub time: i64,
    /// The event's JSON text, byte for byte as stored.
    pub text: String,
}

fn event_out(event: &EventRef<'_>) -> EventOut {
    EventOut {
        seq: js_seq(event.seq),
        event_type: event.event_type.to_string(),
        time: event.time,
        text: event.text().into_owned(),
    }
}

/// What a session handle holds.
pub enum Held {
    /// A session opened for writing.
    Writer(StoredSession),
    /// A read-only view (`store.inspect`).
    ReadOnly(surfacelog::Session<ReadOnlyLog>),
}

/// A replacement of the surface (contract §4): `seq` replaced the nodes `start..=end`,
/// taking `shadowed` off the surface.
#[napi(object)]
pub struct ReplacementOut {
    /// The replacing event's seq.
    pub seq: i64,
    /// The replaced range's first node.
    pub start: i64,
    /// The replaced range's last node.
    pub end: i64,
    /// The seqs taken off the surface, in surface order.
    pub shadowed: Vec<i64>,
}

/// Messages packed for one crossing into JS: seqs, where each text lies, and the texts:
/// most lent from the session's message pack without a copy ([`SharedBytes`], which JS
/// holds as an opaque handle and reads through [`lent_texts`]: it never sees the bytes, so
/// it can never write into the read-only map), the others copied (those read from log
/// records).
///
/// A text's span is an offset pair into `lent` followed by `text`, as if they were one
/// buffer: a span that starts before `lent`'s length lies in `lent`, any other in `text`
/// (less `lent`'s length). A text never straddles the two.
pub struct Packed {
    seqs: Column,
    starts: Column,
    ends: Column,
    /// Where `text`'s offsets start: the length of the pack's text area, lent or not.
    base: usize,
    lent: Option<SharedBytes>,
    text: Vec<u8>,
}

/// Whole numbers (seqs, byte offsets) for JS: 32-bit while every one fits, which is half
/// the memory to fill and hand over (measured on the 1M-event session of `npm run bench`:
/// `messages()` 1.06-1.18 ms with 32-bit columns against 1.36 ms with 64-bit floats), and
/// 64-bit floats from the first that does not (seqs and offsets stay below 2^53).
#[derive(Debug, PartialEq)]
enum Column {
    Narrow(Vec<u32>),
    Wide(Vec<f64>),
}

impl Column {
    fn with_capacity(capacity: usize) -> Self {
        Self::Narrow(Vec::with_capacity(capacity))
    }

    #[inline]
    #[expect(
        clippy::cast_precision_loss,
        reason = "seqs and offsets stay below 2^53"
    )]
    fn push(&mut self, value: u64) {
        match (self, u32::try_from(value)) {
            (Self::Narrow(values), Ok(narrow)) => values.push(narrow),
            (Self::Wide(values), _) => values.push(value as f64),
            (column, Err(_)) => column.widen(value),
        }
    }

    /// Turns a narrow column wide, with `value` (past 32 bits) pushed.
    #[cold]
    #[inline(never)]
    #[expect(
        clippy::cast_precision_loss,
        reason = "seqs and offsets stay below 2^53"
    )]
    fn widen(&mut self, value: u64) {
        if let Self::Narrow(values) = self {
            let mut wide = Vec::with_capacity(values.capacity());
            wide.extend(values.iter().map(|&v| f64::from(v)));
            *self = Self::Wide(wide);
        }
        if let Self::Wide(values) = self {
            values.push(value as f64);
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Narrow(values) => values.len(),
            Self::Wide(values) => values.len(),
        }
    }

    /// Adds `delta` to entry `k` (which exists), widening the column when the sum does not
    /// fit 32 bits.
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "seqs and offsets stay below 2^53"
    )]
    fn add(&mut self, k: usize, delta: u64) {
        let value = match self {
            Self::Narrow(values) => u64::from(values[k]),
            Self::Wide(values) => values[k] as u64,
        } + delta;
        if let (Self::Narrow(values), Ok(narrow)) = (&mut *self, u32::try_from(value)) {
            values[k] = narrow;
            return;
        }
        if let Self::Narrow(values) = self {
            *self = Self::Wide(values.iter().map(|&v| f64::from(v)).collect());
        }
        if let Self::Wide(values) = self {
            values[k] = value as f64;
        }
    }

    fn into_js(self) -> Either<Uint32Array, Float64Array> {
        match self {
            Self::Narrow(values) => Either::A(Uint32Array::new(values)),
            Self::Wide(values) => Either::B(Float64Array::new(values)),
        }
    }
}

/// Entry `k` of a column JS passed back (`lentTexts`), when it is a whole, non-negative
/// number.
fn column_at(column: &Either<Uint32Array, Float64Array>, k: usize) -> Option<usize> {
    match column {
        Either::A(narrow) => narrow.get(k).map(|&v| v as usize),
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "whole and non-negative, checked before the cast (which saturates)"
        )]
        Either::B(wide) => wide
            .get(k)
            .filter(|v| v.fract() == 0.0 && **v >= 0.0)
            .map(|&v| v as usize),
    }
}

/// [`Packed`] on the JS side.
#[napi(object, object_from_js = false)]
pub struct PackedMessages {
    /// The messages' seqs.
    #[napi(ts_type = "Uint32Array | Float64Array")]
    pub seqs: Either<Uint32Array, Float64Array>,
    /// Where each message's text starts, in `lent` then `text` taken as one.
    #[napi(ts_type = "Uint32Array | Float64Array")]
    pub starts: Either<Uint32Array, Float64Array>,
    /// Where it ends.
    #[napi(ts_type = "Uint32Array | Float64Array")]
    pub ends: Either<Uint32Array, Float64Array>,
    /// Where `text`'s offsets start (the pack's text area's length, lent or not): a span
    /// that starts below it lies in `lent`.
    pub lent_len: f64,
    /// The texts lent from the message pack, as an opaque handle for [`lent_texts`].
    #[napi(ts_type = "object | undefined")]
    pub lent: Option<External<SharedBytes>>,
    /// The other messages' exact JSON texts, one after the other (UTF-8).
    pub text: Buffer,
}

/// The texts of messages `from..to` of one `messages()` crossing whose spans (`starts`,
/// `ends`) lie in `lent` (its opaque handle), as JS strings made from the mapped bytes
/// directly (one copy, into each string), `undefined` at the others (their texts were
/// copied into the crossing's `text`). `index.js` asks for a block at a time, so that one
/// call is not paid per message.
///
/// # Errors
/// `INVALID_ARGUMENT` for a span outside the bytes or not on UTF-8 boundaries (never one
/// `messages()` gave).
#[napi]
pub fn lent_texts<'env>(
    env: &'env Env,
    lent: &External<SharedBytes>,
    #[napi(ts_arg_type = "Uint32Array | Float64Array")] starts: Either<Uint32Array, Float64Array>,
    #[napi(ts_arg_type = "Uint32Array | Float64Array")] ends: Either<Uint32Array, Float64Array>,
    from: u32,
    to: u32,
) -> Result<Array<'env>> {
    let refused = || misuse("INVALID_ARGUMENT", "lentTexts: not texts of these bytes");
    let len = |column: &Either<Uint32Array, Float64Array>| match column {
        Either::A(narrow) => narrow.len(),
        Either::B(wide) => wide.len(),
    };
    let to = (to as usize).min(len(&starts)).min(len(&ends));
    let from = (from as usize).min(to);
    let mut out = env.create_array(u32::try_from(to - from).unwrap_or(u32::MAX))?;
    for (slot, k) in (0_u32..).zip(from..to) {
        let start = column_at(&starts, k).ok_or_else(refused)?;
        if start >= lent.len() {
            continue; // copied, not lent
        }
        let text = column_at(&ends, k)
            .and_then(|end| lent.get(start..end))
            .and_then(|bytes| std::str::from_utf8(bytes).ok())
            .ok_or_else(refused)?;
        out.set(slot, env.create_string(text)?)?;
    }
    Ok(out)
}

impl Packed {
    /// Nothing yet, for `capacity` messages whose texts are all copied.
    fn copied(capacity: usize) -> Self {
        Packed {
            seqs: Column::with_capacity(capacity),
            starts: Column::with_capacity(capacity),
            ends: Column::with_capacity(capacity),
            base: 0,
            lent: None,
            text: Vec::new(),
        }
    }

    /// Message `seq`, whose text lies at `start..end`.
    #[inline]
    fn push(&mut self, seq: u64, start: usize, end: usize) {
        self.seqs.push(seq);
        self.starts.push(start as u64);
        self.ends.push(end as u64);
    }

    /// The number of messages.
    fn len(&self) -> usize {
        self.seqs.len()
    }

    /// Lends `bytes`, into which the spans pushed so far lie, except those of the entries
    /// `copied` (their texts copied into `text` while nothing was lent): moved past them.
    fn lend(&mut self, bytes: SharedBytes, copied: &[usize]) {
        let shift = bytes.len() - self.base;
        for &k in copied {
            self.starts.add(k, shift as u64);
            self.ends.add(k, shift as u64);
        }
        self.base = bytes.len();
        self.lent = Some(bytes);
    }

    /// Message `seq` with its text `json` copied.
    fn copy(&mut self, seq: u64, json: &str) {
        let start = self.base + self.text.len();
        self.text.extend_from_slice(json.as_bytes());
        self.push(seq, start, self.base + self.text.len());
    }

    #[expect(clippy::cast_precision_loss, reason = "byte offsets stay below 2^53")]
    fn into_js(self) -> PackedMessages {
        PackedMessages {
            seqs: self.seqs.into_js(),
            starts: self.starts.into_js(),
            ends: self.ends.into_js(),
            lent_len: self.base as f64,
            lent: self.lent.map(External::new),
            text: Buffer::from(self.text),
        }
    }
}

/// The surface's messages of `session`, packed: the texts its message pack holds lent (not
/// checked as UTF-8 here: `lent_texts` checks each when it makes a string of it), the others
/// copied.
fn packed_messages<L: SessionLog>(session: &surfacelog::Session<L>) -> surfacelog::Result<Packed> {
    let mut packed = Packed::copied(session.surface().nodes().len());
    // A copied text's span is taken relative to `text` while the read runs, and moved past
    // the lent bytes (whose length is known once it ends) afterwards: these are their entries.
    let mut copied = Vec::new();
    let lent = session.each_lent_message(|seq, text| match text {
        MessageText::Lent(span) => packed.push(seq, span.start, span.end),
        MessageText::Text(json) => {
            copied.push(packed.len());
            packed.copy(seq, json);
        }
    })?;
    if let Some(lent) = lent {
        packed.lend(lent, &copied);
    }
    Ok(packed)
}

fn events_of<L: SessionLog>(
    session: &surfacelog::Session<L>,
    from: u64,
    limit: u64,
) -> surfacelog::Result<Vec<EventOut>> {
    let end = from.saturating_add(limit).min(session.seq_next());
    let mut out = Vec::with_capacity(usize::try_from(end.saturating_sub(from)).unwrap_or(0));
    for seq in from..end {
        if let Some(event) = session.event(seq)? {
            out.push(event_out(&event));
        }
    }
    Ok(out)
}

fn messages_as_of<L: SessionLog>(
    session: &surfacelog::Session<L>,
    seq: u64,
) -> surfacelog::Result<Packed> {
    let view = session.as_of(seq)?;
    let mut packed = Packed::copied(view.messages.len());
    for m in &view.messages {
        packed.copy(m.seq, m.json);
    }
    Ok(packed)
}

/// Runs `read` on whichever session `held` is.
macro_rules! on_held {
    ($held:expr, $session:ident => $read:expr) => {
        match $held {
            Held::Writer($session) => $read,
            Held::ReadOnly($session) => $read,
        }
    };
}

/// A session: a writer, or a read-only view (`store.inspect`). Closed by `close()`, after
/// which every call rejects with `SESSION_CLOSED`.
#[napi]
pub struct NativeSession {
    id: String,
    report: OpenReport,
    inner: Arc<Mutex<Option<Held>>>,
}

/// A session JS collected without `close()`: a writer's drop flushes and syncs, which must
/// not run on the event loop's thread, so it is dropped on a thread of its own (when no
/// call in flight holds it: the last one drops it on the thread pool).
impl Drop for NativeSession {
    fn drop(&mut self) {
        if Arc::strong_count(&self.inner) > 1 {
            return;
        }
        let held = self
            .inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(held @ Held::Writer(_)) = held {
            let _ = std::thread::Builder::new()
                .name("surfacelog-drop".into())
                .spawn(move || drop(held));
        }
    }
}

impl NativeSession {
    fn new(held: Held, report: OpenReport) -> Self {
        let id = on_held!(&held, s => s.id().to_owned());
        Self {
            id,
            report,
            inner: Arc::new(Mutex::new(Some(held))),
        }
    }
}

/// The writer of `held`, or `READ_ONLY` for a session opened by `inspect`.
fn writer<'a>(held: &'a mut Held, id: &str) -> Result<&'a mut StoredSession> {
    match held {
        Held::Writer(session) => Ok(session),
        Held::ReadOnly(_) => Err(misuse(
            "READ_ONLY",
            &format!("session {id:?} was opened read-only (inspect): it takes no appends"),
        )),
    }
}

#[napi]
impl NativeSession {
    /// A session operation as a [`Job`], run holding the session's lock; `SESSION_CLOSED`
    /// once it is closed.
    fn task<T: Send + 'static, J: ToNapiValue + TypeName>(
        &self,
        run: impl FnOnce(&mut Held) -> Result<T> + Send + 'static,
        into_js: fn(T) -> J,
    ) -> AsyncTask<Job<T, J>> {
        let session = self.inner.clone();
        let id = self.id.clone();
        job(
            move || {
                let mut held = session.lock().unwrap_or_else(PoisonError::into_inner);
                let held = held.as_mut().ok_or_else(|| {
                    misuse("SESSION_CLOSED", &format!("session {id:?} is closed"))
                })?;
                run(held)
            },
            into_js,
        )
    }

    /// The session id.
    #[napi(getter)]
    pub fn id(&self) -> String {
        self.id.clone()
    }

    /// What opening the session did: a torn tail set aside, closers appended.
    #[napi(getter)]
    pub fn open_report(&self) -> OpenReport {
        self.report.clone()
    }

    /// Appends one event: `data`, `surfaceOp` and `sourceEventSeqs` as JSON texts. Resolves
    /// with its seq once it is as durable as the store's durability says.
    #[napi(ts_return_type = "Promise<number>")]
    pub fn append(
        &self,
        event_type: String,
        data: String,
        surface_op: Option<String>,
        source_event_seqs: Option<String>,
    ) -> AsyncTask<Job<u64, i64>> {
        let id = self.id.clone();
        self.task(
            move |held| {
                writer(held, &id)?
                    .append_json(
                        &event_type,
                        &data,
                        surface_op.as_deref(),
                        source_event_seqs.as_deref(),
                    )
                    .map_err(|e| refusal(&e))
            },
            js_seq,
        )
    }

    /// Appends several events as one unit: all or none. Resolves with their seqs. The
    /// events come as parallel arrays (types, data texts, `surfaceOp` and
    /// `sourceEventSeqs` texts, `undefined` for an absent one): a batch crosses into Rust
    /// without an object per event.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` when the arrays differ in length; refusals reject the promise.
    #[napi(ts_return_type = "Promise<number[]>")]
    pub fn append_all(
        &self,
        types: Vec<String>,
        data: Vec<String>,
        surface_ops: Vec<Option<String>>,
        sources: Vec<Option<String>>,
    ) -> Result<AsyncTask<Job<Vec<u64>, Vec<i64>>>> {
        let n = types.len();
        if data.len() != n || surface_ops.len() != n || sources.len() != n {
            return Err(misuse(
                "INVALID_ARGUMENT",
                "appendAll: the arrays of types, data, surfaceOps and sources differ in length",
            ));
        }
        let id = self.id.clone();
        Ok(self.task(
            move |held| {
                let batch: Vec<(&str, &str, Option<&str>, Option<&str>)> = (0..n)
                    .map(|i| {
                        (
                            types[i].as_str(),
                            data[i].as_str(),
                            surface_ops[i].as_deref(),
                            sources[i].as_deref(),
                        )
                    })
                    .collect();
                writer(held, &id)?
                    .append_all_json(&batch)
                    .map_err(|e| refusal(&e))
            },
            |seqs| seqs.into_iter().map(js_seq).collect(),
        ))
    }

    /// Makes every appended event durable.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn flush(&self) -> AsyncTask<Job<(), ()>> {
        let id = self.id.clone();
        self.task(
            move |held| writer(held, &id)?.flush().map_err(|e| refusal(&e)),
            |()| (),
        )
    }

    /// The number of events, which is also the next seq.
    #[napi(ts_return_type = "Promise<number>")]
    pub fn seq_next(&self) -> AsyncTask<Job<u64, i64>> {
        self.task(|held| Ok(on_held!(held, s => s.seq_next())), js_seq)
    }

    /// The surface's messages, in order, packed: their seqs, where their exact JSON texts
    /// lie, and the texts (lent from the message pack, or copied). One crossing into JS
    /// for all of them; `index.js` makes each text a string on first use.
    #[napi(ts_return_type = "Promise<PackedMessages>")]
    pub fn messages(&self) -> AsyncTask<Job<Packed, PackedMessages>> {
        self.task(
            |held| on_held!(held, s => packed_messages(s)).map_err(|e| refusal(&e)),
            Packed::into_js,
        )
    }

    /// The messages as the model saw them after event `seq` (contract §4), packed as
    /// `messages()` packs them, every text copied.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for a negative `seq`; reads reject the promise.
    #[napi(ts_return_type = "Promise<PackedMessages>")]
    pub fn messages_as_of(&self, seq: i64) -> Result<AsyncTask<Job<Packed, PackedMessages>>> {
        let seq = seq_of(seq, "asOf")?;
        Ok(self.task(
            move |held| on_held!(held, s => messages_as_of(s, seq)).map_err(|e| refusal(&e)),
            Packed::into_js,
        ))
    }

    /// The transcript: the seqs of the events appended to the surface, in log order.
    #[napi(ts_return_type = "Promise<number[]>")]
    pub fn transcript(&self) -> AsyncTask<Job<Vec<u64>, Vec<i64>>> {
        self.task(
            |held| on_held!(held, s => s.transcript()).map_err(|e| refusal(&e)),
            |seqs| seqs.into_iter().map(js_seq).collect(),
        )
    }

    /// Every replacement the surface went through, in log order: the replacing event's seq,
    /// the range it replaced and the seqs it took off the surface (provenance).
    #[napi(ts_return_type = "Promise<ReplacementOut[]>")]
    pub fn replacements(&self) -> AsyncTask<Job<Vec<ReplacementOut>, Vec<ReplacementOut>>> {
        self.task(
            |held| {
                on_held!(held, s => s.replacements())
                    .map(|surface| {
                        surface
                            .replacements()
                            .map(|r| ReplacementOut {
                                seq: js_seq(r.seq),
                                start: js_seq(r.start),
                                end: js_seq(r.end),
                                shadowed: r.shadowed.iter().copied().map(js_seq).collect(),
                            })
                            .collect()
                    })
                    .map_err(|e| refusal(&e))
            },
            |replacements| replacements,
        )
    }

    /// Up to `limit` events from seq `from`, each with its exact text.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for a negative `from` or `limit`; reads reject the promise.
    #[napi(ts_return_type = "Promise<EventOut[]>")]
    pub fn events(
        &self,
        from: i64,
        limit: i64,
    ) -> Result<AsyncTask<Job<Vec<EventOut>, Vec<EventOut>>>> {
        let from = seq_of(from, "from")?;
        let limit = seq_of(limit, "limit")?;
        Ok(self.task(
            move |held| on_held!(held, s => events_of(s, from, limit)).map_err(|e| refusal(&e)),
            |events| events,
        ))
    }

    /// Closes the session: flushes a writer, releases its lock. Later calls reject with
    /// `SESSION_CLOSED`; closing twice is a no-op.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close(&self) -> AsyncTask<Job<(), ()>> {
        let session = self.inner.clone();
        job(
            move || {
                let held = session
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take();
                match held {
                    Some(Held::Writer(session)) => session.close().map_err(|e| refusal(&e)),
                    Some(Held::ReadOnly(_)) | None => Ok(()),
                }
            },
            |()| (),
        )
    }
}

/// How long the follower's thread waits for a commit before it looks at its stop flag.
const FOLLOW_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Events a follower holds for JS before its thread waits for them to be taken: the bound
/// on a follower's memory when JS reads slower than the log grows.
const FOLLOW_QUEUE_EVENTS: usize = 4096;

/// What a follower's thread has found and JS has not taken yet.
#[derive(Default)]
struct FollowQueue {
    events: Vec<EventOut>,
    /// The refusal that ended the follower (its JSON payload), if any.
    error: Option<String>,
}

/// The state a follower's thread and its JS handle share.
#[derive(Default)]
struct FollowShared {
    queue: Mutex<FollowQueue>,
    stop: std::sync::atomic::AtomicBool,
}

/// The JS callback a follower's thread calls after it queues events (no arguments). Weak:
/// it does not keep the event loop alive by itself (`index.js` does while a `next()` waits),
/// so a process that drops a follower without `return()` still exits.
type Wake =
    napi::threadsafe_function::ThreadsafeFunction<(), Unknown<'static>, (), Status, false, true>;

/// A follower of a session: a thread of its own waits for commits (woken by the log's
/// writes, `Store::follow`) and queues the new events; JS takes them with `take()`. No
/// libuv thread is held while waiting.
#[napi]
pub struct NativeFollower {
    shared: Arc<FollowShared>,
}

/// What `take()` returns: the queued events, and the error that ended the follower.
#[napi(object)]
pub struct FollowBatch {
    /// The events committed since the last `take()`, in seq order, each with its text.
    pub events: Vec<EventOut>,
    /// The refusal that ended the follower, as the binding's error message.
    pub error: Option<String>,
}

impl Drop for NativeFollower {
    /// A follower JS has dropped without `stop()` stops too (its thread ends within a wait).
    fn drop(&mut self) {
        self.shared
            .stop
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

#[napi]
impl NativeFollower {
    /// The events queued since the last call, and the error that ended the follower.
    #[napi]
    pub fn take(&self) -> FollowBatch {
        let mut queue = self
            .shared
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        FollowBatch {
            events: std::mem::take(&mut queue.events),
            error: queue.error.take(),
        }
    }

    /// Stops the follower: its thread ends within a wait (100 ms), and with it the wake
    /// callback's hold on the event loop.
    #[napi]
    pub fn stop(&self) {
        self.shared
            .stop
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

#[napi]
impl NativeStore {
    /// Follows session `id` from seq `from`: `wake` is called (no arguments) whenever new
    /// events, or the error that ends the follower, are queued for `take()`.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for a negative `from`; opening the session is reported through
    /// `take()`'s error.
    #[napi]
    pub fn follow(&self, id: String, from: i64, wake: Wake) -> Result<NativeFollower> {
        let from = seq_of(from, "from")?;
        let shared = Arc::new(FollowShared::default());
        let store = self.inner.clone();
        let thread_shared = shared.clone();
        // A thread's name may not hold a NUL byte (`spawn` would panic, aborting the
        // process across napi), and an id may: its NUL bytes are left out of the name.
        std::thread::Builder::new()
            .name(format!("surfacelog-follow-{}", id.replace('\0', "")))
            .spawn(move || follow_thread(&store, &id, from, &thread_shared, &wake))
            .map_err(|e| misuse("IO", &format!("cannot start the follower's thread: {e}")))?;
        Ok(NativeFollower { shared })
    }
}

/// The follower's thread: waits for commits and queues them until stopped, or until an
/// error, which it queues last.
fn follow_thread(store: &Store, id: &str, from: u64, shared: &FollowShared, wake: &Wake) {
    use std::sync::atomic::Ordering;
    let stopped = || shared.stop.load(Ordering::Relaxed);
    // The events read before the refusal are queued ahead of it: JS yields them first.
    let fail = |read: Vec<EventOut>, error: &surfacelog::Error| {
        let mut queue = shared.queue.lock().unwrap_or_else(PoisonError::into_inner);
        queue.events.extend(read);
        queue.error = Some(refusal(error).reason.clone());
        drop(queue);
        wake.call(
            (),
            napi::threadsafe_function::ThreadsafeFunctionCallMode::NonBlocking,
        );
    };
    let mut follower = match store.follow(id) {
        Ok(follower) => follower,
        Err(error) => return fail(Vec::new(), &error),
    };
    let mut next = from;
    while !stopped() {
        let queued = shared
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .events
            .len();
        if queued >= FOLLOW_QUEUE_EVENTS {
            std::thread::sleep(std::time::Duration::from_millis(5));
            continue;
        }
        match follower.wait_for(next, FOLLOW_WAIT) {
            Ok(false) => {}
            Ok(true) => {
                let log = follower.log();
                let end = log
                    .seq_next()
                    .min(next + (FOLLOW_QUEUE_EVENTS - queued) as u64);
                let mut events = Vec::new();
                for seq in next..end {
                    match log.event_at(seq) {
                        Ok(event) => events.push(event_out(&event)),
                        Err(error) => return fail(events, &error),
                    }
                }
                next = end;
                shared
                    .queue
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .events
                    .extend(events);
                wake.call(
                    (),
                    napi::threadsafe_function::ThreadsafeFunctionCallMode::NonBlocking,
                );
            }
            Err(error) => return fail(Vec::new(), &error),
        }
    }
}

/// Benchmark helper (`npm run bench`), not part of the API: opens session `id` of the store
/// in `dir` and derives all its messages, `runs` times, in Rust alone; the milliseconds of
/// each run. The Node figure is compared with these, measured in the same process.
///
/// # Errors
/// The engine's refusals.
#[napi]
pub fn bench_rust_open_messages(dir: String, id: String, runs: u32) -> Result<Vec<f64>> {
    let store = Store::open(&dir, StoreOptions::new()).map_err(|e| refusal(&e))?;
    let mut times = Vec::with_capacity(runs as usize);
    for _ in 0..runs {
        let started = std::time::Instant::now();
        let (session, _) = store.open_session(&id).map_err(|e| refusal(&e))?;
        let count = session.messages().map_err(|e| refusal(&e))?.len();
        times.push(started.elapsed().as_secs_f64() * 1e3);
        std::hint::black_box(count);
        drop(session);
    }
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::Column;

    #[test]
    fn adding_to_an_entry_widens_the_column_when_the_sum_needs_it() {
        let mut column = Column::with_capacity(3);
        for n in [1, 2, 3] {
            column.push(n);
        }
        column.add(1, 10);
        assert_eq!(column, Column::Narrow(vec![1, 12, 3]));
        column.add(2, u64::from(u32::MAX));
        let wide = u64::from(u32::MAX) + 3;
        #[expect(clippy::cast_precision_loss, reason = "below 2^53")]
        let expected = Column::Wide(vec![1.0, 12.0, wide as f64]);
        assert_eq!(column, expected);
        column.add(0, 1);
        assert_eq!(column.len(), 3);
        #[expect(clippy::cast_precision_loss, reason = "below 2^53")]
        let expected = Column::Wide(vec![2.0, 12.0, wide as f64]);
        assert_eq!(column, expected);
    }

    #[test]
    fn a_column_widens_at_the_first_number_past_32_bits_keeping_every_number() {
        let mut column = Column::with_capacity(2);
        let numbers = [
            0,
            7,
            u64::from(u32::MAX),
            u64::from(u32::MAX) + 1,
            3,
            (1 << 53) - 1,
        ];
        for (k, &n) in numbers.iter().enumerate() {
            column.push(n);
            let narrow = k < 3;
            assert_eq!(
                matches!(column, Column::Narrow(_)),
                narrow,
                "after {k} numbers"
            );
        }
        #[expect(clippy::cast_precision_loss, reason = "below 2^53")]
        let wide: Vec<f64> = numbers.iter().map(|&n| n as f64).collect();
        assert_eq!(column, Column::Wide(wide));
    }
}
