//! What a request touches, and with which permission (upstream's
//! `PlainAccessResource.parse`): topics need PUB to send and SUB to pull or query; a
//! consumer group is checked as its retry topic `%RETRY%<group>` with SUB. Codes not
//! listed touch no topic or group: a valid signature is enough, and the admin codes of
//! [`crate::permission::needs_admin`] need an admin account besides.

use ringmq_remoting::body::heartbeat::HeartbeatData;
use ringmq_remoting::codes::RequestCode;
use ringmq_remoting::RemotingCommand;

use crate::permission::Perm;

/// The prefix that turns a consumer group into its retry topic.
pub const RETRY_PREFIX: &str = "%RETRY%";

/// A group's resource name: its retry topic.
pub fn group_resource(group: &str) -> String {
    format!("{RETRY_PREFIX}{group}")
}

/// Whether `resource` names a group (its retry topic) rather than a topic.
pub fn is_group(resource: &str) -> bool {
    resource.starts_with(RETRY_PREFIX)
}

/// How a resource is named in a refusal: `topic:T` or `group:G`, as upstream prints it.
pub fn describe(resource: &str) -> String {
    match resource.strip_prefix(RETRY_PREFIX) {
        Some(group) => format!("group:{group}"),
        None => format!("topic:{resource}"),
    }
}

/// The resources `request` needs and the permission for each.
///
/// Two deliberate differences from upstream, both where upstream reads a field the
/// request does not carry: a send to a retry topic needs SUB on that retry topic itself
/// (upstream looks up a `group` field SEND_MESSAGE does not have and so checks a group
/// named `null`), and an UNREGISTER_CLIENT without a consumer group needs nothing.
pub fn required(request: &RemotingCommand) -> Result<Vec<(String, Perm)>, String> {
    use RequestCode as C;
    let field = |k: &str| request.ext_fields.get(k).unwrap_or_default().to_string();
    let mut needs = Vec::new();
    match RequestCode::from_code(request.code) {
        Some(C::SendMessage) => needs.push(send_target(field("topic"))),
        Some(C::SendMessageV2 | C::SendBatchMessage) => needs.push(send_target(field("b"))),
        Some(C::ConsumerSendMsgBack) => needs.push((group_resource(&field("group")), Perm::SUB)),
        Some(C::PullMessage | C::LitePullMessage) => {
            needs.push((field("topic"), Perm::SUB));
            needs.push((group_resource(&field("consumerGroup")), Perm::SUB));
        }
        Some(C::QueryMessage) => needs.push((field("topic"), Perm::SUB)),
        Some(C::HeartBeat) => {
            let heartbeat = HeartbeatData::decode(&request.body)
                .map_err(|e| format!("cannot read the heartbeat body: {e}"))?;
            for consumer in &heartbeat.consumer_data_set {
                needs.push((group_resource(&consumer.group_name), Perm::SUB));
                for sub in &consumer.subscription_data_set {
                    needs.push((sub.topic.clone(), Perm::SUB));
                }
            }
        }
        Some(C::UnregisterClient) => {
            if let Some(group) = request
                .ext_fields
                .get("consumerGroup")
                .filter(|g| !g.is_empty())
            {
                needs.push((group_resource(group), Perm::SUB));
            }
        }
        Some(C::GetConsumerListByGroup) => {
            needs.push((group_resource(&field("consumerGroup")), Perm::SUB));
        }
        Some(C::UpdateConsumerOffset) => {
            needs.push((group_resource(&field("consumerGroup")), Perm::SUB));
            needs.push((field("topic"), Perm::SUB));
        }
        _ => {}
    }
    Ok(needs)
}

/// A send needs PUB on its topic, or SUB on the group when the topic is a retry topic
/// (a consumer putting a message back for its own group).
fn send_target(topic: String) -> (String, Perm) {
    if is_group(&topic) {
        (topic, Perm::SUB)
    } else {
        (topic, Perm::PUB)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(code: i32, fields: &[(&str, &str)], body: &str) -> RemotingCommand {
        let mut r = RemotingCommand::request(code, 1);
        for (k, v) in fields {
            r.ext_fields.insert(*k, *v);
        }
        r.body = bytes::Bytes::copy_from_slice(body.as_bytes());
        r
    }

    fn needs(code: i32, fields: &[(&str, &str)], body: &str) -> Vec<(String, Perm)> {
        required(&request(code, fields, body)).unwrap()
    }

    #[test]
    fn sends_need_pub_and_retry_sends_need_the_groups_sub() {
        assert_eq!(needs(10, &[("topic", "T")], ""), [("T".into(), Perm::PUB)]);
        assert_eq!(
            needs(310, &[("b", "T"), ("a", "PG")], ""),
            [("T".into(), Perm::PUB)]
        );
        assert_eq!(needs(320, &[("b", "T")], ""), [("T".into(), Perm::PUB)]);
        assert_eq!(
            needs(310, &[("b", "%RETRY%G"), ("a", "PG")], ""),
            [("%RETRY%G".into(), Perm::SUB)]
        );
        assert_eq!(
            needs(36, &[("group", "G")], ""),
            [("%RETRY%G".into(), Perm::SUB)]
        );
    }

    #[test]
    fn pulls_offsets_and_group_lookups_need_sub() {
        let pull = [("topic", "T"), ("consumerGroup", "G")];
        let both = vec![("T".into(), Perm::SUB), ("%RETRY%G".into(), Perm::SUB)];
        assert_eq!(needs(11, &pull, ""), both);
        assert_eq!(needs(15, &pull, "").len(), 2);
        assert_eq!(
            needs(38, &[("consumerGroup", "G")], ""),
            [("%RETRY%G".into(), Perm::SUB)]
        );
        assert_eq!(needs(12, &[("topic", "T")], ""), [("T".into(), Perm::SUB)]);
        assert_eq!(needs(35, &[("producerGroup", "PG")], ""), []);
        assert_eq!(needs(35, &[("consumerGroup", "G")], "").len(), 1);
        assert_eq!(needs(17, &[("topic", "T")], ""), []);
    }

    #[test]
    fn heartbeats_need_sub_on_each_group_and_subscribed_topic() {
        let body = r#"{"clientID":"c","producerDataSet":[{"groupName":"PG"}],
            "consumerDataSet":[{"groupName":"G","subscriptionDataSet":[
            {"topic":"T1","subString":"*"},{"topic":"%RETRY%G","subString":"*"}]}]}"#;
        assert_eq!(
            needs(34, &[], body),
            [
                ("%RETRY%G".to_string(), Perm::SUB),
                ("T1".to_string(), Perm::SUB),
                ("%RETRY%G".to_string(), Perm::SUB)
            ]
        );
        assert!(required(&request(34, &[], "{not json")).is_err());
    }

    #[test]
    fn resources_are_named_as_upstream_prints_them() {
        assert_eq!(describe("%RETRY%G"), "group:G");
        assert_eq!(describe("T"), "topic:T");
    }
}
