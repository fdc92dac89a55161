//! The slave's HA client (`ringmq-ha-client`): connects to the master's HA address
//! (`haMasterAddress` or the one the broker learns from the name server), reports its
//! CommitLog max offset at once and after every append (and every
//! `haSendHeartbeatInterval` when idle), and hands each frame's bytes to the append stage
//! (`AppendMsg::Replica`), which owns the CommitLog tail and writes them unchanged at the
//! same physical offset. Errors close the connection; it reconnects after 5 s.
//!
//! Frames are cut by size, not at record boundaries; the client holds a record's head
//! until its tail arrives and appends whole records only, so the CommitLog of a slave
//! always ends at a record boundary and a controller can make it master at any moment.
//!
//! In controller mode the client speaks the auto-switch protocol: a handshake with this
//! broker's id, the master's epoch entries back, the consistent point of both logs (a
//! slave that holds more than it shares with the master asks for a reopen that truncates,
//! see [`super::replicas`]), then 36-byte-header frames whose epochs it records and whose
//! confirm offset it keeps.

use super::autoswitch::{self, MasterMessage, MasterStreamDecoder};
use super::epoch::EpochCache;
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
        let addr = ha.master_addr.lock_unpoisoned().clone();
        let Some(addr) = addr.filter(|_| ha.replicas.reopen_request().is_none()) else {
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
    /// The head of a record whose tail has not arrived, and its physical offset.
    partial: Vec<u8>,
    partial_from: u64,
    /// Controller mode: the auto-switch stream, and whether its handshake is done.
    auto: Option<MasterStreamDecoder>,
    handshaken: bool,
    /// Controller mode: the confirm offset the master's last frame carried.
    master_confirm: i64,
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
            partial: Vec::new(),
            partial_from: 0,
            auto: shared
                .config
                .controller_mode
                .then(|| MasterStreamDecoder::new(max_body)),
            handshaken: false,
            master_confirm: 0,
        }
    }

    /// Reports, then receives and appends frames until an error, a stop or a new master
    /// address. Ok: ended on purpose.
    fn transfer(mut self) -> Result<(), String> {
        let ha = &self.shared.ha;
        let heartbeat = Duration::from_millis(self.shared.config.ha_send_heartbeat_interval_ms);
        let housekeeping = Duration::from_millis(self.shared.config.ha_housekeeping_interval_ms);
        match self.auto.is_some() {
            true => self.handshake()?,
            false => self.report()?,
        }
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
                    match self.auto.is_some() {
                        true => self.feed_auto(&buf[..n], &mut frames)?,
                        false => self
                            .decoder
                            .feed(&buf[..n], &mut frames)
                            .map_err(|e| format!("protocol error: {e}"))?,
                    }
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
            let may_report = self.auto.is_none() || self.handshaken;
            if may_report && (max > self.reported || self.last_report.elapsed() >= heartbeat) {
                self.report()?;
            }
        }
    }

    fn report(&mut self) -> Result<(), String> {
        let max = self.shared.log.max_offset();
        let sent = match self.auto.is_some() {
            true => self
                .stream
                .write_all(&autoswitch::encode_report(max as i64)),
            false => self.stream.write_all(&encode_report(max as i64)),
        };
        sent.map_err(|e| format!("report failed: {e}"))?;
        self.reported = max;
        self.last_report = Instant::now();
        Ok(())
    }

    /// Controller mode: introduces this slave (its broker id, where an empty log starts,
    /// whether it is a learner).
    fn handshake(&mut self) -> Result<(), String> {
        let c = &self.shared.config;
        let broker_id = self
            .shared
            .ha
            .replicas
            .local_broker_id
            .load(Ordering::Acquire);
        let hello = autoswitch::encode_handshake(c.sync_from_last_file, c.async_learner, broker_id);
        self.stream
            .write_all(&hello)
            .map_err(|e| format!("handshake failed: {e}"))
    }

    /// Controller mode: decodes the master's messages; frames go to `frames` once their
    /// epochs are recorded.
    fn feed_auto(&mut self, data: &[u8], frames: &mut Vec<Frame>) -> Result<(), String> {
        let Some(decoder) = self.auto.as_mut() else {
            return Ok(());
        };
        decoder.feed(data);
        let mut messages = Vec::new();
        while let Some(m) = decoder
            .next_message()
            .map_err(|e| format!("protocol error: {e}"))?
        {
            messages.push(m);
        }
        for m in messages {
            match m {
                MasterMessage::HandshakeReply {
                    max_offset,
                    entries,
                    ..
                } => {
                    if self.handshaken {
                        return Err("protocol error: a second handshake reply".into());
                    }
                    self.find_consistent_point(max_offset, entries)?;
                    self.handshaken = true;
                    self.report()?;
                }
                MasterMessage::Transfer {
                    offset,
                    epoch,
                    epoch_start_offset,
                    confirm_offset,
                    body,
                } => {
                    if !self.handshaken {
                        return Err("protocol error: data before the handshake reply".into());
                    }
                    let replicas = &self.shared.ha.replicas;
                    if !body.is_empty() && replicas.last_epoch() != epoch {
                        replicas.append_epoch(epoch, epoch_start_offset.max(0) as u64)?;
                    }
                    self.master_confirm = confirm_offset;
                    let held = self.shared.log.max_offset() as i64;
                    self.set_confirm(confirm_offset.min(held));
                    frames.push(Frame {
                        phy_offset: offset,
                        body,
                    });
                }
            }
        }
        Ok(())
    }

    /// Compares this slave's epochs with the master's: the log continues where both agree.
    /// A log that runs past that point asks for a reopen that truncates it there.
    fn find_consistent_point(
        &self,
        master_max: i64,
        entries: Vec<(i32, i64)>,
    ) -> Result<(), String> {
        let replicas = &self.shared.ha.replicas;
        let local_max = self.shared.log.max_offset();
        let mut local = replicas.epochs();
        if local.is_empty() {
            tracing::info!(
                local_max,
                "HA handshake: no local epochs; transfer starts at once"
            );
            return Ok(());
        }
        let mut master = EpochCache::from_entries(entries);
        master.set_last_end_offset(master_max);
        local.set_last_end_offset(local_max as i64);
        let point = local.find_consistent_point(&master).ok_or_else(|| {
            format!(
                "this slave's epochs {:?} share none with the master's {:?}",
                replicas.epoch_entries(),
                master
                    .entries()
                    .map(|e| (e.epoch, e.start_offset))
                    .collect::<Vec<_>>()
            )
        })?;
        let point = point.max(0) as u64;
        if point < local_max {
            let why = format!(
                "this slave's CommitLog ends at {local_max}, past the last offset it shares \
                 with the master ({point})"
            );
            let root = &self.shared.config.store_path_root_dir;
            replicas.request_reopen(root, point, why.clone())?;
            return Err(format!("{why}; the store must reopen to truncate there"));
        }
        replicas.truncate_epochs_from(point)?;
        tracing::info!(point, "HA handshake: consistent with the master");
        Ok(())
    }

    /// The whole records of `body` (received at `offset`) behind any held record head, and
    /// where they start; a trailing incomplete record is held for the next frame.
    fn whole_records(
        &mut self,
        offset: u64,
        body: Vec<u8>,
    ) -> Result<Option<(u64, Vec<u8>)>, String> {
        let (start, mut bytes) = match self.partial.is_empty() {
            true => (offset, body),
            false => {
                let mut held = std::mem::take(&mut self.partial);
                held.extend_from_slice(&body);
                (self.partial_from, held)
            }
        };
        let whole = whole_records_len(&bytes, self.shared.log.file_size())
            .map_err(|at| format!("malformed record at offset {}", start + at as u64))?;
        if whole < bytes.len() {
            self.partial = bytes.split_off(whole);
            self.partial_from = start + whole as u64;
        }
        Ok((whole > 0).then_some((start, bytes)))
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
            let expected = match self.partial.is_empty() {
                true => next,
                false => self.partial_from + self.partial.len() as u64,
            };
            if expected != 0 && offset != expected {
                return Err(format!(
                    "offset mismatch: the master sent bytes at {offset} but this slave's \
                     CommitLog ends at {expected}; the slave cannot attach until its data \
                     matches the master's"
                ));
            }
            let Some((offset, bytes)) = self.whole_records(offset, frame.body)? else {
                continue;
            };
            next = offset + bytes.len() as u64;
            let (reply, rx) = mpsc::sync_channel(1);
            let msg = AppendMsg::Replica {
                phy_offset: offset,
                bytes,
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
        if self.auto.is_some() {
            self.set_confirm(self.master_confirm.min(end as i64));
        }
        Ok(())
    }

    /// Controller mode: what the master confirmed (and this slave holds) becomes visible.
    fn set_confirm(&self, confirm: i64) {
        let replicas = &self.shared.ha.replicas;
        let before = replicas.confirm_offset.swap(confirm, Ordering::AcqRel);
        if confirm > before {
            self.shared.wake_reput();
        }
    }
}

