//! The verbatim session store (`format-spec/verbatim-store.md`, rules VBT-n): logs kept
//! exactly as another host's persistence layer hands them over, for the DSH persistence
//! backend (`format-spec/upstream/dsh-persistence.md` §3.3). It stores, it does not judge:
//! events are checked only for what the log format needs to hold them (VBT-4), never
//! against the contract's §5 shapes, and reads hand them back unjudged. It is a separate
//! entry point, not a weakening of [`crate::Store`]'s strict `append`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, ErrorKind, Result};
use crate::event::envelope::{Envelope, check_event_type_str};
use crate::event::{Event, EventFields, EventSource, type_name};
use crate::json::{Json, Kind};
use crate::log::{Durability, LogOptions, LogReader, LogWriter};
use crate::storage::Storage;

use super::escape_id;
use super::verbatim_handles::{DirIdentity, Opened, Readers, Writers, identity};

/// The header file of a verbatim session (VBT-2).
const HEADER_FILE: &str = "dsh-header.json";

/// A directory of verbatim session logs (VBT-1): `sessions/<escaped id>/` holds each
/// one's header and log, `tmp/` the sessions being created.
///
/// ```
/// use surfacelog::VerbatimStore;
/// let dir = tempfile::tempdir()?;
/// let store = VerbatimStore::new(dir.path());
/// // Stored as given: a header of any version, an event type no vocabulary knows.
/// store.create("s", r#"{"version":99,"id":"s"}"#, &[r#"{"type":"x/y","seq":0,"time":5}"#])?;
/// let read = store.load("s", 0)?.unwrap();
/// assert_eq!(read.events, r#"[{"type":"x/y","seq":0,"time":5}]"#);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct VerbatimStore {
    root: PathBuf,
    options: LogOptions,
    /// Writers kept open between appends (VBT-6); shared by clones.
    writers: Arc<Writers>,
    /// Readers kept between reads (VBT-7); shared by clones.
    readers: Arc<Readers>,
    /// How long opening a writer waits for another writer's lock (VBT-6).
    lock_wait: std::time::Duration,
}

/// How many sessions' readers a store keeps between reads (VBT-7): each holds its last
/// segment's file and maps.
const READERS_KEPT: usize = 32;

/// How many sessions' writers a store keeps open between appends (VBT-6): each holds its
/// log's lock and two or three descriptors.
const WRITERS_KEPT: usize = 32;

/// What a read of a verbatim session returns (VBT-7).
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let store = surfacelog::VerbatimStore::new(dir.path());
/// store.create("s", r#"{"id":"s"}"#, &[r#"{"type":"a","seq":0,"time":1}"#])?;
/// let read = store.load("s", 0)?.unwrap();
/// assert_eq!((read.header.as_str(), read.seq_next, read.torn), (r#"{"id":"s"}"#, 1, None));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerbatimRead {
    /// The header's JSON text, as stored.
    pub header: String,
    /// The events read, as one JSON array text: each event's exact text, in seq order,
    /// separated by commas.
    pub events: String,
    /// How many events `events` holds.
    pub count: u64,
    /// The number of events the log holds (its next seq).
    pub seq_next: u64,
    /// The revision of exactly this state (VBT-8).
    pub revision: String,
    /// The last segment's bytes past its last record, when a writer's recovery would drop
    /// them as a torn tail: the file and the byte range (VBT-7, VBT-9).
    pub torn: Option<(PathBuf, std::ops::Range<usize>)>,
}

