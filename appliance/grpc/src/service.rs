//! `apache.rocketmq.v2.MessagingService`: the RPCs, each delegated to the module of its
//! family. Every unary answer carries its outcome in its `status` field (as upstream's
//! proxy answers: gRPC status OK, v2 status in the body); only a broken Telemetry stream
//! ends with a gRPC error.

mod ack;
mod client;
mod offset;
mod receive;
mod route;
mod send;
mod transaction;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use ringmq_broker::context::BrokerContext;
use ringmq_remoting::RemotingCommand;
use tokio_stream::Stream;
use tonic::{Request, Response, Streaming};

use crate::bridge::{Answer, Bridge};
use crate::metadata::Caller;
use crate::pb::messaging_service_server::MessagingService;
use crate::pb::*;
use crate::status::{from_bridge, status};

/// Clients whose settings are kept at once (one entry per client id with a Telemetry
/// stream); the same bound as the bridge's sessions.
const MAX_CLIENT_SETTINGS: usize = crate::bridge::MAX_SESSIONS;

/// The service tonic calls. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Messaging {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub ctx: Arc<BrokerContext>,
    pub bridge: Bridge,
    /// The gRPC listener's address (its port goes into route endpoints).
    pub local_addr: SocketAddr,
    /// Each client's last Settings from its Telemetry stream, as upstream keeps them.
    pub settings: Mutex<HashMap<Arc<str>, Settings>>,
    /// Round-robin position over write queues for sends without a message group.
    pub next_queue: AtomicUsize,
    /// `enableTopicMessageTypeCheck` (default true), read once at start.
    pub type_check: bool,
}

impl Messaging {
    pub(crate) fn new(ctx: Arc<BrokerContext>, bridge: Bridge, local_addr: SocketAddr) -> Self {
        let start = usize::try_from(crate::convert::now_ms()).unwrap_or(0) % 1024;
        let type_check = ctx
            .config
            .extra
            .get(send::TYPE_CHECK_KEY)
            .is_none_or(|v| v.trim() != "false");
        Self {
            inner: Arc::new(Inner {
                ctx,
                bridge,
                local_addr,
                settings: Mutex::new(HashMap::new()),
                next_queue: AtomicUsize::new(start),
                type_check,
            }),
        }
    }
}

impl Inner {
    /// `request` on the caller's connection; a bridge failure becomes a v2 status.
    pub(crate) async fn call(
        &self,
        caller: &Caller,
        request: RemotingCommand,
    ) -> Result<Answer, Status> {
        let mut request = request;
        request.language = ringmq_remoting::codes::LanguageCode::from_name(&caller.language);
        self.bridge
            .call(&caller.client_id, caller.peer, request)
            .await
            .map_err(from_bridge)
    }

    pub(crate) fn client_settings(&self, client: &str) -> Option<Settings> {
        use ringmq_sync::LockExt;
        self.settings.lock_unpoisoned().get(client).cloned()
    }

    /// The `fifo` flag of a consumer's stored settings, without copying them.
    pub(crate) fn subscription_fifo(&self, client: &str) -> Option<bool> {
        use ringmq_sync::LockExt;
        match &self.settings.lock_unpoisoned().get(client)?.pub_sub {
            Some(settings::PubSub::Subscription(sub)) => sub.fifo,
            _ => None,
        }
    }

    pub(crate) fn store_settings(
        &self,
        client: &Arc<str>,
        settings: Settings,
    ) -> Result<(), Status> {
        use ringmq_sync::LockExt;
        let mut table = self.settings.lock_unpoisoned();
        if !table.contains_key(client) && table.len() >= MAX_CLIENT_SETTINGS {
            return Err(status(Code::TooManyRequests, "too many gRPC clients"));
        }
        table.insert(client.clone(), settings);
        Ok(())
    }

