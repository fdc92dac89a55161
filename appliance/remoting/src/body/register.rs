//! `RegisterBrokerBody`, the body of REGISTER_BROKER (`headers.md` §8.2), in both forms:
//! plain JSON `{"filterServerList":[...],"topicConfigSerializeWrapper":{...}}` and the
//! zlib-compressed binary layout selected by the `compressed` header flag. Which form and
//! which sections apply depends on the registering broker's `version`:
//!
//! - below V3_0_11 the JSON body is only the inner `TopicConfigSerializeWrapper`;
//! - from V5_0_0 the compressed form ends with the topic-queue-mapping section.
//!
//! Decompression is bounded ([`MAX_INFLATED_BYTES`]) so a small frame cannot inflate into
//! an unbounded allocation.

use std::io::{Read, Write};

use crate::body::topic::{
    DataVersion, TopicConfig, TopicConfigAndMappingSerializeWrapper, TopicConfigSerializeWrapper,
    TopicQueueMappingInfo,
};
use crate::json::{self, read, BodyError, ObjectBuilder, Value};

/// `MQVersion` ordinal of V3_0_11: brokers from this version send the full body.
pub const VERSION_V3_0_11: i32 = 37;
/// `MQVersion` ordinal of V5_0_0: compressed bodies carry the mapping section from here.
pub const VERSION_V5_0_0: i32 = 413;

/// Upper bound of a decompressed register body. A broker with 100 000 topics produces
/// roughly 10 MiB; 256 MiB leaves room while refusing decompression bombs.
pub const MAX_INFLATED_BYTES: u64 = 256 * 1024 * 1024;

/// What a broker reports when it registers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RegisterBrokerBody {
    pub topic_config_serialize_wrapper: TopicConfigAndMappingSerializeWrapper,
    pub filter_server_list: Vec<String>,
}

impl RegisterBrokerBody {
    pub fn to_value(&self) -> Value {
        ObjectBuilder::new()
            .field(
                "filterServerList",
                json::string_array(&self.filter_server_list),
            )
            .field(
                "topicConfigSerializeWrapper",
                self.topic_config_serialize_wrapper.to_value(),
            )
            .build()
    }

    /// Plain JSON form.
    pub fn encode_json(&self) -> String {
        self.to_value().to_json()
    }

    /// Decodes a register body as the name server must: by `compressed` flag and the
    /// request's `version`. An empty body is an empty registration (data version zero).
    pub fn decode(body: &[u8], compressed: bool, version: i32) -> Result<Self, BodyError> {
        if body.is_empty() {
            return Ok(Self::default());
        }
        if compressed {
            return Self::decode_compressed(body, version);
        }
        let v = json::parse(body)?;
        if version < VERSION_V3_0_11 {
            let wrapper = TopicConfigSerializeWrapper::from_value(&v, "")?;
            return Ok(Self {
                topic_config_serialize_wrapper: wrapper.into(),
                filter_server_list: Vec::new(),
            });
        }
        if v.as_object().is_none() {
            return Err(BodyError::field("", "a RegisterBrokerBody object"));
        }
        let topic_config_serialize_wrapper = match v.get_present("topicConfigSerializeWrapper") {
            Some(w) => {
                TopicConfigAndMappingSerializeWrapper::from_value(w, "topicConfigSerializeWrapper")?
            }
            None => TopicConfigAndMappingSerializeWrapper::default(),
        };
        Ok(Self {
            topic_config_serialize_wrapper,
            filter_server_list: read::string_list(&v, "filterServerList", "")?,
        })
    }

    /// The compressed form: a zlib stream (deflate level 9) of length-prefixed sections.
    /// The mapping section is always written, as Java does; readers older than V5_0_0
    /// simply stop before it.
    pub fn encode_compressed(&self) -> Vec<u8> {
        let mut raw = Vec::with_capacity(1024);
        let w = &self.topic_config_serialize_wrapper;
        put_section(&mut raw, w.data_version.encode().as_bytes());
        put_len(&mut raw, w.topic_config_table.len());
        for config in w.topic_config_table.values() {
            put_section(&mut raw, config.encode_text().as_bytes());
        }
        put_section(
            &mut raw,
            json::string_array(&self.filter_server_list)
                .to_json()
                .as_bytes(),
        );
        put_len(&mut raw, w.topic_queue_mapping_info_map.len());
        for info in w.topic_queue_mapping_info_map.values() {
            put_section(&mut raw, info.0.to_json().as_bytes());
        }
        let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        // Writing into a Vec cannot fail.
        let _ = encoder.write_all(&raw);
        encoder.finish().unwrap_or_default()
    }

