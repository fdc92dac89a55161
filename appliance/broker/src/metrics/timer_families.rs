//! The timer store's families on `/metrics`: upstream's `rocketmq_timer_*` gauges and
//! counters (their names, read from the store at scrape time) plus the delivery lateness
//! histogram, which upstream does not export.

use super::text::{Exposition, Kind};

/// Upper bounds (ms) of the delivery lateness buckets: delivered minus the end of the slot
/// (`TIMER_OUT_MS` + one precision, the earliest a message of that slot is delivered).
pub const TIMER_LATENESS_BOUNDS_MS: [f64; 11] = [
    10.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0, 60000.0,
];
/// Buckets of the lateness histogram: one per bound and one above them all.
pub const TIMER_LATENESS_BUCKETS: usize = TIMER_LATENESS_BOUNDS_MS.len() + 1;

/// What the timer store reports at one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TimerGauges {
    /// Timer-topic messages not yet moved into the wheel.
    pub enqueue_lag_msgs: i64,
    /// How far the delivered slot time is behind now.
    pub dequeue_latency_ms: i64,
    /// Age (now − store time) of the last message the enqueue stage read, if it read one
    /// in the last 2 s, else 0 (upstream `getEnqueueBehindMillis`).
    pub enqueue_latency_ms: i64,
    /// Messages in the wheel from the current read time on (upstream
    /// `getDequeueBehindMessages`, the same count as `timerCongestNum`).
    pub dequeue_lag_msgs: i64,
    /// Messages waiting in the wheel (runtime info `timerCongestNum`).
    pub congest_msgs: i64,
    /// Messages waiting, by real topic (the `timermetrics` counts); empty when the store
    /// was busy at the scrape.
    pub timing_by_topic: Vec<(String, i64)>,
    pub enqueue_total: u64,
    pub dequeue_total: u64,
    /// Non-cumulative counts per bucket of [`TIMER_LATENESS_BOUNDS_MS`].
    pub lateness_counts: [u64; TIMER_LATENESS_BUCKETS],
    pub lateness_sum_ms: u64,
}

/// Reads the timer store now; `None` when no timer store runs.
pub type TimerProbe = Box<dyn Fn() -> Option<TimerGauges> + Send + Sync>;

/// Bucket index of one lateness observation.
pub fn lateness_bucket(lateness_ms: i64) -> usize {
    TIMER_LATENESS_BOUNDS_MS
        .iter()
        .position(|b| lateness_ms as f64 <= *b)
        .unwrap_or(TIMER_LATENESS_BOUNDS_MS.len())
}

pub fn render(e: &mut Exposition, g: &TimerGauges) {
    let gauges: [(&str, &str, i64); 5] = [
        (
            "rocketmq_timer_enqueue_lag",
            "Timer-topic messages not yet in the timing wheel.",
            g.enqueue_lag_msgs,
        ),
        (
            "rocketmq_timer_enqueue_latency",
            "Milliseconds between the store time of the last message moved into the wheel and now (0 when none moved in the last 2 s).",
            g.enqueue_latency_ms,
        ),
        (
            "rocketmq_timer_dequeue_lag",
            "Messages in the timing wheel from the current read time on.",
            g.dequeue_lag_msgs,
        ),
        (
            "rocketmq_timer_dequeue_latency",
            "Milliseconds the timer's delivered slot time is behind now.",
            g.dequeue_latency_ms,
        ),
        (
            "ringmq_timer_congest_messages",
            "Messages waiting in the timing wheel (timerCongestNum).",
            g.congest_msgs,
        ),
    ];
    for (name, help, v) in gauges {
        e.family(name, Kind::Gauge, help);
        e.sample(name, &[], v.max(0) as u64);
    }
    e.family(
        "rocketmq_timing_messages",
        Kind::Gauge,
        "Messages waiting in the timing wheel, by real topic.",
    );
    for (topic, n) in &g.timing_by_topic {
        e.sample(
            "rocketmq_timing_messages",
            &[("topic", topic)],
            (*n).max(0) as u64,
        );
    }
    let counters = [
        (
            "rocketmq_timer_enqueue_total",
            "Timer messages moved into the wheel (or delivered at once).",
            g.enqueue_total,
        ),
        (
            "rocketmq_timer_dequeue_total",
            "Timer messages delivered to their real topic.",
            g.dequeue_total,
        ),
    ];
    for (name, help, v) in counters {
        e.family(name, Kind::Counter, help);
        e.sample(name, &[], v);
    }
    e.family(
        "ringmq_timer_delivery_lateness_ms",
        Kind::Histogram,
        "Delivery time of timer messages minus the end of their slot (TIMER_OUT_MS + timerPrecisionMs), in milliseconds.",
    );
    e.histogram(
        "ringmq_timer_delivery_lateness_ms",
        &[],
        &TIMER_LATENESS_BOUNDS_MS,
        &g.lateness_counts,
        g.lateness_sum_ms as f64,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lateness_lands_in_the_first_bucket_whose_bound_holds_it() {
        assert_eq!(lateness_bucket(0), 0);
        assert_eq!(lateness_bucket(10), 0);
        assert_eq!(lateness_bucket(11), 1);
        assert_eq!(lateness_bucket(60_000), TIMER_LATENESS_BOUNDS_MS.len() - 1);
        assert_eq!(lateness_bucket(60_001), TIMER_LATENESS_BOUNDS_MS.len());
    }

    #[test]
    fn families_render_with_upstream_names_and_cumulative_lateness() {
        let mut g = TimerGauges {
            enqueue_lag_msgs: 3,
            dequeue_latency_ms: -5,
            enqueue_latency_ms: 40,
            dequeue_lag_msgs: 6,
            congest_msgs: 7,
            timing_by_topic: vec![("T1".to_string(), 2)],
            enqueue_total: 9,
            dequeue_total: 4,
            lateness_sum_ms: 120,
            ..TimerGauges::default()
        };
        g.lateness_counts[0] = 3;
        g.lateness_counts[2] = 1;
        let mut e = Exposition::new(&[("cluster", "C")]);
        render(&mut e, &g);
        let text = e.finish();
        for line in [
            "# TYPE rocketmq_timer_enqueue_lag gauge",
            "rocketmq_timer_enqueue_lag{cluster=\"C\"} 3",
            "rocketmq_timer_dequeue_latency{cluster=\"C\"} 0",
            "rocketmq_timer_enqueue_latency{cluster=\"C\"} 40",
            "# TYPE rocketmq_timer_dequeue_lag gauge",
            "rocketmq_timer_dequeue_lag{cluster=\"C\"} 6",
            "ringmq_timer_congest_messages{cluster=\"C\"} 7",
            "rocketmq_timing_messages{cluster=\"C\",topic=\"T1\"} 2",
            "# TYPE rocketmq_timer_enqueue_total counter",
            "rocketmq_timer_enqueue_total{cluster=\"C\"} 9",
            "rocketmq_timer_dequeue_total{cluster=\"C\"} 4",
            "ringmq_timer_delivery_lateness_ms_bucket{cluster=\"C\",le=\"50\"} 3",
            "ringmq_timer_delivery_lateness_ms_bucket{cluster=\"C\",le=\"100\"} 4",
            "ringmq_timer_delivery_lateness_ms_count{cluster=\"C\"} 4",
            "ringmq_timer_delivery_lateness_ms_sum{cluster=\"C\"} 120",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
    }
}
