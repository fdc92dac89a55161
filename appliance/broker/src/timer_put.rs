//! The put-time transform of timer messages (features.md §c.2): a message carrying
//! `TIMER_DELAY_SEC`, `TIMER_DELAY_MS` or `TIMER_DELIVER_MS` is rounded to `timerPrecisionMs`,
//! checked against `timerMaxDelaySec` and slot flow control, and parked in
//! `rmq_sys_wheel_timer` queue 0 with `TIMER_OUT_MS`, `REAL_TOPIC` and `REAL_QID`; a time
//! already passed stores it to its own topic at once. The timing wheel
//! ([`crate::timer`]) delivers parked messages.
//!
//! Runs on the network core inside the send path: pure property work, no I/O. Flow control
//! asks the wheel only when `timerCongestNumEachSlot` can actually be reached.

use ringmq_remoting::codes::ResponseCode;
use ringmq_remoting::message::properties::{keys, MessageProperties};
use ringmq_store::PutMessageStatus;

use crate::metadata::topic_config::TIMER_TOPIC;

/// The settings the transform reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerPutSettings {
    /// `timerWheelEnable`
    pub enable: bool,
    /// `timerPrecisionMs`
    pub precision_ms: i64,
    /// `timerMaxDelaySec`
    pub max_delay_sec: i64,
    /// `timerCongestNumEachSlot`
    pub congest_num_each_slot: i64,
}

impl TimerPutSettings {
    pub fn from_config(config: &crate::config::BrokerConfig) -> Self {
        Self {
            enable: config.timer_wheel_enable,
            precision_ms: i64::from(config.timer_precision_ms.max(1)),
            max_delay_sec: i64::from(config.timer_max_delay_sec),
            congest_num_each_slot: i64::from(config.timer_congest_num_each_slot),
        }
    }
}

/// What the transform did with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerPut {
    /// Not a timer message (or one already transformed): untouched.
    NotTimer,
    /// Parked in `rmq_sys_wheel_timer`; delivered at `TIMER_OUT_MS` + one precision.
    Parked { out_ms: i64 },
    /// Its time has passed: stored to its own topic now.
    Immediate,
}

/// Whether a property string names any timer property the broker reacts to on put.
pub fn is_timer_key(key: &str) -> bool {
    matches!(
        key,
        keys::TIMER_DELIVER_MS | keys::TIMER_DELAY_SEC | keys::TIMER_DELAY_MS | keys::TIMER_OUT_MS
    )
}

/// A delay-level message ignores timer properties: they are removed before parking it.
pub fn strip_timer_properties(props: &mut MessageProperties) {
    props.remove(keys::TIMER_DELIVER_MS);
    props.remove(keys::TIMER_DELAY_SEC);
    props.remove(keys::TIMER_DELAY_MS);
}

/// Rounds a future delivery time down to the wheel's precision so that the dequeue rule
/// (a slot is read one precision after its time) delivers at ceil(deliver / precision) ×
/// precision: never early, at most one precision late.
pub fn round_to_slot(deliver_ms: i64, precision_ms: i64) -> i64 {
    if deliver_ms % precision_ms == 0 {
        deliver_ms - precision_ms
    } else {
        deliver_ms / precision_ms * precision_ms
    }
}

/// Upstream's random slot flow control: accept up to the limit, refuse from twice the limit,
/// and in between refuse when a uniform draw in [0, 1000) exceeds the overshoot fraction.
pub fn is_reject(slot_num: i64, limit: i64, draw_below_1000: u32) -> bool {
    if slot_num <= limit {
        return false;
    }
    if slot_num >= limit.saturating_mul(2) {
        return true;
    }
    f64::from(draw_below_1000) > 1000.0 * (slot_num - limit) as f64 / (limit as f64 + 0.1)
}

/// The transform (features.md §c.2) for a NOT_TYPE/COMMIT message without a delay level.
/// `slot_num(t)` counts the messages already in the slot of `t` (flow control).
pub fn transform(
    props: &mut MessageProperties,
    topic: &mut String,
    queue_id: &mut i32,
    now_ms: i64,
    settings: &TimerPutSettings,
    slot_num: impl Fn(i64) -> i64,
) -> Result<TimerPut, PutMessageStatus> {
    if topic == TIMER_TOPIC || props.get(keys::TIMER_OUT_MS).is_some() {
        return Ok(TimerPut::NotTimer);
    }
    let sec = props.get(keys::TIMER_DELAY_SEC);
    let ms = props.get(keys::TIMER_DELAY_MS);
    let at = props.get(keys::TIMER_DELIVER_MS);
    if sec.is_none() && ms.is_none() && at.is_none() {
        return Ok(TimerPut::NotTimer);
    }
    if !settings.enable {
        return Err(PutMessageStatus::WheelTimerNotEnable);
    }
    let parse = |v: &str| {
        v.parse::<i64>()
            .map_err(|_| PutMessageStatus::WheelTimerMsgIllegal)
    };
    let deliver_ms = if let Some(s) = sec {
        parse(s)?
            .checked_mul(1000)
            .and_then(|d| d.checked_add(now_ms))
    } else if let Some(m) = ms {
        parse(m)?.checked_add(now_ms)
    } else {
        Some(parse(at.unwrap_or_default())?)
    }
    .ok_or(PutMessageStatus::WheelTimerMsgIllegal)?;
    if deliver_ms <= now_ms {
        if props.get(keys::TIMER_DEL_UNIQKEY).is_some() {
            return Err(PutMessageStatus::WheelTimerMsgIllegal);
        }
        return Ok(TimerPut::Immediate);
    }
    if deliver_ms - now_ms > settings.max_delay_sec.saturating_mul(1000) {
        return Err(PutMessageStatus::WheelTimerMsgIllegal);
    }
    let out_ms = round_to_slot(deliver_ms, settings.precision_ms);
    let limit = settings.congest_num_each_slot;
    if limit < i64::from(i32::MAX)
        && is_reject(slot_num(out_ms), limit, crate::random::random_below(1000))
    {
        return Err(PutMessageStatus::WheelTimerFlowControl);
    }
    // Digits and an already validated topic name: these inserts cannot fail.
    let _ = props.insert(keys::TIMER_OUT_MS, &out_ms.to_string());
    let _ = props.insert(keys::REAL_TOPIC, topic);
    let _ = props.insert(keys::REAL_QID, &queue_id.to_string());
    *topic = TIMER_TOPIC.to_string();
    *queue_id = 0;
    Ok(TimerPut::Parked { out_ms })
}

