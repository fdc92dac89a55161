//! `whiteRemoteAddress` and `globalWhiteRemoteAddresses` patterns, with upstream's forms
//! (`RemoteAddressStrategyFactory`):
//!
//! | pattern | matches |
//! |---|---|
//! | blank | nothing |
//! | `*`, `*.*.*.*`, `*:*:*:*:*:*:*:*` | every address |
//! | `192.168.1.{1,2,3}`, `1050::{1,2}` | the listed last parts |
//! | `192.168.1.1,192.168.1.2` | the listed addresses (IPv4 or IPv6) |
//! | `192.168.*.*`, `192.168.1.1-100`, `10.*` | a prefix, then one part in a range; later parts are ignored |
//! | `1050:0:0:0:5:600:300c:*`, `…:1-ff` | the same over IPv6 groups (hex) |
//! | `192.168.1.7`, `::1` | that address |
//!
//! A pattern upstream refuses is refused here, with upstream's wording, when the file is
//! loaded or an update arrives; a request never meets an unparsed pattern.

use std::collections::HashSet;
use std::net::IpAddr;

/// One compiled address pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddressPattern {
    /// Blank text: no address matches (an account without a white address).
    Nothing,
    /// `*` and its spelled-out forms.
    Any,
    /// Listed addresses.
    Set(HashSet<IpAddr>),
    /// The first `prefix.len()` parts equal `prefix` and the next part lies in
    /// `first..=last`; parts after it are not compared.
    Range {
        v6: bool,
        prefix: Vec<u16>,
        first: u16,
        last: u16,
    },
}

impl AddressPattern {
    /// Compiles `text`; the error is upstream's message for that mistake.
    pub fn parse(text: &str) -> Result<AddressPattern, String> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(AddressPattern::Nothing);
        }
        if matches!(text, "*" | "*.*.*.*" | "*:*:*:*:*:*:*:*") {
            return Ok(AddressPattern::Any);
        }
        if text.ends_with('}') {
            return parse_braces(text);
        }
        if text.contains(',') {
            let addrs = text.split(',').filter(|a| !a.is_empty());
            return addrs
                .map(parse_one)
                .collect::<Result<_, _>>()
                .map(AddressPattern::Set);
        }
        if text.contains('*') || text.contains('-') {
            return parse_range(text);
        }
        Ok(AddressPattern::Set(HashSet::from([parse_one(text)?])))
    }

    /// Whether a peer at `addr` matches. IPv4 peers seen through an IPv6 socket
    /// (`::ffff:a.b.c.d`) count as IPv4.
    pub fn matches(&self, addr: IpAddr) -> bool {
        let addr = addr.to_canonical();
        match self {
            AddressPattern::Nothing => false,
            AddressPattern::Any => true,
            AddressPattern::Set(set) => set.contains(&addr),
            AddressPattern::Range {
                v6,
                prefix,
                first,
                last,
            } => {
                let parts: Vec<u16> = match (addr, v6) {
                    (IpAddr::V4(a), false) => a.octets().iter().map(|&o| u16::from(o)).collect(),
                    (IpAddr::V6(a), true) => a.segments().to_vec(),
                    _ => return false,
                };
                parts.starts_with(prefix) && (*first..=*last).contains(&parts[prefix.len()])
            }
        }
    }
}

fn parse_one(text: &str) -> Result<IpAddr, String> {
    text.trim()
        .parse::<IpAddr>()
        .map_err(|_| format!("NetAddress examine Exception netAddress is {text}"))
}

/// `a.b.c.{x,y}` or `a:b::{x,y}`: the text before `{` followed by each listed part.
fn parse_braces(text: &str) -> Result<AddressPattern, String> {
    let v6 = text.contains(':');
    let separator = if v6 { ':' } else { '.' };
    let parts: Vec<&str> = text.split(separator).filter(|p| !p.is_empty()).collect();
    if !v6 && parts.len() < 4 {
        return Err(format!(
            "MultipleRemoteAddressStrategy has got a/some wrong format IP(s): {text} "
        ));
    }
    let last = parts.last().copied().unwrap_or_default();
    if !last.starts_with('{') {
        return Err(format!(
            "MultipleRemoteAddressStrategy netAddress examine scope Exception netAddress: {text}"
        ));
    }
    let head = &text[..text.find('{').unwrap_or(0)];
    let listed = last[1..last.len() - 1].split(',').filter(|p| !p.is_empty());
    listed
        .map(|tail| parse_one(&format!("{head}{tail}")))
        .collect::<Result<_, _>>()
        .map(AddressPattern::Set)
}

