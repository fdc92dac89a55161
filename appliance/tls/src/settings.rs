//! Upstream's TLS settings (`TlsSystemConfig`): the `tls.*` keys, their defaults, and where
//! they are read from.
//!
//! Apache RocketMQ reads these keys from Java system properties (`-Dtls.server.mode=...`),
//! then lets the file named by `tls.config.file` (default `/etc/rocketmq/tls.properties`)
//! override them when it exists. ringmq takes the same keys from the process's own
//! configuration (`broker.conf`, the namesrv's `-c` file, a tool's flags) in the role of
//! the system properties, then applies the same file the same way.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use ringmq_remoting::body::kv::Properties;

/// `tls.server.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// Plain connections only.
    Disabled,
    /// TLS and plain connections on one port, told apart by the first byte a client sends.
    Permissive,
    /// TLS connections only; a plain client is disconnected.
    Enforcing,
}

impl FromStr for TlsMode {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim() {
            "disabled" => Ok(Self::Disabled),
            "permissive" => Ok(Self::Permissive),
            "enforcing" => Ok(Self::Enforcing),
            other => Err(format!(
                "`{other}` is not a TLS mode (disabled, permissive or enforcing)"
            )),
        }
    }
}

impl fmt::Display for TlsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Disabled => "disabled",
            Self::Permissive => "permissive",
            Self::Enforcing => "enforcing",
        })
    }
}

/// `tls.server.need.client.auth`: whether the server asks for a client certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    /// Asked for; a client without one is still served.
    Optional,
    /// A client without a certificate fails the handshake.
    Require,
}

impl FromStr for ClientAuth {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim() {
            "none" => Ok(Self::None),
            "optional" => Ok(Self::Optional),
            "require" => Ok(Self::Require),
            other => Err(format!(
                "`{other}` is not a client-auth mode (none, optional or require)"
            )),
        }
    }
}

/// Every `tls.*` key and its value after defaults, configuration and file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    pub server_mode: TlsMode,
    /// `tls.test.mode.enable` (default true): the server uses a self-signed certificate
    /// made at start and the client trusts any server.
    pub test_mode: bool,
    pub server_need_client_auth: ClientAuth,
    pub server_key_path: Option<PathBuf>,
    pub server_key_password: Option<String>,
    pub server_cert_path: Option<PathBuf>,
    /// Verify client certificates against `server_trust_cert_path`; when false any client
    /// certificate is accepted (upstream's insecure trust manager).
    pub server_auth_client: bool,
    pub server_trust_cert_path: Option<PathBuf>,
    /// `tls.enable`: the process's own outgoing Remoting connections use TLS.
    pub client_enable: bool,
    pub client_key_path: Option<PathBuf>,
    pub client_key_password: Option<String>,
    pub client_cert_path: Option<PathBuf>,
    /// Verify the server's chain against `client_trust_cert_path` (the name in the
    /// certificate is not compared with the address dialled, as upstream's clients do not).
    pub client_auth_server: bool,
    pub client_trust_cert_path: Option<PathBuf>,
    /// `tls.config.file`.
    pub config_file: PathBuf,
}

/// Upstream's default `tls.config.file`.
pub const DEFAULT_CONFIG_FILE: &str = "/etc/rocketmq/tls.properties";

/// The keys [`TlsSettings`] reads, for configuration code that sorts known keys from
/// unknown ones.
pub const KEYS: &[&str] = &[
    "tls.server.mode",
    "tls.test.mode.enable",
    "tls.server.need.client.auth",
    "tls.server.keyPath",
    "tls.server.keyPassword",
    "tls.server.certPath",
    "tls.server.authClient",
    "tls.server.trustCertPath",
    "tls.enable",
    "tls.client.keyPath",
    "tls.client.keyPassword",
    "tls.client.certPath",
    "tls.client.authServer",
    "tls.client.trustCertPath",
    "tls.config.file",
];

impl Default for TlsSettings {
    /// Upstream's defaults: permissive server in test mode, clients without TLS.
    fn default() -> Self {
        Self {
            server_mode: TlsMode::Permissive,
            test_mode: true,
            server_need_client_auth: ClientAuth::None,
            server_key_path: None,
            server_key_password: None,
            server_cert_path: None,
            server_auth_client: false,
            server_trust_cert_path: None,
            client_enable: false,
            client_key_path: None,
            client_key_password: None,
            client_cert_path: None,
            client_auth_server: false,
            client_trust_cert_path: None,
            config_file: PathBuf::from(DEFAULT_CONFIG_FILE),
        }
    }
}

