//! The ACL files on disk (upstream's `PlainPermissionManager`): the default file
//! (`<home>/conf/plain_acl.yml`) and every `.yml`/`.yaml` file under `<home>/conf/acl/`.
//! They are compiled into one [`AclRules`] that request checks read; a file changed on
//! disk is picked up by [`AclStore::reload_if_changed`], and the admin requests rewrite
//! the file an account lives in, bumping that file's `dataVersion`.
//!
//! A set of files that does not compile (a typo, a half-written file) never replaces
//! rules that worked: the error is logged and the old rules stay.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use ringmq_remoting::RemotingCommand;
use ringmq_sync::{LockExt, RwLockExt};

use crate::config::{DataVersion, PlainAccessConfig, PlainAclFile};
use crate::permission::parse_resource_perm;
use crate::validator::{check_keys, AclRules, Denied};

/// The default ACL file, relative to the ACL home (upstream's `rocketmq.acl.plain.file`
/// default).
pub const DEFAULT_PLAIN_FILE: &str = "conf/plain_acl.yml";

/// At most this many ACL files are read from `conf/acl/`; more is a mistake worth a
/// clear error rather than an unbounded scan on every reload.
const MAX_ACL_FILES: usize = 256;

/// What a file looked like when read, to notice an edit without re-reading it.
type Fingerprint = Option<(SystemTime, u64)>;

struct LoadedFile {
    path: PathBuf,
    content: PlainAclFile,
    fingerprint: Fingerprint,
}

/// The ACL files and the rules compiled from them.
pub struct AclStore {
    default_file: PathBuf,
    acl_dir: PathBuf,
    rules: RwLock<Arc<AclRules>>,
    /// Files as last read or written; the lock also orders admin updates.
    files: Mutex<Vec<LoadedFile>>,
}

