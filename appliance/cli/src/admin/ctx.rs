//! The connection context of one admin run (name server list, the Remoting client, the
//! admin timeout) and the lookups most commands share: cluster info, topic routes, the
//! brokers of a cluster, and the broker calls behind `examineConsumeStats`,
//! `examineTopicStats` and `examineConsumerConnectionInfo`, following the way mqadmin
//! picks brokers (a broker name's master, else one of its slaves).

use std::time::Duration;

use ringmq_client::route::fetch_route;
use ringmq_client::{Admin, ClientConfig, ClientError, RemotingClient};
use ringmq_remoting::body::cluster::ClusterInfo;
use ringmq_remoting::body::consumer::{ConsumerConnection, ProducerConnection};
use ringmq_remoting::body::route::{BrokerData, TopicRouteData, MASTER_ID};
use ringmq_remoting::body::stats::{ConsumeStats, TopicStatsTable};
use ringmq_remoting::json::{self, BodyError};
use ringmq_remoting::{RemotingCommand, RequestCode, ResponseCode};

use super::out::{AResult, AdminError, At, Role};

/// mqadmin's default RPC timeout (`DefaultMQAdminExt.timeoutMillis`).
pub const ADMIN_TIMEOUT: Duration = Duration::from_millis(5_000);

/// Retry topic of a consumer group.
pub fn retry_topic(group: &str) -> String {
    format!("%RETRY%{group}")
}

