//! `ringmq admin` / `mqadmin`: operator commands with Apache RocketMQ's names and flags.

use std::process::ExitCode;

pub fn main(args: &[String]) -> ExitCode {
    let _ = args;
    eprintln!("ringmq admin: being written");
    ExitCode::FAILURE
}
