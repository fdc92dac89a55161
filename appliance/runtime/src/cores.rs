//! Which CPU core runs what: the `ringmq.cores.*` configuration keys, their defaults for
//! 1, 2, 3-15 and 16+ cores, and `spawn_pinned` for stage threads. The map is the truth:
//! every thread it names (network cores, append, flush and its I/O worker, reput, the HA
//! sender slot) is pinned exactly as [`CoreMap`]'s `Display` says, or runs unpinned where
//! it says `unpinned`.
//!
//! Keys (values are core lists: `3`, `0-1`, `0,2,4-7`):
//! - `ringmq.cores.available`: plan for this many cores instead of the detected count
//!   (see [`CoreMap::applicable`] for what is applied when it exceeds the real count);
//! - `ringmq.cores.network`: the network cores (one compio runtime each);
//! - `ringmq.cores.append`, `ringmq.cores.flush`, `ringmq.cores.reput`, `ringmq.cores.ha`:
//!   one core each for the store stages (the first core of a list is used). A stage named
//!   by its key is pinned even where the default leaves it unpinned.
//!
//! Pinning is best effort: a core that cannot be pinned (container CPU set, core absent)
//! is a logged warning and the thread runs unpinned, because a broker that does not start
//! is worse than one that runs a little slower.

use std::fmt;
use std::io;
use std::thread::JoinHandle;

/// Configuration key prefix for every core-placement key.
pub const CORES_KEY_PREFIX: &str = "ringmq.cores.";

/// Key that overrides the detected core count (planning for another machine size).
pub const AVAILABLE_KEY: &str = "ringmq.cores.available";

/// Core placement for the network cores and each store stage. The core fields are each
/// thread's home core; [`Pinning`] says which threads are actually pinned to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreMap {
    /// How many cores the map was planned for (detected, or `ringmq.cores.available`).
    pub available: usize,
    pub network: Vec<usize>,
    pub append: usize,
    /// The flush stage and its I/O worker (`ringmq-flush-io`) share this core.
    pub flush: usize,
    pub reput: usize,
    /// The HA sender slot (reserved: no thread runs there yet).
    pub ha: usize,
    pub pinned: Pinning,
}

/// Which of the map's threads are pinned to their home core; the others float over every
/// core the process may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pinning {
    pub network: bool,
    pub append: bool,
    pub flush: bool,
    pub reput: bool,
    pub ha: bool,
}

impl Pinning {
    const fn all(pinned: bool) -> Self {
        Self {
            network: pinned,
            append: pinned,
            flush: pinned,
            reput: pinned,
            ha: pinned,
        }
    }
}

/// A `ringmq.cores.*` value that cannot be used; names the key and says what is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreMapError {
    pub key: String,
    pub value: String,
    pub why: String,
}

impl fmt::Display for CoreMapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}={:?}: {} (expected a core list such as `1`, `0-3` or `0,2,4-7`)",
            self.key, self.value, self.why
        )
    }
}

impl std::error::Error for CoreMapError {}

impl CoreMap {
    /// The default placement for a machine with `available` cores:
    /// - 1 or 2 cores: nothing is pinned (network home cores: every core; stages: the
    ///   last core). Measured on a loaded 2-vCPU VM, pinned network threads waited up to
    ///   195 ms behind the store stages and the load generator sharing their CPU (57-168k
    ///   msg/s, p99 5-20 ms) where floating ones did 169-226k msg/s (p99 1.6-3.6 ms); the
    ///   stages, three threads for one CPU, would wait behind each other the same way;
    /// - 3 to 15 cores: append alone on the last core, flush/reput/HA share the one
    ///   before it, network on the rest;
    /// - 16 or more: append, flush, reput and HA each get a core of their own at the top,
    ///   network on the rest.
    pub fn default_for(available: usize) -> Self {
        let n = available.max(1);
        let last = n - 1;
        if n <= 2 {
            return Self {
                available: n,
                network: (0..n).collect(),
                append: last,
                flush: last,
                reput: last,
                ha: last,
                pinned: Pinning::all(false),
            };
        }
        if n < 16 {
            let shared = n - 2;
            return Self {
                available: n,
                network: (0..n - 2).collect(),
                append: last,
                flush: shared,
                reput: shared,
                ha: shared,
                pinned: Pinning::all(true),
            };
        }
        Self {
            available: n,
            network: (0..n - 4).collect(),
            append: n - 1,
            flush: n - 2,
            reput: n - 3,
            ha: n - 4,
            pinned: Pinning::all(true),
        }
    }