impl VerbatimStore {
    /// A store at `root`. Nothing is read or created until an operation needs it; the
    /// directories are created (mode 0700) by the first [`VerbatimStore::create`].
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let store = surfacelog::VerbatimStore::new(dir.path().join("not-yet"));
    /// assert!(store.list()?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(root: impl AsRef<Path>) -> Self {
        Self::with_options(root, LogOptions::default())
    }

    /// [`VerbatimStore::new`] with the logs' options; their durability is always `Sync`
    /// (VBT-6): every call returns once what it wrote is durable.
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let options = surfacelog::internals::log::LogOptions { segment_bytes: 4096, ..Default::default() };
    /// let store = surfacelog::VerbatimStore::with_options(dir.path(), options);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_options(root: impl AsRef<Path>, options: LogOptions) -> Self {
        Self {
            root: root.as_ref().to_owned(),
            options: LogOptions {
                durability: Durability::Sync,
                ..options
            },
            writers: Arc::default(),
            readers: Arc::default(),
            lock_wait: std::time::Duration::ZERO,
        }
    }

    /// This store, waiting up to `wait` for a writer another store or process holds to
    /// release the session's lock before an append or a repair is refused `LOCKED` (VBT-6;
    /// by default it does not wait). A store that hands sessions over to another process
    /// (one closing its idle writers, [`VerbatimStore::close_idle_writers`]) waits a little
    /// longer than that process keeps a writer idle.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let store = surfacelog::VerbatimStore::new(dir.path())
    ///     .with_lock_wait(std::time::Duration::from_secs(3));
    /// store.create("s", r#"{"id":"s"}"#, &[r#"{"type":"a","seq":0,"time":1}"#])?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn with_lock_wait(self, wait: std::time::Duration) -> Self {
        Self {
            lock_wait: wait,
            ..self
        }
    }

    /// The directory session `id` is (or would be) stored in (VBT-1): a pure function of
    /// the root and the id.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let store = surfacelog::VerbatimStore::new(dir.path());
    /// assert_eq!(store.locate("a/b"), dir.path().join("sessions").join("a%2Fb"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn locate(&self, id: &str) -> PathBuf {
        self.root.join("sessions").join(escape_id(id))
    }

    /// Creates session `id` with its header and first events, atomically (VBT-5): after a
    /// crash the session either exists with all of them, durable, or does not exist.
    /// Never replaces a stored session.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::VerbatimStore::new(dir.path());
    /// store.create("s", r#"{"id":"s"}"#, &[r#"{"type":"a","seq":0,"time":1}"#])?;
    /// let again = store.create("s", r#"{"id":"s"}"#, &[r#"{"type":"a","seq":0,"time":1}"#]);
    /// assert_eq!(again.unwrap_err().code(), "SESSION_EXISTS");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `INVALID_ID` for the empty id; `HEADER_INVALID` when `header` is not a JSON object
    /// text; an event's refusal (VBT-4); `SESSION_EXISTS`; `IO`. Nothing is left behind.
    pub fn create(&self, id: &str, header: &str, events: &[&str]) -> Result<()> {
        super::check_id(id)?;
        check_header(header)?;
        let events = admit_all(events, 0)?;
        let storage = &*self.options.storage;
        let final_dir = self.locate(id);
        if std::fs::symlink_metadata(&final_dir).is_ok() {
            return Err(ErrorKind::SessionExists { id: id.to_owned() }.into());
        }
        let tmp_root = self.root.join("tmp");
        let sessions = self.root.join("sessions");
        for dir in [&self.root, &tmp_root, &sessions] {
            if create_private_dir(dir)? {
                // A directory just created is durable once its parent's entry is.
                let parent = dir.parent().unwrap_or(Path::new("/"));
                storage
                    .sync_dir(parent)
                    .map_err(|e| Error::io("fsync", parent, &e))?;
            }
        }
        remove_dead_builds(storage, &tmp_root);
        let (build, lock) = lock_build(&tmp_root)?;
        let built = self.build(&build, header, &events);
        // The log's lock is held through the publish and the sync that makes it durable
        // (LOG-1): no writer can append to the session before the publish is known to have
        // succeeded, so a failed one can be taken back.
        let log_lock = built.and_then(|()| crate::log::take_lock(storage, &build.join("log")));
        let published = log_lock.and_then(|log_lock| {
            publish(storage, &build, &final_dir, id)?;
            if let Err(error) = storage.sync_dir(&sessions) {
                // VBT-5, as STORE-27: the publish is not known durable, so the create
                // failed, and is taken back whole (renamed to its build directory in one
                // step, then removed with it): a refused create leaves no session.
                if storage.rename(&final_dir, &build).is_ok() {
                    let _ = storage.sync_dir(&sessions);
                }
                return Err(Error::io("fsync", &sessions, &error));
            }
            drop(log_lock);
            Ok(())
        });
        if published.is_err() {
            let _ = storage.remove_dir_all(&build);
        }
        // The build is gone from `tmp/` (published or removed): its lock file goes, then
        // the lock (VBT-5).
        let _ = std::fs::remove_file(build.with_extension("lock"));
        drop(lock);
        published
    }

    /// Writes a new session's header and log into `dir`, durably.
    fn build(&self, dir: &Path, header: &str, events: &[Event]) -> Result<()> {
        let storage = &*self.options.storage;
        storage
            .create_dir_all(dir)
            .map_err(|e| Error::io("create_dir", dir, &e))?;
        let text = format!("{header}\n");
        let tmp = dir.join(format!("{HEADER_FILE}.tmp"));
        crate::storage::replace_file(storage, &tmp, &dir.join(HEADER_FILE), text.as_bytes(), 0)?;
        let (writer, _) = LogWriter::open(&dir.join("log"), self.options.clone())?;
        writer.append(events)?;
        writer.close()?;
        storage
            .sync_dir(dir)
            .map_err(|e| Error::io("fsync", dir, &e))
    }

    /// Appends `events` to session `id`, durably: the first must carry seq `first_seq`,
    /// the log's next seq (VBT-6). All or none: a refused batch writes nothing.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::VerbatimStore::new(dir.path());
    /// store.create("s", r#"{"id":"s"}"#, &[r#"{"type":"a","seq":0,"time":1}"#])?;
    /// store.append("s", 1, &[r#"{"type":"b","seq":1,"time":2,"data":{"any":"shape"}}"#])?;
    /// let stale = store.append("s", 1, &[r#"{"type":"b","seq":1,"time":2}"#]);
    /// assert_eq!(stale.unwrap_err().code(), "SEQ_NOT_CONTIGUOUS");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `SESSION_NOT_FOUND`; an event's refusal (VBT-4); `SEQ_NOT_CONTIGUOUS` when
    /// `first_seq` is not the stored next seq; `LOCKED` while another writer has the log
    /// open; what opening the log refuses (`CORRUPT`, `FORMAT_VERSION`); `IO`.
    pub fn append(&self, id: &str, first_seq: u64, events: &[&str]) -> Result<()> {
        let events = admit_all(events, first_seq)?;
        self.with_writer(id, |writer| {
            check_next(id, first_seq, writer.seq_next())?;
            self.append_or_restore(id, writer, &events)
        })
    }

    /// Appends `events` with `writer`; when the append fails with its fate unknown (a
    /// write or sync failed, log-format DUR-10), takes the log back to where it was
    /// (DUR-12) before returning the error, which then says that nothing was written
    /// (`Outcome::NothingWritten`). A restore that fails leaves the error as it was
    /// (`FateUnknown`): the next append re-checks the stored next seq (VBT-6).
    fn append_or_restore(&self, id: &str, writer: &LogWriter, events: &[Event]) -> Result<()> {
        let seq_next = writer.seq_next();
        let Err(error) = writer.append(events) else {
            return Ok(());
        };
        if !error.is_fate_unknown() {
            return Err(error);
        }
        let restored = writer.restore(seq_next, events);
        // After the restore, whatever its outcome: a reader opened or refreshed before it
        // ends may hold records it undid, and is not kept (`Readers::put`).
        self.readers.forget(&self.locate(id));
        match restored {
            Ok(()) => Err(error.restored()),
            Err(failed) => {
                tracing::warn!(session = id, seq_next, %error, %failed, "restoring the log after a failed append failed");
                Err(error)
            }
        }
    }

    /// Commits a repair (VBT-9): opens the log for writing, which drops a torn tail
    /// (log-format §7), then appends `closers`, which must start at the stored next seq.
    /// Each step is durable before the next.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::VerbatimStore::new(dir.path());
    /// store.create("s", r#"{"id":"s"}"#, &[r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#])?;
    /// store.repair("s", &[r#"{"type":"turn/end","seq":1,"time":2,"data":{"turn":1}}"#])?;
    /// assert_eq!(store.load("s", 1)?.unwrap().count, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`VerbatimStore::append`].
    pub fn repair(&self, id: &str, closers: &[&str]) -> Result<()> {
        // A writer kept open knows nothing of bytes written behind it: the repair's writer
        // is opened anew, so that recovery reads the tail as it is on disk.
        self.with_fresh_writer(id, true, |writer| {
            if !closers.is_empty() {
                let events = admit_all(closers, writer.seq_next())?;
                self.append_or_restore(id, writer, &events)?;
            }
            Ok(())
        })
    }

    /// Closes the writers kept open between appends (VBT-6), writing their last segments'
    /// indexes, and releases their locks; drops the readers kept between reads (VBT-7). The store stays usable: the next append opens
    /// its writer again.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::VerbatimStore::new(dir.path());
    /// store.create("s", r#"{"id":"s"}"#, &[r#"{"type":"a","seq":0,"time":1}"#])?;
    /// store.append("s", 1, &[r#"{"type":"a","seq":1,"time":1}"#])?; // its writer stays open
    /// store.close()?; // and is closed here
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The first writer's failure to close (`IO`); the others are closed all the same.
    pub fn close(&self) -> Result<()> {
        self.readers.clear();
        self.writers.close_idle()
    }

    /// Closes the writers kept open (VBT-6) that no append or repair has used for `idle`
    /// or longer, releasing their locks so that another store or process may continue
    /// those sessions, and returns how many writers stay open. A host calls it some time
    /// after its appends stop; the next append opens its writer again.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::VerbatimStore::new(dir.path());
    /// store.create("s", r#"{"id":"s"}"#, &[r#"{"type":"a","seq":0,"time":1}"#])?;
    /// store.append("s", 1, &[r#"{"type":"a","seq":1,"time":1}"#])?; // its writer stays open
    /// assert_eq!(store.close_idle_writers(std::time::Duration::from_secs(60))?, 1);
    /// assert_eq!(store.close_idle_writers(std::time::Duration::ZERO)?, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// The first writer's failure to close (`IO`); the others are closed all the same.
    pub fn close_idle_writers(&self, idle: std::time::Duration) -> Result<usize> {
        self.writers.close_idle_for(idle)
    }

    /// Runs `work` with session `id`'s writer: the one kept open since its last append, or
    /// one opened now (VBT-6). A writer whose work failed is dropped, not kept: its log is
    /// opened again, and recovered, by the next call.
    fn with_writer(&self, id: &str, work: impl FnOnce(&LogWriter) -> Result<()>) -> Result<()> {
        self.with_fresh_writer(id, false, work)
    }

    /// [`VerbatimStore::with_writer`]; with `fresh`, a kept writer is closed and the log
    /// opened again (its recovery reads the tail as it is on disk, VBT-9).
    fn with_fresh_writer(
        &self,
        id: &str,
        fresh: bool,
        work: impl FnOnce(&LogWriter) -> Result<()>,
    ) -> Result<()> {
        super::check_id(id)?;
        let dir = self.locate(id);
        let log = dir.join("log");
        // The slot is this thread's from here until `put`, whatever happens.
        let kept = self.writers.take(&dir);
        let reusable = match kept {
            Some((writer, opened_in)) if !fresh && identity(&log) == Some(opened_in) => {
                Some((writer, opened_in))
            }
            Some((writer, opened_in)) => {
                // Replaced or removed behind the store's back (VBT-6), or a repair's.
                self.writers.set_recovered(&dir, None);
                let closed = if identity(&log) == Some(opened_in) {
                    writer.close()
                } else {
                    drop(writer);
                    Ok(())
                };
                if let Err(error) = closed {
                    self.writers.put(&dir, None, WRITERS_KEPT);
                    return Err(error);
                }
                None
            }
            None => None,
        };
        let opened = match reusable {
            Some(kept) => Ok(kept),
            None => self.writer(id, &dir).inspect(|(_, opened_in)| {
                self.writers.set_recovered(&dir, Some(*opened_in));
            }),
        };
        let (writer, opened_in) = match opened {
            Ok(opened) => opened,
            Err(error) => {
                self.writers.put(&dir, None, WRITERS_KEPT);
                return Err(error);
            }
        };
        match work(&writer) {
            Ok(()) => {
                self.writers
                    .put(&dir, Some((writer, opened_in)), WRITERS_KEPT);
                Ok(())
            }
            Err(error) => {
                // Dropped (its lock released) before the slot is free for another writer.
                drop(writer);
                self.writers.put(&dir, None, WRITERS_KEPT);
                Err(error)
            }
        }
    }

    /// Reads session `id` (VBT-7): its header, its events from `from` on, its revision
    /// and whether a torn tail waits for a writer's recovery. Changes nothing. `None` when
    /// the session is not stored.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::VerbatimStore::new(dir.path());
    /// assert_eq!(store.load("s", 0)?, None);
    /// store.create("s", r#"{"id":"s"}"#, &[r#"{"type":"a","seq":0,"time":1}"#, r#"{"type":"b","seq":1,"time":1}"#])?;
    /// assert_eq!(store.load("s", 1)?.unwrap().events, r#"[{"type":"b","seq":1,"time":1}]"#);
    /// assert_eq!(store.load("s", 9)?.unwrap().events, "[]");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `CORRUPT` naming the file (and offset) for damage anywhere in what is read, also a
    /// missing or damaged header; `FORMAT_VERSION`; `IO`. Damage is never taken for the end
    /// of the log or for absence.
    pub fn load(&self, id: &str, from: u64) -> Result<Option<VerbatimRead>> {
        super::check_id(id)?;
        self.with_reader(&self.locate(id), |header, reader, writing| {
            let mut events = String::from("[");
            let mut count = 0;
            for event in reader.iter_from(from) {
                if count > 0 {
                    events.push(',');
                }
                event?.write_text(&mut events);
                count += 1;
            }
            events.push(']');
            let torn = torn_tail(reader, writing)?;
            Ok(VerbatimRead {
                header,
                events,
                count,
                seq_next: reader.seq_next(),
                revision: revision(reader, writing, torn.is_some())?,
                torn,
            })
        })
    }

    /// The revision of session `id` (VBT-8) without reading its events; `None` when it is
    /// not stored.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::VerbatimStore::new(dir.path());
    /// store.create("s", r#"{"id":"s"}"#, &[r#"{"type":"a","seq":0,"time":1}"#])?;
    /// let before = store.revision("s")?.unwrap();
    /// assert_eq!(store.revision("s")?.unwrap(), before); // reads change nothing
    /// store.append("s", 1, &[r#"{"type":"a","seq":1,"time":1}"#])?;
    /// assert_ne!(store.revision("s")?.unwrap(), before);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`VerbatimStore::load`].
    pub fn revision(&self, id: &str) -> Result<Option<String>> {
        super::check_id(id)?;
        self.with_reader(&self.locate(id), |_, reader, writing| {
            let torn = torn_tail(reader, writing)?;
            revision(reader, writing, torn.is_some())
        })
    }

    /// Every stored session's header text and revision, in directory order (VBT-10).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::VerbatimStore::new(dir.path());
    /// store.create("s", r#"{"id":"s"}"#, &[r#"{"type":"a","seq":0,"time":1}"#])?;
    /// let listed = store.list()?;
    /// assert_eq!((listed.len(), listed[0].0.as_str()), (1, r#"{"id":"s"}"#));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// A session whose log cannot be read (`CORRUPT`, `FORMAT_VERSION`) is listed with a
    /// revision that says so (`surfacelog:unreadable:…`, VBT-10): the reads of that session report
    /// the damage, and the listing is neither refused for it nor shortened (VBT-10).
    ///
    /// # Errors
    /// `CORRUPT` for a session whose header is damaged: the whole listing is refused,
    /// never shortened; `IO`.
    pub fn list(&self) -> Result<Vec<(String, String)>> {
        let mut listed = Vec::new();
        for dir in self.session_dirs()? {
            let read = self.with_reader(&dir, |header, reader, writing| {
                let torn = torn_tail(reader, writing)?;
                Ok((header, revision(reader, writing, torn.is_some())?))
            });
            let read = match read {
                Ok(read) => read,
                Err(error) if matches!(error.code(), "CORRUPT" | "FORMAT_VERSION") => {
                    match read_header(&dir) {
                        Ok(header) => Some((header, unreadable_revision(&dir))),
                        Err(_) if std::fs::symlink_metadata(&dir).is_err() => None,
                        Err(header_error) => return Err(header_error),
                    }
                }
                Err(error) => return Err(error),
            };
            // VBT-10: a session gone since it was listed is skipped.
            listed.extend(read);
        }
        Ok(listed)
    }

    /// Every stored session's header, in directory order, read without opening its log
    /// (VBT-10): what a listing of headers costs (DSH persistence §1.11: "header or
    /// metadata reads only"). Damage in a log is reported by the reads that meet it; a
    /// damaged header refuses the listing, as [`VerbatimStore::list`] does.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::VerbatimStore::new(dir.path());
    /// store.create("s", r#"{"id":"s"}"#, &[r#"{"type":"a","seq":0,"time":1}"#])?;
    /// assert_eq!(store.list_headers()?, [r#"{"id":"s"}"#]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `CORRUPT` for a session whose header is damaged; `IO`.
    pub fn list_headers(&self) -> Result<Vec<String>> {
        let mut headers = Vec::new();
        for dir in self.session_dirs()? {
            match read_header(&dir) {
                Ok(header) => headers.push(header),
                // VBT-10: a session gone since it was listed is skipped.
                Err(_) if std::fs::symlink_metadata(&dir).is_err() => {}
                Err(error) => return Err(error),
            }
        }
        Ok(headers)
    }

    /// The directories under `sessions/`, in directory order (VBT-10); none before the
    /// first session is created.
    ///
    /// # Errors
    /// `IO`.
    fn session_dirs(&self) -> Result<Vec<PathBuf>> {
        let sessions = self.root.join("sessions");
        let entries = match std::fs::read_dir(&sessions) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io("read_dir", &sessions, &e)),
        };
        entries
            .map(|entry| {
                entry
                    .map(|entry| entry.path())
                    .map_err(|e| Error::io("read_dir", &sessions, &e))
            })
            .collect()
    }

    /// Runs `read` with the header, a reader of the session in `dir` and whether this store
    /// has a writer of it (VBT-7): the reader kept from an earlier read, refreshed (it scans
    /// only what was appended since), or one opened now. `None` when `dir` does not exist,
    /// also when it was removed during the call. A reader whose refresh or read failed is
    /// dropped, not kept.
    fn with_reader<T>(
        &self,
        dir: &Path,
        read: impl FnOnce(String, &LogReader, &Writing<'_>) -> Result<T>,
    ) -> Result<Option<T>> {
        let gone = || {
            std::fs::symlink_metadata(dir).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        };
        match std::fs::symlink_metadata(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("stat", dir, &e)),
            Ok(_) => {}
        }
        let header = match read_header(dir) {
            Ok(header) => header,
            Err(_) if gone() => return Ok(None), // VBT-10: removed meanwhile
            Err(error) => return Err(error),
        };
        let log = dir.join("log");
        // VBT-10: a session without its log is damaged (CORRUPT), not an I/O failure.
        match missing_log(&log) {
            Ok(Some(_)) | Err(_) if gone() => return Ok(None),
            Ok(Some(missing)) => return Err(missing),
            Ok(None) => {}
            Err(error) => return Err(error),
        }
        let opened_in = identity(&log);
        let restores = self.readers.restores();
        // Before the reader reads: a recovery that ran since may have changed the tail.
        let recovered = self.writers.recovered(dir);
        let reader = match self.readers.take(dir, opened_in) {
            Some(mut reader) => {
                reader.refresh()?;
                reader
            }
            None => match LogReader::open_reporting_torn(&log, Arc::clone(&self.options.storage)) {
                Ok(reader) => reader,
                Err(_) if gone() => return Ok(None),
                Err(error) => return Err(error),
            },
        };
        let writing = Writing {
            writers: &self.writers,
            dir,
            recovered: recovered.filter(|(log, _)| Some(*log) == opened_in),
            log: opened_in,
        };
        let result = read(header, &reader, &writing)?;
        if let Some(opened_in) = opened_in {
            self.readers
                .put(dir, opened_in, reader, READERS_KEPT, restores);
        }
        Ok(Some(result))
    }

    /// A writer of the log of session `id` in `dir`, its recovery done (log-format §7),
    /// with the identity of the `log/` directory it was opened in.
    fn writer(&self, id: &str, dir: &Path) -> Result<(LogWriter, DirIdentity)> {
        if std::fs::symlink_metadata(dir).is_err() {
            return Err(ErrorKind::SessionNotFound { id: id.to_owned() }.into());
        }
        read_header(dir)?;
        let log = dir.join("log");
        // VBT-5: a verbatim log is created only with its session. A writer's open would
        // create one (LOG-3) where the log lost its segments or its directory: damage, which
        // an empty log would hide (DSH persistence §1.17).
        if let Some(missing) = missing_log(&log)? {
            return Err(missing);
        }
        let started = std::time::Instant::now();
        let (writer, _) = loop {
            match LogWriter::open(&log, self.options.clone()) {
                // Another store's or process's writer: wait for it to let go (VBT-6).
                Err(error) if error.code() == "LOCKED" && started.elapsed() < self.lock_wait => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                opened => break opened?,
            }
        };
        let opened_in = identity(&log)
            .ok_or_else(|| Error::from(ErrorKind::SessionNotFound { id: id.to_owned() }))?;
        Ok((writer, opened_in))
    }
}

