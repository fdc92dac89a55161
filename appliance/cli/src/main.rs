//! The `ringmq` binary: subcommands namesrv, broker, up, admin, bench (being written).
fn main() {
    println!("ringmq {}", env!("CARGO_PKG_VERSION"));
}
