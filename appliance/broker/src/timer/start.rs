//! Starting the timer store for a broker: above the broker context, which only holds the
//! store's handle ([`super::TimerHandle`]).

use std::sync::Arc;

use super::{TimerConfig, TimerMessageStore};
use crate::clock::SystemClock;

/// Opens, recovers and starts the broker's timer store when this broker delivers timers (a
/// master with `timerWheelEnable`). Failure is logged; the broker runs without timers.
pub fn start_for_broker(ctx: &Arc<crate::context::BrokerContext>) {
    if !ctx.is_master() || !ctx.config.timer_wheel_enable {
        return;
    }
    let cfg = TimerConfig::from_broker(&ctx.config);
    match TimerMessageStore::open(cfg, ctx.store.clone(), Arc::new(SystemClock)) {
        Ok(s) => match s.start() {
            Ok(()) => {
                ctx.timer.set(s);
                let broker = Arc::downgrade(ctx);
                ctx.metrics.set_timer_probe(Box::new(move || {
                    broker.upgrade()?.timer.get().map(|s| s.gauges())
                }));
            }
            Err(e) => tracing::error!("timer message store not started: {e}"),
        },
        Err(e) => tracing::error!("timer message store not opened: {e}"),
    }
}