impl TlsSettings {
    /// Defaults, then every `tls.*` key `lookup` knows, then the `tls.config.file` when it
    /// exists (its keys win, as upstream's). Fails naming the key and the source of a
    /// value that does not parse, or the file when it cannot be read.
    pub fn resolve(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let mut settings = Self::default();
        for key in KEYS {
            if let Some(value) = lookup(key) {
                settings
                    .set(key, &value)
                    .map_err(|e| format!("{key}: {e}"))?;
            }
        }
        let file = settings.config_file.clone();
        settings.apply_file(&file)?;
        Ok(settings)
    }

    /// Applies the keys of a `tls.properties` file; a missing file changes nothing.
    pub fn apply_file(&mut self, path: &Path) -> Result<(), String> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        let properties =
            Properties::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        for (key, value) in properties.iter() {
            // The file cannot name another file.
            if key != "tls.config.file" && KEYS.contains(&key) {
                self.set(key, value)
                    .map_err(|e| format!("{}: {key}: {e}", path.display()))?;
            }
        }
        Ok(())
    }

    /// Sets one key; unknown keys are ignored (they belong to someone else).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let path = || non_empty(value).map(PathBuf::from);
        match key {
            "tls.server.mode" => self.server_mode = value.parse()?,
            "tls.test.mode.enable" => self.test_mode = parse_bool(value)?,
            "tls.server.need.client.auth" => self.server_need_client_auth = value.parse()?,
            "tls.server.keyPath" => self.server_key_path = path(),
            "tls.server.keyPassword" => self.server_key_password = non_empty(value),
            "tls.server.certPath" => self.server_cert_path = path(),
            "tls.server.authClient" => self.server_auth_client = parse_bool(value)?,
            "tls.server.trustCertPath" => self.server_trust_cert_path = path(),
            "tls.enable" => self.client_enable = parse_bool(value)?,
            "tls.client.keyPath" => self.client_key_path = path(),
            "tls.client.keyPassword" => self.client_key_password = non_empty(value),
            "tls.client.certPath" => self.client_cert_path = path(),
            "tls.client.authServer" => self.client_auth_server = parse_bool(value)?,
            "tls.client.trustCertPath" => self.client_trust_cert_path = path(),
            "tls.config.file" => {
                self.config_file = path().unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_FILE))
            }
            _ => {}
        }
        Ok(())
    }
}

fn non_empty(value: &str) -> Option<String> {
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_string())
}

/// Java's `Boolean.parseBoolean` reads anything but "true" as false; a typo there would
/// silently turn TLS off, so only true and false are accepted.
fn parse_bool(value: &str) -> Result<bool, String> {
    match value.trim() {
        v if v.eq_ignore_ascii_case("true") => Ok(true),
        v if v.eq_ignore_ascii_case("false") => Ok(false),
        other => Err(format!("`{other}` is not true or false")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_are_upstreams() {
        let s = TlsSettings::resolve(lookup(&[("tls.config.file", "/nonexistent/tls")]))
            .expect("defaults");
        assert_eq!(s.server_mode, TlsMode::Permissive);
        assert!(s.test_mode);
        assert_eq!(s.server_need_client_auth, ClientAuth::None);
        assert!(!s.client_enable && !s.client_auth_server && !s.server_auth_client);
    }

    #[test]
    fn the_file_overrides_the_configuration() {
        let dir = std::env::temp_dir().join(format!("ringmq-tls-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("tls.properties");
        std::fs::write(
            &file,
            "tls.server.mode=enforcing\ntls.server.certPath=/etc/x/server.pem\ntls.config.file=/elsewhere\n",
        )
        .unwrap();
        let s = TlsSettings::resolve(lookup(&[
            ("tls.config.file", file.to_str().unwrap()),
            ("tls.server.mode", "disabled"),
            ("tls.test.mode.enable", "false"),
        ]))
        .expect("resolve");
        assert_eq!(s.server_mode, TlsMode::Enforcing);
        assert!(!s.test_mode);
        assert_eq!(s.server_cert_path, Some(PathBuf::from("/etc/x/server.pem")));
        assert_eq!(s.config_file, file);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_values_name_their_key() {
        let err = TlsSettings::resolve(lookup(&[("tls.server.mode", "strict")])).unwrap_err();
        assert!(err.starts_with("tls.server.mode:"), "{err}");
        let err = TlsSettings::resolve(lookup(&[("tls.enable", "yes")])).unwrap_err();
        assert!(err.contains("tls.enable"), "{err}");
        let err =
            TlsSettings::resolve(lookup(&[("tls.server.need.client.auth", "always")])).unwrap_err();
        assert!(err.contains("need.client.auth"), "{err}");
    }
}
