//! What `surfacelog ls` shows of every session without reading a log (`store.md`
//! STORE-25): the header, the checkpoint's header, and the sizes of the files.
//!
//! Everything is opened relative to a directory handle with `O_NOFOLLOW`, one component
//! at a time, so no symbolic link is followed (STORE-1) and no path is walked twice: a
//! store of 10,000 sessions is listed in a few syscalls per session, on every core.

use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::{Store, Summary, checkpoint, link_inside, parse_header_file, refuse_symlink};
use crate::error::{Error, ErrorKind, Result};
use crate::event::Header;

/// One session of [`Store::list_summaries`].
#[doc(hidden)]
#[derive(Debug, Clone)]
pub struct SessionSummary {
    /// Its header (`header.json`, STORE-4).
    pub header: Header,
    /// Its checkpoint's counts and its size.
    pub summary: Summary,
}

/// What [`Store::list_summaries`] found: the sessions, sorted by id, and the damaged
/// ones (as [`Store::list`] reports them).
#[doc(hidden)]
#[derive(Debug, Default)]
pub struct Summaries {
    /// The sessions that read, sorted by id.
    pub sessions: Vec<SessionSummary>,
    /// `CORRUPT` or `UNSAFE_PATH` for each session that does not (STORE-1, STORE-4).
    pub damaged: Vec<Error>,
}

/// The flags of every open here: read-only, no link followed, not inherited, and never
/// waiting (a FIFO put where a file belongs opens at once, and `fstat` then refuses it).
fn flags(directory: bool) -> OFlags {
    let base = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    if directory {
        base | OFlags::DIRECTORY
    } else {
        base
    }
}

/// An `IO` error for `op` on `path`; `UNSAFE_PATH` for a link (`ELOOP` of a no-follow
/// open, STORE-1).
fn io(op: &'static str, path: &Path, errno: Errno) -> Error {
    if errno == Errno::LOOP {
        return link_inside(path);
    }
    Error::io(op, path, &std::io::Error::from(errno))
}

impl Store {
    /// Internals (for `surfacelog stats`): session `id`'s checkpoint counts and size on
    /// disk (STORE-25). Unstable.
    ///
    /// # Errors
    /// `SESSION_NOT_FOUND`, `CORRUPT` for its header, `UNSAFE_PATH` for a link, `IO`.
    #[doc(hidden)]
    pub fn summarize(&self, id: &str) -> Result<Summary> {
        super::check_id(id)?;
        let sessions = self.dir.join("sessions");
        refuse_symlink(&sessions)?;
        let fd = rustix::fs::open(&sessions, flags(true), Mode::empty())
            .map_err(|e| io("open", &sessions, e))?;
        match summarize(&fd, &sessions, &super::escape_id(id), &|_| {})? {
            // STORE-4: a shortened name shared by two ids; this one is the other's.
            Some(found) if found.header.id() == id => Ok(found.summary),
            _ => Err(ErrorKind::SessionNotFound { id: id.to_owned() }.into()),
        }
    }