    /// The default for the cores this process may run on.
    pub fn detect() -> Self {
        Self::default_for(available_cores())
    }

    /// Starts from [`CoreMap::default_for`] (for `ringmq.cores.available` cores if given,
    /// else `available`) and applies every `ringmq.cores.*` key found in `properties`;
    /// other keys are ignored (they belong to other components), unknown `ringmq.cores.*`
    /// keys are errors so a typo is not silently ignored.
    pub fn from_properties<'a, I>(properties: I, available: usize) -> Result<Self, CoreMapError>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let properties: Vec<(&str, &str)> = properties.into_iter().collect();
        let mut planned = available;
        if let Some(&(key, value)) = properties.iter().find(|(k, _)| *k == AVAILABLE_KEY) {
            planned = parse_available(value).map_err(|why| CoreMapError {
                key: key.to_string(),
                value: value.to_string(),
                why,
            })?;
        }
        let mut map = Self::default_for(planned);
        for (key, value) in properties {
            let Some(stage) = key.strip_prefix(CORES_KEY_PREFIX) else {
                continue;
            };
            if key == AVAILABLE_KEY {
                continue;
            }
            let err = |why: String| CoreMapError {
                key: key.to_string(),
                value: value.to_string(),
                why,
            };
            let cores = parse_core_list(value).map_err(err)?;
            if let Some(&bad) = cores.iter().find(|&&c| c >= map.available) {
                return Err(err(format!(
                    "core {bad} does not exist here (cores 0-{})",
                    map.available - 1
                )));
            }
            match stage {
                "network" => map.network = cores,
                "append" => (map.append, map.pinned.append) = (cores[0], true),
                "flush" => (map.flush, map.pinned.flush) = (cores[0], true),
                "reput" => (map.reput, map.pinned.reput) = (cores[0], true),
                "ha" => (map.ha, map.pinned.ha) = (cores[0], true),
                other => {
                    return Err(err(format!(
                        "unknown stage `{other}`; known: available, network, append, flush, \
                         reput, ha"
                    )))
                }
            }
        }
        Ok(map)
    }

    /// The map as it can be applied on a process that may use `real` cores: when the plan
    /// was made for more cores (`ringmq.cores.available` above the real count), no thread
    /// is pinned to a CPU that does not exist. Such threads run unpinned and network home
    /// cores that do not exist are dropped (all of them: the real cores, unpinned). The
    /// result is what the broker applies and prints.
    pub fn applicable(&self, real: usize) -> Self {
        let real = real.max(1);
        if self.available <= real {
            return self.clone();
        }
        let mut map = self.clone();
        map.available = real;
        map.network.retain(|&c| c < real);
        if map.network.is_empty() {
            map.network = (0..real).collect();
            map.pinned.network = false;
        }
        let keep = |core: usize, pinned: bool| pinned && core < real;
        map.pinned.append = keep(map.append, map.pinned.append);
        map.pinned.flush = keep(map.flush, map.pinned.flush);
        map.pinned.reput = keep(map.reput, map.pinned.reput);
        map.pinned.ha = keep(map.ha, map.pinned.ha);
        map
    }

    /// The append stage's core if it is pinned.
    pub fn append_core(&self) -> Option<usize> {
        self.pinned.append.then_some(self.append)
    }
    /// The flush stage's (and its I/O worker's) core if they are pinned.
    pub fn flush_core(&self) -> Option<usize> {
        self.pinned.flush.then_some(self.flush)
    }
    /// The reput stage's core if it is pinned.
    pub fn reput_core(&self) -> Option<usize> {
        self.pinned.reput.then_some(self.reput)
    }
    /// The HA sender slot's core if it is pinned.
    pub fn ha_core(&self) -> Option<usize> {
        self.pinned.ha.then_some(self.ha)
    }
}

/// `ringmq.cores.available`: a positive core count, at most the largest supported core id.
fn parse_available(value: &str) -> Result<usize, String> {
    match value.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_CORE_ID + 1).contains(&n) => Ok(n),
        _ => Err(format!(
            "expected a core count from 1 to {}",
            MAX_CORE_ID + 1
        )),
    }
}

