//! Per-thread perf-event counters (`perf_event_open(2)`): software events (task clock,
//! context switches, CPU migrations, page faults) and, when the machine exposes a PMU,
//! hardware CPU cycles and instructions, counted for the calling thread only. The append
//! stage reads them before and after each batch's critical section, so the store can say
//! how many context switches and page faults happen *inside* the section whose time the
//! lock-hold histogram records.
//!
//! Counters that cannot be opened (no PMU in a VM: ENOENT; `perf_event_paranoid` or a
//! seccomp filter: EACCES/EPERM/ENOSYS; EOPNOTSUPP, ENODEV, EINVAL) are "unavailable": the
//! reason is logged once when the thread opens its counters and the store carries on.
//!
//! Counters are read with one `read(2)` per group (software events form one group,
//! hardware events another, so a multiplexed PMU never stops the software counts), into
//! a fixed-size stack buffer: no allocation per read.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The counters this module knows, in the order used by [`CounterValues`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterKind {
    /// Software: nanoseconds the thread ran on a CPU.
    TaskClock = 0,
    /// Software: times the thread was switched out (voluntarily or preempted).
    ContextSwitches = 1,
    /// Software: times the thread moved to another CPU.
    CpuMigrations = 2,
    /// Software: minor + major page faults taken by the thread.
    PageFaults = 3,
    /// Hardware: CPU cycles (scaled when the PMU multiplexes).
    CpuCycles = 4,
    /// Hardware: retired instructions (scaled when the PMU multiplexes).
    Instructions = 5,
}

/// Number of [`CounterKind`]s.
pub const COUNTER_KINDS: usize = 6;

impl CounterKind {
    pub const ALL: [CounterKind; COUNTER_KINDS] = [
        CounterKind::TaskClock,
        CounterKind::ContextSwitches,
        CounterKind::CpuMigrations,
        CounterKind::PageFaults,
        CounterKind::CpuCycles,
        CounterKind::Instructions,
    ];

    /// Name in logs and metric names (`ringmq_append_<name>_total`); carries the unit.
    pub fn name(self) -> &'static str {
        match self {
            CounterKind::TaskClock => "task_clock_ns",
            CounterKind::ContextSwitches => "context_switches",
            CounterKind::CpuMigrations => "cpu_migrations",
            CounterKind::PageFaults => "page_faults",
            CounterKind::CpuCycles => "cpu_cycles",
            CounterKind::Instructions => "instructions",
        }
    }

    fn is_hardware(self) -> bool {
        matches!(self, CounterKind::CpuCycles | CounterKind::Instructions)
    }

    /// `(perf_event_attr.type, .config)` from `include/uapi/linux/perf_event.h`.
    fn type_and_config(self) -> (u32, u64) {
        match self {
            CounterKind::TaskClock => (PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK),
            CounterKind::ContextSwitches => (PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES),
            CounterKind::CpuMigrations => (PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS),
            CounterKind::PageFaults => (PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS),
            CounterKind::CpuCycles => (PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES),
            CounterKind::Instructions => (PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS),
        }
    }
}

// `include/uapi/linux/perf_event.h`.
const PERF_TYPE_HARDWARE: u32 = 0;
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
const PERF_COUNT_HW_INSTRUCTIONS: u64 = 1;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
const PERF_COUNT_SW_PAGE_FAULTS: u64 = 2;
const PERF_COUNT_SW_CONTEXT_SWITCHES: u64 = 3;
const PERF_COUNT_SW_CPU_MIGRATIONS: u64 = 4;
const PERF_FORMAT_TOTAL_TIME_ENABLED: u64 = 1 << 0;
const PERF_FORMAT_TOTAL_TIME_RUNNING: u64 = 1 << 1;
const PERF_FORMAT_GROUP: u64 = 1 << 3;
/// `perf_event_attr` flag bits (the C bitfield starting at `disabled`).
const ATTR_FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const ATTR_FLAG_EXCLUDE_HV: u64 = 1 << 6;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
/// `PERF_ATTR_SIZE_VER8`: the layout below, through `config3`.
const PERF_ATTR_SIZE_VER8: u32 = 136;