/// What a read knows of this store's writer of the session it reads (VBT-7).
struct Writing<'a> {
    writers: &'a Writers,
    dir: &'a Path,
    /// The writer's opening, when one was open with its recovery done in the log read
    /// before the reader read.
    recovered: Option<Opened>,
    /// The identity of the `log/` directory read (VBT-8).
    log: Option<DirIdentity>,
}

impl Writing<'_> {
    /// Whether the store has a writer of the session now (asked after the tail was read,
    /// since a writer may start meanwhile).
    fn holds(&self) -> bool {
        self.writers.holds(self.dir)
    }

    /// Whether one writer, its recovery done before the reader read, has been open in the
    /// log read from before the read until now: no recovery changed its tail meanwhile.
    fn settled(&self) -> bool {
        self.recovered
            .is_some_and(|opened| self.writers.recovered(self.dir) == Some(opened))
    }
}

/// VBT-7: the torn tail `reader` sees, unless this store has a writer of the log: then the
/// bytes past the end are that writer's append in progress. A tail seen while no writer was
/// there is read again, in case a writer completed its records and went away in between.
fn torn_tail(
    reader: &LogReader,
    writing: &Writing<'_>,
) -> Result<Option<(PathBuf, std::ops::Range<usize>)>> {
    if reader.unrecovered_tail()?.is_none() {
        return Ok(None);
    }
    if writing.holds() {
        return in_progress(reader, writing);
    }
    let again = reader.unrecovered_tail()?;
    if again.is_some() && writing.holds() {
        return in_progress(reader, writing);
    }
    Ok(again)
}

