//! The store's and its sessions' files and names: the `STORE` identity file (STORE-2),
//! `sessions/` (STORE-16), no symbolic links (STORE-1), and `header.json`, a valid header
//! (contract §6) naming the id its directory is the escape of (STORE-3, STORE-4).

use std::path::{Path, PathBuf};

use super::Found;
use crate::error::{Error, ErrorKind, Result};
use crate::event::Header;
use crate::event::header::NegativeZero;
use crate::json::Json;
use crate::store::escape_id;

/// STORE-2: the identity file.
pub(super) fn check_identity_file(found: &mut Found, dir: &Path) {
    let path = dir.join("STORE");
    match crate::storage::read_regular(&path)
        .and_then(|bytes| String::from_utf8(bytes).map_err(std::io::Error::other))
    {
        Ok(text) => {
            if let Err(error) = crate::store::check_identity(&path, &text) {
                found.error(&path, None, "STORE-2", error.to_string());
            }
        }
        Err(error) => found.error(
            &path,
            None,
            "STORE-2",
            format!("the store identity file cannot be read: {error}"),
        ),
    }
}

/// The directory of session `id` in `sessions_dir`.
///
/// # Errors
/// `INVALID_ID` for the empty id (STORE-3), `SESSION_NOT_FOUND` when there is none.
pub(super) fn asked_session_dir(sessions_dir: &Path, id: &str) -> Result<PathBuf> {
    crate::store::check_id(id)?;
    let session_dir = sessions_dir.join(escape_id(id));
    if std::fs::symlink_metadata(&session_dir).is_err() {
        return Err(ErrorKind::SessionNotFound { id: id.to_owned() }.into());
    }
    Ok(session_dir)
}

/// STORE-16: every session directory in `sessions_dir`, in name order; a missing
/// `sessions/` is an error, a file in it a warning.
pub(super) fn session_dirs(found: &mut Found, sessions_dir: &Path) -> Result<Vec<PathBuf>> {
    let mut names = match std::fs::read_dir(sessions_dir) {
        Ok(entries) => {
            let mut names = Vec::new();
            for entry in entries {
                let entry = entry.map_err(|e| Error::io("list", sessions_dir, &e))?;
                names.push(entry.file_name());
            }
            names
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            found.error(sessions_dir, None, "STORE-16", "no sessions/ directory");
            Vec::new()
        }
        Err(error) => return Err(Error::io("list", sessions_dir, &error)),
    };
    names.sort();
    let mut dirs = Vec::new();
    for name in names {
        let path = sessions_dir.join(&name);
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
            found.warning(&path, None, "STORE-16", "a file in sessions/");
        } else {
            dirs.push(path);
        }
    }
    Ok(dirs)
}

/// STORE-1: the session's directory, its `header.json` and its `log` are no symbolic links.
pub(super) fn check_no_symlinks(found: &mut Found, dir: &Path) {
    for path in [dir.to_owned(), dir.join("header.json"), dir.join("log")] {
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
            found.error(&path, None, "STORE-1", "a symbolic link inside the store");
        }
    }
}

/// STORE-3, STORE-4, contract §6: `header.json` is a valid header, then one 0A, and names
/// the id its directory (`name`) is the escape of. Returns that id.
///
/// # Errors
/// `IO` when `header.json` cannot be read; `SESSION_NOT_FOUND` when the id `asked` for
/// shares its directory with the one the header names (STORE-4).
pub(super) fn check_header(
    found: &mut Found,
    dir: &Path,
    name: &str,
    asked: Option<&str>,
) -> Result<Option<String>> {
    let path = dir.join("header.json");
    // STORE-1, STORE-16: a link (reported by `check_no_symlinks`) or a file that is not
    // regular is a problem of this session, not a refusal of the whole check.
    if let Ok(meta) = std::fs::symlink_metadata(&path) {
        if meta.file_type().is_symlink() {
            return Ok(None);
        }
        if !meta.is_file() {
            found.error(&path, None, "STORE-1", "header.json is not a regular file");
            return Ok(None);
        }
    }
    let bytes = match crate::storage::read_regular(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            found.error(&path, None, "STORE-16", "the session has no header.json");
            return Ok(None);
        }
        Err(error) => return Err(Error::io("read", &path, &error)),
    };
    let Some(id) = header_id(found, &path, &bytes) else {
        return Ok(None);
    };
    check_directory_name(found, &path, &id, name, asked)?;
    Ok(Some(id))
}

