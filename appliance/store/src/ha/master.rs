//! The master's HA stage (`ringmq-ha`): one pinned thread that accepts slaves on
//! `haListenPort` and serves every connection with poll(2) over non-blocking sockets. Per
//! slave it reads 8-byte max-offset reports (acks), picks the start position (a slave at 0
//! starts at the master's last segment), and streams published CommitLog bytes in frames
//! of at most `haTransferBatchSize`, never through a buffer: sendfile(2) from the segment
//! file in mmap mode; in direct mode from the write ring in place (pinned for the write)
//! or, for bytes already written, from the file; with heartbeats when idle, housekeeping
//! close of silent slaves and optional flow control. The append stage wakes it through
//! `HaState::doorbell` after each publish while slaves are connected.
//!
//! In controller mode the same stage speaks the auto-switch protocol (spec §g.3): a slave
//! first sends a handshake with its broker id and gets the epoch entries back; frames carry
//! a 36-byte header with the epoch, its start offset and the confirm offset, and never span
//! two epochs. The stage also keeps each slave's caught-up time and the confirm offset the
//! SyncStateSet members hold.

use super::autoswitch::{
    encode_handshake_reply, encode_transfer_header, SlaveMessage, SlaveStreamDecoder,
    TRANSFER_HEADER_BYTES,
};
use super::epoch::OPEN_END_OFFSET;
use super::protocol::{encode_frame_header, ReportDecoder, FRAME_HEADER_SIZE_BYTES};
use crate::commit_log::CommitLog;
use crate::mapped_file::OS_PAGE_SIZE;
use crate::shared::Shared;
use crate::types::HaSlaveStatus;
use ringmq_sync::LockExt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Most slaves served at once; more are refused with a log line.
const MAX_SLAVES: usize = 64;
/// Longest poll(2) sleep: bounds how late a stop request or a timer is seen.
const MAX_POLL_WAIT_MS: u64 = 500;
/// Bytes read from a slave per read call (reports are 8 bytes each), and most read calls
/// per wake-up, so a peer that floods the port cannot hold the stage.
const READ_CHUNK_BYTES: usize = 4096;
const MAX_READS_PER_WAKE: usize = 64;

/// Binds the HA listener and starts the stage. A master whose port is taken keeps serving
/// clients without replication (logged), rather than failing to start.
pub(crate) fn start(shared: &Arc<Shared>) -> Option<JoinHandle<()>> {
    let ip = shared.config.ha_bind_ip?;
    let addr = SocketAddr::new(ip, shared.config.ha_listen_port);
    let listener = match TcpListener::bind(addr).and_then(|l| {
        l.set_nonblocking(true)?;
        Ok(l)
    }) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(%addr, error = %e, "cannot listen on haListenPort; slaves cannot replicate from this master");
            return None;
        }
    };
    if let Ok(local) = listener.local_addr() {
        let _ = shared.ha.listen_addr.set(local);
        tracing::info!(addr = %local, "HA server listening");
    }
    let s = Arc::clone(shared);
    let spawned = std::thread::Builder::new()
        .name("ringmq-ha".into())
        .spawn(move || {
            crate::util::pin_current_thread(s.config.ha_core, "ha");
            crate::util::set_current_thread_nice(s.config.ha_thread_nice, "ha");
            MasterStage::new(s, listener).run();
        });
    match spawned {
        Ok(h) => Some(h),
        Err(e) => {
            tracing::error!(error = %e, "cannot start the HA stage");
            None
        }
    }
}

/// What a controller-mode slave said in its handshake.
#[derive(Debug, Clone, Copy)]
struct Handshake {
    broker_id: i64,
    async_learner: bool,
    sync_from_last_file: bool,
}

/// The auto-switch side of a connection (controller mode).
#[derive(Default)]
struct AutoSwitchConn {
    decoder: SlaveStreamDecoder,
    handshake: Option<Handshake>,
    /// The master's max offset when the last frame started: a report at or past it means
    /// the slave holds everything the master had then.
    max_when_sent: u64,
    caught_up_at_ms: i64,
}