/// A prefix of literal parts, then `*` or `start-end` at the first wildcard part (not the
/// first part), then anything.
fn parse_range(text: &str) -> Result<AddressPattern, String> {
    let v6 = text.contains(':');
    let (separator, radix, part_count, max) = if v6 {
        (':', 16, 8, 0xffff)
    } else {
        ('.', 10, 4, 255)
    };
    let scope_error = || format!("NetAddress examine scope Exception netAddress is {text}");
    let parts: Vec<&str> = text.split(separator).filter(|p| !p.is_empty()).collect();
    let wildcard_at = (1..parts.len().min(part_count))
        .find(|&i| parts[i].trim() == "*" || parts[i].contains('-'))
        .ok_or_else(scope_error)?;
    let prefix = parts[..wildcard_at]
        .iter()
        .map(|p| {
            u16::from_str_radix(p.trim(), radix)
                .ok()
                .filter(|&v| v <= max)
        })
        .collect::<Option<Vec<u16>>>()
        .ok_or_else(scope_error)?;
    let wildcard = parts[wildcard_at].trim();
    let (first, last) = if wildcard == "*" {
        (0, max)
    } else {
        let range_error = || {
            format!(
                "RangeRemoteAddressStrategy netAddress examine scope Exception value {wildcard} "
            )
        };
        if wildcard.starts_with('-') {
            return Err(range_error());
        }
        let (a, b) = wildcard.split_once('-').ok_or_else(range_error)?;
        let a = u16::from_str_radix(a, radix).map_err(|_| range_error())?;
        let b = u16::from_str_radix(b, radix).map_err(|_| range_error())?;
        if a > b || b > max {
            return Err(format!(
                "RangeRemoteAddressStrategy netAddress examine scope Exception start is {a} , end is {b}"
            ));
        }
        (a, b)
    };
    Ok(AddressPattern::Range {
        v6,
        prefix,
        first,
        last,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn matches(pattern: &str, addr: &str) -> bool {
        AddressPattern::parse(pattern).unwrap().matches(ip(addr))
    }

    #[test]
    fn blank_matches_nothing_and_star_forms_match_everything() {
        assert!(!matches("", "127.0.0.1"));
        for star in ["*", "*.*.*.*", "*:*:*:*:*:*:*:*"] {
            assert!(matches(star, "10.1.2.3"));
            assert!(matches(star, "::1"));
        }
    }

    #[test]
    fn single_list_and_brace_forms() {
        assert!(matches("192.168.1.7", "192.168.1.7"));
        assert!(!matches("192.168.1.7", "192.168.1.8"));
        assert!(matches("::1", "0:0:0:0:0:0:0:1"));
        assert!(matches("192.168.1.1,192.168.1.2", "192.168.1.2"));
        assert!(matches("192.168.1.{1,2,3}", "192.168.1.3"));
        assert!(!matches("192.168.1.{1,2,3}", "192.168.1.4"));
        assert!(matches("1050::{1,2}", "1050:0:0:0:0:0:0:2"));
        assert!(matches("127.0.0.1", "::ffff:127.0.0.1"));
    }

    #[test]
    fn ranges_compare_the_prefix_and_one_part() {
        assert!(matches("192.168.*.*", "192.168.200.1"));
        assert!(!matches("192.168.*.*", "192.169.0.1"));
        assert!(matches("192.168.1.1-100", "192.168.1.100"));
        assert!(!matches("192.168.1.1-100", "192.168.1.101"));
        assert!(matches("10.*", "10.9.9.9"));
        assert!(matches("1050:0:0:0:5:600:300c:*", "1050::5:600:300c:326b"));
        assert!(matches("1050:0:0:0:5:600:300c:1-ff", "1050::5:600:300c:ff"));
        assert!(!matches(
            "1050:0:0:0:5:600:300c:1-ff",
            "1050::5:600:300c:100"
        ));
        assert!(!matches("192.168.*.*", "::1"));
    }

    #[test]
    fn upstream_refuses_these_and_so_does_ringmq() {
        for bad in [
            "192.168.1.300",
            "192.168.{1,2}",
            "192.168.1.{1,2,300}",
            "192.168.1.-5",
            "192.168.1.9-5",
            "192.168.1.1-300",
            "*.168.1.1-5x",
            "host.example",
        ] {
            assert!(AddressPattern::parse(bad).is_err(), "{bad}");
        }
    }
}
