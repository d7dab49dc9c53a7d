//! Every bound of the engine in one place.

/// Default `max_event_bytes` (contract §2.1): 64 MiB of JSON text per event.
pub const MAX_EVENT_BYTES_DEFAULT: usize = 64 << 20;

/// JSON nesting depth the validator is tested to accept without stack growth (contract
/// §2.1 asks for at least 100,000). Parsing is iterative, so the real bound is memory.
pub const JSON_NESTING_TESTED: usize = 200_000;

/// The hard bound on one event's JSON text, whatever `max_event_bytes` says: record spans
/// are 32-bit (`log-format.md` §4), less room for the envelope and the record body.
pub const EVENT_BYTES_LIMIT: usize = (u32::MAX as usize) - (1 << 20);

/// The largest safe integer, 2^53 − 1 (contract §2).
pub const SAFE_INTEGER_MAX: i64 = (1 << 53) - 1;