/// A bound on core ids keeps a typo like `0-4000000000` from allocating gigabytes.
const MAX_CORE_ID: usize = 4096;

/// `3` when pinned, `unpinned` when the thread floats.
fn placement(core: usize, pinned: bool) -> String {
    if pinned {
        core.to_string()
    } else {
        "unpinned".to_string()
    }
}

impl fmt::Display for CoreMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cores: available={} network={} append={} flush={} reput={} ha={}",
            self.available,
            if self.pinned.network {
                format_core_list(&self.network)
            } else {
                "unpinned".to_string()
            },
            placement(self.append, self.pinned.append),
            placement(self.flush, self.pinned.flush),
            placement(self.reput, self.pinned.reput),
            placement(self.ha, self.pinned.ha)
        )
    }
}

/// How many cores this process may use (its CPU affinity set, else the machine's count).
pub fn available_cores() -> usize {
    core_affinity::get_core_ids()
        .map(|ids| ids.len())
        .filter(|&n| n > 0)
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1)
}

/// Parses `0-1`, `3`, `0,2,4-7` into a sorted, de-duplicated, non-empty list.
pub fn parse_core_list(text: &str) -> Result<Vec<usize>, String> {
    let mut cores = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let parse = |s: &str| -> Result<usize, String> {
            let v: usize = s
                .trim()
                .parse()
                .map_err(|_| format!("`{s}` is not a core number"))?;
            if v > MAX_CORE_ID {
                return Err(format!(
                    "core {v} is above the supported maximum {MAX_CORE_ID}"
                ));
            }
            Ok(v)
        };
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (parse(lo)?, parse(hi)?);
                if lo > hi {
                    return Err(format!("range `{part}` runs backwards"));
                }
                cores.extend(lo..=hi);
            }
            None => cores.push(parse(part)?),
        }
    }
    if cores.is_empty() {
        return Err("no core given".to_string());
    }
    cores.sort_unstable();
    cores.dedup();
    Ok(cores)
}

