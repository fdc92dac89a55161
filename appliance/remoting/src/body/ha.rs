//! `HARuntimeInfo`, the body of GET_BROKER_HA_STATUS (907) that `mqadmin haStatus`
//! prints: a master lists its slave connections (`HAConnectionRuntimeInfo`: acknowledged
//! offset, `diff` behind the master, in-sync flag), a slave describes its link to the
//! master (`HAClientRuntimeInfo`). Keys are written in fastjson's order (sorted), and
//! `HAClientRuntimeInfo.isActivated` goes over the wire as `activated`, as fastjson names
//! a boolean `isX` getter.

use crate::json::{self, read, BodyError, ObjectBuilder, Value};

/// One slave connection as its master sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HaConnectionRuntimeInfo {
    /// The slave's address as the HA connection sees it.
    pub addr: String,
    /// The CommitLog offset the slave last reported holding.
    pub slave_ack_offset: i64,
    /// Bytes the slave is behind the master's CommitLog max offset.
    pub diff: i64,
    /// Whether the slave is within `haMaxGapNotInSync` of the master.
    pub in_sync: bool,
    pub transferred_byte_in_second: i64,
    /// The offset the master started sending this slave from.
    pub transfer_from_where: i64,
}

/// A slave's link to its master.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HaClientRuntimeInfo {
    pub master_addr: Option<String>,
    pub transferred_byte_in_second: i64,
    /// The slave's CommitLog max offset.
    pub max_offset: i64,
    pub last_read_timestamp: i64,
    pub last_write_timestamp: i64,
    pub master_flush_offset: i64,
    pub activated: bool,
}

/// `HARuntimeInfo`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HaRuntimeInfo {
    pub master: bool,
    /// The master's CommitLog max offset (0 on a slave).
    pub master_commit_log_max_offset: i64,
    pub in_sync_slave_nums: i32,
    pub ha_connection_info: Vec<HaConnectionRuntimeInfo>,
    pub ha_client_runtime_info: HaClientRuntimeInfo,
}

impl HaConnectionRuntimeInfo {
    fn to_value(&self) -> Value {
        ObjectBuilder::new()
            .field("addr", self.addr.as_str())
            .field("diff", self.diff)
            .field("inSync", self.in_sync)
            .field("slaveAckOffset", self.slave_ack_offset)
            .field("transferFromWhere", self.transfer_from_where)
            .field("transferredByteInSecond", self.transferred_byte_in_second)
            .build()
    }

    fn from_value(v: &Value, path: &str) -> Result<Self, BodyError> {
        Ok(Self {
            addr: read::opt_string(v, "addr", path)?.unwrap_or_default(),
            slave_ack_offset: read::i64_or(v, "slaveAckOffset", path, 0)?,
            diff: read::i64_or(v, "diff", path, 0)?,
            in_sync: read::bool_or(v, "inSync", path, false)?,
            transferred_byte_in_second: read::i64_or(v, "transferredByteInSecond", path, 0)?,
            transfer_from_where: read::i64_or(v, "transferFromWhere", path, 0)?,
        })
    }
}

impl HaClientRuntimeInfo {
    fn to_value(&self) -> Value {
        ObjectBuilder::new()
            .field("activated", self.activated)
            .field("lastReadTimestamp", self.last_read_timestamp)
            .field("lastWriteTimestamp", self.last_write_timestamp)
            .field_opt("masterAddr", self.master_addr.as_deref())
            .field("masterFlushOffset", self.master_flush_offset)
            .field("maxOffset", self.max_offset)
            .field("transferredByteInSecond", self.transferred_byte_in_second)
            .build()
    }

    fn from_value(v: &Value, path: &str) -> Result<Self, BodyError> {
        Ok(Self {
            master_addr: read::opt_string(v, "masterAddr", path)?,
            transferred_byte_in_second: read::i64_or(v, "transferredByteInSecond", path, 0)?,
            max_offset: read::i64_or(v, "maxOffset", path, 0)?,
            last_read_timestamp: read::i64_or(v, "lastReadTimestamp", path, 0)?,
            last_write_timestamp: read::i64_or(v, "lastWriteTimestamp", path, 0)?,
            master_flush_offset: read::i64_or(v, "masterFlushOffset", path, 0)?,
            activated: read::bool_or(v, "activated", path, false)?,
        })
    }
}

