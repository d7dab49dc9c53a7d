//! A simulated disk for deterministic power-loss tests (tests only, but public so
//! integration tests and fuzzers can use it).
//!
//! The real filesystem under a scratch `root` plays the **page cache**: every operation is
//! done on it, so the engine's reads and maps see exactly what it wrote. Beside it,
//! [`SimStorage`] keeps the **durable image**: for each file (by inode, so renames and hard
//! links keep their identity) its bytes as of its last successful `sync_data`, and for each
//! directory its entries as of its last successful `sync_dir`. Everything else is pending:
//! the writes and length changes since a file's last sync, and the creates, renames,
//! links and removals since a directory's last sync.
//!
//! [`SimStorage::crash`] rewrites the tree under `root` to one state a power loss could
//! leave: the durable image, plus each pending directory operation applied or not (a
//! rename as a whole, in either of its directories; in any combination, so they are
//! reordered), plus each pending write applied per 512-byte sector or not (so writes are
//! dropped, torn at sector granularity and reordered), each pending length change
//! applied or not. A failed `sync_data` leaves the file's pending writes pending: their
//! durability is unknown.
//!
//! Every call is an **I/O point**, counted from 1. [`SimStorage::crash_at`] makes the
//! k-th call and every later one fail with `EIO` without touching the disk (the power is
//! gone); a seeded generator injects `EIO`, `ENOSPC` and short writes into writes, syncs,
//! renames, opens and listings at the rate [`SimStorage::set_fault_rate`] sets. The
//! choices are a function of the seed and the sequence of calls only, so a single-threaded
//! workload replays exactly.
//!
//! Files and directories outside `root` pass through untouched and unmodelled. Changes made
//! under `root` by code that bypasses the trait are picked up, as durable, when their
//! directory is synced.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::{FsStorage, Storage};

/// The sector size of tearing: a pending write reaches the disk sector by sector.
pub const SECTOR: u64 = 512;

/// The name of the thread on which a `Staged` log syncs a sealed segment in the
/// background (`log-format.md` DUR-6). Its `sync_data` calls are not I/O points and draw
/// nothing from the generator, so that a run does not depend on when that thread runs: the
/// sync is only recorded, returns `Ok`, and lands (the writes pending when it was asked
/// for become durable) at the next `sync_dir` of a directory holding the file, which the
/// writer calls only after joining the thread (at its flush). Until then a crash may drop,
/// tear or reorder those writes as any others: a real background sync completes at some
/// moment between the two, and this is the latest one, the one keeping the most pending.
pub const SEAL_THREAD: &str = "surfacelog-seal";

fn on_seal_thread() -> bool {
    std::thread::current().name() == Some(SEAL_THREAD)
}

/// A write or a length change not yet made durable by a sync of its file.
#[derive(Debug, Clone)]
enum Pending {
    /// `extends`: the write ended past the file's length when it was made, so it also
    /// changed the length (to its end); a write inside the length changes no length.
    Write {
        offset: u64,
        bytes: Vec<u8>,
        extends: bool,
    },
    SetLen(u64),
}

/// A file's durable bytes (without trailing zeros) and length, and what is pending.
#[derive(Debug, Clone, Default)]
struct FileNode {
    durable: Vec<u8>,
    len: u64,
    pending: Vec<Pending>,
}

/// A directory operation not yet made durable: in directory `dir`, `name` now names
/// `ino` (or nothing). Operations with the same `group` (a rename) land together.
#[derive(Debug, Clone)]
struct MetaOp {
    group: u64,
    dir: u64,
    name: String,
    ino: Option<u64>,
}

