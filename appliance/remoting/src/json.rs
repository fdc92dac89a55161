//! Lenient JSON reading (fastjson's non-standard output: bare numeric keys, object keys)
//! and compact fastjson-shaped writing. OWNER: bodies helper.
