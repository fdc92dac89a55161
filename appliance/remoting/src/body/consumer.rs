//! Consumer-group bodies (`headers.md` §5.3, §5.5, §9.8): `MessageQueue` and its
//! fastjson object-key maps, `GetConsumerListByGroupResponseBody`, the lock/unlock batch
//! bodies, `Connection`, `ConsumerConnection`, `ProducerConnection`, `ResetOffsetBody`
//! and its C++ list form `ResetOffsetBodyForC`.
//!
//! MessageQueue-keyed maps are written exactly as fastjson writes them — the key object
//! inline, `{{"brokerName":"b","queueId":0,"topic":"T"}:12}` — because that is the only
//! form Java's and Go's readers are known to accept; they are read from that form (via
//! the lenient reader in `json.rs`) and also from a string key holding the object.
//! `ConsumerRunningInfo` is not modelled: the broker relays the client's bytes as is.

use std::collections::BTreeMap;

use crate::codes::LanguageCode;
use crate::json::{self, read, BodyError, ObjectBuilder, Value};

use super::heartbeat::{ConsumeFromWhere, ConsumeType, MessageModel, SubscriptionData};

/// A queue of a topic on one broker. Ordered like Java's `compareTo`: topic, broker
/// name, queue id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageQueue {
    pub topic: String,
    pub broker_name: String,
    pub queue_id: i32,
}

impl MessageQueue {
    pub fn new(topic: impl Into<String>, broker_name: impl Into<String>, queue_id: i32) -> Self {
        Self {
            topic: topic.into(),
            broker_name: broker_name.into(),
            queue_id,
        }
    }

    /// `{"brokerName":"b","queueId":0,"topic":"t"}`.
    pub fn to_json_value(&self) -> Value {
        ObjectBuilder::new()
            .field("brokerName", self.broker_name.as_str())
            .field("queueId", self.queue_id)
            .field("topic", self.topic.as_str())
            .build()
    }

    /// Reads a MessageQueue object; a string holding one (a map key some writers quote)
    /// is accepted too.
    pub fn from_json(value: &Value, path: &str) -> Result<Self, BodyError> {
        if let Value::String(text) = value {
            let inner = json::parse_str(text)
                .map_err(|_| BodyError::field(path, "a MessageQueue object"))?;
            return Self::from_object(&inner, path);
        }
        Self::from_object(value, path)
    }

    fn from_object(obj: &Value, path: &str) -> Result<Self, BodyError> {
        if obj.as_object().is_none() {
            return Err(BodyError::field(path, "a MessageQueue object"));
        }
        Ok(Self {
            topic: read::string(obj, "topic", path)?,
            broker_name: read::string(obj, "brokerName", path)?,
            queue_id: read::i32_or(obj, "queueId", path, 0)?,
        })
    }
}

/// `topic@brokerName#queueId`, the short form logs and tools print.
impl std::fmt::Display for MessageQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}#{}", self.topic, self.broker_name, self.queue_id)
    }
}

/// A MessageQueue-keyed map as a [`Value`] whose keys are objects, so `to_json()` writes
/// fastjson's object-key form. Entries come out in MessageQueue order.
pub fn mq_map_value<V>(map: &BTreeMap<MessageQueue, V>, value: impl Fn(&V) -> Value) -> Value {
    Value::Object(
        map.iter()
            .map(|(mq, v)| (mq.to_json_value(), value(v)))
            .collect(),
    )
}

/// Reads the MessageQueue-keyed map under `key` (absent or null → empty). Later
/// duplicates win, like a Java map.
pub fn read_mq_map<V>(
    obj: &Value,
    key: &str,
    path: &str,
    value: impl Fn(&Value, &str) -> Result<V, BodyError>,
) -> Result<BTreeMap<MessageQueue, V>, BodyError> {
    let map_path = read::join(path, key);
    let mut map = BTreeMap::new();
    for (i, (k, v)) in read::entries(obj, key, path)?.iter().enumerate() {
        let entry_path = format!("{map_path}[{i}]");
        let mq = MessageQueue::from_json(k, &format!("{entry_path}.key"))?;
        map.insert(mq, value(v, &entry_path)?);
    }
    Ok(map)
}

/// An array of MessageQueue objects under `key`; absent or null → empty.
fn read_mq_list(obj: &Value, key: &str, path: &str) -> Result<Vec<MessageQueue>, BodyError> {
    let list_path = read::join(path, key);
    match obj.get_present(key) {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .filter(|(_, v)| !v.is_null())
            .map(|(i, v)| MessageQueue::from_json(v, &format!("{list_path}[{i}]")))
            .collect(),
        Some(_) => Err(BodyError::field(list_path, "an array of MessageQueue")),
    }
}

