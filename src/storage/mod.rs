//! The only code that touches the filesystem for the log: one small trait, so tests can
//! inject failures ([`faulty::FaultyStorage`]) into writes, syncs and renames.
//!
//! Implementations **must** either do the whole operation or return an error; a write
//! that returns an error may have written any prefix of its bytes (the log then poisons
//! itself, `format-spec/log-format.md` DUR-5).
//!
//! [`FsStorage`] follows no symbolic link in the last component of a path (`store.md`
//! STORE-1): files are opened with `O_NOFOLLOW` and directories with
//! `O_DIRECTORY | O_NOFOLLOW`, and a directory that exists as a link is not taken for one.
//! A link there fails with `ELOOP`, which [`crate::Error::io`] reports as `UNSAFE_PATH`
//! naming the link. A store replaces it by a [`beneath::BeneathStorage`] of its directory,
//! which resolves every path from the directory's handle and follows no link on the whole
//! path (STORE-1).

pub mod beneath;
pub mod faulty;
pub mod sim;

use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// File operations the log performs.
pub trait Storage: Debug + Send + Sync {
    /// Creates a directory and its parents (mode 0700 for new ones).
    ///
    /// # Errors
    /// The OS error; `ELOOP` when `dir`, or a parent this call would have to create, is
    /// a symbolic link (STORE-1).
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;

    /// The entries of a directory (names only, unsorted).
    ///
    /// # Errors
    /// The OS error.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;

    /// Creates a new file (mode 0600), failing if it exists, with length `len` (sparse).
    ///
    /// # Errors
    /// The OS error.
    fn create_file(&self, path: &Path, len: u64) -> io::Result<File>;

    /// Opens an existing file, for reading and, when `write`, for writing.
    ///
    /// # Errors
    /// The OS error.
    fn open_file(&self, path: &Path, write: bool) -> io::Result<File>;

    /// Writes all of `bytes` at `offset`.
    ///
    /// # Errors
    /// The OS error; any prefix of `bytes` may have been written.
    fn write_at(&self, file: &File, offset: u64, bytes: &[u8]) -> io::Result<()>;

    /// Sets the file's length (`ftruncate`): the log only ever grows a segment this way,
    /// ahead of its records (`log-format.md` SEG-6); the new bytes read as zeros.
    ///
    /// # Errors
    /// The OS error; the length is then unknown.
    fn set_len(&self, file: &File, len: u64) -> io::Result<()>;

    /// Makes the file's data durable (`fdatasync`).
    ///
    /// # Errors
    /// The OS error; the data's durability is then unknown.
    fn sync_data(&self, file: &File) -> io::Result<()>;

    /// Makes a directory's entries durable (`fsync` on the directory).
    ///
    /// # Errors
    /// The OS error.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;

    /// Renames `from` to `to`, replacing `to`.
    ///
    /// # Errors
    /// The OS error.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;

    /// Removes a file.
    ///
    /// # Errors
    /// The OS error.
    fn remove_file(&self, path: &Path) -> io::Result<()>;

    /// Makes `to` a new name of the file `from` (a hard link; a fork shares sealed
    /// segments this way, `store.md` STORE-10).
    ///
    /// # Errors
    /// The OS error.
    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::hard_link(from, to)
    }

    /// Removes a directory and everything in it.
    ///
    /// # Errors
    /// The OS error.
    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir_all(path)
    }

    /// Whether this is the plain real filesystem ([`FsStorage`]), which a store replaces
    /// by a [`beneath::BeneathStorage`] of its directory (STORE-1). Any other storage (a
    /// fault-injecting or simulated one) is used as given.
    fn is_plain_fs(&self) -> bool {
        false
    }

    /// Opens the existing regular file `path` for reading only, as [`open_regular`] does:
    /// no symbolic link followed in its last component (`ELOOP`, STORE-1), anything but a
    /// regular file refused ([`NotRegular`]) without blocking on a FIFO. The engine reads
    /// its own small files (indexes, limits, checkpoint, headers, `STORE`) this way.
    ///
    /// # Errors
    /// As [`open_regular`].
    fn open_read(&self, path: &Path) -> io::Result<File> {
        open_regular(path)
    }
}

