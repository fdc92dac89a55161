//! The `ringmq` binary. Subcommands: `namesrv`, `broker`, `controller`, `up` (namesrv and
//! broker in one process), `admin`, `tune`, `bench`, `version`. Invoked through a link named
//! `mqnamesrv`, `mqbroker`, `mqcontroller` or `mqadmin` it behaves as that subcommand, so
//! RocketMQ operators keep their habits.

mod admin;
mod bench;
mod lifecycle;
mod notify;
mod serve;
mod tune;

use std::process::ExitCode;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str = "\
usage: ringmq <command> [options]

commands:
  up                     namesrv + broker in one process, data under ./ringmq-data
  namesrv [-c FILE] [-p] run a NameServer (as mqnamesrv)
  broker  [-c FILE] [-n ADDR] [-p] [-m]
                         run a broker (as mqbroker)
  controller [-c FILE] [-p]
                         run a 5.x controller (as mqcontroller; port 19876 or its peer address)
  admin   <command> ...   operator commands with mqadmin's names and flags (as mqadmin)
  bench   producer|consumer ...
                         load generator (see `ringmq bench --help`)
  tune    check|apply    compare kernel settings with kernel-tuning/ and fix drift
  version                print the version
";

fn main() -> ExitCode {
    lifecycle::init_logging();
    let mut args: Vec<String> = std::env::args().collect();
    let program = args.first().map(|a| program_name(a)).unwrap_or_default();
    let command = match program.as_str() {
        "mqnamesrv" => "namesrv".to_string(),
        "mqbroker" => "broker".to_string(),
        "mqcontroller" => "controller".to_string(),
        "mqadmin" => "admin".to_string(),
        _ => {
            if args.len() < 2 {
                eprint!("{USAGE}");
                return ExitCode::from(2);
            }
            args.remove(1)
        }
    };
    let rest = &args[1..];
    match command.as_str() {
        "namesrv" => serve::namesrv(rest),
        "broker" => serve::broker(rest),
        "controller" => serve::controller(rest),
        "up" => serve::up(rest),
        "tune" => tune::main(rest),
        "admin" => admin::main(rest),
        "bench" => bench::main(&args),
        "version" | "--version" | "-V" => {
            println!("ringmq {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        other => {
            eprintln!("ringmq: unknown command {other:?}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn program_name(arg0: &str) -> String {
    std::path::Path::new(arg0)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
