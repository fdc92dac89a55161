//! The serving subcommands: `namesrv`, `broker`, `controller` and `up`, with RocketMQ's CLI flags
//! (`-c` config file, `-n` namesrv address, `-p` print config and exit, `-m` print the
//! important config and exit).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use bytes::BytesMut;
use ringmq_broker::{Broker, BrokerConfig};
use ringmq_controller::{Controller, ControllerConfig};
use ringmq_grpc::GrpcServer;
use ringmq_namesrv::{Namesrv, NamesrvConfig};
use ringmq_remoting::body::kv::Properties;
use ringmq_remoting::{FrameDecoder, RemotingCommand};

use crate::lifecycle::{self, Watchdog};
use crate::notify;

/// Flags shared by `namesrv` and `broker`, spelled as `mqnamesrv` / `mqbroker` spell them.
#[derive(Default)]
struct ServeFlags {
    config_file: Option<PathBuf>,
    namesrv_addr: Option<String>,
    print_all: bool,
    print_important: bool,
}

fn parse_flags(args: &[String], command: &str) -> Result<ServeFlags, String> {
    let mut flags = ServeFlags::default();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-c" | "--configFile" => {
                let value = it
                    .next()
                    .ok_or_else(|| format!("{arg} needs a file path"))?;
                flags.config_file = Some(PathBuf::from(value));
            }
            "-n" | "--namesrvAddr" => {
                let value = it.next().ok_or_else(|| format!("{arg} needs an address"))?;
                flags.namesrv_addr = Some(value.clone());
            }
            "-p" | "--printConfigItem" => flags.print_all = true,
            "-m" | "--printImportantConfig" => flags.print_important = true,
            other => return Err(format!("{command}: unknown option {other:?}")),
        }
    }
    Ok(flags)
}

fn read_config_text(path: Option<&Path>) -> Result<String, String> {
    match path {
        None => Ok(String::new()),
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config file {}: {e}", path.display())),
    }
}

fn report_unknown_keys(file: &str, unknown: &[String]) {
    for key in unknown {
        tracing::warn!(
            file,
            key = key.as_str(),
            "unknown configuration key ignored"
        );
    }
}

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("ringmq: {message}");
    ExitCode::FAILURE
}

/// The name server's config and, with `enableControllerInNamesrv=true`, the embedded
/// controller's, read from the same file (as upstream's NamesrvStartup does). The embedded
/// controller keeps its own default port (19876) unless its peers name one.
fn load_namesrv_config(
    flags: &ServeFlags,
) -> Result<(NamesrvConfig, Option<ControllerConfig>), String> {
    let text = read_config_text(flags.config_file.as_deref())?;
    let load = NamesrvConfig::load(&text).map_err(|e| {
        let file = flags
            .config_file
            .as_deref()
            .unwrap_or(Path::new("namesrv.conf"));
        format!("{} is not a valid properties file: {e}", file.display())
    })?;
    let embedded = load.config.enable_controller_in_namesrv;
    let unknown: Vec<String> = load
        .unknown_keys
        .iter()
        .filter(|k| !(embedded && ControllerConfig::is_key(k)))
        .cloned()
        .collect();
    report_unknown_keys("namesrv.conf", &unknown);
    for problem in &load.invalid_values {
        tracing::warn!("namesrv.conf: {problem}; keeping the default");
    }
    let mut config = load.config;
    if let Some(file) = &flags.config_file {
        // As mqnamesrv: UPDATE_NAMESRV_CONFIG writes back to the file given with -c.
        config.config_store_path = file.display().to_string();
    }
    let controller = if embedded {
        let mut props = Properties::parse(&text).map_err(|e| e.to_string())?;
        // `listenPort` in namesrv.conf is the name server's own.
        props.remove("listenPort");
        Some(ControllerConfig::from_properties(&props).config)
    } else {
        None
    };
    Ok((config, controller))
}

fn load_broker_config(flags: &ServeFlags) -> Result<BrokerConfig, String> {
    let mut text = read_config_text(flags.config_file.as_deref())?;
    if let Some(addr) = &flags.namesrv_addr {
        // A later line wins in a properties file, so `-n` overrides the file's value.
        text.push_str(&format!("\nnamesrvAddr={addr}\n"));
    }
    let (mut config, unknown) = BrokerConfig::from_properties_text(&text);
    report_unknown_keys("broker.conf", &unknown);
    if let Some(file) = &flags.config_file {
        // As mqbroker: UPDATE_BROKER_CONFIG saves accepted keys into the -c file, unless the
        // file names another one with brokerConfigPath.
        if config
            .broker_config_path
            .as_deref()
            .is_none_or(|p| p.trim().is_empty())
        {
            config.broker_config_path = Some(absolute(file)?.display().to_string());
        }
    }
    Ok(config)
}

