//! A master's SyncStateSet decision (spec features.md §g.3): slaves that hold everything
//! this master had sent them join at once; members that have not caught up within
//! `haMaxTimeSlaveNotCatchup`, or are not connected, leave at the periodic check. The
//! controller has the last word (ALTER_SYNC_STATE_SET); this only says what to ask for.

use std::collections::BTreeSet;

use ringmq_store::HaSlaveStatus;

/// What the decision looks at.
pub struct SetCheck<'a> {
    pub local_id: i64,
    pub current: &'a BTreeSet<i64>,
    pub slaves: &'a [HaSlaveStatus],
    pub now_ms: i64,
    pub max_not_catch_up_ms: u64,
    pub confirm_offset: i64,
    /// The periodic check (`checkSyncStateSetPeriod`) is due: members may leave.
    pub shrink_due: bool,
}

/// The set to ask the controller for, when it differs from the current one.
pub fn wanted(check: &SetCheck<'_>) -> Option<BTreeSet<i64>> {
    let caught_up = |s: &&HaSlaveStatus| {
        !s.async_learner
            && s.caught_up_at_ms > 0
            && check.now_ms.saturating_sub(s.caught_up_at_ms) <= check.max_not_catch_up_ms as i64
    };
    let in_step: BTreeSet<i64> = check
        .slaves
        .iter()
        .filter(caught_up)
        .filter_map(|s| s.broker_id)
        .collect();
    let joining = check
        .slaves
        .iter()
        .filter(caught_up)
        .filter(|s| s.ack_offset >= check.confirm_offset)
        .filter_map(|s| s.broker_id);
    let mut set: BTreeSet<i64> = check.current.iter().copied().chain(joining).collect();
    if check.shrink_due {
        set.retain(|id| *id == check.local_id || in_step.contains(id));
    }
    set.insert(check.local_id);
    (set != *check.current).then_some(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slave(id: i64, ack: i64, caught_up_at_ms: i64) -> HaSlaveStatus {
        HaSlaveStatus {
            addr: format!("127.0.0.1:{}", 40000 + id),
            ack_offset: ack,
            in_sync: true,
            transfer_from_where: 0,
            broker_id: Some(id),
            async_learner: false,
            caught_up_at_ms,
        }
    }

    fn check<'a>(
        current: &'a BTreeSet<i64>,
        slaves: &'a [HaSlaveStatus],
        shrink_due: bool,
    ) -> SetCheck<'a> {
        SetCheck {
            local_id: 1,
            current,
            slaves,
            now_ms: 100_000,
            max_not_catch_up_ms: 15_000,
            confirm_offset: 500,
            shrink_due,
        }
    }

    #[test]
    fn caught_up_slaves_join_at_once_and_laggards_leave_at_the_check() {
        let alone: BTreeSet<i64> = [1].into();
        let slaves = [
            slave(2, 800, 99_000),
            slave(3, 800, 50_000),
            slave(4, 100, 99_000),
        ];
        // 3 has not caught up for 50 s; 4 holds less than the confirm offset.
        assert_eq!(wanted(&check(&alone, &slaves, false)), Some([1, 2].into()));
        let with_three: BTreeSet<i64> = [1, 2, 3].into();
        assert_eq!(
            wanted(&check(&with_three, &slaves, false)),
            None,
            "no shrink before the check"
        );
        assert_eq!(
            wanted(&check(&with_three, &slaves, true)),
            Some([1, 2].into())
        );
        // A member that is gone (not connected) leaves at the check too.
        assert_eq!(wanted(&check(&with_three, &[], true)), Some([1].into()));
    }

    #[test]
    fn learners_never_join() {
        let alone: BTreeSet<i64> = [1].into();
        let mut learner = slave(2, 800, 99_000);
        learner.async_learner = true;
        assert_eq!(wanted(&check(&alone, &[learner], false)), None);
    }
}
