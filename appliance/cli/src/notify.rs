//! systemd readiness and watchdog notifications (`sd_notify` protocol): a datagram to the
//! socket named by `NOTIFY_SOCKET`. A process not started by systemd has no such variable
//! and every call is a no-op.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// Sends one notification line (`READY=1`, `WATCHDOG=1`, `STOPPING=1`, `STATUS=...`).
/// Returns whether a notify socket was configured and the send succeeded.
pub fn notify(state: &str) -> bool {
    let Ok(path) = std::env::var("NOTIFY_SOCKET") else {
        return false;
    };
    let Ok(socket) = UnixDatagram::unbound() else {
        return false;
    };
    let sent = if let Some(abstract_name) = path.strip_prefix('@') {
        send_abstract(&socket, abstract_name, state)
    } else {
        socket.send_to(state.as_bytes(), &path).is_ok()
    };
    if !sent {
        tracing::warn!(socket = %path, state, "could not notify systemd");
    }
    sent
}

fn send_abstract(socket: &UnixDatagram, name: &str, state: &str) -> bool {
    use std::os::linux::net::SocketAddrExt;
    match std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()) {
        Ok(addr) => socket.send_to_addr(state.as_bytes(), &addr).is_ok(),
        Err(_) => false,
    }
}

/// The watchdog period systemd asked for (`WATCHDOG_USEC`), if any. We ping at half of it.
pub fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if usec == 0 {
        return None;
    }
    Some(Duration::from_micros(usec / 2))
}
