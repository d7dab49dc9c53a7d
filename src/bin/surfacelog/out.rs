//! Output: JSON through serde, colours on a terminal only, elision of large data, and the
//! `error[CODE]: message` line.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write};

use serde::Serialize;
use serde_json::value::RawValue;

/// `println!` that returns the write's error (`IO`) instead of panicking on a closed pipe
/// (`surfacelog verify | head -1`).
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::out::line(&mut std::io::stdout().lock(), &format!($($arg)*))
    };
}
pub(crate) use say;

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorWhen {
    /// On a terminal, unless `NO_COLOR` is set to a non-empty value.
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

impl ColorWhen {
    /// Whether `stream` gets colours.
    pub fn enabled(self, stream: &impl IsTerminal) -> bool {
        match self {
            ColorWhen::Always => true,
            ColorWhen::Never => false,
            ColorWhen::Auto => {
                stream.is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
            }
        }
    }
}

/// `text` in bold when `color`.
pub fn bold(text: &str, color: bool) -> String {
    if color {
        format!("\x1b[1m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

/// `text` dimmed when `color`.
pub fn dim(text: &str, color: bool) -> String {
    if color {
        format!("\x1b[2m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

/// Prints `error[CODE]: message (where)` on stderr.
pub fn print_error_at(error: &surfacelog::Error, place: &str) {
    print_error_line(error, Some(place));
}

/// Prints `error[CODE]: message` on stderr (the code in red on a terminal), then each
/// cause of it (`caused by: ...`).
pub fn print_error(error: &surfacelog::Error) {
    print_error_line(error, None);
}

/// `--color`, for the error lines on stderr: set once by `main`, `auto` until then.
static ERROR_COLOR: std::sync::OnceLock<ColorWhen> = std::sync::OnceLock::new();

/// Sets when error lines on stderr get colours (`--color`, judged against stderr).
pub fn set_error_color(when: ColorWhen) {
    let _ = ERROR_COLOR.set(when);
}

fn print_error_line(error: &surfacelog::Error, place: Option<&str>) {
    let when = ERROR_COLOR.get().copied().unwrap_or(ColorWhen::Auto);
    let color = when.enabled(&std::io::stderr());
    let head = format!("error[{}]", error.code());
    let head = if color {
        format!("\x1b[1;31m{head}\x1b[0m")
    } else {
        head
    };
    let mut line = format!("{head}: {error}");
    if let Some(place) = place {
        let _ = write!(line, " ({place})");
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let _ = write!(line, "\n  caused by: {cause}");
        source = cause.source();
    }
    eprintln!("{line}");
}

/// Prints `value` as one JSON line on stdout.
///
/// # Errors
/// `IO` when stdout cannot be written (a closed pipe).
pub fn json<T: Serialize>(value: &T) -> surfacelog::Result<()> {
    let mut stdout = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    serde_json::to_writer(&mut stdout, value)
        .map_err(std::io::Error::from)
        .and_then(|()| writeln!(stdout))
        .and_then(|()| stdout.flush())
        .map_err(|e| surfacelog::Error::io("write", "stdout", &e))
}

/// Writes `{"KEY":[ITEM,…]}` and a newline, each item `{"seq":N,"FIELD":TEXT}` (or TEXT
/// alone without a field name): the documents of `show --events` and `--messages`, which
/// hold only integers and stored JSON texts. The texts were verified when read and are
/// embedded byte for byte; nothing in them needs escaping, so they are not parsed again
/// (every other document goes through serde).
///
/// # Errors
/// The first error of `items`, or `IO` when stdout cannot be written.
pub fn stored_texts<T: AsRef<str>>(
    key: &str,
    field: Option<&str>,
    items: impl Iterator<Item = surfacelog::Result<(u64, T)>>,
) -> surfacelog::Result<()> {
    let io = |e: std::io::Error| surfacelog::Error::io("write", "stdout", &e);
    let mut stdout = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    write!(stdout, "{{\"{key}\":[").map_err(io)?;
    for (i, item) in items.enumerate() {
        let (seq, text) = item?;
        let text = text.as_ref();
        let comma = if i == 0 { "" } else { "," };
        match field {
            Some(field) => write!(stdout, "{comma}{{\"seq\":{seq},\"{field}\":{text}}}"),
            None => write!(stdout, "{comma}{text}"),
        }
        .map_err(io)?;
    }
    writeln!(stdout, "]}}")
        .and_then(|()| stdout.flush())
        .map_err(io)
}

/// Writes `line` and a newline to stdout.
///
/// # Errors
/// `IO` when stdout cannot be written.
pub fn line(stdout: &mut impl Write, line: &str) -> surfacelog::Result<()> {
    writeln!(stdout, "{line}").map_err(|e| surfacelog::Error::io("write", "stdout", &e))
}

/// Stored JSON text, embedded verbatim in a serde document (it was verified when read:
/// `serde_json` checks it once more as it embeds it, and never reformats it).
pub struct Raw<'a>(pub &'a str);

impl Serialize for Raw<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let raw: &RawValue = serde_json::from_str(self.0).map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    }
}

/// `text` cut to `max` characters with `…` when `elide` (a terminal without `--full`).
pub fn elide(text: &str, max: usize, elide: bool) -> std::borrow::Cow<'_, str> {
    if !elide || text.chars().count() <= max {
        return text.into();
    }
    let mut cut: String = text.chars().take(max).collect();
    cut.push('…');
    cut.into()
}

/// A byte count for people: `512 B`, `12.3 KiB`, `4.0 MiB`.
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    #[expect(clippy::cast_precision_loss, reason = "one decimal is shown")]
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Unix epoch milliseconds as `YYYY-MM-DDTHH:MM:SSZ` (UTC).
pub fn time(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (hour, minute, second) = (rest / 3600, rest % 3600 / 60, rest % 60);
    // Civil date from days since 1970-01-01 (the proleptic Gregorian calendar).
    let z = i64::try_from(days).unwrap_or(i64::MAX / 2) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_is_utc_civil() {
        assert_eq!(time(0), "1970-01-01T00:00:00Z");
        assert_eq!(time(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(time(1_700_000_000_000), "2023-11-14T22:13:20Z");
    }

    #[test]
    fn sizes_and_elision() {
        assert_eq!(size(512), "512 B");
        assert_eq!(size(12_595), "12.3 KiB");
        assert_eq!(elide("abcdef", 3, true), "abc…");
        assert_eq!(elide("abcdef", 3, false), "abcdef");
    }
}
