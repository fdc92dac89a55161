//! `KVConfigManager`: the name server's namespace → key → value store (PUT/GET/DELETE
//! _KV_CONFIG, GET_KVLIST_BY_NAMESPACE, the ORDER_TOPIC_CONFIG namespace), persisted to
//! `kvConfigPath` as `{"configTable":{namespace:{key:value}}}` after every change and
//! reloaded at start (`features.md` §h.5).
//!
//! The table itself is plain data; writing the file is the [`Persister`]'s job, so request
//! handlers on network cores never wait for a disk (the server persists from a background
//! thread; tests persist inline). Files are replaced atomically: write `path.tmp`, fsync,
//! keep the previous file as `path.bak`, rename. Loading falls back to `path.bak` when the
//! main file is missing or unreadable (a crash between the two renames).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Mutex;

use ringmq_remoting::body::kv::{KvConfigSerializeWrapper, KvTable};
use ringmq_sync::LockExt;

/// The namespace holding ordered-topic configs (`NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG`).
pub const NAMESPACE_ORDER_TOPIC_CONFIG: &str = "ORDER_TOPIC_CONFIG";

/// The KV table.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct KvConfigManager {
    config_table: BTreeMap<String, BTreeMap<String, String>>,
}

impl KvConfigManager {
    pub fn new() -> Self {
        Self::default()
    }

    /// Loads `path` (or its `.bak`). A missing file is an empty table; an unreadable one
    /// is an error naming the file, so the operator can fix or move it.
    pub fn load(path: &Path) -> std::io::Result<Self> {
        let read = |p: &Path| -> std::io::Result<Option<KvConfigSerializeWrapper>> {
            match std::fs::read(p) {
                Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => {
                    Ok(Some(KvConfigSerializeWrapper::default()))
                }
                Ok(bytes) => KvConfigSerializeWrapper::decode(&bytes)
                    .map(Some)
                    .map_err(|e| {
                        std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!(
                                "KV config file {} is not a KVConfigSerializeWrapper: {e}",
                                p.display()
                            ),
                        )
                    }),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(std::io::Error::new(
                    e.kind(),
                    format!("reading KV config file {}: {e}", p.display()),
                )),
            }
        };
        let main = read(path);
        let wrapper = match main {
            Ok(Some(w)) => w,
            Ok(None) | Err(_) => match read(&bak_path(path)) {
                Ok(Some(w)) => {
                    tracing::warn!(path = %path.display(), "KV config file missing or unreadable; loaded its .bak copy");
                    w
                }
                _ => match main {
                    Ok(_) => KvConfigSerializeWrapper::default(),
                    Err(e) => return Err(e),
                },
            },
        };
        tracing::info!(path = %path.display(), namespaces = wrapper.config_table.len(), "KV config loaded");
        Ok(Self {
            config_table: wrapper.config_table,
        })
    }

    pub fn put(&mut self, namespace: &str, key: &str, value: &str) {
        let table = self.config_table.entry(namespace.to_owned()).or_default();
        match table.insert(key.to_owned(), value.to_owned()) {
            Some(_) => tracing::info!(namespace, key, value, "KV config item updated"),
            None => tracing::info!(namespace, key, value, "KV config item created"),
        }
    }

    /// Removes a key; an emptied namespace stays (as upstream), answering an empty table.
    pub fn delete(&mut self, namespace: &str, key: &str) -> Option<String> {
        let removed = self
            .config_table
            .get_mut(namespace)
            .and_then(|t| t.remove(key));
        tracing::info!(namespace, key, ?removed, "KV config item deleted");
        removed
    }

    pub fn get(&self, namespace: &str, key: &str) -> Option<&str> {
        self.config_table
            .get(namespace)
            .and_then(|t| t.get(key))
            .map(String::as_str)
    }

    /// GET_KVLIST_BY_NAMESPACE: `None` when the namespace does not exist.
    pub fn get_kv_list_by_namespace(&self, namespace: &str) -> Option<KvTable> {
        self.config_table
            .get(namespace)
            .map(|t| KvTable { table: t.clone() })
    }

    /// The file content for the current table.
    pub fn snapshot_json(&self) -> String {
        KvConfigSerializeWrapper {
            config_table: self.config_table.clone(),
        }
        .encode()
    }
}

fn bak_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".bak");
    PathBuf::from(name)
}

/// Replaces `path` with `contents` atomically, keeping the previous file as `.bak`.
pub fn write_file_atomically(path: &Path, contents: &str) -> std::io::Result<()> {
    let ctx = |what: &str, p: &Path, e: std::io::Error| {
        std::io::Error::new(e.kind(), format!("{what} {}: {e}", p.display()))
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| ctx("creating directory", dir, e))?;
    }
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(".tmp");
    let tmp = PathBuf::from(tmp_name);
    {
        let mut file = std::fs::File::create(&tmp).map_err(|e| ctx("creating", &tmp, e))?;
        file.write_all(contents.as_bytes())
            .map_err(|e| ctx("writing", &tmp, e))?;
        file.sync_all().map_err(|e| ctx("syncing", &tmp, e))?;
    }
    if path.exists() {
        let bak = bak_path(path);
        std::fs::copy(path, &bak).map_err(|e| ctx("backing up to", &bak, e))?;
    }
    std::fs::rename(&tmp, path).map_err(|e| ctx("renaming onto", path, e))?;
    Ok(())
}

