//! **Unstable: no compatibility promise.** The engine's modules, public only so that the
//! crate's own CLI, benches, fuzz targets and tests can reach inside it. Anything here may
//! change or go away in any release; hosts use the items at the crate root.

#[cfg(feature = "dsh")]
#[path = "adapters/mod.rs"]
pub mod adapters;
#[path = "clock.rs"]
pub mod clock;
#[path = "error.rs"]
pub mod error;
#[path = "event/mod.rs"]
pub mod event;
#[path = "json/mod.rs"]
pub mod json;
#[path = "limits.rs"]
pub mod limits;
#[path = "log/mod.rs"]
pub mod log;
#[path = "record/mod.rs"]
pub mod record;
#[path = "session/mod.rs"]
pub mod session;
#[path = "storage/mod.rs"]
pub mod storage;
#[path = "store/mod.rs"]
pub mod store;
#[path = "surface/mod.rs"]
pub mod surface;