/// The model: durable image and pending operations.
#[derive(Debug, Default)]
struct State {
    rng: u64,
    /// The generator of the faults of [`Storage::open_read`], apart from `rng`: the
    /// engine's small-file reads were routed through the disk after seeds had been
    /// recorded as regression tests, whose other faults stay where they were.
    read_rng: u64,
    points: u64,
    crash_at: Option<u64>,
    fault_rate: u32,
    faults: u64,
    sync_faults: u64,
    root_ino: u64,
    /// The model's node of each real inode: a fresh node when an inode number is reused.
    ids: HashMap<u64, u64>,
    next_id: u64,
    files: HashMap<u64, FileNode>,
    dirs: HashMap<u64, BTreeMap<String, u64>>,
    meta: Vec<MetaOp>,
    groups: u64,
    /// Syncs asked for by a writer's seal thread (DUR-6): the file's node and how many of
    /// its pending operations the sync covers. They land at the next `sync_dir` of a
    /// directory holding the file (see [`SEAL_THREAD`]).
    requested: Vec<(u64, usize)>,
}

impl State {
    /// splitmix64.
    fn next(&mut self) -> u64 {
        splitmix(&mut self.rng)
    }

    /// Whether the seeded generator injects a fault into this `open_read`.
    fn read_fault(&mut self) -> bool {
        if self.fault_rate == 0 {
            return false;
        }
        let hit = splitmix(&mut self.read_rng) % 1_000_000 < u64::from(self.fault_rate);
        if hit {
            self.faults += 1;
            if std::env::var_os("SURFACELOG_SIM_TRACE").is_some() {
                eprintln!("sim: point {} fault in open_read", self.points);
            }
        }
        hit
    }

    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }

    /// Counts an I/O point: `Err(EIO)` once the power is gone.
    fn point(&mut self) -> io::Result<()> {
        self.points += 1;
        if self.crash_at.is_some_and(|k| self.points >= k) {
            return Err(errno(rustix::io::Errno::IO));
        }
        Ok(())
    }

    /// Whether the seeded generator injects a fault into this call.
    fn fault(&mut self, op: &str) -> bool {
        if self.fault_rate == 0 {
            return false;
        }
        let hit = self.below(1_000_000) < u64::from(self.fault_rate);
        if hit {
            self.faults += 1;
            if std::env::var_os("SURFACELOG_SIM_TRACE").is_some() {
                eprintln!("sim: point {} fault in {op}", self.points);
            }
        }
        hit
    }

    /// A new node for the real inode `ino` (just created, or its number reused).
    fn fresh(&mut self, ino: u64) -> u64 {
        self.next_id += 1;
        self.ids.insert(ino, self.next_id);
        self.next_id
    }

    /// The node of the real inode `ino`, if known.
    fn id(&self, ino: u64) -> Option<u64> {
        self.ids.get(&ino).copied()
    }

    /// Records the durable state of everything under `path` (inode `ino`) as it is now,
    /// unless already known; returns its node.
    fn adopt(&mut self, path: &Path, ino: u64, is_dir: bool) -> u64 {
        if let Some(id) = self.id(ino) {
            let known = if is_dir {
                self.dirs.contains_key(&id)
            } else {
                self.files.contains_key(&id)
            };
            if known {
                return id;
            }
        }
        let id = self.fresh(ino);
        if is_dir {
            let mut entries = BTreeMap::new();
            if let Ok(read) = std::fs::read_dir(path) {
                for entry in read.flatten() {
                    let Ok(meta) = entry.metadata() else { continue };
                    let name = entry.file_name().to_string_lossy().into_owned();
                    let child = self.adopt(&entry.path(), meta.ino(), meta.is_dir());
                    entries.insert(name, child);
                }
            }
            self.dirs.insert(id, entries);
        } else {
            let bytes = std::fs::read(path).unwrap_or_default();
            self.files.insert(id, durable_node(bytes));
        }
        id
    }

    fn push_meta(&mut self, ops: Vec<(u64, String, Option<u64>)>) {
        self.groups += 1;
        let group = self.groups;
        if std::env::var_os("SURFACELOG_SIM_TRACE").is_some() {
            eprintln!("sim: point {} group {group}: {ops:?}", self.points);
        }
        for (dir, name, ino) in ops {
            self.meta.push(MetaOp {
                group,
                dir,
                name,
                ino,
            });
        }
    }
}

