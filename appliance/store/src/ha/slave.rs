//! The slave's HA client (`ringmq-ha-client`): connects to the master's HA address
//! (`haMasterAddress` or the one the broker learns from the name server), reports its
//! CommitLog max offset at once and after every append (and every
//! `haSendHeartbeatInterval` when idle), and hands each frame's bytes to the append stage
//! (`AppendMsg::Replica`), which owns the CommitLog tail and writes them unchanged at the
//! same physical offset. Errors close the connection; it reconnects after 5 s.

use super::protocol::{encode_report, Frame, FrameDecoder};
use crate::shared::Shared;
use crate::stage_msg::AppendMsg;
use ringmq_sync::LockExt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Wait before reconnecting after an error (upstream: 5 s).
const RECONNECT_WAIT_MS: u64 = 5000;
/// Longest a blocking read or connect waits before the loop looks at stop/address changes.
const READ_TICK_MS: u64 = 100;
const CONNECT_TIMEOUT_MS: u64 = 3000;
/// Longest the append stage may take to write one frame.
const APPEND_REPLY_TIMEOUT_MS: u64 = 30_000;
/// Bytes read from the master per read call.
const READ_CHUNK_BYTES: usize = 256 * 1024;

/// Starts the client thread (slaves only).
pub(crate) fn start(shared: &Arc<Shared>, put_tx: SyncSender<AppendMsg>) -> Option<JoinHandle<()>> {
    let s = Arc::clone(shared);
    let spawned = std::thread::Builder::new()
        .name("ringmq-ha-client".into())
        .spawn(move || {
            crate::util::pin_current_thread(s.config.ha_core, "ha-client");
            crate::util::set_current_thread_nice(s.config.ha_thread_nice, "ha-client");
            run(&s, &put_tx)
        });
    match spawned {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::error!(error = %e, "cannot start the HA client");
            None
        }
    }
}

fn run(shared: &Shared, put_tx: &SyncSender<AppendMsg>) {
    let ha = &shared.ha;
    while !ha.stop.load(Ordering::Acquire) {
        let generation = ha.master_addr_generation.load(Ordering::Acquire);
        let Some(addr) = ha.master_addr.lock_unpoisoned().clone() else {
            pause(shared, READ_TICK_MS, generation);
            continue;
        };
        let outcome = connect(&addr).and_then(|stream| {
            ha.connected_to_master.store(true, Ordering::Release);
            tracing::info!(master = addr, "HA client connected");
            Link::new(shared, put_tx, stream, generation).transfer()
        });
        ha.connected_to_master.store(false, Ordering::Release);
        match outcome {
            Ok(()) => tracing::info!(master = addr, "HA client disconnected"),
            Err(why) => {
                tracing::warn!(master = addr, "HA connection to the master closed: {why}");
                pause(shared, RECONNECT_WAIT_MS, generation);
            }
        }
    }
}

/// Sleeps up to `ms`, waking early on stop or a new master address.
fn pause(shared: &Shared, ms: u64, generation: u64) {
    let deadline = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < deadline
        && !shared.ha.stop.load(Ordering::Acquire)
        && shared.ha.master_addr_generation.load(Ordering::Acquire) == generation
    {
        std::thread::sleep(Duration::from_millis(READ_TICK_MS.min(ms)));
    }
}