fn mq_list_value(list: &[MessageQueue]) -> Value {
    Value::Array(list.iter().map(MessageQueue::to_json_value).collect())
}

fn root(body: &[u8], what: &'static str) -> Result<Value, BodyError> {
    let v = json::parse(body)?;
    if v.as_object().is_none() {
        return Err(BodyError::field("", what));
    }
    Ok(v)
}

/// `GET_CONSUMER_LIST_BY_GROUP` response: `{"consumerIdList":[...]}`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GetConsumerListByGroupResponseBody {
    pub consumer_id_list: Vec<String>,
}

impl GetConsumerListByGroupResponseBody {
    pub fn encode(&self) -> String {
        ObjectBuilder::new()
            .field("consumerIdList", json::string_array(&self.consumer_id_list))
            .build()
            .to_json()
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        let v = root(body, "a consumer id list object")?;
        Ok(Self {
            consumer_id_list: read::string_list(&v, "consumerIdList", "")?,
        })
    }
}

/// `LOCK_BATCH_MQ` / `UNLOCK_BATCH_MQ` request body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LockBatchRequestBody {
    pub consumer_group: String,
    pub client_id: String,
    /// Broker-internal: do not fan out to replicas.
    pub only_this_broker: bool,
    pub mq_set: Vec<MessageQueue>,
}

/// `UNLOCK_BATCH_MQ` has the same shape.
pub type UnlockBatchRequestBody = LockBatchRequestBody;

impl LockBatchRequestBody {
    pub fn encode(&self) -> String {
        ObjectBuilder::new()
            .field("clientId", self.client_id.as_str())
            .field("consumerGroup", self.consumer_group.as_str())
            .field("mqSet", mq_list_value(&self.mq_set))
            .field("onlyThisBroker", self.only_this_broker)
            .build()
            .to_json()
    }

    /// `consumerGroup` and `clientId` are required: a lock without an owner is useless.
    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        let v = root(body, "a lock batch request object")?;
        Ok(Self {
            consumer_group: read::string(&v, "consumerGroup", "")?,
            client_id: read::string(&v, "clientId", "")?,
            only_this_broker: read::bool_or(&v, "onlyThisBroker", "", false)?,
            mq_set: read_mq_list(&v, "mqSet", "")?,
        })
    }
}

/// `CHECK_CLIENT_CONFIG` (46) request body: a consumer asks whether the broker accepts
/// its subscription (an SQL92 expression needs the property filter).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CheckClientRequestBody {
    pub client_id: Option<String>,
    pub group: Option<String>,
    pub subscription_data: Option<SubscriptionData>,
    pub namespace: Option<String>,
}

impl CheckClientRequestBody {
    pub fn encode(&self) -> String {
        ObjectBuilder::new()
            .field_opt("clientId", self.client_id.as_deref())
            .field_opt("group", self.group.as_deref())
            .field_opt("namespace", self.namespace.as_deref())
            .field_opt(
                "subscriptionData",
                self.subscription_data
                    .as_ref()
                    .map(SubscriptionData::to_json_value),
            )
            .build()
            .to_json()
    }

    /// Every field may be absent; a subscription without a topic reads as an empty topic,
    /// since only its expression is checked.
    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        let v = root(body, "a CheckClientRequestBody object")?;
        let subscription_data = match v.get_present("subscriptionData") {
            None => None,
            Some(sub) => Some(check_subscription(sub)?),
        };
        Ok(Self {
            client_id: read::opt_string(&v, "clientId", "")?,
            group: read::opt_string(&v, "group", "")?,
            subscription_data,
            namespace: read::opt_string(&v, "namespace", "")?,
        })
    }
}

fn check_subscription(sub: &Value) -> Result<SubscriptionData, BodyError> {
    const PATH: &str = "subscriptionData";
    if sub.as_object().is_none() {
        return Err(BodyError::field(PATH, "a SubscriptionData object"));
    }
    Ok(SubscriptionData::build(
        &read::opt_string(sub, "topic", PATH)?.unwrap_or_default(),
        &read::opt_string(sub, "subString", PATH)?.unwrap_or_default(),
        &read::opt_string(sub, "expressionType", PATH)?.unwrap_or_default(),
        read::i64_or(sub, "subVersion", PATH, 0)?,
    ))
}

/// `LOCK_BATCH_MQ` response body: the queues now locked by the requester.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LockBatchResponseBody {
    pub lock_ok_mq_set: Vec<MessageQueue>,
}

