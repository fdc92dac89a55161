//! One plain ACL file (`plain_acl.yml`) as data: read from the YAML operators write and
//! written back the way upstream writes it after an update (block style, `dataVersion`
//! first-element form). Checking the accounts' keys, patterns and permissions is
//! [`crate::validator`]'s job when it compiles the files.

use yaml_rust2::yaml::{Hash, Yaml};
use yaml_rust2::{YamlEmitter, YamlLoader};

/// Access and secret keys must be longer than this (upstream's `ACCESS_KEY_MIN_LENGTH`).
pub const KEY_MIN_LENGTH: usize = 6;

/// One `accounts` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlainAccessConfig {
    pub access_key: String,
    pub secret_key: String,
    /// Blank: no address is trusted without a signature.
    pub white_remote_address: String,
    pub admin: bool,
    /// `None` reads as DENY.
    pub default_topic_perm: Option<String>,
    pub default_group_perm: Option<String>,
    /// `topic=PERM` entries.
    pub topic_perms: Vec<String>,
    /// `group=PERM` entries.
    pub group_perms: Vec<String>,
}

/// The `dataVersion` list's first element, as upstream stores it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DataVersion {
    pub timestamp: i64,
    pub counter: i64,
}

impl DataVersion {
    /// The next version, as upstream's `DataVersion.nextVersion` moves it.
    pub fn next(self, now_ms: i64) -> DataVersion {
        DataVersion {
            timestamp: now_ms,
            counter: self.counter + 1,
        }
    }

    /// `{"counter":N,"timestamp":T}`, upstream's `DataVersion.toJson` (keys in that order,
    /// plus `stateVersion` as 5.x adds it).
    pub fn to_json(self) -> String {
        format!(
            "{{\"counter\":{},\"stateVersion\":0,\"timestamp\":{}}}",
            self.counter, self.timestamp
        )
    }
}

/// One ACL file's content.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlainAclFile {
    pub global_white_remote_addresses: Vec<String>,
    pub accounts: Vec<PlainAccessConfig>,
    /// Absent in a file an operator wrote by hand.
    pub data_version: Option<DataVersion>,
}

impl PlainAclFile {
    /// Reads the file's YAML. An empty document is an empty file, as upstream treats it.
    pub fn parse(text: &str) -> Result<PlainAclFile, String> {
        let docs = YamlLoader::load_from_str(text).map_err(|e| format!("not valid YAML: {e}"))?;
        let Some(root) = docs.into_iter().next() else {
            return Ok(PlainAclFile::default());
        };
        let root = match root {
            Yaml::Hash(h) => h,
            Yaml::Null => return Ok(PlainAclFile::default()),
            other => return Err(format!("the top level must be a mapping, found {other:?}")),
        };
        let mut file = PlainAclFile {
            global_white_remote_addresses: string_list(&root, "globalWhiteRemoteAddresses")?,
            ..Default::default()
        };
        if let Some(accounts) = get(&root, "accounts") {
            let Yaml::Array(items) = accounts else {
                return Err("accounts must be a list".into());
            };
            for item in items {
                file.accounts.push(account(item)?);
            }
        }
        if let Some(Yaml::Array(versions)) = get(&root, "dataVersion") {
            if let Some(Yaml::Hash(first)) = versions.first() {
                file.data_version = Some(DataVersion {
                    timestamp: integer(first, "timestamp")?,
                    counter: integer(first, "counter")?,
                });
            }
        }
        Ok(file)
    }

