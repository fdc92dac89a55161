//! Key/value bodies and Java properties text.
//!
//! - `KVTable` (`{"table":{k:v}}`): GET_KVLIST_BY_NAMESPACE answers and the ordered-topic
//!   config a name server returns to a registering broker (`headers.md` §8.2, §8.5).
//! - `KVConfigSerializeWrapper` (`{"configTable":{namespace:{k:v}}}`): the name server's
//!   `kvConfig.json` file.
//! - [`Properties`]: `java.util.Properties` text as `broker.conf`, `namesrv.conf` and the
//!   GET/UPDATE_NAMESRV_CONFIG bodies use it. Parsing follows `Properties.load` (comments,
//!   `=`/`:`/whitespace separators, backslash escapes and line continuations); the text is
//!   taken as UTF-8, which is what every RocketMQ file in practice holds.

use std::collections::BTreeMap;
use std::fmt;

use crate::json::{self, read, BodyError, ObjectBuilder, Value};

/// `KVTable`: one namespace's key → value map.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KvTable {
    pub table: BTreeMap<String, String>,
}

impl KvTable {
    pub fn encode(&self) -> String {
        ObjectBuilder::new()
            .field(
                "table",
                json::map_value(self.table.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
            )
            .build()
            .to_json()
    }

    pub fn decode(body: &[u8]) -> Result<Self, BodyError> {
        Ok(Self {
            table: read::string_map(&json::parse(body)?, "table", "")?,
        })
    }
}

/// `KVConfigSerializeWrapper`: every namespace's table, as persisted in `kvConfig.json`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KvConfigSerializeWrapper {
    pub config_table: BTreeMap<String, BTreeMap<String, String>>,
}

impl KvConfigSerializeWrapper {
    pub fn to_value(&self) -> Value {
        ObjectBuilder::new()
            .field(
                "configTable",
                json::map_value(self.config_table.iter().map(|(ns, table)| {
                    (
                        ns.as_str(),
                        json::map_value(table.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
                    )
                })),
            )
            .build()
    }

    /// Compact JSON, as the Java name server writes the file (`toJson()`).
    pub fn encode(&self) -> String {
        self.to_value().to_json()
    }

    pub fn decode(text: &[u8]) -> Result<Self, BodyError> {
        let v = json::parse(text)?;
        let mut config_table = BTreeMap::new();
        for (ns, table) in read::entries(&v, "configTable", "")? {
            let ns = ns
                .key_text()
                .ok_or_else(|| BodyError::field("configTable", "namespace keys"))?;
            let wrapped = Value::Object(vec![(Value::str(ns), table.clone())]);
            config_table.insert(
                ns.to_owned(),
                read::string_map(&wrapped, ns, "configTable")?,
            );
        }
        Ok(Self { config_table })
    }
}

/// Ordered `java.util.Properties` content: key → value, first-seen key order, later
/// duplicates overwrite (as `Properties.load` does).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Properties {
    entries: Vec<(String, String)>,
}

/// Why properties text could not be read (Java: `IllegalArgumentException` from `load`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PropertiesError {
    /// 1-based line where the bad logical line starts.
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for PropertiesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "properties line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for PropertiesError {}