/// splitmix64.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn durable_node(mut bytes: Vec<u8>) -> FileNode {
    let len = bytes.len() as u64;
    let kept = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    bytes.truncate(kept);
    FileNode {
        durable: bytes,
        len,
        pending: Vec::new(),
    }
}

fn errno(errno: rustix::io::Errno) -> io::Error {
    io::Error::from_raw_os_error(errno.raw_os_error())
}

/// A simulated disk over the real directory `root` (see the module's documentation).
#[derive(Debug)]
pub struct SimStorage {
    root: PathBuf,
    state: Mutex<State>,
}

impl SimStorage {
    /// A simulated disk over `root` (which must exist), whose present content is durable;
    /// `seed` steers every random choice.
    ///
    /// # Errors
    /// The OS error reading `root`.
    pub fn new(root: &Path, seed: u64) -> io::Result<Self> {
        let root = root.canonicalize()?;
        let sim = Self {
            root,
            state: Mutex::new(State {
                rng: seed,
                read_rng: seed ^ 0x0BE4_D5EE_D000_0001,
                ..State::default()
            }),
        };
        sim.rescan()?;
        Ok(sim)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Forgets the model and takes the present tree as durable.
    fn rescan(&self) -> io::Result<()> {
        let meta = std::fs::symlink_metadata(&self.root)?;
        let mut state = self.state();
        state.files.clear();
        state.dirs.clear();
        state.meta.clear();
        state.ids.clear();
        state.requested.clear();
        let root = self.root.clone();
        state.root_ino = state.adopt(&root, meta.ino(), true);
        Ok(())
    }

    /// The number of I/O points so far.
    pub fn points(&self) -> u64 {
        self.state().points
    }

    /// The number of faults injected so far.
    pub fn faults(&self) -> u64 {
        self.state().faults
    }

    /// The number of `sync_data` and `sync_dir` calls that failed (injected faults, not
    /// the ones after the power went).
    pub fn sync_faults(&self) -> u64 {
        self.state().sync_faults
    }

    /// Whether the power is gone.
    pub fn crashed(&self) -> bool {
        let state = self.state();
        state.crash_at.is_some_and(|k| state.points >= k)
    }

    /// The power goes at the `k`-th I/O point (counted from 1 since this disk was made):
    /// that call and every later one fail with `EIO` and change nothing.
    pub fn crash_at(&self, k: u64) {
        self.state().crash_at = Some(k);
    }

    /// Injects a fault into about `per_million` of the calls that can fail.
    pub fn set_fault_rate(&self, per_million: u32) {
        self.state().fault_rate = per_million;
    }

    /// Inside `root`: the path relative to it, or `None` for a path outside.
    fn inside(&self, path: &Path) -> bool {
        path.starts_with(&self.root)
    }

    /// The inode of the directory holding `path` and `path`'s last component.
    fn parent_of(&self, path: &Path) -> Option<(u64, String)> {
        let parent = path.parent()?;
        let name = path.file_name()?.to_string_lossy().into_owned();
        let meta = std::fs::symlink_metadata(parent).ok()?;
        let id = self.state().adopt(parent, meta.ino(), true);
        Some((id, name))
    }

    /// The power loss: rewrites the tree under `root` to a state a crash could leave
    /// (see the module's documentation), then takes it as the new durable image and
    /// restores the power. Every handle on the old tree must have been dropped.
    ///
    /// # Errors
    /// The OS error rewriting the tree.
    pub fn crash(&self) -> io::Result<()> {
        let (tree, contents) = {
            let mut state = self.state();
            let mut dirs = state.dirs.clone();
            let meta = std::mem::take(&mut state.meta);
            let mut landed: HashMap<u64, bool> = HashMap::new();
            for op in &meta {
                let lands = if let Some(&lands) = landed.get(&op.group) {
                    lands
                } else {
                    let lands = state.coin();
                    landed.insert(op.group, lands);
                    lands
                };
                if lands {
                    let entries = dirs.entry(op.dir).or_default();
                    match op.ino {
                        Some(ino) => entries.insert(op.name.clone(), ino),
                        None => entries.remove(&op.name),
                    };
                }
            }
            // The tree reachable from the root, directories once each.
            let mut tree: Vec<(PathBuf, u64, bool)> = Vec::new();
            let mut seen = HashSet::new();
            let mut stack = vec![(self.root.clone(), state.root_ino)];
            while let Some((path, ino)) = stack.pop() {
                let Some(entries) = dirs.get(&ino) else {
                    continue;
                };
                for (name, &child) in entries {
                    let child_path = path.join(name);
                    if dirs.contains_key(&child) {
                        if seen.insert(child) {
                            tree.push((child_path.clone(), child, true));
                            stack.push((child_path, child));
                        }
                    } else if state.files.contains_key(&child) {
                        tree.push((child_path, child, false));
                    }
                }
            }
            if std::env::var_os("SURFACELOG_SIM_TRACE").is_some() {
                eprintln!("sim: crash dirs {dirs:?}");
                for (path, id, is_dir) in &tree {
                    eprintln!("sim: crash tree {} {id} {is_dir}", path.display());
                }
            }
            let mut contents: HashMap<u64, (Vec<u8>, u64)> = HashMap::new();
            for &(_, ino, is_dir) in &tree {
                if is_dir || contents.contains_key(&ino) {
                    continue;
                }
                let node = state.files.get(&ino).cloned().unwrap_or_default();
                contents.insert(ino, land(&mut state, &node));
            }
            (tree, contents)
        };
        for entry in std::fs::read_dir(&self.root)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                std::fs::remove_dir_all(entry.path())?;
            } else {
                std::fs::remove_file(entry.path())?;
            }
        }
        let mut made: HashMap<u64, PathBuf> = HashMap::new();
        // Parents come before children: sort by depth.
        let mut tree = tree;
        tree.sort_by_key(|(path, _, _)| path.components().count());
        for (path, ino, is_dir) in tree {
            if is_dir {
                std::fs::create_dir(&path)?;
            } else if let Some(first) = made.get(&ino) {
                std::fs::hard_link(first, &path)?;
            } else {
                let (bytes, len) = &contents[&ino];
                let file = File::create(&path)?;
                file.write_all_at(bytes, 0)?;
                file.set_len(*len)?;
                made.insert(ino, path);
            }
        }
        {
            let mut state = self.state();
            state.crash_at = None;
        }
        self.rescan()
    }
}

