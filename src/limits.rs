//! Every bound of the engine in one place.

/// Default `max_event_bytes` (contract §2.1): 64 MiB of JSON text per event.
pub const MAX_EVENT_BYTES_DEFAULT: usize = 64 << 20;

/// JSON nesting depth the validator is tested to accept without stack growth (contract
/// §2.1 asks for at least 100,000). Parsing is iterative, so the real bound is memory.
pub const JSON_NESTING_TESTED: usize = 200_000;
