//! The broker's requests to the controllers (spec features.md §g.4): who leads
//! (GET_METADATA_INFO), broker ids (GET_NEXT_BROKER_ID, APPLY_BROKER_ID), REGISTER_BROKER,
//! ELECT_MASTER, GET_REPLICA_INFO, ALTER_SYNC_STATE_SET to the leader, and BROKER_HEARTBEAT
//! to every controller. Connections are kept: a controller takes the close of a
//! heartbeat's connection for the broker's death.

use std::time::Duration;

use ringmq_remoting::body::controller::{ElectMasterResponseBody, SyncStateSet};
use ringmq_remoting::codes::{RequestCode, ResponseCode};
use ringmq_remoting::header::controller::{
    AlterSyncStateSetRequestHeader, AlterSyncStateSetResponseHeader, ApplyBrokerIdRequestHeader,
    ElectMasterRequestHeader, ElectMasterResponseHeader, GetMetaDataResponseHeader,
    GetNextBrokerIdRequestHeader, GetNextBrokerIdResponseHeader, GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader, RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader,
};
use ringmq_remoting::header::namesrv::BrokerHeartbeatRequestHeader;
use ringmq_remoting::RemotingCommand;

use crate::config::ClientTls;
use crate::register::NamesrvConnections;
use crate::role::MasterView;

/// A controller's refusal (its code) or a failed exchange (no code).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerError {
    pub code: Option<i32>,
    pub message: String,
}

