//! Value formats mqadmin prints and parses: local timestamps (`2024-01-02 03:04:05,678`),
//! the `yyyy-MM-dd#HH:mm:ss:SSS` input form, perm strings (`RW-`), MQVersion names
//! (`V5_3_3`), Java `Double.toString` and `Map.toString` text, and column truncation.

use std::collections::BTreeMap;

use ringmq_remoting::body::stats::java_double;
use ringmq_remoting::json::Value;

/// `UtilAll.frontStringAtLeast`: at most the first `n` characters.
pub fn front(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// Broken-down local time of a millisecond timestamp: (year, month, day, hour, min, sec, ms).
fn local_parts(ms: i64) -> (i64, i64, i64, i64, i64, i64, i64) {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let t: libc::time_t = secs as libc::time_t;
    // SAFETY: `tm` is plain data filled by localtime_r; both pointers are valid for the call.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return (1970, 1, 1, 0, 0, 0, millis);
        }
        tm
    };
    (
        tm.tm_year as i64 + 1900,
        tm.tm_mon as i64 + 1,
        tm.tm_mday as i64,
        tm.tm_hour as i64,
        tm.tm_min as i64,
        tm.tm_sec as i64,
        millis,
    )
}

/// `UtilAll.timeMillisToHumanString2`: `yyyy-MM-dd HH:mm:ss,SSS` in local time.
pub fn human_time(ms: i64) -> String {
    let (y, mo, d, h, mi, s, milli) = local_parts(ms);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02},{milli:03}")
}

/// `yyyy-MM-dd HH:mm:ss` in local time (consumerProgress' last-consume column).
pub fn date_time(ms: i64) -> String {
    let (y, mo, d, h, mi, s, _) = local_parts(ms);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}")
}

/// `yyyy-MM-dd HH:mm:ss` at a fixed offset from UTC (clusterRT's tlog lines use GMT+8).
pub fn date_time_at_offset(ms: i64, offset_hours: i64) -> String {
    let secs = ms.div_euclid(1000) + offset_hours * 3600;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, mo, d) = civil_from_days(days);
    format!(
        "{y:04}-{mo:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// A timestamp option: milliseconds since the epoch, or local `yyyy-MM-dd#HH:mm:ss:SSS`.
pub fn parse_timestamp(text: &str) -> Result<i64, String> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    let bad = || format!("{text:?} is neither milliseconds nor yyyy-MM-dd#HH:mm:ss:SSS");
    let (date, time) = text.split_once('#').ok_or_else(bad)?;
    let d: Vec<&str> = date.split('-').collect();
    let t: Vec<&str> = time.split(':').collect();
    if d.len() != 3 || t.len() != 4 {
        return Err(bad());
    }
    let n = |s: &str| s.parse::<i32>().map_err(|_| bad());
    let (year, month, day) = (n(d[0])?, n(d[1])?, n(d[2])?);
    let (hour, min, sec, milli) = (n(t[0])?, n(t[1])?, n(t[2])?, n(t[3])?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || min > 59
        || sec > 60
        || !(0..1000).contains(&milli)
    {
        return Err(bad());
    }
    // SAFETY: `tm` is plain data; mktime reads and normalises it in place.
    let secs = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        tm.tm_year = year - 1900;
        tm.tm_mon = month - 1;
        tm.tm_mday = day;
        tm.tm_hour = hour;
        tm.tm_min = min;
        tm.tm_sec = sec;
        tm.tm_isdst = -1;
        libc::mktime(&mut tm)
    };
    if secs == -1 {
        return Err(bad());
    }
    Ok(secs as i64 * 1000 + milli as i64)
}

/// `PermName.perm2String`: `R`, `W`, `X` (inherit) or `-` in that order.
pub fn perm_string(perm: i32) -> String {
    let mut s = String::with_capacity(3);
    s.push(if perm & 4 != 0 { 'R' } else { '-' });
    s.push(if perm & 2 != 0 { 'W' } else { '-' });
    s.push(if perm & 1 != 0 { 'X' } else { '-' });
    s
}

/// Release lines of `MQVersion.Version` after the sixteen 3.0.0 pre-releases: (major,
/// minor, first patch, last patch); each patch is a `_SNAPSHOT` then a release entry.
const VERSION_RUNS: &[(u32, u32, u32, u32)] = &[
    (3, 0, 1, 15),
    (3, 1, 0, 9),
    (3, 2, 0, 9),
    (3, 3, 1, 9),
    (3, 4, 1, 9),
    (3, 5, 1, 9),
    (3, 6, 1, 9),
    (3, 7, 1, 9),
    (3, 8, 1, 9),
    (3, 9, 1, 9),
    (4, 0, 0, 9),
    (4, 1, 0, 9),
    (4, 2, 0, 9),
    (4, 3, 0, 9),
    (4, 4, 0, 9),
    (4, 5, 0, 9),
    (4, 6, 0, 9),
    (4, 7, 0, 9),
    (4, 8, 0, 9),
    (4, 9, 0, 9),
    (5, 0, 0, 9),
    (5, 1, 0, 9),
    (5, 2, 0, 9),
    (5, 3, 0, 9),
    (5, 4, 0, 9),
    (5, 5, 0, 9),
    (5, 6, 0, 9),
    (5, 7, 0, 9),
    (5, 8, 0, 9),
    (5, 9, 0, 9),
];