/// `struct perf_event_attr` as laid out by the kernel's uapi header (through
/// `PERF_ATTR_SIZE_VER8`). Unions are represented by their first member; the C bitfield
/// after `read_format` is the `flags` word.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved_2: u16,
    aux_sample_size: u32,
    reserved_3: u32,
    sig_data: u64,
    config3: u64,
}

const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == PERF_ATTR_SIZE_VER8 as usize);

/// Sleep after opening that makes the thread reschedule, so its counters are live.
const SETTLE_SLEEP_US: u64 = 50;

/// Most counters in one group (all software kinds).
const MAX_GROUP: usize = 4;
/// A group read: `nr`, `time_enabled`, `time_running`, then one value per member.
const GROUP_READ_WORDS: usize = 3 + MAX_GROUP;

/// One value per [`CounterKind`] (index = `kind as usize`); unavailable kinds stay 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CounterValues(pub [u64; COUNTER_KINDS]);

impl CounterValues {
    pub fn get(&self, kind: CounterKind) -> u64 {
        self.0[kind as usize]
    }
}

/// Counters that share one `read(2)`.
#[derive(Debug)]
struct Group {
    leader: OwnedFd,
    /// Kept open: closing a member removes it from the group.
    _members: Vec<OwnedFd>,
    kinds: [CounterKind; MAX_GROUP],
    len: usize,
}