/// The bytes past `reader`'s end while this store holds the log's writer: its append in
/// progress, unless they have RCV-4's shape (a valid record after the end, still there at
/// the reader's second look, RD-6) while one writer, its recovery done, was open from
/// before the read until now: no append in progress leaves that shape and no recovery ran
/// meanwhile, so it is damage, `CORRUPT`, never a shorter log. Otherwise (a writer being
/// opened, whose recovery may be dropping a tail a crash left) nothing is reported.
fn in_progress(
    reader: &LogReader,
    writing: &Writing<'_>,
) -> Result<Option<(PathBuf, std::ops::Range<usize>)>> {
    match reader.torn_shape() {
        Some(damage) if writing.settled() => Err(damage),
        _ => Ok(None),
    }
}

/// VBT-8: `surfacelog:<log_id>:<device>.<inode>:<seq_next>:<last>`, `last` the CRC-32C of
/// the last event's text, and `:torn` while a torn tail waits.
///
/// # Errors
/// The read of the last event: `CORRUPT`, `IO`.
fn revision(reader: &LogReader, writing: &Writing<'_>, torn: bool) -> Result<String> {
    use std::fmt::Write;
    let mut token = String::from("surfacelog:");
    for byte in reader.log_id() {
        let _ = write!(token, "{byte:02x}");
    }
    let (device, inode) = writing.log.unwrap_or((0, 0));
    let last = match reader.seq_next().checked_sub(1) {
        Some(seq) => reader
            .iter_from(seq)
            .next()
            .transpose()?
            .map_or(0, |event| crc32c::crc32c(event.text().as_bytes())),
        None => 0,
    };
    let _ = write!(token, ":{device}.{inode}:{}:{last:08x}", reader.seq_next());
    if torn {
        token.push_str(":torn");
    }
    Ok(token)
}

