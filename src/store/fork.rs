//! Fork of a stored session (contract §7): sealed segments are hard-linked, only the
//! boundary segment's prefix is copied, so the cost does not grow with the prefix.

use super::{Store, StoredSession};
use crate::error::{Error, ErrorKind, Result};
use crate::event::{EventSource, Header};
use crate::log::LogReader;
use crate::session::Boundary;
use crate::session::fork::{fork_len, open_turn_at};

impl Store {
    /// Forks `source` into a new session `child` holding events `0..=boundary` (contract
    /// §7), with the fork header and the end-seed marker. Checks, in order:
    /// `SESSION_EXISTS`, `SESSION_NOT_FOUND`, `INVALID_BOUNDARY`, `OPEN_TURN`. The source
    /// is only read (its writer may be appending meanwhile) and never changed.
    ///
    /// The child's sealed segments are hard links to the source's (`store.md` STORE-10);
    /// only the segment holding the boundary is copied, up to the boundary.
    ///
    /// # Errors
    /// The first failed check, or `IO`; nothing is created then.
    pub fn fork(&self, source: &str, boundary: Boundary, child: &str) -> Result<StoredSession> {
        let child_dir = self.session_dir(child);
        if child_dir.exists() {
            return Err(ErrorKind::SessionExists {
                id: child.to_owned(),
            }
            .into());
        }
        let source_dir = self.session_dir(source);
        let header = Self::read_header(source, &source_dir)?;
        let storage = &self.options.log.storage;
        let reader = LogReader::open_with(&source_dir.join("log"), storage.clone())
            .map_err(|e| e.in_session(source))?;
        let len = fork_len(boundary, reader.seq_next())?;
        if let Some(turn_start) = open_turn_at(&reader, len) {
            return Err(ErrorKind::OpenTurn {
                boundary: len - 1,
                turn_start,
            }
            .into());
        }
        let now = u64::try_from(self.options.session.clock.now_ms()).unwrap_or(0);
        let child_header = Header::for_fork(child, now, header.cwd(), source, len);
        self.publish(child, |tmp| {
            self.write_fork(tmp, &child_header, &reader, len)
        })?;
        let (mut session, _) = self.open(child)?;
        session.end_seed()?;
        session.flush()?;
        Ok(session)
    }

    fn write_fork(
        &self,
        dir: &std::path::Path,
        header: &Header,
        reader: &LogReader,
        len: u64,
    ) -> Result<()> {
        let storage = &self.options.log.storage;
        let log_dir = dir.join("log");
        storage
            .create_dir_all(&log_dir)
            .map_err(|e| Error::io("create_dir", &log_dir, &e))?;
        let text = format!("{}\n", header.text());
        super::write_file_atomically(&self.options, dir, "header.json", text.as_bytes())?;
        let parts = reader.prefix_segments(len);
        for (i, (path, bytes, end)) in parts.iter().enumerate() {
            let Some(name) = path.file_name() else {
                continue;
            };
            let target = log_dir.join(name);
            if i + 1 < parts.len() {
                std::fs::hard_link(path, &target).map_err(|e| Error::io("link", &target, &e))?;
                let index = path.with_extension("idx");
                if index.exists() {
                    let _ = std::fs::hard_link(&index, target.with_extension("idx"));
                }
            } else {
                // The boundary segment is copied up to the boundary: the child appends to it.
                let capacity = bytes.len() as u64;
                let file = storage
                    .create_file(&target, capacity)
                    .map_err(|e| Error::io("create", &target, &e))?;
                storage
                    .write_at(&file, 0, &bytes[..*end])
                    .map_err(|e| Error::io("write", &target, &e))?;
                storage
                    .sync_data(&file)
                    .map_err(|e| Error::io("fsync", &target, &e))?;
            }
        }
        // The source's checkpoint serves the child when it covers no more than the
        // prefix: the child's log holds the same bytes, so CKP-3 accepts it there.
        let source_checkpoint = reader
            .dir()
            .parent()
            .and_then(|source_dir| super::checkpoint::Checkpoint::load(source_dir, reader).ok())
            .filter(|checkpoint| checkpoint.surface.seq_next() <= len);
        if let Some(checkpoint) = source_checkpoint {
            let name = super::checkpoint::CHECKPOINT_FILE;
            super::write_file_atomically(&self.options, dir, name, &checkpoint.encode())?;
        }
        storage
            .sync_dir(&log_dir)
            .map_err(|e| Error::io("fsync", &log_dir, &e))
    }
}
