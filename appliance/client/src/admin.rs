//! Admin calls (what `mqadmin` does): thin typed wrappers over the name-server and broker
//! administration codes of `headers.md` §8–§9. Bodies are parsed with the remoting crate's
//! lenient reader, so fastjson's bare numeric keys and MessageQueue object keys work.
//!
//! Every method checks the response code and turns a refusal into
//! [`ClientError::Response`] naming the address, the request and the remark.
//!
//! Also the broker stage profile ([`BrokerStageProfile`], read from a ringmq broker's
//! runtime info) and its difference over a run ([`StageDelta`]), which `ringmq bench` prints
//! next to its client-side figures.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use ringmq_remoting::body::cluster::ClusterInfo;
use ringmq_remoting::body::kv::{KvTable, Properties};
use ringmq_remoting::body::route::TopicRouteData;
use ringmq_remoting::body::topic::TopicConfigAndMappingSerializeWrapper;
use ringmq_remoting::json::{self, Value};
use ringmq_remoting::message::id::decode_offset_msg_id;
use ringmq_remoting::{RemotingCommand, RequestCode, ResponseCode};

use crate::error::{ClientError, Result};
use crate::message::{decode_records, MessageExt, MessageQueue};
use crate::route::fetch_route;
use crate::transport::RemotingClient;

/// What `UPDATE_AND_CREATE_TOPIC` needs (`headers.md` §9.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    pub topic: String,
    pub read_queue_nums: i32,
    pub write_queue_nums: i32,
    /// 6 = read+write (§0.3).
    pub perm: i32,
    /// `SINGLE_TAG` or `MULTI_TAG`.
    pub topic_filter_type: String,
    pub order: bool,
    /// `+key=value,-key` modifications, e.g. `+message.type=FIFO`.
    pub attributes: Option<String>,
}

impl TopicSpec {
    /// 8 read/write queues, perm RW, single tag: `mqadmin updateTopic` defaults.
    pub fn new(topic: impl Into<String>) -> Self {
        Self {
            topic: topic.into(),
            read_queue_nums: 8,
            write_queue_nums: 8,
            perm: 6,
            topic_filter_type: "SINGLE_TAG".into(),
            order: false,
            attributes: None,
        }
    }

    pub fn with_queues(mut self, n: i32) -> Self {
        self.read_queue_nums = n;
        self.write_queue_nums = n;
        self
    }
}

/// One queue's offsets in `GET_TOPIC_STATS_INFO`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TopicOffset {
    pub min_offset: i64,
    pub max_offset: i64,
    pub last_update_timestamp: i64,
}

/// `TopicStatsTable`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TopicStats {
    pub offsets: BTreeMap<MessageQueue, TopicOffset>,
    pub topic_put_tps: f64,
}

/// One queue's progress in `GET_CONSUME_STATS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OffsetWrapper {
    pub broker_offset: i64,
    pub consumer_offset: i64,
    pub pull_offset: i64,
    pub last_timestamp: i64,
}

/// `ConsumeStats`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConsumeStats {
    pub offsets: BTreeMap<MessageQueue, OffsetWrapper>,
    pub consume_tps: f64,
}

impl ConsumeStats {
    /// Messages not yet consumed (Σ brokerOffset − consumerOffset).
    pub fn diff_total(&self) -> i64 {
        self.offsets
            .values()
            .map(|o| (o.broker_offset - o.consumer_offset).max(0))
            .sum()
    }
}

/// One client connection in a connection list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientConnection {
    pub client_id: String,
    pub client_addr: String,
    pub language: String,
    pub version: i32,
}

/// `ConsumerConnection` (subscription table kept as raw JSON values).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConsumerConnection {
    pub connections: Vec<ClientConnection>,
    pub consume_type: Option<String>,
    pub message_model: Option<String>,
    pub consume_from_where: Option<String>,
    /// topic → subscription expression.
    pub subscriptions: BTreeMap<String, String>,
}

/// Admin handle over a client and the name servers.
#[derive(Clone)]
pub struct Admin {
    client: RemotingClient,
    namesrv_addrs: Vec<String>,
    timeout: Duration,
}