/// VBT-8, VBT-10: the revision a listing gives a session whose log cannot be read:
/// `surfacelog:unreadable:<device>.<inode>:<files>`, the identity of its `log/`
/// directory and the CRC-32C, in 8 lowercase hex digits, of the names, lengths and
/// modification times of the files in it (metadata only: the same at every listing of the
/// same files, another once one changes).
fn unreadable_revision(dir: &Path) -> String {
    use std::fmt::Write;
    use std::os::unix::fs::MetadataExt;
    let log = dir.join("log");
    let (device, inode) = identity(&log).unwrap_or((0, 0));
    let mut names: Vec<_> = std::fs::read_dir(&log)
        .map(|entries| entries.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    names.sort();
    let mut files = String::new();
    for name in names {
        if let Ok(meta) = std::fs::symlink_metadata(log.join(&name)) {
            let name = name.to_string_lossy();
            let _ = writeln!(
                files,
                "{name}:{}:{}.{}",
                meta.len(),
                meta.mtime(),
                meta.mtime_nsec()
            );
        }
    }
    let files = crc32c::crc32c(files.as_bytes());
    format!("surfacelog:unreadable:{device}.{inode}:{files:08x}")
}

/// VBT-5: `CORRUPT` naming the first segment when the session's `log/` directory is gone
/// or holds no segment: every published session's log has one, so this is damage, never an
/// empty or absent log.
///
/// # Errors
/// `IO` when the directory cannot be listed.
fn missing_log(log: &Path) -> Result<Option<Error>> {
    let first = log.join(crate::log::segment::segment_name(0));
    // The common case costs one look-up: segment 0 is there. Without it, the directory is
    // listed: other segments there are the chain's to judge (it names what is missing).
    match std::fs::symlink_metadata(&first) {
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("stat", &first, &e)),
    }
    let any_segment = match std::fs::read_dir(log) {
        Ok(entries) => entries.flatten().any(|entry| {
            entry
                .file_name()
                .to_str()
                .and_then(crate::log::segment::parse_segment_name)
                .is_some()
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(Error::io("read_dir", log, &e)),
    };
    if any_segment {
        return Ok(None);
    }
    let reason = "the log has no segment: its first segment is missing (VBT-5, LOG-2)";
    Ok(Some(
        ErrorKind::Corrupt {
            location: format!("{} offset=0", first.display()),
            reason: reason.to_owned(),
        }
        .into(),
    ))
}

/// `SEQ_NOT_CONTIGUOUS` unless a batch starting at `first_seq` continues a log whose next
/// seq is `stored` (VBT-6).
fn check_next(id: &str, first_seq: u64, stored: u64) -> Result<()> {
    if first_seq == stored {
        return Ok(());
    }
    Err(ErrorKind::SeqNotContiguous {
        expected: stored,
        found: format!("{first_seq} (session {id} append starts at seq {first_seq}, stored next seq is {stored})"),
    }
    .into())
}

/// VBT-2: a header is a JSON object text (`HEADER_INVALID` otherwise), on one line.
fn check_header(header: &str) -> Result<()> {
    let invalid = |reason: &str| -> Error {
        ErrorKind::HeaderInvalid {
            reason: reason.to_owned(),
        }
        .into()
    };
    let json = Json::parse(header).map_err(|e| invalid(&Error::from(e).to_string()))?;
    if json.root().kind() != Kind::Object {
        return Err(invalid("the header is not a JSON object"));
    }
    if header.contains('\n') {
        return Err(invalid("the header text holds a line break"));
    }
    Ok(())
}

/// VBT-2: the header file of the session in `dir`, checked: one JSON object text and a
/// line break. Anything else, a missing file included, is `CORRUPT` naming it.
fn read_header(dir: &Path) -> Result<String> {
    let path = dir.join(HEADER_FILE);
    let corrupt = |reason: &str| -> Error {
        ErrorKind::Corrupt {
            location: path.display().to_string(),
            reason: reason.to_owned(),
        }
        .into()
    };
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(corrupt("the session has no header file (VBT-2)"));
        }
        Err(e) => return Err(Error::io("read", &path, &e)),
    };
    let text = String::from_utf8(bytes).map_err(|_| corrupt("the header is not UTF-8"))?;
    let Some(header) = text.strip_suffix('\n') else {
        return Err(corrupt("the header does not end with a line break (VBT-2)"));
    };
    check_header(header).map_err(|e| corrupt(&e.to_string()))?;
    Ok(header.to_owned())
}

/// VBT-4: each event of a batch starting at `first_seq`, admitted, or the first refusal.
fn admit_all(texts: &[&str], first_seq: u64) -> Result<Vec<Event>> {
    let mut events = Vec::with_capacity(texts.len());
    for (i, text) in texts.iter().enumerate() {
        // Past u64::MAX no event can have its seq: the text's seq cannot match.
        let seq = first_seq.checked_add(i as u64).ok_or_else(|| -> Error {
            ErrorKind::SeqNotContiguous {
                expected: u64::MAX,
                found: "(past the largest seq)".to_owned(),
            }
            .into()
        })?;
        events.push(admit(text, seq)?);
    }
    Ok(events)
}

/// The record `type` of an event whose text's `type` no record can hold (VBT-3): not a
/// string of 1 to 256 bytes of Unicode.
const UNHELD_TYPE: &str = "?";

/// VBT-3, VBT-4: one event stored as given: its text must be a JSON object with `seq` equal
/// to `seq`. Nothing else about it is judged: the record's `type` and `time` are the text's
/// when a record can hold them (a string of 1 to 256 bytes, a safe integer), otherwise
/// [`UNHELD_TYPE`] and 0, since the text is their only authority.
fn admit(text: &str, seq: u64) -> Result<Event> {
    let json = Json::parse(text)?;
    let envelope = Envelope::read(json.root())?;
    match envelope.seq.and_then(|s| s.as_safe_u64()) {
        Some(found) if found == seq => {}
        found => {
            return Err(ErrorKind::SeqNotContiguous {
                expected: seq,
                found: found.map_or_else(
                    || {
                        envelope
                            .seq
                            .map_or("(missing)".to_owned(), |s| s.raw().to_owned())
                    },
                    |f| f.to_string(),
                ),
            }
            .into());
        }
    }
    let event_type = envelope
        .event_type
        .and_then(|t| t.as_str())
        .filter(|t| check_event_type_str(t).is_ok());
    let time = envelope.time.and_then(|t| t.as_safe_int()).unwrap_or(0);
    let data = envelope.data.map_or(0..0, |d| d.span());
    let ignorable = envelope.ignorable.is_some_and(|i| i.is_true());
    let fields = EventFields {
        event_type: type_name(event_type.as_deref().unwrap_or(UNHELD_TYPE)),
        seq,
        time,
        surface_op: None,
        sources: None,
        ignorable,
    };
    Ok(Event::new(text.to_owned(), data, None, fields))
}

/// VBT-5: renames the built session `build` to `to` unless something is there already
/// (`renameat2` with `RENAME_NOREPLACE`, so a concurrent creator cannot be overwritten).
fn publish(storage: &dyn Storage, build: &Path, to: &Path, id: &str) -> Result<()> {
    storage
        .sync_dir(build)
        .map_err(|e| Error::io("fsync", build, &e))?;
    let exists = || -> Error { ErrorKind::SessionExists { id: id.to_owned() }.into() };
    if std::fs::symlink_metadata(to).is_ok() {
        return Err(exists());
    }
    let cwd = rustix::fs::CWD;
    match rustix::fs::renameat_with(cwd, build, cwd, to, rustix::fs::RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::EXIST) => Err(exists()),
        Err(e) => Err(Error::io("rename", to, &std::io::Error::from(e))),
    }
}

/// VBT-5: a new build's directory under `tmp` (not created yet) and the lock its builder
/// holds until the build is published or removed: `<name>.lock` beside it, created anew
/// (`<name>` is unique: the pid, the time and a counter) and locked (`flock`) before the
/// directory exists.
fn lock_build(tmp: &Path) -> Result<(PathBuf, std::fs::File)> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = format!("{}-{nanos}-{}", std::process::id(), next_build());
    let build = tmp.join(&name);
    let path = tmp.join(format!("{name}.lock"));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| Error::io("create", &path, &e))?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| Error::io("flock", &path, &std::io::Error::from(e)))?;
    Ok((build, file))
}

/// VBT-5: removes, best effort, the build directories under `tmp` whose builders are gone:
/// those whose lock file can be locked (its builder no longer holds it), or has none (a
/// builder locks it before it creates the directory). A running builder's build is never
/// touched, in any process or pid namespace.
fn remove_dead_builds(storage: &dyn Storage, tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let build = entry.path();
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let lock_path = build.with_extension("lock");
        let lock = match std::fs::OpenOptions::new().write(true).open(&lock_path) {
            Ok(lock) => Some(lock),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(_) => continue,
        };
        if let Some(lock) = &lock {
            let probe = rustix::fs::FlockOperation::NonBlockingLockExclusive;
            if rustix::fs::flock(lock, probe).is_err() {
                continue; // its builder is running
            }
        }
        let _ = storage.remove_dir_all(&build);
        if lock.is_some() {
            let _ = std::fs::remove_file(&lock_path);
        }
    }
}

/// Creates `dir` with mode 0700 unless it exists (VBT-1); whether it created it.
fn create_private_dir(dir: &Path) -> Result<bool> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(Error::io("create_dir", dir, &e)),
    }
}