impl Group {
    /// Reads every member into `out` (scaled by enabled/running time when multiplexed).
    fn read_into(&self, out: &mut CounterValues) -> std::io::Result<()> {
        let mut buf = [0u64; GROUP_READ_WORDS];
        let want = (3 + self.len) * std::mem::size_of::<u64>();
        // SAFETY: `buf` is a live stack array of GROUP_READ_WORDS u64s and `want` never
        // exceeds its size in bytes (len <= MAX_GROUP); the kernel writes at most `want` bytes.
        let n = unsafe {
            libc::read(
                self.leader.as_raw_fd(),
                buf.as_mut_ptr().cast::<libc::c_void>(),
                want,
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if n as usize != want || buf[0] as usize != self.len {
            return Err(std::io::Error::other(format!(
                "perf group read returned {n} bytes for {} counters (nr {})",
                self.len, buf[0]
            )));
        }
        let (enabled, running) = (buf[1], buf[2]);
        for (i, kind) in self.kinds[..self.len].iter().enumerate() {
            let raw = buf[3 + i];
            out.0[*kind as usize] = if running > 0 && running < enabled {
                (u128::from(raw) * u128::from(enabled) / u128::from(running)) as u64
            } else {
                raw
            };
        }
        Ok(())
    }
}

/// Why a counter is not counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    pub errno: i32,
    pub reason: String,
}

/// The calling thread's counters. Open on the thread to be measured; read from it too.
#[derive(Debug)]
pub struct ThreadCounters {
    software: Option<Group>,
    hardware: Option<Group>,
    unavailable: [Option<Unavailable>; COUNTER_KINDS],
}

/// `perf_event_open(attr, pid 0 (this thread), cpu -1 (any), group_fd, CLOEXEC)`.
fn open_counter(kind: CounterKind, group_fd: i32, user_only: bool) -> Result<OwnedFd, i32> {
    let (type_, config) = kind.type_and_config();
    let mut flags = 0;
    if user_only {
        flags |= ATTR_FLAG_EXCLUDE_KERNEL | ATTR_FLAG_EXCLUDE_HV;
    }
    let attr = PerfEventAttr {
        type_,
        size: PERF_ATTR_SIZE_VER8,
        config,
        read_format: PERF_FORMAT_GROUP
            | PERF_FORMAT_TOTAL_TIME_ENABLED
            | PERF_FORMAT_TOTAL_TIME_RUNNING,
        flags,
        ..PerfEventAttr::default()
    };
    // SAFETY: `attr` is a fully initialised PerfEventAttr whose `size` matches its layout;
    // the kernel only reads it during the call. pid 0 / cpu -1 / a valid or -1 group fd are
    // the documented arguments; the return value is checked before use.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            0 as libc::pid_t,
            -1 as libc::c_int,
            group_fd as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    // SAFETY: the syscall returned a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn describe(errno: i32) -> String {
    let what = match errno {
        libc::ENOENT => "the kernel has no such event here (no PMU exposed to this VM?)",
        libc::EOPNOTSUPP => "not supported by this CPU or kernel",
        libc::EACCES | libc::EPERM => {
            "not permitted (kernel.perf_event_paranoid, missing CAP_PERFMON, or a seccomp filter)"
        }
        libc::ENOSYS => "perf_event_open is not available (kernel config or seccomp filter)",
        libc::ENODEV => "no device provides this event",
        libc::EINVAL => "rejected by the kernel as invalid",
        libc::EMFILE | libc::ENFILE => "out of file descriptors",
        _ => "perf_event_open failed",
    };
    format!("{what} ({})", std::io::Error::from_raw_os_error(errno))
}

/// Opens `kinds` as one group; kinds that fail are recorded in `unavailable`.
fn open_group(
    kinds: &[CounterKind],
    unavailable: &mut [Option<Unavailable>; COUNTER_KINDS],
) -> Option<Group> {
    debug_assert!(kinds.len() <= MAX_GROUP);
    let mut leader: Option<OwnedFd> = None;
    let mut members = Vec::with_capacity(kinds.len());
    let mut in_group = [CounterKind::TaskClock; MAX_GROUP];
    let mut len = 0;
    for &kind in kinds {
        let group_fd = leader.as_ref().map_or(-1, |l| l.as_raw_fd());
        let mut res = open_counter(kind, group_fd, false);
        // Under perf_event_paranoid >= 2 an unprivileged thread may still count its own
        // user-space page faults, cycles and instructions. Context switches, migrations and
        // the task clock happen in the kernel, where a user-only count would be a bogus 0.
        if matches!(res, Err(libc::EACCES | libc::EPERM))
            && matches!(
                kind,
                CounterKind::PageFaults | CounterKind::CpuCycles | CounterKind::Instructions
            )
        {
            res = open_counter(kind, group_fd, true);
            if res.is_ok() {
                tracing::info!(
                    counter = kind.name(),
                    "perf counter restricted to user space (perf_event_paranoid)"
                );
            }
        }
        match res {
            Ok(fd) => {
                if leader.is_none() {
                    leader = Some(fd);
                } else {
                    members.push(fd);
                }
                in_group[len] = kind;
                len += 1;
            }
            Err(errno) => {
                unavailable[kind as usize] = Some(Unavailable {
                    errno,
                    reason: describe(errno),
                })
            }
        }
    }
    leader.map(|leader| Group {
        leader,
        _members: members,
        kinds: in_group,
        len,
    })
}

impl ThreadCounters {
    /// Opens every counter for the calling thread (counting starts now) and logs, once,
    /// the ones that are unavailable and why. Never fails: with nothing available,
    /// [`read`](Self::read) simply reports nothing.
    pub fn open_for_current_thread(stage: &str) -> Self {
        let mut unavailable: [Option<Unavailable>; COUNTER_KINDS] = Default::default();
        let sw: Vec<CounterKind> = CounterKind::ALL
            .into_iter()
            .filter(|k| !k.is_hardware())
            .collect();
        let hw: Vec<CounterKind> = CounterKind::ALL
            .into_iter()
            .filter(|k| k.is_hardware())
            .collect();
        let software = open_group(&sw, &mut unavailable);
        let hardware = open_group(&hw, &mut unavailable);
        if software.is_some() || hardware.is_some() {
            // Events opened for the running thread may only start counting when it is next
            // scheduled in (seen on Linux 6.18: page faults and context switches stayed 0
            // until the thread had slept once). A short sleep is a reschedule.
            std::thread::sleep(std::time::Duration::from_micros(SETTLE_SLEEP_US));
        }
        let c = ThreadCounters {
            software,
            hardware,
            unavailable,
        };
        for kind in CounterKind::ALL {
            if let Some(u) = c.unavailable(kind) {
                tracing::info!(
                    stage,
                    counter = kind.name(),
                    reason = %u.reason,
                    "perf counter unavailable; not counted"
                );
            }
        }
        c
    }