    pub(crate) fn forget_settings(&self, client: &str) -> Option<Settings> {
        use ringmq_sync::LockExt;
        self.settings.lock_unpoisoned().remove(client)
    }
}

type Answered<T> = Result<Response<T>, tonic::Status>;
pub(crate) type BoxStream<T> =
    Pin<Box<dyn Stream<Item = Result<T, tonic::Status>> + Send + 'static>>;

/// The caller of a unary RPC, or the response that refuses it (CLIENT_ID_REQUIRED).
macro_rules! caller_or {
    ($request:expr, $response:ident) => {
        match Caller::of(&$request) {
            Ok(c) => c,
            Err(s) => {
                let mut refused = $response::default();
                refused.status = Some(s);
                return Ok(Response::new(refused));
            }
        }
    };
}

#[tonic::async_trait]
impl MessagingService for Messaging {
    async fn query_route(
        &self,
        request: Request<QueryRouteRequest>,
    ) -> Answered<QueryRouteResponse> {
        let _caller = caller_or!(request, QueryRouteResponse);
        Ok(Response::new(route::query_route(
            &self.inner,
            request.get_ref(),
        )))
    }

    async fn heartbeat(&self, request: Request<HeartbeatRequest>) -> Answered<HeartbeatResponse> {
        let caller = caller_or!(request, HeartbeatResponse);
        let status = client::heartbeat(&self.inner, &caller, request.get_ref()).await;
        Ok(Response::new(HeartbeatResponse {
            status: Some(status),
        }))
    }

    async fn send_message(
        &self,
        request: Request<SendMessageRequest>,
    ) -> Answered<SendMessageResponse> {
        let caller = caller_or!(request, SendMessageResponse);
        Ok(Response::new(
            send::send(&self.inner, &caller, request.get_ref()).await,
        ))
    }

    async fn query_assignment(
        &self,
        request: Request<QueryAssignmentRequest>,
    ) -> Answered<QueryAssignmentResponse> {
        let _caller = caller_or!(request, QueryAssignmentResponse);
        Ok(Response::new(route::query_assignment(
            &self.inner,
            request.get_ref(),
        )))
    }

    type ReceiveMessageStream = BoxStream<ReceiveMessageResponse>;

    async fn receive_message(
        &self,
        request: Request<ReceiveMessageRequest>,
    ) -> Answered<Self::ReceiveMessageStream> {
        let frames = match Caller::of(&request) {
            Ok(caller) => receive::receive(&self.inner, &caller, request.get_ref()).await,
            Err(s) => receive::refused(s),
        };
        Ok(Response::new(Box::pin(tokio_stream::iter(
            frames.into_iter().map(Ok),
        ))))
    }

    async fn ack_message(
        &self,
        request: Request<AckMessageRequest>,
    ) -> Answered<AckMessageResponse> {
        let caller = caller_or!(request, AckMessageResponse);
        Ok(Response::new(
            ack::ack(&self.inner, &caller, request.get_ref()).await,
        ))
    }

    async fn forward_message_to_dead_letter_queue(
        &self,
        request: Request<ForwardMessageToDeadLetterQueueRequest>,
    ) -> Answered<ForwardMessageToDeadLetterQueueResponse> {
        let caller = caller_or!(request, ForwardMessageToDeadLetterQueueResponse);
        let status = ack::forward_to_dlq(&self.inner, &caller, request.get_ref()).await;
        Ok(Response::new(ForwardMessageToDeadLetterQueueResponse {
            status: Some(status),
        }))
    }

    type PullMessageStream = BoxStream<PullMessageResponse>;

    async fn pull_message(
        &self,
        request: Request<PullMessageRequest>,
    ) -> Answered<Self::PullMessageStream> {
        let frames = match Caller::of(&request) {
            Ok(caller) => offset::pull(&self.inner, &caller, request.get_ref()).await,
            Err(s) => vec![PullMessageResponse {
                content: Some(pull_message_response::Content::Status(s)),
            }],
        };
        Ok(Response::new(Box::pin(tokio_stream::iter(
            frames.into_iter().map(Ok),
        ))))
    }

