//! Put latency as upstream's store statistics report it in runtime info: every send's
//! whole time in milliseconds (whole ms, as Java's clock difference), counted into
//! upstream's 76 fine buckets (for `putLatency99` / `putLatency999`, interpolated inside a
//! bucket as upstream does) and its 13 coarse ranges (`putMessageDistributeTime`), plus
//! the largest seen (`putMessageEntireTimeMax`). Counts are cumulative; runtime info
//! reports the difference over the last minute, upstream's reporting window.

/// Upper bounds (ms, inclusive) of the fine buckets: 1–20 by 1, 22–50 by 2, 55–100 by 5,
/// 110–200 by 10, 250–500 by 50, 600–1000 by 100, 2000–10000 by 1000; one more bucket
/// above.
pub const FINE_BOUNDS_MS: [u64; 75] = fine_bounds();
pub const FINE_BUCKETS: usize = FINE_BOUNDS_MS.len() + 1;

const fn fine_bounds() -> [u64; 75] {
    // (step, count) runs, each starting where the previous ended.
    const RUNS: [(u64, usize); 7] = [
        (1, 20),
        (2, 15),
        (5, 10),
        (10, 10),
        (50, 6),
        (100, 5),
        (1000, 9),
    ];
    let mut out = [0u64; 75];
    let (mut at, mut i, mut r) = (0u64, 0usize, 0usize);
    while r < RUNS.len() {
        let (step, count) = RUNS[r];
        let mut k = 0;
        while k < count {
            at += step;
            out[i] = at;
            i += 1;
            k += 1;
        }
        r += 1;
    }
    out
}

/// `putMessageDistributeTime` ranges, in upstream's order and wording.
pub const DISTRIBUTION_LABELS: [&str; 13] = [
    "[<=0ms]",
    "[0~10ms]",
    "[10~50ms]",
    "[50~100ms]",
    "[100~200ms]",
    "[200~500ms]",
    "[500ms~1s]",
    "[1~2s]",
    "[2~3s]",
    "[3~4s]",
    "[4~5s]",
    "[5~10s]",
    "[10s~]",
];
/// Exclusive upper bounds (ms) of the distribution ranges after the first (`<= 0`).
const DISTRIBUTION_BOUNDS_MS: [u64; 11] =
    [10, 50, 100, 200, 500, 1000, 2000, 3000, 4000, 5000, 10000];

/// Cumulative put-latency counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutLatency {
    pub fine: [u64; FINE_BUCKETS],
    pub distribution: [u64; DISTRIBUTION_LABELS.len()],
    pub max_ms: u64,
}

impl Default for PutLatency {
    fn default() -> Self {
        PutLatency {
            fine: [0; FINE_BUCKETS],
            distribution: [0; DISTRIBUTION_LABELS.len()],
            max_ms: 0,
        }
    }
}

impl PutLatency {
    pub fn record(&mut self, ms: u64) {
        let fine = FINE_BOUNDS_MS.partition_point(|&b| b < ms);
        self.fine[fine] += 1;
        let coarse = if ms == 0 {
            0
        } else {
            1 + DISTRIBUTION_BOUNDS_MS.partition_point(|&b| b <= ms)
        };
        self.distribution[coarse] += 1;
        self.max_ms = self.max_ms.max(ms);
    }

    pub fn add(&mut self, o: &PutLatency) {
        for (a, b) in self.fine.iter_mut().zip(o.fine) {
            *a += b;
        }
        for (a, b) in self.distribution.iter_mut().zip(o.distribution) {
            *a += b;
        }
        self.max_ms = self.max_ms.max(o.max_ms);
    }

    /// Counts since `earlier` (the max stays the all-time one, as upstream's).
    pub fn since(&self, earlier: &PutLatency) -> PutLatency {
        let mut d = *self;
        for (a, b) in d.fine.iter_mut().zip(earlier.fine) {
            *a = a.saturating_sub(b);
        }
        for (a, b) in d.distribution.iter_mut().zip(earlier.distribution) {
            *a = a.saturating_sub(b);
        }
        d
    }

    /// The `px` quantile in ms, interpolated linearly inside its bucket (0 with no puts).
    pub fn quantile_ms(&self, px: f64) -> f64 {
        let total: u64 = self.fine.iter().sum();
        let target = (total as f64 * px) as u64;
        let mut passed = 0u64;
        for (i, &count) in self.fine.iter().enumerate() {
            if target <= passed + count {
                if count == 0 {
                    return 0.0;
                }
                let lower = if i == 0 { 0 } else { FINE_BOUNDS_MS[i - 1] };
                // The open top bucket interpolates up to i64::MAX ms upstream; cap it at
                // its lower bound rather than report a meaningless number.
                let upper = FINE_BOUNDS_MS.get(i).copied().unwrap_or(lower);
                let within = (target - passed) as f64 / count as f64;
                return lower as f64 + (upper - lower) as f64 * within;
            }
            passed += count;
        }
        0.0
    }

    /// `putMessageDistributeTime`'s text: "[<=0ms]:N [0~10ms]:N … " (trailing space).
    pub fn distribution_text(&self) -> String {
        let mut s = String::with_capacity(200);
        for (label, n) in DISTRIBUTION_LABELS.iter().zip(self.distribution) {
            s.push_str(label);
            s.push(':');
            s.push_str(&n.to_string());
            s.push(' ');
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_upstreams() {
        assert_eq!(FINE_BOUNDS_MS[0], 1);
        assert_eq!(FINE_BOUNDS_MS[19], 20);
        assert_eq!(FINE_BOUNDS_MS[20], 22);
        assert_eq!(FINE_BOUNDS_MS[34], 50);
        assert_eq!(FINE_BOUNDS_MS[44], 100);
        assert_eq!(FINE_BOUNDS_MS[54], 200);
        assert_eq!(FINE_BOUNDS_MS[60], 500);
        assert_eq!(FINE_BOUNDS_MS[65], 1000);
        assert_eq!(FINE_BOUNDS_MS[74], 10000);
    }

    #[test]
    fn records_land_in_upstreams_ranges_and_quantiles_interpolate() {
        let mut l = PutLatency::default();
        for ms in [0, 0, 9, 10, 49, 50, 999, 1000, 10_000, 20_000] {
            l.record(ms);
        }
        assert_eq!(
            l.distribution_text(),
            "[<=0ms]:2 [0~10ms]:1 [10~50ms]:2 [50~100ms]:1 [100~200ms]:0 [200~500ms]:0 \
             [500ms~1s]:1 [1~2s]:1 [2~3s]:0 [3~4s]:0 [4~5s]:0 [5~10s]:0 [10s~]:2 "
        );
        assert_eq!(l.max_ms, 20_000);
        let mut fast = PutLatency::default();
        for _ in 0..100 {
            fast.record(0);
        }
        // All within the first bucket (0–1 ms): upstream interpolates to 0.99.
        assert!((fast.quantile_ms(0.99) - 0.99).abs() < 1e-9);
        assert_eq!(PutLatency::default().quantile_ms(0.99), 0.0);
        let window = l.since(&fast);
        assert_eq!(window.distribution[0], 0, "saturates, never underflows");
    }
}
