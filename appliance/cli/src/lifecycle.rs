//! Process lifecycle shared by every serving subcommand: logging, waiting for SIGINT or
//! SIGTERM, and the systemd watchdog thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::notify;

pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RINGMQ_LOG")
        // openraft narrates every vote and tick at info; the controller logs what an
        // operator needs (leader changes, elections) itself.
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,openraft=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Blocks SIGINT and SIGTERM in the calling thread. Call it before any other thread starts,
/// so every thread inherits the mask and only [`wait_for_signal`] ever sees those signals.
pub fn block_shutdown_signals() {
    // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise it, and
    // pthread_sigmask only changes this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Waits for SIGINT or SIGTERM (blocked earlier by [`block_shutdown_signals`]) and returns
/// its name.
pub fn wait_for_signal() -> &'static str {
    // SAFETY: as above; sigwait stores the delivered signal number in `signal`.
    let signal = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        let mut signal: libc::c_int = 0;
        libc::sigwait(&set, &mut signal);
        signal
    };
    if signal == libc::SIGINT {
        "SIGINT"
    } else {
        "SIGTERM"
    }
}

/// Asks [`wait_for_signal`] to return, as a SIGTERM would (the process sends itself one;
/// every thread blocks it, so only the waiting thread takes it).
pub fn request_shutdown() {
    // SAFETY: kill(2) on this process's own pid with a signal every thread blocks.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGTERM);
    }
}

/// Replaces this process with a fresh run of the same command line (same pid, so systemd
/// and anyone holding the pid keep following it). Returns only if that fails.
pub fn restart_in_place() {
    use std::os::unix::process::CommandExt;
    let mut args = std::env::args_os();
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            tracing::error!("cannot restart in place: {e}; start the broker again");
            return;
        }
    };
    let mut command = std::process::Command::new(exe);
    if let Some(arg0) = args.next() {
        command.arg0(arg0);
    }
    command.args(args);
    tracing::info!("restarting in place");
    let error = command.exec();
    tracing::error!("cannot restart in place: {error}; start the broker again");
}

/// Feeds the systemd watchdog while `healthy` says the serving cores still answer. A
/// stuck core therefore stops the pings and systemd restarts the service.
pub struct Watchdog {
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Watchdog {
    pub fn start(healthy: impl Fn() -> bool + Send + 'static) -> Watchdog {
        let stop = Arc::new(AtomicBool::new(false));
        let Some(interval) = notify::watchdog_interval() else {
            return Watchdog { stop, thread: None };
        };
        let flag = stop.clone();
        let thread = thread::Builder::new()
            .name("watchdog".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    if healthy() {
                        notify::notify("WATCHDOG=1");
                    } else {
                        tracing::warn!("health probe failed; withholding the watchdog ping");
                    }
                    sleep_unless(&flag, interval);
                }
            })
            .expect("spawning the watchdog thread");
        Watchdog {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Sleeps up to `total`, waking early (within 100 ms) once `stop` is set.
fn sleep_unless(stop: &AtomicBool, total: Duration) {
    let step = Duration::from_millis(100);
    let mut slept = Duration::ZERO;
    while slept < total && !stop.load(Ordering::Relaxed) {
        thread::sleep(step.min(total - slept));
        slept += step;
    }
}
