//! Importing a session written elsewhere (`store.md` STORE-14): events are streamed into
//! a new session built under `tmp/`, checked one by one on the import path (contract §5),
//! closed by crash repair (contract §8), made durable, and only then renamed into place.
//! An import that fails or is dropped leaves nothing in the store.

use std::path::PathBuf;

use super::{Build, Store, StoredLog, StoredSession, write_file_atomically};
use crate::error::{Error, ErrorKind, Result};
use crate::event::Header;
use crate::event::header::NegativeZero;
use crate::log::{DiskLog, Durability};
use crate::session::Session;
use crate::session::repair::RepairState;
use crate::surface::Surface;

/// The file beside a session's log holding the original texts of the events a DSH import
/// projected (`store.md` STORE-26).
pub const ORIGINALS_FILE: &str = "dsh-originals.jsonl";

/// STORE-26: the lines of the originals file `bytes` before its last line, when that line
/// is `{"crc32c":N}` and N is the CRC-32C of every byte before it; otherwise `Err` with
/// the number of the line that should be the checksum (0-based): the file was changed or
/// cut. Nothing of the file is to be used before this checks out.
///
/// # Errors
/// The line, as above.
#[doc(hidden)]
pub fn originals_lines(bytes: &[u8]) -> std::result::Result<&[u8], usize> {
    let body_len = bytes.strip_suffix(b"\n").map_or(0, |body| {
        body.iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |at| at + 1)
    });
    let (body, trailer) = bytes.split_at(body_len);
    let line = body.split(|&b| b == b'\n').count() - 1;
    let checksum = trailer
        .strip_suffix(b"\n")
        .and_then(|text| std::str::from_utf8(text).ok())
        .and_then(|text| crate::json::Json::parse(text).ok())
        .and_then(|json| {
            let root = json.root();
            (root.kind() == crate::json::Kind::Object && root.members().count() == 1)
                .then(|| root.get("crc32c")?.as_safe_u64())?
        });
    if checksum == Some(u64::from(crc32c::crc32c(body))) {
        Ok(body)
    } else {
        Err(line)
    }
}

/// An import in progress: a session being filled under the store's `tmp/` directory.
/// [`Import::finish`] publishes it; dropping it unfinished removes everything it wrote.
#[derive(Debug)]
pub struct Import<'s> {
    store: &'s Store,
    id: String,
    tmp: PathBuf,
    session: Option<StoredSession>,
    /// Files the importer keeps beside the log (STORE-26), written at publish.
    beside: Vec<(&'static str, Vec<u8>)>,
    /// The build directory's lock (STORE-17), held until the import is published or
    /// removed.
    _build: Build,
}

/// What a finished import stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// The session id.
    pub id: String,
    /// The events imported, before any closer.
    pub events: u64,
    /// The repair closers appended after them (contract §8), as stored JSON texts.
    pub closers: Vec<String>,
    /// The identity of the session's directory as published (its build directory's: a
    /// rename keeps it), so that a take-back removes that directory and no other.
    published: Option<super::checkpoint::DirIdentity>,
}

impl Store {
    /// Starts importing session `id` with the header `header` (JSON text; contract §6 with
    /// `-0` read as 0, unknown keys kept verbatim). Push the stored events in seq order with
    /// [`Import::push`], then call [`Import::finish`].
    ///
    /// Appends inside an import are buffered and staged (`Durability::Staged`, DUR-6): a
    /// sealed segment is synced in the background while the import goes on, and `finish`
    /// waits for those syncs and syncs the rest once before publishing, so an import never
    /// waits for a sync per event or per segment.
    ///
    /// # Errors
    /// `INVALID_ID`, `SESSION_EXISTS`, a header refusal, `UNSAFE_PATH` when `sessions/` or
    /// `tmp/` is a symbolic link (STORE-1), `IO`.
    #[doc(hidden)]
    pub fn import(&self, id: &str, header: &str) -> Result<Import<'_>> {
        super::check_id(id)?;
        // STORE-1: `sessions/` and `tmp/` lead nowhere outside the store.
        self.refuse_store_links()?;
        if std::fs::symlink_metadata(self.session_dir(id)).is_ok() {
            return Err(ErrorKind::SessionExists { id: id.to_owned() }.into());
        }
        let header =
            Header::parse(header, id, NegativeZero::Accept).map_err(|e| e.in_session(id))?;
        // STORE-4: a header no read takes back is refused before anything is written.
        super::check_header_size(&header).map_err(|e| e.in_session(id))?;
        let build = self.tmp_dir(id)?;
        let mut import = Import {
            store: self,
            id: id.to_owned(),
            tmp: build.path().to_owned(),
            session: None,
            beside: Vec::new(),
            _build: build,
        };
        import.session = Some(import.start(header)?);
        Ok(import)
    }
}

