//! `MessageSysFlag` (`message-format.md` §5.3): the int32 bit set carried in the send
//! header (`sysFlag` / `f`) and in every stored record's SYSFLAG field.
//!
//! Owns the bit constants, the transaction-type field (bits 2–3), the compression-type
//! field (bits 8–10) and small pure helpers over them. Producers set bits 0, 2–3 and
//! 8–10; the broker adds 1, 4, 5 (and 6–7 for inner batches) and never changes 0/8–10.

/// Bit 0: the body is compressed; bits 8–10 say with what.
pub const COMPRESSED_FLAG: i32 = 0x1;
/// Bit 1: topic filter type MULTI_TAG (set by the broker from the topic config).
pub const MULTI_TAGS_FLAG: i32 = 0x1 << 1;
/// Transaction type 0 (bits 2–3 clear): a normal message.
pub const TRANSACTION_NOT_TYPE: i32 = 0;
/// Transaction type 1: a half message, sent by the producer with `TRAN_MSG=true`.
pub const TRANSACTION_PREPARED_TYPE: i32 = 0x1 << 2;
/// Transaction type 2: the committed copy in the real topic.
pub const TRANSACTION_COMMIT_TYPE: i32 = 0x2 << 2;
/// Transaction type 3: rollback; also the mask of the whole transaction field.
pub const TRANSACTION_ROLLBACK_TYPE: i32 = 0x3 << 2;
/// Mask of bits 2–3 (same value as [`TRANSACTION_ROLLBACK_TYPE`], named for intent).
pub const TRANSACTION_TYPE_MASK: i32 = 0x3 << 2;
/// Bit 4: BORNHOST is 16 + 4 bytes instead of 4 + 4.
pub const BORNHOST_V6_FLAG: i32 = 0x1 << 4;
/// Bit 5: STOREHOST is 16 + 4 bytes instead of 4 + 4.
pub const STOREHOSTADDRESS_V6_FLAG: i32 = 0x1 << 5;
/// Bit 6: the record is an inner-batch container the client must unwrap.
pub const NEED_UNWRAP_FLAG: i32 = 0x1 << 6;
/// Bit 7: inner batch (batch consume-queue topics only).
pub const INNER_BATCH_FLAG: i32 = 0x1 << 7;
/// Compression type 1 in bits 8–10: LZ4 frame.
pub const COMPRESSION_LZ4_TYPE: i32 = 0x1 << 8;
/// Compression type 2 in bits 8–10: Zstandard frame.
pub const COMPRESSION_ZSTD_TYPE: i32 = 0x2 << 8;
/// Compression type 3 in bits 8–10: zlib.
pub const COMPRESSION_ZLIB_TYPE: i32 = 0x3 << 8;
/// Mask of the compression-type field, bits 8–10.
pub const COMPRESSION_TYPE_MASK: i32 = 0x7 << 8;

/// Body compression algorithm named by sysFlag bits 8–10 (`CompressionType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompressionType {
    /// Field value 1.
    Lz4,
    /// Field value 2.
    Zstd,
    /// Field value 3, and also 0: clients older than the compression-type field (the Go
    /// and C++ clients, Java < 5.0) only set COMPRESSED_FLAG and always use zlib.
    Zlib,
}

impl CompressionType {
    /// The type named by a 3-bit field value; `None` for 4..=7, which no client defines.
    pub fn from_field(value: i32) -> Option<Self> {
        match value {
            1 => Some(Self::Lz4),
            2 => Some(Self::Zstd),
            0 | 3 => Some(Self::Zlib),
            _ => None,
        }
    }

    /// The value Java writes into bits 8–10 for this type (zlib is written as 3, never 0).
    pub fn field_value(self) -> i32 {
        match self {
            Self::Lz4 => 1,
            Self::Zstd => 2,
            Self::Zlib => 3,
        }
    }

    /// The sysFlag bits for this type (without [`COMPRESSED_FLAG`]).
    pub fn flag_bits(self) -> i32 {
        self.field_value() << 8
    }

    /// The name Java's `CompressionType.of` accepts (`LZ4`, `ZSTD`, `ZLIB`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Lz4 => "LZ4",
            Self::Zstd => "ZSTD",
            Self::Zlib => "ZLIB",
        }
    }

    /// Parses a configuration name, trimmed and case-insensitive like Java.
    pub fn from_name(name: &str) -> Option<Self> {
        let name = name.trim();
        [Self::Lz4, Self::Zstd, Self::Zlib]
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }
}

