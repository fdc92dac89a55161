//! `ControllerConfig`: the controller's settings from `controller.conf` (or, embedded, from
//! `namesrv.conf`), with upstream's key names and defaults (spec features.md §g.6, §g.8),
//! printed back by GET_CONTROLLER_CONFIG and changed by UPDATE_CONTROLLER_CONFIG.
//!
//! Consensus keys. Upstream runs DLedger (default) or JRaft; ringmq runs one Raft group
//! (openraft) and reads either family:
//! - `controllerType=DLedger`: `controllerDLegerPeers` (`n0-host:port;n1-host:port;…`) and
//!   `controllerDLegerSelfId` (`n0`). Each peer address is where that controller serves
//!   both broker RPCs and Raft traffic, as a DLedger controller does, so brokers'
//!   `controllerAddr` lists the same addresses.
//! - `controllerType=jRaft`: `jRaftInitConf` lists the members and `jRaftServerId` names
//!   this one; `jRaftControllerRPCAddr` (same order) gives the addresses ringmq serves
//!   on, so the broker-facing addresses stay what they were. The JRaft group id, election
//!   time-out and snapshot interval keys are accepted; ringmq's own `ringmq.controller.*`
//!   keys tune elections.
//! - No peers: a one-member group on `listenPort` (19876).
//!
//! Any other `controllerType` is logged and treated as DLedger.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use ringmq_remoting::body::kv::Properties;

/// The standalone controller's default Remoting port.
pub const DEFAULT_LISTEN_PORT: u16 = 19876;

/// One member of the consensus group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// `n0` (DLedger) or `host:port` (JRaft): what GET_METADATA_INFO reports.
    pub id: String,
    /// Where the member serves broker RPCs and Raft traffic.
    pub addr: SocketAddr,
}

/// Keys UPDATE_CONTROLLER_CONFIG may change while running; every other key is read at
/// start only and is refused, as upstream refuses its black list.
pub const LIVE_KEYS: [&str; 4] = [
    "enableElectUncleanMaster",
    "notifyBrokerRoleChanged",
    "electMasterMaxRetryCount",
    "isProcessReadEvent",
];

#[derive(Debug, Clone, PartialEq)]
pub struct ControllerConfig {
    /// Every key as given or defaulted, printed in key order.
    values: BTreeMap<String, String>,
}

const DEFAULTS: [(&str, &str); 26] = [
    ("rocketmqHome", ""),
    ("configStorePath", ""),
    ("controllerType", "DLedger"),
    ("scanNotActiveBrokerInterval", "5000"),
    ("controllerThreadPoolNums", "16"),
    ("controllerRequestThreadPoolQueueCapacity", "50000"),
    ("controllerDLegerGroup", ""),
    ("controllerDLegerPeers", ""),
    ("controllerDLegerSelfId", ""),
    ("mappedFileSize", "1073741824"),
    ("controllerStorePath", ""),
    ("electMasterMaxRetryCount", "3"),
    ("enableElectUncleanMaster", "false"),
    ("isProcessReadEvent", "false"),
    ("notifyBrokerRoleChanged", "true"),
    ("scanInactiveMasterInterval", "5000"),
    ("configBlackList", "configBlackList;configStorePath"),
    ("jRaftGroupId", "jRaft-Controller"),
    ("jRaftServerId", "localhost:9880"),
    (
        "jRaftInitConf",
        "localhost:9880,localhost:9881,localhost:9882",
    ),
    (
        "jRaftControllerRPCAddr",
        "localhost:9770,localhost:9771,localhost:9772",
    ),
    ("jRaftElectionTimeoutMs", "1000"),
    ("jRaftSnapshotIntervalSecs", "3600"),
    ("listenPort", "19876"),
    ("bindAddress", "0.0.0.0"),
    ("metricsExporterType", "DISABLE"),
];