impl LockBatchResponseBody {
    pub fn encode(&self) -> String {
        ObjectBuilder::new()
            .field("lockOKMQSet", mq_list_value(&self.lock_ok_mq_set))
            .build()
            .to_json()
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        let v = root(body, "a lock batch response object")?;
        Ok(Self {
            lock_ok_mq_set: read_mq_list(&v, "lockOKMQSet", "")?,
        })
    }
}

/// One client channel of a group, as admin tools see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    pub client_id: String,
    /// `ip:port` of the client's socket as the broker sees it.
    pub client_addr: String,
    pub language: LanguageCode,
    /// The client's MQVersion ordinal from its request header.
    pub version: i32,
}

impl Connection {
    pub fn to_json_value(&self) -> Value {
        ObjectBuilder::new()
            .field("clientAddr", self.client_addr.as_str())
            .field("clientId", self.client_id.as_str())
            .field("language", self.language.name())
            .field("version", self.version)
            .build()
    }

    /// `language` is read as a name or a numeric code; unknown → `OTHER`.
    pub fn from_json(obj: &Value, path: &str) -> Result<Self, BodyError> {
        if obj.as_object().is_none() {
            return Err(BodyError::field(path, "a Connection object"));
        }
        let language = match obj.get_present("language") {
            None => LanguageCode::Other,
            Some(v) => match v.as_i64() {
                Some(code) => {
                    u8::try_from(code).map_or(LanguageCode::Other, LanguageCode::from_code)
                }
                None => v
                    .as_str()
                    .map_or(LanguageCode::Other, LanguageCode::from_name),
            },
        };
        Ok(Self {
            client_id: read::opt_string(obj, "clientId", path)?.unwrap_or_default(),
            client_addr: read::opt_string(obj, "clientAddr", path)?.unwrap_or_default(),
            language,
            version: read::i32_or(obj, "version", path, 0)?,
        })
    }
}

fn read_connections(v: &Value) -> Result<Vec<Connection>, BodyError> {
    match v.get_present("connectionSet") {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, c)| Connection::from_json(c, &format!("connectionSet[{i}]")))
            .collect(),
        Some(_) => Err(BodyError::field("connectionSet", "an array")),
    }
}

fn connections_value(list: &[Connection]) -> Value {
    Value::Array(list.iter().map(Connection::to_json_value).collect())
}

/// `GET_CONSUMER_CONNECTION_LIST` (203) response body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerConnection {
    pub connection_set: Vec<Connection>,
    /// Topic → subscription (String keys: standard JSON object).
    pub subscription_table: BTreeMap<String, SubscriptionData>,
    pub consume_type: Option<ConsumeType>,
    pub message_model: Option<MessageModel>,
    pub consume_from_where: Option<ConsumeFromWhere>,
}

impl ConsumerConnection {
    pub fn encode(&self) -> String {
        ObjectBuilder::new()
            .field("connectionSet", connections_value(&self.connection_set))
            .field_opt("consumeFromWhere", self.consume_from_where)
            .field_opt("consumeType", self.consume_type)
            .field_opt("messageModel", self.message_model)
            .field(
                "subscriptionTable",
                json::map_value(
                    self.subscription_table
                        .iter()
                        .map(|(t, s)| (t.as_str(), s.to_json_value())),
                ),
            )
            .build()
            .to_json()
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        let v = root(body, "a ConsumerConnection object")?;
        let mut subscription_table = BTreeMap::new();
        for (k, s) in read::entries(&v, "subscriptionTable", "")? {
            let topic = k
                .key_text()
                .ok_or_else(|| BodyError::field("subscriptionTable", "topic-name keys"))?;
            let sub = SubscriptionData::from_json(s, &format!("subscriptionTable.{topic}"))?;
            subscription_table.insert(topic.to_owned(), sub);
        }
        Ok(Self {
            connection_set: read_connections(&v)?,
            subscription_table,
            consume_type: ConsumeType::from_json(v.get_present("consumeType")),
            message_model: MessageModel::from_json(v.get_present("messageModel")),
            consume_from_where: ConsumeFromWhere::from_json(v.get_present("consumeFromWhere")),
        })
    }
}

/// `GET_PRODUCER_CONNECTION_LIST` (204) response body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProducerConnection {
    pub connection_set: Vec<Connection>,
}

impl ProducerConnection {
    pub fn encode(&self) -> String {
        ObjectBuilder::new()
            .field("connectionSet", connections_value(&self.connection_set))
            .build()
            .to_json()
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        let v = root(body, "a ProducerConnection object")?;
        Ok(Self {
            connection_set: read_connections(&v)?,
        })
    }
}