/// The transaction type in bits 2–3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransactionType {
    NotType,
    Prepared,
    Commit,
    Rollback,
}

impl TransactionType {
    /// The type stored in `sys_flag`; every 2-bit value is defined, so this is total.
    pub fn of(sys_flag: i32) -> Self {
        match sys_flag & TRANSACTION_TYPE_MASK {
            TRANSACTION_PREPARED_TYPE => Self::Prepared,
            TRANSACTION_COMMIT_TYPE => Self::Commit,
            TRANSACTION_ROLLBACK_TYPE => Self::Rollback,
            _ => Self::NotType,
        }
    }

    /// The bits this type occupies in a sysFlag.
    pub fn bits(self) -> i32 {
        match self {
            Self::NotType => TRANSACTION_NOT_TYPE,
            Self::Prepared => TRANSACTION_PREPARED_TYPE,
            Self::Commit => TRANSACTION_COMMIT_TYPE,
            Self::Rollback => TRANSACTION_ROLLBACK_TYPE,
        }
    }
}

/// Whether any bit of `mask` is set in `sys_flag` (Java `MessageSysFlag.check`).
pub fn check(sys_flag: i32, mask: i32) -> bool {
    sys_flag & mask != 0
}

/// The raw transaction field (`getTransactionValue`): one of the `TRANSACTION_*` values.
pub fn transaction_value(sys_flag: i32) -> i32 {
    sys_flag & TRANSACTION_TYPE_MASK
}

/// Replaces the transaction field (`resetTransactionValue`); other bits are kept.
pub fn reset_transaction_value(sys_flag: i32, transaction_type: TransactionType) -> i32 {
    (sys_flag & !TRANSACTION_TYPE_MASK) | transaction_type.bits()
}

/// Whether the body is compressed (bit 0).
pub fn is_compressed(sys_flag: i32) -> bool {
    check(sys_flag, COMPRESSED_FLAG)
}

/// Clears bit 0 (what clients do after decompressing); bits 8–10 are left alone.
pub fn clear_compressed_flag(sys_flag: i32) -> i32 {
    sys_flag & !COMPRESSED_FLAG
}

/// The compression algorithm of a compressed body: `None` when bit 0 is clear, or when
/// bits 8–10 hold an undefined value (4..=7) — the caller reports that as an error.
pub fn compression_type(sys_flag: i32) -> Option<CompressionType> {
    if !is_compressed(sys_flag) {
        return None;
    }
    CompressionType::from_field((sys_flag & COMPRESSION_TYPE_MASK) >> 8)
}

/// Marks a body compressed with `compression`: sets bit 0 and replaces bits 8–10.
pub fn set_compressed(sys_flag: i32, compression: CompressionType) -> i32 {
    (sys_flag & !COMPRESSION_TYPE_MASK) | COMPRESSED_FLAG | compression.flag_bits()
}

/// Whether the stored BORNHOST is IPv6 (16 + 4 bytes).
pub fn is_born_host_v6(sys_flag: i32) -> bool {
    check(sys_flag, BORNHOST_V6_FLAG)
}

/// Whether the stored STOREHOST is IPv6 (16 + 4 bytes).
pub fn is_store_host_v6(sys_flag: i32) -> bool {
    check(sys_flag, STOREHOSTADDRESS_V6_FLAG)
}

/// Length in bytes of the stored BORNHOST field: 8 (IPv4) or 20 (IPv6).
pub fn born_host_len_bytes(sys_flag: i32) -> usize {
    if is_born_host_v6(sys_flag) {
        20
    } else {
        8
    }
}

/// Length in bytes of the stored STOREHOST field: 8 (IPv4) or 20 (IPv6).
pub fn store_host_len_bytes(sys_flag: i32) -> usize {
    if is_store_host_v6(sys_flag) {
        20
    } else {
        8
    }
}

/// Sets or clears the BORNHOST_V6 bit from the producer connection's address family.
pub fn with_born_host_v6(sys_flag: i32, v6: bool) -> i32 {
    if v6 {
        sys_flag | BORNHOST_V6_FLAG
    } else {
        sys_flag & !BORNHOST_V6_FLAG
    }
}

