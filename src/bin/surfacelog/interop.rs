//! `surfacelog import` and `export`: moving sessions between the store and the DSH
//! interchange formats (`dsh-formats.md`).

use std::io::{IsTerminal, Write};
use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use surfacelog::internals::adapters::jsonl::{self, Compression};
use surfacelog::internals::event::EventSource;
use surfacelog::internals::store::Imported;
use surfacelog::{ErrorKind, Result, Store, StoreOptions};

use crate::Ctx;
use crate::out;

/// The interchange formats the command line reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[expect(
    clippy::enum_variant_names,
    reason = "the names are the command line's values: dsh-jsonl, dsh-jsonl-zstd, dsh-sqlite"
)]
pub enum Format {
    /// Raw DSH JSONL (`session.jsonl`).
    DshJsonl,
    /// DSH JSONL in Zstandard frames (`session.jsonl.zstd`).
    DshJsonlZstd,
    /// A DSH `SQLite` database, schema 17.
    DshSqlite,
}

impl Format {
    /// How a JSONL format is framed (`dsh-formats.md` §5, §6).
    fn compression(self) -> Compression {
        if self == Format::DshJsonlZstd {
            Compression::Zstd
        } else {
            Compression::None
        }
    }
}

/// A progress bar on a terminal's stderr; hidden when stderr is piped.
fn progress_bar(total: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    let style = ProgressStyle::with_template(&format!(
        "{what} {{bar:40}} {{bytes}}/{{total_bytes}} {{bytes_per_sec}} {{eta}}"
    ))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}

/// `import --format`: a format, or `auto` to detect it from the file's first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FormatArg {
    /// Zstandard's frame magic (`28 B5 2F FD`) is `dsh-jsonl-zstd`, `SQLite format 3\0`
    /// is `dsh-sqlite`, anything else `dsh-jsonl`.
    Auto,
    /// Raw DSH JSONL.
    DshJsonl,
    /// DSH JSONL in Zstandard frames.
    DshJsonlZstd,
    /// A DSH `SQLite` database, schema 17.
    DshSqlite,
}

impl FormatArg {
    /// The format of `file`: as given, or detected from its first 16 bytes.
    fn resolve(self, file: &Path) -> Result<Format> {
        use std::io::Read;
        Ok(match self {
            FormatArg::DshJsonl => Format::DshJsonl,
            FormatArg::DshJsonlZstd => Format::DshJsonlZstd,
            FormatArg::DshSqlite => Format::DshSqlite,
            FormatArg::Auto => {
                // The first bytes are read, then the file is opened again by the import:
                // a pipe would lose them.
                let meta =
                    std::fs::metadata(file).map_err(|e| surfacelog::Error::io("open", file, &e))?;
                if !meta.is_file() {
                    // UNSAFE_PATH, as the import itself refuses it with `--format`.
                    return Err(surfacelog::Error::io(
                        "open",
                        file,
                        &std::io::Error::other(surfacelog::internals::storage::NotRegular),
                    ));
                }
                let mut head = Vec::with_capacity(16);
                std::fs::File::open(file)
                    .and_then(|f| f.take(16).read_to_end(&mut head))
                    .map_err(|e| surfacelog::Error::io("read", file, &e))?;
                if head.starts_with(&[0x28, 0xB5, 0x2F, 0xFD]) {
                    Format::DshJsonlZstd
                } else if head.starts_with(b"SQLite format 3\0") {
                    Format::DshSqlite
                } else {
                    Format::DshJsonl
                }
            }
        })
    }
}

/// One line of `import`'s output.
#[derive(Serialize)]
struct ImportedLine<'a> {
    id: &'a str,
    events: u64,
    repaired: bool,
    closers: usize,
}

fn print_imported(imported: &Imported, torn: bool) -> Result<()> {
    let closers = imported.closers.len();
    out::json(&ImportedLine {
        id: &imported.id,
        events: imported.events,
        repaired: torn || closers > 0,
        closers,
    })
}

/// `surfacelog import`: one JSON line per imported session.
pub fn import(
    ctx: &Ctx,
    format: FormatArg,
    file: &Path,
    id: Option<&str>,
    strict: bool,
) -> Result<()> {
    // The file first: a missing one creates no store.
    std::fs::metadata(file).map_err(|e| surfacelog::Error::io("open", file, &e))?;
    let format = format.resolve(file)?;
    let options = StoreOptions::new().strict_vocabulary(strict);
    let fresh = std::fs::symlink_metadata(&ctx.store).is_err();
    let store = Store::open_or_create(&ctx.store, options)?;
    let outcome = import_into(&store, format, file, id);
    if outcome.is_err() && fresh {
        // A refused import stores nothing: not even the store it created for the session.
        drop(store);
        remove_unused_store(&ctx.store);
    }
    outcome
}

