//! [`BeneathStorage`]: the real filesystem, every path of the store opened relative to the
//! store's own directory handle and never through a symbolic link (`store.md` STORE-1).
//!
//! The store's directory is opened once ([`BeneathStorage::new`]); every path under it is
//! then resolved from that handle: with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`
//! where the kernel has it, and otherwise by a walk that opens one component at a time
//! with `openat(O_NOFOLLOW)` from the root's handle. A link anywhere on the path fails with
//! `ELOOP`, a path that would leave the root with `EXDEV`; [`crate::Error::io`] reports both
//! as `UNSAFE_PATH`. Operations on a name (create a directory, rename, unlink, link) act on
//! the name in its parent's handle, opened the same way, so no link swapped in between a
//! check and the operation is followed.
//!
//! Nothing is cached but the root's handle: each call resolves its path again.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::{FsStorage, Storage};

/// Whether `openat2` answered `ENOSYS` once: the kernel has none, so every later call
/// walks at once. (An `EPERM`, which some seccomp filters give, falls back for its call
/// only: a real `EPERM` must not disable `openat2` for good.)
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// The real filesystem below one directory, resolved from its handle (module docs).
#[derive(Debug)]
pub struct BeneathStorage {
    root: OwnedFd,
    /// The paths by which callers name the root (the caller's path and its resolution).
    prefixes: Vec<PathBuf>,
    /// Whether `openat2` is never tried (tests of the walk).
    walk_only: bool,
}

/// Flags of a directory handle the walk and the operations on names use: readable, so
/// that it can also be listed and synced, and never a link.
fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

impl BeneathStorage {
    /// Opens the directory `root` (resolved through links the caller may have: it is the
    /// caller's path) and serves every path under it, as named through any of `prefixes`
    /// (`root` itself is one), from its handle.
    ///
    /// # Errors
    /// The OS error of opening `root` as a directory.
    pub fn new(root: &Path, prefixes: &[&Path]) -> io::Result<Self> {
        Self::with_walk(root, prefixes, false)
    }

    /// [`BeneathStorage::new`] that never tries `openat2` and always walks the path one
    /// component at a time: the fallback of kernels without it, for tests.
    ///
    /// # Errors
    /// As [`BeneathStorage::new`].
    #[doc(hidden)]
    pub fn walking(root: &Path, prefixes: &[&Path]) -> io::Result<Self> {
        Self::with_walk(root, prefixes, true)
    }

    fn with_walk(root: &Path, prefixes: &[&Path], walk_only: bool) -> io::Result<Self> {
        let fd = rustix::fs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut all = vec![root.to_owned()];
        all.extend(prefixes.iter().map(|p| p.to_path_buf()));
        Ok(Self {
            root: fd,
            prefixes: all,
            walk_only,
        })
    }

    /// `path` relative to the root, or `None` when it is not under it (then it is served
    /// by [`FsStorage`]: the store names no such path).
    fn relative<'a>(&self, path: &'a Path) -> Option<&'a Path> {
        self.prefixes
            .iter()
            .find_map(|prefix| path.strip_prefix(prefix).ok())
    }

    /// Opens `rel` (relative to the root) with `flags` and `mode`, following no link and
    /// not leaving the root.
    fn open(&self, rel: &Path, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
        let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        if !self.walk_only && !NO_OPENAT2.load(Ordering::Relaxed) {
            let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS;
            match rustix::fs::openat2(&self.root, rel, flags, mode, resolve) {
                Err(Errno::NOSYS) => NO_OPENAT2.store(true, Ordering::Relaxed),
                Err(Errno::PERM) => {}
                other => return Ok(other?),
            }
        }
        walk(self.root.as_fd(), rel, flags, mode)
    }

    /// The handle of `rel`'s parent directory and `rel`'s last name.
    fn parent<'a>(&self, rel: &'a Path) -> io::Result<(OwnedFd, &'a std::ffi::OsStr)> {
        // The root itself, `.` or `..` has no name in a parent under the root.
        let Some(Component::Normal(name)) = rel.components().next_back() else {
            return Err(io::Error::from_raw_os_error(Errno::XDEV.raw_os_error()));
        };
        let parent = rel.parent().unwrap_or(Path::new(""));
        Ok((self.open(parent, dir_flags(), Mode::empty())?, name))
    }
}

/// The fallback of `openat2`: opens `rel` from `root` one component at a time, each with
/// `O_NOFOLLOW` (a link is `ELOOP`); `..` is refused (`EXDEV`), as `RESOLVE_BENEATH` would
/// refuse leaving the root.
fn walk(root: BorrowedFd<'_>, rel: &Path, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
    let names: Vec<&std::ffi::OsStr> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(Ok(name)),
            Component::CurDir => None,
            _ => Some(Err(io::Error::from_raw_os_error(
                Errno::XDEV.raw_os_error(),
            ))),
        })
        .collect::<io::Result<_>>()?;
    let Some((last, dirs)) = names.split_last() else {
        return Ok(rustix::fs::openat(root, ".", flags, mode)?);
    };
    let mut at: Option<OwnedFd> = None;
    for name in dirs {
        let from = at.as_ref().map_or(root, AsFd::as_fd);
        at = Some(rustix::fs::openat(from, *name, dir_flags(), Mode::empty())?);
    }
    let from = at.as_ref().map_or(root, AsFd::as_fd);
    Ok(rustix::fs::openat(from, *last, flags, mode)?)
}

