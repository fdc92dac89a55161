//! The rules a broker configuration must meet for the broker to start. `Broker::start` checks
//! them before it opens anything, and UPDATE_BROKER_CONFIG checks the updated configuration
//! with the same function before it answers SUCCESS and saves it, so an accepted update can
//! never leave a config file the broker refuses at its next start.
//!
//! Besides the values themselves, the rules look at the machine: `bindAddress` must be an
//! address of this host, the metrics port must be free (unless this broker already holds it),
//! and the mapped-file sizes must match the store files already on disk, which the store
//! cannot open with another size.

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::Path;

use ringmq_store as store;

use crate::config::BrokerConfig;

/// What the check may take for granted, because the caller already holds it.
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckScope {
    /// The metrics endpoint a running broker listens on: not "in use" for its own update.
    pub held_metrics_addr: Option<SocketAddr>,
    /// Whether to compare mapped-file sizes with the files under `storePathRootDir` (not
    /// when the broker runs on a store handed to it, which has no such files).
    pub store_files: bool,
}

/// Smallest and largest CommitLog segment the store maps (whole pages, offsets fit i32).
const MIN_COMMIT_LOG_FILE_BYTES: u64 = 4 * store::mapped_file::OS_PAGE_SIZE;
const MAX_COMMIT_LOG_FILE_BYTES: u64 = i32::MAX as u64 + 1;

/// Why the broker would refuse to start with `c`, or `Ok` when it would start.
pub fn check_startable(c: &BrokerConfig, scope: CheckScope) -> Result<(), String> {
    c.delay_levels_ms()
        .map_err(|e| format!("messageDelayLevel: {e}"))?;
    check_bind_address(&c.bind_address)?;
    if c.enable_controller_mode && c.controller_addr.split(';').all(|a| a.trim().is_empty()) {
        return Err(
            "enableControllerMode=true needs controllerAddr (the controllers' \
                    addresses, ';'-separated)"
                .to_string(),
        );
    }
    network_cores(c)?;
    let tuning = crate::config::net_tuning(c)?;
    crate::config::tls_client(c).map_err(|e| format!("TLS client (tls.enable): {e}"))?;
    crate::config::plan_core_map(c, &tuning)?;
    let sc = crate::disk_store::store_config(c)?;
    check_commit_log_file_size(sc.mapped_file_size_commit_log)?;
    if scope.store_files {
        check_existing_file_sizes(&sc)?;
    }
    check_metrics_endpoint(c, scope.held_metrics_addr)
}

