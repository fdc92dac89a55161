//! Body decoders under the round-trip oracle (`body::testing::check_bodies`, also the fuzz
//! target's): bodies shaped as Java, Go and C++ clients and brokers send them each decode
//! as their type and survive encode -> decode, and byte-level edits of them never panic
//! and never break a round trip.

use proptest::prelude::*;
use ringmq_remoting::body::register::RegisterBrokerBody;
use ringmq_remoting::body::testing::{check_bodies, BODY_TYPES};

/// One realistic body per request or response that carries one, as peers write them.
fn seeds() -> Vec<Vec<u8>> {
    let mut seeds: Vec<Vec<u8>> = [
        // HEART_BEAT from a Java consumer.
        concat!(
            r#"{"clientID":"192.168.1.5@12345","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","#,
            r#""consumeType":"CONSUME_PASSIVELY","groupName":"G1","messageModel":"CLUSTERING","#,
            r#""subscriptionDataSet":[{"classFilterMode":false,"codeSet":[2598919],"expressionType":"TAG","#,
            r#""subString":"TagA","subVersion":1700000000000,"tagsSet":["TagA"],"topic":"T1"}],"unitMode":false}],"#,
            r#""heartbeatFingerprint":0,"producerDataSet":[{"groupName":"P1"}],"withoutSub":false}"#
        ),
        // HEART_BEAT from the C++ core: numbers for enums and quoted numbers.
        concat!(
            r#"{"clientID":"10.0.0.7@9876","consumerDataSet":[{"consumeFromWhere":4,"consumeType":1,"#,
            r#""groupName":"GC","messageModel":0,"subscriptionDataSet":[{"subString":"a || b","#,
            r#""subVersion":"1700000000000","tagsSet":["a","b"],"codeSet":[97,98],"topic":"TC"}]}]}"#
        ),
        // LOCK_BATCH_MQ / UNLOCK_BATCH_MQ request and the lock answer.
        r#"{"clientId":"10.0.0.1@1","consumerGroup":"G","mqSet":[{"brokerName":"broker-a","queueId":1,"topic":"T"}],"onlyThisBroker":false}"#,
        r#"{"lockOKMQSet":[{"brokerName":"broker-a","queueId":0,"topic":"T"}]}"#,
        // GET_CONSUMER_LIST_BY_GROUP answer.
        r#"{"consumerIdList":["c1","c2"]}"#,
        // INVOKE_BROKER_TO_RESET_OFFSET, fastjson's object keys.
        r#"{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:10}}"#,
        // Name server KV table and config wrapper.
        r#"{"table":{"T1":"broker-a:4"}}"#,
        r#"{"configTable":{"ORDER_TOPIC_CONFIG":{"T1":"broker-a:4"}}}"#,
        // Topic configs as a broker registers them and as GET_ALL_TOPIC_CONFIG answers.
        concat!(
            r#"{"dataVersion":{"counter":12,"stateVersion":0,"timestamp":1700000000000},"#,
            r#""topicConfigTable":{"T1":{"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","#,
            r#""topicName":"T1","topicSysFlag":0,"writeQueueNums":4}}}"#
        ),
        r#"{"topicList":["T1","T2"]}"#,
        // GET_BROKER_CLUSTER_INFO answer in fastjson's bare-key form.
        r#"{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"10.0.0.1:10911"},"brokerName":"broker-a","cluster":"C"}},"clusterAddrTable":{"C":["broker-a"]}}"#,
        r#"{"brokerMemberGroup":{"brokerAddrs":{"0":"a:1"},"brokerName":"b","cluster":"c"}}"#,
        // UPDATE_BROKER_CONFIG properties text and one topics.json line.
        "brokerName=broker-a\nflushDiskType=ASYNC_FLUSH\n",
        // UPDATE_AND_CREATE_SUBSCRIPTIONGROUP from mqadmin (a null policy, as Java may send).
        r#"{"groupName":"G1","consumeEnable":true,"retryQueueNums":1,"retryMaxTimes":16,"groupRetryPolicy":null,"brokerId":0}"#,
        // GET_ALL_SUBSCRIPTIONGROUP_CONFIG answer / subscriptionGroup.json.
        concat!(
            r#"{"subscriptionGroupTable":{"G1":{"groupName":"G1","consumeEnable":true,"retryQueueNums":1,"#,
            r#""groupRetryPolicy":{"type":"CUSTOMIZED","customizedRetryPolicy":{"type":"CUSTOMIZED","next":[1000,5000]}}}},"#,
            r#""dataVersion":{"counter":3,"stateVersion":0,"timestamp":1700000000000}}"#
        ),
        // Controller: CONTROLLER_ALTER_SYNC_STATE_SET's body, the ELECT_MASTER and
        // GET_SYNC_STATE_DATA answers.
        r#"{"syncStateSet":[1,2],"syncStateSetEpoch":3}"#,
        r#"{"brokerMemberGroup":{"brokerAddrs":{"1":"a:1"},"brokerName":"b","cluster":"c"},"syncStateSet":[1]}"#,
        concat!(
            r#"{"replicasInfoTable":{"b":{"inSyncReplicas":[{"alive":true,"brokerAddress":"a:1","brokerId":1,"brokerName":"b"}],"#,
            r#""masterAddress":"a:1","masterBrokerId":1,"masterEpoch":2,"notInSyncReplicas":[],"syncStateSetEpoch":2}}}"#
        ),
        // GET_BROKER_EPOCH_CACHE answer.
        r#"{"brokerId":1,"brokerName":"b","clusterName":"C","epochList":[{"endOffset":9223372036854775807,"epoch":1,"startOffset":0}],"maxOffset":64}"#,
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    // REGISTER_BROKER's compressed form from a V5 broker, built from its JSON form.
    let json = RegisterBrokerBody::decode(&seeds[8], false, 0).expect("old-broker body");
    seeds.push(json.encode_compressed());
    seeds
}

/// Every seed decodes as at least one body type and its round trip holds.
#[test]
fn seed_bodies_decode_and_round_trip() {
    assert!(BODY_TYPES.len() >= 20, "{BODY_TYPES:?}");
    for (i, seed) in seeds().iter().enumerate() {
        let decoded = check_bodies(seed)
            .unwrap_or_else(|e| panic!("seed {i} {:?}: {e}", String::from_utf8_lossy(seed)));
        assert!(
            decoded > 0,
            "seed {i} decodes as nothing: {:?}",
            String::from_utf8_lossy(seed)
        );
    }
}

/// An edit of a seed: overwrite, insert or delete bytes at a position.
#[derive(Debug, Clone)]
enum Edit {
    Overwrite(usize, u8),
    Insert(usize, u8),
    Delete(usize),
}

fn apply(seed: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut bytes = seed.to_vec();
    for edit in edits {
        let len = bytes.len().max(1);
        match *edit {
            Edit::Overwrite(at, b) if !bytes.is_empty() => bytes[at % len] = b,
            Edit::Insert(at, b) => bytes.insert(at % (bytes.len() + 1), b),
            Edit::Delete(at) if !bytes.is_empty() => {
                bytes.remove(at % len);
            }
            _ => {}
        }
    }
    bytes
}

fn edit() -> impl Strategy<Value = Edit> {
    // Structural JSON bytes are the interesting replacements.
    let byte = prop_oneof![
        Just(b'{'),
        Just(b'}'),
        Just(b'['),
        Just(b']'),
        Just(b'"'),
        Just(b':'),
        Just(b','),
        Just(b'-'),
        Just(b'9'),
        Just(b'\\'),
        any::<u8>(),
    ];
    prop_oneof![
        (any::<usize>(), byte.clone()).prop_map(|(at, b)| Edit::Overwrite(at, b)),
        (any::<usize>(), byte).prop_map(|(at, b)| Edit::Insert(at, b)),
        any::<usize>().prop_map(Edit::Delete),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn edited_bodies_never_panic_and_keep_round_trips(
        pick in any::<usize>(),
        edits in prop::collection::vec(edit(), 1..6),
    ) {
        let seeds = seeds();
        let body = apply(&seeds[pick % seeds.len()], &edits);
        let checked = check_bodies(&body);
        prop_assert!(checked.is_ok(), "{:?}: {:?}", String::from_utf8_lossy(&body), checked);
    }
}
