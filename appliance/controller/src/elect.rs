//! The elect policy (upstream `DefaultElectPolicy`): the new master of a broker set comes
//! from the alive members of its SyncStateSet, and only when none qualifies (and unclean
//! election is enabled) from all alive replicas. Within a candidate set: the old master
//! if it is alive and no other broker is designated; a designated broker if alive (else
//! nobody); otherwise the best by epoch (newest), max offset (largest) and election
//! priority (lowest), then broker id for a stable answer.

use crate::heartbeat::Liveness;
use std::collections::BTreeSet;

pub struct ElectRequest<'a> {
    pub cluster: &'a str,
    pub broker_name: &'a str,
    pub sync_state_set: &'a BTreeSet<i64>,
    /// Every replica of the set, when unclean election is enabled.
    pub all_replicas: Option<&'a BTreeSet<i64>>,
    pub old_master: Option<i64>,
    pub designated: Option<i64>,
}

pub fn elect(req: &ElectRequest<'_>, live: &dyn Liveness) -> Option<i64> {
    try_elect(req, req.sync_state_set, live)
        .or_else(|| req.all_replicas.and_then(|all| try_elect(req, all, live)))
}

fn try_elect(req: &ElectRequest<'_>, brokers: &BTreeSet<i64>, live: &dyn Liveness) -> Option<i64> {
    let alive: Vec<i64> = brokers
        .iter()
        .copied()
        .filter(|id| live.is_alive(req.cluster, req.broker_name, *id))
        .collect();
    if alive.is_empty() {
        return None;
    }
    if let Some(old) = req.old_master {
        if alive.contains(&old) && req.designated.is_none_or(|d| d == old) {
            return Some(old);
        }
    }
    if let Some(d) = req.designated {
        return alive.contains(&d).then_some(d);
    }
    alive.into_iter().min_by_key(|id| {
        let info = live.live_info(req.cluster, req.broker_name, *id);
        let (epoch, offset, priority) = info.map_or((i32::MIN, i64::MIN, i32::MAX), |b| {
            let hb = &b.heartbeat;
            (hb.epoch, hb.max_offset, hb.election_priority)
        });
        (
            std::cmp::Reverse(epoch),
            std::cmp::Reverse(offset),
            priority,
            *id,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heartbeat::tests::hb;
    use crate::heartbeat::BrokerLiveTable;

    fn set(ids: &[i64]) -> BTreeSet<i64> {
        ids.iter().copied().collect()
    }

    fn request<'a>(
        sss: &'a BTreeSet<i64>,
        old: Option<i64>,
        designated: Option<i64>,
    ) -> ElectRequest<'a> {
        ElectRequest {
            cluster: "C",
            broker_name: "b",
            sync_state_set: sss,
            all_replicas: None,
            old_master: old,
            designated,
        }
    }

    #[test]
    fn ranks_by_epoch_then_offset_then_priority() {
        let mut t = BrokerLiveTable::default();
        t.on_heartbeat(hb(1, 3, 100, 0), 0);
        t.on_heartbeat(hb(2, 4, 50, 9), 0);
        t.on_heartbeat(hb(3, 4, 80, 9), 0);
        t.on_heartbeat(hb(4, 4, 80, 1), 0);
        let sss = set(&[1, 2, 3, 4]);
        assert_eq!(elect(&request(&sss, None, None), &t.at(0)), Some(4));
        let sss = set(&[1, 2, 3]);
        assert_eq!(elect(&request(&sss, None, None), &t.at(0)), Some(3));
        let sss = set(&[1, 2]);
        assert_eq!(elect(&request(&sss, None, None), &t.at(0)), Some(2));
    }

    #[test]
    fn the_old_master_stays_unless_another_is_designated() {
        let mut t = BrokerLiveTable::default();
        t.on_heartbeat(hb(1, 1, 10, 0), 0);
        t.on_heartbeat(hb(2, 1, 99, 0), 0);
        let sss = set(&[1, 2]);
        assert_eq!(elect(&request(&sss, Some(1), None), &t.at(0)), Some(1));
        assert_eq!(elect(&request(&sss, Some(1), Some(1)), &t.at(0)), Some(1));
        assert_eq!(elect(&request(&sss, Some(1), Some(2)), &t.at(0)), Some(2));
        assert_eq!(
            elect(&request(&sss, Some(1), Some(3)), &t.at(0)),
            None,
            "designated but not alive"
        );
    }

    #[test]
    fn only_in_sync_replicas_qualify_unless_unclean_election_is_on() {
        let mut t = BrokerLiveTable::default();
        t.on_heartbeat(hb(2, 1, 10, 0), 0);
        let sss = set(&[1]);
        assert_eq!(elect(&request(&sss, Some(1), None), &t.at(0)), None);
        let all = set(&[1, 2]);
        let unclean = ElectRequest {
            all_replicas: Some(&all),
            ..request(&sss, Some(1), None)
        };
        assert_eq!(elect(&unclean, &t.at(0)), Some(2));
        assert_eq!(elect(&unclean, &t.at(5_000)), None, "timed out");
    }
}