/// STORE-16, contract §6: the id the header in `bytes` names, when it is UTF-8, ends with
/// exactly one line feed and has a string id (reported otherwise); a header that does not
/// parse is reported too, but its id is still returned.
fn header_id(found: &mut Found, path: &Path, bytes: &[u8]) -> Option<String> {
    let Ok(text) = std::str::from_utf8(bytes) else {
        found.error(path, None, "STORE-16", "header.json is not UTF-8");
        return None;
    };
    let Some(body) = text.strip_suffix('\n').filter(|b| !b.ends_with('\n')) else {
        found.error(
            path,
            Some(bytes.len() as u64),
            "STORE-16",
            "header.json does not end with exactly one line feed",
        );
        return None;
    };
    let id = match Json::parse(body) {
        Ok(json) => json
            .root()
            .get("id")
            .and_then(|v| v.as_str())
            .map(std::borrow::Cow::into_owned),
        Err(error) => {
            found.error(
                path,
                Some(error.offset as u64),
                "contract §6",
                Error::from(error).to_string(),
            );
            return None;
        }
    };
    let Some(id) = id else {
        found.error(path, None, "contract §6", "the header has no string id");
        return None;
    };
    if let Err(error) = Header::parse(body, &id, NegativeZero::Accept) {
        found.error(path, None, "contract §6", error.to_string());
    }
    Some(id)
}

/// STORE-3, STORE-4: the session's directory `name` is the escape of `id`.
///
/// # Errors
/// `SESSION_NOT_FOUND` when `asked` is another id of the same (shortened) name.
fn check_directory_name(
    found: &mut Found,
    path: &Path,
    id: &str,
    name: &str,
    asked: Option<&str>,
) -> Result<()> {
    let escaped = escape_id(id);
    if escaped != name {
        let rule = if escaped.contains('~') {
            "STORE-4"
        } else {
            "STORE-3"
        };
        found.error(
            path,
            None,
            rule,
            format!(
                "header.json names session {id:?}, whose directory is {escaped:?}, not {name:?}"
            ),
        );
    } else if let Some(asked) = asked.filter(|&a| a != id) {
        // STORE-4: a shortened name shared by two ids holds the other one.
        return Err(ErrorKind::SessionNotFound {
            id: asked.to_owned(),
        }
        .into());
    }
    Ok(())
}

/// STORE-26: the originals a DSH import kept beside the log, when there are any, end with
/// the checksum of their lines, which checks out (an export refuses them otherwise).
///
/// # Errors
/// `IO` when the file cannot be read.
pub(super) fn check_originals(found: &mut Found, dir: &Path) -> Result<()> {
    let path = dir.join(crate::store::ORIGINALS_FILE);
    if let Ok(meta) = std::fs::symlink_metadata(&path)
        && !meta.is_file()
    {
        let what = if meta.file_type().is_symlink() {
            "a symbolic link inside the store"
        } else {
            "the originals are not a regular file"
        };
        found.error(&path, None, "STORE-1", what);
        return Ok(());
    }
    let bytes = match crate::storage::read_regular(&path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(Error::io("read", &path, &error)),
    };
    if let Err(line) = crate::store::originals_lines(&bytes) {
        found.error(
            &path,
            None,
            "STORE-26",
            format!(
                "line {}: not the checksum of the lines before it: the file was changed or cut",
                line + 1
            ),
        );
    }
    Ok(())
}