/// `INVOKE_BROKER_TO_RESET_OFFSET` response / `RESET_CONSUMER_CLIENT_OFFSET` body:
/// `{"offsetTable":{MQ:offset,...}}` in fastjson's object-key form.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResetOffsetBody {
    pub offset_table: BTreeMap<MessageQueue, i64>,
}

impl ResetOffsetBody {
    pub fn encode(&self) -> String {
        ObjectBuilder::new()
            .field(
                "offsetTable",
                mq_map_value(&self.offset_table, |&o| Value::from(o)),
            )
            .build()
            .to_json()
    }

    /// Reads the object-key form, and also the C++ list form (so one decoder serves
    /// both shapes of `RESET_CONSUMER_CLIENT_OFFSET`).
    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        let v = root(body, "a ResetOffsetBody object")?;
        if let Some(Value::Array(_)) = v.get_present("offsetTable") {
            let c = ResetOffsetBodyForC::from_root(&v)?;
            return Ok(Self {
                offset_table: c
                    .offset_table
                    .into_iter()
                    .map(|e| (e.queue, e.offset))
                    .collect(),
            });
        }
        let offset_table = read_mq_map(&v, "offsetTable", "", |o, p| {
            o.as_i64().ok_or_else(|| BodyError::field(p, "an offset"))
        })?;
        Ok(Self { offset_table })
    }
}

/// One entry of [`ResetOffsetBodyForC`] (`MessageQueueForC`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageQueueOffset {
    pub queue: MessageQueue,
    pub offset: i64,
}

/// The list form sent to C++ consumers: `{"offsetTable":[{"brokerName","offset","queueId","topic"}]}`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResetOffsetBodyForC {
    pub offset_table: Vec<MessageQueueOffset>,
}

impl ResetOffsetBodyForC {
    pub fn encode(&self) -> String {
        let entries = self
            .offset_table
            .iter()
            .map(|e| {
                ObjectBuilder::new()
                    .field("brokerName", e.queue.broker_name.as_str())
                    .field("offset", e.offset)
                    .field("queueId", e.queue.queue_id)
                    .field("topic", e.queue.topic.as_str())
                    .build()
            })
            .collect();
        ObjectBuilder::new()
            .field("offsetTable", Value::Array(entries))
            .build()
            .to_json()
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        Self::from_root(&root(body, "a ResetOffsetBodyForC object")?)
    }

