//! Topic routes from the name server: `GET_ROUTEINFO_BY_TOPIC` (105), parsed leniently
//! (standard JSON and fastjson's bare numeric keys, through the remoting crate's reader),
//! turned into publish/subscribe queue lists, and cached per topic with a time-to-live so
//! producers and consumers refresh them periodically (Java: every 30 s).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use ringmq_remoting::body::route::TopicRouteData;
use ringmq_remoting::{RemotingCommand, RequestCode, ResponseCode};

use crate::error::{ClientError, Result};
use crate::message::MessageQueue;
use crate::transport::RemotingClient;

/// Permission bits of a queue data entry (`headers.md` §0.3).
pub const PERM_WRITE: i32 = 2;
pub const PERM_READ: i32 = 4;
/// Broker id of a master.
pub const MASTER_ID: i64 = 0;

/// A route with the derived queue lists.
#[derive(Debug, Clone)]
pub struct TopicRoute {
    pub topic: String,
    pub data: TopicRouteData,
    /// Writable queues whose broker has a master, sorted by broker name then queue id.
    pub publish_queues: Vec<MessageQueue>,
    /// Readable queues, sorted.
    pub subscribe_queues: Vec<MessageQueue>,
}

impl TopicRoute {
    /// Derives the queue lists as Java's client does (`headers.md` §8.1). With
    /// `max_write_queues` (the TBW102 fallback) each broker contributes at most that many.
    pub fn new(topic: &str, data: TopicRouteData, max_write_queues: Option<i32>) -> Self {
        let mut publish_queues = Vec::new();
        let mut subscribe_queues = Vec::new();
        for q in &data.queue_datas {
            let has_master = data
                .broker_datas
                .iter()
                .any(|b| b.broker_name == q.broker_name && b.broker_addrs.contains_key(&MASTER_ID));
            if q.perm & PERM_WRITE != 0 && has_master {
                let n = match max_write_queues {
                    Some(max) => q.write_queue_nums.min(max),
                    None => q.write_queue_nums,
                };
                publish_queues
                    .extend((0..n).map(|i| MessageQueue::new(topic, q.broker_name.clone(), i)));
            }
            if q.perm & PERM_READ != 0 {
                subscribe_queues.extend(
                    (0..q.read_queue_nums)
                        .map(|i| MessageQueue::new(topic, q.broker_name.clone(), i)),
                );
            }
        }
        publish_queues.sort();
        subscribe_queues.sort();
        Self {
            topic: topic.to_string(),
            data,
            publish_queues,
            subscribe_queues,
        }
    }

    /// The master address of `broker_name`.
    pub fn master_addr(&self, broker_name: &str) -> Option<&str> {
        self.broker_addr(broker_name, MASTER_ID)
    }

    /// The address of replica `broker_id` of `broker_name`.
    pub fn broker_addr(&self, broker_name: &str, broker_id: i64) -> Option<&str> {
        self.data
            .broker_datas
            .iter()
            .find(|b| b.broker_name == broker_name)
            .and_then(|b| b.broker_addrs.get(&broker_id))
            .map(String::as_str)
    }

