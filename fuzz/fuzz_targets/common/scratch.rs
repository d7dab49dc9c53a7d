//! A scratch directory per fuzzing process, on tmpfs when there is one (`/dev/shm`), else
//! in the temporary directory. libFuzzer ends a process without running destructors, so
//! each process first removes the directories of processes of the same target that are
//! gone: at most one is left behind per target.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// This process's directory for the target `name`, created empty on first use.
pub fn base(name: &str) -> &'static Path {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let root = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let prefix = format!("surfacelog-fuzz-{name}-");
        for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            let file_name = entry.file_name();
            let pid = file_name.to_str().and_then(|n| n.strip_prefix(&prefix));
            if pid.is_some_and(|pid| !Path::new("/proc").join(pid).exists()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let dir = root.join(format!("{prefix}{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
}