    /// Whether `kind` is being counted.
    pub fn is_available(&self, kind: CounterKind) -> bool {
        self.unavailable[kind as usize].is_none()
    }

    /// Why `kind` is not counted (None when it is).
    pub fn unavailable(&self, kind: CounterKind) -> Option<&Unavailable> {
        self.unavailable[kind as usize].as_ref()
    }

    /// Bit `kind as usize` set for every available kind.
    pub fn available_mask(&self) -> u32 {
        CounterKind::ALL
            .into_iter()
            .filter(|k| self.is_available(*k))
            .fold(0, |m, k| m | 1 << k as u32)
    }

    /// Current values of the available counters (one `read(2)` per group). Err only if the
    /// kernel refuses a read of an open counter, which it does not in practice.
    pub fn read(&self, out: &mut CounterValues) -> std::io::Result<()> {
        if let Some(g) = &self.software {
            g.read_into(out)?;
        }
        if let Some(g) = &self.hardware {
            g.read_into(out)?;
        }
        Ok(())
    }
}

/// Totals of per-batch deltas, shared between the append stage (adds) and metrics readers.
#[derive(Debug, Default)]
pub struct CounterAccumulator {
    /// Batches whose deltas were added.
    batches: AtomicU64,
    /// Availability bits as in [`ThreadCounters::available_mask`]; 0 until the stage opened.
    available_mask: AtomicU32,
    totals: [AtomicU64; COUNTER_KINDS],
}

impl CounterAccumulator {
    pub fn set_available_mask(&self, mask: u32) {
        self.available_mask.store(mask, Ordering::Release);
    }

    /// Adds `after - before` of every counter (a counter never goes backwards; a wrapped or
    /// reset one adds 0 instead of garbage).
    pub fn add_delta(&self, before: &CounterValues, after: &CounterValues) {
        for i in 0..COUNTER_KINDS {
            let d = after.0[i].saturating_sub(before.0[i]);
            if d > 0 {
                self.totals[i].fetch_add(d, Ordering::Relaxed);
            }
        }
        self.batches.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> CounterTotals {
        let mask = self.available_mask.load(Ordering::Acquire);
        let mut values = [None; COUNTER_KINDS];
        for (i, v) in values.iter_mut().enumerate() {
            if mask & (1 << i) != 0 {
                *v = Some(self.totals[i].load(Ordering::Relaxed));
            }
        }
        CounterTotals {
            batches: self.batches.load(Ordering::Relaxed),
            values,
        }
    }
}

/// Perf counters summed over the append stage's critical sections since the store opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CounterTotals {
    /// Batches measured.
    pub batches: u64,
    /// Per [`CounterKind`]; None when the counter is unavailable on this machine.
    pub values: [Option<u64>; COUNTER_KINDS],
}

impl CounterTotals {
    pub fn get(&self, kind: CounterKind) -> Option<u64> {
        self.values[kind as usize]
    }