/// One possible on-disk content of `node` after a crash: its durable bytes, then each
/// pending operation in order, a length change whole or not at all, a write sector by
/// sector or not at all.
fn land(state: &mut State, node: &FileNode) -> (Vec<u8>, u64) {
    let mut bytes = node.durable.clone();
    let mut len = node.len;
    for pending in &node.pending {
        match pending {
            Pending::SetLen(new) => {
                if state.coin() {
                    len = *new;
                    bytes.truncate(usize::try_from(len).unwrap_or(usize::MAX));
                }
            }
            Pending::Write {
                offset,
                bytes: written,
                extends,
            } => {
                // The length an extending write sets is metadata: it lands or not, apart
                // from the data (zeros show where the data did not land).
                let end_len = (*extends && state.coin()).then(|| offset + written.len() as u64);
                let all = state.below(4) == 0;
                let none = !all && state.below(3) == 0;
                let end = offset + written.len() as u64;
                let mut at = *offset;
                while at < end {
                    let sector_end = ((at / SECTOR) + 1) * SECTOR;
                    let piece_end = sector_end.min(end);
                    if all || (!none && state.coin()) {
                        let from = usize::try_from(at - offset).unwrap_or(0);
                        let to = usize::try_from(piece_end - offset).unwrap_or(0);
                        let start = usize::try_from(at).unwrap_or(usize::MAX);
                        let stop = usize::try_from(piece_end).unwrap_or(usize::MAX);
                        if bytes.len() < stop {
                            bytes.resize(stop, 0);
                        }
                        bytes[start..stop].copy_from_slice(&written[from..to]);
                    }
                    at = piece_end;
                }
                if let Some(end_len) = end_len {
                    len = len.max(end_len);
                }
                // Bytes past the length are not in the file (a write inside a length
                // that did not land).
                bytes.truncate(usize::try_from(len).unwrap_or(usize::MAX));
            }
        }
    }
    (bytes, len)
}

