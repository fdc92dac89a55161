//! The serving subcommands: `namesrv`, `broker` and `up`, with RocketMQ's CLI flags
//! (`-c` config file, `-n` namesrv address, `-p` print config and exit, `-m` print the
//! important config and exit), plus `bench`, which hands over to the client crate.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use bytes::BytesMut;
use ringmq_broker::{Broker, BrokerConfig};
use ringmq_namesrv::{Namesrv, NamesrvConfig};
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

fn load_namesrv_config(flags: &ServeFlags) -> Result<NamesrvConfig, String> {
    let text = read_config_text(flags.config_file.as_deref())?;
    let load = NamesrvConfig::load(&text).map_err(|e| {
        let file = flags
            .config_file
            .as_deref()
            .unwrap_or(Path::new("namesrv.conf"));
        format!("{} is not a valid properties file: {e}", file.display())
    })?;
    report_unknown_keys("namesrv.conf", &load.unknown_keys);
    for problem in &load.invalid_values {
        tracing::warn!("namesrv.conf: {problem}; keeping the default");
    }
    let mut config = load.config;
    if let Some(file) = &flags.config_file {
        // As mqnamesrv: UPDATE_NAMESRV_CONFIG writes back to the file given with -c.
        config.config_store_path = file.display().to_string();
    }
    Ok(config)
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
        NamesrvConfig::to_properties_text,
        |config| Namesrv::start(config).map_err(|e| format!("namesrv failed to start: {e}")),
        |namesrv| {
            let addr = namesrv.local_addr();
            println!("The Name Server boot success. serializeType=JSON, address {addr}");
            serve_until_signal(&[addr], || namesrv.shutdown());
        },
    )
}

pub fn broker(args: &[String]) -> ExitCode {
    serve_role(
        args,
        "broker",
        load_broker_config,
        BrokerConfig::to_properties_text,
        |config| Broker::start(config).map_err(|e| format!("broker failed to start: {e}")),
        |broker| {
            let addr = broker.local_addr();
            println!("The broker boot success. serializeType=JSON, address {addr}");
            serve_until_signal(&[addr], || broker.shutdown());
        },
    )
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
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--help" || arg == "-h" {
            println!(
                "usage: ringmq up [--data DIR] [--namesrv-port N] [--broker-port N] [--metrics-port N]\n\
                 Runs a NameServer (default 9876) and a broker (default 10911) in one process,\n\
                 with all data under DIR (default ./ringmq-data)."
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
            _ => Err(()),
        };
        if parsed.is_err() {
            return fail(format!(
                "up: bad option {arg:?}; options: --data DIR, --namesrv-port N, --broker-port N, \
                 --metrics-port N"
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
        "brokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerId=0\n\
         listenPort={broker_port}\nnamesrvAddr=127.0.0.1:{namesrv_port}\n\
         storePathRootDir={}\nautoCreateTopicEnable=true\nringmq.metricsPort={metrics_port}\n",
        data_dir.join("store").display()
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
    let broker = match Broker::start(broker_config) {
        Ok(b) => b,
        Err(e) => {
            namesrv.shutdown();
            return fail(format!("broker failed to start on port {broker_port}: {e}"));
        }
    };
    let (n_addr, b_addr) = (namesrv.local_addr(), broker.local_addr());
    println!("ringmq is up.");
    println!("  NameServer  {n_addr}   (clients: namesrvAddr=127.0.0.1:{namesrv_port})");
    println!("  Broker      {b_addr}   (cluster DefaultCluster, broker-a)");
    println!("  Data        {}", data_dir.display());
    println!("Stop with Ctrl-C (or SIGTERM); the broker flushes and checkpoints first.");
    serve_until_signal(&[n_addr, b_addr], || {
        broker.shutdown();
        namesrv.shutdown();
    });
    ExitCode::SUCCESS
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
    notify::notify("READY=1");
    let probe_addrs = addrs.to_vec();
    let watchdog = Watchdog::start(move || probe_addrs.iter().all(|a| probe(*a)));
    let signal = lifecycle::wait_for_signal();
    tracing::info!(signal, "shutting down");
    notify::notify("STOPPING=1");
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

/// `ringmq bench producer|consumer|e2e ...`; `args[0]` is the program name, as clap wants.
pub fn bench(args: &[String]) -> ExitCode {
    use clap::Parser;
    let bench_args = match ringmq_client::bench::BenchArgs::try_parse_from(args) {
        Ok(bench_args) => bench_args,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match ringmq_client::bench::run_bench(bench_args) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => fail(format!("bench failed: {e}")),
    }
}
