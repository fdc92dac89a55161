//! A cheap per-thread random number (xorshift) for picking queues and flow-control draws:
//! nothing here needs cryptographic quality, and no RNG dependency is needed for it.

thread_local! {
    static RNG: std::cell::Cell<u64> = std::cell::Cell::new(seed());
}

fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(7);
    t | 1
}

/// A cheap per-thread xorshift for random queue selection (no RNG dependency needed).
pub fn random_below(n: u32) -> u32 {
    if n <= 1 {
        return 0;
    }
    RNG.with(|r| {
        let mut x = r.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        r.set(x);
        (x % n as u64) as u32
    })
}
