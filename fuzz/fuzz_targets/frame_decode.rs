//! Fuzz target `frame_decode`: arbitrary bytes as a receive buffer. Every frame the
//! decoder yields must re-encode to a frame that decodes to the same command, and its
//! extFields go through every typed header's decode -> encode -> decode oracle (which also
//! holds the broker's borrowed send and pull decoders to the owned headers) and its
//! body through every body decoder's (`body_decode` fuzzes bodies alone). The raw bytes
//! are also fed to both header readers directly. Only typed errors may come out.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use ringmq_remoting::body::testing::check_bodies;
use ringmq_remoting::command::{binary_header, json_header};
use ringmq_remoting::header::testing::check_decoded;
use ringmq_remoting::FrameDecoder;

/// Small bound so the fuzzer explores the size checks instead of allocating.
const MAX_FRAME_BYTES: usize = 64 * 1024;

fuzz_target!(|data: &[u8]| {
    let decoder = FrameDecoder::new(MAX_FRAME_BYTES);
    let mut buf = BytesMut::from(data);
    while let Ok(Some(cmd)) = decoder.decode(&mut buf) {
        if let Err(why) = check_decoded(&cmd.ext_fields) {
            panic!("typed header round trip broke: {why}");
        }
        if let Err(why) = check_bodies(&cmd.body) {
            panic!("body round trip broke: {why}");
        }
        let mut wire = BytesMut::new();
        cmd.encode(&mut wire);
        let again = decoder
            .decode(&mut wire)
            .expect("our own frame decodes")
            .expect("complete");
        assert_eq!(again, cmd, "decode -> encode -> decode changed the command");
    }
    if let Ok(cmd) = json_header::read(data) {
        if let Err(why) = check_decoded(&cmd.ext_fields) {
            panic!("typed header round trip broke: {why}");
        }
    }
    let _ = binary_header::read(data);
});
