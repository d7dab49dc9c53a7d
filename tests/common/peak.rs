//! The process's peak resident memory (Linux `VmHWM`), for the tests that bound a reader's
//! memory: each alone in its test binary, so that no other test's allocations count.

/// The process's peak resident set, in bytes.
pub fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// Resets the peak to the current resident size (Linux 4.0 on) and returns it; where that
/// is refused, the growth is measured from the peak so far, which only makes a check
/// weaker.
pub fn reset_peak() -> u64 {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    peak_rss()
}
