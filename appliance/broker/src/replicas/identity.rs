//! The broker's controller identity files (upstream `BrokerMetadata`): `brokerIdentity`
//! under the store root holds `cluster#brokerName#id` once the controller applied the id;
//! `brokerIdentity-temp` holds `cluster#brokerName#id#registerCheckCode` while the id is
//! being applied, so a broker that dies in between asks for the same id again.

use std::path::{Path, PathBuf};

pub const FILE_NAME: &str = "brokerIdentity";
const TEMP_SUFFIX: &str = "-temp";

/// A broker's controller identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub cluster_name: String,
    pub broker_name: String,
    pub broker_id: i64,
    /// Only in the temporary file: `brokerAddr;timestamp`.
    pub register_check_code: Option<String>,
}

impl Identity {
    fn encode(&self) -> String {
        let base = format!(
            "{}#{}#{}",
            self.cluster_name, self.broker_name, self.broker_id
        );
        match &self.register_check_code {
            Some(code) => format!("{base}#{code}"),
            None => base,
        }
    }

    fn decode(text: &str, temp: bool) -> Result<Identity, String> {
        let parts: Vec<&str> = text.trim().split('#').collect();
        let wanted = if temp { 4 } else { 3 };
        if parts.len() < wanted || parts[..wanted].iter().any(|p| p.is_empty()) {
            return Err(format!(
                "expected {wanted} '#'-separated fields, got {text:?}"
            ));
        }
        let broker_id = parts[2]
            .parse()
            .map_err(|_| format!("broker id {:?} is not a number", parts[2]))?;
        Ok(Identity {
            cluster_name: parts[0].to_string(),
            broker_name: parts[1].to_string(),
            broker_id,
            register_check_code: temp.then(|| parts[3..].join("#")),
        })
    }
}

/// The two files of one store root.
pub struct IdentityFiles {
    path: PathBuf,
    temp_path: PathBuf,
}

impl IdentityFiles {
    pub fn in_store_root(root: &Path) -> Self {
        IdentityFiles {
            path: root.join(FILE_NAME),
            temp_path: root.join(format!("{FILE_NAME}{TEMP_SUFFIX}")),
        }
    }

    /// The applied identity, if the file exists.
    pub fn load(&self) -> Result<Option<Identity>, String> {
        read(&self.path, false)
    }

    /// The identity being applied, if the temporary file exists.
    pub fn load_temp(&self) -> Result<Option<Identity>, String> {
        read(&self.temp_path, true)
    }

    pub fn save_temp(&self, identity: &Identity) -> Result<(), String> {
        write(&self.temp_path, &identity.encode())
    }

    /// Records the applied identity and drops the temporary file.
    pub fn save(&self, identity: &Identity) -> Result<(), String> {
        let applied = Identity {
            register_check_code: None,
            ..identity.clone()
        };
        write(&self.path, &applied.encode())?;
        self.clear_temp()
    }

    /// Forgets an identity being applied (the controller refused it).
    pub fn clear_temp(&self) -> Result<(), String> {
        match std::fs::remove_file(&self.temp_path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(format!("cannot remove {}: {e}", self.temp_path.display()))
            }
            _ => Ok(()),
        }
    }
}

fn read(path: &Path, temp: bool) -> Result<Option<Identity>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Identity::decode(&text, temp)
            .map(Some)
            .map_err(|e| format!("{} is damaged: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    ringmq_store::write_config_file_atomic(path, text)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_hold_upstreams_hash_separated_fields() {
        let dir = std::env::temp_dir().join(format!("ringmq-identity-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let files = IdentityFiles::in_store_root(&dir);
        assert_eq!(files.load().unwrap(), None);
        let applying = Identity {
            cluster_name: "c".into(),
            broker_name: "broker-a".into(),
            broker_id: 2,
            register_check_code: Some("127.0.0.1:10911;1700000000000".into()),
        };
        files.save_temp(&applying).unwrap();
        let temp_text = std::fs::read_to_string(dir.join("brokerIdentity-temp")).unwrap();
        assert_eq!(temp_text, "c#broker-a#2#127.0.0.1:10911;1700000000000");
        assert_eq!(files.load_temp().unwrap(), Some(applying.clone()));
        files.save(&applying).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join(FILE_NAME)).unwrap(),
            "c#broker-a#2"
        );
        assert_eq!(files.load_temp().unwrap(), None, "the temporary file goes");
        assert_eq!(files.load().unwrap().map(|i| i.broker_id), Some(2));
        std::fs::write(dir.join(FILE_NAME), "c#broker-a#two").unwrap();
        assert!(files.load().unwrap_err().contains("not a number"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