/// `UNSAFE_PATH` when the export target `out` is one of the store's own files (store.md
/// §1), or lies in one of its directories (`sessions/`, `trash/`, `tmp/`; followed through
/// links): a read-only command writes nothing there (with `--force` it would replace a
/// session's file, or the store's identity), and a file the store does not know of in a
/// session's directory could be taken for one of its own. Beside them, in the store's own
/// directory, a file is nothing of the store's.
fn refuse_inside_store(store: &Path, out: &Path) -> Result<()> {
    let parent = match out.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let (Ok(store), Ok(parent)) = (store.canonicalize(), parent.canonicalize()) else {
        return Ok(()); // a missing directory: the export reports it
    };
    let managed = ["sessions", "trash", "tmp"];
    let inside = managed
        .iter()
        .any(|dir| parent.starts_with(store.join(dir)));
    let own = ["STORE", "tmp.lock", "sessions", "trash", "tmp"];
    let named = parent == store
        && out
            .file_name()
            .is_some_and(|name| own.iter().any(|own| name == *own));
    if inside || named {
        return Err(ErrorKind::UnsafePath {
            path: out.to_owned(),
            reason: "the export target is a file or directory of the store's (STORE-15: reads \
                     write nothing there)",
        }
        .into());
    }
    Ok(())
}

/// Removes the store at `dir` when it is an empty store (store.md §1: `sessions/`, `trash/`,
/// `tmp/`, `tmp.lock`, `STORE`), leaving it whole when anything else is in it. Each
/// directory goes with `rmdir`, which fails unless it is empty, `sessions/` first: a
/// session another process stored in the store since it was made keeps it (a check of the
/// listing followed by a removal of the whole tree deleted such a session with it).
///
/// A directory that cannot be removed (another process building a session under `tmp/`,
/// something left under `trash/`) keeps the store: the ones removed before it are made
/// again, since a store without any of them is refused by every open (STORE-23).
pub(crate) fn remove_unused_store(dir: &Path) {
    let subs = ["sessions", "trash", "tmp"];
    for (at, name) in subs.iter().enumerate() {
        if std::fs::remove_dir(dir.join(name)).is_err() {
            for removed in subs.iter().take(at) {
                let _ = std::fs::create_dir(dir.join(removed));
            }
            return;
        }
    }
    for name in ["tmp.lock", "STORE"] {
        let _ = std::fs::remove_file(dir.join(name));
    }
    let _ = std::fs::remove_dir(dir);
}

#[cfg(test)]
mod tests {
    use super::remove_unused_store;
    use surfacelog::{Store, StoreOptions};

    /// A store made for an import is removed when it is still empty, and left whole, its
    /// session intact, when a session was stored in it meanwhile (another process's,
    /// between the import's refusal and the removal).
    #[test]
    fn an_unused_store_is_removed_and_a_used_one_kept() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().join("store");
        drop(Store::open_or_create(&dir, StoreOptions::new()).unwrap());
        remove_unused_store(&dir);
        assert!(!dir.exists(), "an empty store is removed");

        let store = Store::open_or_create(&dir, StoreOptions::new()).unwrap();
        store.create("other", None, None).unwrap().close().unwrap();
        drop(store);
        remove_unused_store(&dir);
        let store = Store::open(&dir, StoreOptions::new()).unwrap();
        let listed = store.list().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].id(), "other");
        assert!(store.open_session("other").is_ok());
    }

    /// A store whose `tmp/` or `trash/` is not empty (another process's create building
    /// there, a take-back not yet removed) is left whole. The directories were removed one
    /// by one and the removal stopped at the first that failed: `sessions/` (and `trash/`)
    /// were gone by then, and every later open of the store was refused `CORRUPT` (the
    /// store has no sessions/, STORE-23), the other process's create failing with it.
    #[test]
    fn a_store_in_use_under_tmp_or_trash_is_left_whole() {
        for busy in ["tmp", "trash"] {
            let scratch = tempfile::tempdir().unwrap();
            let dir = scratch.path().join("store");
            drop(Store::open_or_create(&dir, StoreOptions::new()).unwrap());
            std::fs::create_dir(dir.join(busy).join("build")).unwrap();
            remove_unused_store(&dir);
            for sub in ["sessions", "trash", "tmp"] {
                assert!(dir.join(sub).is_dir(), "{busy}: {sub}/ is gone");
            }
            assert!(dir.join(busy).join("build").is_dir());
            let store = Store::open(&dir, StoreOptions::new());
            assert!(store.is_ok(), "{busy}: {:?}", store.err());
        }
    }
}

