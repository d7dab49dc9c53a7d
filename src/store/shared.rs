//! A stored session shared by the tasks of one host, whose durable appends share syncs
//! (`log-format.md` DUR-11).

use std::sync::{Arc, Mutex, MutexGuard};

use super::StoredSession;
use crate::Result;
use crate::session::{EventKind, SurfaceIntent};

/// A [`StoredSession`] that many threads (or tasks) append to at once: cloning it shares
/// the session. Each append admits and writes its event under the session's lock, then
/// waits for durability *after* releasing it, so that in `Sync` durability the appends of
/// concurrent callers share one `fdatasync` (group commit, DUR-1) instead of taking turns
/// with a sync each. An append still returns only once its event is durable.
///
/// Another caller may see an event (in `messages()`, through [`SharedSession::with`])
/// before the append that wrote it has returned, while its sync is running; a failed sync
/// poisons the session (`POISONED` for every later call) and is reported to the appends
/// that waited for it, with [`Outcome::FateUnknown`](crate::Outcome::FateUnknown).
///
/// ```
/// use surfacelog::{NoSurface, SharedSession, Store, StoreOptions, kinds};
///
/// # let dir = tempfile::tempdir()?;
/// let store = Store::open_or_create(dir.path(), StoreOptions::new())?;
/// let shared = SharedSession::new(store.create("s", None, None)?);
/// let threads: Vec<_> = (0..4)
///     .map(|i| {
///         let shared = shared.clone();
///         std::thread::spawn(move || {
///             shared.append::<kinds::AssistantChunk>(
///                 &format!(r#"{{"turn":1,"step":1,"chunk":{{"type":"text-delta","index":{i},"text":"x"}}}}"#),
///                 NoSurface,
///             )
///         })
///     })
///     .collect();
/// for t in threads {
///     t.join().unwrap()?; // durable when it returns
/// }
/// assert_eq!(shared.with(|s| s.seq_next()), 4);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct SharedSession {
    inner: Arc<Mutex<StoredSession>>,
}

/// A session whose appends defer their `Sync` wait (DUR-11) while this lives: dropped,
/// also by a panic's unwinding, it restores the normal wait, so the session a poisoned
/// lock hands on never acknowledges an append before it is durable.
struct Deferred<'a>(MutexGuard<'a, StoredSession>);

impl<'a> Deferred<'a> {
    fn new(mut session: MutexGuard<'a, StoredSession>) -> Self {
        session.log_mut().set_defer_sync(true);
        Self(session)
    }
}

impl Drop for Deferred<'_> {
    fn drop(&mut self) {
        self.0.log_mut().set_defer_sync(false);
    }
}

impl StoredSession {
    /// Internals (for `surfacelog append`): writes the appended events the writer still
    /// buffers (`Batch`, `Manual`, DUR-2, DUR-3) to the OS, without a sync: readable by
    /// other processes, and kept if this process is killed. Unstable.
    ///
    /// # Errors
    /// `POISONED`, or `IO` for a failed write (outcome `FateUnknown`, DUR-10).
    #[doc(hidden)]
    pub fn write_out(&mut self) -> Result<()> {
        self.log().write_out().map_err(|e| e.in_session(self.id()))
    }
}

impl SharedSession {
    /// Shares `session`.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// let shared = surfacelog::SharedSession::new(store.create("s", None, None)?);
    /// assert_eq!(shared.with(|s| s.id().to_owned()), "s");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(session: StoredSession) -> Self {
        Self {
            inner: Arc::new(Mutex::new(session)),
        }
    }

    /// The session under its lock. A panic while the lock was held leaves no half-made
    /// change behind (every append admits completely, then commits; a write that unwinds
    /// poisons the writer, DUR-5), so the session is used as it is.
    fn lock(&self) -> MutexGuard<'_, StoredSession> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// [`Session::append`](crate::Session::append) from any thread; returns once the event
    /// is durable in `Sync` durability, its sync shared with concurrent appends.
    ///
    /// ```
    /// use surfacelog::{NoSurface, SharedSession, kinds};
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// let shared = SharedSession::new(store.create("s", None, None)?);
    /// let seq = shared.append::<kinds::TurnStart>(r#"{"turn":1}"#, NoSurface)?;
    /// assert_eq!(seq, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`Session::append`](crate::Session::append).
    pub fn append<K: EventKind>(&self, data: &str, intent: K::Intent) -> Result<u64> {
        self.append_dynamic(K::TYPE, data, intent.into())
    }

    /// [`Session::append_dynamic`](crate::Session::append_dynamic) from any thread, as
    /// [`SharedSession::append`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// let shared = surfacelog::SharedSession::new(store.create("s", None, None)?);
    /// assert_eq!(shared.append_dynamic("host/note", "{}", None)?, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`Session::append_dynamic`](crate::Session::append_dynamic).
    pub fn append_dynamic(
        &self,
        event_type: &str,
        data: &str,
        intent: Option<SurfaceIntent>,
    ) -> Result<u64> {
        let (seq, wait) = {
            let mut session = Deferred::new(self.lock());
            let appended = session.0.append_dynamic(event_type, data, intent);
            (appended?, session.0.log().durable_wait())
        };
        // DUR-11: outside the lock, so that the appends made meanwhile share this sync.
        wait.wait(seq + 1)?;
        Ok(seq)
    }

    /// Runs `f` on the session under its lock: reads (`messages()`, `surface()`), and
    /// anything else a [`StoredSession`] does.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// let shared = surfacelog::SharedSession::new(store.create("s", None, None)?);
    /// let messages = shared.with(|s| s.messages().map(|m| m.len()))?;
    /// assert_eq!(messages, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with<R>(&self, f: impl FnOnce(&mut StoredSession) -> R) -> R {
        f(&mut self.lock())
    }

    /// The session back, when this is its last handle; else `self`.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let store = surfacelog::Store::open_or_create(dir.path(), surfacelog::StoreOptions::new())?;
    /// let shared = surfacelog::SharedSession::new(store.create("s", None, None)?);
    /// let session = shared.into_inner().expect("the only handle");
    /// session.close()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// `self`, when other handles exist.
    pub fn into_inner(self) -> std::result::Result<StoredSession, Self> {
        match Arc::try_unwrap(self.inner) {
            Ok(mutex) => Ok(mutex
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner)),
            Err(inner) => Err(Self { inner }),
        }
    }
}