    async fn update_offset(
        &self,
        request: Request<UpdateOffsetRequest>,
    ) -> Answered<UpdateOffsetResponse> {
        let caller = caller_or!(request, UpdateOffsetResponse);
        let s = offset::update(&self.inner, &caller, request.get_ref()).await;
        Ok(Response::new(UpdateOffsetResponse { status: Some(s) }))
    }

    async fn get_offset(&self, request: Request<GetOffsetRequest>) -> Answered<GetOffsetResponse> {
        let caller = caller_or!(request, GetOffsetResponse);
        let (status, offset) = match offset::get(&self.inner, &caller, request.get_ref()).await {
            Ok(o) => (crate::status::ok(), o),
            Err(s) => (s, 0),
        };
        Ok(Response::new(GetOffsetResponse {
            status: Some(status),
            offset,
        }))
    }

    async fn query_offset(
        &self,
        request: Request<QueryOffsetRequest>,
    ) -> Answered<QueryOffsetResponse> {
        let caller = caller_or!(request, QueryOffsetResponse);
        let (status, offset) = match offset::query(&self.inner, &caller, request.get_ref()).await {
            Ok(o) => (crate::status::ok(), o),
            Err(s) => (s, 0),
        };
        Ok(Response::new(QueryOffsetResponse {
            status: Some(status),
            offset,
        }))
    }

    async fn end_transaction(
        &self,
        request: Request<EndTransactionRequest>,
    ) -> Answered<EndTransactionResponse> {
        let caller = caller_or!(request, EndTransactionResponse);
        let status = transaction::end(&self.inner, &caller, request.get_ref()).await;
        Ok(Response::new(EndTransactionResponse {
            status: Some(status),
        }))
    }

    type TelemetryStream = BoxStream<TelemetryCommand>;

    async fn telemetry(
        &self,
        request: Request<Streaming<TelemetryCommand>>,
    ) -> Answered<Self::TelemetryStream> {
        let caller =
            Caller::of(&request).map_err(|s| tonic::Status::invalid_argument(s.message))?;
        Ok(Response::new(client::telemetry(
            &self.inner,
            caller,
            request.into_inner(),
        )))
    }

    async fn notify_client_termination(
        &self,
        request: Request<NotifyClientTerminationRequest>,
    ) -> Answered<NotifyClientTerminationResponse> {
        let caller = caller_or!(request, NotifyClientTerminationResponse);
        let status = client::terminate(&self.inner, &caller, request.get_ref()).await;
        Ok(Response::new(NotifyClientTerminationResponse {
            status: Some(status),
        }))
    }

    async fn change_invisible_duration(
        &self,
        request: Request<ChangeInvisibleDurationRequest>,
    ) -> Answered<ChangeInvisibleDurationResponse> {
        let caller = caller_or!(request, ChangeInvisibleDurationResponse);
        Ok(Response::new(
            ack::change_invisible(&self.inner, &caller, request.get_ref()).await,
        ))
    }

    async fn recall_message(
        &self,
        request: Request<RecallMessageRequest>,
    ) -> Answered<RecallMessageResponse> {
        let caller = caller_or!(request, RecallMessageResponse);
        Ok(Response::new(
            send::recall(&self.inner, &caller, request.get_ref()).await,
        ))
    }

    async fn sync_lite_subscription(
        &self,
        _request: Request<SyncLiteSubscriptionRequest>,
    ) -> Answered<SyncLiteSubscriptionResponse> {
        Ok(Response::new(SyncLiteSubscriptionResponse {
            status: Some(not_implemented("SyncLiteSubscription")),
        }))
    }
}

fn not_implemented(rpc: &str) -> Status {
    status(
        Code::NotImplemented,
        format!("{rpc} is not served by this broker"),
    )
}