    fn decode_compressed(body: &[u8], version: i32) -> Result<Self, BodyError> {
        let mut input = flate2::read::ZlibDecoder::new(body).take(MAX_INFLATED_BYTES);
        let data_version = DataVersion::decode(&read_section(&mut input, "dataVersion")?)?;
        let topic_count = read_len(&mut input, "topic count")?;
        let mut wrapper = TopicConfigAndMappingSerializeWrapper {
            data_version,
            ..Default::default()
        };
        for i in 0..topic_count {
            let text = read_section(&mut input, "topic config")?;
            let text = String::from_utf8(text)
                .map_err(|_| BodyError::Layout(format!("topic config #{i} is not UTF-8")))?;
            let config = TopicConfig::decode_text(&text)?;
            wrapper
                .topic_config_table
                .insert(config.topic_name.clone(), config);
        }
        let filters = read_section(&mut input, "filter server list")?;
        // Java logs and continues with an empty list when this JSON is unreadable.
        let filter_server_list = json::parse(&filters)
            .ok()
            .map(|v| Value::Object(vec![(Value::str("f"), v)]))
            .and_then(|w| read::string_list(&w, "f", "").ok())
            .unwrap_or_default();
        if version >= VERSION_V5_0_0 {
            let mapping_count = read_len(&mut input, "mapping count")?;
            for _ in 0..mapping_count {
                let info =
                    TopicQueueMappingInfo(json::parse(&read_section(&mut input, "mapping info")?)?);
                let topic = info.topic().unwrap_or_default().to_owned();
                wrapper.topic_queue_mapping_info_map.insert(topic, info);
            }
        }
        Ok(Self {
            topic_config_serialize_wrapper: wrapper,
            filter_server_list,
        })
    }
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(&(len as i32).to_be_bytes());
}

fn put_section(out: &mut Vec<u8>, bytes: &[u8]) {
    put_len(out, bytes.len());
    out.extend_from_slice(bytes);
}

fn read_len(input: &mut impl Read, what: &str) -> Result<usize, BodyError> {
    let mut word = [0u8; 4];
    input.read_exact(&mut word).map_err(|e| {
        BodyError::Layout(format!(
            "compressed register body: reading {what} length: {e}"
        ))
    })?;
    let len = i32::from_be_bytes(word);
    usize::try_from(len).map_err(|_| {
        BodyError::Layout(format!(
            "compressed register body: negative {what} length {len}"
        ))
    })
}