    /// The file's YAML as upstream writes it after an update: block style, the three
    /// top-level keys, an account's absent fields left out.
    pub fn to_yaml(&self) -> String {
        let mut root = Hash::new();
        root.insert(
            key("globalWhiteRemoteAddresses"),
            strings(&self.global_white_remote_addresses),
        );
        let accounts = self.accounts.iter().map(account_yaml).collect();
        root.insert(key("accounts"), Yaml::Array(accounts));
        if let Some(v) = self.data_version {
            let mut h = Hash::new();
            h.insert(key("counter"), Yaml::Integer(v.counter));
            h.insert(key("timestamp"), Yaml::Integer(v.timestamp));
            root.insert(key("dataVersion"), Yaml::Array(vec![Yaml::Hash(h)]));
        }
        let mut out = String::new();
        YamlEmitter::new(&mut out)
            .dump(&Yaml::Hash(root))
            .expect("writing YAML into a String cannot fail");
        out.push('\n');
        out
    }
}

fn key(k: &str) -> Yaml {
    Yaml::String(k.to_string())
}

fn strings(items: &[String]) -> Yaml {
    Yaml::Array(items.iter().map(|s| Yaml::String(s.clone())).collect())
}

fn account_yaml(a: &PlainAccessConfig) -> Yaml {
    let mut h = Hash::new();
    h.insert(key("accessKey"), Yaml::String(a.access_key.clone()));
    h.insert(key("secretKey"), Yaml::String(a.secret_key.clone()));
    h.insert(
        key("whiteRemoteAddress"),
        Yaml::String(a.white_remote_address.clone()),
    );
    h.insert(key("admin"), Yaml::Boolean(a.admin));
    for (k, v) in [
        ("defaultTopicPerm", &a.default_topic_perm),
        ("defaultGroupPerm", &a.default_group_perm),
    ] {
        if let Some(v) = v {
            h.insert(key(k), Yaml::String(v.clone()));
        }
    }
    h.insert(key("topicPerms"), strings(&a.topic_perms));
    h.insert(key("groupPerms"), strings(&a.group_perms));
    Yaml::Hash(h)
}

fn get<'a>(h: &'a Hash, k: &str) -> Option<&'a Yaml> {
    h.get(&key(k)).filter(|v| !matches!(v, Yaml::Null))
}