/// How many leading bytes of `bytes` (which start at a record boundary) are whole
/// CommitLog records; `Err(position)` when a record's TOTALSIZE cannot be one (a BLANK
/// filler is at least 8 bytes, and no record exceeds a segment).
fn whole_records_len(bytes: &[u8], segment_size_bytes: u64) -> Result<usize, usize> {
    const MIN_RECORD_BYTES: u64 = 8;
    let mut at = 0usize;
    while let Some(head) = bytes.get(at..at + 4) {
        let size = i32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        let size = u64::try_from(size).map_err(|_| at)?;
        if !(MIN_RECORD_BYTES..=segment_size_bytes).contains(&size) {
            return Err(at);
        }
        if ((bytes.len() - at) as u64) < size {
            break;
        }
        at += size as usize;
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::whole_records_len;

    fn record(size: u32) -> Vec<u8> {
        let mut r = size.to_be_bytes().to_vec();
        r.resize(size as usize, 7);
        r
    }

    #[test]
    fn only_whole_records_count() {
        let mut bytes = record(100);
        bytes.extend(record(50));
        assert_eq!(whole_records_len(&bytes, 1 << 20), Ok(150));
        assert_eq!(whole_records_len(&bytes[..149], 1 << 20), Ok(100));
        assert_eq!(
            whole_records_len(&bytes[..102], 1 << 20),
            Ok(100),
            "a torn size field waits"
        );
        assert_eq!(whole_records_len(&[], 1 << 20), Ok(0));
    }

    #[test]
    fn impossible_sizes_are_refused_where_they_start() {
        let mut bytes = record(100);
        bytes.extend([0, 0, 0, 3, 1, 1, 1, 1]);
        assert_eq!(whole_records_len(&bytes, 1 << 20), Err(100));
        assert_eq!(
            whole_records_len(&record(4096), 1024),
            Err(0),
            "larger than a segment"
        );
        assert_eq!(
            whole_records_len(&[0xff, 0, 0, 0], 1 << 20),
            Err(0),
            "negative"
        );
    }
}