/// One slave connection.
struct Conn {
    stream: TcpStream,
    addr: String,
    reports: ReportDecoder,
    /// Controller mode only.
    auto: Option<AutoSwitchConn>,
    /// Control bytes (the handshake reply) sent before the next frame.
    out: Vec<u8>,
    out_sent: usize,
    /// The offset the slave last reported holding (None before its first report).
    ack_offset: Option<u64>,
    /// Next CommitLog byte to send (set by the first report).
    next_offset: Option<u64>,
    /// Where the transfer to this slave started (`transferFromWhere`).
    transfer_from: u64,
    header: [u8; TRANSFER_HEADER_BYTES],
    header_len: usize,
    header_sent: usize,
    body_left: u64,
    last_read: Instant,
    last_write: Instant,
    /// Flow control: bytes sent in the second that began at `window_start`.
    window_start: Instant,
    window_bytes: u64,
    /// The socket refused bytes: wait for POLLOUT.
    want_write: bool,
}

impl Conn {
    fn new(stream: TcpStream, addr: SocketAddr, controller_mode: bool) -> Self {
        let now = Instant::now();
        Conn {
            stream,
            addr: addr.to_string(),
            reports: ReportDecoder::default(),
            auto: controller_mode.then(AutoSwitchConn::default),
            out: Vec::new(),
            out_sent: 0,
            ack_offset: None,
            next_offset: None,
            transfer_from: 0,
            header: [0; TRANSFER_HEADER_BYTES],
            header_len: 0,
            header_sent: 0,
            body_left: 0,
            last_read: now,
            last_write: now,
            window_start: now,
            window_bytes: 0,
            want_write: false,
        }
    }

    /// A classic frame, or an auto-switch one of `epoch` (start, confirm offset).
    fn start_frame(&mut self, offset: u64, len: u64, epoch: Option<(i32, i64, i64)>) {
        match epoch {
            None => {
                self.header[..FRAME_HEADER_SIZE_BYTES]
                    .copy_from_slice(&encode_frame_header(offset as i64, len as i32));
                self.header_len = FRAME_HEADER_SIZE_BYTES;
            }
            Some((epoch, epoch_start, confirm)) => {
                self.header =
                    encode_transfer_header(len as i32, offset as i64, epoch, epoch_start, confirm);
                self.header_len = TRANSFER_HEADER_BYTES;
            }
        }
        self.header_sent = 0;
        self.body_left = len;
    }

    fn handshake(&self) -> Option<Handshake> {
        self.auto.as_ref().and_then(|a| a.handshake)
    }
}

struct MasterStage {
    shared: Arc<Shared>,
    listener: TcpListener,
    conns: Vec<Conn>,
    heartbeat: Duration,
    housekeeping: Duration,
    batch_bytes: u64,
    /// Earliest deadline of a SYNC_MASTER put waiting for an ack.
    next_waiter_deadline: Option<Instant>,
}

impl MasterStage {
    fn new(shared: Arc<Shared>, listener: TcpListener) -> Self {
        let c = &shared.config;
        MasterStage {
            heartbeat: Duration::from_millis(c.ha_send_heartbeat_interval_ms.max(1)),
            housekeeping: Duration::from_millis(c.ha_housekeeping_interval_ms.max(1)),
            batch_bytes: (c.ha_transfer_batch_size_bytes as u64).clamp(1, i32::MAX as u64),
            conns: Vec::new(),
            next_waiter_deadline: None,
            listener,
            shared,
        }
    }

    fn run(mut self) {
        while !self.shared.ha.stop.load(Ordering::Acquire) {
            self.shared.ha.doorbell.begin_drain();
            self.serve_all();
            self.wait();
        }
        self.shared.ha.slaves_connected.store(0, Ordering::Release);
        self.shared.ha.slaves.lock_unpoisoned().clear();
        super::ack::complete_slave_waiters(&self.shared, true);
    }

