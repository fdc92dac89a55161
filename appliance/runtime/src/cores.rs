//! Which CPU core runs what: the `ringmq.cores.*` configuration keys, their defaults for
//! small (2-core) and large (16+ core) machines, and `spawn_pinned` for stage threads.
//!
//! Keys (values are core lists: `3`, `0-1`, `0,2,4-7`):
//! - `ringmq.cores.network`: the network cores (one compio runtime each);
//! - `ringmq.cores.append`, `ringmq.cores.flush`, `ringmq.cores.reput`, `ringmq.cores.ha`:
//!   one core each for the store stages (the first core of a list is used).
//!
//! Pinning is best effort: a core that cannot be pinned (container CPU set, core absent)
//! is a logged warning and the thread runs unpinned, because a broker that does not start
//! is worse than one that runs a little slower.

use std::fmt;
use std::io;
use std::thread::JoinHandle;

/// Configuration key prefix for every core-placement key.
pub const CORES_KEY_PREFIX: &str = "ringmq.cores.";

/// Core placement for the network cores and each store stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreMap {
    /// How many cores the machine (or our CPU set) offers; the defaults were derived from it.
    pub available: usize,
    pub network: Vec<usize>,
    pub append: usize,
    pub flush: usize,
    pub reput: usize,
    pub ha: usize,
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
    /// - up to 2 cores: network on every core, all stages share the last core;
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
            };
        }
        Self {
            available: n,
            network: (0..n - 4).collect(),
            append: n - 1,
            flush: n - 2,
            reput: n - 3,
            ha: n - 4,
        }
    }

    /// The default for the cores this process may run on.
    pub fn detect() -> Self {
        Self::default_for(available_cores())
    }

    /// Starts from [`CoreMap::default_for`] and applies every `ringmq.cores.*` key found in
    /// `properties`; other keys are ignored (they belong to other components), unknown
    /// `ringmq.cores.*` keys are errors so a typo is not silently ignored.
    pub fn from_properties<'a, I>(properties: I, available: usize) -> Result<Self, CoreMapError>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut map = Self::default_for(available);
        for (key, value) in properties {
            let Some(stage) = key.strip_prefix(CORES_KEY_PREFIX) else {
                continue;
            };
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
                "append" => map.append = cores[0],
                "flush" => map.flush = cores[0],
                "reput" => map.reput = cores[0],
                "ha" => map.ha = cores[0],
                other => {
                    return Err(err(format!(
                        "unknown stage `{other}`; known: network, append, flush, reput, ha"
                    )))
                }
            }
        }
        Ok(map)
    }
}

impl fmt::Display for CoreMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cores: available={} network={} append={} flush={} reput={} ha={}",
            self.available,
            format_core_list(&self.network),
            self.append,
            self.flush,
            self.reput,
            self.ha
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
    // A bound on the list keeps a typo like `0-4000000000` from allocating gigabytes.
    const MAX_CORE_ID: usize = 4096;
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
    fn two_core_default_shares_core_one() {
        let m = CoreMap::default_for(2);
        assert_eq!(m.network, vec![0, 1]);
        assert_eq!((m.append, m.flush, m.reput, m.ha), (1, 1, 1, 1));
        assert_eq!(
            m.to_string(),
            "cores: available=2 network=0-1 append=1 flush=1 reput=1 ha=1"
        );
        let one = CoreMap::default_for(1);
        assert_eq!(one.network, vec![0]);
        assert_eq!(one.append, 0);
    }

    #[test]
    fn large_default_spreads_stages() {
        let m = CoreMap::default_for(16);
        assert_eq!(m.network, (0..12).collect::<Vec<_>>());
        assert_eq!((m.append, m.flush, m.reput, m.ha), (15, 14, 13, 12));
        let mid = CoreMap::default_for(8);
        assert_eq!(mid.network, (0..6).collect::<Vec<_>>());
        assert_eq!((mid.append, mid.flush), (7, 6));
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