impl AclStore {
    /// Opens the ACL of `home`: `default_file` (relative paths are under `home`; upstream's
    /// `rocketmq.acl.plain.file`, default `conf/plain_acl.yml`) and `home/conf/acl/`. The
    /// default file is created empty when missing, as upstream does.
    pub fn open(home: &Path, default_file: &Path) -> Result<AclStore, String> {
        let default_file = home.join(default_file);
        if !default_file.exists() {
            if let Some(dir) = default_file.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            }
            std::fs::write(&default_file, "")
                .map_err(|e| format!("cannot create {}: {e}", default_file.display()))?;
        }
        let store = AclStore {
            default_file,
            acl_dir: home.join("conf").join("acl"),
            rules: RwLock::new(Arc::new(AclRules::default())),
            files: Mutex::new(Vec::new()),
        };
        let (files, rules) = store.read_all()?;
        *store.rules.write_unpoisoned() = Arc::new(rules);
        *store.files.lock_unpoisoned() = files;
        Ok(store)
    }

    /// The file new accounts and the global white list go to.
    pub fn default_file(&self) -> &Path {
        &self.default_file
    }

    /// Checks one request from `peer` against the current rules.
    pub fn check(&self, request: &RemotingCommand, peer: IpAddr) -> Result<(), Denied> {
        // Writers (a reload, an admin request) are rare; the read guard is held for the
        // check rather than cloning the Arc on every request.
        self.rules.read_unpoisoned().check(request, peer)
    }

    /// Re-reads every file when any was added, removed or changed since the last read.
    /// Returns whether new rules took effect.
    pub fn reload_if_changed(&self) -> bool {
        let mut files = self.files.lock_unpoisoned();
        let paths = self.file_paths();
        let unchanged = paths.len() == files.len()
            && files
                .iter()
                .zip(&paths)
                .all(|(f, p)| f.path == *p && f.fingerprint == fingerprint(p));
        if unchanged {
            return false;
        }
        match self.read_all() {
            Ok((new_files, rules)) => {
                tracing::info!(
                    files = new_files.len(),
                    accounts = rules.account_count(),
                    "ACL files changed on disk; new rules in effect"
                );
                *files = new_files;
                *self.rules.write_unpoisoned() = Arc::new(rules);
                true
            }
            Err(e) => {
                // Remember the broken state so the error is logged once per edit.
                for f in files.iter_mut() {
                    f.fingerprint = fingerprint(&f.path);
                }
                tracing::error!("ACL files not reloaded, the previous rules stay in effect: {e}");
                false
            }
        }
    }

    /// Creates or updates an account (UPDATE_AND_CREATE_ACL_CONFIG). An existing account
    /// is updated in its own file, keeping fields the update leaves out; a new one is
    /// added to the default file.
    pub fn update_account(&self, update: &AccountUpdate, now_ms: i64) -> Result<(), String> {
        update.check()?;
        self.rewrite(now_ms, |files, default_index| {
            let at = files.iter().position(|f| {
                f.content
                    .accounts
                    .iter()
                    .any(|a| a.access_key == update.access_key)
            });
            let file = &mut files[at.unwrap_or(default_index)].content;
            match file
                .accounts
                .iter_mut()
                .find(|a| a.access_key == update.access_key)
            {
                Some(account) => update.apply(account),
                None => {
                    let mut account = PlainAccessConfig::default();
                    update.apply(&mut account);
                    check_keys(&account)?;
                    file.accounts.push(account);
                }
            }
            Ok(at.unwrap_or(default_index))
        })
    }

    /// Deletes an account from the file it lives in (DELETE_ACL_CONFIG).
    pub fn delete_account(&self, access_key: &str, now_ms: i64) -> Result<(), String> {
        self.rewrite(now_ms, |files, _| {
            for (i, f) in files.iter_mut().enumerate() {
                let before = f.content.accounts.len();
                f.content.accounts.retain(|a| a.access_key != access_key);
                if f.content.accounts.len() != before {
                    return Ok(i);
                }
            }
            Err(format!("No acl config for {access_key}"))
        })
    }

    /// Replaces the global white list of `file` (the default file when `None`)
    /// (UPDATE_GLOBAL_WHITE_ADDRS_CONFIG).
    pub fn update_global_white(
        &self,
        addresses: Vec<String>,
        file: Option<&Path>,
        now_ms: i64,
    ) -> Result<(), String> {
        for a in &addresses {
            crate::address::AddressPattern::parse(a)?;
        }
        let target = file.map(Path::to_path_buf);
        self.rewrite(now_ms, |files, default_index| {
            let i = match &target {
                None => default_index,
                Some(t) => files.iter().position(|f| f.path == *t).ok_or_else(|| {
                    format!("{} is not one of this broker's ACL files", t.display())
                })?,
            };
            files[i].content.global_white_remote_addresses = addresses;
            Ok(i)
        })
    }

    /// The default file's data version (GET_BROKER_CLUSTER_ACL_INFO's `version`).
    pub fn default_version(&self) -> DataVersion {
        let files = self.files.lock_unpoisoned();
        files
            .iter()
            .find(|f| f.path == self.default_file)
            .and_then(|f| f.content.data_version)
            .unwrap_or_default()
    }

    /// Every file's path and data version.
    pub fn versions(&self) -> Vec<(PathBuf, DataVersion)> {
        let files = self.files.lock_unpoisoned();
        files
            .iter()
            .map(|f| (f.path.clone(), f.content.data_version.unwrap_or_default()))
            .collect()
    }

    /// Every file's content as last read or written.
    pub fn contents(&self) -> Vec<(PathBuf, PlainAclFile)> {
        let files = self.files.lock_unpoisoned();
        files
            .iter()
            .map(|f| (f.path.clone(), f.content.clone()))
            .collect()
    }

    /// Applies `change` to a copy of the files (it returns the index of the file it
    /// changed), compiles the result, and only then writes that file and swaps the rules.
    fn rewrite(
        &self,
        now_ms: i64,
        change: impl FnOnce(&mut [LoadedFile], usize) -> Result<usize, String>,
    ) -> Result<(), String> {
        let mut files = self.files.lock_unpoisoned();
        let mut copy: Vec<LoadedFile> = files
            .iter()
            .map(|f| LoadedFile {
                path: f.path.clone(),
                content: f.content.clone(),
                fingerprint: f.fingerprint,
            })
            .collect();
        let default_index = copy
            .iter()
            .position(|f| f.path == self.default_file)
            .ok_or("the default ACL file is missing")?;
        let changed = change(&mut copy, default_index)?;
        let rules = compile(&copy)?;
        let file = &mut copy[changed];
        file.content.data_version =
            Some(file.content.data_version.unwrap_or_default().next(now_ms));
        write_atomically(&file.path, &file.content.to_yaml())?;
        file.fingerprint = fingerprint(&file.path);
        *files = copy;
        *self.rules.write_unpoisoned() = Arc::new(rules);
        Ok(())
    }

    /// The ACL files in upstream's order: `conf/acl/` (sorted, for a stable first-wins
    /// rule), then the default file unless it is among them.
    fn file_paths(&self) -> Vec<PathBuf> {
        let mut paths = Vec::new();
        collect_yaml_files(&self.acl_dir, &mut paths, 0);
        paths.sort();
        if !paths.contains(&self.default_file) {
            paths.push(self.default_file.clone());
        }
        paths
    }

    fn read_all(&self) -> Result<(Vec<LoadedFile>, AclRules), String> {
        let paths = self.file_paths();
        if paths.len() > MAX_ACL_FILES {
            return Err(format!(
                "{} ACL files under {}; at most {MAX_ACL_FILES} are read",
                paths.len(),
                self.acl_dir.display()
            ));
        }
        let mut files = Vec::with_capacity(paths.len());
        for path in paths {
            let fingerprint = fingerprint(&path);
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let content =
                PlainAclFile::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            files.push(LoadedFile {
                path,
                content,
                fingerprint,
            });
        }
        let rules = compile(&files)?;
        Ok((files, rules))
    }
}