/// The send path's hook for a single NOT_TYPE/COMMIT, non-half message that carries a timer
/// property. Returns the properties to store when they changed (timer properties removed
/// from a delay-level message, or the message parked), `None` to store the client's verbatim.
pub fn apply_for_send(
    ctx: &crate::context::BrokerContext,
    raw: &str,
    delay_level: i32,
    topic: &mut String,
    queue_id: &mut i32,
) -> Result<Option<MessageProperties>, (ResponseCode, String)> {
    let mut props = MessageProperties::parse(raw);
    if delay_level > 0 {
        strip_timer_properties(&mut props);
        return Ok(Some(props));
    }
    let settings = TimerPutSettings::from_config(&ctx.config);
    let now_ms = crate::persist::now_ms();
    match transform(&mut props, topic, queue_id, now_ms, &settings, |t| {
        ctx.timer.slot_num(t)
    }) {
        Ok(TimerPut::Parked { .. }) => Ok(Some(props)),
        Ok(TimerPut::NotTimer | TimerPut::Immediate) => Ok(None),
        Err(status) => Err(refusal(status, &settings)),
    }
}

/// The send answer for a transform refusal (same codes as the store's WHEEL_TIMER_* statuses).
pub fn refusal(status: PutMessageStatus, settings: &TimerPutSettings) -> (ResponseCode, String) {
    match status {
        PutMessageStatus::WheelTimerNotEnable => (
            ResponseCode::SystemError,
            format!(
                "accurate timer message is not enabled, timerWheelEnable is {}",
                settings.enable
            ),
        ),
        PutMessageStatus::WheelTimerFlowControl => (
            ResponseCode::SystemError,
            format!(
                "timer message is under flow control: a slot holds at most {} messages, and between {} and that limit random flow control applies",
                settings.congest_num_each_slot.saturating_mul(2),
                settings.congest_num_each_slot
            ),
        ),
        _ => (
            ResponseCode::MessageIllegal,
            format!(
                "timer message illegal: the delay must not exceed the max delay {}ms, and a delete request must name a time in the future",
                settings.max_delay_sec.saturating_mul(1000)
            ),
        ),
    }
}

#[cfg(test)]
#[path = "timer_put_tests.rs"]
mod tests;

/// A message the broker writes itself (a POP checkpoint or ack, a recall's delete request):
/// where it goes, what it says, and the timer properties that park it.
pub struct BrokerTimerMessage<'a> {
    pub topic: String,
    pub queue_id: i32,
    /// With `TIMER_DELIVER_MS` (or another timer key) set.
    pub props: MessageProperties,
    pub body: &'a [u8],
    pub born_host: std::net::SocketAddr,
}

/// The put of `m` after the timer transform (parked in the timer topic, or to its own topic
/// when its time has come), with the transform's outcome.
pub fn broker_timer_put(
    ctx: &crate::context::BrokerContext,
    m: BrokerTimerMessage<'_>,
) -> Result<(TimerPut, ringmq_store::PutRequest), (ResponseCode, String)> {
    let BrokerTimerMessage {
        mut topic,
        mut queue_id,
        mut props,
        body,
        born_host,
    } = m;
    let settings = TimerPutSettings::from_config(&ctx.config);
    let now_ms = crate::persist::now_ms();
    let parked = transform(
        &mut props,
        &mut topic,
        &mut queue_id,
        now_ms,
        &settings,
        |t| ctx.timer.slot_num(t),
    )
    .map_err(|status| refusal(status, &settings))?;
    let mut prop_bytes = Vec::with_capacity(160);
    props.encode_into(&mut prop_bytes);
    let fields = ringmq_remoting::message::record::RecordFields {
        queue_id,
        flag: 0,
        queue_offset: 0,
        physical_offset: 0,
        sys_flag: 0,
        born_timestamp_ms: now_ms,
        born_host,
        store_timestamp_ms: 0,
        store_host: ctx.store_host,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body,
        topic: &topic,
        properties: &prop_bytes,
    };
    let mut records = bytes::BytesMut::with_capacity(fields.encoded_size());
    ringmq_remoting::message::record::encode_record(&fields, &mut records).map_err(|e| {
        (
            ResponseCode::SystemError,
            format!("a broker-made message to {topic} cannot be encoded: {e}"),
        )
    })?;
    let put = ringmq_store::PutRequest {
        topic,
        queue_id,
        sys_flag: 0,
        records,
        record_count: 1,
        wait_store_msg_ok: true,
    };
    Ok((parked, put))
}