/// Sets or clears the STOREHOSTADDRESS_V6 bit from the broker address family.
pub fn with_store_host_v6(sys_flag: i32, v6: bool) -> i32 {
    if v6 {
        sys_flag | STOREHOSTADDRESS_V6_FLAG
    } else {
        sys_flag & !STOREHOSTADDRESS_V6_FLAG
    }
}

/// Whether the record body is in the batch-item format to be split by the client:
/// both NEED_UNWRAP and INNER_BATCH set (§5.3).
pub fn is_inner_batch_container(sys_flag: i32) -> bool {
    sys_flag & (NEED_UNWRAP_FLAG | INNER_BATCH_FLAG) == (NEED_UNWRAP_FLAG | INNER_BATCH_FLAG)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_match_spec_table() {
        assert_eq!(COMPRESSED_FLAG, 0x0001);
        assert_eq!(MULTI_TAGS_FLAG, 0x0002);
        assert_eq!(TRANSACTION_PREPARED_TYPE, 0x4);
        assert_eq!(TRANSACTION_COMMIT_TYPE, 0x8);
        assert_eq!(TRANSACTION_ROLLBACK_TYPE, 0xC);
        assert_eq!(BORNHOST_V6_FLAG, 0x10);
        assert_eq!(STOREHOSTADDRESS_V6_FLAG, 0x20);
        assert_eq!(NEED_UNWRAP_FLAG, 0x40);
        assert_eq!(INNER_BATCH_FLAG, 0x80);
        assert_eq!(COMPRESSION_LZ4_TYPE, 0x100);
        assert_eq!(COMPRESSION_ZSTD_TYPE, 0x200);
        assert_eq!(COMPRESSION_ZLIB_TYPE, 0x300);
        assert_eq!(COMPRESSION_TYPE_MASK, 0x700);
    }

    #[test]
    fn compression_type_from_flags() {
        // Go / C++ / old Java: only bit 0, meaning zlib.
        assert_eq!(compression_type(0x1), Some(CompressionType::Zlib));
        assert_eq!(compression_type(0x1 | 0x100), Some(CompressionType::Lz4));
        assert_eq!(compression_type(0x1 | 0x200), Some(CompressionType::Zstd));
        assert_eq!(compression_type(0x1 | 0x300), Some(CompressionType::Zlib));
        assert_eq!(compression_type(0x1 | 0x400), None);
        // Bits 8-10 without bit 0 mean "not compressed" (clients clear only bit 0).
        assert_eq!(compression_type(0x100), None);
        assert_eq!(
            set_compressed(0x4 | 0x200, CompressionType::Lz4),
            0x4 | 0x101
        );
        assert_eq!(clear_compressed_flag(0x301), 0x300);
        assert_eq!(
            CompressionType::from_name(" zstd "),
            Some(CompressionType::Zstd)
        );
        assert_eq!(CompressionType::from_name("gzip"), None);
    }

    #[test]
    fn transaction_type_round_trip() {
        for t in [
            TransactionType::NotType,
            TransactionType::Prepared,
            TransactionType::Commit,
            TransactionType::Rollback,
        ] {
            let flag = reset_transaction_value(0x301 | 0xC, t);
            assert_eq!(TransactionType::of(flag), t);
            assert_eq!(flag & !TRANSACTION_TYPE_MASK, 0x301);
        }
        assert_eq!(transaction_value(0x8 | 0x1), TRANSACTION_COMMIT_TYPE);
    }

    #[test]
    fn host_lengths_and_inner_batch() {
        assert_eq!(born_host_len_bytes(0), 8);
        assert_eq!(born_host_len_bytes(BORNHOST_V6_FLAG), 20);
        assert_eq!(store_host_len_bytes(BORNHOST_V6_FLAG), 8);
        assert_eq!(store_host_len_bytes(STOREHOSTADDRESS_V6_FLAG), 20);
        assert_eq!(with_born_host_v6(0, true), 0x10);
        assert_eq!(with_store_host_v6(0x30, false), 0x10);
        assert!(is_inner_batch_container(0xC0));
        assert!(!is_inner_batch_container(0x80));
    }
}