const V3_0_0_PRE: &[&str] = &[
    "V3_0_0_SNAPSHOT",
    "V3_0_0_ALPHA1",
    "V3_0_0_BETA1",
    "V3_0_0_BETA2",
    "V3_0_0_BETA3",
    "V3_0_0_BETA4",
    "V3_0_0_BETA5",
    "V3_0_0_BETA6_SNAPSHOT",
    "V3_0_0_BETA6",
    "V3_0_0_BETA7_SNAPSHOT",
    "V3_0_0_BETA7",
    "V3_0_0_BETA8_SNAPSHOT",
    "V3_0_0_BETA8",
    "V3_0_0_BETA9_SNAPSHOT",
    "V3_0_0_BETA9",
    "V3_0_0_FINAL",
];

/// `MQVersion.getVersionDesc`: the name of a version ordinal; ordinals past the table
/// name the last entry.
pub fn version_desc(ordinal: i32) -> String {
    let ordinal = ordinal.max(0) as usize;
    if ordinal < V3_0_0_PRE.len() {
        return V3_0_0_PRE[ordinal].to_string();
    }
    let mut rest = ordinal - V3_0_0_PRE.len();
    let mut last = String::new();
    for &(major, minor, first, end) in VERSION_RUNS {
        for patch in first..=end {
            let name = format!("V{major}_{minor}_{patch}");
            if rest == 0 {
                return format!("{name}_SNAPSHOT");
            }
            if rest == 1 {
                return name;
            }
            rest -= 2;
            last = name;
        }
    }
    last
}

/// Java `Double.toString` text (`0.0`, `12.5`, `1.0E7`).
pub fn java_double_text(d: f64) -> String {
    match java_double(d) {
        Value::Number(s) => s,
        _ => {
            if d.is_nan() {
                "NaN".into()
            } else if d > 0.0 {
                "Infinity".into()
            } else {
                "-Infinity".into()
            }
        }
    }
}

/// Java `Map.toString` of string pairs: `{k1=v1, k2=v2}`.
pub fn java_map<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let parts: Vec<String> = entries
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

/// A JSON object of string pairs.
pub fn string_map_value(map: &BTreeMap<String, String>) -> Value {
    object(
        map.iter()
            .map(|(k, v)| (k.as_str(), Value::str(v.as_str()))),
    )
}

/// A JSON object with data keys in the given order (bean-shaped objects use
/// `ObjectBuilder`, which insists on alphabetical keys).
pub fn object<K: Into<String>>(entries: impl IntoIterator<Item = (K, Value)>) -> Value {
    Value::Object(
        entries
            .into_iter()
            .map(|(k, v)| (Value::String(k.into()), v))
            .collect(),
    )
}

/// A JSON number from a double (`null` when not finite).
pub fn double_value(d: f64) -> Value {
    java_double(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_names_follow_the_enum() {
        assert_eq!(version_desc(0), "V3_0_0_SNAPSHOT");
        assert_eq!(version_desc(15), "V3_0_0_FINAL");
        assert_eq!(version_desc(16), "V3_0_1_SNAPSHOT");
        assert_eq!(version_desc(17), "V3_0_1");
        assert_eq!(version_desc(401), "V4_9_4");
        assert_eq!(version_desc(479), "V5_3_3");
        assert_eq!(version_desc(611), "V5_9_9");
        assert_eq!(version_desc(5000), "V5_9_9");
    }

    #[test]
    fn perm_strings() {
        assert_eq!(perm_string(6), "RW-");
        assert_eq!(perm_string(7), "RWX");
        assert_eq!(perm_string(4), "R--");
        assert_eq!(perm_string(2), "-W-");
        assert_eq!(perm_string(0), "---");
    }

    #[test]
    fn timestamps_round_trip_through_local_time() {
        assert_eq!(parse_timestamp("1700000000123").unwrap(), 1_700_000_000_123);
        let ms = parse_timestamp("2024-02-29#13:14:15:016").unwrap();
        assert_eq!(human_time(ms), "2024-02-29 13:14:15,016");
        assert_eq!(date_time(ms), "2024-02-29 13:14:15");
        assert!(parse_timestamp("yesterday").is_err());
        assert!(parse_timestamp("2024-13-01#00:00:00:000").is_err());
    }

    #[test]
    fn fixed_offset_dates() {
        assert_eq!(date_time_at_offset(0, 8), "1970-01-01 08:00:00");
        assert_eq!(
            date_time_at_offset(1_709_164_800_000, 0),
            "2024-02-29 00:00:00"
        );
        assert_eq!(
            date_time_at_offset(1_709_164_799_000, 8),
            "2024-02-29 07:59:59"
        );
    }

    #[test]
    fn java_texts() {
        assert_eq!(java_double_text(0.0), "0.0");
        assert_eq!(java_double_text(12.5), "12.5");
        assert_eq!(
            java_map([("0", "10.0.0.1:10911"), ("1", "10.0.0.2:10911")]),
            "{0=10.0.0.1:10911, 1=10.0.0.2:10911}"
        );
        assert_eq!(front("abcdef", 3), "abc");
        assert_eq!(front("ab", 3), "ab");
    }
}
