//! Client sessions: the Telemetry stream (the client's Settings, answered with the
//! server's; broker-initiated commands such as a transaction check-back), Heartbeat and
//! NotifyClientTermination. A client is registered in the broker's producer and consumer
//! tables with a Remoting HEART_BEAT on its bridge connection, as upstream's proxy does:
//! producer group = each published topic, consumer group = the subscription's group.

use std::sync::Arc;

use ringmq_remoting::body::heartbeat::{
    ConsumeFromWhere, ConsumeType, ConsumerData, HeartbeatData, MessageModel, ProducerData,
    SubscriptionData,
};
use ringmq_remoting::codes::RequestCode;
use ringmq_remoting::header::client::UnregisterClientRequestHeader;
use ringmq_remoting::RemotingCommand;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;

use super::{BoxStream, Inner};
use crate::bridge::TELEMETRY_BUFFER;
use crate::convert::{check_group, check_topic, duration};
use crate::metadata::Caller;
use crate::pb::*;
use crate::status::{from_remoting, ok, status};

/// Producer retries the server advises (upstream `grpcClientProducerMaxAttempts` and its
/// backoff: 10 ms doubling to 1 s).
const PRODUCER_MAX_ATTEMPTS: i32 = 3;
const PRODUCER_BACKOFF_INITIAL_MS: i64 = 10;
const PRODUCER_BACKOFF_MAX_MS: i64 = 1000;
/// When the first Settings reply of a Telemetry stream is sent again.
const SETTINGS_REPEAT_MS: u64 = 1000;
/// Messages per receive the server advises push consumers (upstream 32).
const CONSUMER_RECEIVE_BATCH: i32 = 32;
/// Long-polling time the server advises consumers (upstream's maximum, 20 s).
pub(super) const MAX_LONG_POLLING_MS: i64 = 20_000;
/// Upstream's default customized retry backoff (`CustomizedRetryPolicy`), in seconds:
/// delay levels 3 to 18.
const RETRY_BACKOFF_S: [i64; 18] = [
    1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200,
];

pub(super) async fn heartbeat(
    inner: &Inner,
    caller: &Caller,
    request: &HeartbeatRequest,
) -> Status {
    let Some(settings) = inner.client_settings(&caller.client_id) else {
        return status(
            Code::UnrecognizedClientType,
            "cannot find client settings for this client",
        );
    };
    let group = request.group.as_ref().map(|g| g.name.as_str());
    register(inner, caller, &settings, group).await
}

/// HEART_BEAT for the client as its settings describe it.
async fn register(
    inner: &Inner,
    caller: &Caller,
    settings: &Settings,
    group: Option<&str>,
) -> Status {
    let mut data = HeartbeatData {
        client_id: caller.client_id.to_string(),
        ..Default::default()
    };
    match &settings.pub_sub {
        Some(settings::PubSub::Publishing(p)) => {
            for t in &p.topics {
                if let Err(s) = check_topic(&t.name, false) {
                    return s;
                }
                data.producer_data_set.push(ProducerData {
                    group_name: t.name.clone(),
                });
            }
        }
        Some(settings::PubSub::Subscription(s)) => {
            let group = group
                .filter(|g| !g.is_empty())
                .or(s.group.as_ref().map(|g| g.name.as_str()))
                .unwrap_or("");
            if let Err(e) = check_group(group) {
                return e;
            }
            let push = settings.client_type == Some(ClientType::PushConsumer as i32);
            data.consumer_data_set.push(ConsumerData {
                group_name: group.to_string(),
                consume_type: Some(if push {
                    ConsumeType::ConsumePassively
                } else {
                    ConsumeType::ConsumeActively
                }),
                message_model: Some(MessageModel::Clustering),
                consume_from_where: Some(ConsumeFromWhere::ConsumeFromLastOffset),
                subscription_data_set: subscriptions(s),
                unit_mode: false,
            });
        }
        None => {
            return status(
                Code::UnrecognizedClientType,
                "the client's settings hold neither publishing nor subscription",
            )
        }
    }
    let mut request = RemotingCommand::request(RequestCode::HeartBeat.code(), 0);
    request.body = data.to_json_value().to_json().into_bytes().into();
    match inner.call(caller, request).await {
        Ok(a) => from_remoting(a.command.code, a.command.remark.as_deref()),
        Err(s) => s,
    }
}