impl Store {
    /// The file `name` an importer kept beside session `id`'s log (STORE-26), with its
    /// path; `None` when the session has none.
    ///
    /// # Errors
    /// `UNSAFE_PATH` for a symbolic link on the way (STORE-1), `IO`.
    #[doc(hidden)]
    pub fn read_beside(&self, id: &str, name: &str) -> Result<Option<(PathBuf, Vec<u8>)>> {
        let dir = self.session_dir(id);
        super::refuse_symlink(&dir)?;
        let path = dir.join(name);
        let mut file = match self.options.log.storage.open_read(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("open", &path, &e)),
        };
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut file, &mut bytes)
            .map_err(|e| Error::io("read", &path, &e))?;
        Ok(Some((path, bytes)))
    }

    /// `SESSION_EXISTS` when the store holds session `id`.
    ///
    /// # Errors
    /// `INVALID_ID`, `SESSION_EXISTS`, `UNSAFE_PATH` (STORE-1).
    #[doc(hidden)]
    pub fn refuse_existing(&self, id: &str) -> Result<()> {
        super::check_id(id)?;
        // STORE-1: `sessions/` and `tmp/` lead nowhere outside the store.
        self.refuse_store_links()?;
        if std::fs::symlink_metadata(self.session_dir(id)).is_ok() {
            return Err(ErrorKind::SessionExists { id: id.to_owned() }.into());
        }
        Ok(())
    }

    /// Removes session `id`, which this process has just published: how a multi-session
    /// import that fails takes back the sessions it already stored (STORE-14). Holds the
    /// session's lock while it renames the session's directory to a build directory under
    /// `tmp/`, so a writer that has opened it meanwhile keeps it (`LOCKED`), and none can
    /// open it half removed; then syncs `sessions/` and removes that directory (what a
    /// removal cut short leaves there is removed at a later open, STORE-17).
    ///
    /// Only the directory the import published is removed: a session another handle has
    /// deleted meanwhile, and perhaps created again under the same id, is left alone (the
    /// directory's identity, taken before the publish, is compared under the lock, which
    /// a delete needs too).
    ///
    /// # Errors
    /// `LOCKED` when a writer has it open, `IO` for the rename: the session is then left in
    /// the store; `IO` for the sync of `sessions/` after the rename.
    #[cfg(feature = "dsh")]
    pub(crate) fn discard(&self, imported: &Imported) -> Result<()> {
        let dir = self.session_dir(&imported.id);
        let storage = &*self.options.log.storage;
        super::refuse_symlink(&self.dir.join("sessions"))?;
        super::refuse_symlink(&dir)?;
        let gone = || {
            std::fs::symlink_metadata(&dir).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        };
        let lock = match crate::log::take_lock(storage, &dir.join("log")) {
            Err(error) if gone() => {
                // Deleted by another handle meanwhile: nothing of this import is there.
                drop(error);
                return Ok(());
            }
            taken => taken?,
        };
        // Under the lock: a directory that cannot be looked at is an error, never taken
        // for another session's.
        let here = std::fs::symlink_metadata(&dir).map_err(|e| Error::io("stat", &dir, &e))?;
        let identity = super::checkpoint::DirIdentity::of(&here);
        if imported
            .published
            .is_none_or(|published| published != identity)
        {
            return Ok(()); // another session under the same id
        }
        // Out of `sessions/` in one step first: a removal cut short (a crash, an I/O error)
        // then leaves no part of the session where it would be read as one, shortened.
        // Under `tmp/`, whatever is left is removed at a later open (STORE-17).
        let build = self.tmp_dir(&imported.id)?;
        storage
            .rename(&dir, build.path())
            .map_err(|e| Error::io("rename", &dir, &e))?;
        let sessions = self.dir.join("sessions");
        let synced = storage
            .sync_dir(&sessions)
            .map_err(|e| Error::io("fsync", &sessions, &e));
        let _ = storage.remove_dir_all(build.path());
        drop(lock);
        synced
    }
}