fn compile(files: &[LoadedFile]) -> Result<AclRules, String> {
    let names: Vec<String> = files.iter().map(|f| f.path.display().to_string()).collect();
    AclRules::compile(
        names
            .iter()
            .map(String::as_str)
            .zip(files.iter().map(|f| &f.content)),
    )
}

/// An UPDATE_AND_CREATE_ACL_CONFIG request: `None` fields keep the account's value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccountUpdate {
    pub access_key: String,
    pub secret_key: Option<String>,
    pub white_remote_address: Option<String>,
    pub admin: Option<bool>,
    pub default_topic_perm: Option<String>,
    pub default_group_perm: Option<String>,
    pub topic_perms: Option<Vec<String>>,
    pub group_perms: Option<Vec<String>>,
}

impl AccountUpdate {
    fn check(&self) -> Result<(), String> {
        let short = |k: &str| k.len() <= crate::config::KEY_MIN_LENGTH;
        if short(&self.access_key) {
            return Err(format!(
                "The accessKey={} cannot be null and length should longer than 6",
                self.access_key
            ));
        }
        if self.secret_key.as_deref().is_some_and(short) {
            return Err("The secretKey=**** value length should longer than 6".into());
        }
        for entry in self.topic_perms.iter().chain(&self.group_perms).flatten() {
            parse_resource_perm(entry)?;
        }
        if let Some(a) = &self.white_remote_address {
            crate::address::AddressPattern::parse(a)?;
        }
        Ok(())
    }

    fn apply(&self, account: &mut PlainAccessConfig) {
        account.access_key = self.access_key.clone();
        let set = |dst: &mut String, src: &Option<String>| {
            if let Some(v) = src {
                dst.clone_from(v);
            }
        };
        set(&mut account.secret_key, &self.secret_key);
        set(
            &mut account.white_remote_address,
            &self.white_remote_address,
        );
        if let Some(admin) = self.admin {
            account.admin = admin;
        }
        if self.default_topic_perm.is_some() {
            account
                .default_topic_perm
                .clone_from(&self.default_topic_perm);
        }
        if self.default_group_perm.is_some() {
            account
                .default_group_perm
                .clone_from(&self.default_group_perm);
        }
        if let Some(p) = &self.topic_perms {
            account.topic_perms.clone_from(p);
        }
        if let Some(p) = &self.group_perms {
            account.group_perms.clone_from(p);
        }
    }
}

fn fingerprint(path: &Path) -> Fingerprint {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// Depth-bounded walk of `conf/acl/` for `.yml`/`.yaml` files.
fn collect_yaml_files(dir: &Path, out: &mut Vec<PathBuf>, depth: usize) {
    const MAX_DEPTH: usize = 8;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && depth < MAX_DEPTH {
            collect_yaml_files(&path, out, depth + 1);
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yml" | "yaml")
        ) {
            out.push(path);
        }
        if out.len() > MAX_ACL_FILES {
            return;
        }
    }
}

