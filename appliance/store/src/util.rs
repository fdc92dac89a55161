//! Small helpers the stages share: property lookup in a raw property string, clocks,
//! local-time file names, thread pinning, memory and disk usage.

use std::path::Path;

use ringmq_remoting::message::properties;

/// Hasher of the maps the store looks up per record (queue offsets on the append stage,
/// ConsumeQueues on the reput stage): foldhash, randomly seeded per process, not SipHash.
pub(crate) type FastHash = foldhash::fast::RandomState;

/// Looks up `name` in a raw property string (`name 0x01 value 0x02 ...`). Pieces without
/// a separator or with an empty name/value are skipped; a later duplicate wins.
pub fn property<'a>(props: &'a [u8], name: &str) -> Option<&'a str> {
    properties::find_bytes(props, name.as_bytes()).and_then(|v| std::str::from_utf8(v).ok())
}

/// The properties dispatch reads from every record (tagsCode, index keys, delay level),
/// found in one pass over the raw property string with [`property`]'s rules.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DispatchProperties<'a> {
    pub tags: Option<&'a str>,
    pub keys: Option<&'a str>,
    pub uniq_key: Option<&'a str>,
    pub delay: Option<&'a str>,
}

impl<'a> DispatchProperties<'a> {
    pub fn parse(props: &'a [u8]) -> Self {
        let mut found = Self::default();
        for (k, v) in properties::iter_bytes(props) {
            let slot = match k {
                b"TAGS" => &mut found.tags,
                b"KEYS" => &mut found.keys,
                b"UNIQ_KEY" => &mut found.uniq_key,
                b"DELAY" => &mut found.delay,
                _ => continue,
            };
            *slot = std::str::from_utf8(v).ok();
        }
        found
    }
}

/// Used fraction of the partition holding `path`, in percent (rounded up), upstream's
/// `used / (used + usable)`.
pub fn disk_used_percent(path: &Path) -> Option<u32> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: `st` is plain data filled by statvfs on success; `c` is a valid C string.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let frsize = st.f_frsize as u128;
    let used = (st.f_blocks as u128).saturating_sub(st.f_bfree as u128) * frsize;
    let usable = st.f_bavail as u128 * frsize;
    if used + usable == 0 {
        return None;
    }
    Some(((used * 100).div_ceil(used + usable)) as u32)
}

/// The one wall clock (milliseconds since the Unix epoch), reachable under the store's path.
pub use ringmq_sync::now_ms;

/// `yyyyMMddHHmmssSSS` in local time (IndexFile names).
pub fn local_time_file_name(ms: i64) -> String {
    let secs = (ms / 1000) as libc::time_t;
    // SAFETY: `tm` is plain data, fully written by localtime_r on success.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to locals.
    let ok = unsafe { !libc::localtime_r(&secs, &mut tm).is_null() };
    if !ok {
        return format!("{ms:017}");
    }
    format!(
        "{:04}{:02}{:02}{:02}{:02}{:02}{:03}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        ms.rem_euclid(1000)
    )
}

/// Local hour of day (0-23) for `deleteWhen`.
pub fn local_hour(ms: i64) -> i32 {
    let secs = (ms / 1000) as libc::time_t;
    // SAFETY: as in `local_time_file_name`.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to locals.
    if unsafe { libc::localtime_r(&secs, &mut tm).is_null() } {
        return -1;
    }
    tm.tm_hour
}

/// Pins the current thread to `core` if given (best effort; logs on failure).
pub fn pin_current_thread(core: Option<usize>, stage: &str) {
    if let Some(id) = core {
        if !core_affinity::set_for_current(core_affinity::CoreId { id }) {
            tracing::warn!(stage, core = id, "could not pin stage thread");
        }
    }
}

