//! Persistence of the broker's `config/*.json` files (store.md §13.1): crash-safe writes with a
//! `.bak` fallback, and the fastjson dialect (bare numeric object keys)
//! that Java brokers write and read.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use ringmq_remoting::body::topic::DataVersion;
use ringmq_remoting::json::Value;
use ringmq_sync::LockExt;

/// The one wall clock (milliseconds since the epoch), kept reachable here for the broker's
/// many `persist::now_ms` callers.
pub use ringmq_sync::now_ms;

fn bak_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".bak");
    PathBuf::from(name)
}

/// Writes `content` to `path` so that a crash leaves either the old or the new file (plus the
/// previous version in `<file>.bak`, which Java brokers also fall back to).
pub fn write_config_file(path: &Path, content: &str) -> io::Result<()> {
    // Several control threads persist metadata (housekeeping, the schedule timer,
    // shutdown); they share the `.tmp` name, so writes are serialized. Metadata writes are
    // rare and off the hot cores, so one process-wide lock costs nothing.
    static WRITE_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = WRITE_LOCK.lock_unpoisoned();
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir)?;
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(".tmp");
    let tmp = PathBuf::from(tmp_name);
    {
        let mut file = fs::File::create(&tmp)?;
        file.write_all(content.as_bytes())?;
        file.sync_data()?;
    }
    if path.exists() {
        // Keep the previous version as the .bak Java's loader falls back to.
        let _ = fs::copy(path, bak_path(path));
    }
    fs::rename(&tmp, path)?;
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Loads a config file with `parse`; a missing, empty or unparsable file falls back to
/// `<file>.bak`. `Ok(None)` when neither exists (a fresh broker); `Err` names both failures.
pub fn read_config_file<T>(
    path: &Path,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Option<T>, String> {
    let mut first_error = None;
    for candidate in [path.to_path_buf(), bak_path(path)] {
        match fs::read_to_string(&candidate) {
            Ok(text) if text.trim().is_empty() => continue,
            Ok(text) => match parse(&text) {
                Ok(value) => {
                    if candidate != path {
                        tracing::warn!(file = %path.display(), "loaded metadata from the .bak copy: {}", first_error.clone().unwrap_or_default());
                    }
                    return Ok(Some(value));
                }
                Err(e) => {
                    let why = format!("{} is not valid: {e}", candidate.display());
                    tracing::warn!("{why}");
                    first_error.get_or_insert(why);
                }
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                first_error.get_or_insert(format!("cannot read {}: {e}", candidate.display()));
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(None),
    }
}

/// Writes `value` to `path` in the two-space layout the broker's `config/*.json` files have
/// always had (Java brokers read it as well).
pub fn write_pretty_json(path: &Path, value: &Value) -> io::Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(io::Error::other)?;
    write_config_file(path, &text)
}

/// An offsets file (`consumerOffset.json`, `delayOffset.json`) as read.
pub struct OffsetFile {
    /// `offsetTable`'s entries (empty when it is absent or not an object).
    pub offset_table: serde_json::Map<String, serde_json::Value>,
    /// `dataVersion`, when present and readable.
    pub data_version: Option<DataVersion>,
}

/// Reads an offsets file in either dialect, or its `.bak` ([`read_config_file`]).
pub fn read_offset_file(path: &Path) -> Result<Option<OffsetFile>, String> {
    read_config_file(path, |text| {
        let v: serde_json::Value =
            serde_json::from_str(&fastjson_to_standard(text)).map_err(|e| e.to_string())?;
        let offset_table = v.get("offsetTable").and_then(|t| t.as_object()).cloned();
        let data_version = v
            .get("dataVersion")
            .and_then(|d| DataVersion::decode(d.to_string().as_bytes()).ok());
        Ok(OffsetFile {
            offset_table: offset_table.unwrap_or_default(),
            data_version,
        })
    })
}

/// Rewrites fastjson's non-standard output into standard JSON (bare numeric object keys
/// get quoted) with remoting's body reader, the one fastjson-tolerant JSON reader. Text it
/// cannot read is returned as is, so the caller's JSON error names the problem.
pub fn fastjson_to_standard(text: &str) -> String {
    ringmq_remoting::body::to_standard_json(text.as_bytes()).unwrap_or_else(|_| text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_bare_numeric_keys_only() {
        let src = "{\"offsetTable\":{\"T@G\":{0:12,1:-5, 12 :7}},\"s\":\"{0:1}\",\"a\":[1,2]}";
        let out = fastjson_to_standard(src);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["offsetTable"]["T@G"]["1"], -5);
        assert_eq!(v["offsetTable"]["T@G"]["12"], 7);
        assert_eq!(v["s"], "{0:1}");
        assert_eq!(v["a"][1], 2);
    }

    #[test]
    fn falls_back_to_bak_when_file_is_corrupt() {
        let dir = std::env::temp_dir().join(format!("ringmq-persist-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let path = dir.join("x.json");
        write_config_file(&path, "{\"v\":1}").unwrap();
        write_config_file(&path, "{\"v\":2}").unwrap();
        fs::write(&path, "{garbage").unwrap();
        let parse =
            |t: &str| serde_json::from_str::<serde_json::Value>(t).map_err(|e| e.to_string());
        let v = read_config_file(&path, parse).unwrap().unwrap();
        assert_eq!(v["v"], 1);
        assert!(read_config_file(&dir.join("missing.json"), parse)
            .unwrap()
            .is_none());
        let _ = fs::remove_dir_all(&dir);
    }
}