/// A number unique within this process, for build directory names.
fn next_build() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Where a host's DSH sessions are, for [`VerbatimStore::import_dsh`].
///
/// ```
/// let source = surfacelog::DshSource::Jsonl("/home/u/.dsh/sessions".into());
/// assert!(matches!(source, surfacelog::DshSource::Jsonl(_)));
/// ```
#[cfg(feature = "dsh")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DshSource {
    /// The root of DSH's JSONL backend: `<root>/<project>/<session>/session.jsonl[.zstd]`
    /// (DSH interchange formats DIR-1).
    Jsonl(PathBuf),
    /// The database file of DSH's `SQLite` backend.
    Sqlite(PathBuf),
}

/// What [`VerbatimStore::import_dsh`] did.
///
/// ```
/// let report = surfacelog::DshImport::default();
/// assert!(report.imported.is_empty() && report.present.is_empty() && report.refused.is_empty());
/// ```
#[cfg(feature = "dsh")]
#[derive(Debug, Default)]
pub struct DshImport {
    /// The ids of the sessions imported.
    pub imported: Vec<String>,
    /// The ids of the sessions left alone because this store holds them already.
    pub present: Vec<String>,
    /// The logs the reference would refuse to read (a header that is not a session
    /// header, another format version, damage, a root breaking DIR-5, DIR-6, DIR-8 or
    /// DIR-9 for that log), each with where it is, the session's id where the source names
    /// it, and the refusal: not imported, and left as they are (VBT-11).
    pub refused: Vec<RefusedLog>,
}

/// A log [`VerbatimStore::import_dsh`] did not import because the reference would refuse
/// to read it (VBT-11). A host keeps refusing its id, with its error, rather than taking
/// it for a session that does not exist: DSH's own backend would refuse the read, and
/// would refuse to create a session of that id over the stored log.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// let legacy = dir.path().join("dsh");
/// let session = legacy.join("--w--").join("s1");
/// std::fs::create_dir_all(&session)?;
/// std::fs::write(session.join("session.jsonl"),
///     concat!(r#"{"type":"session","version":1,"id":"s1","createdAt":1}"#, "\n"))?;
/// let store = surfacelog::VerbatimStore::new(dir.path().join("surfacelog"));
/// let report = store.import_dsh(&surfacelog::DshSource::Jsonl(legacy))?;
/// let refused = &report.refused[0];
/// assert_eq!(refused.id.as_deref(), Some("s1"));
/// assert_eq!(refused.error.code(), "FORMAT_VERSION");
/// assert!(refused.place.ends_with("session.jsonl"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[cfg(feature = "dsh")]
#[derive(Debug)]
pub struct RefusedLog {
    /// Where the log is: its file, or the database and session.
    pub place: String,
    /// The session's id, where the source names it: the JSONL log's directory (DSH
    /// interchange formats DIR-3) or the database's session; `None` for a file that is
    /// no session's (the obsolete flat layout, DIR-6).
    pub id: Option<String>,
    /// Why the reference refuses it (`CORRUPT`, `FORMAT_VERSION`, or what the store
    /// cannot hold, VBT-4).
    pub error: crate::Error,
}

#[cfg(feature = "dsh")]
impl VerbatimStore {
    /// Imports every session of a DSH backend's storage that this store does not hold yet
    /// (VBT-11): its header and its stored events (packed rows expanded, a torn tail left
    /// out), each session created atomically (VBT-5). The source is only read.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let legacy = dir.path().join("dsh");
    /// let session = legacy.join("--w--").join("s1");
    /// std::fs::create_dir_all(&session)?;
    /// std::fs::write(session.join("session.jsonl"), concat!(
    ///     r#"{"type":"session","version":0,"id":"s1","createdAt":1,"cwd":"/w","delegationDepth":0}"#, "\n",
    ///     r#"{"type":"turn/start","seq":0,"time":1,"data":{"turn":1}}"#, "\n",
    /// ))?;
    /// let store = surfacelog::VerbatimStore::new(dir.path().join("surfacelog"));
    /// let source = surfacelog::DshSource::Jsonl(legacy);
    /// assert_eq!(store.import_dsh(&source)?.imported, ["s1"]);
    /// assert_eq!(store.import_dsh(&source)?.present, ["s1"]); // once
    /// let read = store.load("s1", 0)?.unwrap();
    /// assert_eq!(read.header, r#"{"version":0,"id":"s1","createdAt":1,"cwd":"/w","delegationDepth":0}"#);
    /// assert_eq!(read.count, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// What reading the source fails with (`IO`; for a database, what opening it refuses:
    /// `CORRUPT`, `FORMAT_VERSION`), then what [`VerbatimStore::create`] fails with beyond
    /// the refusals of a session's content. A log the reference refuses to read (damage,
    /// another version, two logs of one id (DIR-8), a log under a directory its header's id
    /// does not name (DIR-9), both encodings in one directory (DIR-5), the flat layout
    /// (DIR-6)) is not an error: it is reported in [`DshImport::refused`] and the import
    /// goes on. Sessions imported before an error stay imported; a second call takes up
    /// the rest.
    pub fn import_dsh(&self, source: &DshSource) -> Result<DshImport> {
        let mut report = DshImport::default();
        match source {
            DshSource::Jsonl(root) => {
                for log in jsonl_logs(root)? {
                    let (id, path, compression) = match log {
                        Ok(log) => log,
                        Err((path, id, error)) => {
                            report.refused.push(RefusedLog {
                                place: path.display().to_string(),
                                id,
                                error,
                            });
                            continue;
                        }
                    };
                    if self.holds(&id) {
                        report.present.push(id);
                        continue;
                    }
                    match read_jsonl(&path, compression) {
                        Ok((header, events)) => {
                            let place = path.display().to_string();
                            self.import_one(&id, &header, &events, place, &mut report)?;
                        }
                        Err(error) if refusal(&error) => {
                            report.refused.push(RefusedLog {
                                place: path.display().to_string(),
                                id: Some(id),
                                error,
                            });
                        }
                        Err(error) => return Err(error),
                    }
                }
            }
            DshSource::Sqlite(path) => {
                let database = crate::adapters::sqlite::DshDatabase::open(path)?;
                for id in database.session_ids()? {
                    if self.holds(&id) {
                        report.present.push(id);
                        continue;
                    }
                    let read = database.header(&id).and_then(|header| {
                        let mut events = Vec::new();
                        database.read_events(&id, &mut |event| {
                            events.push(event);
                            Ok(())
                        })?;
                        Ok((header, events))
                    });
                    match read {
                        Ok((header, events)) => {
                            let place = format!("{} session {id:?}", path.display());
                            self.import_one(&id, &header, &events, place, &mut report)?;
                        }
                        Err(error) if refusal(&error) => {
                            let place = format!("{} session {id:?}", path.display());
                            report.refused.push(RefusedLog {
                                place,
                                id: Some(id),
                                error,
                            });
                        }
                        Err(error) => return Err(error),
                    }
                }
            }
        }
        Ok(report)
    }

    /// Creates one imported session; a session this store cannot hold as it is (VBT-4: an
    /// event that repeats a key, which DSH's JSONL backend stores) is reported in
    /// `refused`, one created meanwhile in `present`;
    /// anything else (`IO`) stops the import.
    fn import_one(
        &self,
        id: &str,
        header: &str,
        events: &[String],
        place: String,
        report: &mut DshImport,
    ) -> Result<()> {
        match self.create(id, header, &as_strs(events)) {
            Ok(()) => report.imported.push(id.to_owned()),
            Err(error) if error.code() == "SESSION_EXISTS" => report.present.push(id.to_owned()),
            Err(error) if admission_refusal(&error) => report.refused.push(RefusedLog {
                place,
                id: Some(id.to_owned()),
                error,
            }),
            Err(error) => return Err(error),
        }
        Ok(())
    }

