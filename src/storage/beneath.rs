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

    /// Opens `rel` (relative to the root; `path` as the caller names it) with `flags` and
    /// `mode`, following no link and not leaving the root.
    fn open(&self, path: &Path, rel: &Path, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
        let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let rel = if rel.as_os_str().is_empty() {
            Path::new(".")
        } else {
            rel
        };
        let opened = if !self.walk_only && !NO_OPENAT2.load(Ordering::Relaxed) {
            let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS;
            match rustix::fs::openat2(&self.root, rel, flags, mode, resolve) {
                Err(Errno::NOSYS) => {
                    NO_OPENAT2.store(true, Ordering::Relaxed);
                    walk(self.root.as_fd(), rel, flags, mode)
                }
                Err(Errno::PERM) => walk(self.root.as_fd(), rel, flags, mode),
                other => other,
            }
        } else {
            walk(self.root.as_fd(), rel, flags, mode)
        };
        opened.map_err(|error| self.name_link(path, rel, error))
    }

    /// The error of an open of `rel` that failed with `error`: for `ELOOP`, or the
    /// `ENOTDIR` of a link opened as a directory, a [`LinkAt`] naming the first link on
    /// the path (looked up after the failure, for the message only), when there is one.
    fn name_link(&self, path: &Path, rel: &Path, error: Errno) -> io::Error {
        if error != Errno::LOOP && error != Errno::NOTDIR {
            return error.into();
        }
        let names = rel.components().count();
        let mut prefix = PathBuf::new();
        for (i, component) in rel.components().enumerate() {
            prefix.push(component);
            let stat = rustix::fs::statat(&self.root, &prefix, AtFlags::SYMLINK_NOFOLLOW);
            let Ok(stat) = stat else { break };
            if rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::Symlink {
                let link = path.ancestors().nth(names - 1 - i).unwrap_or(path);
                return io::Error::other(LinkAt(link.to_owned()));
            }
        }
        error.into()
    }

    /// The handle of `rel`'s parent directory and `rel`'s last name (`path` as the caller
    /// names `rel`).
    fn parent<'a>(&self, path: &Path, rel: &'a Path) -> io::Result<(OwnedFd, &'a std::ffi::OsStr)> {
        // The root itself, `.` or `..` has no name in a parent under the root.
        let Some(Component::Normal(name)) = rel.components().next_back() else {
            return Err(io::Error::from_raw_os_error(Errno::XDEV.raw_os_error()));
        };
        let parent = rel.parent().unwrap_or(Path::new(""));
        let parent_path = path.parent().unwrap_or(path);
        Ok((
            self.open(parent_path, parent, dir_flags(), Mode::empty())?,
            name,
        ))
    }
}

/// What the error of an operation carries when a path of the store is a symbolic link:
/// the link, as the caller names it; [`crate::Error::io`] reports it as `UNSAFE_PATH`.
#[derive(Debug, Clone)]
pub struct LinkAt(pub PathBuf);

impl std::fmt::Display for LinkAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a symbolic link inside the store: {}", self.0.display())
    }
}

impl std::error::Error for LinkAt {}

/// Opens the directory `name` of `from` without following a link: a link is `ELOOP`
/// (`O_DIRECTORY | O_NOFOLLOW` alone reports it as `ENOTDIR`).
fn open_dir_at(from: BorrowedFd<'_>, name: &std::ffi::OsStr) -> Result<OwnedFd, Errno> {
    match rustix::fs::openat(from, name, dir_flags(), Mode::empty()) {
        Err(Errno::NOTDIR) => {
            let stat = rustix::fs::statat(from, name, AtFlags::SYMLINK_NOFOLLOW)?;
            if rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::Symlink {
                Err(Errno::LOOP)
            } else {
                Err(Errno::NOTDIR)
            }
        }
        other => other,
    }
}