impl Properties {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key`, keeping its position if present.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<String>) {
        let key = key.into();
        let value = value.into();
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.entries.push((key, value)),
        }
    }

    pub fn remove(&mut self, key: &str) -> Option<String> {
        let index = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(index).1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Parses properties text with `Properties.load` rules.
    pub fn parse(text: &str) -> Result<Self, PropertiesError> {
        let mut props = Properties::new();
        let lines: Vec<&str> = text.split('\n').collect();
        let mut i = 0;
        while i < lines.len() {
            let start_line = i + 1;
            let first = strip_leading_ws(lines[i].strip_suffix('\r').unwrap_or(lines[i]));
            i += 1;
            if first.is_empty() || first.starts_with('#') || first.starts_with('!') {
                continue;
            }
            // Join continuation lines: an odd count of trailing backslashes continues.
            let mut logical = String::from(first);
            while ends_with_odd_backslashes(&logical) && i <= lines.len() {
                logical.pop();
                if i == lines.len() {
                    break;
                }
                let next = lines[i].strip_suffix('\r').unwrap_or(lines[i]);
                logical.push_str(strip_leading_ws(next));
                i += 1;
            }
            let (key, value) = split_key_value(&logical);
            let key = unescape(key).map_err(|reason| PropertiesError {
                line: start_line,
                reason,
            })?;
            let value = unescape(value).map_err(|reason| PropertiesError {
                line: start_line,
                reason,
            })?;
            props.set(key, value);
        }
        Ok(props)
    }

    /// `key=value` lines, unescaped, in insertion order: the shape of RocketMQ's
    /// `MixAll.properties2String` (GET_NAMESRV_CONFIG bodies, `-p` output, persisted
    /// `namesrv.properties`).
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for (k, v) in &self.entries {
            out.push_str(k);
            out.push('=');
            out.push_str(v);
            out.push('\n');
        }
        out
    }

    /// `key=value` lines escaped so that [`Properties::parse`] (and Java) read back
    /// exactly these keys and values.
    pub fn to_text_escaped(&self) -> String {
        let mut out = String::new();
        for (k, v) in &self.entries {
            escape_into(&mut out, k, true);
            out.push('=');
            escape_into(&mut out, v, false);
            out.push('\n');
        }
        out
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Properties {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut props = Properties::new();
        for (k, v) in iter {
            props.set(k, v);
        }
        props
    }
}

fn is_prop_ws(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\u{c}')
}

fn strip_leading_ws(s: &str) -> &str {
    s.trim_start_matches(is_prop_ws)
}

fn ends_with_odd_backslashes(s: &str) -> bool {
    s.bytes().rev().take_while(|b| *b == b'\\').count() % 2 == 1
}

/// Splits a logical line at the first unescaped `=`, `:` or whitespace; the separator
/// (whitespace, then at most one `=`/`:`, then whitespace) is dropped.
fn split_key_value(line: &str) -> (&str, &str) {
    let bytes = line.as_bytes();
    let mut i = 0;
    let mut key_end = line.len();
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'=' | b':' | b' ' | b'\t' | 0x0C => {
                key_end = i;
                break;
            }
            _ => i += 1,
        }
    }
    let key_end = key_end.min(line.len());
    let mut rest = &line[key_end..];
    rest = strip_leading_ws(rest);
    if let Some(r) = rest.strip_prefix('=').or_else(|| rest.strip_prefix(':')) {
        rest = strip_leading_ws(r);
    }
    (&line[..key_end], rest)
}

fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            None => {}
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\u{c}'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                let code = (hex.len() == 4)
                    .then(|| u32::from_str_radix(&hex, 16).ok())
                    .flatten()
                    .ok_or_else(|| format!("malformed \\uxxxx encoding \\u{hex}"))?;
                out.push(char::from_u32(code).unwrap_or('\u{FFFD}'));
            }
            Some(other) => out.push(other),
        }
    }
    Ok(out)
}

fn escape_into(out: &mut String, s: &str, is_key: bool) {
    for (i, c) in s.chars().enumerate() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{c}' => out.push_str("\\f"),
            '=' | ':' | '#' | '!' => {
                out.push('\\');
                out.push(c);
            }
            ' ' if is_key || i == 0 => out.push_str("\\ "),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_table_and_wrapper_shapes() {
        let table = KvTable {
            table: [("T1".to_string(), "broker-a:4".to_string())].into(),
        };
        assert_eq!(table.encode(), r#"{"table":{"T1":"broker-a:4"}}"#);
        assert_eq!(KvTable::decode(table.encode().as_bytes()).unwrap(), table);

        let mut wrapper = KvConfigSerializeWrapper::default();
        wrapper
            .config_table
            .insert("ORDER_TOPIC_CONFIG".into(), table.table.clone());
        let text = wrapper.encode();
        assert_eq!(
            text,
            r#"{"configTable":{"ORDER_TOPIC_CONFIG":{"T1":"broker-a:4"}}}"#
        );
        assert_eq!(
            KvConfigSerializeWrapper::decode(text.as_bytes()).unwrap(),
            wrapper
        );
        assert!(KvConfigSerializeWrapper::decode(br#"{"configTable":{"ns":[1]}}"#).is_err());
    }

    #[test]
    fn properties_load_rules() {
        let text = "# comment\n! also comment\n\n  listenPort = 9876\r\nkey:value\nspaced key here\n\
                    path=/a\\\n     /b\nesc=tab\\there\\u0041\nempty=\nnosep\nlistenPort=9877\nk\\=x=v\\\\\n";
        let p = Properties::parse(text).unwrap();
        assert_eq!(p.get("listenPort"), Some("9877"));
        assert_eq!(p.get("key"), Some("value"));
        assert_eq!(p.get("spaced"), Some("key here"));
        assert_eq!(p.get("path"), Some("/a/b"));
        assert_eq!(p.get("esc"), Some("tab\thereA"));
        assert_eq!(p.get("empty"), Some(""));
        assert_eq!(p.get("nosep"), Some(""));
        assert_eq!(p.get("k=x"), Some("v\\"));
        assert_eq!(p.iter().next().map(|(k, _)| k), Some("listenPort"));
    }

    #[test]
    fn properties_errors_name_the_line() {
        let err = Properties::parse("a=1\nb=\\u00zz\n").unwrap_err();
        assert_eq!(err.line, 2);
        assert!(err.to_string().contains("malformed"), "{err}");
    }

    #[test]
    fn trailing_backslash_at_end_of_input() {
        let p = Properties::parse("a=b\\").unwrap();
        assert_eq!(p.get("a"), Some("b"));
    }

    #[test]
    fn text_forms() {
        let p: Properties = [("b", "2"), ("a", "x y"), ("k:ey", " lead\\")]
            .into_iter()
            .collect();
        assert_eq!(p.to_text(), "b=2\na=x y\nk:ey= lead\\\n");
        let back = Properties::parse(&p.to_text_escaped()).unwrap();
        assert_eq!(back, p);
    }
}