/// The real filesystem.
#[derive(Debug, Clone, Copy, Default)]
pub struct FsStorage;

/// `O_NOFOLLOW`, for `OpenOptionsExt::custom_flags`.
fn no_follow() -> i32 {
    // The flag's bits fit an `i32` (it is a C `int` flag).
    i32::try_from(rustix::fs::OFlags::NOFOLLOW.bits()).unwrap_or(i32::MAX)
}

/// The error an `O_NOFOLLOW` open of a symbolic link gives (`ELOOP`).
pub(crate) fn link_error() -> io::Error {
    io::Error::from_raw_os_error(rustix::io::Errno::LOOP.raw_os_error())
}

/// STORE-1: `dir`, found to exist, is a directory, not a symbolic link (`ELOOP`) nor
/// anything else (`error`, the `EEXIST` of the `mkdir` that found it).
fn existing_dir(dir: &Path, error: io::Error) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(dir)?;
    if meta.file_type().is_symlink() {
        Err(link_error())
    } else if meta.is_dir() {
        Ok(())
    } else {
        Err(error)
    }
}

impl Storage for FsStorage {
    /// `mkdir` of `dir`; when its parent is missing, the parent first (recursively). A
    /// name that exists must be a directory itself, not a link to one (STORE-1); a
    /// directory created meanwhile by another process is success.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mkdir = || std::fs::DirBuilder::new().mode(0o700).create(dir);
        match mkdir() {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => existing_dir(dir, error),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                match dir.parent() {
                    Some(parent) if !parent.as_os_str().is_empty() => {
                        self.create_dir_all(parent)?;
                    }
                    _ => return Err(error),
                }
                match mkdir() {
                    Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                        existing_dir(dir, error)
                    }
                    other => other,
                }
            }
            Err(error) => Err(error),
        }
    }

    /// Reads the directory with rustix's raw reader: `getdents64` into one buffer on the
    /// stack, and an allocation per name only (`std::fs::read_dir` also builds a
    /// path-owning entry per name, and rustix's `Dir` a `CString`). The listing is most of
    /// what opening a long log costs beyond its last segment (`log-format.md` §7).
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::open(dir, flags, Mode::empty())?;
        list_fd(std::os::fd::AsFd::as_fd(&fd))
    }

    fn create_file(&self, path: &Path, len: u64) -> io::Result<File> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(no_follow())
            .open(path)?;
        file.set_len(len)?;
        Ok(file)
    }

    fn open_file(&self, path: &Path, write: bool) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .write(write)
            .custom_flags(no_follow())
            .open(path)
    }

    fn write_at(&self, file: &File, offset: u64, bytes: &[u8]) -> io::Result<()> {
        file.write_all_at(bytes, offset)
    }

    fn set_len(&self, file: &File, len: u64) -> io::Result<()> {
        file.set_len(len)
    }

    fn sync_data(&self, file: &File) -> io::Result<()> {
        file.sync_data()
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        open_dir(dir)?.sync_all()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn is_plain_fs(&self) -> bool {
        true
    }
}

/// The entries of the open directory `dir` (names only, unsorted), read with rustix's raw
/// reader: `getdents64` into one buffer on the stack, and an allocation per name only
/// (`std::fs::read_dir` also builds a path-owning entry per name, and rustix's `Dir` a
/// `CString`). The listing is most of what opening a long log costs beyond its last
/// segment (`log-format.md` §7). The reading starts at the handle's offset: `dir` is a
/// handle opened for this listing.
pub(crate) fn list_fd(dir: std::os::fd::BorrowedFd<'_>) -> io::Result<Vec<String>> {
    use rustix::fs::RawDir;
    let mut buffer = [std::mem::MaybeUninit::<u8>::uninit(); 8192];
    let mut entries = RawDir::new(dir, &mut buffer);
    let mut names = Vec::new();
    while let Some(entry) = entries.next() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            // Names are UTF-8 here (the log writes ASCII names); others are kept lossily.
            names.push(std::str::from_utf8(name).map_or_else(
                |_| String::from_utf8_lossy(name).into_owned(),
                str::to_owned,
            ));
        }
    }
    Ok(names)
}