/// The fallback of `openat2`: opens `rel` from `root` one component at a time, each with
/// `O_NOFOLLOW` (a link is `ELOOP`); `..` is refused (`EXDEV`), as `RESOLVE_BENEATH` would
/// refuse leaving the root.
fn walk(root: BorrowedFd<'_>, rel: &Path, flags: OFlags, mode: Mode) -> Result<OwnedFd, Errno> {
    let names: Vec<&std::ffi::OsStr> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(Ok(name)),
            Component::CurDir => None,
            _ => Some(Err(Errno::XDEV)),
        })
        .collect::<Result<_, Errno>>()?;
    let Some((last, dirs)) = names.split_last() else {
        return rustix::fs::openat(root, ".", flags, mode);
    };
    let mut at: Option<OwnedFd> = None;
    for name in dirs {
        let from = at.as_ref().map_or(root, AsFd::as_fd);
        at = Some(open_dir_at(from, name)?);
    }
    let from = at.as_ref().map_or(root, AsFd::as_fd);
    rustix::fs::openat(from, *last, flags, mode)
}

/// Removes the entry `name` of `parent` and, when it is a directory, everything in it,
/// through directory handles: a link is removed, never followed.
fn remove_tree(parent: BorrowedFd<'_>, name: &std::ffi::OsStr) -> io::Result<()> {
    match open_dir_at(parent, name) {
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
        for (i, component) in rel.components().enumerate() {
            let name = match component {
                Component::Normal(name) => name,
                Component::CurDir => continue,
                _ => return Err(io::Error::from_raw_os_error(Errno::XDEV.raw_os_error())),
            };
            let from = at.as_ref().map_or(self.root.as_fd(), AsFd::as_fd);
            let made = rustix::fs::mkdirat(from, name, Mode::from_raw_mode(0o700));
            match (made, open_dir_at(from, name)) {
                (Err(Errno::EXIST), Err(Errno::NOTDIR)) => {
                    return Err(Errno::EXIST.into());
                }
                (Ok(()) | Err(Errno::EXIST), Err(Errno::LOOP)) => {
                    let depth = rel.components().count() - 1 - i;
                    let link = dir.ancestors().nth(depth).unwrap_or(dir);
                    return Err(io::Error::other(LinkAt(link.to_owned())));
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
        super::list_fd(self.open(dir, rel, dir_flags(), Mode::empty())?.as_fd())
    }

    fn create_file(&self, path: &Path, len: u64) -> io::Result<File> {
        let Some(rel) = self.relative(path) else {
            return FsStorage.create_file(path, len);
        };
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL;
        let file = File::from(self.open(path, rel, flags, Mode::from_raw_mode(0o600))?);
        file.set_len(len)?;
        Ok(file)
    }

    fn open_file(&self, path: &Path, write: bool) -> io::Result<File> {
        let Some(rel) = self.relative(path) else {
            return FsStorage.open_file(path, write);
        };
        let flags = if write { OFlags::RDWR } else { OFlags::RDONLY };
        Ok(File::from(self.open(path, rel, flags, Mode::empty())?))
    }

    fn open_read(&self, path: &Path) -> io::Result<File> {
        let Some(rel) = self.relative(path) else {
            return FsStorage.open_read(path);
        };
        // As `open_regular`: non-blocking while the type is checked (a FIFO would block).
        let fd = self.open(path, rel, OFlags::RDONLY | OFlags::NONBLOCK, Mode::empty())?;
        let stat = rustix::fs::fstat(&fd)?;
        if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                super::NotRegular,
            ));
        }
        let flags = rustix::fs::fcntl_getfl(&fd)?;
        rustix::fs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK)?;
        Ok(File::from(fd))
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
        let fd = self.open(dir, rel, dir_flags(), Mode::empty())?;
        Ok(rustix::fs::fsync(fd)?)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let (Some(rel_from), Some(rel_to)) = (self.relative(from), self.relative(to)) else {
            return FsStorage.rename(from, to);
        };
        let (from_dir, from_name) = self.parent(from, rel_from)?;
        let (to_dir, to_name) = self.parent(to, rel_to)?;
        Ok(rustix::fs::renameat(
            &from_dir, from_name, &to_dir, to_name,
        )?)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let Some(rel) = self.relative(path) else {
            return FsStorage.remove_file(path);
        };
        let (dir, name) = self.parent(path, rel)?;
        Ok(rustix::fs::unlinkat(&dir, name, AtFlags::empty())?)
    }

    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        let (Some(rel_from), Some(rel_to)) = (self.relative(from), self.relative(to)) else {
            return FsStorage.hard_link(from, to);
        };
        let (from_dir, from_name) = self.parent(from, rel_from)?;
        let (to_dir, to_name) = self.parent(to, rel_to)?;
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
        let (dir, name) = self.parent(path, rel)?;
        remove_tree(dir.as_fd(), name)
    }
}