fn subscriptions(s: &Subscription) -> Vec<SubscriptionData> {
    s.subscriptions
        .iter()
        .filter_map(|e| {
            let topic = e.topic.as_ref()?.name.as_str();
            let (kind, expression) = filter_of(e.expression.as_ref());
            Some(SubscriptionData::build(
                topic,
                &expression,
                kind,
                crate::convert::now_ms(),
            ))
        })
        .collect()
}

/// A v2 filter as Remoting's (`TAG` or `SQL92`, `*` for an empty tag expression).
pub(super) fn filter_of(f: Option<&FilterExpression>) -> (&'static str, String) {
    match f {
        Some(f) if f.r#type == FilterType::Sql as i32 => ("SQL92", f.expression.clone()),
        Some(f) if !f.expression.trim().is_empty() => ("TAG", f.expression.clone()),
        _ => ("TAG", "*".to_string()),
    }
}

pub(super) async fn terminate(
    inner: &Inner,
    caller: &Caller,
    request: &NotifyClientTerminationRequest,
) -> Status {
    let Some(settings) = inner.forget_settings(&caller.client_id) else {
        return status(
            Code::UnrecognizedClientType,
            "cannot find client settings for this client",
        );
    };
    let mut header = UnregisterClientRequestHeader {
        client_id: caller.client_id.to_string(),
        producer_group: None,
        consumer_group: None,
        rpc: Default::default(),
    };
    let mut requests = Vec::new();
    match &settings.pub_sub {
        Some(settings::PubSub::Publishing(p)) => {
            for t in &p.topics {
                header.producer_group = Some(t.name.clone());
                requests.push(header.clone());
            }
        }
        Some(settings::PubSub::Subscription(s)) => {
            let group = request
                .group
                .as_ref()
                .or(s.group.as_ref())
                .map_or("", |g| g.name.as_str());
            header.consumer_group = Some(group.to_string());
            requests.push(header);
        }
        None => {}
    }
    for h in requests {
        let r = RemotingCommand::request(RequestCode::UnregisterClient.code(), 0).with_header(&h);
        if let Err(s) = inner.call(caller, r).await {
            return s;
        }
    }
    let _ = inner.bridge.terminate(&caller.client_id);
    ok()
}

/// The Telemetry stream: every Settings command is stored, registered and answered with
/// the server's settings; broker-initiated requests for this client go out on it.
pub(super) fn telemetry(
    inner: &Arc<Inner>,
    caller: Caller,
    mut inbound: tonic::Streaming<TelemetryCommand>,
) -> BoxStream<TelemetryCommand> {
    let (out, out_rx) = mpsc::channel::<Result<TelemetryCommand, tonic::Status>>(TELEMETRY_BUFFER);
    let (broker_tx, mut broker_rx) = mpsc::channel::<RemotingCommand>(TELEMETRY_BUFFER);
    let inner = inner.clone();
    let forward = out.clone();
    let forward_inner = inner.clone();
    // Broker → client: a transaction check-back becomes RecoverOrphanedTransactionCommand.
    tokio::spawn(async move {
        while let Some(command) = broker_rx.recv().await {
            if let Some(cmd) = super::transaction::recover_command(&forward_inner, &command) {
                if forward.send(Ok(cmd)).await.is_err() {
                    break;
                }
            }
        }
    });
    tokio::spawn(async move {
        let mut attached = false;
        while let Some(next) = inbound.next().await {
            let command = match next {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(client = %caller.client_id, "telemetry stream ended: {e}");
                    break;
                }
            };
            let Some(telemetry_command::Command::Settings(settings)) = command.command else {
                // Thread stack traces and verify results answer nothing we asked.
                continue;
            };
            match on_settings(&inner, &caller, settings).await {
                Ok(reply) => {
                    if !attached {
                        attached = inner
                            .bridge
                            .attach_telemetry(&caller.client_id, caller.peer, broker_tx.clone())
                            .is_ok();
                        repeat_first_reply(&out, &reply);
                    }
                    if out.send(Ok(reply)).await.is_err() {
                        break;
                    }
                }
                Err(e) => {
                    let _ = out.send(Err(e)).await;
                    break;
                }
            }
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(out_rx))
}

/// The Node.js SDK (1.0.8) starts waiting for the server's Settings only after it has
/// fetched its routes, and misses a reply that came earlier (its startup then never ends).
/// The first reply of a stream is therefore sent once more a moment later; a client that
/// saw it already just applies the same settings again.
fn repeat_first_reply(
    out: &mpsc::Sender<Result<TelemetryCommand, tonic::Status>>,
    reply: &TelemetryCommand,
) {
    let (out, reply) = (out.clone(), reply.clone());
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(SETTINGS_REPEAT_MS)).await;
        let _ = out.send(Ok(reply)).await;
    });
}