/// Name server addresses from `-n` (`;`-separated), else `$NAMESRV_ADDR`.
pub fn namesrv_addrs(flag: Option<&str>) -> Vec<String> {
    let text = match flag {
        Some(v) => v.to_string(),
        None => std::env::var("NAMESRV_ADDR").unwrap_or_default(),
    };
    text.split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// The account mqadmin signs with: `--access-key`/`--secret-key`, else upstream tools'
/// `$ROCKETMQ_HOME/conf/tools.yml`, else none (requests go unsigned, as upstream's do).
pub fn credentials(
    access_key: Option<&str>,
    secret_key: Option<&str>,
) -> Result<Option<ringmq_acl::Credentials>, String> {
    match (access_key, secret_key) {
        (Some(ak), Some(sk)) => Ok(Some(ringmq_acl::Credentials::new(
            ak.trim().to_string(),
            sk.trim().to_string(),
        ))),
        (Some(_), None) | (None, Some(_)) => {
            Err("--access-key and --secret-key go together".to_string())
        }
        (None, None) => Ok(std::env::var("ROCKETMQ_HOME")
            .ok()
            .map(|home| std::path::Path::new(&home).join("conf/tools.yml"))
            .and_then(|path| std::fs::read_to_string(path).ok())
            .and_then(|text| ringmq_acl::config::tools_credentials(&text))),
    }
}

/// mqadmin's `BrokerData.selectBrokerAddr`: the master, else the lowest-id slave.
pub fn select_addr(bd: &BrokerData) -> Option<String> {
    bd.broker_addrs
        .get(&MASTER_ID)
        .or_else(|| bd.broker_addrs.values().next())
        .cloned()
}

pub struct Ctx {
    pub client: RemotingClient,
    pub admin: Admin,
    pub namesrv: Vec<String>,
    pub timeout: Duration,
}

impl Ctx {
    /// Builds the client; must run inside the client runtime (`block_on`). With
    /// `credentials`, every request is signed for brokers running with `aclEnable=true`.
    /// With `tls`, every connection speaks TLS.
    pub fn new(
        namesrv: Vec<String>,
        credentials: Option<ringmq_acl::Credentials>,
        tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    ) -> Self {
        let config = ClientConfig {
            request_timeout_ms: ADMIN_TIMEOUT.as_millis() as u64,
            credentials,
            tls,
            ..ClientConfig::default()
        };
        let client = RemotingClient::new(config);
        let admin = Admin::new(client.clone(), namesrv.clone()).with_timeout(ADMIN_TIMEOUT);
        Self {
            client,
            admin,
            namesrv,
            timeout: ADMIN_TIMEOUT,
        }
    }

    /// Fails unless a name server address was given.
    pub fn require_namesrv(&self) -> AResult<()> {
        if self.namesrv.is_empty() {
            return Err(AdminError::Usage(
                "no name server address: pass -n host:9876 (or 'host1:9876;host2:9876') or set NAMESRV_ADDR".into(),
            ));
        }
        Ok(())
    }

    /// Sends `req` to `addr` and returns the answer whatever its code.
    pub async fn invoke(
        &self,
        addr: &str,
        req: RemotingCommand,
    ) -> Result<RemotingCommand, ClientError> {
        self.client.invoke(addr, req, self.timeout).await
    }

    /// Sends `req` to `addr` and requires SUCCESS.
    pub async fn call(
        &self,
        addr: &str,
        req: RemotingCommand,
    ) -> Result<RemotingCommand, ClientError> {
        let code = req.code;
        let resp = self.invoke(addr, req).await?;
        ringmq_client::transport::expect_success(addr, code, resp)
    }

    /// A decoding failure of a response body, naming the server.
    pub fn bad_body(
        role: Role,
        addr: &str,
        code: RequestCode,
        e: impl std::fmt::Display,
    ) -> AdminError {
        let e = ClientError::Protocol {
            addr: addr.to_string(),
            request_code: code.code(),
            reason: e.to_string(),
        };
        Err::<(), _>(e).at(role).unwrap_err()
    }

    // ---- name server -----------------------------------------------------------------

    pub async fn cluster_info(&self) -> AResult<ClusterInfo> {
        self.require_namesrv()?;
        self.admin.cluster_info().await.ns()
    }

    /// The route of `topic`, asking the name servers in turn; a refusal (e.g.
    /// TOPIC_NOT_EXIST) from one of them is final.
    pub async fn route(&self, topic: &str) -> AResult<TopicRouteData> {
        self.require_namesrv()?;
        let mut last = None;
        for addr in &self.namesrv {
            match fetch_route(&self.client, addr, topic, self.timeout).await {
                Ok(r) => return Ok(r),
                Err(e @ ClientError::Response { .. }) => return Err(e).ns(),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("at least one name server")).ns()
    }

    /// `CommandUtil.fetchMasterAddrByClusterName`: master addresses of `cluster`, sorted.
    pub async fn masters(&self, cluster: &str) -> AResult<Vec<String>> {
        let info = self.cluster_info().await?;
        let names = cluster_brokers(&info, cluster)?;
        let mut out: Vec<String> = names
            .iter()
            .filter_map(|n| {
                info.broker_addr_table
                    .get(*n)?
                    .broker_addrs
                    .get(&MASTER_ID)
                    .cloned()
            })
            .collect();
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// `CommandUtil.fetchMasterAndSlaveAddrByClusterName`: every broker address of `cluster`.
    pub async fn masters_and_slaves(&self, cluster: &str) -> AResult<Vec<String>> {
        let info = self.cluster_info().await?;
        cluster_addrs(&info, cluster)
    }

    /// The broker name registered for `addr` (`CommandUtil.fetchBrokerNameByAddr`).
    pub async fn broker_name_of(&self, addr: &str) -> AResult<String> {
        let info = self.cluster_info().await?;
        info.broker_addr_table
            .values()
            .find(|b| b.broker_addrs.values().any(|a| a == addr))
            .map(|b| b.broker_name.clone())
            .ok_or_else(|| {
                AdminError::failed(format!(
                    "no broker with address {addr} is registered with the name server"
                ))
            })
    }

    // ---- broker ----------------------------------------------------------------------

    /// `GET_TOPIC_STATS_INFO` (202) on one broker.
    pub async fn topic_stats(&self, addr: &str, topic: &str) -> AResult<TopicStatsTable> {
        let code = RequestCode::GetTopicStatsInfo;
        let req = RemotingCommand::request(code.code(), 0).with_ext("topic", topic);
        let resp = self.call(addr, req).await.br()?;
        TopicStatsTable::decode(&resp.body).map_err(|e| Self::bad_body(Role::Broker, addr, code, e))
    }

    /// `examineTopicStats(topic)`: every broker of the route, merged; empty is an error.
    pub async fn examine_topic_stats(
        &self,
        topic: &str,
        route_topic: &str,
    ) -> AResult<TopicStatsTable> {
        let route = self.route(route_topic).await?;
        let mut merged = TopicStatsTable::default();
        for bd in &route.broker_datas {
            if let Some(addr) = select_addr(bd) {
                let t = self.topic_stats(&addr, topic).await?;
                merged.offset_table.extend(t.offset_table);
                merged.topic_put_tps += t.topic_put_tps;
            }
        }
        if merged.offset_table.is_empty() {
            return Err(AdminError::failed(format!(
                "no broker in the route of {route_topic} has stats for topic {topic}"
            )));
        }
        Ok(merged)
    }

    /// `GET_CONSUME_STATS` (208) on one broker.
    pub async fn consume_stats(
        &self,
        addr: &str,
        group: &str,
        topic: Option<&str>,
    ) -> AResult<ConsumeStats> {
        let code = RequestCode::GetConsumeStats;
        let mut req = RemotingCommand::request(code.code(), 0).with_ext("consumerGroup", group);
        if let Some(t) = topic {
            req.ext_fields.insert("topic", t);
        }
        let resp = self.call(addr, req).await.br()?;
        ConsumeStats::decode(&resp.body).map_err(|e| Self::bad_body(Role::Broker, addr, code, e))
    }

    /// `examineConsumeStats(cluster, group, topic)`: the route of the group's retry topic
    /// (else the topic's), every broker asked, merged.
    pub async fn examine_consume_stats(
        &self,
        group: &str,
        topic: Option<&str>,
    ) -> AResult<ConsumeStats> {
        let mut candidates = vec![retry_topic(group)];
        if let Some(t) = topic {
            candidates.push(t.to_string());
        }
        let mut route = None;
        let mut last_err = None;
        for t in &candidates {
            match self.route(t).await {
                Ok(r) => {
                    route = Some(r);
                    break;
                }
                Err(e) => last_err = Some(e),
            }
        }
        let route = match route {
            Some(r) => r,
            None => return Err(last_err.expect("one route tried")),
        };
        let mut merged = ConsumeStats::default();
        for bd in &route.broker_datas {
            if let Some(addr) = select_addr(bd) {
                let s = self.consume_stats(&addr, group, topic).await?;
                merged.offset_table.extend(s.offset_table);
                merged.consume_tps += s.consume_tps;
            }
        }
        if merged.offset_table.is_empty() {
            return Err(AdminError::failed(format!(
                "consumer group {group} has no consume stats: no offsets stored (is the consumer online?)"
            )));
        }
        Ok(merged)
    }

    /// `GET_CONSUMER_CONNECTION_LIST` (203) on one broker; an empty set is
    /// CONSUMER_NOT_ONLINE like mqadmin's.
    pub async fn consumer_connection_at(
        &self,
        addr: &str,
        group: &str,
    ) -> Result<ConsumerConnection, ClientError> {
        let code = RequestCode::GetConsumerConnectionList;
        let req = RemotingCommand::request(code.code(), 0).with_ext("consumerGroup", group);
        let resp = self.call(addr, req).await?;
        let cc = ConsumerConnection::decode(&resp.body).map_err(|e| ClientError::Protocol {
            addr: addr.to_string(),
            request_code: code.code(),
            reason: e.to_string(),
        })?;
        if cc.connection_set.is_empty() {
            return Err(ClientError::Response {
                addr: addr.to_string(),
                request_code: code.code(),
                code: ResponseCode::ConsumerNotOnline.code(),
                remark: format!("the consumer group {group} has no connection"),
            });
        }
        Ok(cc)
    }

    /// `examineConsumerConnectionInfo(group)`: a broker of the retry topic's route.
    pub async fn examine_consumer_connection(
        &self,
        group: &str,
    ) -> AResult<Result<ConsumerConnection, ClientError>> {
        let route = self.route(&retry_topic(group)).await?;
        let addr = route
            .broker_datas
            .iter()
            .find_map(select_addr)
            .ok_or_else(|| {
                AdminError::failed(format!("the route of {} has no broker", retry_topic(group)))
            })?;
        Ok(self.consumer_connection_at(&addr, group).await)
    }

    /// `GET_PRODUCER_CONNECTION_LIST` (204) on one broker.
    pub async fn producer_connection_at(
        &self,
        addr: &str,
        group: &str,
    ) -> AResult<ProducerConnection> {
        let code = RequestCode::GetProducerConnectionList;
        let req = RemotingCommand::request(code.code(), 0).with_ext("producerGroup", group);
        let resp = self.call(addr, req).await.br()?;
        ProducerConnection::decode(&resp.body)
            .map_err(|e| Self::bad_body(Role::Broker, addr, code, e))
    }

    /// `QUERY_TOPIC_CONSUME_BY_WHO` (300) on the first broker of the topic's route.
    pub async fn topic_consume_by_who(&self, topic: &str) -> AResult<Vec<String>> {
        let route = self.route(topic).await?;
        let Some(addr) = route.broker_datas.iter().find_map(select_addr) else {
            return Ok(Vec::new());
        };
        let code = RequestCode::QueryTopicConsumeByWho;
        let req = RemotingCommand::request(code.code(), 0).with_ext("topic", topic);
        let resp = self.call(&addr, req).await.br()?;
        group_list(&resp.body).map_err(|e| Self::bad_body(Role::Broker, &addr, code, e))
    }
}

/// Broker names of `cluster`, or an error naming the clusters that do exist.
pub fn cluster_brokers<'a>(info: &'a ClusterInfo, cluster: &str) -> AResult<Vec<&'a String>> {
    match info.cluster_addr_table.get(cluster) {
        Some(names) => Ok(names.iter().collect()),
        None => {
            let known: Vec<&str> = info.cluster_addr_table.keys().map(String::as_str).collect();
            Err(AdminError::failed(format!(
                "cluster {cluster} is not registered with the name server (known clusters: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            )))
        }
    }
}

/// Every address (masters and slaves) of `cluster`, sorted.
pub fn cluster_addrs(info: &ClusterInfo, cluster: &str) -> AResult<Vec<String>> {
    let names = cluster_brokers(info, cluster)?;
    let mut out: Vec<String> = names
        .iter()
        .filter_map(|n| info.broker_addr_table.get(*n))
        .flat_map(|b| b.broker_addrs.values().cloned())
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

/// `GroupList` body: `{"groupList":["G1"]}`.
pub fn group_list(body: &[u8]) -> Result<Vec<String>, BodyError> {
    let v = json::parse(body)?;
    json::read::string_list(&v, "groupList", "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namesrv_list_splits_on_semicolons() {
        assert_eq!(
            namesrv_addrs(Some(" 10.0.0.1:9876;10.0.0.2:9876; ")),
            vec!["10.0.0.1:9876", "10.0.0.2:9876"]
        );
        assert!(namesrv_addrs(Some("")).is_empty());
    }

    #[test]
    fn select_addr_prefers_the_master() {
        let mut bd = BrokerData::new("C", "b");
        bd.broker_addrs.insert(2, "h2:1".into());
        bd.broker_addrs.insert(1, "h1:1".into());
        assert_eq!(select_addr(&bd).as_deref(), Some("h1:1"));
        bd.broker_addrs.insert(0, "h0:1".into());
        assert_eq!(select_addr(&bd).as_deref(), Some("h0:1"));
    }

    #[test]
    fn cluster_lookups() {
        let body = br#"{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"broker-a","cluster":"C1"},"broker-b":{"brokerAddrs":{"0":"10.0.0.3:10911"},"brokerName":"broker-b","cluster":"C1"}},"clusterAddrTable":{"C1":["broker-a","broker-b"]}}"#;
        let info = ClusterInfo::decode(body).unwrap();
        assert_eq!(
            cluster_addrs(&info, "C1").unwrap(),
            vec!["10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"]
        );
        let err = cluster_addrs(&info, "nope").unwrap_err();
        assert!(err.message().contains("known clusters: C1"), "{err:?}");
        assert_eq!(
            group_list(br#"{"groupList":["G1","G2"]}"#).unwrap(),
            vec!["G1", "G2"]
        );
    }
}
