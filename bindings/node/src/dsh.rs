//! The storage hooks of the DSH persistence backend (`dsh.mjs`;
//! `format-spec/upstream/dsh-persistence.md` §3.3) over the engine's verbatim store
//! (`format-spec/verbatim-store.md`). JSON crosses as text both ways (§3.7): the wrapper
//! hands over `JSON.stringify`'d headers and events and `JSON.parse`s what comes back, so
//! every object DSH receives is fresh. Every call that touches the disk is a promise run on
//! the libuv pool.

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use surfacelog::VerbatimStore;
use surfacelog::internals::log::LogOptions;

use crate::{Job, job, misuse, refusal, seq_of};

/// A verbatim store at a root directory: the storage under one DSH backend instance.
#[napi]
pub struct NativeVerbatimStore {
    inner: Arc<VerbatimStore>,
}

/// A stored prefix (or suffix) as read (VBT-7).
#[napi(object)]
pub struct VerbatimLoad {
    /// The header's JSON text, as stored.
    pub header: String,
    /// The events read, as one JSON array text.
    pub events: String,
    /// The number of events the log holds.
    pub seq_next: i64,
    /// The revision of exactly this state (VBT-8).
    pub revision: String,
    /// Whether a torn tail waits for a repair (VBT-7).
    pub torn: bool,
}

/// A listed session: its header text and revision (VBT-10).
#[napi(object)]
pub struct VerbatimListed {
    /// The header's JSON text.
    pub header: String,
    /// Its revision.
    pub revision: String,
}

/// Opens (lazily: nothing is read or created here) the verbatim store at `root`, with
/// segments of `segmentBytes` (default 64 MiB), waiting up to `lockWaitMs` (default 0) for
/// another writer's lock (VBT-6).
///
/// # Errors
/// `INVALID_ARGUMENT` for a segment size that is not a byte count, or a wait that is not
/// a number of milliseconds.
#[napi]
pub fn open_verbatim_store(
    root: String,
    segment_bytes: Option<f64>,
    lock_wait_ms: Option<f64>,
) -> Result<NativeVerbatimStore> {
    let lock_wait = millis(lock_wait_ms.unwrap_or(0.0), "lockWaitMs")?;
    let mut options = LogOptions::default();
    if let Some(bytes) = segment_bytes {
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
        options.segment_bytes = bytes;
    }
    Ok(NativeVerbatimStore {
        inner: Arc::new(VerbatimStore::with_options(root, options).with_lock_wait(lock_wait)),
    })
}

/// `ms` as a duration: a finite, non-negative number of milliseconds; one longer than a
/// `Duration` holds (about 5.8e14 years) is the longest one, never a panic (which
/// `Duration::from_secs_f64` would raise, aborting the process across napi).
///
/// # Errors
/// `INVALID_ARGUMENT` naming `what` otherwise.
fn millis(ms: f64, what: &str) -> Result<std::time::Duration> {
    if !(ms.is_finite() && ms >= 0.0) {
        return Err(misuse(
            "INVALID_ARGUMENT",
            &format!("{what}: a number of milliseconds"),
        ));
    }
    Ok(std::time::Duration::try_from_secs_f64(ms / 1000.0).unwrap_or(std::time::Duration::MAX))
}

/// A verbatim store operation as a [`Job`]: its refusal becomes the JS error.
fn task<T: Send + 'static, J: ToNapiValue + TypeName>(
    store: &Arc<VerbatimStore>,
    run: impl FnOnce(&VerbatimStore) -> surfacelog::Result<T> + Send + 'static,
    into_js: fn(T) -> J,
) -> AsyncTask<Job<T, J>> {
    let store = store.clone();
    job(move || run(&store).map_err(|e| refusal(&e)), into_js)
}

fn as_strs(texts: &[String]) -> Vec<&str> {
    texts.iter().map(String::as_str).collect()
}

#[napi]
impl NativeVerbatimStore {
    /// The directory session `id` is (or would be) stored in: no I/O (VBT-1).
    #[napi]
    pub fn locate(&self, id: String) -> String {
        self.inner.locate(&id).display().to_string()
    }

    /// Session `id`'s header and its events from `from` on, with its revision and whether
    /// a torn tail waits; `null` when it is not stored. Changes nothing (VBT-7).
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for a negative `from`; the read's refusal rejects the promise.
    #[napi(ts_return_type = "Promise<VerbatimLoad | null>")]
    pub fn load(
        &self,
        id: String,
        from: i64,
    ) -> Result<AsyncTask<Job<Option<VerbatimLoad>, Option<VerbatimLoad>>>> {
        let from = seq_of(from, "from")?;
        Ok(task(
            &self.inner,
            move |store| {
                Ok(store.load(&id, from)?.map(|read| VerbatimLoad {
                    header: read.header,
                    events: read.events,
                    seq_next: crate::js_seq(read.seq_next),
                    revision: read.revision,
                    torn: read.torn.is_some(),
                }))
            },
            |read| read,
        ))
    }

    /// Session `id`'s revision without its events; `null` when it is not stored (VBT-8).
    #[napi(ts_return_type = "Promise<string | null>")]
    pub fn revision(&self, id: String) -> AsyncTask<Job<Option<String>, Option<String>>> {
        task(
            &self.inner,
            move |store| store.revision(&id),
            |revision| revision,
        )
    }