/// `ringmq.cores.network`: comma-separated core ids, or empty for the default placement.
pub fn network_cores(c: &BrokerConfig) -> Result<Option<Vec<usize>>, String> {
    let text = c.ringmq_network_cores.trim();
    if text.is_empty() {
        return Ok(None);
    }
    text.split(',')
        .map(|core| {
            core.trim().parse::<usize>().map_err(|_| {
                format!("ringmq.cores.network {text:?} must be comma-separated core ids")
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// `bindAddress` must be an IP address this host has (or the wildcard address).
fn check_bind_address(text: &str) -> Result<IpAddr, String> {
    let ip: IpAddr = text
        .trim()
        .parse()
        .map_err(|_| format!("bindAddress {text:?} is not an IP address"))?;
    TcpListener::bind(SocketAddr::new(ip, 0))
        .map_err(|e| format!("bindAddress {ip} is not an address of this host ({e})"))?;
    Ok(ip)
}

fn check_commit_log_file_size(size_bytes: u64) -> Result<(), String> {
    let page = store::mapped_file::OS_PAGE_SIZE;
    if !(MIN_COMMIT_LOG_FILE_BYTES..=MAX_COMMIT_LOG_FILE_BYTES).contains(&size_bytes)
        || !size_bytes.is_multiple_of(page)
    {
        return Err(format!(
            "mappedFileSizeCommitLog {size_bytes} must be a multiple of {page} between {MIN_COMMIT_LOG_FILE_BYTES} and {MAX_COMMIT_LOG_FILE_BYTES} bytes"
        ));
    }
    Ok(())
}

/// The store opens existing CommitLog and ConsumeQueue files only at the size configured
/// now: a file of another size stops it from starting.
fn check_existing_file_sizes(sc: &store::StoreConfig) -> Result<(), String> {
    let commit_log_bytes = sc.mapped_file_size_commit_log;
    if let Some((path, len)) = first_file_of_other_size(&sc.commit_log_dir(), commit_log_bytes) {
        return Err(format!(
            "mappedFileSizeCommitLog {commit_log_bytes} differs from the existing CommitLog file {} ({len} bytes)",
            path.display()
        ));
    }
    let cq_bytes = sc.consume_queue_file_size_bytes();
    let topics = match std::fs::read_dir(sc.consume_queue_dir()) {
        Ok(dir) => dir,
        Err(_) => return Ok(()),
    };
    for topic in topics.flatten() {
        let Ok(queues) = std::fs::read_dir(topic.path()) else {
            continue;
        };
        for queue in queues.flatten() {
            if let Some((path, len)) = first_file_of_other_size(&queue.path(), cq_bytes) {
                return Err(format!(
                    "mappedFileSizeConsumeQueue gives {cq_bytes}-byte ConsumeQueue files, but the existing file {} has {len} bytes",
                    path.display()
                ));
            }
        }
    }
    Ok(())
}

/// The first mapped file in `dir` (named by its 20-digit start offset) that is neither empty
/// (the store drops an empty last file) nor `size_bytes` long.
fn first_file_of_other_size(dir: &Path, size_bytes: u64) -> Option<(std::path::PathBuf, u64)> {
    let entries = std::fs::read_dir(dir).ok()?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.len() != 20 || !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        if meta.is_file() && meta.len() != 0 && meta.len() != size_bytes {
            return Some((entry.path(), meta.len()));
        }
    }
    None
}

/// The metrics endpoint must be a usable address whose port is free, unless it is the one
/// this broker already listens on.
fn check_metrics_endpoint(c: &BrokerConfig, held: Option<SocketAddr>) -> Result<(), String> {
    let Some(addr) = crate::metrics::endpoint_addr(c)? else {
        return Ok(());
    };
    if held == Some(addr) {
        return Ok(());
    }
    TcpListener::bind(addr).map(drop).map_err(|e| {
        format!(
            "the metrics endpoint cannot listen on {addr} ({e}); pick a free ringmq.metricsPort"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope() -> CheckScope {
        CheckScope {
            held_metrics_addr: None,
            store_files: true,
        }
    }

    fn conf(text: &str) -> BrokerConfig {
        BrokerConfig::from_properties_text(text).0
    }

    #[test]
    fn commit_log_file_size_must_be_whole_pages_in_range() {
        for bad in ["0", "1", "4096", "16385", "4294967296"] {
            let e = check_startable(
                &conf(&format!(
                    "mappedFileSizeCommitLog={bad}\nstorePathRootDir=/nonexistent-ringmq\n"
                )),
                scope(),
            )
            .unwrap_err();
            assert!(e.contains("mappedFileSizeCommitLog"), "{bad}: {e}");
        }
        check_startable(
            &conf("mappedFileSizeCommitLog=16384\nstorePathRootDir=/nonexistent-ringmq\n"),
            scope(),
        )
        .unwrap();
    }

    #[test]
    fn controller_mode_needs_controller_addresses() {
        let base = "enableControllerMode=true\nstorePathRootDir=/nonexistent-ringmq\n";
        let e = check_startable(&conf(base), scope()).unwrap_err();
        assert!(e.contains("needs controllerAddr"), "{e}");
        let with = format!("{base}controllerAddr=127.0.0.1:19876;127.0.0.1:19877\n");
        check_startable(&conf(&with), scope()).unwrap();
    }

    #[test]
    fn bind_address_must_belong_to_this_host() {
        let e = check_startable(
            &conf("bindAddress=192.0.2.254\nstorePathRootDir=/nonexistent-ringmq\n"),
            scope(),
        )
        .unwrap_err();
        assert!(e.contains("not an address of this host"), "{e}");
        check_startable(
            &conf("bindAddress=127.0.0.1\nstorePathRootDir=/nonexistent-ringmq\n"),
            scope(),
        )
        .unwrap();
    }

    #[test]
    fn metrics_port_in_use_is_refused_unless_held_by_this_broker() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let c = conf(&format!(
            "ringmq.metricsPort={}\nmetricsPromExporterHost=127.0.0.1\nstorePathRootDir=/nonexistent-ringmq\n",
            addr.port()
        ));
        let e = check_startable(&c, scope()).unwrap_err();
        assert!(e.contains("ringmq.metricsPort"), "{e}");
        let held = CheckScope {
            held_metrics_addr: Some(addr),
            ..scope()
        };
        check_startable(&c, held).unwrap();
    }
}
