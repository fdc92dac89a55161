//! Atomic persistence of `config/*.json` files for the broker's metadata managers
//! (`store.md` §13.1): write a temp file and fsync it, move the current file to `.bak`,
//! rename the temp file into place, fsync the directory. Loading falls back to `.bak` when
//! the file is missing, empty or does not parse.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

fn ctx(op: &str, path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{op} {}: {e}", path.display()))
}

/// Replaces `path` with `content` so that a crash at any point leaves either the old or
/// the new content readable (through [`load_config_file`]).
pub fn write_config_file_atomic(path: &Path, content: &str) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(|e| ctx("create_dir", dir, e))?;
    let tmp = with_suffix(path, ".tmp");
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(|e| ctx("create", &tmp, e))?;
        f.write_all(content.as_bytes())
            .map_err(|e| ctx("write", &tmp, e))?;
        f.sync_all().map_err(|e| ctx("fsync", &tmp, e))?;
    }
    if path.exists() {
        fs::rename(path, with_suffix(path, ".bak")).map_err(|e| ctx("rename to .bak", path, e))?;
    }
    fs::rename(&tmp, path).map_err(|e| ctx("rename", &tmp, e))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| ctx("fsync dir", dir, e))
}

/// Loads `path` with `parse`; when the file is missing, empty or `parse` returns `None`,
/// tries `<path>.bak`. `Ok(None)` when neither yields a value (start empty).
pub fn load_config_file<T>(
    path: &Path,
    parse: impl Fn(&str) -> Option<T>,
) -> io::Result<Option<T>> {
    for p in [path.to_path_buf(), with_suffix(path, ".bak")] {
        match fs::read_to_string(&p) {
            Ok(s) if !s.trim().is_empty() => {
                if let Some(v) = parse(&s) {
                    return Ok(Some(v));
                }
                tracing::warn!(path = %p.display(), "config file does not parse; trying the backup");
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(ctx("read", &p, e)),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_keeps_backup_and_loads_fallback() {
        let dir = crate::test_util::temp_dir("config_file");
        let p = dir.join("config").join("topics.json");
        write_config_file_atomic(&p, "{\"v\":1}").unwrap();
        write_config_file_atomic(&p, "{\"v\":2}").unwrap();
        assert_eq!(
            fs::read_to_string(with_suffix(&p, ".bak")).unwrap(),
            "{\"v\":1}"
        );
        let parse = |s: &str| s.contains("\"v\"").then(|| s.to_string());
        assert_eq!(
            load_config_file(&p, parse).unwrap().as_deref(),
            Some("{\"v\":2}")
        );
        fs::write(&p, "garbage").unwrap();
        assert_eq!(
            load_config_file(&p, parse).unwrap().as_deref(),
            Some("{\"v\":1}")
        );
        fs::remove_file(&p).unwrap();
        fs::remove_file(with_suffix(&p, ".bak")).unwrap();
        assert_eq!(load_config_file(&p, parse).unwrap(), None);
    }
}
