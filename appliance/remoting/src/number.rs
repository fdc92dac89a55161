//! Numbers as the protocol writes them into `extFields`: decimal text, formatted without
//! allocating because producers and the broker's send response write several per message;
//! and the hexadecimal digits of message ids and JSON `\u` escapes.

/// The value of one hexadecimal digit of either case.
pub(crate) fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Bytes the longest `i64` takes in decimal (`-9223372036854775808`).
pub const I64_DECIMAL_BYTES: usize = 20;

/// `value` in decimal, formatted into the end of `buf` (no allocation); the same text as
/// `value.to_string()`.
pub fn decimal(buf: &mut [u8; I64_DECIMAL_BYTES], value: i64) -> &str {
    let mut at = buf.len();
    let mut rest = value.unsigned_abs();
    loop {
        at -= 1;
        buf[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if value < 0 {
        at -= 1;
        buf[at] = b'-';
    }
    // The bytes are ASCII digits and '-' by construction.
    std::str::from_utf8(&buf[at..]).unwrap_or("0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_formats_like_to_string() {
        let mut buf = [0u8; I64_DECIMAL_BYTES];
        for v in [
            0,
            1,
            -1,
            9,
            10,
            42,
            -42,
            1_234_567_890_123,
            i64::MAX,
            i64::MIN,
        ] {
            assert_eq!(decimal(&mut buf, v), v.to_string());
        }
    }
}