/// Writes files for the control plane: inline (tests, tools) or on a background thread
/// that coalesces bursts, so a request handler never blocks on the disk.
pub enum Persister {
    Inline,
    Background(Mutex<Option<mpsc::Sender<(PathBuf, String)>>>),
}

impl Persister {
    /// Starts the background writer thread; it exits when the persister is closed or
    /// dropped, after writing what was queued.
    pub fn spawn_background() -> std::io::Result<(Persister, std::thread::JoinHandle<()>)> {
        let (tx, rx) = mpsc::channel::<(PathBuf, String)>();
        let handle = std::thread::Builder::new()
            .name("namesrv-persist".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    // Coalesce: only the newest content per file matters.
                    let mut latest: BTreeMap<PathBuf, String> = BTreeMap::new();
                    latest.insert(first.0, first.1);
                    while let Ok((path, contents)) = rx.try_recv() {
                        latest.insert(path, contents);
                    }
                    for (path, contents) in latest {
                        if let Err(e) = write_file_atomically(&path, &contents) {
                            tracing::error!("persisting name server state failed: {e}");
                        }
                    }
                }
            })?;
        Ok((Persister::Background(Mutex::new(Some(tx))), handle))
    }

    /// Stops accepting writes; the background thread finishes what is queued and exits.
    pub fn close(&self) {
        if let Persister::Background(tx) = self {
            if let Ok(mut slot) = tx.lock() {
                slot.take();
            }
        }
    }

    pub fn persist(&self, path: &Path, contents: String) {
        match self {
            Persister::Inline => {
                if let Err(e) = write_file_atomically(path, &contents) {
                    tracing::error!("persisting name server state failed: {e}");
                }
            }
            Persister::Background(tx) => {
                let sent = tx
                    .lock_unpoisoned()
                    .as_ref()
                    .is_some_and(|tx| tx.send((path.to_owned(), contents)).is_ok());
                if !sent {
                    tracing::error!(path = %path.display(), "persist thread stopped; change not written");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("ringmq-namesrv-kv-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn table_operations() {
        let mut kv = KvConfigManager::new();
        kv.put(NAMESPACE_ORDER_TOPIC_CONFIG, "T", "broker-a:4");
        kv.put(NAMESPACE_ORDER_TOPIC_CONFIG, "T", "broker-a:8");
        assert_eq!(
            kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, "T"),
            Some("broker-a:8")
        );
        assert_eq!(
            kv.get_kv_list_by_namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
                .unwrap()
                .encode(),
            r#"{"table":{"T":"broker-a:8"}}"#
        );
        assert_eq!(
            kv.delete(NAMESPACE_ORDER_TOPIC_CONFIG, "T").as_deref(),
            Some("broker-a:8")
        );
        assert_eq!(
            kv.get_kv_list_by_namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
                .unwrap()
                .table
                .len(),
            0
        );
        assert!(kv.get_kv_list_by_namespace("other").is_none());
        assert_eq!(
            kv.snapshot_json(),
            r#"{"configTable":{"ORDER_TOPIC_CONFIG":{}}}"#
        );
    }

    #[test]
    fn persist_and_reload_with_backup() {
        let dir = temp_dir("reload");
        let path = dir.join("namesrv/kvConfig.json");
        assert_eq!(
            KvConfigManager::load(&path).unwrap(),
            KvConfigManager::new()
        );
        let mut kv = KvConfigManager::new();
        kv.put("ns", "k", "v1");
        Persister::Inline.persist(&path, kv.snapshot_json());
        kv.put("ns", "k", "v2");
        Persister::Inline.persist(&path, kv.snapshot_json());
        assert_eq!(
            KvConfigManager::load(&path).unwrap().get("ns", "k"),
            Some("v2")
        );
        assert!(std::fs::read_to_string(bak_path(&path))
            .unwrap()
            .contains("v1"));
        // A torn main file: the backup is used.
        std::fs::write(&path, "{\"configTable\":").unwrap();
        assert_eq!(
            KvConfigManager::load(&path).unwrap().get("ns", "k"),
            Some("v1")
        );
        // Both unreadable: an error naming the file.
        std::fs::write(bak_path(&path), "nope").unwrap();
        let err = KvConfigManager::load(&path).unwrap_err();
        assert!(err.to_string().contains("kvConfig.json"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn background_persister_writes_latest() {
        let dir = temp_dir("bg");
        let path = dir.join("kv.json");
        let (persister, handle) = Persister::spawn_background().unwrap();
        for i in 0..20 {
            persister.persist(
                &path,
                format!("{{\"configTable\":{{\"ns\":{{\"k\":\"{i}\"}}}}}}"),
            );
        }
        persister.close();
        handle.join().unwrap();
        persister.persist(&path, "{}".into());
        assert_eq!(
            KvConfigManager::load(&path).unwrap().get("ns", "k"),
            Some("19")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