/// A scalar as the text Java's YAML reader would hand a `String` field: numbers and
/// booleans keep their written form (`secretKey: 12345678` is the secret "12345678").
fn scalar(v: &Yaml) -> Option<String> {
    match v {
        Yaml::String(s) | Yaml::Real(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

fn string_field(h: &Hash, k: &str) -> Result<Option<String>, String> {
    match get(h, k) {
        None => Ok(None),
        Some(v) => scalar(v)
            .map(Some)
            .ok_or_else(|| format!("{k} must be a single value")),
    }
}

fn string_list(h: &Hash, k: &str) -> Result<Vec<String>, String> {
    match get(h, k) {
        None => Ok(Vec::new()),
        Some(Yaml::Array(items)) => items
            .iter()
            .filter(|v| !matches!(v, Yaml::Null))
            .map(|v| scalar(v).ok_or_else(|| format!("{k} must be a list of values")))
            .collect(),
        // One value where a list was meant: upstream's reader refuses it; accepting it as a
        // one-element list is kinder and means the same.
        Some(v) => scalar(v)
            .map(|s| vec![s])
            .ok_or_else(|| format!("{k} must be a list of values")),
    }
}

fn integer(h: &Hash, k: &str) -> Result<i64, String> {
    match get(h, k) {
        None => Ok(0),
        Some(Yaml::Integer(i)) => Ok(*i),
        Some(v) => scalar(v)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("dataVersion {k} must be a number")),
    }
}

fn account(item: &Yaml) -> Result<PlainAccessConfig, String> {
    let Yaml::Hash(h) = item else {
        return Err("each accounts entry must be a mapping".into());
    };
    let admin = match get(h, "admin") {
        None => false,
        Some(Yaml::Boolean(b)) => *b,
        Some(v) => scalar(v).is_some_and(|s| s.eq_ignore_ascii_case("true")),
    };
    Ok(PlainAccessConfig {
        access_key: string_field(h, "accessKey")?.unwrap_or_default(),
        secret_key: string_field(h, "secretKey")?.unwrap_or_default(),
        white_remote_address: string_field(h, "whiteRemoteAddress")?.unwrap_or_default(),
        admin,
        default_topic_perm: string_field(h, "defaultTopicPerm")?,
        default_group_perm: string_field(h, "defaultGroupPerm")?,
        topic_perms: string_list(h, "topicPerms")?,
        group_perms: string_list(h, "groupPerms")?,
    })
}

/// The account upstream's tools sign with: `accessKey` and `secretKey` at the top of
/// `conf/tools.yml`. `None` when the file is missing, unreadable or lacks either key, as
/// upstream's tools then send unsigned requests.
pub fn tools_credentials(text: &str) -> Option<crate::Credentials> {
    let docs = YamlLoader::load_from_str(text).ok()?;
    let Some(Yaml::Hash(root)) = docs.into_iter().next() else {
        return None;
    };
    let field = |k: &str| {
        get(&root, k)
            .and_then(scalar)
            .filter(|v| !v.trim().is_empty())
    };
    Some(crate::Credentials::new(
        field("accessKey")?,
        field("secretKey")?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upstream's sample file, as shipped in `distribution/conf/plain_acl.yml`.
    pub(crate) const UPSTREAM_SAMPLE: &str = "\
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
";

    #[test]
    fn upstreams_sample_reads_with_numbers_as_secrets() {
        let f = PlainAclFile::parse(UPSTREAM_SAMPLE).unwrap();
        assert_eq!(
            f.global_white_remote_addresses,
            ["10.10.103.*", "192.168.0.*"]
        );
        assert_eq!(f.accounts.len(), 2);
        let a = &f.accounts[0];
        assert_eq!(
            (a.access_key.as_str(), a.secret_key.as_str()),
            ("RocketMQ", "12345678")
        );
        assert_eq!(a.white_remote_address, "");
        assert!(!a.admin);
        assert_eq!(a.default_topic_perm.as_deref(), Some("DENY"));
        assert_eq!(
            a.topic_perms,
            ["topicA=DENY", "topicB=PUB|SUB", "topicC=SUB"]
        );
        assert_eq!(a.group_perms.len(), 3);
        assert!(f.accounts[1].admin);
        assert_eq!(f.accounts[1].white_remote_address, "192.168.1.*");
        assert_eq!(f.data_version, None);
    }

    #[test]
    fn written_files_read_back_the_same_and_keep_the_version() {
        let mut f = PlainAclFile::parse(UPSTREAM_SAMPLE).unwrap();
        f.data_version = Some(DataVersion {
            timestamp: 1_700_000_000_000,
            counter: 3,
        });
        f.accounts[1].secret_key = "0001234567".into();
        let text = f.to_yaml();
        assert_eq!(PlainAclFile::parse(&text).unwrap(), f, "{text}");
        assert!(text.contains("dataVersion:"), "{text}");
    }

    #[test]
    fn tools_yml_gives_the_tools_account_or_nothing() {
        let c = tools_credentials("accessKey: rocketmq2\nsecretKey: 12345678\n").unwrap();
        assert_eq!(
            (c.access_key.as_str(), c.secret_key.as_str()),
            ("rocketmq2", "12345678")
        );
        assert!(tools_credentials("accessKey: rocketmq2\n").is_none());
        assert!(tools_credentials("accessKey: ''\nsecretKey: x\n").is_none());
        assert!(tools_credentials("[").is_none());
    }

    #[test]
    fn empty_and_malformed_files() {
        assert_eq!(PlainAclFile::parse("").unwrap(), PlainAclFile::default());
        assert_eq!(
            PlainAclFile::parse("# nothing\n").unwrap(),
            PlainAclFile::default()
        );
        assert!(PlainAclFile::parse("accounts: [").is_err());
        assert!(PlainAclFile::parse("- a\n- b\n").is_err());
        assert!(PlainAclFile::parse("accounts: 3\n").is_err());
        assert!(PlainAclFile::parse("accounts:\n  - accessKey: [1, 2]\n").is_err());
    }
}