    /// `name=value` for every available counter, e.g. for a benchmark line.
    pub fn summary(&self) -> String {
        let mut s = format!("batches={}", self.batches);
        for kind in CounterKind::ALL {
            if let Some(v) = self.get(kind) {
                s.push_str(&format!(" {}={v}", kind.name()));
            }
        }
        s
    }
}

/// A stage's per-batch sampling: every `every`-th batch (the first included) is bracketed by
/// two reads and its deltas go to a [`CounterAccumulator`]. One read costs about a
/// microsecond in a VM (`examples/perf_read_cost.rs`), as long as a short critical section,
/// so a stage running many small batches samples rather than reading around each one.
#[derive(Debug)]
pub struct BatchSampler {
    counters: Option<ThreadCounters>,
    every: u64,
    seq: u64,
    before: CounterValues,
    after: CounterValues,
    in_sample: bool,
}

impl BatchSampler {
    /// Opens the calling thread's counters unless `every` is 0 (sampling off) and publishes
    /// their availability to `acc`. With no counter available nothing is ever read.
    pub fn open(stage: &str, every: u32, acc: &CounterAccumulator) -> Self {
        let counters = (every > 0)
            .then(|| ThreadCounters::open_for_current_thread(stage))
            .filter(|c| c.available_mask() != 0);
        if let Some(c) = &counters {
            acc.set_available_mask(c.available_mask());
        }
        BatchSampler {
            counters,
            every: u64::from(every.max(1)),
            seq: 0,
            before: CounterValues::default(),
            after: CounterValues::default(),
            in_sample: false,
        }
    }

    /// Call right before a batch's critical section.
    pub fn begin(&mut self) {
        let due = self.seq.is_multiple_of(self.every);
        self.seq = self.seq.wrapping_add(1);
        self.in_sample = match &self.counters {
            Some(c) if due => c.read(&mut self.before).is_ok(),
            _ => false,
        };
    }