/// ringmq's own keys: Raft timing (milliseconds). A follower starts an election after
/// the leader's lease (the election maximum) plus a random election time-out, so a dead
/// leader is replaced after 1.5–2 s with these (`benches/controller/run.py` measures it).
const RINGMQ_DEFAULTS: [(&str, &str); 3] = [
    ("ringmq.controller.heartbeatIntervalMs", "100"),
    ("ringmq.controller.electionTimeoutMinMs", "500"),
    ("ringmq.controller.electionTimeoutMaxMs", "1000"),
];

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            values: DEFAULTS
                .iter()
                .chain(RINGMQ_DEFAULTS.iter())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }
}

/// A config read from text: the config, and the keys of the text it does not know.
#[derive(Debug, Clone)]
pub struct ConfigLoad {
    pub config: ControllerConfig,
    pub unknown_keys: Vec<String>,
}

impl ControllerConfig {
    /// Whether `key` is one of the controller's keys (a `namesrv.conf` carrying an
    /// embedded controller's keys uses this to keep them out of its unknown-key log).
    pub fn is_key(key: &str) -> bool {
        DEFAULTS
            .iter()
            .chain(RINGMQ_DEFAULTS.iter())
            .any(|(k, _)| *k == key)
            || key.starts_with("metrics")
    }

    pub fn from_properties(props: &Properties) -> ConfigLoad {
        let mut config = ControllerConfig::default();
        let mut unknown_keys = Vec::new();
        for (k, v) in props.iter() {
            if Self::is_key(k) {
                config.values.insert(k.to_owned(), v.trim().to_owned());
            } else {
                unknown_keys.push(k.to_owned());
            }
        }
        ConfigLoad {
            config,
            unknown_keys,
        }
    }

    fn text(&self, key: &str) -> &str {
        self.values.get(key).map(String::as_str).unwrap_or("")
    }

    fn int(&self, key: &str) -> Result<i64, String> {
        self.text(key)
            .parse()
            .map_err(|_| format!("{key}={:?} is not an integer", self.text(key)))
    }

    fn flag(&self, key: &str) -> bool {
        self.text(key).eq_ignore_ascii_case("true")
    }

    pub fn controller_type(&self) -> &str {
        self.text("controllerType")
    }

    pub fn is_jraft(&self) -> bool {
        self.controller_type().eq_ignore_ascii_case("jRaft")
    }

    pub fn group(&self) -> String {
        if self.is_jraft() {
            return self.text("jRaftGroupId").to_owned();
        }
        self.text("controllerDLegerGroup").to_owned()
    }

    pub fn listen_port(&self) -> Result<u16, String> {
        self.text("listenPort")
            .parse()
            .map_err(|_| format!("listenPort={:?} is not a port", self.text("listenPort")))
    }

    pub fn bind_address(&self) -> &str {
        self.text("bindAddress")
    }

    pub fn scan_not_active_broker_interval_ms(&self) -> u64 {
        self.int("scanNotActiveBrokerInterval")
            .ok()
            .filter(|v| *v > 0)
            .map_or(5_000, |v| v as u64)
    }

    pub fn elect_master_max_retry_count(&self) -> u32 {
        self.int("electMasterMaxRetryCount")
            .ok()
            .filter(|v| *v > 0)
            .map_or(3, |v| v.min(100) as u32)
    }

    pub fn enable_elect_unclean_master(&self) -> bool {
        self.flag("enableElectUncleanMaster")
    }

    pub fn notify_broker_role_changed(&self) -> bool {
        self.flag("notifyBrokerRoleChanged")
    }

    /// `controllerStorePath`, or upstream's default `$HOME/<controllerType>Controller`.
    pub fn store_path(&self) -> PathBuf {
        let given = self.text("controllerStorePath");
        if !given.is_empty() {
            return PathBuf::from(given);
        }
        let home = std::env::var("HOME").unwrap_or_else(|_| ".".to_owned());
        PathBuf::from(home).join(format!("{}Controller", self.controller_type()))
    }

