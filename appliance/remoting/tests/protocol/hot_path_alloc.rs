//! The broker's per-request header decoders for sends and pulls allocate nothing: a
//! counting allocator (counting only the calling thread, so parallel tests do not
//! disturb it) watches `SendMessageHeaderRef` and `PullMessageHeaderRef` decode real
//! client-shaped extFields.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use ringmq_remoting::header::{
    CommandHeader, PullMessageHeaderRef, PullMessageRequestHeader, SendMessageHeaderRef,
    SendMessageRequestHeader, SendMessageRequestHeaderV2,
};
use ringmq_remoting::ExtFields;

/// Passes every call to the system allocator, counting this thread's allocations.
struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count_one() {
    // `try_with`: a thread being torn down has no counter left; its allocations are not ours.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so the
// caller's guarantees are `System`'s; the counter is a plain thread-local cell.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: forwarded as is; the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: forwarded as is; the caller upholds `GlobalAlloc::alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: forwarded as is; `ptr` came from this allocator, i.e. from `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is; `ptr` came from this allocator, i.e. from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// How many allocations this thread made while running `f`.
fn allocations_in<T>(f: impl FnOnce() -> T) -> (u64, T) {
    let before = ALLOCATIONS.with(Cell::get);
    let out = f();
    (ALLOCATIONS.with(Cell::get) - before, out)
}

fn send_v2_fields() -> ExtFields {
    SendMessageRequestHeaderV2 {
        a: "please_rename_unique_group_name".into(),
        b: "TopicTest".into(),
        c: "TBW102".into(),
        d: 4,
        e: 3,
        f: 0,
        g: 1_718_000_000_000,
        h: 0,
        i: Some("UNIQ_KEY\u{1}7F00000100012A9F1F2C6B1E5D8C0000\u{2}WAIT\u{1}true\u{2}".into()),
        j: Some(0),
        k: Some(false),
        l: Some(16),
        m: Some(false),
        n: Some("broker-a".into()),
    }
    .to_ext_fields()
}

#[test]
fn borrowed_send_decode_allocates_nothing_for_either_key_set() {
    let v2 = send_v2_fields();
    let v1 = SendMessageRequestHeader::from(SendMessageRequestHeaderV2::decode(&v2).unwrap())
        .to_ext_fields();
    for (code, fields) in [(310, &v2), (320, &v2), (10, &v1)] {
        let (allocations, header) =
            allocations_in(|| SendMessageHeaderRef::decode_for_code(code, fields));
        assert_eq!(header.unwrap().topic, "TopicTest");
        assert_eq!(allocations, 0, "code {code}");
    }
    // The counter sees allocations: the owned decode copies its strings.
    let (allocations, _) = allocations_in(|| SendMessageRequestHeader::decode_for_code(310, &v2));
    assert!(allocations > 0);
}

#[test]
fn borrowed_pull_decode_allocates_nothing() {
    let fields = PullMessageRequestHeader {
        consumer_group: "please_rename_unique_group_name_4".into(),
        topic: "TopicTest".into(),
        queue_id: 3,
        queue_offset: 123_456,
        max_msg_nums: 32,
        sys_flag: 0x7,
        commit_offset: 123_400,
        suspend_timeout_millis: 15_000,
        subscription: Some("TagA || TagB".into()),
        sub_version: 1_718_000_000_000,
        expression_type: Some("TAG".into()),
        ..Default::default()
    }
    .to_ext_fields();
    let (allocations, header) = allocations_in(|| PullMessageHeaderRef::decode(&fields));
    assert_eq!(header.unwrap().subscription, Some("TagA || TagB"));
    assert_eq!(allocations, 0);
    let (allocations, _) = allocations_in(|| PullMessageRequestHeader::decode(&fields));
    assert!(allocations > 0);
}