impl HaRuntimeInfo {
    pub fn encode(&self) -> String {
        ObjectBuilder::new()
            .field(
                "haClientRuntimeInfo",
                self.ha_client_runtime_info.to_value(),
            )
            .field(
                "haConnectionInfo",
                Value::Array(
                    self.ha_connection_info
                        .iter()
                        .map(HaConnectionRuntimeInfo::to_value)
                        .collect(),
                ),
            )
            .field("inSyncSlaveNums", self.in_sync_slave_nums)
            .field("master", self.master)
            .field(
                "masterCommitLogMaxOffset",
                self.master_commit_log_max_offset,
            )
            .build()
            .to_json()
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        let v = json::parse(body)?;
        if v.as_object().is_none() {
            return Err(BodyError::field("", "an HARuntimeInfo object"));
        }
        let connections = match v.get_present("haConnectionInfo") {
            None => Vec::new(),
            Some(list) => list
                .as_array()
                .ok_or_else(|| BodyError::field("haConnectionInfo", "an array"))?
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    HaConnectionRuntimeInfo::from_value(c, &format!("haConnectionInfo[{i}]"))
                })
                .collect::<Result<_, _>>()?,
        };
        let client = match v.get_present("haClientRuntimeInfo") {
            None => HaClientRuntimeInfo::default(),
            Some(c) => HaClientRuntimeInfo::from_value(c, "haClientRuntimeInfo")?,
        };
        Ok(Self {
            master: read::bool_or(&v, "master", "", false)?,
            master_commit_log_max_offset: read::i64_or(&v, "masterCommitLogMaxOffset", "", 0)?,
            in_sync_slave_nums: read::i32_or(&v, "inSyncSlaveNums", "", 0)?,
            ha_connection_info: connections,
            ha_client_runtime_info: client,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A master's answer as upstream's broker writes it (fastjson, sorted keys).
    const MASTER: &str = r#"{"haClientRuntimeInfo":{"activated":false,"lastReadTimestamp":0,"lastWriteTimestamp":0,"masterFlushOffset":0,"maxOffset":0,"transferredByteInSecond":0},"haConnectionInfo":[{"addr":"127.0.0.1:51234","diff":1024,"inSync":true,"slaveAckOffset":4096,"transferFromWhere":0,"transferredByteInSecond":2048}],"inSyncSlaveNums":1,"master":true,"masterCommitLogMaxOffset":5120}"#;

    #[test]
    fn master_answer_round_trips_byte_for_byte() {
        let info = HaRuntimeInfo::decode(MASTER.as_bytes()).unwrap();
        assert!(info.master);
        assert_eq!(info.master_commit_log_max_offset, 5120);
        assert_eq!(info.ha_connection_info[0].diff, 1024);
        assert!(info.ha_connection_info[0].in_sync);
        assert_eq!(info.encode(), MASTER);
    }

    #[test]
    fn slave_answer_names_its_master() {
        let info = HaRuntimeInfo {
            ha_client_runtime_info: HaClientRuntimeInfo {
                master_addr: Some("127.0.0.1:10912".into()),
                max_offset: 77,
                ..Default::default()
            },
            ..Default::default()
        };
        let text = info.encode();
        assert!(text.contains(r#""masterAddr":"127.0.0.1:10912""#), "{text}");
        assert_eq!(HaRuntimeInfo::decode(text.as_bytes()).unwrap(), info);
    }

    #[test]
    fn wrong_types_are_refused_naming_the_field() {
        let e = HaRuntimeInfo::decode(br#"{"haConnectionInfo":[{"diff":"x"}]}"#).unwrap_err();
        assert!(e.to_string().contains("haConnectionInfo[0].diff"), "{e}");
        assert!(HaRuntimeInfo::decode(b"[]").is_err());
    }
}