/// The import of `file` into `store`, printing a line per imported session.
fn import_into(store: &Store, format: Format, file: &Path, id: Option<&str>) -> Result<()> {
    match format {
        Format::DshJsonl | Format::DshJsonlZstd => {
            let compression = format.compression();
            let size = std::fs::metadata(file).map_or(0, |m| m.len());
            let bar = progress_bar(size, "import");
            let outcome = jsonl::import_jsonl(store, file, compression, id, &mut |at| {
                bar.set_position(at);
            });
            bar.finish_and_clear();
            let (imported, scan) = outcome?;
            print_imported(&imported, scan.torn.is_some())?;
        }
        Format::DshSqlite => {
            for (imported, torn) in sqlite_import(store, file, id)? {
                print_imported(&imported, torn)?;
            }
        }
    }
    Ok(())
}

/// `export`'s options.
pub struct ExportOptions<'a> {
    /// Pack delta runs into rows.
    pub pack: bool,
    /// The target, `-` for stdout.
    pub out: &'a Path,
    /// Replace an existing file.
    pub force: bool,
    /// Export a live session's committed prefix.
    pub committed_prefix: bool,
}

/// `export`'s summary: `{"id","events",...}` with the format's own counts.
#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct ExportedLine<'a> {
    id: &'a str,
    events: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    records: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rows: Option<u64>,
    packed_rows: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    text_bytes: Option<u64>,
}

/// `surfacelog export`: writes session `id` to a file published atomically, or to
/// stdout: exactly the stored events (no closers are invented for an interrupted turn:
/// the reference's loader repairs on load). A session whose writer is live is refused
/// with `LOCKED` unless `committed_prefix`.
pub fn export(ctx: &Ctx, id: &str, format: Format, options: &ExportOptions<'_>) -> Result<()> {
    let store = ctx.open_read_only()?;
    if options.out != Path::new("-") {
        refuse_inside_store(&ctx.store, options.out)?;
    }
    if !options.committed_prefix {
        store.check_no_writer(id)?;
    }
    let session = store.inspect(id)?;
    // Events the import projected are exported as they were read (STORE-26).
    let originals = surfacelog::internals::adapters::legacy::Originals::read(&store, id)?;
    let events = session.log().seq_next();
    let to_stdout = options.out == Path::new("-");
    let mut line = ExportedLine {
        id,
        events,
        ..ExportedLine::default()
    };
    match format {
        Format::DshJsonl | Format::DshJsonlZstd => {
            let compression = format.compression();
            let exported = if to_stdout {
                // STORE-15: every event is read and checked, and every line made, before the
                // first byte goes to stdout: damage is an error, never a session cut short
                // for what reads the stream (a file is published whole, or not at all).
                jsonl::write_jsonl(
                    session.header(),
                    session.log(),
                    &originals,
                    options.pack,
                    compression,
                    &mut std::io::sink(),
                    Path::new("-"),
                )?;
                let mut stdout = std::io::stdout().lock();
                let exported = jsonl::write_jsonl(
                    session.header(),
                    session.log(),
                    &originals,
                    options.pack,
                    compression,
                    &mut stdout,
                    Path::new("-"),
                )?;
                stdout
                    .flush()
                    .map_err(|e| surfacelog::Error::io("write", "stdout", &e))?;
                exported
            } else {
                let publish = if options.force {
                    jsonl::Publish::Replace
                } else {
                    jsonl::Publish::New
                };
                jsonl::export_file_to(
                    options.out,
                    publish,
                    session.header(),
                    session.log(),
                    &originals,
                    options.pack,
                    compression,
                )?
            };
            line.records = Some(exported.records);
            line.packed_rows = exported.packed_rows;
            line.text_bytes = Some(exported.text_bytes);
        }
        Format::DshSqlite => {
            if options.force {
                return Err(ErrorKind::UnsafePath {
                    path: options.out.to_owned(),
                    reason: "--force replaces JSONL files only: a session is added to a SQLite \
                             database, never replacing it",
                }
                .into());
            }
            if to_stdout {
                return Err(ErrorKind::UnsafePath {
                    path: options.out.to_owned(),
                    reason: "a SQLite database cannot be written to stdout",
                }
                .into());
            }
            let report = surfacelog::internals::adapters::sqlite::export_session_with(
                options.out,
                session.header(),
                session.log(),
                &originals,
                options.pack,
            )?;
            line.rows = Some(report.rows);
            line.packed_rows = report.packed_rows;
        }
    }
    let text = serde_json::to_string(&line)
        .map_err(|e| surfacelog::Error::io("write", "stdout", &std::io::Error::from(e)))?;
    // With the data on stdout, the summary goes to stderr.
    if to_stdout {
        eprintln!("{text}");
    } else {
        out::say!("{text}")?;
    }
    Ok(())
}

/// `SQLite` import through the adapter: each session with whether rows were dropped.
fn sqlite_import(store: &Store, file: &Path, id: Option<&str>) -> Result<Vec<(Imported, bool)>> {
    let imported = surfacelog::internals::adapters::sqlite_import::import_sqlite(store, file, id)?;
    Ok(imported
        .into_iter()
        .map(|(session, torn)| (session, torn.is_some()))
        .collect())
}
