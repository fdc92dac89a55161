//! Frames whose extFields carry a huge number of keys: decoding stays linear in the frame
//! size, so one such frame cannot stall the core that reads it.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use ringmq_remoting::FrameDecoder;

/// Generous for ~100 ms of work on a busy machine; a quadratic decoder needs tens of
/// seconds for the same frames.
const DECODE_BOUND: Duration = Duration::from_secs(3);

fn frame(serialize_type: u8, header: &[u8]) -> BytesMut {
    let mut frame = BytesMut::with_capacity(header.len() + 8);
    frame.extend_from_slice(&((header.len() + 4) as u32).to_be_bytes());
    frame.extend_from_slice(
        &((u32::from(serialize_type) << 24) | header.len() as u32).to_be_bytes(),
    );
    frame.extend_from_slice(header);
    frame
}

fn json_frame(keys: usize) -> BytesMut {
    let mut text = String::from(r#"{"code":310,"extFields":{"#);
    for i in 0..keys {
        text.push_str(&format!(r#""k{i}":"v","#));
    }
    text.push_str(r#""b":"TopicTest"},"flag":0,"language":"JAVA","opaque":9,"version":0}"#);
    frame(0, text.as_bytes())
}

fn binary_frame(keys: usize) -> BytesMut {
    let mut block = Vec::new();
    let mut put = |key: &str, value: &str| {
        block.extend_from_slice(&(key.len() as i16).to_be_bytes());
        block.extend_from_slice(key.as_bytes());
        block.extend_from_slice(&(value.len() as i32).to_be_bytes());
        block.extend_from_slice(value.as_bytes());
    };
    for i in 0..keys {
        put(&format!("k{i}"), "v");
    }
    put("b", "TopicTest");
    let mut header = Vec::new();
    header.extend_from_slice(&310i16.to_be_bytes());
    header.push(0); // language JAVA
    header.extend_from_slice(&0i16.to_be_bytes()); // version
    header.extend_from_slice(&9i32.to_be_bytes()); // opaque
    header.extend_from_slice(&0i32.to_be_bytes()); // flag
    header.extend_from_slice(&0i32.to_be_bytes()); // remark length
    header.extend_from_slice(&(block.len() as i32).to_be_bytes());
    header.extend_from_slice(&block);
    frame(1, &header)
}

/// Decodes `frame` on a separate thread and fails unless it finishes within
/// [`DECODE_BOUND`] with `keys + 1` entries (the test never waits on a slow decoder).
fn assert_decodes_in_bounded_time(name: &str, mut frame: BytesMut, keys: usize) {
    let (done, result) = mpsc::channel();
    std::thread::spawn(move || {
        let started = Instant::now();
        let decoded = FrameDecoder::default().decode(&mut frame);
        let _ = done.send((decoded, started.elapsed()));
    });
    let (decoded, took) = result
        .recv_timeout(DECODE_BOUND)
        .unwrap_or_else(|_| panic!("{name}: {keys} keys not decoded within {DECODE_BOUND:?}"));
    let command = decoded.expect("frame decodes").expect("frame is complete");
    assert_eq!(command.opaque, 9, "{name}");
    assert_eq!(command.ext_fields.len(), keys + 1, "{name}");
    assert_eq!(command.ext_fields.get("b"), Some("TopicTest"), "{name}");
    assert_eq!(
        command.ext_fields.get(&format!("k{}", keys / 2)),
        Some("v"),
        "{name}"
    );
    eprintln!("{name}: {keys} keys decoded in {took:?}");
}

#[test]
fn json_header_with_100k_keys_decodes_in_bounded_time() {
    assert_decodes_in_bounded_time("json", json_frame(100_000), 100_000);
}

#[test]
fn binary_header_with_100k_keys_decodes_in_bounded_time() {
    assert_decodes_in_bounded_time("binary", binary_frame(100_000), 100_000);
}

#[test]
fn header_filling_a_16_mib_frame_with_keys_decodes_in_bounded_time() {
    // ~1.1M keys of this shape fill a frame just under the default 16 MiB bound.
    let keys = 1_100_000;
    let frame = binary_frame(keys);
    assert!(frame.len() < ringmq_remoting::frame::DEFAULT_MAX_FRAME_BYTES);
    assert_decodes_in_bounded_time("binary, 16 MiB", frame, keys);
}
