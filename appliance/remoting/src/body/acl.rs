//! The body of GET_BROKER_CLUSTER_ACL_CONFIG (54), `GetBrokerClusterAclConfigResponseBody`:
//! every ACL file's global white addresses and accounts, as `mqadmin getAclConfig` prints
//! them. Keys in fastjson's order (sorted); absent account fields are left out. The
//! accounts carry their secret keys, as upstream's do: only an admin may ask (ringmq's
//! broker checks that), and the tools print them masked.

use crate::json::{self, read, string_array, BodyError, ObjectBuilder, Value};

/// One account, `PlainAccessConfig`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PlainAccessConfigBody {
    pub access_key: String,
    pub secret_key: Option<String>,
    pub white_remote_address: Option<String>,
    pub admin: bool,
    pub default_topic_perm: Option<String>,
    pub default_group_perm: Option<String>,
    pub topic_perms: Vec<String>,
    pub group_perms: Vec<String>,
}

/// `GetBrokerClusterAclConfigResponseBody`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BrokerClusterAclConfig {
    pub global_white_addrs: Vec<String>,
    pub plain_access_configs: Vec<PlainAccessConfigBody>,
}

impl PlainAccessConfigBody {
    fn to_value(&self) -> Value {
        ObjectBuilder::new()
            .field("accessKey", self.access_key.as_str())
            .field("admin", self.admin)
            .field_opt("defaultGroupPerm", self.default_group_perm.as_deref())
            .field_opt("defaultTopicPerm", self.default_topic_perm.as_deref())
            .field("groupPerms", string_array(&self.group_perms))
            .field_opt("secretKey", self.secret_key.as_deref())
            .field("topicPerms", string_array(&self.topic_perms))
            .field_opt("whiteRemoteAddress", self.white_remote_address.as_deref())
            .build()
    }

    fn from_value(v: &Value, path: &str) -> Result<Self, BodyError> {
        Ok(Self {
            access_key: read::opt_string(v, "accessKey", path)?.unwrap_or_default(),
            secret_key: read::opt_string(v, "secretKey", path)?,
            white_remote_address: read::opt_string(v, "whiteRemoteAddress", path)?,
            admin: read::bool_or(v, "admin", path, false)?,
            default_topic_perm: read::opt_string(v, "defaultTopicPerm", path)?,
            default_group_perm: read::opt_string(v, "defaultGroupPerm", path)?,
            topic_perms: read::string_list(v, "topicPerms", path)?,
            group_perms: read::string_list(v, "groupPerms", path)?,
        })
    }
}

impl BrokerClusterAclConfig {
    pub fn encode(&self) -> String {
        let accounts = self
            .plain_access_configs
            .iter()
            .map(PlainAccessConfigBody::to_value)
            .collect();
        ObjectBuilder::new()
            .field("globalWhiteAddrs", string_array(&self.global_white_addrs))
            .field("plainAccessConfigs", Value::Array(accounts))
            .build()
            .to_json()
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        let v = json::parse(body)?;
        if v.as_object().is_none() {
            return Err(BodyError::field(
                "",
                "a GetBrokerClusterAclConfigResponseBody object",
            ));
        }
        let accounts = match v.get_present("plainAccessConfigs") {
            None => Vec::new(),
            Some(list) => list
                .as_array()
                .ok_or_else(|| BodyError::field("plainAccessConfigs", "an array"))?
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    PlainAccessConfigBody::from_value(a, &format!("plainAccessConfigs[{i}]"))
                })
                .collect::<Result<_, _>>()?,
        };
        Ok(Self {
            global_white_addrs: read::string_list(&v, "globalWhiteAddrs", "")?,
            plain_access_configs: accounts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_in_fastjson_order_and_reads_back() {
        let body = BrokerClusterAclConfig {
            global_white_addrs: vec!["10.10.103.*".into()],
            plain_access_configs: vec![PlainAccessConfigBody {
                access_key: "rocketmq2".into(),
                secret_key: Some("12345678".into()),
                admin: true,
                topic_perms: vec!["topicA=DENY".into()],
                ..Default::default()
            }],
        };
        let text = body.encode();
        assert_eq!(
            text,
            r#"{"globalWhiteAddrs":["10.10.103.*"],"plainAccessConfigs":[{"accessKey":"rocketmq2","admin":true,"groupPerms":[],"secretKey":"12345678","topicPerms":["topicA=DENY"]}]}"#
        );
        assert_eq!(
            BrokerClusterAclConfig::decode(text.as_bytes()).unwrap(),
            body
        );
        assert!(BrokerClusterAclConfig::decode(b"[1]").is_err());
    }
}