pub fn namesrv(args: &[String]) -> ExitCode {
    serve_role(
        args,
        "namesrv",
        load_namesrv_config,
        |(namesrv, controller)| {
            let mut text = namesrv.to_properties_text();
            if let Some(c) = controller {
                text.push_str(&c.to_properties_text());
            }
            text
        },
        |(config, controller)| {
            let namesrv =
                Namesrv::start(config).map_err(|e| format!("namesrv failed to start: {e}"))?;
            let controller = match controller.map(|c| Controller::start(c, None)).transpose() {
                Ok(c) => c,
                Err(e) => {
                    namesrv.shutdown();
                    return Err(format!("embedded controller failed to start: {e}"));
                }
            };
            Ok((namesrv, controller))
        },
        |(namesrv, controller)| {
            let addr = namesrv.local_addr();
            println!("The Name Server boot success. serializeType=JSON, address {addr}");
            let mut addrs = vec![addr];
            if let Some(c) = &controller {
                println!("The embedded controller listens on {}", c.local_addr());
                addrs.push(c.local_addr());
            }
            serve_until_signal(&addrs, || {
                if let Some(c) = controller {
                    c.shutdown();
                }
                namesrv.shutdown();
            });
        },
    )
}

/// `ringmq controller -c controller.conf` (as upstream's `mqcontroller`).
pub fn controller(args: &[String]) -> ExitCode {
    serve_role(
        args,
        "controller",
        load_controller_config,
        |(config, _)| config.to_properties_text(),
        |(config, file)| {
            Controller::start(config, file).map_err(|e| format!("controller failed to start: {e}"))
        },
        |controller| {
            let addr = controller.local_addr();
            println!("The ControllerManager boot success. serializeType=JSON, address {addr}");
            serve_until_signal(&[addr], || controller.shutdown());
        },
    )
}

fn load_controller_config(
    flags: &ServeFlags,
) -> Result<(ControllerConfig, Option<PathBuf>), String> {
    let text = read_config_text(flags.config_file.as_deref())?;
    let props = Properties::parse(&text).map_err(|e| {
        let file = flags
            .config_file
            .as_deref()
            .unwrap_or(Path::new("controller.conf"));
        format!("{} is not a valid properties file: {e}", file.display())
    })?;
    let load = ControllerConfig::from_properties(&props);
    report_unknown_keys("controller.conf", &load.unknown_keys);
    Ok((load.config, flags.config_file.clone()))
}

pub fn broker(args: &[String]) -> ExitCode {
    serve_role(
        args,
        "broker",
        load_broker_config,
        BrokerConfig::to_properties_text,
        ServedBroker::start,
        |served| {
            let addr = served.broker.local_addr();
            println!("The broker boot success. serializeType=JSON, address {addr}");
            if let Some(grpc) = &served.grpc {
                println!(
                    "The gRPC endpoint (5.x SDKs) listens on {}",
                    grpc.local_addr()
                );
            }
            // Controller mode: a slave whose log ran past its new master's must truncate,
            // which recovery does; the broker stops cleanly and starts again in place.
            served
                .broker
                .on_reopen_request(Box::new(lifecycle::request_shutdown));
            let reopen = served.broker.reopen_signal();
            let restarting = || reopen.is_requested();
            serve_until_signal_or_restart(&[addr], restarting, || served.shutdown());
            if reopen.is_requested() {
                lifecycle::restart_in_place();
            }
        },
    )
}

/// A broker and its gRPC endpoint (`ringmq.grpc.*`), started and stopped together.
struct ServedBroker {
    broker: Broker,
    grpc: Option<GrpcServer>,
}

impl ServedBroker {
    fn start(config: BrokerConfig) -> Result<ServedBroker, String> {
        let broker = Broker::start(config).map_err(|e| format!("broker failed to start: {e}"))?;
        match GrpcServer::start_for(&broker) {
            Ok(grpc) => Ok(ServedBroker { broker, grpc }),
            Err(e) => {
                broker.shutdown();
                Err(format!("broker failed to start: {e}"))
            }
        }
    }

    /// The gRPC endpoint first, so no gRPC request reaches a stopping broker.
    fn shutdown(self) {
        if let Some(g) = self.grpc {
            g.stop();
        }
        self.broker.shutdown();
    }
}