    /// Whether session `id`'s directory exists.
    fn holds(&self, id: &str) -> bool {
        !id.is_empty() && std::fs::symlink_metadata(self.locate(id)).is_ok()
    }
}

/// A JSONL log's logical header and event texts (packed rows expanded, a torn tail left
/// out), as DSH's loader reads them.
#[cfg(feature = "dsh")]
fn read_jsonl(
    path: &Path,
    compression: crate::adapters::jsonl::Compression,
) -> Result<(String, Vec<String>)> {
    let reader = crate::adapters::jsonl::JsonlReader::open(path, compression)?;
    let header = logical_header(reader.header())?;
    let mut events = Vec::new();
    reader.read_events(
        &mut |event| {
            events.push(event.text().to_owned());
            Ok(())
        },
        &mut |_| {},
    )?;
    Ok((header, events))
}

/// Whether reading a source failed because of what the source holds (the session is
/// refused and the import goes on) rather than because it could not be read (`IO`: the
/// import stops).
#[cfg(feature = "dsh")]
fn refusal(error: &Error) -> bool {
    // A repeated key (JSON-4 keeps the last value; VBT-4 refuses it) and a header id a
    // store cannot name (a lone surrogate) are what the source holds, too.
    matches!(
        error.code(),
        "CORRUPT" | "FORMAT_VERSION" | "HEADER_INVALID" | "DATA_DUPLICATE_KEY" | "INVALID_ID"
    )
}

/// Whether `error` is a refusal of what a session holds (VBT-2, VBT-4), made before
/// anything was written.
#[cfg(feature = "dsh")]
fn admission_refusal(error: &Error) -> bool {
    matches!(
        error.code(),
        "DATA_INVALID_JSON"
            | "DATA_DUPLICATE_KEY"
            | "DATA_NOT_LOSSLESS"
            | "ENVELOPE_INVALID"
            | "SEQ_NOT_CONTIGUOUS"
            | "EVENT_TOO_LARGE"
            | "HEADER_INVALID"
            | "INVALID_ID"
    )
}

#[cfg(feature = "dsh")]
fn as_strs(texts: &[String]) -> Vec<&str> {
    texts.iter().map(String::as_str).collect()
}

/// The logical header of a JSONL header record (DSH interchange formats HDR-8): its known
/// fields only, in this order, each value's text as stored; what DSH's own backend returns.
#[cfg(feature = "dsh")]
fn logical_header(record: &str) -> Result<String> {
    let json = Json::parse(record)?;
    let mut header = String::from("{");
    for key in crate::adapters::jsonl::KNOWN_HEADER_KEYS {
        if let Some(value) = json.root().get(key) {
            if header.len() > 1 {
                header.push(',');
            }
            header.push('"');
            header.push_str(key);
            header.push_str("\":");
            header.push_str(value.raw());
        }
    }
    header.push('}');
    Ok(header)
}

/// A JSONL log found under a DSH root: its id, path and encoding, or its path and why its
/// header was refused.
#[cfg(feature = "dsh")]
type JsonlLog = std::result::Result<
    (String, PathBuf, crate::adapters::jsonl::Compression),
    (PathBuf, Option<String>, Error),
>;

/// The JSONL logs under a DSH root (DIR-1, DIR-7): each one's id, path and encoding, after
/// the checks of DIR-5, DIR-6, DIR-8 and DIR-9. An absent root holds none.
#[cfg(feature = "dsh")]
#[expect(
    clippy::case_sensitive_file_extension_comparisons,
    reason = "DSH's file names are exact (DIR-1, DIR-6)"
)]
fn jsonl_logs(root: &Path) -> Result<Vec<JsonlLog>> {
    use crate::adapters::jsonl::{Compression, JsonlReader};
    let corrupt = |path: &Path, reason: &str| -> Error {
        ErrorKind::Corrupt {
            location: path.display().to_string(),
            reason: reason.to_owned(),
        }
        .into()
    };
    let list = |dir: &Path| -> Result<Vec<std::fs::DirEntry>> {
        let mut entries = std::fs::read_dir(dir)
            .map_err(|e| Error::io("read_dir", dir, &e))?
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| Error::io("read_dir", dir, &e))?;
        entries.sort_by_key(std::fs::DirEntry::file_name);
        Ok(entries)
    };
    if std::fs::symlink_metadata(root).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
        return Ok(Vec::new());
    }
    let mut logs: Vec<JsonlLog> = Vec::new();
    for project in list(root)? {
        let project_path = project.path();
        if !project_path.is_dir() {
            continue;
        }
        for entry in list(&project_path)? {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if !path.is_dir() {
                if name.ends_with(".jsonl") || name.ends_with(".jsonl.zstd") {
                    let error = corrupt(&path, "a log in the obsolete flat layout (DIR-6)");
                    logs.push(Err((path, None, error)));
                }
                continue;
            }
            // DIR-3: the id the directory stands for, whatever its log says.
            let named = dsh_session_id_of_dir_name(&name);
            let raw = path.join("session.jsonl");
            let zstd = path.join("session.jsonl.zstd");
            let (log, compression) = match (raw.is_file(), zstd.is_file()) {
                (false, false) => continue, // DIR-7: not a session directory
                (true, false) => (raw, Compression::None),
                (false, true) => (zstd, Compression::Zstd),
                (true, true) => {
                    let error = corrupt(&path, "logs of both encodings in one directory (DIR-5)");
                    logs.push(Err((path, named, error)));
                    continue;
                }
            };
            let (id, expected) = match JsonlReader::open(&log, compression) {
                Ok(reader) => (
                    reader.id().to_owned(),
                    dsh_project_dir_name(reader.header()),
                ),
                // HDR-3 to HDR-7: a log the reference's listing skips; reported, not read.
                Err(error) if refusal(&error) => {
                    logs.push(Err((log, named, error)));
                    continue;
                }
                Err(error) => return Err(error),
            };
            let project_name = project.file_name().to_string_lossy().into_owned();
            let place = Place {
                root,
                project: &project_name,
                name: &name,
                dir: &path,
            };
            if let Some(reason) = place.misplaced(&id, expected.as_deref()) {
                let error = corrupt(&log, &reason);
                logs.push(Err((log, named, error)));
                continue;
            }
            logs.push(Ok((id, log, compression)));
        }
    }
    // DIR-8: one id in two project directories, whatever either log holds: every log of
    // that id is refused (DSH refuses every lookup of it), in any order of the names.
    let mut seen: std::collections::HashMap<String, Vec<PathBuf>> =
        std::collections::HashMap::new();
    for log in &logs {
        if let Ok((id, path, _)) | Err((path, Some(id), _)) = log {
            seen.entry(id.clone()).or_default().push(path.clone());
        }
    }
    for log in &mut logs {
        let (id, path) = match log {
            Ok((id, path, _)) | Err((path, Some(id), _)) => (id.clone(), path.clone()),
            Err((_, None, _)) => continue,
        };
        let Some(other) = seen
            .get(&id)
            .and_then(|paths| paths.iter().find(|other| **other != path))
        else {
            continue;
        };
        let reason = format!(
            "session {id:?} is also stored at {}: a duplicate id in two project directories \
             (DIR-8)",
            other.display()
        );
        *log = Err((path.clone(), Some(id), corrupt(&path, &reason)));
    }
    Ok(logs)
}