/// The content of `node` with every pending operation landed whole.
fn land_all(node: &FileNode) -> (Vec<u8>, u64) {
    let mut bytes = node.durable.clone();
    let mut len = node.len;
    for pending in &node.pending {
        match pending {
            Pending::SetLen(new) => {
                len = *new;
                bytes.truncate(usize::try_from(len).unwrap_or(usize::MAX));
            }
            Pending::Write {
                offset,
                bytes: written,
                ..
            } => {
                let start = usize::try_from(*offset).unwrap_or(usize::MAX);
                let stop = start.saturating_add(written.len());
                if bytes.len() < stop {
                    bytes.resize(stop, 0);
                }
                bytes[start..stop].copy_from_slice(written);
                len = len.max(stop as u64);
            }
        }
    }
    (bytes, len)
}

fn ino_of(file: &File) -> io::Result<u64> {
    Ok(file.metadata()?.ino())
}

impl Storage for SimStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.state().point()?;
        if !self.inside(dir) {
            return FsStorage.create_dir_all(dir);
        }
        let mut missing = Vec::new();
        let mut at = dir;
        while std::fs::symlink_metadata(at).is_err() {
            missing.push(at.to_owned());
            match at.parent() {
                Some(parent) if self.inside(parent) => at = parent,
                _ => break,
            }
        }
        FsStorage.create_dir_all(dir)?;
        for path in missing.iter().rev() {
            let Some((parent, name)) = self.parent_of(path) else {
                continue;
            };
            let ino = std::fs::symlink_metadata(path)?.ino();
            let mut state = self.state();
            let id = state.fresh(ino);
            state.dirs.insert(id, BTreeMap::new());
            state.push_meta(vec![(parent, name, Some(id))]);
        }
        Ok(())
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        {
            let mut state = self.state();
            state.point()?;
            if state.fault("list_dir") {
                return Err(errno(rustix::io::Errno::IO));
            }
        }
        FsStorage.list_dir(dir)
    }

    fn create_file(&self, path: &Path, len: u64) -> io::Result<File> {
        {
            let mut state = self.state();
            state.point()?;
            if state.fault("create_file") {
                return Err(errno(rustix::io::Errno::NOSPC));
            }
        }
        let parent = if self.inside(path) {
            self.parent_of(path)
        } else {
            None
        };
        let file = FsStorage.create_file(path, len)?;
        {
            if let Some((parent, name)) = parent {
                let ino = ino_of(&file)?;
                let mut state = self.state();
                let mut node = FileNode::default();
                if len > 0 {
                    node.pending.push(Pending::SetLen(len));
                }
                let id = state.fresh(ino);
                state.files.insert(id, node);
                state.push_meta(vec![(parent, name, Some(id))]);
            }
        }
        Ok(file)
    }

    fn open_file(&self, path: &Path, write: bool) -> io::Result<File> {
        {
            let mut state = self.state();
            state.point()?;
            if state.fault("open_file") {
                return Err(errno(rustix::io::Errno::IO));
            }
        }
        let file = FsStorage.open_file(path, write)?;
        if self.inside(path) {
            let ino = ino_of(&file)?;
            self.state().adopt(path, ino, false);
        }
        Ok(file)
    }

    fn open_read(&self, path: &Path) -> io::Result<File> {
        {
            let mut state = self.state();
            state.point()?;
            if state.read_fault() {
                return Err(errno(rustix::io::Errno::IO));
            }
        }
        let file = super::open_regular(path)?;
        if self.inside(path) {
            let ino = ino_of(&file)?;
            self.state().adopt(path, ino, false);
        }
        Ok(file)
    }

    fn write_at(&self, file: &File, offset: u64, bytes: &[u8]) -> io::Result<()> {
        let ino = ino_of(file)?;
        let (cut, error) = {
            let mut state = self.state();
            state.point()?;
            if state.fault("write_at") {
                let cut = usize::try_from(state.below(bytes.len() as u64 + 1)).unwrap_or(0);
                let error = match state.below(3) {
                    0 => rustix::io::Errno::IO,
                    _ => rustix::io::Errno::NOSPC,
                };
                (cut, Some(error))
            } else {
                (bytes.len(), None)
            }
        };
        let written = &bytes[..cut];
        let before = file.metadata()?.len();
        let extends = offset + written.len() as u64 > before;
        FsStorage.write_at(file, offset, written)?;
        let mut state = self.state();
        let id = state.id(ino).unwrap_or(0);
        if let Some(node) = state.files.get_mut(&id) {
            node.pending.push(Pending::Write {
                offset,
                bytes: written.to_vec(),
                extends,
            });
        }
        error.map_or(Ok(()), |error| Err(errno(error)))
    }

    fn set_len(&self, file: &File, len: u64) -> io::Result<()> {
        let ino = ino_of(file)?;
        {
            let mut state = self.state();
            state.point()?;
            if state.fault("set_len") {
                return Err(errno(rustix::io::Errno::NOSPC));
            }
        }
        FsStorage.set_len(file, len)?;
        let mut state = self.state();
        let id = state.id(ino).unwrap_or(0);
        if let Some(node) = state.files.get_mut(&id) {
            node.pending.push(Pending::SetLen(len));
        }
        Ok(())
    }

    fn sync_data(&self, file: &File) -> io::Result<()> {
        let ino = ino_of(file)?;
        if on_seal_thread() {
            let mut state = self.state();
            if let Some(id) = state.id(ino)
                && let Some(pending) = state.files.get(&id).map(|node| node.pending.len())
            {
                if std::env::var_os("SURFACELOG_SIM_TRACE").is_some() {
                    eprintln!("sim: seal thread sync of node {id} ({pending} pending)");
                }
                state.requested.push((id, pending));
            }
            return Ok(());
        }
        {
            let mut state = self.state();
            state.point()?;
            if state.fault("sync_data") {
                // The pending writes stay pending: their durability is unknown.
                state.sync_faults += 1;
                return Err(errno(rustix::io::Errno::IO));
            }
        }
        // Everything pending lands: the new durable image is built from the old one and
        // the pending operations, not read back (a segment grown ahead of its records
        // would be read whole at every sync).
        let mut state = self.state();
        let id = state.id(ino).unwrap_or(0);
        if let Some(node) = state.files.get(&id) {
            let (bytes, len) = land_all(node);
            state.files.insert(
                id,
                FileNode {
                    durable: bytes,
                    len,
                    pending: Vec::new(),
                },
            );
        }
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        {
            let mut state = self.state();
            state.point()?;
            if state.fault("sync_dir") {
                state.sync_faults += 1;
                return Err(errno(rustix::io::Errno::IO));
            }
        }
        // No real sync: durability is what this model says (and the runs stay fast).
        if !std::fs::symlink_metadata(dir)?.is_dir() {
            return Err(errno(rustix::io::Errno::NOTDIR));
        }
        if !self.inside(dir) {
            return Ok(());
        }
        let real = std::fs::symlink_metadata(dir)?.ino();
        let mut state = self.state();
        let ino = state.adopt(dir, real, true);
        if std::env::var_os("SURFACELOG_SIM_TRACE").is_some() {
            eprintln!(
                "sim: point {} sync_dir {} ({ino})",
                state.points,
                dir.display()
            );
        }
        // Every pending operation in this directory, with the other half of a rename,
        // is now durable, in order, and so is every earlier one on a name they change
        // (the directory cannot show a later state of a name without the earlier ones).
        let mut groups: HashSet<u64> = HashSet::new();
        let mut names: HashSet<(u64, String)> = HashSet::new();
        let mut at = state.meta.len();
        while at > 0 {
            let group = state.meta[at - 1].group;
            let mut start = at - 1;
            while start > 0 && state.meta[start - 1].group == group {
                start -= 1;
            }
            let ops = &state.meta[start..at];
            if ops
                .iter()
                .any(|op| op.dir == ino || names.contains(&(op.dir, op.name.clone())))
            {
                groups.insert(group);
                names.extend(ops.iter().map(|op| (op.dir, op.name.clone())));
            }
            at = start;
        }
        let (landed, kept): (Vec<MetaOp>, Vec<MetaOp>) = std::mem::take(&mut state.meta)
            .into_iter()
            .partition(|op| groups.contains(&op.group));
        state.meta = kept;
        for op in landed {
            let entries = state.dirs.entry(op.dir).or_default();
            match op.ino {
                Some(child) => entries.insert(op.name, child),
                None => entries.remove(&op.name),
            };
        }
        // What code bypassing the trait did here is taken as durable too.
        let mut entries = BTreeMap::new();
        for entry in std::fs::read_dir(dir)?.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            let name = entry.file_name().to_string_lossy().into_owned();
            let child = state.adopt(&entry.path(), meta.ino(), meta.is_dir());
            entries.insert(name, child);
        }
        // The seal threads' syncs of files in this directory land (see [`SEAL_THREAD`]).
        let requested = std::mem::take(&mut state.requested);
        for (id, count) in requested {
            let here = entries.values().any(|&c| c == id);
            if !here {
                state.requested.push((id, count));
                continue;
            }
            if std::env::var_os("SURFACELOG_SIM_TRACE").is_some() {
                eprintln!("sim: point {} seal sync of node {id} lands", state.points);
            }
            if let Some(node) = state.files.get(&id) {
                let count = count.min(node.pending.len());
                let head = FileNode {
                    durable: node.durable.clone(),
                    len: node.len,
                    pending: node.pending[..count].to_vec(),
                };
                let rest = node.pending[count..].to_vec();
                let (durable, len) = land_all(&head);
                state.files.insert(
                    id,
                    FileNode {
                        durable,
                        len,
                        pending: rest,
                    },
                );
            }
        }
        state.dirs.insert(ino, entries);
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        {
            let mut state = self.state();
            state.point()?;
            if state.fault("rename") {
                return Err(errno(rustix::io::Errno::IO));
            }
        }
        let moved = std::fs::symlink_metadata(from).ok();
        FsStorage.rename(from, to)?;
        if let (Some(meta), true) = (moved, self.inside(from) && self.inside(to))
            && let (Some((from_dir, from_name)), Some((to_dir, to_name))) =
                (self.parent_of(from), self.parent_of(to))
        {
            let mut state = self.state();
            let id = state.adopt(to, meta.ino(), meta.is_dir());
            state.push_meta(vec![
                (from_dir, from_name, None),
                (to_dir, to_name, Some(id)),
            ]);
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.state().point()?;
        FsStorage.remove_file(path)?;
        if let Some((dir, name)) = self.inside(path).then(|| self.parent_of(path)).flatten() {
            self.state().push_meta(vec![(dir, name, None)]);
        }
        Ok(())
    }

    fn hard_link(&self, from: &Path, to: &Path) -> io::Result<()> {
        {
            let mut state = self.state();
            state.point()?;
            if state.fault("hard_link") {
                return Err(errno(rustix::io::Errno::NOSPC));
            }
        }
        FsStorage.hard_link(from, to)?;
        if self.inside(to) {
            let meta = std::fs::symlink_metadata(to)?;
            if let Some((dir, name)) = self.parent_of(to) {
                let mut state = self.state();
                let id = state.adopt(to, meta.ino(), false);
                state.push_meta(vec![(dir, name, Some(id))]);
            }
        }
        Ok(())
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        self.state().point()?;
        FsStorage.remove_dir_all(path)?;
        if let Some((dir, name)) = self.inside(path).then(|| self.parent_of(path)).flatten() {
            self.state().push_meta(vec![(dir, name, None)]);
        }
        Ok(())
    }
}