/// The shape `mqnamesrv` and `mqbroker` share: flags, config (printed and exit with
/// `-p`/`-m`), signals blocked before any server thread exists, start, serve.
fn serve_role<C, S>(
    args: &[String],
    role: &str,
    load: fn(&ServeFlags) -> Result<C, String>,
    print: fn(&C) -> String,
    start: impl FnOnce(C) -> Result<S, String>,
    serve: impl FnOnce(S),
) -> ExitCode {
    let config = match parse_flags(args, role).and_then(|flags| {
        let config = load(&flags)?;
        Ok((flags.print_all || flags.print_important, config))
    }) {
        Ok((true, config)) => {
            print!("{}", print(&config));
            return ExitCode::SUCCESS;
        }
        Ok((false, config)) => config,
        Err(e) => return fail(e),
    };
    lifecycle::block_shutdown_signals();
    match start(config) {
        Ok(server) => {
            serve(server);
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

/// `ringmq up`: a NameServer on 9876 and a broker on 10911 in this process, with every
/// file under `./ringmq-data` (or `--data DIR`), for a first run on a fresh machine.
pub fn up(args: &[String]) -> ExitCode {
    let mut data_dir = PathBuf::from("ringmq-data");
    let mut namesrv_port: u16 = 9876;
    let mut broker_port: u16 = 10911;
    let mut metrics_port: u16 = 0;
    let mut grpc_port: u16 = ringmq_grpc::server::DEFAULT_PORT;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--help" || arg == "-h" {
            println!(
                "usage: ringmq up [--data DIR] [--namesrv-port N] [--broker-port N] [--metrics-port N] [--grpc-port N]\n\
                 Runs a NameServer (default 9876) and a broker (default 10911, gRPC for the 5.x\n\
                 SDKs on 8081) in one process,\n\
                 with all data under DIR (default ./ringmq-data). Files are sized for a first try:\n\
                 64 MiB CommitLog segments, about 130 MiB of disk at start (`ringmq broker`\n\
                 keeps RocketMQ's 1 GiB segments; see README, \"Disk use\")."
            );
            return ExitCode::SUCCESS;
        }
        let value = it.next();
        let parsed = match (arg.as_str(), value) {
            ("--data", Some(v)) => {
                data_dir = PathBuf::from(v);
                Ok(())
            }
            ("--namesrv-port", Some(v)) => v.parse().map(|p| namesrv_port = p).map_err(|_| ()),
            ("--broker-port", Some(v)) => v.parse().map(|p| broker_port = p).map_err(|_| ()),
            ("--metrics-port", Some(v)) => v.parse().map(|p| metrics_port = p).map_err(|_| ()),
            ("--grpc-port", Some(v)) => v.parse().map(|p| grpc_port = p).map_err(|_| ()),
            _ => Err(()),
        };
        if parsed.is_err() {
            return fail(format!(
                "up: bad option {arg:?}; options: --data DIR, --namesrv-port N, --broker-port N, \
                 --metrics-port N, --grpc-port N"
            ));
        }
    }
    let data_dir = match absolute(&data_dir) {
        Ok(dir) => dir,
        Err(e) => return fail(e),
    };
    let namesrv_text = format!(
        "listenPort={namesrv_port}\nkvConfigPath={}\nconfigStorePath={}\n",
        data_dir.join("namesrv/kvConfig.json").display(),
        data_dir.join("namesrv/namesrv.properties").display()
    );
    let broker_text = format!(
        "{}{}={grpc_port}\n",
        up_broker_properties(&data_dir, namesrv_port, broker_port, metrics_port),
        ringmq_grpc::server::PORT_KEY
    );
    let (namesrv_config, _) = NamesrvConfig::from_properties_text(&namesrv_text);
    let (broker_config, _) = BrokerConfig::from_properties_text(&broker_text);
    lifecycle::block_shutdown_signals();
    let namesrv = match Namesrv::start(namesrv_config) {
        Ok(n) => n,
        Err(e) => {
            return fail(format!(
                "namesrv failed to start on port {namesrv_port}: {e}"
            ))
        }
    };
    let served = match ServedBroker::start(broker_config) {
        Ok(b) => b,
        Err(e) => {
            namesrv.shutdown();
            return fail(format!("{e} (port {broker_port})"));
        }
    };
    let (n_addr, b_addr) = (namesrv.local_addr(), served.broker.local_addr());
    println!("ringmq is up.");
    println!("  NameServer  {n_addr}   (clients: namesrvAddr=127.0.0.1:{namesrv_port})");
    println!("  Broker      {b_addr}   (cluster DefaultCluster, broker-a)");
    if let Some(grpc) = &served.grpc {
        println!(
            "  gRPC        {}   (5.x SDKs: endpoints=127.0.0.1:{})",
            grpc.local_addr(),
            grpc.local_addr().port()
        );
    }
    println!("  Data        {}", data_dir.display());
    println!("Stop with Ctrl-C (or SIGTERM); the broker flushes and checkpoints first.");
    serve_until_signal(&[n_addr, b_addr], || {
        served.shutdown();
        namesrv.shutdown();
    });
    ExitCode::SUCCESS
}

/// `up`'s CommitLog segment size: 64 MiB instead of the production 1 GiB, so a first
/// try takes about 130 MiB of disk (the segment written to plus the next one, prepared
/// ahead) rather than 2 GiB.
pub const UP_COMMIT_LOG_SEGMENT_BYTES: u64 = 64 * 1024 * 1024;
/// `up`'s ConsumeQueue file: 30 000 units of 20 bytes (600 KB; production 6 MB).
pub const UP_CONSUME_QUEUE_FILE_BYTES: u64 = 30_000 * 20;
/// `up`'s index file geometry: 100 000 hash slots and 400 000 entries, about 8.4 MB per
/// index file (production's 5 000 000 / 20 000 000 make 420 MB files).
pub const UP_MAX_HASH_SLOT_NUM: u32 = 100_000;
pub const UP_MAX_INDEX_NUM: u32 = 400_000;

/// The broker configuration `up` runs with: one master `broker-a` in `DefaultCluster`,
/// data under `data_dir/store`, and file sizes made for trying ringmq on a laptop (see
/// the `UP_*` constants). `ringmq broker` keeps the production sizes.
pub fn up_broker_properties(
    data_dir: &Path,
    namesrv_port: u16,
    broker_port: u16,
    metrics_port: u16,
) -> String {
    let store_dir = data_dir.join("store");
    let mut text = format!(
        "brokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerId=0\n\
         listenPort={broker_port}\nnamesrvAddr=127.0.0.1:{namesrv_port}\n\
         storePathRootDir={}\nautoCreateTopicEnable=true\nringmq.metricsPort={metrics_port}\n",
        store_dir.display()
    );
    if uses_small_store_files(&store_dir) {
        text.push_str(&format!(
            "mappedFileSizeCommitLog={UP_COMMIT_LOG_SEGMENT_BYTES}\n\
             mappedFileSizeConsumeQueue={UP_CONSUME_QUEUE_FILE_BYTES}\n\
             maxHashSlotNum={UP_MAX_HASH_SLOT_NUM}\nmaxIndexNum={UP_MAX_INDEX_NUM}\n"
        ));
    }
    text
}

/// Whether `up` runs its store with the small file sizes: yes for a new store, and for
/// one whose CommitLog segments have `up`'s size; no for a store made with the
/// production sizes (by an earlier `up`, or copied from a broker), whose existing
/// CommitLog, ConsumeQueue and index files the store would otherwise refuse to open.
fn uses_small_store_files(store_dir: &Path) -> bool {
    let first_segment = std::fs::read_dir(store_dir.join("commitlog"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.metadata().ok())
        .find(|meta| meta.is_file());
    first_segment.is_none_or(|meta| meta.len() == UP_COMMIT_LOG_SEGMENT_BYTES)
}

fn absolute(path: &Path) -> Result<PathBuf, String> {
    if path.is_absolute() {
        return Ok(path.to_path_buf());
    }
    std::env::current_dir()
        .map(|cwd| cwd.join(path))
        .map_err(|e| format!("cannot resolve the data directory {}: {e}", path.display()))
}

/// Tells systemd we are ready, feeds its watchdog while every address answers a probe,
/// and on SIGINT/SIGTERM runs `shutdown`.
fn serve_until_signal(addrs: &[SocketAddr], shutdown: impl FnOnce()) {
    serve_until_signal_or_restart(addrs, || false, shutdown)
}

/// As [`serve_until_signal`]; when `restarting` says the stop is a restart in place, systemd
/// hears RELOADING=1 rather than STOPPING=1 (it would otherwise wait for the exit and kill the
/// re-executed process), and the new process's READY=1 ends the reload.
fn serve_until_signal_or_restart(
    addrs: &[SocketAddr],
    restarting: impl Fn() -> bool,
    shutdown: impl FnOnce(),
) {
    notify::notify("READY=1");
    let probe_addrs = addrs.to_vec();
    let watchdog = Watchdog::start(move || probe_addrs.iter().all(|a| probe(*a)));
    let signal = lifecycle::wait_for_signal();
    tracing::info!(signal, "shutting down");
    notify::notify(if restarting() {
        "RELOADING=1"
    } else {
        "STOPPING=1"
    });
    drop(watchdog);
    shutdown();
}

/// One request/response round trip over loopback: proves a network core still serves.
/// Any response counts (a namesrv answers TOPIC_NOT_EXIST for an unknown topic).
fn probe(addr: SocketAddr) -> bool {
    const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
    let target = if addr.ip().is_unspecified() {
        SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), addr.port())
    } else {
        addr
    };
    let Ok(mut stream) = TcpStream::connect_timeout(&target, PROBE_TIMEOUT) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(PROBE_TIMEOUT));
    let _ = stream.set_write_timeout(Some(PROBE_TIMEOUT));
    let request =
        RemotingCommand::request(ringmq_remoting::RequestCode::GetRouteinfoByTopic.code(), 1)
            .with_ext("topic", "TBW102");
    let mut out = BytesMut::new();
    request.encode(&mut out);
    if stream.write_all(&out).is_err() {
        return false;
    }
    let decoder = FrameDecoder::default();
    let mut buf = BytesMut::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    for _ in 0..64 {
        match decoder.decode(&mut buf) {
            Ok(Some(response)) => return response.is_response() && response.opaque == 1,
            Ok(None) => {}
            Err(_) => return false,
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `up`'s broker config is accepted without notes and gives the store its small file
    /// sizes, while a plain broker config keeps the production ones.
    #[test]
    fn up_uses_small_store_files_and_broker_keeps_production_sizes() {
        let text = up_broker_properties(Path::new("/srv/ringmq"), 9876, 10911, 0);
        let (config, notes) = BrokerConfig::from_properties_text(&text);
        assert!(notes.is_empty(), "{notes:?}");
        let sc = ringmq_broker::disk_store::store_config(&config).unwrap();
        assert_eq!(sc.mapped_file_size_commit_log, UP_COMMIT_LOG_SEGMENT_BYTES);
        assert_eq!(
            sc.consume_queue_file_size_bytes(),
            UP_CONSUME_QUEUE_FILE_BYTES
        );
        assert_eq!(sc.max_hash_slot_num, UP_MAX_HASH_SLOT_NUM);
        assert_eq!(sc.max_index_num, UP_MAX_INDEX_NUM);
        assert_eq!(sc.store_path_root_dir, Path::new("/srv/ringmq/store"));

        let (plain, _) = BrokerConfig::from_properties_text("brokerName=b\n");
        let sc = ringmq_broker::disk_store::store_config(&plain).unwrap();
        assert_eq!(sc.mapped_file_size_commit_log, 1024 * 1024 * 1024);
    }

    /// A data directory whose store was made with the production sizes (an earlier `up`)
    /// keeps them, so the store opens its existing files; one made by `up` with the small
    /// sizes keeps the small ones.
    #[test]
    fn up_keeps_the_file_sizes_of_an_existing_store() {
        let data = std::env::temp_dir().join(format!("ringmq-up-sizes-{}", std::process::id()));
        let commitlog = data.join("store/commitlog");
        std::fs::create_dir_all(&commitlog).unwrap();
        let segment = std::fs::File::create(commitlog.join("00000000000000000000")).unwrap();
        segment.set_len(1024 * 1024 * 1024).unwrap();
        let sizes = |text: &str| {
            let (config, _) = BrokerConfig::from_properties_text(text);
            let sc = ringmq_broker::disk_store::store_config(&config).unwrap();
            (sc.mapped_file_size_commit_log, sc.max_hash_slot_num)
        };
        let text = up_broker_properties(&data, 9876, 10911, 0);
        assert_eq!(sizes(&text).0, 1024 * 1024 * 1024, "{text}");
        assert_ne!(sizes(&text).1, UP_MAX_HASH_SLOT_NUM, "{text}");
        segment.set_len(UP_COMMIT_LOG_SEGMENT_BYTES).unwrap();
        let text = up_broker_properties(&data, 9876, 10911, 0);
        assert_eq!(
            sizes(&text),
            (UP_COMMIT_LOG_SEGMENT_BYTES, UP_MAX_HASH_SLOT_NUM)
        );
        let _ = std::fs::remove_dir_all(&data);
    }
}