impl std::fmt::Display for ControllerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.code {
            Some(code) => write!(f, "controller answered {code}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

fn failed(message: String) -> ControllerError {
    ControllerError {
        code: None,
        message,
    }
}

pub type ControllerResult<T> = Result<T, ControllerError>;

pub struct ControllerClient {
    conns: NamesrvConnections,
    addrs: Vec<String>,
    leader: Option<String>,
    timeout: Duration,
}

impl ControllerClient {
    pub fn new(addrs: Vec<String>, tls: ClientTls, timeout: Duration) -> Self {
        ControllerClient {
            conns: NamesrvConnections::new(tls),
            addrs,
            leader: None,
            timeout,
        }
    }

    pub fn leader(&self) -> Option<&str> {
        self.leader.as_deref()
    }

    /// Asks the controllers in turn who leads; the first that knows answers.
    pub fn refresh_leader(&mut self) -> ControllerResult<String> {
        let mut last = failed("controllerAddr names no controller".into());
        for addr in self.addrs.clone() {
            let request =
                RemotingCommand::request(RequestCode::ControllerGetMetadataInfo.code(), 0);
            let answer = self
                .conns
                .call(&addr, &request, self.timeout)
                .map_err(failed)
                .and_then(|r| decode::<GetMetaDataResponseHeader>(&r));
            match answer {
                Ok(h) if h.is_leader => return Ok(self.set_leader(addr)),
                Ok(h) => match h.controller_leader_address.filter(|a| !a.is_empty()) {
                    Some(leader) => return Ok(self.set_leader(leader)),
                    None => last = failed(format!("{addr} knows no controller leader yet")),
                },
                Err(e) => last = e,
            }
        }
        self.leader = None;
        Err(last)
    }

    fn set_leader(&mut self, addr: String) -> String {
        if self.leader.as_deref() != Some(addr.as_str()) {
            tracing::info!(controller = addr, "controller leader");
        }
        self.leader = Some(addr.clone());
        addr
    }

    /// Sends to the leader (found first when unknown); one retry after NOT_LEADER or a
    /// failed exchange, with the leader asked again.
    fn call_leader(&mut self, request: &RemotingCommand) -> ControllerResult<RemotingCommand> {
        for attempt in 0..2 {
            let leader = match self.leader.clone() {
                Some(l) => l,
                None => self.refresh_leader()?,
            };
            match self.conns.call(&leader, request, self.timeout) {
                Ok(r) if r.code == ResponseCode::ControllerNotLeader.code() && attempt == 0 => {
                    self.leader = None;
                }
                Ok(r) => return Ok(r),
                Err(e) if attempt == 0 => {
                    tracing::debug!(controller = leader, "controller call failed: {e}");
                    self.leader = None;
                }
                Err(e) => return Err(failed(e)),
            }
        }
        Err(failed("no controller leader answered".into()))
    }

    pub fn next_broker_id(&mut self, cluster: &str, broker_name: &str) -> ControllerResult<i64> {
        let request = RemotingCommand::request(RequestCode::ControllerGetNextBrokerId.code(), 0)
            .with_header(&GetNextBrokerIdRequestHeader {
                cluster_name: cluster.into(),
                broker_name: broker_name.into(),
            });
        let r = success(self.call_leader(&request)?)?;
        decode::<GetNextBrokerIdResponseHeader>(&r)?
            .next_broker_id
            .ok_or_else(|| failed("GET_NEXT_BROKER_ID answered no nextBrokerId".into()))
    }

    pub fn apply_broker_id(
        &mut self,
        cluster: &str,
        broker_name: &str,
        broker_id: i64,
        check_code: &str,
    ) -> ControllerResult<()> {
        let request = RemotingCommand::request(RequestCode::ControllerApplyBrokerId.code(), 0)
            .with_header(&ApplyBrokerIdRequestHeader {
                cluster_name: cluster.into(),
                broker_name: broker_name.into(),
                applied_broker_id: broker_id,
                register_check_code: check_code.into(),
            });
        success(self.call_leader(&request)?).map(|_| ())
    }

    /// REGISTER_BROKER: the set's live master, if any, and its SyncStateSet.
    pub fn register(
        &mut self,
        cluster: &str,
        broker_name: &str,
        broker_id: i64,
        broker_addr: &str,
    ) -> ControllerResult<MasterView> {
        let request = RemotingCommand::request(RequestCode::ControllerRegisterBroker.code(), 0)
            .with_header(&RegisterBrokerToControllerRequestHeader {
                cluster_name: cluster.into(),
                broker_name: broker_name.into(),
                broker_id,
                broker_address: broker_addr.into(),
                invoke_time: Some(ringmq_sync::now_ms()),
            });
        let r = success(self.call_leader(&request)?)?;
        let h = decode::<RegisterBrokerToControllerResponseHeader>(&r)?;
        let set = decode_sync_state_set(&r.body)?;
        Ok(MasterView {
            master_broker_id: h.master_broker_id,
            master_address: h.master_address,
            master_epoch: h.master_epoch.unwrap_or(-1),
            sync_state_set_epoch: h.sync_state_set_epoch.unwrap_or(set.sync_state_set_epoch),
            sync_state_set: set.sync_state_set,
        })
    }

    /// ELECT_MASTER for this broker. A live master (MASTER_STILL_EXIST) is an answer too.
    pub fn elect(
        &mut self,
        cluster: &str,
        broker_name: &str,
        broker_id: i64,
    ) -> ControllerResult<MasterView> {
        let request = RemotingCommand::request(RequestCode::ControllerElectMaster.code(), 0)
            .with_header(&ElectMasterRequestHeader {
                cluster_name: cluster.into(),
                broker_name: broker_name.into(),
                broker_id,
                designate_elect: false,
                invoke_time: Some(ringmq_sync::now_ms()),
            });
        let r = self.call_leader(&request)?;
        if r.code != ResponseCode::ControllerMasterStillExist.code() {
            success_ref(&r)?;
        }
        let h = decode::<ElectMasterResponseHeader>(&r)?;
        let body = ElectMasterResponseBody::decode(&r.body)
            .map_err(|e| failed(format!("undecodable ELECT_MASTER body: {e}")))?;
        Ok(MasterView {
            master_broker_id: h.master_broker_id,
            master_address: h.master_address,
            master_epoch: h.master_epoch.unwrap_or(-1),
            sync_state_set_epoch: h.sync_state_set_epoch.unwrap_or(-1),
            sync_state_set: body.sync_state_set,
        })
    }

    pub fn replica_info(&mut self, broker_name: &str) -> ControllerResult<MasterView> {
        let request = RemotingCommand::request(RequestCode::ControllerGetReplicaInfo.code(), 0)
            .with_header(&GetReplicaInfoRequestHeader {
                broker_name: broker_name.into(),
            });
        let r = success(self.call_leader(&request)?)?;
        let h = decode::<GetReplicaInfoResponseHeader>(&r)?;
        let set = decode_sync_state_set(&r.body)?;
        Ok(MasterView {
            master_broker_id: h.master_broker_id,
            master_address: h.master_address,
            master_epoch: h.master_epoch.unwrap_or(-1),
            sync_state_set_epoch: set.sync_state_set_epoch,
            sync_state_set: set.sync_state_set,
        })
    }

    /// ALTER_SYNC_STATE_SET: the set the controller now holds and its epoch.
    pub fn alter_sync_state_set(
        &mut self,
        broker_name: &str,
        master_broker_id: i64,
        master_epoch: i32,
        wanted: &SyncStateSet,
    ) -> ControllerResult<SyncStateSet> {
        let request = RemotingCommand::request(RequestCode::ControllerAlterSyncStateSet.code(), 0)
            .with_header(&AlterSyncStateSetRequestHeader {
                broker_name: broker_name.into(),
                master_broker_id,
                master_epoch,
                invoke_time: Some(ringmq_sync::now_ms()),
            })
            .with_body(wanted.encode());
        let r = success(self.call_leader(&request)?)?;
        let h = decode::<AlterSyncStateSetResponseHeader>(&r)?;
        let mut set = decode_sync_state_set(&r.body)?;
        set.sync_state_set_epoch = h.new_sync_state_set_epoch;
        Ok(set)
    }

    /// BROKER_HEARTBEAT to every controller; failures are logged, not returned (a dead
    /// controller must not stop the heartbeats to the others).
    pub fn heartbeat_all(&mut self, header: &BrokerHeartbeatRequestHeader) {
        for addr in self.addrs.clone() {
            let request = RemotingCommand::request(RequestCode::BrokerHeartbeat.code(), 0)
                .with_header(header);
            match self.conns.call(&addr, &request, self.timeout) {
                Ok(r) if r.code == ResponseCode::Success.code() => {}
                Ok(r) => {
                    tracing::debug!(controller = addr, code = r.code, remark = ?r.remark, "heartbeat refused")
                }
                Err(e) => tracing::debug!(controller = addr, "heartbeat failed: {e}"),
            }
        }
    }
}

fn success(r: RemotingCommand) -> ControllerResult<RemotingCommand> {
    success_ref(&r)?;
    Ok(r)
}

fn success_ref(r: &RemotingCommand) -> ControllerResult<()> {
    if r.code == ResponseCode::Success.code() {
        return Ok(());
    }
    Err(ControllerError {
        code: Some(r.code),
        message: r.remark.clone().unwrap_or_default(),
    })
}

fn decode<H: ringmq_remoting::header::CommandHeader>(r: &RemotingCommand) -> ControllerResult<H> {
    r.decode_header()
        .map_err(|e| failed(format!("undecodable controller answer: {e}")))
}

/// An empty body is an empty set of epoch 0 (a set whose master is unknown).
fn decode_sync_state_set(body: &[u8]) -> ControllerResult<SyncStateSet> {
    if body.is_empty() {
        return Ok(SyncStateSet::default());
    }
    SyncStateSet::decode(body).map_err(|e| failed(format!("undecodable SyncStateSet body: {e}")))
}