/// Removes the entry `name` of `parent` and, when it is a directory, everything in it,
/// through directory handles: a link is removed, never followed.
fn remove_tree(parent: BorrowedFd<'_>, name: &std::ffi::OsStr) -> io::Result<()> {
    match rustix::fs::openat(parent, name, dir_flags(), Mode::empty()) {
        Ok(dir) => {
            for child in super::list_fd(dir.as_fd())? {
                match rustix::fs::unlinkat(&dir, child.as_str(), AtFlags::empty()) {
                    Ok(()) | Err(Errno::NOENT) => {}
                    Err(Errno::ISDIR | Errno::PERM) => {
                        match remove_tree(dir.as_fd(), child.as_ref()) {
                            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                            other => other?,
                        }
                    }
                    Err(error) => return Err(error.into()),
                }
            }
            Ok(rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR)?)
        }
        // A link (or a file) where a directory was named: the name goes, not its target.
        Err(Errno::LOOP) => Ok(rustix::fs::unlinkat(parent, name, AtFlags::empty())?),
        Err(error) => Err(error.into()),
    }
}

impl Storage for BeneathStorage {
    /// One component at a time from the root: `mkdirat` of each missing name in its
    /// parent's handle, then the name opened with `O_DIRECTORY | O_NOFOLLOW` (a link is
    /// `ELOOP`, a name of something else keeps the `EEXIST` of its `mkdirat`).
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let Some(rel) = self.relative(dir) else {
            return FsStorage.create_dir_all(dir);
        };
        let mut at: Option<OwnedFd> = None;
        for component in rel.components() {
            let name = match component {
                Component::Normal(name) => name,
                Component::CurDir => continue,
                _ => return Err(io::Error::from_raw_os_error(Errno::XDEV.raw_os_error())),
            };
            let from = at.as_ref().map_or(self.root.as_fd(), AsFd::as_fd);
            let made = rustix::fs::mkdirat(from, name, Mode::from_raw_mode(0o700));
            match (
                made,
                rustix::fs::openat(from, name, dir_flags(), Mode::empty()),
            ) {
                (Err(Errno::EXIST), Err(Errno::NOTDIR)) => {
                    return Err(Errno::EXIST.into());
                }
                (Ok(()) | Err(Errno::EXIST), opened) => at = Some(opened?),
                (Err(error), _) => return Err(error.into()),
            }
        }
        Ok(())
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let Some(rel) = self.relative(dir) else {
            return FsStorage.list_dir(dir);
        };
        super::list_fd(self.open(rel, dir_flags(), Mode::empty())?.as_fd())
    }

    fn create_file(&self, path: &Path, len: u64) -> io::Result<File> {
        let Some(rel) = self.relative(path) else {
            return FsStorage.create_file(path, len);
        };
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL;
        let file = File::from(self.open(rel, flags, Mode::from_raw_mode(0o600))?);
        file.set_len(len)?;
        Ok(file)
    }

    fn open_file(&self, path: &Path, write: bool) -> io::Result<File> {
        let Some(rel) = self.relative(path) else {
            return FsStorage.open_file(path, write);
        };
        let flags = if write { OFlags::RDWR } else { OFlags::RDONLY };
        Ok(File::from(self.open(rel, flags, Mode::empty())?))
    }

    fn write_at(&self, file: &File, offset: u64, bytes: &[u8]) -> io::Result<()> {
        FsStorage.write_at(file, offset, bytes)
    }

    fn set_len(&self, file: &File, len: u64) -> io::Result<()> {
        FsStorage.set_len(file, len)
    }

    fn sync_data(&self, file: &File) -> io::Result<()> {
        FsStorage.sync_data(file)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let Some(rel) = self.relative(dir) else {
            return FsStorage.sync_dir(dir);
        };
        Ok(rustix::fs::fsync(self.open(
            rel,
            dir_flags(),
            Mode::empty(),
        )?)?)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let (Some(rel_from), Some(rel_to)) = (self.relative(from), self.relative(to)) else {
            return FsStorage.rename(from, to);
        };
        let (from_dir, from_name) = self.parent(rel_from)?;
        let (to_dir, to_name) = self.parent(rel_to)?;
        Ok(rustix::fs::renameat(
            &from_dir, from_name, &to_dir, to_name,
        )?)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let Some(rel) = self.relative(path) else {
            return FsStorage.remove_file(path);
        };
        let (dir, name) = self.parent(rel)?;
        Ok(rustix::fs::unlinkat(&dir, name, AtFlags::empty())?)
    }

    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        let (Some(rel_from), Some(rel_to)) = (self.relative(from), self.relative(to)) else {
            return FsStorage.hard_link(from, to);
        };
        let (from_dir, from_name) = self.parent(rel_from)?;
        let (to_dir, to_name) = self.parent(rel_to)?;
        // No `AT_SYMLINK_FOLLOW`: a link at `from` is linked itself, never its target.
        Ok(rustix::fs::linkat(
            &from_dir,
            from_name,
            &to_dir,
            to_name,
            AtFlags::empty(),
        )?)
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        let Some(rel) = self.relative(path) else {
            return FsStorage.remove_dir_all(path);
        };
        let (dir, name) = self.parent(rel)?;
        remove_tree(dir.as_fd(), name)
    }
}