/// Renders a core list compactly (`0-3,6`), the inverse of [`parse_core_list`].
pub fn format_core_list(cores: &[usize]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < cores.len() {
        let start = cores[i];
        let mut end = start;
        while i + 1 < cores.len() && cores[i + 1] == end + 1 {
            i += 1;
            end = cores[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if end == start {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    out
}

/// Pins the calling thread to `core`; a failure is a warning (see the module doc).
/// Returns whether the pin took effect.
pub fn pin_current_thread(name: &str, core: usize) -> bool {
    let pinned = core_affinity::set_for_current(core_affinity::CoreId { id: core });
    if !pinned {
        tracing::warn!(
            thread = name,
            core,
            "could not pin thread to core; running unpinned"
        );
    }
    pinned
}

/// Spawns a named thread pinned to `core` (a store stage, a control thread).
pub fn spawn_pinned<F, T>(name: impl Into<String>, core: usize, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let name = name.into();
    let thread_name = name.clone();
    std::thread::Builder::new()
        .name(thread_name)
        .spawn(move || {
            pin_current_thread(&name, core);
            f()
        })
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("spawning pinned thread on core {core}: {e}"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_and_two_core_defaults_pin_nothing_and_say_so() {
        for (n, net) in [(1, "0"), (2, "0-1")] {
            let m = CoreMap::default_for(n);
            assert_eq!(m.pinned, Pinning::all(false), "{n} cores");
            assert_eq!(format_core_list(&m.network), net);
            assert_eq!(m.append_core(), None);
            assert_eq!(
                (m.flush_core(), m.reput_core(), m.ha_core()),
                (None, None, None)
            );
            assert_eq!(
                m.to_string(),
                format!(
                    "cores: available={n} network=unpinned append=unpinned flush=unpinned \
                     reput=unpinned ha=unpinned"
                )
            );
        }
    }

    #[test]
    fn four_core_default_gives_append_its_own_core() {
        let m = CoreMap::default_for(4);
        assert_eq!(m.network, vec![0, 1]);
        assert_eq!(m.append_core(), Some(3));
        assert_eq!(
            (m.flush_core(), m.reput_core(), m.ha_core()),
            (Some(2), Some(2), Some(2))
        );
        assert_eq!(
            m.to_string(),
            "cores: available=4 network=0-1 append=3 flush=2 reput=2 ha=2"
        );
    }

    #[test]
    fn sixteen_and_sixty_four_core_defaults_spread_stages() {
        let m = CoreMap::default_for(16);
        assert_eq!(m.network, (0..12).collect::<Vec<_>>());
        assert_eq!(
            m.to_string(),
            "cores: available=16 network=0-11 append=15 flush=14 reput=13 ha=12"
        );
        let big = CoreMap::default_for(64);
        assert_eq!(big.network, (0..60).collect::<Vec<_>>());
        assert_eq!(big.pinned, Pinning::all(true));
        assert_eq!(
            big.to_string(),
            "cores: available=64 network=0-59 append=63 flush=62 reput=61 ha=60"
        );
    }

    #[test]
    fn available_key_plans_for_more_cores_and_applies_only_real_ones() {
        let plan = CoreMap::from_properties([(AVAILABLE_KEY, "16")], 2).unwrap();
        assert_eq!(plan, CoreMap::default_for(16));
        let applied = plan.applicable(2);
        assert_eq!(applied.network, vec![0, 1]);
        assert!(applied.pinned.network, "cores 0 and 1 exist");
        assert_eq!(
            applied.to_string(),
            "cores: available=2 network=0-1 append=unpinned flush=unpinned reput=unpinned \
             ha=unpinned"
        );
        assert_eq!(
            CoreMap::default_for(4).applicable(8),
            CoreMap::default_for(4)
        );
        let e = CoreMap::from_properties([(AVAILABLE_KEY, "0")], 2).unwrap_err();
        assert_eq!(e.key, AVAILABLE_KEY);
        // A stage key is checked against the planned count, wherever the key comes.
        let m = CoreMap::from_properties([("ringmq.cores.append", "9"), (AVAILABLE_KEY, "16")], 2)
            .unwrap();
        assert_eq!(m.append_core(), Some(9));
    }

    #[test]
    fn a_stage_named_by_its_key_is_pinned_on_a_small_host() {
        let m = CoreMap::from_properties([("ringmq.cores.append", "1")], 2).unwrap();
        assert_eq!(m.append_core(), Some(1));
        assert_eq!(m.flush_core(), None);
        assert!(m.to_string().contains("append=1 flush=unpinned"), "{m}");
    }

    #[test]
    fn keys_override_defaults_and_bad_values_name_the_key() {
        let props = [
            ("ringmq.cores.network", "0-1"),
            ("ringmq.cores.append", "1"),
            ("listenPort", "10911"),
        ];
        let m = CoreMap::from_properties(props, 4).unwrap();
        assert_eq!(m.network, vec![0, 1]);
        assert_eq!(m.append, 1);
        assert_eq!(m.flush, 2, "untouched keys keep their default");

        let e = CoreMap::from_properties([("ringmq.cores.flush", "9")], 4).unwrap_err();
        assert_eq!(e.key, "ringmq.cores.flush");
        assert!(e.to_string().contains("does not exist"), "{e}");
        let e = CoreMap::from_properties([("ringmq.cores.network", "2-1")], 4).unwrap_err();
        assert!(e.why.contains("backwards"), "{e}");
        let e = CoreMap::from_properties([("ringmq.cores.apend", "1")], 4).unwrap_err();
        assert!(e.why.contains("unknown stage"), "{e}");
        assert!(CoreMap::from_properties([("ringmq.cores.ha", "")], 4).is_err());
    }

    #[test]
    fn core_lists_round_trip() {
        assert_eq!(
            parse_core_list("0,2,4-7, 3").unwrap(),
            vec![0, 2, 3, 4, 5, 6, 7]
        );
        assert_eq!(format_core_list(&[0, 2, 3, 4, 5, 6, 7]), "0,2-7");
        assert!(parse_core_list("x").is_err());
        assert!(parse_core_list("0-99999999").is_err());
    }

    #[test]
    fn spawn_pinned_runs_the_closure() {
        let h = spawn_pinned("test-stage", 0, || 41 + 1).unwrap();
        assert_eq!(h.join().unwrap(), 42);
    }
}