    fn from_root(v: &Value) -> Result<Self, BodyError> {
        let items = match v.get_present("offsetTable") {
            None => &[][..],
            Some(Value::Array(items)) => items,
            Some(_) => return Err(BodyError::field("offsetTable", "an array")),
        };
        let offset_table = items
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let path = format!("offsetTable[{i}]");
                Ok(MessageQueueOffset {
                    queue: MessageQueue::from_json(e, &path)?,
                    offset: read::i64_or(e, "offset", &path, 0)?,
                })
            })
            .collect::<Result<_, BodyError>>()?;
        Ok(Self { offset_table })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn mq(t: &str, q: i32) -> MessageQueue {
        MessageQueue::new(t, "broker-a", q)
    }

    #[test]
    fn message_queue_json_shape() {
        assert_eq!(
            mq("t", 0).to_json_value().to_json(),
            r#"{"brokerName":"broker-a","queueId":0,"topic":"t"}"#
        );
        // Ordering follows Java compareTo: topic first.
        assert!(MessageQueue::new("a", "z", 9) < MessageQueue::new("b", "a", 0));
    }

    #[test]
    fn consumer_list() {
        let b = GetConsumerListByGroupResponseBody {
            consumer_id_list: vec!["c1".into(), "c2".into()],
        };
        assert_eq!(b.encode(), r#"{"consumerIdList":["c1","c2"]}"#);
        assert_eq!(
            GetConsumerListByGroupResponseBody::decode(b.encode().as_bytes()).unwrap(),
            b
        );
    }

    #[test]
    fn lock_bodies() {
        // A Java client request (fastjson: alphabetical keys).
        let java = r#"{"clientId":"10.0.0.1@1","consumerGroup":"G","mqSet":[{"brokerName":"broker-a","queueId":1,"topic":"T"},{"brokerName":"broker-a","queueId":0,"topic":"T"}],"onlyThisBroker":false}"#;
        let req = LockBatchRequestBody::decode(java.as_bytes()).unwrap();
        assert_eq!(req.consumer_group, "G");
        assert_eq!(req.mq_set, vec![mq("T", 1), mq("T", 0)]);
        assert_eq!(req.encode(), java);
        let resp = LockBatchResponseBody {
            lock_ok_mq_set: vec![mq("T", 0)],
        };
        assert_eq!(
            resp.encode(),
            r#"{"lockOKMQSet":[{"brokerName":"broker-a","queueId":0,"topic":"T"}]}"#
        );
        assert_eq!(
            LockBatchResponseBody::decode(resp.encode().as_bytes()).unwrap(),
            resp
        );
        assert_eq!(
            LockBatchRequestBody::decode(br#"{"clientId":"c"}"#).unwrap_err(),
            BodyError::field("consumerGroup", "a string")
        );
    }

    #[test]
    fn consumer_connection_round_trip() {
        let mut subscription_table = BTreeMap::new();
        subscription_table.insert(
            "T1".to_owned(),
            SubscriptionData::build("T1", "TagA", "TAG", 7),
        );
        let cc = ConsumerConnection {
            connection_set: vec![Connection {
                client_id: "10.0.0.1@1".into(),
                client_addr: "10.0.0.1:50000".into(),
                language: LanguageCode::Java,
                version: 481,
            }],
            subscription_table,
            consume_type: Some(ConsumeType::ConsumePassively),
            message_model: Some(MessageModel::Clustering),
            consume_from_where: Some(ConsumeFromWhere::ConsumeFromLastOffset),
        };
        let text = cc.encode();
        assert_eq!(
            text,
            concat!(
                r#"{"connectionSet":[{"clientAddr":"10.0.0.1:50000","clientId":"10.0.0.1@1","language":"JAVA","version":481}],"#,
                r#""consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","#,
                r#""subscriptionTable":{"T1":{"classFilterMode":false,"codeSet":[2598919],"expressionType":"TAG","subString":"TagA","subVersion":7,"tagsSet":["TagA"],"topic":"T1"}}}"#
            )
        );
        assert_eq!(ConsumerConnection::decode(text.as_bytes()).unwrap(), cc);
        let pc = ProducerConnection {
            connection_set: cc.connection_set.clone(),
        };
        assert_eq!(
            ProducerConnection::decode(pc.encode().as_bytes()).unwrap(),
            pc
        );
        let c = Connection::from_json(&json::parse_str(r#"{"language":1}"#).unwrap(), "").unwrap();
        assert_eq!(c.language, LanguageCode::Cpp);
    }

    #[test]
    fn reset_offset_object_key_form() {
        let mut offset_table = BTreeMap::new();
        offset_table.insert(mq("T", 1), 20);
        offset_table.insert(mq("T", 0), 10);
        let body = ResetOffsetBody { offset_table };
        let text = body.encode();
        assert_eq!(
            text,
            r#"{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:10,{"brokerName":"broker-a","queueId":1,"topic":"T"}:20}}"#
        );
        assert_eq!(ResetOffsetBody::decode(text.as_bytes()).unwrap(), body);
        // A string key holding the object is accepted too.
        let quoted =
            r#"{"offsetTable":{"{\"brokerName\":\"broker-a\",\"queueId\":0,\"topic\":\"T\"}":10}}"#;
        assert_eq!(
            ResetOffsetBody::decode(quoted.as_bytes())
                .unwrap()
                .offset_table[&mq("T", 0)],
            10
        );
        let bad = r#"{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:"x"}}"#;
        assert_eq!(
            ResetOffsetBody::decode(bad.as_bytes()).unwrap_err(),
            BodyError::field("offsetTable[0]", "an offset")
        );
    }

    #[test]
    fn reset_offset_for_c() {
        let c = ResetOffsetBodyForC {
            offset_table: vec![MessageQueueOffset {
                queue: mq("T", 3),
                offset: 42,
            }],
        };
        let text = c.encode();
        assert_eq!(
            text,
            r#"{"offsetTable":[{"brokerName":"broker-a","offset":42,"queueId":3,"topic":"T"}]}"#
        );
        assert_eq!(ResetOffsetBodyForC::decode(text.as_bytes()).unwrap(), c);
        assert_eq!(
            ResetOffsetBody::decode(text.as_bytes())
                .unwrap()
                .offset_table[&mq("T", 3)],
            42
        );
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = ResetOffsetBody::decode(&bytes);
            let _ = LockBatchRequestBody::decode(&bytes);
            let _ = ConsumerConnection::decode(&bytes);
        }

        #[test]
        fn reset_offset_round_trip(entries in proptest::collection::btree_map(
            ("[A-Za-z%_-]{1,10}", 0i32..64), any::<i64>(), 0..10)) {
            let offset_table = entries.into_iter().map(|((t, q), o)| (mq(&t, q), o)).collect();
            let body = ResetOffsetBody { offset_table };
            prop_assert_eq!(ResetOffsetBody::decode(body.encode().as_bytes()).unwrap(), body);
        }
    }
}
