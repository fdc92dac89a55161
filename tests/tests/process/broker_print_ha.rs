//! `ringmq broker -p` prints the HA settings the broker registers: `haListenPort` is
//! `listenPort + 1` and `brokerIP2` is `brokerIP1` unless the config file sets them.

use std::process::Command;

use ringmq_tests::{ringmq_bin, TempDir};

fn printed(conf: &str) -> String {
    let dir = TempDir::new("print-ha");
    let file = dir.path().join("broker.conf");
    std::fs::write(&file, conf).expect("write broker.conf");
    let out = Command::new(ringmq_bin())
        .args(["broker", "-c"])
        .arg(&file)
        .arg("-p")
        .output()
        .expect("run ringmq broker -p");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

#[test]
fn broker_print_shows_the_effective_ha_listen_port_and_address() {
    let text = printed("listenPort=22010\nbrokerIP1=192.0.2.10\n");
    assert!(text.contains("\nhaListenPort=22011\n"), "{text}");
    assert!(text.contains("\nbrokerIP2=192.0.2.10\n"), "{text}");
    let text = printed(
        "listenPort=22010\nbrokerIP1=192.0.2.10\nbrokerIP2=192.0.2.20\nhaListenPort=23000\n",
    );
    assert!(text.contains("\nhaListenPort=23000\n"), "{text}");
    assert!(text.contains("\nbrokerIP2=192.0.2.20\n"), "{text}");
}