    /// Creates session `id` with its header and first events, atomically, never over a
    /// stored one (VBT-5).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn create(
        &self,
        id: String,
        header: String,
        events: Vec<String>,
    ) -> AsyncTask<Job<(), ()>> {
        task(
            &self.inner,
            move |store| store.create(&id, &header, &as_strs(&events)),
            |()| (),
        )
    }

    /// Appends `events` to session `id`, durably; the first must carry seq `firstSeq`, the
    /// stored next seq (VBT-6).
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for a negative `firstSeq`; the append's refusal rejects the
    /// promise.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn append(
        &self,
        id: String,
        first_seq: i64,
        events: Vec<String>,
    ) -> Result<AsyncTask<Job<(), ()>>> {
        let first_seq = seq_of(first_seq, "firstSeq")?;
        Ok(task(
            &self.inner,
            move |store| store.append(&id, first_seq, &as_strs(&events)),
            |()| (),
        ))
    }

    /// Drops a torn tail (by opening the log for writing) and appends `closers` (VBT-9).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn repair(&self, id: String, closers: Vec<String>) -> AsyncTask<Job<(), ()>> {
        task(
            &self.inner,
            move |store| store.repair(&id, &as_strs(&closers)),
            |()| (),
        )
    }

    /// Closes the writers kept open between appends, releasing their locks (VBT-6).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close(&self) -> AsyncTask<Job<(), ()>> {
        task(&self.inner, VerbatimStore::close, |()| ())
    }

    /// Closes the writers no append or repair has used for `idleMs` or longer, releasing
    /// their locks; resolves with the number of writers that stay open (VBT-6).
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for an `idleMs` that is not a number of milliseconds.
    #[napi(ts_return_type = "Promise<number>")]
    pub fn close_idle_writers(&self, idle_ms: f64) -> Result<AsyncTask<Job<usize, u32>>> {
        let idle = millis(idle_ms, "idleMs")?;
        Ok(task(
            &self.inner,
            move |store| store.close_idle_writers(idle),
            |open| u32::try_from(open).unwrap_or(u32::MAX),
        ))
    }

    /// Every stored session's header text, read without opening its log (VBT-10).
    #[napi(ts_return_type = "Promise<string[]>")]
    pub fn list_headers(&self) -> AsyncTask<Job<Vec<String>, Vec<String>>> {
        task(&self.inner, VerbatimStore::list_headers, |headers| headers)
    }

    /// Every stored session's header and revision (VBT-10).
    #[napi(ts_return_type = "Promise<VerbatimListed[]>")]
    pub fn list(&self) -> AsyncTask<Job<Vec<VerbatimListed>, Vec<VerbatimListed>>> {
        task(
            &self.inner,
            |store| {
                Ok(store
                    .list()?
                    .into_iter()
                    .map(|(header, revision)| VerbatimListed { header, revision })
                    .collect())
            },
            |listed| listed,
        )
    }
}

/// A log an import left out: where it is and why (VBT-11).
#[napi(object)]
pub struct RefusedLog {
    /// The file (or database and session) of the log.
    pub place: String,
    /// The session's id, where the source names it (its directory, its row).
    pub id: Option<String>,
    /// The format version the log's header gives, for a `FORMAT_VERSION` refusal of a
    /// session's header (its text, as written).
    pub version: Option<String>,
    /// The contract code of the refusal.
    pub code: String,
    /// The refusal's message.
    pub message: String,
}

/// What an import did (VBT-11).
#[napi(object)]
pub struct ImportReport {
    /// The sessions imported.
    pub imported: Vec<String>,
    /// The sessions the store held already, left alone.
    pub present: Vec<String>,
    /// The logs DSH itself would refuse to read, not imported.
    pub refused: Vec<RefusedLog>,
}

#[napi]
impl NativeVerbatimStore {
    /// Imports every session of a DSH backend's storage that the store does not hold yet:
    /// `kind` `"jsonl"` (a JSONL root) or `"sqlite"` (a database file) (VBT-11).
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for another `kind`; the import's refusal rejects the promise.
    #[napi(ts_return_type = "Promise<ImportReport>")]
    pub fn import_dsh(
        &self,
        kind: String,
        path: String,
    ) -> Result<AsyncTask<Job<ImportReport, ImportReport>>> {
        let source = match kind.as_str() {
            "jsonl" => surfacelog::DshSource::Jsonl(path.into()),
            "sqlite" => surfacelog::DshSource::Sqlite(path.into()),
            other => {
                return Err(misuse(
                    "INVALID_ARGUMENT",
                    &format!("import kind {other:?}: \"jsonl\" or \"sqlite\""),
                ));
            }
        };
        Ok(task(
            &self.inner,
            move |store| {
                let report = store.import_dsh(&source)?;
                Ok(ImportReport {
                    imported: report.imported,
                    present: report.present,
                    refused: report
                        .refused
                        .into_iter()
                        .map(|refused| RefusedLog {
                            version: match refused.error.kind() {
                                surfacelog::ErrorKind::FormatVersion { found, .. }
                                    if refused.id.is_some() =>
                                {
                                    Some(found.clone())
                                }
                                _ => None,
                            },
                            code: refused.error.code().to_owned(),
                            message: refused.error.to_string(),
                            place: refused.place,
                            id: refused.id,
                        })
                        .collect(),
                })
            },
            |report| report,
        ))
    }
}
