//! The two requests a controller-mode broker serves for the controllers and mqadmin:
//! GET_BROKER_EPOCH_CACHE (1007: its epoch entries, the last one ending at its max
//! offset) and NOTIFY_BROKER_ROLE_CHANGED (1008: a new master elected; the control thread
//! applies it). A broker outside controller mode answers both as upstream does.

use ringmq_remoting::body::controller::{EpochEntryBody, EpochEntryCache, SyncStateSet};
use ringmq_remoting::codes::ResponseCode;
use ringmq_remoting::header::controller::NotifyBrokerRoleChangedRequestHeader;
use ringmq_remoting::RemotingCommand;

use crate::context::{error_response, BrokerContext};
use crate::role::MasterView;

/// Upstream's text for a controller request reaching a broker outside controller mode.
const NOT_CONTROLLER_MODE: &str = "this request only for controllerMode ";

pub fn broker_epoch_cache(ctx: &BrokerContext, request: &RemotingCommand) -> RemotingCommand {
    if !ctx.config.enable_controller_mode {
        return error_response(request, ResponseCode::SystemError, NOT_CONTROLLER_MODE);
    }
    let c = &ctx.config;
    let max_offset = ctx.store.commit_log_max_offset();
    let entries = ctx.store.epoch_entries();
    let epoch_list = entries
        .iter()
        .enumerate()
        .map(|(i, (epoch, start))| EpochEntryBody {
            epoch: *epoch,
            start_offset: *start,
            end_offset: entries.get(i + 1).map_or(max_offset, |next| next.1),
        })
        .collect();
    let body = EpochEntryCache {
        cluster_name: c.broker_cluster_name.clone(),
        broker_name: c.broker_name.clone(),
        broker_id: ctx.controller.controller_id().unwrap_or(-1),
        epoch_list,
        max_offset,
    };
    request
        .response_to(ResponseCode::Success.code(), None)
        .with_body(body.encode())
}

pub fn notify_broker_role_changed(
    ctx: &BrokerContext,
    request: &RemotingCommand,
) -> RemotingCommand {
    if !ctx.config.enable_controller_mode {
        return error_response(request, ResponseCode::SystemError, NOT_CONTROLLER_MODE);
    }
    let header = match request.decode_header::<NotifyBrokerRoleChangedRequestHeader>() {
        Ok(h) => h,
        Err(e) => {
            return bad(
                request,
                format!("bad NOTIFY_BROKER_ROLE_CHANGED header: {e}"),
            )
        }
    };
    let set = match request.body.is_empty() {
        true => SyncStateSet::default(),
        false => match SyncStateSet::decode(&request.body) {
            Ok(s) => s,
            Err(e) => return bad(request, format!("bad NOTIFY_BROKER_ROLE_CHANGED body: {e}")),
        },
    };
    let view = MasterView {
        master_broker_id: header.master_broker_id,
        master_address: header.master_address,
        master_epoch: header.master_epoch.unwrap_or(-1),
        sync_state_set_epoch: header
            .sync_state_set_epoch
            .unwrap_or(set.sync_state_set_epoch),
        sync_state_set: set.sync_state_set,
    };
    if !ctx.controller.notify(view) {
        let why = "the controller link is busy; the role is read again at the next replica sync";
        return error_response(request, ResponseCode::SystemBusy, why);
    }
    request.response_to(ResponseCode::Success.code(), None)
}

fn bad(request: &RemotingCommand, why: String) -> RemotingCommand {
    tracing::warn!("{why}");
    error_response(request, ResponseCode::ControllerInvalidRequest, why)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BrokerConfig;
    use ringmq_remoting::codes::RequestCode;
    use ringmq_store::MemStore;
    use std::sync::Arc;

    fn notice(master_epoch: &str) -> RemotingCommand {
        RemotingCommand::request(RequestCode::NotifyBrokerRoleChanged.code(), 7)
            .with_ext("masterAddress", "127.0.0.1:10911")
            .with_ext("masterBrokerId", "1")
            .with_ext("masterEpoch", master_epoch)
            .with_ext("syncStateSetEpoch", "1")
    }

    #[test]
    fn outside_controller_mode_both_requests_get_upstreams_refusal() {
        let ctx = BrokerContext::for_tests(BrokerConfig::default(), Arc::new(MemStore::new()));
        for r in [
            notify_broker_role_changed(&ctx, &notice("2")),
            broker_epoch_cache(&ctx, &notice("2")),
        ] {
            assert_eq!(r.code, ResponseCode::SystemError.code());
            assert_eq!(r.remark.as_deref(), Some(NOT_CONTROLLER_MODE));
        }
    }

    #[test]
    fn notices_reach_the_control_thread_and_bad_ones_are_refused() {
        let config = BrokerConfig {
            enable_controller_mode: true,
            ..BrokerConfig::default()
        };
        let ctx = BrokerContext::for_tests(config, Arc::new(MemStore::new()));
        let busy = notify_broker_role_changed(&ctx, &notice("2"));
        assert_eq!(
            busy.code,
            ResponseCode::SystemBusy.code(),
            "no control thread yet"
        );
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        ctx.controller.attach_inbox(tx);
        let ok = notify_broker_role_changed(&ctx, &notice("2"));
        assert_eq!(ok.code, ResponseCode::Success.code());
        let view = rx.try_recv().expect("handed over");
        assert_eq!((view.master_broker_id, view.master_epoch), (Some(1), 2));
        let bad = notify_broker_role_changed(&ctx, &notice("two"));
        assert_eq!(bad.code, ResponseCode::ControllerInvalidRequest.code());
        let garbage = notice("3").with_body(b"not json".to_vec());
        let bad = notify_broker_role_changed(&ctx, &garbage);
        assert_eq!(bad.code, ResponseCode::ControllerInvalidRequest.code());
        let cache = broker_epoch_cache(&ctx, &notice("2"));
        assert_eq!(cache.code, ResponseCode::Success.code());
        let body = EpochEntryCache::decode(&cache.body).expect("an EpochEntryCache");
        assert_eq!(
            (body.broker_id, body.epoch_list.len()),
            (-1, 0),
            "no id or epochs yet"
        );
    }
}