fn read_section(input: &mut impl Read, what: &str) -> Result<Vec<u8>, BodyError> {
    let len = read_len(input, what)?;
    // Grow with the data actually inflated rather than trusting the length word.
    let mut bytes = Vec::with_capacity(len.min(64 * 1024));
    let got = input
        .take(len as u64)
        .read_to_end(&mut bytes)
        .map_err(|e| BodyError::Layout(format!("compressed register body: reading {what}: {e}")))?;
    if got != len {
        return Err(BodyError::Layout(format!(
            "compressed register body: {what} declares {len} bytes but only {got} follow"
        )));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RegisterBrokerBody {
        let mut body = RegisterBrokerBody::default();
        let w = &mut body.topic_config_serialize_wrapper;
        w.data_version = DataVersion {
            state_version: 0,
            timestamp: 1_700_000_000_000,
            counter: 12,
        };
        w.mapping_data_version = DataVersion::new(1_700_000_000_000);
        let mut t1 = TopicConfig::new("T1");
        t1.read_queue_nums = 4;
        t1.write_queue_nums = 4;
        w.topic_config_table.insert("T1".into(), t1);
        let mut tbw = TopicConfig::new("TBW102");
        tbw.perm = 7;
        tbw.read_queue_nums = 8;
        tbw.write_queue_nums = 8;
        w.topic_config_table.insert("TBW102".into(), tbw);
        body
    }

    #[test]
    fn json_form_matches_spec_shape() {
        let text = sample().encode_json();
        assert!(text.starts_with(r#"{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":12,"stateVersion":0,"timestamp":1700000000000},"mappingDataVersion":"#), "{text}");
        assert!(text.contains(r#""topicConfigTable":{"T1":{"attributes":{},"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG","topicName":"T1","topicSysFlag":0,"writeQueueNums":4},"TBW102":"#), "{text}");
        assert!(
            text.ends_with(r#""topicQueueMappingDetailMap":{},"topicQueueMappingInfoMap":{}}}"#),
            "{text}"
        );
        assert_eq!(
            RegisterBrokerBody::decode(text.as_bytes(), false, 481).unwrap(),
            sample()
        );
    }

    #[test]
    fn old_brokers_send_the_bare_wrapper() {
        let wrapper = TopicConfigSerializeWrapper {
            data_version: DataVersion::new(5),
            topic_config_table: [("A".to_string(), TopicConfig::new("A"))].into(),
        };
        let body = RegisterBrokerBody::decode(wrapper.encode().as_bytes(), false, 36).unwrap();
        assert_eq!(
            body.topic_config_serialize_wrapper.topic_config_table.len(),
            1
        );
        assert_eq!(
            body.topic_config_serialize_wrapper.data_version,
            DataVersion::new(5)
        );
    }

    #[test]
    fn compressed_round_trip_with_and_without_mappings() {
        let mut body = sample();
        body.filter_server_list = vec!["10.0.0.9:3000".into()];
        let mapping =
            json::parse_str(r#"{"bname":"b","currIdMap":{"0":0},"topic":"S","totalQueues":1}"#)
                .unwrap();
        body.topic_config_serialize_wrapper
            .topic_queue_mapping_info_map
            .insert("S".into(), TopicQueueMappingInfo(mapping));
        let bytes = body.encode_compressed();
        assert_eq!(bytes[0], 0x78, "zlib header");
        let back = RegisterBrokerBody::decode(&bytes, true, 481).unwrap();
        // The compressed layout carries neither mappingDataVersion nor the detail map,
        // nor topicSysFlag/order.
        let mut expected = body.clone();
        expected.topic_config_serialize_wrapper.mapping_data_version = DataVersion::default();
        assert_eq!(back, expected);
        // A 4.x broker's reader stops before the mapping section.
        let old = RegisterBrokerBody::decode(&bytes, true, 400).unwrap();
        assert!(old
            .topic_config_serialize_wrapper
            .topic_queue_mapping_info_map
            .is_empty());
        assert_eq!(
            old.topic_config_serialize_wrapper.topic_config_table.len(),
            2
        );
    }

    #[test]
    fn compressed_garbage_is_an_error_not_a_panic() {
        assert!(RegisterBrokerBody::decode(b"\x78\x9c garbage", true, 481).is_err());
        // Valid zlib, truncated layout.
        let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(&[0, 0, 0, 50, b'{']).unwrap();
        let err = RegisterBrokerBody::decode(&enc.finish().unwrap(), true, 481).unwrap_err();
        assert!(err.to_string().contains("declares 50 bytes"), "{err}");
        // Negative length word.
        let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(&[0xff, 0xff, 0xff, 0xff]).unwrap();
        assert!(RegisterBrokerBody::decode(&enc.finish().unwrap(), true, 481).is_err());
    }

    #[test]
    fn empty_and_malformed_json_bodies() {
        assert_eq!(
            RegisterBrokerBody::decode(b"", false, 481).unwrap(),
            RegisterBrokerBody::default()
        );
        assert!(RegisterBrokerBody::decode(b"{\"filterServerList\":", false, 481).is_err());
        assert!(RegisterBrokerBody::decode(b"[]", false, 481).is_err());
    }
}