impl Import<'_> {
    fn start(&self, header: Header) -> Result<StoredSession> {
        let options = &self.store.options;
        options
            .log
            .storage
            .create_dir_all(&self.tmp)
            .map_err(|e| Error::io("create_dir", &self.tmp, &e))?;
        let text = format!("{}\n", header.text());
        write_file_atomically(options, &self.tmp, "header.json", text.as_bytes())?;
        let mut log_options = options.log.clone();
        log_options.durability = Durability::Staged;
        let (log, _) = DiskLog::open(&self.tmp.join("log"), log_options)?;
        let log = StoredLog::new(
            log,
            RepairState::default(),
            0,
            self.tmp.clone(),
            std::sync::Arc::clone(&options.log.storage),
            // One checkpoint, at the end: an import cut short is discarded, not reopened.
            u64::MAX,
            options.message_pack,
        )?
        .compressing_pack(options.pack_level());
        Session::over_log_from(header, log, Surface::new(), 0, options.session.clone())
    }

    fn session(&mut self) -> &mut StoredSession {
        self.session.as_mut().expect("present until finish")
    }

    /// Admits the next stored event (contract §5, import row: every check, `-0` read as 0)
    /// and appends it. Returns its seq.
    ///
    /// # Errors
    /// The first failed check (the import should then be dropped), `IO`.
    pub fn push(&mut self, event: &str) -> Result<u64> {
        self.session().import_event(event)
    }

    /// Keeps file `name`, of `bytes`, in the session's directory beside its log: written
    /// when the import is published, with the session's other files, and read back with
    /// [`Store::read_beside`] (`store.md` STORE-26). The DSH importers keep the original
    /// texts of the events they projected this way.
    #[doc(hidden)]
    pub fn keep_beside(&mut self, name: &'static str, bytes: Vec<u8>) {
        self.beside.push((name, bytes));
    }

    /// The message id of stored event `seq` (its message's `id`), when it has one.
    ///
    /// # Errors
    /// `CORRUPT` for a seq not stored yet, or a record that does not check out.
    #[doc(hidden)]
    pub fn message_id_at(&self, seq: u64) -> Result<Option<String>> {
        let Some(session) = self.session.as_ref() else {
            return Ok(None);
        };
        let message = crate::event::EventSource::message_at(session.log(), seq)?;
        let Some(message) = message else {
            return Ok(None);
        };
        let json = crate::json::Json::parse(message)?;
        Ok(json
            .root()
            .get("id")
            .and_then(|id| id.as_str())
            .map(std::borrow::Cow::into_owned))
    }

    /// [`Import::push`] of an event already parsed.
    ///
    /// # Errors
    /// As [`Import::push`].
    pub fn push_parsed(&mut self, event: &crate::json::Json<'_>) -> Result<u64> {
        self.session().import_parsed(event)
    }

    /// The number of events pushed so far, which is also the seq the next one needs.
    pub fn seq_next(&self) -> u64 {
        self.session.as_ref().map_or(0, Session::seq_next)
    }

    /// Closes an interrupted turn with the closers of contract §8, makes everything
    /// durable, and publishes the session under its id (STORE-6).
    ///
    /// # Errors
    /// `SESSION_EXISTS` when the id was taken meanwhile, a refused closer, `IO`; nothing
    /// is left in the store.
    pub fn finish(mut self) -> Result<Imported> {
        let Some(mut session) = self.session.take() else {
            unreachable!("the session is present until finish consumes the import");
        };
        session.mark_stored();
        let events = session.seq_next();
        session.repair()?;
        let closers = (events..session.seq_next())
            .map(|seq| {
                crate::event::EventSource::event_at(session.log(), seq)
                    .map(|e| e.text().into_owned())
            })
            .collect::<Result<_>>()?;
        session.close()?;
        for (name, bytes) in &self.beside {
            super::write_file_atomically(&self.store.options, &self.tmp, name, bytes)?;
        }
        // LOG-1, STORE-27: the log's lock is held through the publish, as a create holds
        // it: no writer can open the session before the publish is known to have
        // succeeded, so a failed one can be taken back.
        let storage = &*self.store.options.log.storage;
        let _lock = crate::log::take_lock(storage, &self.tmp.join("log"))?;
        let published = super::checkpoint::dir_identity(&self.tmp);
        self.store.publish_dir(&self.id, &self.tmp)?;
        self.tmp = PathBuf::new();
        Ok(Imported {
            id: std::mem::take(&mut self.id),
            events,
            closers,
            published,
        })
    }
}