fn connect(addr: &str) -> Result<TcpStream, String> {
    let target: SocketAddr = addr
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("{addr} resolves to no address"))?;
    let stream = TcpStream::connect_timeout(&target, Duration::from_millis(CONNECT_TIMEOUT_MS))
        .map_err(|e| format!("connect failed: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_millis(READ_TICK_MS)))
        .and_then(|()| stream.set_write_timeout(Some(Duration::from_millis(CONNECT_TIMEOUT_MS))))
        .map_err(|e| format!("socket setup failed: {e}"))?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// One connection to the master.
struct Link<'a> {
    shared: &'a Shared,
    put_tx: &'a SyncSender<AppendMsg>,
    stream: TcpStream,
    generation: u64,
    decoder: FrameDecoder,
    reported: u64,
    last_read: Instant,
    last_report: Instant,
}

impl<'a> Link<'a> {
    fn new(
        shared: &'a Shared,
        put_tx: &'a SyncSender<AppendMsg>,
        stream: TcpStream,
        generation: u64,
    ) -> Self {
        // A frame body never exceeds a segment: the master cuts frames at segment ends.
        let max_body = shared.log.file_size().min(i32::MAX as u64) as usize;
        Link {
            shared,
            put_tx,
            stream,
            generation,
            decoder: FrameDecoder::new(max_body),
            reported: 0,
            last_read: Instant::now(),
            last_report: Instant::now(),
        }
    }

    /// Reports, then receives and appends frames until an error, a stop or a new master
    /// address. Ok: ended on purpose.
    fn transfer(mut self) -> Result<(), String> {
        let ha = &self.shared.ha;
        let heartbeat = Duration::from_millis(self.shared.config.ha_send_heartbeat_interval_ms);
        let housekeeping = Duration::from_millis(self.shared.config.ha_housekeeping_interval_ms);
        self.report()?;
        let mut buf = vec![0u8; READ_CHUNK_BYTES];
        let mut frames = Vec::new();
        loop {
            if ha.stop.load(Ordering::Acquire)
                || ha.master_addr_generation.load(Ordering::Acquire) != self.generation
            {
                return Ok(());
            }
            match self.stream.read(&mut buf) {
                Ok(0) => return Err("closed by the master".into()),
                Ok(n) => {
                    self.last_read = Instant::now();
                    self.decoder
                        .feed(&buf[..n], &mut frames)
                        .map_err(|e| format!("protocol error: {e}"))?;
                    self.apply(&mut frames)?;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(format!("read failed: {e}")),
            }
            if self.last_read.elapsed() >= housekeeping {
                return Err(format!(
                    "nothing from the master for {} ms (haHousekeepingInterval)",
                    housekeeping.as_millis()
                ));
            }
            let max = self.shared.log.max_offset();
            if max > self.reported || self.last_report.elapsed() >= heartbeat {
                self.report()?;
            }
        }
    }

    fn report(&mut self) -> Result<(), String> {
        let max = self.shared.log.max_offset();
        self.stream
            .write_all(&encode_report(max as i64))
            .map_err(|e| format!("report failed: {e}"))?;
        self.reported = max;
        self.last_report = Instant::now();
        Ok(())
    }

    /// Appends the frames of one read at their offsets through the append stage: every
    /// frame is queued before the first answer is awaited, with one doorbell, and one
    /// report follows. Waiting per frame would cost a thread hop and a report per 32 KiB.
    fn apply(&mut self, frames: &mut Vec<Frame>) -> Result<(), String> {
        let mut answers = Vec::with_capacity(frames.len());
        let mut next = self.shared.log.max_offset();
        for frame in frames.drain(..) {
            if frame.body.is_empty() {
                continue;
            }
            let offset = frame.phy_offset as u64;
            if next != 0 && offset != next {
                return Err(format!(
                    "offset mismatch: the master sent bytes at {offset} but this slave's \
                     CommitLog ends at {next}; the slave cannot attach until its data matches \
                     the master's"
                ));
            }
            next = offset + frame.body.len() as u64;
            let (reply, rx) = mpsc::sync_channel(1);
            let msg = AppendMsg::Replica {
                phy_offset: offset,
                bytes: frame.body,
                reply,
            };
            // A full queue must not wait on a stage that was never woken.
            match self.put_tx.try_send(msg) {
                Ok(()) => {}
                Err(mpsc::TrySendError::Full(msg)) => {
                    self.shared.append_doorbell.notify();
                    self.put_tx
                        .send(msg)
                        .map_err(|_| "the append stage is gone".to_string())?;
                }
                Err(mpsc::TrySendError::Disconnected(_)) => {
                    return Err("the append stage is gone".to_string())
                }
            }
            answers.push(rx);
        }
        if answers.is_empty() {
            return Ok(());
        }
        self.shared.append_doorbell.notify();
        let mut end = 0;
        for rx in answers {
            end = rx
                .recv_timeout(Duration::from_millis(APPEND_REPLY_TIMEOUT_MS))
                .map_err(|_| "the append stage did not answer".to_string())?
                .map_err(|e| format!("append refused: {e}"))?;
        }
        if end > self.reported {
            self.report()?;
        }
        Ok(())
    }
}
