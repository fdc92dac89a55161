//! Fuzz target `body_decode`: arbitrary bytes as a request or response body, fed to every
//! body decoder the broker, the name server and the client run (heartbeat, lock batch,
//! consumer list, topic configs, register body in both forms, routes, KV tables,
//! properties, stats...). Whatever decodes must re-encode to bytes that decode to the same
//! value; only typed errors may come out.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringmq_remoting::body::testing::check_bodies;

fuzz_target!(|data: &[u8]| {
    if let Err(why) = check_bodies(data) {
        panic!("body round trip broke: {why}");
    }
});