impl Drop for Import<'_> {
    fn drop(&mut self) {
        // Unfinished: close the log first (its lock lives in the directory), then remove.
        drop(self.session.take());
        if !self.tmp.as_os_str().is_empty() {
            let _ = self.store.options.log.storage.remove_dir_all(&self.tmp);
        }
    }
}

#[cfg(all(test, feature = "dsh"))]
mod tests {
    use super::*;

    /// A session of id `id` imported (no events) into `store`.
    fn imported(store: &Store, id: &str) -> Imported {
        let header = format!(r#"{{"version":0,"id":"{id}","createdAt":0}}"#);
        store.import(id, &header).unwrap().finish().unwrap()
    }

    /// STORE-14: taking back a published session holds its lock: a writer that opened it
    /// meanwhile keeps it (`LOCKED`, nothing removed); once closed, it is removed.
    #[test]
    fn discard_refuses_a_session_a_writer_has_open() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Store::open_or_create(dir.path(), super::super::StoreOptions::default()).unwrap();
        let imported = imported(&store, "s");
        let writer = store.open_session("s").unwrap();
        let error = store.discard(&imported).unwrap_err();
        assert_eq!(error.code(), "LOCKED", "{error}");
        assert!(store.session_dir("s").join("header.json").exists());
        drop(writer);
        store.discard(&imported).unwrap();
        assert!(!store.session_dir("s").exists());
        assert_eq!(
            store.open_session("s").unwrap_err().code(),
            "SESSION_NOT_FOUND"
        );
    }

    /// STORE-14: a take-back removes only the directory its import published. Before, it
    /// removed whatever session held the id by then: one another handle had created
    /// under it after deleting the imported one was lost.
    #[test]
    fn discard_leaves_a_session_created_again_under_the_id_alone() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Store::open_or_create(dir.path(), super::super::StoreOptions::default()).unwrap();
        let imported = imported(&store, "s");
        store.delete("s").unwrap();
        store.discard(&imported).unwrap();
        let mut other = store.create("s", None, None).unwrap();
        other
            .append::<crate::kinds::TurnStart>(r#"{"turn":1}"#, crate::NoSurface)
            .unwrap();
        let end = r#"{"turn":1,"reason":{"kind":"completed"}}"#;
        other
            .append::<crate::kinds::TurnEnd>(end, crate::NoSurface)
            .unwrap();
        other.close().unwrap();
        store.discard(&imported).unwrap();
        let (session, _) = store.open_session("s").unwrap();
        assert_eq!(session.seq_next(), 2, "the other session, whole");
    }
}