/// The id whose DSH session directory name (DIR-3) is `name`, or `None` when `name` is no
/// such name (an escape that is not `~` and 4 uppercase hex digits, a character DIR-3
/// escapes left as it is, or UTF-16 that is not a string Rust holds: a lone surrogate).
#[cfg(feature = "dsh")]
fn dsh_session_id_of_dir_name(name: &str) -> Option<String> {
    let mut units = Vec::with_capacity(name.len());
    let mut bytes = name.bytes();
    while let Some(b) = bytes.next() {
        if b == b'~' {
            let hex: Vec<u8> = bytes.by_ref().take(4).collect();
            let hex = std::str::from_utf8(&hex).ok().filter(|h| {
                h.len() == 4
                    && h.bytes()
                        .all(|c| c.is_ascii_digit() || (b'A'..=b'F').contains(&c))
            })?;
            units.push(u16::from_str_radix(hex, 16).ok()?);
        } else if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            units.push(u16::from(b));
        } else {
            return None;
        }
    }
    let id = String::from_utf16(&units).ok()?;
    (dsh_session_dir_name(&id) == name).then_some(id)
}

/// Where a log was found under a DSH root: `root/<project>/<name>/`, directory `dir`.
#[cfg(feature = "dsh")]
struct Place<'a> {
    root: &'a Path,
    project: &'a str,
    name: &'a str,
    dir: &'a Path,
}

#[cfg(feature = "dsh")]
impl Place<'_> {
    /// DIR-9: why a log whose header names session `id` and project directory `project`
    /// (DIR-2, `None` for a `cwd` that names none) is not in its place, `None` when it is.
    /// The session directory must be `id`'s (DIR-3); the project directory must be the one
    /// the header's `cwd` names, or resolve to the same file (a case alias).
    fn misplaced(&self, id: &str, project: Option<&str>) -> Option<String> {
        if dsh_session_dir_name(id) != self.name {
            return Some(format!(
                "the header names session {id:?}, not this directory (DIR-9)"
            ));
        }
        let same = project.is_some_and(|project| {
            project == self.project || same_file(&self.root.join(project).join(self.name), self.dir)
        });
        (!same).then(|| {
            format!(
                "the header's cwd names project directory {:?}, not {:?} (DIR-9)",
                project.unwrap_or_default(),
                self.project
            )
        })
    }
}

/// DSH's project directory name (DIR-2) for the header record `header`: `_no-cwd` without
/// a `cwd`, else `--` + the slug of its UTF-16 units + `--`; `None` for an empty `cwd`
/// (DIR-2: it cannot be encoded) or one that is not a string.
#[cfg(feature = "dsh")]
fn dsh_project_dir_name(header: &str) -> Option<String> {
    let json = Json::parse(header).ok()?;
    let Some(cwd) = json.root().get("cwd") else {
        return Some("_no-cwd".to_owned());
    };
    let wtf8 = cwd.as_wtf8()?;
    let units = wtf8_units(&wtf8);
    if units.is_empty() {
        return None;
    }
    let mut slug = String::new();
    let mut in_separator = false;
    for unit in units {
        let separator = matches!(unit, 0x2F | 0x5C | 0x3A); // `/`, `\`, `:`
        if separator {
            if !in_separator {
                slug.push('-');
            }
            in_separator = true;
            continue;
        }
        in_separator = false;
        push_dir_unit(&mut slug, unit);
    }
    let slug = slug.trim_start_matches('-');
    let slug = if slug.is_empty() { "root" } else { slug };
    let slug = &slug[..slug.len().min(251)];
    Some(format!("--{slug}--"))
}

/// The UTF-16 code units of a WTF-8 string (a lone surrogate is one unit).
#[cfg(feature = "dsh")]
fn wtf8_units(wtf8: &[u8]) -> Vec<u16> {
    let mut units = Vec::with_capacity(wtf8.len());
    let mut at = 0;
    while at < wtf8.len() {
        let b = wtf8[at];
        let (len, init) = match b {
            0x00..=0x7F => (1, u32::from(b)),
            0xC0..=0xDF => (2, u32::from(b & 0x1F)),
            0xE0..=0xEF => (3, u32::from(b & 0x0F)),
            _ => (4, u32::from(b & 0x07)),
        };
        let code = wtf8[at + 1..(at + len).min(wtf8.len())]
            .iter()
            .fold(init, |c, &cont| c << 6 | u32::from(cont & 0x3F));
        at += len;
        if code >= 0x1_0000 {
            let c = code - 0x1_0000;
            units.push(0xD800 | u16::try_from(c >> 10).unwrap_or(0));
            units.push(0xDC00 | u16::try_from(c & 0x3FF).unwrap_or(0));
        } else {
            units.push(u16::try_from(code).unwrap_or(0xFFFD));
        }
    }
    units
}

/// Whether `a` and `b` are the same file (device and inode).
#[cfg(feature = "dsh")]
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// DSH's session directory name of `id` (DIR-3): each UTF-16 unit outside
/// `A-Z a-z 0-9 . _ -` as `~` and 4 uppercase hex digits; `.` and `..` escaped whole.
#[cfg(feature = "dsh")]
fn dsh_session_dir_name(id: &str) -> String {
    match id {
        "." => return "~002E".to_owned(),
        ".." => return "~002E~002E".to_owned(),
        _ => {}
    }
    let mut name = String::with_capacity(id.len());
    for unit in id.encode_utf16() {
        push_dir_unit(&mut name, unit);
    }
    name
}

/// One UTF-16 unit of a DSH directory name (DIR-2, DIR-3): a unit of the safe set
/// (`A-Z a-z 0-9 . _ -`) as itself, any other as `~` and 4 uppercase hex digits.
#[cfg(feature = "dsh")]
fn push_dir_unit(out: &mut String, unit: u16) {
    use std::fmt::Write;
    match u8::try_from(unit) {
        Ok(b) if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') => {
            out.push(char::from(b));
        }
        _ => {
            let _ = write!(out, "~{unit:04X}");
        }
    }
}

#[cfg(all(test, feature = "dsh"))]
mod tests {
    use super::{dsh_session_dir_name, dsh_session_id_of_dir_name};

    /// DIR-2: the project directory names of the table of `dsh-formats.md` §7.1.
    #[test]
    fn dsh_project_names_follow_the_dir_2_table() {
        let name = |cwd: Option<&str>| {
            let cwd = cwd
                .map(|c| format!(",\"cwd\":{}", serde_like(c)))
                .unwrap_or_default();
            super::dsh_project_dir_name(&format!("{{\"id\":\"x\"{cwd}}}"))
        };
        let a300 = format!("/{}", "a".repeat(300));
        let a251 = format!("--{}--", "a".repeat(251));
        for (cwd, want) in [
            (None, "_no-cwd"),
            (Some("/home/u/proj"), "--home-u-proj--"),
            (Some("/"), "--root--"),
            (Some(":::"), "--root--"),
            (Some("C:\\Users\\me"), "--C-Users-me--"),
            (Some("//a//b/"), "--a-b---"),
            (Some("/a~b/\u{e7}"), "--a~007Eb-~00E7--"),
            (Some("/a b"), "--a~0020b--"),
            (Some("-x"), "--x--"),
            (Some(a300.as_str()), a251.as_str()),
        ] {
            assert_eq!(name(cwd).as_deref(), Some(want), "{cwd:?}");
        }
        assert_eq!(name(Some("")), None);
    }

    /// A JSON string literal of `s`.
    fn serde_like(s: &str) -> String {
        let mut out = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }

    /// DIR-3 read backwards: every id's directory name gives the id back, and a name DIR-3
    /// never writes gives none.
    #[test]
    fn a_dsh_directory_name_gives_its_id_back() {
        for id in [
            "s1", ".", "..", "a/b", "a.b_c-d", "é", "😀 x", "~", "x~0041",
        ] {
            let name = dsh_session_dir_name(id);
            assert_eq!(
                dsh_session_id_of_dir_name(&name).as_deref(),
                Some(id),
                "{name}"
            );
        }
        for name in [
            "a b", "~00zz", "~002e", "~002", "~D800", ".", "..", "~0041", "é",
        ] {
            assert_eq!(dsh_session_id_of_dir_name(name), None, "{name}");
        }
    }
}