    /// Sends what each connection may send now and closes the ones that failed.
    fn serve_all(&mut self) {
        self.next_waiter_deadline = super::ack::complete_slave_waiters(&self.shared, false);
        if self.shared.ha.is_slave() {
            // Controller mode demoted this store: its former slaves follow the new master.
            while !self.conns.is_empty() {
                self.close(0, "this broker is a slave now");
            }
        }
        let now = Instant::now();
        let mut i = 0;
        while i < self.conns.len() {
            let res = self.check_timers(i, now).and_then(|()| self.pump(i));
            match res {
                Ok(()) => i += 1,
                Err(why) => self.close(i, &why),
            }
        }
    }

    fn close(&mut self, i: usize, why: &str) {
        let c = self.conns.swap_remove(i);
        tracing::warn!(slave = c.addr, "HA connection closed: {why}");
        self.publish_status();
    }

    fn check_timers(&self, i: usize, now: Instant) -> Result<(), String> {
        let c = &self.conns[i];
        if now.saturating_duration_since(c.last_read) >= self.housekeeping {
            return Err(format!(
                "no report for {} ms (haHousekeepingInterval)",
                self.housekeeping.as_millis()
            ));
        }
        Ok(())
    }

    /// Sleeps in poll(2) on the listener, the doorbell and the connections until one is
    /// ready or the next timer is due; then accepts and reads.
    fn wait(&mut self) {
        let mut fds = Vec::with_capacity(self.conns.len() + 2);
        let fd = |fd: i32, events: i16| libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        fds.push(fd(self.listener.as_raw_fd(), libc::POLLIN));
        fds.push(fd(self.shared.ha.doorbell.as_raw_fd(), libc::POLLIN));
        for c in &self.conns {
            let ev = libc::POLLIN | if c.want_write { libc::POLLOUT } else { 0 };
            fds.push(fd(c.stream.as_raw_fd(), ev));
        }
        let timeout_ms = self.next_timer_ms();
        // SAFETY: `fds` is a live array of `fds.len()` pollfds for the whole call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if n <= 0 {
            return;
        }
        if fds[1].revents != 0 {
            self.shared.ha.doorbell.consume();
        }
        // Reads first (by index, before accepting changes the list); closing swaps, so go
        // from the back.
        for i in (0..self.conns.len()).rev() {
            let rev = fds[i + 2].revents;
            if rev & libc::POLLOUT != 0 {
                self.conns[i].want_write = false;
            }
            if rev & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                if let Err(why) = self.read_reports(i) {
                    self.close(i, &why);
                }
            }
        }
        if fds[0].revents != 0 {
            self.accept();
        }
    }

    fn next_timer_ms(&self) -> i32 {
        let now = Instant::now();
        let mut wait = Duration::from_millis(MAX_POLL_WAIT_MS);
        if let Some(d) = self.next_waiter_deadline {
            wait = wait.min(d.saturating_duration_since(now));
        }
        for c in &self.conns {
            if c.next_offset.is_some() && !c.want_write {
                wait = wait.min((c.last_write + self.heartbeat).saturating_duration_since(now));
            }
            if self.shared.config.ha_flow_control_enable {
                wait = wait.min(Duration::from_millis(10));
            }
        }
        wait.as_millis().max(1) as i32
    }

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, addr)) => {
                    if self.shared.ha.is_slave() {
                        tracing::warn!(slave = %addr, "HA connection refused: this broker is a slave now");
                        continue;
                    }
                    if self.conns.len() >= MAX_SLAVES {
                        tracing::warn!(slave = %addr, "HA connection refused: {MAX_SLAVES} slaves already connected");
                        continue;
                    }
                    if let Err(e) = stream.set_nonblocking(true) {
                        tracing::warn!(slave = %addr, error = %e, "HA connection refused");
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    tracing::info!(slave = %addr, "HA slave connected");
                    let controller_mode = self.shared.config.controller_mode;
                    self.conns.push(Conn::new(stream, addr, controller_mode));
                    self.publish_status();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "HA accept failed");
                    return;
                }
            }
        }
    }

    /// Reads the slave's reports (after its handshake, in controller mode); the newest
    /// report is its ack.
    fn read_reports(&mut self, i: usize) -> Result<(), String> {
        let mut buf = [0u8; READ_CHUNK_BYTES];
        let mut latest = None;
        let mut handshake = None;
        let c = &mut self.conns[i];
        for _ in 0..MAX_READS_PER_WAKE {
            match c.stream.read(&mut buf) {
                Ok(0) => return Err("closed by the slave".into()),
                Ok(n) => {
                    c.last_read = Instant::now();
                    match &mut c.auto {
                        None => latest = c.reports.feed(&buf[..n]).or(latest),
                        Some(a) => {
                            a.decoder.feed(&buf[..n]);
                            read_auto_messages(a, &mut handshake, &mut latest)?;
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("read failed: {e}")),
            }
        }
        if let Some(h) = handshake {
            self.on_handshake(i, h);
        }
        match latest {
            Some(r) => self.on_report(i, r),
            None => Ok(()),
        }
    }

    /// Answers a handshake with this master's max offset and epoch entries.
    fn on_handshake(&mut self, i: usize, h: Handshake) {
        let replicas = &self.shared.ha.replicas;
        let entries = replicas.epoch_entries();
        let max = self.shared.log.max_offset();
        let c = &mut self.conns[i];
        tracing::info!(
            slave = c.addr,
            broker_id = h.broker_id,
            async_learner = h.async_learner,
            epochs = entries.len(),
            "HA handshake"
        );
        c.out = encode_handshake_reply(max as i64, replicas.last_epoch(), &entries);
        c.out_sent = 0;
        if let Some(a) = &mut c.auto {
            a.handshake = Some(h);
        }
    }

    fn on_report(&mut self, i: usize, reported: i64) -> Result<(), String> {
        let log = &self.shared.log;
        let max = log.max_offset();
        if reported < 0 || reported as u64 > max {
            return Err(format!(
                "the slave reported offset {reported}, past this master's max offset {max} \
                 (a diverged slave or another master)"
            ));
        }
        let reported = reported as u64;
        let c = &mut self.conns[i];
        if c.next_offset.is_none() {
            let from_oldest = c.handshake().is_some_and(|h| !h.sync_from_last_file);
            let start = match reported {
                0 if from_oldest => log.min_offset(),
                0 => max - max % log.file_size(),
                r => r,
            };
            tracing::info!(slave = c.addr, reported, start, "HA transfer starts");
            c.next_offset = Some(start);
            c.transfer_from = start;
        }
        if let Some(prev) = c.ack_offset.filter(|prev| reported > *prev) {
            self.shared.ha.record_ack(prev);
        }
        c.ack_offset = Some(reported);
        if let Some(a) = &mut c.auto {
            if reported >= a.max_when_sent {
                a.caught_up_at_ms = ringmq_sync::now_ms();
            }
        }
        self.shared
            .ha
            .push_to_slave_max_offset
            .fetch_max(reported, Ordering::AcqRel);
        self.update_confirm_offset();
        self.publish_status();
        Ok(())
    }

    /// Controller mode: the confirm offset is the least offset the connected SyncStateSet
    /// members hold (this master's max when it is alone); while a member is not
    /// connected the previous value stands.
    fn update_confirm_offset(&self) {
        if !self.shared.config.controller_mode {
            return;
        }
        let replicas = &self.shared.ha.replicas;
        let local = replicas.local_broker_id.load(Ordering::Acquire);
        let mut confirm = self.shared.log.max_offset();
        for member in replicas.sync_state_set().members {
            if member == local {
                continue;
            }
            let held = self
                .conns
                .iter()
                .find(|c| c.handshake().is_some_and(|h| h.broker_id == member))
                .and_then(|c| c.ack_offset);
            match held {
                Some(ack) => confirm = confirm.min(ack),
                None => return,
            }
        }
        let before = replicas
            .confirm_offset
            .swap(confirm as i64, Ordering::AcqRel);
        if confirm as i64 > before {
            // Consumers may see more now (allAckInSyncStateSet bounds dispatch).
            self.shared.wake_reput();
        }
    }

    /// Refreshes the slaves' status the API reads.
    fn publish_status(&self) {
        let max = self.shared.log.max_offset();
        let gap = self.shared.config.ha_max_gap_not_in_sync_bytes;
        let slaves = self
            .conns
            .iter()
            .map(|c| {
                let ack = c.ack_offset.unwrap_or(0);
                HaSlaveStatus {
                    addr: c.addr.clone(),
                    ack_offset: ack as i64,
                    in_sync: c.ack_offset.is_some() && max.saturating_sub(ack) < gap,
                    transfer_from_where: c.transfer_from as i64,
                    broker_id: c.handshake().map(|h| h.broker_id),
                    async_learner: c.handshake().is_some_and(|h| h.async_learner),
                    caught_up_at_ms: c.auto.as_ref().map_or(0, |a| a.caught_up_at_ms),
                }
            })
            .collect();
        *self.shared.ha.slaves.lock_unpoisoned() = slaves;
        self.shared
            .ha
            .slaves_connected
            .store(self.conns.len(), Ordering::Release);
    }

    /// Sends frames to connection `i` until it is caught up, its socket is full or flow
    /// control stops it.
    fn pump(&mut self, i: usize) -> Result<(), String> {
        loop {
            let c = &mut self.conns[i];
            if c.want_write {
                return Ok(());
            }
            if c.out_sent < c.out.len() {
                match c.stream.write(&c.out[c.out_sent..]) {
                    Ok(n) => c.out_sent += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => c.want_write = true,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(format!("write failed: {e}")),
                }
                c.last_write = Instant::now();
                continue;
            }
            if c.header_sent < c.header_len {
                match c.stream.write(&c.header[c.header_sent..c.header_len]) {
                    Ok(n) => c.header_sent += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => c.want_write = true,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(format!("write failed: {e}")),
                }
                c.last_write = Instant::now();
                continue;
            }
            if c.body_left > 0 {
                self.send_body(i)?;
                continue;
            }
            if !self.next_frame(i)? {
                return Ok(());
            }
        }
    }

    /// Starts the next frame: CommitLog bytes not sent yet (within one segment, the batch
    /// size and flow control), or a heartbeat when idle long enough. False: nothing to send.
    fn next_frame(&mut self, i: usize) -> Result<bool, String> {
        let log = &self.shared.log;
        let max = log.max_offset();
        let epoch = self.frame_epoch(i, max)?;
        let now = Instant::now();
        let flow = self.shared.config.ha_flow_control_enable;
        let per_second = self.shared.config.max_ha_transfer_bytes_per_second.max(1);
        let batch = self.batch_bytes;
        let c = &mut self.conns[i];
        let Some(next) = c.next_offset else {
            return Ok(false);
        };
        if next < max {
            if next < log.min_offset() {
                return Err(format!(
                    "the slave needs offset {next}, below this master's min offset {}",
                    log.min_offset()
                ));
            }
            let mut len = batch.min(max - next).min(log.roll_next_file(next) - next);
            if let Some((_, _, _, epoch_end)) = epoch {
                len = len.min(epoch_end.saturating_sub(next));
            }
            if flow {
                if now.saturating_duration_since(c.window_start) >= Duration::from_secs(1) {
                    c.window_start = now;
                    c.window_bytes = 0;
                }
                len = len.min(per_second.saturating_sub(c.window_bytes));
                if len == 0 {
                    return Ok(false);
                }
                c.window_bytes += len;
            }
            if let Some(a) = &mut c.auto {
                a.max_when_sent = max;
            }
            c.start_frame(next, len, epoch.map(|(e, s, confirm, _)| (e, s, confirm)));
            return Ok(true);
        }
        if now.saturating_duration_since(c.last_write) >= self.heartbeat {
            c.start_frame(next, 0, epoch.map(|(e, s, confirm, _)| (e, s, confirm)));
            return Ok(true);
        }
        Ok(false)
    }

    /// Controller mode: (epoch, its start, the confirm offset, its end) for the frame
    /// about to start on connection `i`; None in classic mode or before the handshake
    /// and first report.
    fn frame_epoch(&self, i: usize, max: u64) -> Result<Option<(i32, i64, i64, u64)>, String> {
        let c = &self.conns[i];
        let (Some(_), Some(next)) = (c.handshake(), c.next_offset) else {
            return Ok(None);
        };
        let replicas = &self.shared.ha.replicas;
        let at = next.min(max);
        let entry = replicas.entry_for(at).ok_or_else(|| {
            format!("no epoch entry of this master covers offset {at}; the slave cannot be served")
        })?;
        let end = match entry.end_offset {
            OPEN_END_OFFSET => u64::MAX,
            e => e as u64,
        };
        // What this master lets consumers see bounds what the slave may show.
        let confirm = match self.shared.ha.replica_dispatch_bound(&self.shared.config) {
            Some(bound) => bound,
            None => max,
        };
        Ok(Some((entry.epoch, entry.start_offset, confirm as i64, end)))
    }

    /// Sends body bytes of the current frame from the CommitLog, never through a buffer of
    /// ours: mmap mode sends from the segment file (sendfile); direct mode sends bytes the
    /// write ring holds from the ring in place (pinned for the write) and older ones, which
    /// are in the file, with sendfile.
    fn send_body(&mut self, i: usize) -> Result<(), String> {
        let c = &mut self.conns[i];
        let Some(next) = c.next_offset else {
            return Err("frame without a position".into());
        };
        let fd = c.stream.as_raw_fd();
        let log = &self.shared.log;
        let sent = match log.ring() {
            None => sendfile_segment(log, fd, next, c.body_left),
            Some(ring) => match ring.send_pinned(fd, next, c.body_left as usize) {
                Some(sent) => sent,
                None => {
                    // Below floor_page(written): complete pages the flusher never rewrites.
                    let on_disk =
                        (ring.written() / OS_PAGE_SIZE * OS_PAGE_SIZE).saturating_sub(next);
                    if on_disk > 0 {
                        sendfile_segment(log, fd, next, c.body_left.min(on_disk))
                    } else {
                        // Only the partial page the log resumed in after a restart, which the
                        // ring never held in full: one copy through CommitLog::read.
                        let bytes = log
                            .read(next, c.body_left as usize)
                            .ok_or_else(|| format!("CommitLog bytes at {next} are not readable"))?;
                        c.stream.write(&bytes)
                    }
                }
            },
        };
        let c = &mut self.conns[i];
        match sent {
            Ok(0) => {
                return Err(format!(
                    "sending CommitLog bytes at {next} made no progress"
                ))
            }
            Ok(n) => {
                c.next_offset = Some(next + n as u64);
                c.body_left -= n as u64;
                c.last_write = Instant::now();
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => c.want_write = true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("sending CommitLog bytes at {next} failed: {e}")),
        }
        Ok(())
    }
}

/// sendfile(2) of up to `len` CommitLog bytes at `offset` (within one segment) to `fd`.
fn sendfile_segment(log: &CommitLog, fd: i32, offset: u64, len: u64) -> io::Result<usize> {
    let seg = log.segment_for(offset).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no CommitLog segment holds offset {offset}"),
        )
    })?;
    let mut file_off = (offset - seg.from_offset()) as libc::off_t;
    // SAFETY: both descriptors are open for the call (the segment's Arc is held and the
    // caller holds the stream); `file_off` is a live off_t sendfile updates.
    let n = unsafe { libc::sendfile(fd, seg.file().as_raw_fd(), &mut file_off, len as usize) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Takes the complete messages of a controller-mode slave: one handshake first, then
/// reports (the newest one wins).
fn read_auto_messages(
    a: &mut AutoSwitchConn,
    handshake: &mut Option<Handshake>,
    latest: &mut Option<i64>,
) -> Result<(), String> {
    while let Some(m) = a.decoder.next_message().map_err(|e| e.to_string())? {
        match m {
            SlaveMessage::Handshake {
                sync_from_last_file,
                async_learner,
                broker_id,
            } => {
                if a.handshake.is_some() || handshake.is_some() {
                    return Err("a second handshake on one connection".into());
                }
                *handshake = Some(Handshake {
                    broker_id,
                    async_learner,
                    sync_from_last_file,
                });
            }
            SlaveMessage::Report { max_offset } => {
                if a.handshake.is_none() && handshake.is_none() {
                    return Err("a report before the handshake".into());
                }
                *latest = Some(max_offset);
            }
        }
    }
    Ok(())
}