    /// Call right after it; adds the sampled batch's deltas to `acc`.
    pub fn end(&mut self, acc: &CounterAccumulator) {
        if !std::mem::take(&mut self.in_sample) {
            return;
        }
        if let Some(c) = &self.counters {
            if c.read(&mut self.after).is_ok() {
                acc.add_delta(&self.before, &self.after);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn software_available(c: &ThreadCounters) -> bool {
        c.is_available(CounterKind::ContextSwitches) && c.is_available(CounterKind::PageFaults)
    }

    #[test]
    fn attr_layout_matches_the_kernel_abi() {
        assert_eq!(std::mem::size_of::<PerfEventAttr>(), 136);
        assert_eq!(std::mem::offset_of!(PerfEventAttr, flags), 40);
        assert_eq!(std::mem::offset_of!(PerfEventAttr, config1), 56);
        assert_eq!(std::mem::offset_of!(PerfEventAttr, sample_regs_intr), 96);
        assert_eq!(std::mem::offset_of!(PerfEventAttr, config3), 128);
    }

    /// Sleeping gives the CPU away: each sleep is at least one context switch of this thread.
    #[test]
    fn sleeping_counts_context_switches() {
        let c = ThreadCounters::open_for_current_thread("test");
        if !c.is_available(CounterKind::ContextSwitches) {
            let u = c.unavailable(CounterKind::ContextSwitches).unwrap();
            assert!(!u.reason.is_empty());
            let mut v = CounterValues::default();
            c.read(&mut v).unwrap();
            assert_eq!(v.get(CounterKind::ContextSwitches), 0);
            return;
        }
        let (mut before, mut after) = (CounterValues::default(), CounterValues::default());
        c.read(&mut before).unwrap();
        const SLEEPS: u64 = 20;
        for _ in 0..SLEEPS {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        c.read(&mut after).unwrap();
        let switches =
            after.get(CounterKind::ContextSwitches) - before.get(CounterKind::ContextSwitches);
        assert!(
            switches >= SLEEPS,
            "{switches} switches for {SLEEPS} sleeps"
        );
        if c.is_available(CounterKind::TaskClock) {
            assert!(after.get(CounterKind::TaskClock) > before.get(CounterKind::TaskClock));
        }
    }

    /// Touching fresh anonymous pages faults each in (private mapping, no populate).
    #[test]
    fn touching_fresh_pages_counts_page_faults() {
        let c = ThreadCounters::open_for_current_thread("test");
        if !c.is_available(CounterKind::PageFaults) {
            return;
        }
        const PAGES: usize = 256;
        let page = 4096;
        let len = PAGES * page;
        // SAFETY: an anonymous private mapping of `len` bytes; checked for MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // Transparent huge pages could fault 2 MiB at once; ask for small pages.
        // SAFETY: advising our own live mapping.
        unsafe { libc::madvise(p, len, libc::MADV_NOHUGEPAGE) };
        let (mut before, mut after) = (CounterValues::default(), CounterValues::default());
        c.read(&mut before).unwrap();
        for i in 0..PAGES {
            // SAFETY: within the mapping, which is writable.
            unsafe { std::ptr::write_volatile((p as *mut u8).add(i * page), 1) };
        }
        c.read(&mut after).unwrap();
        // SAFETY: unmapping the region mapped above; nothing refers to it any more.
        unsafe { libc::munmap(p, len) };
        let faults = after.get(CounterKind::PageFaults) - before.get(CounterKind::PageFaults);
        // Fault-around does not apply to anonymous memory, but be lenient to the kernel.
        assert!(
            faults >= (PAGES / 4) as u64,
            "{faults} faults for {PAGES} pages"
        );
    }

    /// Hardware counters either count or say why not; never a panic or an error.
    #[test]
    fn hardware_counters_work_or_are_unavailable() {
        let c = ThreadCounters::open_for_current_thread("test");
        let mut v = CounterValues::default();
        c.read(&mut v).unwrap();
        let mut x = 0u64;
        for i in 0..100_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let mut w = CounterValues::default();
        c.read(&mut w).unwrap();
        for kind in [CounterKind::CpuCycles, CounterKind::Instructions] {
            match c.unavailable(kind) {
                None => assert!(w.get(kind) > v.get(kind), "{kind:?} did not advance"),
                Some(u) => {
                    assert_eq!(w.get(kind), 0);
                    assert!(u.errno != 0 && !u.reason.is_empty(), "{u:?}");
                }
            }
        }
        assert_eq!(c.available_mask() >> COUNTER_KINDS, 0);
    }

    #[test]
    fn accumulator_reports_only_available_counters() {
        let c = ThreadCounters::open_for_current_thread("test");
        let acc = CounterAccumulator::default();
        assert_eq!(
            acc.snapshot(),
            CounterTotals::default(),
            "nothing before open"
        );
        acc.set_available_mask(c.available_mask());
        let (mut a, mut b) = (CounterValues::default(), CounterValues::default());
        c.read(&mut a).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1));
        c.read(&mut b).unwrap();
        acc.add_delta(&a, &b);
        // A counter that went backwards (never for real) adds nothing.
        acc.add_delta(&b, &a);
        let t = acc.snapshot();
        assert_eq!(t.batches, 2);
        for kind in CounterKind::ALL {
            assert_eq!(t.get(kind).is_some(), c.is_available(kind), "{kind:?}");
            if let Some(v) = t.get(kind) {
                assert_eq!(v, b.get(kind) - a.get(kind));
            }
        }
        if software_available(&c) {
            assert!(t.summary().contains("context_switches="), "{}", t.summary());
        }
    }

    #[test]
    fn sampler_measures_every_nth_batch_from_the_first() {
        let acc = CounterAccumulator::default();
        let mut s = BatchSampler::open("test", 4, &acc);
        for _ in 0..9 {
            s.begin();
            s.end(&acc);
        }
        let any = s.counters.is_some();
        assert_eq!(
            acc.snapshot().batches,
            if any { 3 } else { 0 },
            "batches 1, 5, 9"
        );
        let off = CounterAccumulator::default();
        let mut s = BatchSampler::open("test", 0, &off);
        s.begin();
        s.end(&off);
        assert_eq!(
            off.snapshot(),
            CounterTotals::default(),
            "0 turns sampling off"
        );
    }
}