use std::os::unix::fs::DirBuilderExt;

/// Opens the directory `dir` for reading, not through a symbolic link (STORE-1).
fn open_dir(dir: &Path) -> io::Result<File> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(File::from(rustix::fs::open(dir, flags, Mode::empty())?))
}

/// Opens `path` for reading only if it is a regular file, not through a symbolic link in
/// its last component (`ELOOP`, STORE-1): opened with `O_NOFOLLOW | O_NONBLOCK`, so that a
/// FIFO does not block the open, checked with `fstat`, then made blocking again. Anything
/// but a regular file (a FIFO, a device, a directory, a socket) fails with
/// [`io::ErrorKind::InvalidInput`] carrying [`NotRegular`].
///
/// # Errors
/// The OS error, `ELOOP` for a link, `InvalidInput` for a file that is not regular.
pub fn open_regular(path: &Path) -> io::Result<File> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = rustix::fs::open(path, flags, Mode::empty())?;
    let stat = rustix::fs::fstat(&fd)?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, NotRegular));
    }
    let flags = rustix::fs::fcntl_getfl(&fd)?;
    rustix::fs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK)?;
    Ok(File::from(fd))
}

/// What [`open_regular`]'s error carries for a file that is not regular;
/// [`crate::Error::io`] reports it as `UNSAFE_PATH`.
#[derive(Debug, Clone, Copy)]
pub struct NotRegular;

impl std::fmt::Display for NotRegular {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("not a regular file")
    }
}

impl std::error::Error for NotRegular {}

/// The whole of the regular file `path`, read without following a symbolic link in its
/// last component ([`open_regular`]).
///
/// # Errors
/// As [`open_regular`], and the read's error.
pub fn read_regular(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    open_regular(path)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The whole of the regular file `path`, opened through `storage` ([`Storage::open_read`]).
///
/// # Errors
/// As [`Storage::open_read`], and the read's error.
pub fn read_file(storage: &dyn Storage, path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    storage.open_read(path)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The bytes of the file at `path` when it holds at most `max` of them; `None` for a
/// longer file, of which no more than `max + 1` bytes are read.
///
/// # Errors
/// The OS error.
pub fn read_file_at_most(
    storage: &dyn Storage,
    path: &Path,
    max: u64,
) -> io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    storage
        .open_read(path)?
        .take(max.saturating_add(1))
        .read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= max).then_some(bytes))
}

/// `dir/name`.
pub fn child(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

/// Makes `path` a durable file holding `bytes` by way of `tmp`: removes a `tmp` a crash may
/// have left, creates it `len` bytes long (sparse past `bytes`), writes `bytes`, syncs it
/// and renames it over `path`. The caller syncs the directory when the new name must be
/// durable too (`store.md` STORE-5, `log-format.md` RCV-12).
///
/// # Errors
/// `IO` with the file and the operation that failed; `path` is then unchanged, and `tmp`
/// removed (best effort: a crash leaves it, for the next open's clean-up).
pub(crate) fn replace_file(
    storage: &dyn Storage,
    tmp: &Path,
    path: &Path,
    bytes: &[u8],
    len: u64,
) -> crate::Result<()> {
    use crate::Error;
    let _ = storage.remove_file(tmp);
    let replaced = storage
        .create_file(tmp, len)
        .map_err(|e| Error::io("create", tmp, &e))
        .and_then(|file| {
            storage
                .write_at(&file, 0, bytes)
                .map_err(|e| Error::io("write", tmp, &e))?;
            storage
                .sync_data(&file)
                .map_err(|e| Error::io("fsync", tmp, &e))
        })
        .and_then(|()| {
            storage
                .rename(tmp, path)
                .map_err(|e| Error::io("rename", path, &e))
        });
    if replaced.is_err() {
        // A refused replacement leaves no trace.
        let _ = storage.remove_file(tmp);
    }
    replaced
}