    /// Raft timing: (heartbeat, election minimum, election maximum), in milliseconds.
    pub fn raft_timing_ms(&self) -> Result<(u64, u64, u64), String> {
        let get = |k: &str| -> Result<u64, String> {
            let v = self.int(k)?;
            u64::try_from(v)
                .ok()
                .filter(|v| *v > 0)
                .ok_or_else(|| format!("{k}={v} must be positive"))
        };
        let heartbeat = get("ringmq.controller.heartbeatIntervalMs")?;
        let min = get("ringmq.controller.electionTimeoutMinMs")?;
        let max = get("ringmq.controller.electionTimeoutMaxMs")?;
        if !(heartbeat < min && min < max) {
            return Err(format!(
                "Raft timing needs heartbeat < election minimum < election maximum; got {heartbeat} / {min} / {max} ms"
            ));
        }
        Ok((heartbeat, min, max))
    }

    /// The group's members and this controller's index among them. An empty peer list is a
    /// one-member group on `bindAddress:listenPort`.
    pub fn members(&self) -> Result<(Vec<Peer>, usize), String> {
        if self.is_jraft() {
            return self.jraft_members();
        }
        if !self.controller_type().eq_ignore_ascii_case("DLedger") {
            tracing::warn!(
                controller_type = self.controller_type(),
                "unknown controllerType; running the DLedger keys with ringmq's Raft group"
            );
        }
        let peers_text = self.text("controllerDLegerPeers");
        if peers_text.trim().is_empty() {
            return self.single_member();
        }
        let mut peers = Vec::new();
        for part in peers_text
            .split(';')
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            let (id, addr) = part.split_once('-').ok_or_else(|| {
                format!("controllerDLegerPeers entry {part:?} is not id-host:port")
            })?;
            peers.push(Peer {
                id: id.trim().to_owned(),
                addr: resolve(addr.trim(), "controllerDLegerPeers")?,
            });
        }
        let self_id = self.text("controllerDLegerSelfId");
        let me = peers.iter().position(|p| p.id == self_id).ok_or_else(|| {
            format!("controllerDLegerSelfId={self_id:?} is not in controllerDLegerPeers")
        })?;
        Ok((peers, me))
    }

    fn jraft_members(&self) -> Result<(Vec<Peer>, usize), String> {
        let list = |key: &str| -> Vec<String> {
            self.text(key)
                .split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect()
        };
        let members = list("jRaftInitConf");
        let rpc = list("jRaftControllerRPCAddr");
        if members.len() != rpc.len() || members.is_empty() {
            return Err(format!(
                "jRaftInitConf has {} members but jRaftControllerRPCAddr {} addresses",
                members.len(),
                rpc.len()
            ));
        }
        let self_id = self.text("jRaftServerId");
        let me = members
            .iter()
            .position(|m| m == self_id)
            .ok_or_else(|| format!("jRaftServerId={self_id:?} is not in jRaftInitConf"))?;
        let peers = members
            .into_iter()
            .zip(rpc)
            .map(|(id, addr)| {
                Ok(Peer {
                    id,
                    addr: resolve(&addr, "jRaftControllerRPCAddr")?,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok((peers, me))
    }

    fn single_member(&self) -> Result<(Vec<Peer>, usize), String> {
        let ip = self
            .bind_address()
            .parse::<std::net::IpAddr>()
            .map_err(|_| format!("bindAddress={:?} is not an IP address", self.bind_address()))?;
        let id = match self.text("controllerDLegerSelfId") {
            "" => "n0".to_owned(),
            id => id.to_owned(),
        };
        Ok((
            vec![Peer {
                id,
                addr: SocketAddr::new(ip, self.listen_port()?),
            }],
            0,
        ))
    }

    /// Properties text of every key (GET_CONTROLLER_CONFIG, `-p`).
    pub fn to_properties_text(&self) -> String {
        let mut props = Properties::new();
        for (k, v) in &self.values {
            props.set(k.as_str(), v.as_str());
        }
        props.to_text()
    }

    /// UPDATE_CONTROLLER_CONFIG: applies the live keys of `props`. Refuses the whole
    /// update, naming the key, when one is not live or does not parse.
    pub fn update(&mut self, props: &Properties) -> Result<(), String> {
        for (k, v) in props.iter() {
            if !LIVE_KEYS.contains(&k) {
                return Err(format!(
                    "{k} cannot be changed while the controller runs (live keys: {})",
                    LIVE_KEYS.join(", ")
                ));
            }
            let v = v.trim();
            let valid = match k {
                "electMasterMaxRetryCount" => v.parse::<i64>().is_ok_and(|n| n > 0),
                _ => v.eq_ignore_ascii_case("true") || v.eq_ignore_ascii_case("false"),
            };
            if !valid {
                return Err(format!("{k}={v:?} is not a valid value"));
            }
        }
        for (k, v) in props.iter() {
            self.values.insert(k.to_owned(), v.trim().to_owned());
        }
        Ok(())
    }
}

fn resolve(addr: &str, key: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    addr.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("{key}: {addr:?} is not host:port"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> ControllerConfig {
        ControllerConfig::from_properties(&Properties::parse(text).unwrap()).config
    }

    #[test]
    fn dledger_peers_name_the_members_and_this_one() {
        let c = load(
            "controllerDLegerGroup=g1\ncontrollerDLegerPeers=n0-127.0.0.1:9877;n1-127.0.0.1:9878;n2-127.0.0.1:9879\ncontrollerDLegerSelfId=n1\n",
        );
        let (peers, me) = c.members().unwrap();
        assert_eq!(peers.len(), 3);
        assert_eq!(me, 1);
        assert_eq!(peers[2].addr, "127.0.0.1:9879".parse().unwrap());
        assert_eq!(c.group(), "g1");
    }

    #[test]
    fn jraft_keys_map_members_to_their_rpc_addresses() {
        let c = load(
            "controllerType=jRaft\njRaftInitConf=127.0.0.1:9880,127.0.0.1:9881\njRaftControllerRPCAddr=127.0.0.1:9770,127.0.0.1:9771\njRaftServerId=127.0.0.1:9881\n",
        );
        let (peers, me) = c.members().unwrap();
        assert_eq!(me, 1);
        assert_eq!(peers[1].addr, "127.0.0.1:9771".parse().unwrap());
        assert_eq!(peers[1].id, "127.0.0.1:9881");
    }

    #[test]
    fn no_peers_is_one_member_on_the_listen_port_and_bad_peers_are_named() {
        let (peers, me) = load("").members().unwrap();
        assert_eq!((peers.len(), me), (1, 0));
        assert_eq!(peers[0].addr.port(), DEFAULT_LISTEN_PORT);
        let err = load("controllerDLegerPeers=n0-127.0.0.1:1\ncontrollerDLegerSelfId=n9\n")
            .members()
            .unwrap_err();
        assert!(err.contains("n9"), "{err}");
        assert!(load("controllerDLegerPeers=garbage\n").members().is_err());
    }

    #[test]
    fn store_path_defaults_under_home_by_type_and_updates_touch_live_keys_only() {
        let mut c = load("unknownKey=1\n");
        assert!(c.store_path().ends_with("DLedgerController"));
        let live = Properties::parse("enableElectUncleanMaster=true\n").unwrap();
        c.update(&live).unwrap();
        assert!(c.enable_elect_unclean_master());
        let fixed = Properties::parse("controllerStorePath=/x\n").unwrap();
        assert!(c
            .update(&fixed)
            .unwrap_err()
            .contains("controllerStorePath"));
        let bad = Properties::parse("electMasterMaxRetryCount=zero\n").unwrap();
        assert!(c.update(&bad).is_err());
        assert!(c
            .to_properties_text()
            .contains("enableElectUncleanMaster=true"));
    }
}
