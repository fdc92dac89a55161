//! The `/metrics` endpoint: a tiny HTTP/1.1 server on one control thread (std::net, off the
//! network cores). It answers `GET /metrics` (and `HEAD`) with the exposition text, 404 for
//! other paths, 405 for other methods, one request per connection (`Connection: close`).
//! The same thread ticks the metrics sampler once a second (TPS windows, day roll-over), so
//! the broker needs no extra thread for it.
//!
//! Bounds: a request head above [`MAX_REQUEST_HEAD_BYTES`] is answered 431; a client gets
//! [`IO_TIMEOUT_MS`] to send its request and read the answer, so a stuck scraper cannot hold
//! the thread.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Largest request head (request line + headers) read from a scraper.
pub const MAX_REQUEST_HEAD_BYTES: usize = 8 * 1024;
/// Read/write timeout per scrape connection.
pub const IO_TIMEOUT_MS: u64 = 2_000;
/// How often the thread looks for a new connection or the stop flag; a scrape waits at most
/// this long to be accepted.
const POLL_MS: u64 = 20;
/// Sampler period (upstream samples its TPS windows every second too).
const SAMPLE_PERIOD_MS: u64 = 1_000;

/// Renders the page on each scrape.
pub type RenderFn = Box<dyn Fn() -> String + Send>;
/// Called once a second.
pub type TickFn = Box<dyn FnMut() + Send>;

/// The running control thread.
pub struct MetricsHttp {
    local_addr: Option<SocketAddr>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsHttp {
    /// Binds `bind` (None: sampler only, no listener) and starts the thread.
    pub fn start(
        bind: Option<SocketAddr>,
        render: RenderFn,
        mut tick: TickFn,
    ) -> io::Result<MetricsHttp> {
        let listener = match bind {
            Some(addr) => {
                let l = TcpListener::bind(addr)?;
                // Non-blocking accept so the same loop can tick the sampler and see `stop`.
                l.set_nonblocking(true)?;
                Some(l)
            }
            None => None,
        };
        let local_addr = listener.as_ref().map(|l| l.local_addr()).transpose()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("ringmq-metrics".into())
            .spawn(move || {
                let mut last_tick = Instant::now();
                tick();
                while !stop2.load(Ordering::Acquire) {
                    let mut served = false;
                    if let Some(l) = &listener {
                        match l.accept() {
                            Ok((stream, _)) => {
                                served = true;
                                if let Err(e) = serve(stream, &render) {
                                    tracing::debug!("metrics scrape failed: {e}");
                                }
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                            Err(e) => tracing::warn!("metrics endpoint accept failed: {e}"),
                        }
                    }
                    if last_tick.elapsed() >= Duration::from_millis(SAMPLE_PERIOD_MS) {
                        last_tick = Instant::now();
                        tick();
                    }
                    if !served {
                        std::thread::sleep(Duration::from_millis(POLL_MS));
                    }
                }
            })?;
        if let Some(addr) = local_addr {
            tracing::info!(%addr, "prometheus metrics endpoint listening (GET /metrics)");
        }
        Ok(MetricsHttp {
            local_addr,
            stop,
            thread: Some(thread),
        })
    }

    /// The bound address, when listening.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for MetricsHttp {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// The request's method and path, once the head is complete.
fn parse_head(head: &[u8]) -> Option<(&str, &str)> {
    let line_end = head.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&head[..line_end]).ok()?;
    let mut parts = line.split(' ');
    let method = parts.next()?;
    let target = parts.next()?;
    let version = parts.next()?;
    if !version.starts_with("HTTP/1.") {
        return None;
    }
    let path = target.split('?').next().unwrap_or(target);
    Some((method, path))
}

fn serve(mut stream: TcpStream, render: &RenderFn) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_millis(IO_TIMEOUT_MS)))?;
    stream.set_write_timeout(Some(Duration::from_millis(IO_TIMEOUT_MS)))?;
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    loop {
        if head.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
        if head.len() > MAX_REQUEST_HEAD_BYTES {
            return respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "",
                false,
            );
        }
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    match parse_head(&head) {
        None => respond(&mut stream, "400 Bad Request", "bad request\n", true),
        Some((method, path)) if method != "GET" && method != "HEAD" => {
            let _ = path;
            respond(&mut stream, "405 Method Not Allowed", "use GET\n", true)
        }
        Some((method, "/metrics")) => {
            let body = render();
            respond(&mut stream, "200 OK", &body, method == "GET")
        }
        Some(_) => respond(&mut stream, "404 Not Found", "try /metrics\n", true),
    }
}

fn respond(stream: &mut TcpStream, status: &str, body: &str, with_body: bool) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        super::text::CONTENT_TYPE,
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    if with_body {
        stream.write_all(body.as_bytes())?;
    }
    stream.flush()
}

/// A blocking `GET path` over loopback, for tests and the bench tooling: returns the status
/// line's code and the body.
pub fn http_get(addr: SocketAddr, path: &str) -> io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(IO_TIMEOUT_MS))?;
    s.set_read_timeout(Some(Duration::from_millis(IO_TIMEOUT_MS * 2)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let code = resp
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = resp
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((code, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn serves_metrics_404_405_and_ticks() {
        let ticks = Arc::new(AtomicU64::new(0));
        let t2 = ticks.clone();
        let http = MetricsHttp::start(
            Some("127.0.0.1:0".parse().unwrap()),
            Box::new(|| "up 1\n".to_string()),
            Box::new(move || {
                t2.fetch_add(1, Ordering::Relaxed);
            }),
        )
        .unwrap();
        let addr = http.local_addr().unwrap();
        let (code, body) = http_get(addr, "/metrics").unwrap();
        assert_eq!((code, body.as_str()), (200, "up 1\n"));
        assert_eq!(http_get(addr, "/metrics?x=1").unwrap().0, 200);
        assert_eq!(http_get(addr, "/nope").unwrap().0, 404);
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"POST /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut r = String::new();
        s.read_to_string(&mut r).unwrap();
        assert!(r.starts_with("HTTP/1.1 405"), "{r}");
        // The first tick runs at start.
        assert!(ticks.load(Ordering::Relaxed) >= 1);
        http.stop();
        assert!(TcpStream::connect(addr).is_err());
    }

    #[test]
    fn head_parsing() {
        assert_eq!(
            parse_head(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Some(("GET", "/metrics"))
        );
        assert_eq!(parse_head(b"GET /metrics\r\n\r\n"), None);
        assert_eq!(parse_head(b"garbage"), None);
    }
}
