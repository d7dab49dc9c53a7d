//! Shared by the integration tests: scratch directories that clean up after themselves.

use std::path::Path;

/// A fresh private directory (mode 0700) under the system's temporary directory, removed
/// with everything in it when dropped, so a test run leaves nothing behind (even when
/// the test fails). It reads as a `Path`.
#[derive(Debug)]
pub struct Scratch(tempfile::TempDir);

impl std::ops::Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        self.0.path()
    }
}

/// A [`Scratch`] directory named after the test file and `name`, for readable paths in
/// failure messages.
pub fn scratch(file: &str, name: &str) -> Scratch {
    let dir = tempfile::Builder::new()
        .prefix(&format!("surfacelog-{file}-{name}-"))
        .tempdir()
        .expect("a scratch directory");
    Scratch(dir)
}
