//! Raft RPCs to the other controllers: each request is a Remoting command with one of
//! ringmq's Raft codes and the openraft message as JSON in the body; the answer's body is
//! the JSON of the peer's `Result`. One connection per (peer, caller), opened on first use
//! and dropped on any failure, so the next call reconnects.

use std::net::SocketAddr;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use ringmq_remoting::{RemotingCommand, ResponseCode};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{NodeId, TypeConfig, RAFT_APPEND_ENTRIES, RAFT_INSTALL_SNAPSHOT, RAFT_VOTE};
use crate::wire::Conn;

/// Connect time-out to a peer controller.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

#[derive(Clone, Default)]
pub struct NetworkFactory;

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        PeerClient {
            target,
            addr: node.addr.parse().ok(),
            node: node.clone(),
            conn: None,
        }
    }
}

pub struct PeerClient {
    target: NodeId,
    addr: Option<SocketAddr>,
    node: BasicNode,
    conn: Option<Conn>,
}

type RpcResult<T, E> = Result<T, RPCError<NodeId, BasicNode, E>>;

impl PeerClient {
    async fn rpc<Req, Resp, E>(&mut self, code: i32, req: &Req, ttl: Duration) -> RpcResult<Resp, E>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let Some(addr) = self.addr else {
            let e = std::io::Error::other(format!(
                "controller {} has no address: {:?}",
                self.target, self.node.addr
            ));
            return Err(RPCError::Unreachable(Unreachable::new(&e)));
        };
        let body = serde_json::to_vec(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        if self.conn.is_none() {
            let conn = Conn::connect(addr, CONNECT_TIMEOUT.min(ttl))
                .await
                .map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))?;
            self.conn = Some(conn);
        }
        let conn = self.conn.as_mut().expect("connected above");
        let request = RemotingCommand::request(code, 0).with_body(body);
        let response = match conn.call(request, ttl).await {
            Ok(r) => r,
            Err(e) => {
                self.conn = None;
                return Err(RPCError::Network(NetworkError::new(&e)));
            }
        };
        if response.code != ResponseCode::Success.code() {
            let e = std::io::Error::other(format!(
                "controller {addr} refused Raft request {code}: {} {}",
                response.code,
                response.remark.unwrap_or_default()
            ));
            return Err(RPCError::Network(NetworkError::new(&e)));
        }
        let answer: Result<Resp, E> = serde_json::from_slice(&response.body)
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        answer.map_err(|e| {
            RPCError::RemoteError(RemoteError::new_with_node(
                self.target,
                self.node.clone(),
                e,
            ))
        })
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, RaftError<NodeId>> {
        self.rpc(RAFT_APPEND_ENTRIES, &rpc, option.hard_ttl()).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
        self.rpc(RAFT_INSTALL_SNAPSHOT, &rpc, option.hard_ttl())
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>, RaftError<NodeId>> {
        self.rpc(RAFT_VOTE, &rpc, option.hard_ttl()).await
    }
}

/// Serves one Raft request that arrived as a Remoting command: the answer's body is the
/// JSON of the local node's `Result`. `None` for a code that is not a Raft code.
pub async fn serve(
    raft: &super::Raft,
    request: &RemotingCommand,
) -> Option<Result<Vec<u8>, String>> {
    fn answer<T: Serialize, E: Serialize>(r: Result<T, E>) -> Result<Vec<u8>, String> {
        serde_json::to_vec(&r).map_err(|e| e.to_string())
    }
    fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
        serde_json::from_slice(body).map_err(|e| format!("undecodable Raft request: {e}"))
    }
    let body = &request.body[..];
    Some(match request.code {
        RAFT_APPEND_ENTRIES => match parse::<AppendEntriesRequest<TypeConfig>>(body) {
            Ok(req) => answer(raft.append_entries(req).await),
            Err(e) => Err(e),
        },
        RAFT_VOTE => match parse::<VoteRequest<NodeId>>(body) {
            Ok(req) => answer(raft.vote(req).await),
            Err(e) => Err(e),
        },
        RAFT_INSTALL_SNAPSHOT => match parse::<InstallSnapshotRequest<TypeConfig>>(body) {
            Ok(req) => answer(raft.install_snapshot(req).await),
            Err(e) => Err(e),
        },
        _ => return None,
    })
}