    /// Internals (for `surfacelog ls`): every session's header, checkpoint counts and size
    /// on disk, without reading any log (STORE-25). Unstable.
    ///
    /// # Errors
    /// `IO` for the `sessions/` directory; a session that cannot be read is in
    /// [`Summaries::damaged`].
    #[doc(hidden)]
    pub fn list_summaries(&self) -> Result<Summaries> {
        let sessions = self.dir.join("sessions");
        refuse_symlink(&sessions)?;
        let fd = rustix::fs::open(&sessions, flags(true), Mode::empty())
            .map_err(|e| io("open", &sessions, e))?;
        let mut names = Vec::new();
        let mut dir = rustix::fs::Dir::read_from(&fd).map_err(|e| io("list", &sessions, e))?;
        while let Some(entry) = dir.read() {
            let entry = entry.map_err(|e| io("list", &sessions, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name != "." && name != ".." {
                names.push(name);
            }
        }
        let threads = std::thread::available_parallelism()
            .map_or(1, std::num::NonZero::get)
            .clamp(1, 8);
        let chunk = names.len().div_ceil(threads).max(1);
        let results: Vec<Vec<Result<Option<SessionSummary>>>> = std::thread::scope(|scope| {
            let workers: Vec<_> = names
                .chunks(chunk)
                .map(|names| {
                    let (fd, sessions) = (&fd, &sessions);
                    let step = |name: &str| self.step(super::Step::Summarizing(name));
                    scope.spawn(move || {
                        names
                            .iter()
                            .map(|name| summarize(fd, sessions, name, &step))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| {
                    w.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        });
        let mut out = Summaries::default();
        for result in results.into_iter().flatten() {
            match result {
                Ok(Some(session)) => out.sessions.push(session),
                Ok(None) => {}
                Err(error) => out.damaged.push(error),
            }
        }
        out.sessions
            .sort_by(|a, b| a.header.id().cmp(b.header.id()));
        Ok(out)
    }
}

/// Adds the files of the log directory open as `log` to `summary` (one listing, a stat of
/// each relative to the directory): their sizes, and the segments among them.
fn add_log_files(summary: &mut Summary, log: OwnedFd, log_path: &Path) -> Result<()> {
    // The handle is the listing's own (no second open of the directory).
    let mut entries = rustix::fs::Dir::new(log).map_err(|e| io("list", log_path, e))?;
    let mut names = Vec::new();
    while let Some(entry) = entries.read() {
        let entry = entry.map_err(|e| io("list", log_path, e))?;
        let file_name = entry.file_name();
        if file_name.to_bytes() != b"." && file_name.to_bytes() != b".." {
            names.push(file_name.to_owned());
        }
    }
    let log = entries.fd().map_err(|e| io("list", log_path, e))?;
    for file_name in names {
        let at = || log_path.join(file_name.to_string_lossy().as_ref());
        let stat = match rustix::fs::statat(log, file_name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            // Removed meanwhile (a writer's temporary file).
            Err(Errno::NOENT) => continue,
            Err(errno) => return Err(io("stat", &at(), errno)),
        };
        if FileType::from_raw_mode(stat.st_mode) == FileType::Symlink {
            return Err(link_inside(&at()));
        }
        count(summary, &stat);
        if crate::log::segment::parse_segment_name(&file_name.to_string_lossy()).is_some() {
            summary.segments += 1;
        }
    }
    Ok(())
}

/// `sessions/name` opened as a directory: `None` for a plain file there or an entry
/// gone meanwhile; `UNSAFE_PATH` for a link (STORE-1).
fn open_dir(sessions: &OwnedFd, name: &str, path: &Path) -> Result<Option<OwnedFd>> {
    match rustix::fs::openat(sessions, name, flags(true), Mode::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::NOENT) => Ok(None),
        Err(Errno::NOTDIR) => match rustix::fs::statat(sessions, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Symlink => {
                Err(link_inside(path))
            }
            _ => Ok(None),
        },
        Err(errno) => Err(io("open", path, errno)),
    }
}

/// The refusal of `dir/name`, which is not a directory: `UNSAFE_PATH` for a link, else
/// `CORRUPT`.
fn link_or_not_dir(dir: &OwnedFd, name: &str, path: &Path) -> Error {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Symlink => link_inside(path),
        _ => ErrorKind::Corrupt {
            location: path.display().to_string(),
            reason: "not a directory".to_owned(),
        }
        .into(),
    }
}

/// `UNSAFE_PATH` for a store file that is not a regular file (a FIFO, a device; STORE-1).
fn not_regular(path: &Path) -> Error {
    ErrorKind::UnsafePath {
        path: path.to_owned(),
        reason: "not a regular file (STORE-1)",
    }
    .into()
}

/// Adds a file's blocks and length to `summary` (directories are not counted).
fn count(summary: &mut Summary, stat: &rustix::fs::Stat) {
    if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
        summary.bytes += u64::try_from(stat.st_blocks).unwrap_or(0) * 512;
        summary.apparent_bytes += u64::try_from(stat.st_size).unwrap_or(0);
    }
}

/// Session directory `name` in `sessions` (open as `sessions_fd`): `None` when it is no
/// session directory (a plain file, STORE-16 warns of it) or is gone (deleted meanwhile).
/// `step` is the test hook, run once the directory is open.
fn summarize(
    sessions_fd: &OwnedFd,
    sessions: &Path,
    name: &str,
    step: &(dyn Fn(&str) + Sync),
) -> Result<Option<SessionSummary>> {
    let path = sessions.join(name);
    let dir = match open_dir(sessions_fd, name, &path) {
        Ok(Some(fd)) => fd,
        // A plain file in `sessions/` is no session (STORE-16 warns of it); gone is gone.
        Ok(None) => return Ok(None),
        Err(error) => return Err(error),
    };
    step(name);
    match summarize_open(&dir, &path, name) {
        // STORE-8: a session deleted (renamed into the trash, perhaps purged since) while
        // its files were read is not listed, and is not damage: the handle followed the
        // directory out of `sessions/`, where its files may be going one by one.
        Err(_) if !still_listed(sessions_fd, name, &dir) => Ok(None),
        other => other,
    }
}

/// Whether `sessions/name` is still the directory open as `dir` (device and inode).
fn still_listed(sessions_fd: &OwnedFd, name: &str, dir: &OwnedFd) -> bool {
    let Ok(open) = rustix::fs::fstat(dir) else {
        return true;
    };
    match rustix::fs::statat(sessions_fd, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(now) => (now.st_dev, now.st_ino) == (open.st_dev, open.st_ino),
        Err(Errno::NOENT) => false,
        Err(_) => true,
    }
}

/// [`summarize`] of the session directory open as `dir` at `path`.
fn summarize_open(dir: &OwnedFd, path: &Path, name: &str) -> Result<Option<SessionSummary>> {
    let path = path.to_owned();
    let mut summary = Summary {
        events: None,
        surface: None,
        bytes: 0,
        apparent_bytes: 0,
        segments: 0,
    };

    // STORE-4: the header, read through the directory's handle.
    let header_path = path.join("header.json");
    let header_file = match rustix::fs::openat(dir, "header.json", flags(false), Mode::empty()) {
        Ok(fd) => std::fs::File::from(fd),
        Err(Errno::NOENT) => {
            return Err(ErrorKind::Corrupt {
                location: header_path.display().to_string(),
                reason: "the session has no header.json (STORE-4); its log is kept".to_owned(),
            }
            .into());
        }
        Err(errno) => return Err(io("open", &header_path, errno)),
    };
    let stat = rustix::fs::fstat(&header_file).map_err(|e| io("stat", &header_path, e))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(not_regular(&header_path));
    }
    count(&mut summary, &stat);
    // One read of the length `fstat` gave: `header.json` is written once, whole, before
    // its session is published (STORE-6), and never changes.
    let len = usize::try_from(stat.st_size)
        .ok()
        .filter(|&len| len as u64 <= super::HEADER_BYTES_MAX)
        .ok_or_else(|| super::header_too_large(&header_path))?;
    let mut bytes = vec![0; len];
    std::os::unix::fs::FileExt::read_exact_at(&header_file, &mut bytes, 0)
        .map_err(|e| Error::io("read", &header_path, &e))?;
    let header = parse_header_file(&header_path, &bytes, name)?;

    // CKP-1: the checkpoint's counts, its CRC checked; its nodes are not read.
    match rustix::fs::openat(
        dir,
        checkpoint::CHECKPOINT_FILE,
        flags(false),
        Mode::empty(),
    ) {
        Ok(fd) => {
            let file = std::fs::File::from(fd);
            let at = path.join(checkpoint::CHECKPOINT_FILE);
            let stat = rustix::fs::fstat(&file).map_err(|e| io("stat", &at, e))?;
            if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
                return Err(not_regular(&at));
            }
            count(&mut summary, &stat);
            let len = u64::try_from(stat.st_size).unwrap_or(0);
            if let Ok(cp) = checkpoint::Checkpoint::read_open(file, len, &at)? {
                summary.events = Some(cp.seq_next());
                summary.surface = Some(cp.node_count());
            }
        }
        Err(Errno::NOENT) => {}
        Err(errno) => return Err(io("open", &path.join(checkpoint::CHECKPOINT_FILE), errno)),
    }

    // The message pack (message-pack.md), a cache: its size only.
    let pack_path = path.join(super::pack::PACK_FILE);
    match rustix::fs::openat(dir, super::pack::PACK_FILE, flags(false), Mode::empty()) {
        Ok(fd) => {
            let stat = rustix::fs::fstat(&fd).map_err(|e| io("stat", &pack_path, e))?;
            if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
                return Err(not_regular(&pack_path));
            }
            count(&mut summary, &stat);
        }
        Err(Errno::NOENT) => {}
        Err(errno) => return Err(io("open", &pack_path, errno)),
    }

    // The log's files: one listing, a stat of each relative to the directory.
    let log_path = path.join("log");
    let log = match rustix::fs::openat(dir, "log", flags(true), Mode::empty()) {
        Ok(fd) => fd,
        // `O_NOFOLLOW | O_DIRECTORY` on a link is `ENOTDIR`: a link is refused (STORE-1).
        Err(Errno::NOTDIR) => return Err(link_or_not_dir(dir, "log", &log_path)),
        Err(Errno::NOENT) => {
            // STORE-21: no log is damage; a session whose directory went away is gone.
            return match rustix::fs::fstat(dir) {
                Ok(stat) if stat.st_nlink == 0 => Ok(None),
                _ => Err(ErrorKind::Corrupt {
                    location: log_path.display().to_string(),
                    reason: "the session has no log directory (STORE-21)".to_owned(),
                }
                .into()),
            };
        }
        Err(errno) => return Err(io("open", &log_path, errno)),
    };
    add_log_files(&mut summary, log, &log_path)?;
    Ok(Some(SessionSummary { header, summary }))
}
