//! QueryRoute and QueryAssignment: this broker's queues of a topic, with this endpoint as
//! the broker's address (upstream's local mode: the broker's host with the gRPC port).
//!
//! Queue ids follow upstream's `genMessageQueueFromQueueData`: for a readable and writable
//! topic `min(R, W)` queues are READ_WRITE and the rest READ or WRITE only, numbered from 0
//! in the order READ, WRITE, READ_WRITE, NONE.

use std::net::IpAddr;

use ringmq_remoting::body::topic::TopicConfig;

use super::Inner;
use crate::convert::{check_group, check_topic};
use crate::pb::*;
use crate::status::{ok, status};

/// Topic permission bits (`PermName`).
const PERM_READ: i32 = 4;
const PERM_WRITE: i32 = 2;

pub(super) fn query_route(inner: &Inner, request: &QueryRouteRequest) -> QueryRouteResponse {
    match route(inner, request.topic.as_ref()) {
        Ok(message_queues) => QueryRouteResponse {
            status: Some(ok()),
            message_queues,
        },
        Err(s) => QueryRouteResponse {
            status: Some(s),
            message_queues: Vec::new(),
        },
    }
}

fn route(inner: &Inner, topic: Option<&Resource>) -> Result<Vec<MessageQueue>, Status> {
    let (resource, tc) = topic_config(inner, topic)?;
    let broker = this_broker(inner);
    let accept = accept_types(&tc);
    let (r, w) = (tc.read_queue_nums.max(0), tc.write_queue_nums.max(0));
    let (readable, writable) = (tc.perm & PERM_READ != 0, tc.perm & PERM_WRITE != 0);
    let (mut only_r, mut only_w, mut rw, mut none) = (0, 0, 0, 0);
    match (readable, writable) {
        (true, true) => {
            rw = r.min(w);
            only_r = r - rw;
            only_w = w - rw;
        }
        (false, true) => only_w = w,
        (true, false) => only_r = r,
        (false, false) => none = r.max(w).max(1),
    }
    let groups = [
        (only_r, Permission::Read),
        (only_w, Permission::Write),
        (rw, Permission::ReadWrite),
        (none, Permission::None),
    ];
    let mut queues = Vec::new();
    let mut id = 0;
    for (count, permission) in groups {
        for _ in 0..count {
            queues.push(MessageQueue {
                topic: Some(resource.clone()),
                id,
                permission: permission as i32,
                broker: Some(broker.clone()),
                accept_message_types: accept.clone(),
            });
            id += 1;
        }
    }
    Ok(queues)
}

pub(super) fn query_assignment(
    inner: &Inner,
    request: &QueryAssignmentRequest,
) -> QueryAssignmentResponse {
    match assignments(inner, request) {
        Ok(assignments) => QueryAssignmentResponse {
            status: Some(ok()),
            assignments,
        },
        Err(s) => QueryAssignmentResponse {
            status: Some(s),
            assignments: Vec::new(),
        },
    }
}

fn assignments(inner: &Inner, request: &QueryAssignmentRequest) -> Result<Vec<Assignment>, Status> {
    let (resource, tc) = topic_config(inner, request.topic.as_ref())?;
    let group = request.group.as_ref().map_or("", |g| g.name.as_str());
    check_group(group)?;
    if tc.perm & PERM_READ == 0 || tc.read_queue_nums <= 0 {
        return Err(status(Code::Forbidden, "no readable queue"));
    }
    let fifo = inner
        .ctx
        .groups
        .get(group)
        .is_some_and(|g| g.consume_message_orderly);
    let broker = this_broker(inner);
    let permission = if tc.perm & PERM_WRITE != 0 {
        Permission::ReadWrite
    } else {
        Permission::Read
    };
    let queue = |id| Assignment {
        message_queue: Some(MessageQueue {
            topic: Some(resource.clone()),
            id,
            permission: permission as i32,
            broker: Some(broker.clone()),
            accept_message_types: Vec::new(),
        }),
    };
    // A FIFO group is assigned each queue; any other group one queue id -1 that POP
    // serves from every queue.
    Ok(if fifo {
        (0..tc.read_queue_nums).map(queue).collect()
    } else {
        vec![queue(-1)]
    })
}

/// The topic of a request, checked, and this broker's config of it.
fn topic_config(
    inner: &Inner,
    topic: Option<&Resource>,
) -> Result<(Resource, std::sync::Arc<TopicConfig>), Status> {
    let resource = topic.cloned().unwrap_or_default();
    check_topic(
        &resource.name,
        inner.ctx.topics.is_system_topic(&resource.name),
    )?;
    let tc = inner.ctx.topics.select(&resource.name).ok_or_else(|| {
        status(
            Code::TopicNotFound,
            format!("No topic route info for the topic: {}", resource.name),
        )
    })?;
    Ok((resource, tc))
}

/// This broker as routes name it: its name and id, and this endpoint at its host.
pub(super) fn this_broker(inner: &Inner) -> Broker {
    let host = inner.ctx.config.broker_ip1.clone();
    let scheme = match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => AddressScheme::IPv4,
        Ok(IpAddr::V6(_)) => AddressScheme::IPv6,
        Err(_) => AddressScheme::DomainName,
    };
    Broker {
        name: inner.ctx.config.broker_name.clone(),
        id: i32::try_from(inner.ctx.role.broker_id()).unwrap_or(i32::MAX),
        endpoints: Some(Endpoints {
            scheme: scheme as i32,
            addresses: vec![Address {
                host,
                port: i32::from(inner.local_addr.port()),
            }],
        }),
    }
}

/// The topic's `message.type` attribute as the send types it accepts (NORMAL when unset).
pub(super) fn topic_message_type(tc: &TopicConfig) -> String {
    tc.attributes
        .get("message.type")
        .or_else(|| tc.attributes.get("+message.type"))
        .map_or_else(|| "NORMAL".to_string(), |t| t.to_ascii_uppercase())
}

fn accept_types(tc: &TopicConfig) -> Vec<i32> {
    let t = match topic_message_type(tc).as_str() {
        "NORMAL" => vec![MessageType::Normal],
        "FIFO" => vec![MessageType::Fifo],
        "DELAY" => vec![MessageType::Delay],
        "TRANSACTION" => vec![MessageType::Transaction],
        "MIXED" => vec![
            MessageType::Normal,
            MessageType::Fifo,
            MessageType::Delay,
            MessageType::Transaction,
        ],
        _ => vec![MessageType::Unspecified],
    };
    t.into_iter().map(|t| t as i32).collect()
}