/// Sets the calling thread's nice value (`stage` names it in the log). A refusal (no
/// `CAP_SYS_NICE`, `RLIMIT_NICE` too low) is logged once per stage and the thread keeps
/// running at the process's value.
pub fn set_current_thread_nice(nice: i32, stage: &str) {
    if nice == 0 {
        return;
    }
    // SAFETY: gettid has no preconditions; setpriority only reads its integer arguments.
    let rc = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice)
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        tracing::info!(
            stage,
            nice,
            error = %e,
            "could not lower the thread's nice value (grant CAP_SYS_NICE or LimitNICE={nice}); it runs at the process's"
        );
    }
}

/// Physical RAM in bytes (for "message in memory" decisions).
pub fn physical_memory_bytes() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    if pages > 0 && page > 0 {
        pages as u64 * page as u64
    } else {
        8 << 30
    }
}

/// A record as a local producer hands it to the store (born at 127.0.0.1:1, stored at
/// 127.0.0.1:10911, no offsets or flags yet): the one record shape the store's own
/// tests, benchmarks and crash helper append.
pub fn loopback_record(
    topic: &str,
    queue_id: i32,
    body: &[u8],
    properties: &[u8],
) -> bytes::BytesMut {
    use ringmq_remoting::message::record::{encode_record, RecordFields};
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    let loopback = |port| SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
    let fields = RecordFields {
        queue_id,
        flag: 0,
        queue_offset: 0,
        physical_offset: 0,
        sys_flag: 0,
        born_timestamp_ms: 1,
        born_host: loopback(1),
        store_timestamp_ms: 0,
        store_host: loopback(10911),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body,
        topic,
        properties,
    };
    let mut out = bytes::BytesMut::new();
    encode_record(&fields, &mut out).expect("a loopback record of bounded size encodes");
    out
}

/// The message a panic carried, for the log line.
pub(crate) fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("no message")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-pass reader finds what four `property` lookups find, on well-formed and
    /// odd property strings alike (duplicates, empty names or values, missing separators,
    /// bytes that are not UTF-8).
    #[test]
    fn dispatch_properties_agree_with_property_lookups() {
        let cases: [&[u8]; 9] = [
            b"",
            b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ABC\x02WAIT\x01true\x02",
            b"TAGS\x01a\x02TAGS\x01b\x02",
            b"TAGS\x01a\x02TAGS\x01\x02",
            b"\x01x\x02TAGS\x02KEYS\x01\x01k\x02",
            b"DELAY\x013\x02TAGS\x01t",
            b"TAGS\x01ok\x02TAGS\x01\xff\xfe\x02",
            b"UNIQ_KEY\x01u\x02UNIQ_KEY2\x01v\x02XTAGS\x01w",
            b"KEYS\x01a b\x02\x02\x02KEYS\x01c",
        ];
        for props in cases {
            let one_pass = DispatchProperties::parse(props);
            assert_eq!(one_pass.tags, property(props, "TAGS"), "{props:?}");
            assert_eq!(one_pass.keys, property(props, "KEYS"), "{props:?}");
            assert_eq!(one_pass.uniq_key, property(props, "UNIQ_KEY"), "{props:?}");
            assert_eq!(one_pass.delay, property(props, "DELAY"), "{props:?}");
        }
    }

    #[test]
    fn disk_usage_is_a_percentage() {
        let p = disk_used_percent(Path::new("/")).unwrap();
        assert!(p <= 100);
        assert_eq!(disk_used_percent(Path::new("/no/such/dir/ringmq")), None);
    }

    #[test]
    fn property_lookup_follows_java_rules() {
        let p = b"KEYS\x01a b\x02TAGS\x01T\x02EMPTY\x01\x02TAGS\x01U";
        assert_eq!(property(p, "KEYS"), Some("a b"));
        assert_eq!(property(p, "TAGS"), Some("U"));
        assert_eq!(property(p, "EMPTY"), None);
        assert_eq!(property(p, "NOPE"), None);
    }

    #[test]
    fn file_name_shape() {
        let n = local_time_file_name(1_700_000_000_123);
        assert_eq!(n.len(), 17);
        assert!(n.ends_with("123"));
    }
}
