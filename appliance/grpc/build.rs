//! Generates the apache.rocketmq.v2 messages and the MessagingService server from the
//! vendored protos (`proto/`, from apache/rocketmq-apis) with a pure-Rust protobuf
//! compiler, so building needs no `protoc` on the machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/apache/rocketmq/v2/definition.proto",
        "proto/apache/rocketmq/v2/service.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let descriptors = protox::compile(protos, ["proto"])?;
    tonic_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