async fn on_settings(
    inner: &Inner,
    caller: &Caller,
    settings: Settings,
) -> Result<TelemetryCommand, tonic::Status> {
    if settings.pub_sub.is_none() {
        return Err(tonic::Status::invalid_argument(
            "there is no publishing or subscription data in settings",
        ));
    }
    let s = register(inner, caller, &settings, None).await;
    if !crate::status::is_ok(&s) {
        let code = s.code;
        let text = format!("process client telemetryCommand failed. {}", s.message);
        return Err(if (40000..50000).contains(&code) {
            tonic::Status::invalid_argument(text)
        } else {
            tonic::Status::internal(text)
        });
    }
    inner
        .store_settings(&caller.client_id, settings.clone())
        .map_err(|s| tonic::Status::resource_exhausted(s.message))?;
    Ok(TelemetryCommand {
        status: Some(ok()),
        command: Some(telemetry_command::Command::Settings(server_settings(
            inner, settings,
        ))),
    })
}

/// The client's settings with the server's advice merged in (upstream
/// `GrpcClientSettingsManager`): retry policy, body limit, batch and polling sizes.
pub(super) fn server_settings(inner: &Inner, mut s: Settings) -> Settings {
    s.metric = Some(Metric {
        on: false,
        endpoints: None,
    });
    match &mut s.pub_sub {
        Some(settings::PubSub::Publishing(p)) => {
            p.validate_message_type = true;
            p.max_body_size =
                i32::try_from(inner.ctx.config.max_message_size_bytes).unwrap_or(i32::MAX);
            s.backoff_policy = Some(RetryPolicy {
                max_attempts: PRODUCER_MAX_ATTEMPTS,
                strategy: Some(retry_policy::Strategy::ExponentialBackoff(
                    ExponentialBackoff {
                        initial: Some(duration(PRODUCER_BACKOFF_INITIAL_MS)),
                        max: Some(duration(PRODUCER_BACKOFF_MAX_MS)),
                        multiplier: 2.0,
                    },
                )),
            });
        }
        Some(settings::PubSub::Subscription(sub)) => {
            let group = sub.group.as_ref().map_or("", |g| g.name.as_str());
            let config = inner.ctx.groups.get(group);
            sub.receive_batch_size = Some(CONSUMER_RECEIVE_BATCH);
            sub.long_polling_timeout = Some(duration(MAX_LONG_POLLING_MS));
            sub.fifo = Some(config.as_ref().is_some_and(|g| g.consume_message_orderly));
            let retries = config.as_ref().map_or(16, |g| g.retry_max_times);
            s.backoff_policy = Some(RetryPolicy {
                max_attempts: retries.saturating_add(1),
                strategy: Some(retry_policy::Strategy::CustomizedBackoff(
                    CustomizedBackoff {
                        next: RETRY_BACKOFF_S.iter().map(|s| duration(s * 1000)).collect(),
                    },
                )),
            });
        }
        None => {}
    }
    s
}