/// Writes a sibling temporary file and renames it over `path`, so a reader (this store's
/// reload or an operator's editor) never sees half a file.
fn write_atomically(path: &Path, text: &str) -> Result<(), String> {
    let tmp = path.with_extension("yml.tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::{sign, Credentials};

    struct Home(PathBuf);

    impl Drop for Home {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn home(name: &str) -> Home {
        let dir = std::env::temp_dir().join(format!("ringmq-acl-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("conf")).unwrap();
        Home(dir)
    }

    fn signed(ak: &str, sk: &str, topic: &str) -> RemotingCommand {
        let mut r = RemotingCommand::request(310, 1);
        r.ext_fields.insert("b", topic);
        sign(&mut r, &Credentials::new(ak, sk));
        r
    }

    fn lo() -> IpAddr {
        "127.0.0.1".parse().unwrap()
    }

    const PLAIN: &str = "accounts:\n  - accessKey: producer1\n    secretKey: secret-one\n    defaultTopicPerm: PUB\n";

    #[test]
    fn a_missing_default_file_is_created_empty_and_refuses_everyone() {
        let h = home("missing");
        let store = AclStore::open(&h.0, Path::new("conf/plain_acl.yml")).unwrap();
        assert!(h.0.join("conf/plain_acl.yml").exists());
        assert!(store
            .check(&signed("producer1", "secret-one", "T"), lo())
            .is_err());
    }

    #[test]
    fn edits_on_disk_are_picked_up_and_a_broken_edit_keeps_the_old_rules() {
        let h = home("reload");
        let file = h.0.join("conf/plain_acl.yml");
        std::fs::write(&file, PLAIN).unwrap();
        let store = AclStore::open(&h.0, Path::new("conf/plain_acl.yml")).unwrap();
        assert_eq!(
            store.check(&signed("producer1", "secret-one", "T"), lo()),
            Ok(())
        );
        assert!(!store.reload_if_changed());

        std::fs::write(&file, format!("{PLAIN}    topicPerms: [T=DENY]\n")).unwrap();
        assert!(store.reload_if_changed());
        assert!(store
            .check(&signed("producer1", "secret-one", "T"), lo())
            .is_err());

        std::fs::write(&file, "accounts:\n  - accessKey: [broken\n").unwrap();
        assert!(!store.reload_if_changed());
        assert!(store
            .check(&signed("producer1", "secret-one", "T"), lo())
            .is_err());
        assert_eq!(
            store.check(&signed("producer1", "secret-one", "U"), lo()),
            Ok(())
        );
    }

    #[test]
    fn files_under_conf_acl_join_the_default_file() {
        let h = home("dir");
        std::fs::create_dir_all(h.0.join("conf/acl/team")).unwrap();
        std::fs::write(h.0.join("conf/acl/team/a.yaml"), PLAIN).unwrap();
        std::fs::write(h.0.join("conf/acl/notes.txt"), "not acl").unwrap();
        let store = AclStore::open(&h.0, Path::new("conf/plain_acl.yml")).unwrap();
        assert_eq!(
            store.check(&signed("producer1", "secret-one", "T"), lo()),
            Ok(())
        );
        assert_eq!(store.versions().len(), 2);
    }

    #[test]
    fn updates_rewrite_the_accounts_file_and_bump_its_version() {
        let h = home("update");
        std::fs::create_dir_all(h.0.join("conf/acl")).unwrap();
        let team = h.0.join("conf/acl/team.yml");
        std::fs::write(&team, PLAIN).unwrap();
        let store = AclStore::open(&h.0, Path::new("conf/plain_acl.yml")).unwrap();

        let change = AccountUpdate {
            access_key: "producer1".into(),
            topic_perms: Some(vec!["T=DENY".into()]),
            ..Default::default()
        };
        store.update_account(&change, 1_000).unwrap();
        let written = PlainAclFile::parse(&std::fs::read_to_string(&team).unwrap()).unwrap();
        assert_eq!(written.accounts[0].topic_perms, ["T=DENY"]);
        assert_eq!(written.accounts[0].secret_key, "secret-one", "kept");
        assert_eq!(
            written.data_version,
            Some(DataVersion {
                timestamp: 1_000,
                counter: 1
            })
        );
        assert!(store
            .check(&signed("producer1", "secret-one", "T"), lo())
            .is_err());
        assert!(!store.reload_if_changed(), "its own write is not a change");

        let new = AccountUpdate {
            access_key: "consumer9".into(),
            secret_key: Some("secret-nine".into()),
            default_topic_perm: Some("PUB".into()),
            ..Default::default()
        };
        store.update_account(&new, 2_000).unwrap();
        assert_eq!(
            store.check(&signed("consumer9", "secret-nine", "T"), lo()),
            Ok(())
        );
        assert_eq!(store.default_version().counter, 1);

        store.delete_account("consumer9", 3_000).unwrap();
        assert!(store
            .check(&signed("consumer9", "secret-nine", "T"), lo())
            .is_err());
        assert_eq!(
            store.default_version(),
            DataVersion {
                timestamp: 3_000,
                counter: 2
            }
        );
        assert!(store.delete_account("consumer9", 4_000).is_err());

        store
            .update_global_white(vec!["127.0.0.*".into()], None, 5_000)
            .unwrap();
        assert_eq!(store.check(&RemotingCommand::request(17, 1), lo()), Ok(()));
        assert!(store
            .update_global_white(vec!["1.2.3.{x}".into()], None, 6_000)
            .is_err());
    }

    #[test]
    fn bad_updates_change_nothing() {
        let h = home("badupdate");
        let store = AclStore::open(&h.0, Path::new("conf/plain_acl.yml")).unwrap();
        for bad in [
            AccountUpdate {
                access_key: "short".into(),
                ..Default::default()
            },
            AccountUpdate {
                access_key: "longenough".into(),
                secret_key: Some("secret-x".into()),
                topic_perms: Some(vec!["T=EVERYTHING".into()]),
                ..Default::default()
            },
            // A new account needs a secret.
            AccountUpdate {
                access_key: "longenough".into(),
                ..Default::default()
            },
        ] {
            assert!(store.update_account(&bad, 1).is_err(), "{bad:?}");
        }
        assert_eq!(store.default_version(), DataVersion::default());
        assert_eq!(std::fs::read_to_string(store.default_file()).unwrap(), "");
    }
}