#[cfg(test)]
mod tests {
    use super::{BeneathStorage, LinkAt};
    use crate::storage::Storage;
    use std::path::Path;

    /// The link an error names, when it is a [`LinkAt`].
    fn link_of(error: &std::io::Error) -> Option<&Path> {
        let link = error.get_ref()?.downcast_ref::<LinkAt>()?;
        Some(&link.0)
    }

    /// Every operation through a link is refused naming it, `..` is refused, and nothing
    /// outside changes: through `openat2` and through the fallback walk alike.
    fn refuses_links(storage: impl Fn(&Path) -> BeneathStorage) {
        let scratch = tempfile::tempdir().unwrap();
        let (root, outside) = (scratch.path().join("root"), scratch.path().join("out"));
        std::fs::create_dir_all(root.join("a")).unwrap();
        std::fs::create_dir_all(outside.join("d")).unwrap();
        std::fs::write(outside.join("f"), b"outside").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("b")).unwrap();
        std::os::unix::fs::symlink(outside.join("f"), root.join("a/l")).unwrap();
        let fs = storage(&root);
        drop(fs.create_file(&root.join("a/f"), 3).unwrap());
        assert_eq!(
            fs.open_file(&root.join("a/f"), true)
                .unwrap()
                .metadata()
                .unwrap()
                .len(),
            3
        );
        let b = root.join("b");
        for error in [
            fs.open_file(&b.join("f"), true).unwrap_err(),
            fs.open_read(&b.join("f")).unwrap_err(),
            fs.create_file(&b.join("new"), 0).unwrap_err(),
            fs.create_dir_all(&b.join("d/e")).unwrap_err(),
            fs.list_dir(&b.join("d")).unwrap_err(),
            fs.sync_dir(&b).unwrap_err(),
            fs.remove_file(&b.join("f")).unwrap_err(),
            fs.rename(&root.join("a/f"), &b.join("g")).unwrap_err(),
        ] {
            assert_eq!(link_of(&error), Some(b.as_path()), "{error}");
        }
        let error = fs.open_file(&root.join("a/l"), false).unwrap_err();
        assert_eq!(link_of(&error), Some(root.join("a/l").as_path()), "{error}");
        let error = fs.open_read(&root.join("a/l")).unwrap_err();
        assert_eq!(link_of(&error), Some(root.join("a/l").as_path()), "{error}");
        // open_read takes regular files only, and does not block on a FIFO.
        assert_eq!(
            fs.open_read(&root.join("a/f"))
                .unwrap()
                .metadata()
                .unwrap()
                .len(),
            3
        );
        rustix::fs::mknodat(
            rustix::fs::CWD,
            root.join("a/fifo"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
            0,
        )
        .unwrap();
        let error = fs.open_read(&root.join("a/fifo")).unwrap_err();
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput, "{error}");
        let error = fs
            .open_file(&root.join("a/../../out/f"), false)
            .unwrap_err();
        assert_eq!(
            error.raw_os_error(),
            Some(rustix::io::Errno::XDEV.raw_os_error())
        );
        // A link inside a removed directory is removed, its target kept.
        fs.remove_dir_all(&root.join("a")).unwrap();
        assert!(std::fs::symlink_metadata(root.join("a")).is_err());
        fs.remove_dir_all(&b).unwrap();
        assert!(std::fs::symlink_metadata(&b).is_err());
        assert_eq!(std::fs::read(outside.join("f")).unwrap(), b"outside");
        assert!(outside.join("d").is_dir());
        assert!(!outside.join("new").exists() && !outside.join("g").exists());
    }

    #[test]
    fn store_1_openat2_refuses_links() {
        refuses_links(|root| BeneathStorage::new(root, &[]).unwrap());
    }

    #[test]
    fn store_1_the_fallback_walk_refuses_links() {
        refuses_links(|root| BeneathStorage::walking(root, &[]).unwrap());
    }
}