impl Admin {
    pub fn new(client: RemotingClient, namesrv_addrs: Vec<String>) -> Self {
        let timeout = client.default_timeout();
        Self {
            client,
            namesrv_addrs,
            timeout,
        }
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn client(&self) -> &RemotingClient {
        &self.client
    }

    fn namesrv(&self) -> Result<&str> {
        self.namesrv_addrs
            .first()
            .map(String::as_str)
            .ok_or_else(|| {
                ClientError::Invalid("no name server address configured (-n host:9876)".into())
            })
    }

    /// Sends and requires SUCCESS.
    async fn call(&self, addr: &str, req: RemotingCommand) -> Result<RemotingCommand> {
        let code = req.code;
        let resp = self.client.invoke(addr, req, self.timeout).await?;
        crate::transport::expect_success(addr, code, resp)
    }

    /// Sends to the first name server that answers (reads), requiring SUCCESS.
    async fn call_namesrv(&self, req: RemotingCommand) -> Result<RemotingCommand> {
        self.namesrv()?;
        let mut last = None;
        for addr in &self.namesrv_addrs {
            match self.call(addr, req.clone()).await {
                Ok(r) => return Ok(r),
                Err(e @ ClientError::Response { .. }) => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("at least one name server"))
    }

    fn protocol(addr: &str, code: RequestCode, reason: impl std::fmt::Display) -> ClientError {
        ClientError::Protocol {
            addr: addr.to_string(),
            request_code: code.code(),
            reason: reason.to_string(),
        }
    }

    fn parse_json(addr: &str, code: RequestCode, body: &Bytes) -> Result<Value> {
        json::parse(body).map_err(|e| Self::protocol(addr, code, format!("body is not JSON: {e}")))
    }

    // ---- name server ----------------------------------------------------------------

    /// `GET_BROKER_CLUSTER_INFO` (106).
    pub async fn cluster_info(&self) -> Result<ClusterInfo> {
        let code = RequestCode::GetBrokerClusterInfo;
        let resp = self
            .call_namesrv(RemotingCommand::request(code.code(), 0))
            .await?;
        ClusterInfo::decode(&resp.body).map_err(|e| Self::protocol("namesrv", code, e))
    }

    /// Master addresses of every broker in `cluster`.
    pub async fn cluster_masters(&self, cluster: &str) -> Result<Vec<(String, String)>> {
        let info = self.cluster_info().await?;
        let names = info.cluster_addr_table.get(cluster).ok_or_else(|| {
            ClientError::Invalid(format!("cluster {cluster} is not known to the name server"))
        })?;
        Ok(names
            .iter()
            .filter_map(|n| {
                let addr = info.broker_addr_table.get(n)?.broker_addrs.get(&0)?;
                Some((n.clone(), addr.clone()))
            })
            .collect())
    }

    /// `GET_ROUTEINFO_BY_TOPIC` (105).
    pub async fn topic_route(&self, topic: &str) -> Result<TopicRouteData> {
        fetch_route(&self.client, self.namesrv()?, topic, self.timeout).await
    }

    fn topic_list(addr: &str, code: RequestCode, resp: &RemotingCommand) -> Result<Vec<String>> {
        let v = Self::parse_json(addr, code, &resp.body)?;
        json::read::string_list(&v, "topicList", "").map_err(|e| Self::protocol(addr, code, e))
    }

    /// `GET_ALL_TOPIC_LIST_FROM_NAMESERVER` (206).
    pub async fn all_topics(&self) -> Result<Vec<String>> {
        let code = RequestCode::GetAllTopicListFromNameserver;
        let resp = self
            .call_namesrv(RemotingCommand::request(code.code(), 0))
            .await?;
        Self::topic_list("namesrv", code, &resp)
    }

    /// `GET_TOPICS_BY_CLUSTER` (224).
    pub async fn topics_by_cluster(&self, cluster: &str) -> Result<Vec<String>> {
        let code = RequestCode::GetTopicsByCluster;
        let req = RemotingCommand::request(code.code(), 0).with_ext("cluster", cluster);
        let resp = self.call_namesrv(req).await?;
        Self::topic_list("namesrv", code, &resp)
    }

    /// `PUT_KV_CONFIG` (100) on every name server.
    pub async fn kv_put(&self, namespace: &str, key: &str, value: &str) -> Result<()> {
        self.namesrv()?;
        for addr in &self.namesrv_addrs {
            let req = RemotingCommand::request(RequestCode::PutKvConfig.code(), 0)
                .with_ext("namespace", namespace)
                .with_ext("key", key)
                .with_ext("value", value);
            self.call(addr, req).await?;
        }
        Ok(())
    }

    /// `GET_KV_CONFIG` (101); `None` when absent (QUERY_NOT_FOUND).
    pub async fn kv_get(&self, namespace: &str, key: &str) -> Result<Option<String>> {
        let addr = self.namesrv()?;
        let code = RequestCode::GetKvConfig.code();
        let req = RemotingCommand::request(code, 0)
            .with_ext("namespace", namespace)
            .with_ext("key", key);
        let resp = self.client.invoke(addr, req, self.timeout).await?;
        if resp.code == ResponseCode::QueryNotFound.code() {
            return Ok(None);
        }
        let resp = crate::transport::expect_success(addr, code, resp)?;
        Ok(resp.ext_fields.get("value").map(str::to_string))
    }

    /// `DELETE_KV_CONFIG` (102) on every name server.
    pub async fn kv_delete(&self, namespace: &str, key: &str) -> Result<()> {
        self.namesrv()?;
        for addr in &self.namesrv_addrs {
            let req = RemotingCommand::request(RequestCode::DeleteKvConfig.code(), 0)
                .with_ext("namespace", namespace)
                .with_ext("key", key);
            self.call(addr, req).await?;
        }
        Ok(())
    }

    /// `GET_KVLIST_BY_NAMESPACE` (219); empty when the namespace is absent.
    pub async fn kv_list(&self, namespace: &str) -> Result<BTreeMap<String, String>> {
        let addr = self.namesrv()?;
        let code = RequestCode::GetKvlistByNamespace;
        let req = RemotingCommand::request(code.code(), 0).with_ext("namespace", namespace);
        let resp = self.client.invoke(addr, req, self.timeout).await?;
        if resp.code == ResponseCode::QueryNotFound.code() {
            return Ok(BTreeMap::new());
        }
        let resp = crate::transport::expect_success(addr, code.code(), resp)?;
        Ok(KvTable::decode(&resp.body)
            .map_err(|e| Self::protocol(addr, code, e))?
            .table)
    }

    fn properties(addr: &str, code: RequestCode, body: &[u8]) -> Result<BTreeMap<String, String>> {
        let text = String::from_utf8_lossy(body);
        let props = Properties::parse(&text).map_err(|e| Self::protocol(addr, code, e))?;
        Ok(props
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect())
    }

    fn properties_body(config: &BTreeMap<String, String>) -> String {
        let mut p = Properties::new();
        for (k, v) in config {
            p.set(k.clone(), v.clone());
        }
        p.to_text()
    }

    /// `GET_NAMESRV_CONFIG` (319) of one name server.
    pub async fn namesrv_config(&self, addr: &str) -> Result<BTreeMap<String, String>> {
        let code = RequestCode::GetNamesrvConfig;
        let resp = self
            .call(addr, RemotingCommand::request(code.code(), 0))
            .await?;
        Self::properties(addr, code, &resp.body)
    }

    /// `UPDATE_NAMESRV_CONFIG` (318).
    pub async fn update_namesrv_config(
        &self,
        addr: &str,
        config: &BTreeMap<String, String>,
    ) -> Result<()> {
        let req = RemotingCommand::request(RequestCode::UpdateNamesrvConfig.code(), 0)
            .with_body(Self::properties_body(config));
        self.call(addr, req).await.map(|_| ())
    }

    async fn write_perm(
        &self,
        code: RequestCode,
        broker_name: &str,
        count_key: &str,
    ) -> Result<BTreeMap<String, i32>> {
        self.namesrv()?;
        let mut out = BTreeMap::new();
        for addr in &self.namesrv_addrs {
            let req = RemotingCommand::request(code.code(), 0).with_ext("brokerName", broker_name);
            let resp = self.call(addr, req).await?;
            let n = resp
                .ext_fields
                .get(count_key)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            out.insert(addr.clone(), n);
        }
        Ok(out)
    }

    /// `WIPE_WRITE_PERM_OF_BROKER` (205) on every name server: name server → topics changed.
    pub async fn wipe_write_perm(&self, broker_name: &str) -> Result<BTreeMap<String, i32>> {
        self.write_perm(
            RequestCode::WipeWritePermOfBroker,
            broker_name,
            "wipeTopicCount",
        )
        .await
    }

    /// `ADD_WRITE_PERM_OF_BROKER` (327) on every name server.
    pub async fn add_write_perm(&self, broker_name: &str) -> Result<BTreeMap<String, i32>> {
        self.write_perm(
            RequestCode::AddWritePermOfBroker,
            broker_name,
            "addTopicCount",
        )
        .await
    }

    /// `DELETE_TOPIC_IN_NAMESRV` (216) on every name server.
    pub async fn delete_topic_in_namesrv(&self, topic: &str, cluster: Option<&str>) -> Result<()> {
        self.namesrv()?;
        for addr in &self.namesrv_addrs {
            let mut req = RemotingCommand::request(RequestCode::DeleteTopicInNamesrv.code(), 0)
                .with_ext("topic", topic);
            if let Some(c) = cluster {
                req.ext_fields.insert("clusterName", c);
            }
            self.call(addr, req).await?;
        }
        Ok(())
    }

    // ---- broker ---------------------------------------------------------------------

    /// `UPDATE_AND_CREATE_TOPIC` (17) on one broker.
    pub async fn create_topic(&self, broker_addr: &str, spec: &TopicSpec) -> Result<()> {
        let mut req = RemotingCommand::request(RequestCode::UpdateAndCreateTopic.code(), 0)
            .with_ext("topic", spec.topic.clone())
            .with_ext("defaultTopic", "TBW102")
            .with_ext("readQueueNums", spec.read_queue_nums.to_string())
            .with_ext("writeQueueNums", spec.write_queue_nums.to_string())
            .with_ext("perm", spec.perm.to_string())
            .with_ext("topicFilterType", spec.topic_filter_type.clone())
            .with_ext("topicSysFlag", "0")
            .with_ext("order", spec.order.to_string());
        if let Some(a) = &spec.attributes {
            req.ext_fields.insert("attributes", a.clone());
        }
        self.call(broker_addr, req).await.map(|_| ())
    }

    /// Creates the topic on every master of `cluster`; returns the brokers written.
    pub async fn create_topic_in_cluster(
        &self,
        cluster: &str,
        spec: &TopicSpec,
    ) -> Result<Vec<String>> {
        let masters = self.cluster_masters(cluster).await?;
        if masters.is_empty() {
            return Err(ClientError::Invalid(format!(
                "cluster {cluster} has no master broker"
            )));
        }
        for (_, addr) in &masters {
            self.create_topic(addr, spec).await?;
        }
        Ok(masters.into_iter().map(|(n, _)| n).collect())
    }

    /// `DELETE_TOPIC_IN_BROKER` (215).
    pub async fn delete_topic_in_broker(&self, broker_addr: &str, topic: &str) -> Result<()> {
        let req = RemotingCommand::request(RequestCode::DeleteTopicInBroker.code(), 0)
            .with_ext("topic", topic);
        self.call(broker_addr, req).await.map(|_| ())
    }

    /// `mqadmin deleteTopic`: every master of `cluster`, then every name server.
    pub async fn delete_topic(&self, topic: &str, cluster: &str) -> Result<()> {
        for (_, addr) in self.cluster_masters(cluster).await? {
            self.delete_topic_in_broker(&addr, topic).await?;
        }
        self.delete_topic_in_namesrv(topic, Some(cluster)).await
    }

    /// `GET_TOPIC_STATS_INFO` (202).
    pub async fn topic_stats(&self, broker_addr: &str, topic: &str) -> Result<TopicStats> {
        let code = RequestCode::GetTopicStatsInfo;
        let req = RemotingCommand::request(code.code(), 0).with_ext("topic", topic);
        let resp = self.call(broker_addr, req).await?;
        let v = Self::parse_json(broker_addr, code, &resp.body)?;
        let mut stats = TopicStats {
            topic_put_tps: v.get("topicPutTps").and_then(Value::as_f64).unwrap_or(0.0),
            ..Default::default()
        };
        for (k, o) in mq_entries(&v, "offsetTable") {
            let mq = mq_key(k).ok_or_else(|| {
                Self::protocol(broker_addr, code, "offsetTable key is not a MessageQueue")
            })?;
            stats.offsets.insert(
                mq,
                TopicOffset {
                    min_offset: num(o, "minOffset"),
                    max_offset: num(o, "maxOffset"),
                    last_update_timestamp: num(o, "lastUpdateTimestamp"),
                },
            );
        }
        Ok(stats)
    }

    /// `GET_CONSUME_STATS` (208) of `group` (optionally one topic).
    pub async fn consume_stats(
        &self,
        broker_addr: &str,
        group: &str,
        topic: Option<&str>,
    ) -> Result<ConsumeStats> {
        let code = RequestCode::GetConsumeStats;
        let mut req = RemotingCommand::request(code.code(), 0).with_ext("consumerGroup", group);
        if let Some(t) = topic {
            req.ext_fields.insert("topic", t);
        }
        let resp = self.call(broker_addr, req).await?;
        let v = Self::parse_json(broker_addr, code, &resp.body)?;
        let mut stats = ConsumeStats {
            consume_tps: v.get("consumeTps").and_then(Value::as_f64).unwrap_or(0.0),
            ..Default::default()
        };
        for (k, o) in mq_entries(&v, "offsetTable") {
            let mq = mq_key(k).ok_or_else(|| {
                Self::protocol(broker_addr, code, "offsetTable key is not a MessageQueue")
            })?;
            stats.offsets.insert(
                mq,
                OffsetWrapper {
                    broker_offset: num(o, "brokerOffset"),
                    consumer_offset: num(o, "consumerOffset"),
                    pull_offset: num(o, "pullOffset"),
                    last_timestamp: num(o, "lastTimestamp"),
                },
            );
        }
        Ok(stats)
    }

    /// `GET_BROKER_CONFIG` (26).
    pub async fn broker_config(&self, broker_addr: &str) -> Result<BTreeMap<String, String>> {
        let code = RequestCode::GetBrokerConfig;
        let resp = self
            .call(broker_addr, RemotingCommand::request(code.code(), 0))
            .await?;
        Self::properties(broker_addr, code, &resp.body)
    }

    /// `UPDATE_BROKER_CONFIG` (25).
    pub async fn update_broker_config(
        &self,
        broker_addr: &str,
        config: &BTreeMap<String, String>,
    ) -> Result<Option<String>> {
        let req = RemotingCommand::request(RequestCode::UpdateBrokerConfig.code(), 0)
            .with_body(Self::properties_body(config));
        // The remark says which keys only take effect after a restart.
        self.call(broker_addr, req)
            .await
            .map(|r| r.remark.filter(|r| !r.is_empty()))
    }

    /// `GET_ALL_TOPIC_CONFIG` (21), unpaged.
    pub async fn all_topic_config(
        &self,
        broker_addr: &str,
    ) -> Result<TopicConfigAndMappingSerializeWrapper> {
        let code = RequestCode::GetAllTopicConfig;
        let resp = self
            .call(broker_addr, RemotingCommand::request(code.code(), 0))
            .await?;
        TopicConfigAndMappingSerializeWrapper::decode(&resp.body)
            .map_err(|e| Self::protocol(broker_addr, code, e))
    }

    /// The stage profile of one broker (its runtime info, parsed).
    pub async fn stage_profile(&self, broker_addr: &str) -> Result<BrokerStageProfile> {
        Ok(BrokerStageProfile::from_runtime_info(
            &self.broker_runtime_info(broker_addr).await?,
        ))
    }

    /// Master addresses of every broker the name server knows (all clusters), sorted.
    pub async fn all_master_addrs(&self) -> Result<Vec<String>> {
        let info = self.cluster_info().await?;
        let mut out: Vec<String> = info
            .broker_addr_table
            .values()
            .filter_map(|b| b.broker_addrs.get(&0).cloned())
            .collect();
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// `GET_BROKER_RUNTIME_INFO` (28): the `KVTable`.
    pub async fn broker_runtime_info(&self, broker_addr: &str) -> Result<BTreeMap<String, String>> {
        let code = RequestCode::GetBrokerRuntimeInfo;
        let resp = self
            .call(broker_addr, RemotingCommand::request(code.code(), 0))
            .await?;
        Ok(KvTable::decode(&resp.body)
            .map_err(|e| Self::protocol(broker_addr, code, e))?
            .table)
    }

    fn connections(v: &Value) -> Vec<ClientConnection> {
        v.get("connectionSet")
            .and_then(Value::as_array)
            .map(|set| {
                set.iter()
                    .map(|c| ClientConnection {
                        client_id: text(c, "clientId"),
                        client_addr: text(c, "clientAddr"),
                        language: text(c, "language"),
                        version: num(c, "version") as i32,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `GET_CONSUMER_CONNECTION_LIST` (203); CONSUMER_NOT_ONLINE (206) is an error.
    pub async fn consumer_connection(
        &self,
        broker_addr: &str,
        group: &str,
    ) -> Result<ConsumerConnection> {
        let code = RequestCode::GetConsumerConnectionList;
        let req = RemotingCommand::request(code.code(), 0).with_ext("consumerGroup", group);
        let resp = self.call(broker_addr, req).await?;
        let v = Self::parse_json(broker_addr, code, &resp.body)?;
        let opt = |k: &str| {
            v.get(k).and_then(|x| {
                x.as_str()
                    .map(str::to_string)
                    .or_else(|| x.as_i64().map(|n| n.to_string()))
            })
        };
        let mut subscriptions = BTreeMap::new();
        if let Some(Value::Object(entries)) = v.get("subscriptionTable") {
            for (k, sub) in entries {
                if let Some(topic) = k.key_text() {
                    subscriptions.insert(topic.to_string(), text(sub, "subString"));
                }
            }
        }
        Ok(ConsumerConnection {
            connections: Self::connections(&v),
            consume_type: opt("consumeType"),
            message_model: opt("messageModel"),
            consume_from_where: opt("consumeFromWhere"),
            subscriptions,
        })
    }

    /// `GET_PRODUCER_CONNECTION_LIST` (204).
    pub async fn producer_connection(
        &self,
        broker_addr: &str,
        group: &str,
    ) -> Result<Vec<ClientConnection>> {
        let code = RequestCode::GetProducerConnectionList;
        let req = RemotingCommand::request(code.code(), 0).with_ext("producerGroup", group);
        let resp = self.call(broker_addr, req).await?;
        let v = Self::parse_json(broker_addr, code, &resp.body)?;
        Ok(Self::connections(&v))
    }

    /// `QUERY_MESSAGE` (12) by business key (or by `UNIQ_KEY` with `unique_key`) on one
    /// broker, stored between `begin_ms` and `end_ms`. No hit is an empty list.
    #[allow(clippy::too_many_arguments)]
    pub async fn query_message(
        &self,
        broker_addr: &str,
        broker_name: &str,
        topic: &str,
        key: &str,
        max_num: i32,
        begin_ms: i64,
        end_ms: i64,
        unique_key: bool,
    ) -> Result<Vec<MessageExt>> {
        let code = RequestCode::QueryMessage.code();
        let mut req = RemotingCommand::request(code, 0)
            .with_ext("topic", topic)
            .with_ext("key", key)
            .with_ext("maxNum", max_num.to_string())
            .with_ext("beginTimestamp", begin_ms.to_string())
            .with_ext("endTimestamp", end_ms.to_string());
        if unique_key {
            req.ext_fields.insert("_UNIQUE_KEY_QUERY", "true");
        }
        let resp = self.client.invoke(broker_addr, req, self.timeout).await?;
        if resp.code == ResponseCode::QueryNotFound.code() {
            return Ok(Vec::new());
        }
        let resp = crate::transport::expect_success(broker_addr, code, resp)?;
        let mut msgs = decode_records(&resp.body, broker_name);
        if unique_key {
            msgs.retain(|m| m.property("UNIQ_KEY") == Some(key));
        }
        Ok(msgs)
    }

    /// `QUERY_MESSAGE` on every master of the topic's route, merged.
    pub async fn query_message_by_key(
        &self,
        topic: &str,
        key: &str,
        max_num: i32,
        begin_ms: i64,
        end_ms: i64,
    ) -> Result<Vec<MessageExt>> {
        self.query_all_masters(topic, key, max_num, begin_ms, end_ms, false)
            .await
    }

    /// Messages whose client id (`UNIQ_KEY`) is `msg_id`.
    pub async fn query_message_by_uniq_key(
        &self,
        topic: &str,
        msg_id: &str,
    ) -> Result<Vec<MessageExt>> {
        self.query_all_masters(topic, msg_id, 32, 0, i64::MAX, true)
            .await
    }

    async fn query_all_masters(
        &self,
        topic: &str,
        key: &str,
        max_num: i32,
        begin_ms: i64,
        end_ms: i64,
        unique: bool,
    ) -> Result<Vec<MessageExt>> {
        let route = self.topic_route(topic).await?;
        let mut out = Vec::new();
        for b in &route.broker_datas {
            if let Some(addr) = b.broker_addrs.get(&0) {
                out.extend(
                    self.query_message(
                        addr,
                        &b.broker_name,
                        topic,
                        key,
                        max_num,
                        begin_ms,
                        end_ms,
                        unique,
                    )
                    .await?,
                );
            }
        }
        Ok(out)
    }

    /// `VIEW_MESSAGE_BY_ID` (33): the broker and commit-log offset come from the
    /// offsetMsgId itself.
    pub async fn view_message(&self, offset_msg_id: &str) -> Result<MessageExt> {
        let id = decode_offset_msg_id(offset_msg_id).map_err(|e| {
            ClientError::Invalid(format!("{offset_msg_id:?} is not an offsetMsgId: {e}"))
        })?;
        let addr = id.store_host.to_string();
        let code = RequestCode::ViewMessageById.code();
        let req =
            RemotingCommand::request(code, 0).with_ext("offset", id.commit_log_offset.to_string());
        let resp = self.call(&addr, req).await?;
        decode_records(&resp.body, "")
            .into_iter()
            .next()
            .ok_or_else(|| {
                Self::protocol(
                    &addr,
                    RequestCode::ViewMessageById,
                    "body holds no message record",
                )
            })
    }

    /// `INVOKE_BROKER_TO_RESET_OFFSET` (222): queue → new offset as the broker computed it.
    pub async fn reset_offset(
        &self,
        broker_addr: &str,
        group: &str,
        topic: &str,
        timestamp_ms: i64,
        force: bool,
    ) -> Result<BTreeMap<MessageQueue, i64>> {
        let code = RequestCode::InvokeBrokerToResetOffset;
        let req = RemotingCommand::request(code.code(), 0)
            .with_ext("group", group)
            .with_ext("topic", topic)
            .with_ext("queueId", "-1")
            .with_ext("timestamp", timestamp_ms.to_string())
            .with_ext("isForce", force.to_string());
        let resp = self.call(broker_addr, req).await?;
        let mut out = BTreeMap::new();
        if resp.body.is_empty() {
            return Ok(out);
        }
        let v = Self::parse_json(broker_addr, code, &resp.body)?;
        for (k, o) in mq_entries(&v, "offsetTable") {
            if let (Some(mq), Some(off)) = (mq_key(k), o.as_i64()) {
                out.insert(mq, off);
            }
        }
        Ok(out)
    }

    /// `GET_MAX_OFFSET` (30) of one queue on one broker.
    pub async fn max_offset(&self, broker_addr: &str, topic: &str, queue_id: i32) -> Result<i64> {
        let req = RemotingCommand::request(RequestCode::GetMaxOffset.code(), 0)
            .with_ext("topic", topic)
            .with_ext("queueId", queue_id.to_string());
        let resp = self.call(broker_addr, req).await?;
        resp.ext_fields
            .get("offset")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                Self::protocol(
                    broker_addr,
                    RequestCode::GetMaxOffset,
                    "no offset in the response",
                )
            })
    }
}

/// Entries of a MessageQueue-keyed map (fastjson object keys or a JSON-text string key).
fn mq_entries<'a>(v: &'a Value, key: &str) -> Vec<(&'a Value, &'a Value)> {
    match v.get(key) {
        Some(Value::Object(entries)) => entries.iter().map(|(k, v)| (k, v)).collect(),
        _ => Vec::new(),
    }
}

fn mq_key(k: &Value) -> Option<MessageQueue> {
    let parsed;
    let obj = match k {
        Value::Object(_) => k,
        // Some writers quote the key object as a JSON string.
        Value::String(s) => {
            parsed = json::parse_str(s).ok()?;
            &parsed
        }
        _ => return None,
    };
    Some(MessageQueue {
        topic: obj.get("topic")?.as_str()?.to_string(),
        broker_name: obj.get("brokerName")?.as_str()?.to_string(),
        queue_id: obj.get("queueId")?.as_i32()?,
    })
}

fn num(v: &Value, key: &str) -> i64 {
    v.get(key).and_then(Value::as_i64).unwrap_or(0)
}

fn text(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fastjson_messagequeue_keys() {
        let body = br#"{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T1"}:{"lastUpdateTimestamp":1700000000000,"maxOffset":120,"minOffset":0},{"brokerName":"broker-a","queueId":1,"topic":"T1"}:{"lastUpdateTimestamp":0,"maxOffset":7,"minOffset":2}},"topicPutTps":0.0}"#;
        let v = json::parse(body).unwrap();
        let entries = mq_entries(&v, "offsetTable");
        assert_eq!(entries.len(), 2);
        let mq = mq_key(entries[1].0).unwrap();
        assert_eq!(mq, MessageQueue::new("T1", "broker-a", 1));
        assert_eq!(num(entries[1].1, "maxOffset"), 7);
        // Quoted key text is accepted too.
        let quoted = Value::String(r#"{"brokerName":"b","queueId":3,"topic":"T"}"#.into());
        assert_eq!(mq_key(&quoted), Some(MessageQueue::new("T", "b", 3)));
        assert_eq!(mq_key(&Value::String("nope".into())), None);
    }

    #[test]
    fn consume_stats_diff_total() {
        let mut s = ConsumeStats::default();
        s.offsets.insert(
            MessageQueue::new("T", "b", 0),
            OffsetWrapper {
                broker_offset: 10,
                consumer_offset: 4,
                ..Default::default()
            },
        );
        s.offsets.insert(
            MessageQueue::new("T", "b", 1),
            OffsetWrapper {
                broker_offset: 3,
                consumer_offset: 5,
                ..Default::default()
            },
        );
        assert_eq!(s.diff_total(), 6);
    }
}

/// A broker's stage profile at one instant, from its runtime info: upstream's put/get
/// totals and ringmq's `ringmq.*` keys. Keys a broker does not report (Apache RocketMQ has
/// no `ringmq.*`) read 0; [`BrokerStageProfile::is_ringmq`] tells the two apart.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct BrokerStageProfile {
    /// Messages stored / handed out since broker start: `ringmq.putMessagesTotal` /
    /// `ringmq.getMessagesTotal` (every topic), else upstream's `msgPutTotalTodayNow` /
    /// `msgGetTotalTodayNow` (system topics left out).
    pub put_messages: u64,
    pub get_messages: u64,
    pub append_batches: u64,
    pub append_records: u64,
    /// Append critical section per batch (the lock-hold time), µs: p50, p99, max since the
    /// store opened.
    pub append_lock_hold_us: [u64; 3],
    pub flush_count: u64,
    pub flushed_bytes: u64,
    /// fdatasync/msync latency, µs: p50, p99 since the store opened.
    pub flush_latency_us: [u64; 2],
    pub reput_lag_bytes: u64,
    pub put_rejected_busy: u64,
    /// `core<cpu>` → network-core loop stalls (> 500 µs busy).
    pub stalls_by_core: BTreeMap<String, u64>,
    /// SYSTEM_BUSY remark prefix → refusals.
    pub busy_refusals: BTreeMap<String, u64>,
    /// Whether the broker reported any `ringmq.*` key.
    pub ringmq: bool,
}

impl BrokerStageProfile {
    pub fn from_runtime_info(info: &BTreeMap<String, String>) -> Self {
        let num = |k: &str| -> u64 {
            info.get(k)
                .and_then(|v| v.trim().parse::<f64>().ok())
                .map_or(0, |v| v.max(0.0) as u64)
        };
        let nums = |k: &str| -> Vec<u64> {
            info.get(k)
                .map(|v| {
                    v.split_whitespace()
                        .map(|x| x.parse::<f64>().map_or(0, |f| f.max(0.0) as u64))
                        .collect()
                })
                .unwrap_or_default()
        };
        let pick = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0);
        let hold = nums("ringmq.appendLockHoldUs");
        let flush = nums("ringmq.flushLatencyUs");
        let with_prefix = |prefix: &str| -> BTreeMap<String, u64> {
            info.iter()
                .filter_map(|(k, v)| {
                    let name = k.strip_prefix(prefix)?;
                    Some((name.to_string(), v.trim().parse().unwrap_or(0)))
                })
                .collect()
        };
        Self {
            put_messages: if info.contains_key("ringmq.putMessagesTotal") {
                num("ringmq.putMessagesTotal")
            } else {
                num("msgPutTotalTodayNow")
            },
            get_messages: if info.contains_key("ringmq.getMessagesTotal") {
                num("ringmq.getMessagesTotal")
            } else {
                num("msgGetTotalTodayNow")
            },
            append_batches: num("ringmq.appendBatches"),
            append_records: num("ringmq.appendRecords"),
            append_lock_hold_us: [pick(&hold, 0), pick(&hold, 1), pick(&hold, 2)],
            flush_count: num("ringmq.flushCount"),
            flushed_bytes: num("ringmq.flushedBytes"),
            flush_latency_us: [pick(&flush, 0), pick(&flush, 1)],
            reput_lag_bytes: num("ringmq.reputLagBytes"),
            put_rejected_busy: num("ringmq.putRejectedBusy"),
            stalls_by_core: with_prefix("ringmq.stallCount."),
            busy_refusals: with_prefix("ringmq.busyRefusals."),
            ringmq: info.keys().any(|k| k.starts_with("ringmq.")),
        }
    }
}

/// p50 / p99 / max in µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct QuantilesUs {
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

/// What the broker(s) did during a run: counters as after − before (summed over brokers),
/// ratios from those differences, and the latency quantiles as reported after the run
/// (cumulative since each broker's store opened; the worst broker's value).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct StageDelta {
    /// The brokers measured.
    pub brokers: Vec<String>,
    pub put_messages: u64,
    pub get_messages: u64,
    pub append_batches: u64,
    pub append_records: u64,
    /// append_records / append_batches over the run.
    pub records_per_batch: f64,
    /// The lock-hold time: append critical section per batch, since store open.
    pub append_lock_hold_us: QuantilesUs,
    pub fdatasyncs: u64,
    pub flushed_bytes: u64,
    /// flushed_bytes / fdatasyncs over the run.
    pub bytes_per_fdatasync: f64,
    /// Flush latency since store open (max = p99's worst broker; the store keeps no max).
    pub flush_latency_us: QuantilesUs,
    /// Dispatch lag after the run.
    pub reput_lag_bytes: u64,
    pub stalls: u64,
    pub stalls_by_core: BTreeMap<String, u64>,
    pub busy_refusals: BTreeMap<String, u64>,
    pub put_rejected_busy: u64,
}

impl StageDelta {
    /// Adds one broker's change from `before` to `after`.
    pub fn add(&mut self, broker: &str, before: &BrokerStageProfile, after: &BrokerStageProfile) {
        let d = |a: u64, b: u64| a.saturating_sub(b);
        self.brokers.push(broker.to_string());
        self.put_messages += d(after.put_messages, before.put_messages);
        self.get_messages += d(after.get_messages, before.get_messages);
        self.append_batches += d(after.append_batches, before.append_batches);
        self.append_records += d(after.append_records, before.append_records);
        self.fdatasyncs += d(after.flush_count, before.flush_count);
        self.flushed_bytes += d(after.flushed_bytes, before.flushed_bytes);
        self.put_rejected_busy += d(after.put_rejected_busy, before.put_rejected_busy);
        self.reput_lag_bytes += after.reput_lag_bytes;
        let h = &after.append_lock_hold_us;
        self.append_lock_hold_us.p50 = self.append_lock_hold_us.p50.max(h[0]);
        self.append_lock_hold_us.p99 = self.append_lock_hold_us.p99.max(h[1]);
        self.append_lock_hold_us.max = self.append_lock_hold_us.max.max(h[2]);
        let f = &after.flush_latency_us;
        self.flush_latency_us.p50 = self.flush_latency_us.p50.max(f[0]);
        self.flush_latency_us.p99 = self.flush_latency_us.p99.max(f[1]);
        self.flush_latency_us.max = self.flush_latency_us.max.max(f[1]);
        for (core, n) in &after.stalls_by_core {
            let was = before.stalls_by_core.get(core).copied().unwrap_or(0);
            let key = if self.brokers.len() > 1 {
                format!("{broker}/{core}")
            } else {
                core.clone()
            };
            *self.stalls_by_core.entry(key).or_insert(0) += d(*n, was);
            self.stalls += d(*n, was);
        }
        for (reason, n) in &after.busy_refusals {
            let was = before.busy_refusals.get(reason).copied().unwrap_or(0);
            *self.busy_refusals.entry(reason.clone()).or_insert(0) += d(*n, was);
        }
        self.records_per_batch = ratio(self.append_records, self.append_batches);
        self.bytes_per_fdatasync = ratio(self.flushed_bytes, self.fdatasyncs);
    }

    /// One human line, printed under the bench summary.
    pub fn summary_line(&self) -> String {
        let busy: Vec<String> = self
            .busy_refusals
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(k, n)| format!("{k}={n}"))
            .collect();
        format!(
            "broker: {} puts, {} gets; append {} batches, {:.1} records/batch, lock-hold p50 {} p99 {} max {} us; \
             {} fdatasyncs, {:.0} bytes/fdatasync, flush p50 {} p99 {} us; reput lag {} B; {} core stalls; busy refusals {}",
            self.put_messages,
            self.get_messages,
            self.append_batches,
            self.records_per_batch,
            self.append_lock_hold_us.p50,
            self.append_lock_hold_us.p99,
            self.append_lock_hold_us.max,
            self.fdatasyncs,
            self.bytes_per_fdatasync,
            self.flush_latency_us.p50,
            self.flush_latency_us.p99,
            self.reput_lag_bytes,
            self.stalls,
            if busy.is_empty() {
                "0".to_string()
            } else {
                busy.join(" ")
            }
        )
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

#[cfg(test)]
mod stage_profile_tests {
    use super::*;

    fn info(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_runtime_info_and_diffs_a_run() {
        let before = BrokerStageProfile::from_runtime_info(&info(&[
            ("msgPutTotalTodayNow", "0"),
            ("ringmq.putMessagesTotal", "100"),
            ("ringmq.appendBatches", "10"),
            ("ringmq.appendRecords", "100"),
            ("ringmq.appendLockHoldUs", "3 9 40"),
            ("ringmq.flushCount", "5"),
            ("ringmq.flushedBytes", "5000"),
            ("ringmq.stallCount.core0", "1"),
            ("ringmq.busyRefusals.PC_SYNCHRONIZED", "0"),
        ]));
        assert!(before.ringmq);
        assert_eq!(before.append_lock_hold_us, [3, 9, 40]);
        let after = BrokerStageProfile::from_runtime_info(&info(&[
            ("msgPutTotalTodayNow", "0"),
            ("ringmq.putMessagesTotal", "1100"),
            ("ringmq.appendBatches", "60"),
            ("ringmq.appendRecords", "1100"),
            ("ringmq.appendLockHoldUs", "4 12 80"),
            ("ringmq.flushCount", "15"),
            ("ringmq.flushedBytes", "45000"),
            ("ringmq.flushLatencyUs", "200 900"),
            ("ringmq.reputLagBytes", "7"),
            ("ringmq.stallCount.core0", "4"),
            ("ringmq.stallCount.core1", "2"),
            ("ringmq.busyRefusals.PC_SYNCHRONIZED", "3"),
        ]));
        let mut d = StageDelta::default();
        d.add("b:10911", &before, &after);
        assert_eq!(d.put_messages, 1000);
        assert_eq!((d.append_batches, d.append_records), (50, 1000));
        assert_eq!(d.records_per_batch, 20.0);
        assert_eq!(d.bytes_per_fdatasync, 4000.0);
        assert_eq!(
            d.append_lock_hold_us,
            QuantilesUs {
                p50: 4,
                p99: 12,
                max: 80
            }
        );
        assert_eq!(d.stalls, 5);
        assert_eq!(d.stalls_by_core["core1"], 2);
        assert_eq!(d.busy_refusals["PC_SYNCHRONIZED"], 3);
        assert_eq!(d.reput_lag_bytes, 7);
        let line = d.summary_line();
        assert!(line.contains("20.0 records/batch"), "{line}");
        assert!(line.contains("PC_SYNCHRONIZED=3"), "{line}");
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["append_lock_hold_us"]["p99"], 12);
    }

    #[test]
    fn an_apache_broker_reads_as_zeros() {
        let p = BrokerStageProfile::from_runtime_info(&info(&[
            ("msgPutTotalTodayNow", "5"),
            ("putTps", "1.0 2.0 3.0"),
        ]));
        assert!(!p.ringmq);
        assert_eq!(p.put_messages, 5);
        assert_eq!(p.append_batches, 0);
    }
}