    /// Every broker address in the route (masters and slaves).
    pub fn all_broker_addrs(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .data
            .broker_datas
            .iter()
            .flat_map(|b| b.broker_addrs.values().cloned())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Master addresses of every broker in the route.
    pub fn master_addrs(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .data
            .broker_datas
            .iter()
            .filter_map(|b| b.broker_addrs.get(&MASTER_ID).cloned())
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// Fetches a route from one name server.
pub async fn fetch_route(
    client: &RemotingClient,
    namesrv_addr: &str,
    topic: &str,
    timeout: Duration,
) -> Result<TopicRouteData> {
    let code = RequestCode::GetRouteinfoByTopic.code();
    let request = RemotingCommand::request(code, 0)
        .with_ext("topic", topic)
        // Ask for standard JSON; the lenient reader copes with the legacy form anyway.
        .with_ext("acceptStandardJsonOnly", "true");
    let response = client.invoke(namesrv_addr, request, timeout).await?;
    if response.code != ResponseCode::Success.code() {
        return Err(ClientError::Response {
            addr: namesrv_addr.to_string(),
            request_code: code,
            code: response.code,
            remark: response.remark.unwrap_or_default(),
        });
    }
    TopicRouteData::decode(&response.body).map_err(|e| ClientError::Protocol {
        addr: namesrv_addr.to_string(),
        request_code: code,
        reason: format!("TopicRouteData for {topic}: {e}"),
    })
}

/// Per-topic route cache over a list of name servers.
pub struct RouteCache {
    client: RemotingClient,
    namesrv_addrs: Vec<String>,
    ttl: Duration,
    /// Index of the name server that answered last (tried first next time).
    preferred: Cell<usize>,
    routes: RefCell<HashMap<String, (Instant, Rc<TopicRoute>)>>,
}

impl RouteCache {
    pub fn new(client: RemotingClient, namesrv_addrs: Vec<String>, ttl: Duration) -> Self {
        Self {
            client,
            namesrv_addrs,
            ttl,
            preferred: Cell::new(0),
            routes: RefCell::new(HashMap::new()),
        }
    }

    pub fn namesrv_addrs(&self) -> &[String] {
        &self.namesrv_addrs
    }

    pub fn client(&self) -> &RemotingClient {
        &self.client
    }

    /// Asks the name servers in turn (starting with the last one that answered); a
    /// definitive answer (success or TOPIC_NOT_EXIST) ends the search.
    pub async fn fetch(&self, topic: &str) -> Result<TopicRouteData> {
        if self.namesrv_addrs.is_empty() {
            return Err(ClientError::Invalid(
                "no name server address configured (-n host:9876)".into(),
            ));
        }
        let n = self.namesrv_addrs.len();
        let start = self.preferred.get() % n;
        let mut last_err = None;
        for i in 0..n {
            let idx = (start + i) % n;
            let addr = &self.namesrv_addrs[idx];
            match fetch_route(&self.client, addr, topic, self.client.default_timeout()).await {
                Ok(r) => {
                    self.preferred.set(idx);
                    return Ok(r);
                }
                Err(e @ ClientError::Response { code: 17, .. }) => {
                    self.preferred.set(idx);
                    return Err(e);
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.expect("at least one name server tried"))
    }

    /// The cached route of `topic` if it is younger than the TTL at `now` (a clock read the
    /// caller already made): the per-message fast path of [`RouteCache::route`].
    pub fn cached_fresh(&self, topic: &str, now: Instant) -> Option<Rc<TopicRoute>> {
        let routes = self.routes.borrow();
        let (at, route) = routes.get(topic)?;
        (now.saturating_duration_since(*at) < self.ttl).then(|| route.clone())
    }

    /// The cached route of `topic`, fetched when absent or older than the TTL. When a
    /// refresh fails but a stale route exists, the stale route is kept (brokers rarely move).
    pub async fn route(&self, topic: &str) -> Result<Rc<TopicRoute>> {
        let cached = self.routes.borrow().get(topic).cloned();
        if let Some((at, route)) = &cached {
            if at.elapsed() < self.ttl {
                return Ok(route.clone());
            }
        }
        match self.fetch(topic).await {
            Ok(data) => Ok(self.insert(topic, TopicRoute::new(topic, data, None))),
            Err(e) => match cached {
                Some((_, route)) if !matches!(e, ClientError::Response { code: 17, .. }) => {
                    tracing::warn!(topic, error = %e, "route refresh failed; keeping the cached route");
                    Ok(route)
                }
                _ => Err(e),
            },
        }
    }

    /// Caches `route` (fresh now) and returns it.
    pub fn insert(&self, topic: &str, route: TopicRoute) -> Rc<TopicRoute> {
        let route = Rc::new(route);
        self.routes
            .borrow_mut()
            .insert(topic.to_string(), (Instant::now(), route.clone()));
        route
    }

    /// Caches `route` as already `age` old (short-lived fallbacks such as TBW102 routes).
    pub fn insert_aged(&self, topic: &str, route: TopicRoute, age: Duration) -> Rc<TopicRoute> {
        let route = Rc::new(route);
        let at = Instant::now().checked_sub(age).unwrap_or_else(Instant::now);
        self.routes
            .borrow_mut()
            .insert(topic.to_string(), (at, route.clone()));
        route
    }

    pub fn invalidate(&self, topic: &str) {
        self.routes.borrow_mut().remove(topic);
    }

    /// Topics currently cached.
    pub fn topics(&self) -> Vec<String> {
        self.routes.borrow().keys().cloned().collect()
    }

    /// Re-fetches every cached topic (the periodic refresh).
    pub async fn refresh_all(&self) {
        for topic in self.topics() {
            match self.fetch(&topic).await {
                Ok(data) => {
                    self.insert(&topic, TopicRoute::new(&topic, data, None));
                }
                Err(e) => tracing::debug!(topic, error = %e, "periodic route refresh failed"),
            }
        }
    }

    /// Every broker address known from cached routes.
    pub fn known_broker_addrs(&self, masters_only: bool) -> Vec<String> {
        let mut out: Vec<String> = self
            .routes
            .borrow()
            .values()
            .flat_map(|(_, r)| {
                if masters_only {
                    r.master_addrs()
                } else {
                    r.all_broker_addrs()
                }
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_and_subscribe_queues_follow_perm_and_master() {
        // Legacy fastjson form with bare numeric keys; broker-b has no master.
        let body = br#"{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"broker-a","cluster":"C"},{"brokerAddrs":{1:"10.0.0.3:10911"},"brokerName":"broker-b","cluster":"C"}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":3},{"brokerName":"broker-b","perm":4,"readQueueNums":1,"topicSysFlag":0,"writeQueueNums":1}]}"#;
        let data = TopicRouteData::decode(body).unwrap();
        let route = TopicRoute::new("T", data, None);
        assert_eq!(route.publish_queues.len(), 3);
        assert!(route
            .publish_queues
            .iter()
            .all(|q| q.broker_name == "broker-a"));
        assert_eq!(route.subscribe_queues.len(), 3);
        assert_eq!(route.master_addr("broker-a"), Some("10.0.0.1:10911"));
        assert_eq!(route.master_addr("broker-b"), None);
        assert_eq!(route.all_broker_addrs().len(), 3);
        let capped = TopicRoute::new("T", route.data.clone(), Some(2));
        assert_eq!(capped.publish_queues.len(), 2);
    }
}
