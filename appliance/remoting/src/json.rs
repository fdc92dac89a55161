//! Lenient JSON reading and compact (or fastjson-pretty) writing, shared by every body and
//! persisted config file (`headers.md` §0.2).
//!
//! RocketMQ's Java peers write bodies with fastjson 1.2.83, whose default output is not
//! valid JSON: `Long`-keyed maps come out with bare numeric keys (`{0:"10.0.0.1:10911"}`)
//! and object-keyed maps (MessageQueue → offset) with the key object itself
//! (`{{"brokerName":"b","queueId":0,"topic":"T"}:12}`). fastjson's parser is lenient too,
//! and clients exploit it (single quotes, bare identifier keys, trailing commas). This
//! reader accepts all of that and produces a small [`Value`] tree that keeps object keys in
//! wire order and keeps each key as a [`Value`] (string, number or object), so a body
//! decoder can walk any of those shapes.
//!
//! Numbers keep their source text ([`Value::Number`]): nothing is lost to `f64` rounding,
//! and the accessors parse on demand (leniently: `"123"` reads as a number where Java's
//! parser would accept it).
//!
//! The writer emits compact JSON (no whitespace — the Go client splits raw text on `,` and
//! `:`) with object keys in the order the tree holds them. Body encoders build their
//! objects with keys in alphabetical order, as fastjson does ([`ObjectBuilder`] checks it
//! in debug builds). Numeric keys are quoted by default (standard JSON, accepted by every
//! client); [`KeyStyle::Bare`] reproduces fastjson's legacy form byte for byte.

use std::fmt;

/// Nesting bound for the reader: deeper input is refused rather than risking the stack.
/// Real bodies nest fewer than 10 levels.
pub const MAX_JSON_DEPTH: usize = 128;

/// A parsed JSON (or fastjson) value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Null,
    Bool(bool),
    /// The number's source text, e.g. `-12`, `1700000000000`, `0.5`, `1E10`.
    Number(String),
    String(String),
    Array(Vec<Value>),
    /// Entries in wire order. A key is a [`Value::String`] (quoted or bare identifier),
    /// a [`Value::Number`] (fastjson's bare numeric keys) or a [`Value::Object`]
    /// (fastjson's object keys). Duplicate keys are kept; [`Value::get`] finds the first.
    Object(Vec<(Value, Value)>),
}

/// Why text could not be read as (lenient) JSON: the byte offset and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    pub offset: usize,
    pub reason: String,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid JSON at byte {}: {}", self.offset, self.reason)
    }
}

impl std::error::Error for JsonError {}

/// Why a body could not be decoded: either not JSON at all, or JSON of the wrong shape.
/// The message names the field, so a log line tells the peer's developer what to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    Syntax(JsonError),
    /// A field is missing or has the wrong type; `path` is dotted (`brokerDatas[0].cluster`).
    Field {
        path: String,
        expected: &'static str,
    },
    /// A binary layout (e.g. the compressed register body) is truncated or inconsistent.
    Layout(String),
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Syntax(e) => write!(f, "{e}"),
            Self::Field { path, expected } => write!(f, "body field {path}: expected {expected}"),
            Self::Layout(why) => write!(f, "malformed body: {why}"),
        }
    }
}

impl std::error::Error for BodyError {}

impl From<JsonError> for BodyError {
    fn from(e: JsonError) -> Self {
        BodyError::Syntax(e)
    }
}

impl BodyError {
    pub fn field(path: impl Into<String>, expected: &'static str) -> Self {
        BodyError::Field {
            path: path.into(),
            expected,
        }
    }
}

/// Parses one lenient JSON value from `input`; surrounding whitespace (and a UTF-8 BOM)
/// is allowed, anything else after the value is an error.
pub fn parse(input: &[u8]) -> Result<Value, JsonError> {
    let mut reader = Reader { input, pos: 0 };
    if input.starts_with(&[0xEF, 0xBB, 0xBF]) {
        reader.pos = 3;
    }
    reader.skip_ws();
    let value = reader.value(0)?;
    reader.skip_ws();
    // Some peers NUL-pad fixed buffers; fastjson stops at the end of the value too.
    while reader.pos < input.len() && input[reader.pos] == 0 {
        reader.pos += 1;
    }
    if reader.pos != input.len() {
        return Err(reader.error("trailing characters after the JSON value"));
    }
    Ok(value)
}

/// [`parse`] for text.
pub fn parse_str(input: &str) -> Result<Value, JsonError> {
    parse(input.as_bytes())
}

struct Reader<'a> {
    input: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn error(&self, reason: impl Into<String>) -> JsonError {
        JsonError {
            offset: self.pos,
            reason: reason.into(),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.input.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b) = self.peek() {
            if matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0C) {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), JsonError> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(format!("expected '{}'", byte as char)))
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, JsonError> {
        if depth >= MAX_JSON_DEPTH {
            return Err(self.error(format!("nesting deeper than {MAX_JSON_DEPTH} levels")));
        }
        match self.peek() {
            None => Err(self.error("unexpected end of input")),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(q @ (b'"' | b'\'')) => Ok(Value::String(self.string(q)?)),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b) if is_ident_start(b) => {
                let start = self.pos;
                let word = self.ident().to_owned();
                match word.as_str() {
                    "true" => Ok(Value::Bool(true)),
                    "false" => Ok(Value::Bool(false)),
                    "null" | "undefined" => Ok(Value::Null),
                    _ => Err(JsonError {
                        offset: start,
                        reason: format!("unexpected word {word:?}"),
                    }),
                }
            }
            Some(b) => Err(self.error(format!("unexpected character {:?}", b as char))),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, JsonError> {
        self.expect(b'{')?;
        let mut entries = Vec::new();
        loop {
            self.skip_ws();
            match self.peek() {
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Value::Object(entries));
                }
                Some(b',') if !entries.is_empty() => {
                    // Tolerate `,,` and a trailing comma the way fastjson does.
                    self.pos += 1;
                    continue;
                }
                _ => {}
            }
            let key = self.key(depth)?;
            self.skip_ws();
            self.expect(b':')?;
            self.skip_ws();
            let value = self.value(depth + 1)?;
            entries.push((key, value));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {}
                _ => return Err(self.error("expected ',' or '}' in object")),
            }
        }
    }

    fn key(&mut self, depth: usize) -> Result<Value, JsonError> {
        match self.peek() {
            Some(q @ (b'"' | b'\'')) => Ok(Value::String(self.string(q)?)),
            Some(b'{' | b'[') => self.value(depth + 1),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b) if is_ident_start(b) => Ok(Value::String(self.ident().to_owned())),
            _ => Err(self.error("expected an object key")),
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, JsonError> {
        self.expect(b'[')?;
        let mut items = Vec::new();
        loop {
            self.skip_ws();
            match self.peek() {
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                Some(b',') if !items.is_empty() => {
                    self.pos += 1;
                    continue;
                }
                _ => {}
            }
            items.push(self.value(depth + 1)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {}
                _ => return Err(self.error("expected ',' or ']' in array")),
            }
        }
    }

    fn ident(&mut self) -> &str {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|b| is_ident_start(b) || b.is_ascii_digit())
        {
            self.pos += 1;
        }
        // Identifier bytes are ASCII by construction.
        std::str::from_utf8(&self.input[start..self.pos]).unwrap_or_default()
    }

    fn number(&mut self) -> Result<Value, JsonError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        let digits_start = self.pos;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
        if self.pos == digits_start {
            return Err(self.error("expected digits"));
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            while self.peek().is_some_and(|b| b.is_ascii_digit()) {
                self.pos += 1;
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            let exp_start = self.pos;
            while self.peek().is_some_and(|b| b.is_ascii_digit()) {
                self.pos += 1;
            }
            if self.pos == exp_start {
                return Err(self.error("expected exponent digits"));
            }
        }
        let text = std::str::from_utf8(&self.input[start..self.pos]).unwrap_or_default();
        // fastjson may suffix longs with 'L' in some modes; accept and drop it.
        if matches!(self.peek(), Some(b'L' | b'l')) {
            self.pos += 1;
        }
        Ok(Value::Number(text.to_owned()))
    }

    fn string(&mut self, quote: u8) -> Result<String, JsonError> {
        self.expect(quote)?;
        let mut bytes: Vec<u8> = Vec::new();
        loop {
            let Some(b) = self.peek() else {
                return Err(self.error("unterminated string"));
            };
            self.pos += 1;
            if b == quote {
                break;
            }
            if b != b'\\' {
                bytes.push(b);
                continue;
            }
            let Some(esc) = self.peek() else {
                return Err(self.error("unterminated escape"));
            };
            self.pos += 1;
            let ch = match esc {
                b'"' => '"',
                b'\'' => '\'',
                b'\\' => '\\',
                b'/' => '/',
                b'b' => '\u{8}',
                b'f' => '\u{c}',
                b'n' => '\n',
                b'r' => '\r',
                b't' => '\t',
                b'x' => char::from(self.hex(2)? as u8),
                b'u' => {
                    let first = self.hex(4)?;
                    if (0xD800..0xDC00).contains(&first)
                        && self.input[self.pos..].starts_with(b"\\u")
                    {
                        let save = self.pos;
                        self.pos += 2;
                        let second = self.hex(4)?;
                        if (0xDC00..0xE000).contains(&second) {
                            let c = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
                            char::from_u32(c).unwrap_or('\u{FFFD}')
                        } else {
                            self.pos = save;
                            '\u{FFFD}'
                        }
                    } else {
                        char::from_u32(first).unwrap_or('\u{FFFD}')
                    }
                }
                other => {
                    return Err(JsonError {
                        offset: self.pos - 1,
                        reason: format!("invalid escape '\\{}'", other as char),
                    })
                }
            };
            let mut buf = [0u8; 4];
            bytes.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
        }
        String::from_utf8(bytes).map_err(|_| self.error("string is not valid UTF-8"))
    }

    fn hex(&mut self, digits: usize) -> Result<u32, JsonError> {
        let end = self.pos + digits;
        let text = self
            .input
            .get(self.pos..end)
            .and_then(|s| std::str::from_utf8(s).ok())
            .ok_or_else(|| self.error("truncated hex escape"))?;
        let value = u32::from_str_radix(text, 16).map_err(|_| self.error("invalid hex escape"))?;
        self.pos = end;
        Ok(value)
    }
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b'$'
}

impl Value {
    /// A string value.
    pub fn str(s: impl Into<String>) -> Value {
        Value::String(s.into())
    }

    /// An integer value.
    pub fn int(n: i64) -> Value {
        Value::Number(n.to_string())
    }

    /// The value under `key` in an object: a string key or a bare numeric key whose text
    /// equals `key`. `None` for non-objects and absent keys.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(entries) => entries
                .iter()
                .find(|(k, _)| k.key_text() == Some(key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// `get`, treating an explicit `null` as absent (fastjson omits nulls, others write them).
    pub fn get_present(&self, key: &str) -> Option<&Value> {
        self.get(key).filter(|v| !v.is_null())
    }

    /// The text of a string or numeric key.
    pub fn key_text(&self) -> Option<&str> {
        match self {
            Value::String(s) | Value::Number(s) => Some(s),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// An integer, leniently: a JSON integer, an integral float (`3.0`), or a string
    /// holding one (fastjson accepts `"subVersion":"1700000000000"`).
    pub fn as_i64(&self) -> Option<i64> {
        let text = match self {
            Value::Number(s) | Value::String(s) => s.trim(),
            _ => return None,
        };
        if let Ok(n) = text.parse::<i64>() {
            return Some(n);
        }
        let f = text.parse::<f64>().ok()?;
        (f.fract() == 0.0 && f.abs() < 9.0e18).then_some(f as i64)
    }

    pub fn as_i32(&self) -> Option<i32> {
        self.as_i64().and_then(|n| i32::try_from(n).ok())
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Number(s) | Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    /// A boolean, leniently: `true`/`false`, the strings `"true"`/`"false"` (any case),
    /// and `1`/`0` as numbers or strings.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            Value::Number(s) | Value::String(s) => match s.trim() {
                t if t.eq_ignore_ascii_case("true") || t == "1" => Some(true),
                t if t.eq_ignore_ascii_case("false") || t == "0" => Some(false),
                _ => None,
            },
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }

    pub fn as_object(&self) -> Option<&[(Value, Value)]> {
        match self {
            Value::Object(entries) => Some(entries),
            _ => None,
        }
    }

    /// Compact JSON with numeric keys quoted: standard JSON every client reads.
    pub fn to_json(&self) -> String {
        let mut out = String::new();
        write_value(&mut out, self, KeyStyle::Quoted, None);
        out
    }

    /// Compact fastjson default form: numeric keys bare (`{0:"a"}`), object keys inline.
    pub fn to_fastjson(&self) -> String {
        let mut out = String::new();
        write_value(&mut out, self, KeyStyle::Bare, None);
        out
    }

    /// fastjson's `PrettyFormat` shape (tab indentation, `"key":value`), used for the
    /// persisted config files RocketMQ writes with `toJson(true)`.
    pub fn to_pretty_json(&self) -> String {
        let mut out = String::new();
        write_value(&mut out, self, KeyStyle::Quoted, Some(0));
        out
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::String(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::String(s)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Self {
        Value::int(n)
    }
}

impl From<i32> for Value {
    fn from(n: i32) -> Self {
        Value::int(i64::from(n))
    }
}

/// How numeric object keys are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyStyle {
    /// `{"0":"a"}` — standard JSON; fastjson, Go and C++ all accept it.
    Quoted,
    /// `{0:"a"}` — fastjson's default output, what a Java peer writes.
    Bare,
}

/// Writes `value` to `out`. `indent` = `None` for compact output, `Some(level)` for
/// fastjson-pretty output starting at `level`.
pub fn write_value(out: &mut String, value: &Value, keys: KeyStyle, indent: Option<usize>) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(n),
        Value::String(s) => write_str(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, indent.map(|l| l + 1));
                write_value(out, item, keys, indent.map(|l| l + 1));
            }
            if !items.is_empty() {
                newline(out, indent);
            }
            out.push(']');
        }
        Value::Object(entries) => {
            out.push('{');
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, indent.map(|l| l + 1));
                match (k, keys) {
                    (Value::Number(n), KeyStyle::Bare) => out.push_str(n),
                    (Value::Number(n), KeyStyle::Quoted) => write_str(out, n),
                    (Value::String(s), _) => write_str(out, s),
                    // Object (or other) keys are written inline, as fastjson does.
                    (other, _) => write_value(out, other, keys, None),
                }
                out.push(':');
                write_value(out, v, keys, indent.map(|l| l + 1));
            }
            if !entries.is_empty() {
                newline(out, indent);
            }
            out.push('}');
        }
    }
}

fn newline(out: &mut String, indent: Option<usize>) {
    if let Some(level) = indent {
        out.push('\n');
        for _ in 0..level {
            out.push('\t');
        }
    }
}

/// Writes `s` as a quoted JSON string, escaping what fastjson escapes: `"`, `\` and
/// control characters. Non-ASCII text is written as UTF-8.
pub fn write_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                out.push_str(&format!("\\u{:04X}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Builds a JSON object whose keys must be added in ascending order (fastjson's
/// alphabetical property order); debug builds assert it, so an encoder that gets the
/// order wrong fails its own unit test rather than a client.
#[derive(Debug, Default)]
pub struct ObjectBuilder {
    entries: Vec<(Value, Value)>,
}

impl ObjectBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a bean property; `key` must sort after the previous one.
    pub fn field(mut self, key: &str, value: impl Into<Value>) -> Self {
        if let Some((Value::String(prev), _)) = self.entries.last() {
            debug_assert!(
                prev.as_str() < key,
                "JSON keys out of order: {prev:?} then {key:?}"
            );
        }
        self.entries
            .push((Value::String(key.to_owned()), value.into()));
        self
    }

    /// Adds a property only when `value` is `Some` (fastjson omits nulls).
    pub fn field_opt(self, key: &str, value: Option<impl Into<Value>>) -> Self {
        match value {
            Some(v) => self.field(key, v),
            None => self,
        }
    }

    pub fn build(self) -> Value {
        Value::Object(self.entries)
    }
}

/// A JSON object from map entries (keys as given: the caller iterates a sorted map).
pub fn map_value<K: Into<Value>, V: Into<Value>>(
    entries: impl IntoIterator<Item = (K, V)>,
) -> Value {
    Value::Object(
        entries
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect(),
    )
}

/// A JSON object keyed by integers (`brokerAddrs`, `currIdMap`): keys become
/// [`Value::Number`], so [`KeyStyle`] decides whether they are quoted.
pub fn int_map_value<V: Into<Value>>(entries: impl IntoIterator<Item = (i64, V)>) -> Value {
    Value::Object(
        entries
            .into_iter()
            .map(|(k, v)| (Value::int(k), v.into()))
            .collect(),
    )
}

/// A JSON array of strings.
pub fn string_array<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> Value {
    Value::Array(items.into_iter().map(|s| Value::str(s.as_ref())).collect())
}

/// A JSON array of integers (a set of broker ids, say).
pub fn int_array(items: impl IntoIterator<Item = i64>) -> Value {
    Value::Array(items.into_iter().map(Value::int).collect())
}

/// Field-reading helpers for body decoders: each names the field path on error.
pub mod read {
    use super::{BodyError, Value};

    /// A required string field.
    pub fn string(obj: &Value, key: &str, path: &str) -> Result<String, BodyError> {
        match obj.get_present(key) {
            Some(Value::String(s)) => Ok(s.clone()),
            // fastjson converts numbers to strings for String properties.
            Some(Value::Number(n)) => Ok(n.clone()),
            _ => Err(BodyError::field(join(path, key), "a string")),
        }
    }

    /// An optional string field (absent or null → `None`).
    pub fn opt_string(obj: &Value, key: &str, path: &str) -> Result<Option<String>, BodyError> {
        match obj.get_present(key) {
            None => Ok(None),
            Some(_) => string(obj, key, path).map(Some),
        }
    }

    /// An integer field, `default` when absent (Java's primitive default).
    pub fn i64_or(obj: &Value, key: &str, path: &str, default: i64) -> Result<i64, BodyError> {
        match obj.get_present(key) {
            None => Ok(default),
            Some(v) => v
                .as_i64()
                .ok_or_else(|| BodyError::field(join(path, key), "an integer")),
        }
    }

    pub fn i32_or(obj: &Value, key: &str, path: &str, default: i32) -> Result<i32, BodyError> {
        match obj.get_present(key) {
            None => Ok(default),
            Some(v) => v
                .as_i32()
                .ok_or_else(|| BodyError::field(join(path, key), "a 32-bit integer")),
        }
    }

    pub fn bool_or(obj: &Value, key: &str, path: &str, default: bool) -> Result<bool, BodyError> {
        match obj.get_present(key) {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| BodyError::field(join(path, key), "a boolean")),
        }
    }

    /// An array of strings; absent → empty.
    pub fn string_list(obj: &Value, key: &str, path: &str) -> Result<Vec<String>, BodyError> {
        match obj.get_present(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) => Ok(s.clone()),
                    _ => Err(BodyError::field(
                        format!("{}[{i}]", join(path, key)),
                        "a string",
                    )),
                })
                .collect(),
            Some(_) => Err(BodyError::field(join(path, key), "an array of strings")),
        }
    }

    /// A set of integers (broker ids); `None` when absent or null.
    pub fn int_set(
        obj: &Value,
        key: &str,
        path: &str,
    ) -> Result<Option<std::collections::BTreeSet<i64>>, BodyError> {
        match obj.get_present(key) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_i64()
                        .ok_or_else(|| BodyError::field(join(path, key), "an array of integers"))
                })
                .collect::<Result<_, _>>()
                .map(Some),
            Some(_) => Err(BodyError::field(join(path, key), "an array of integers")),
        }
    }

    /// An object field's entries; absent → empty.
    pub fn entries<'a>(
        obj: &'a Value,
        key: &str,
        path: &str,
    ) -> Result<&'a [(Value, Value)], BodyError> {
        match obj.get_present(key) {
            None => Ok(&[]),
            Some(Value::Object(entries)) => Ok(entries),
            Some(_) => Err(BodyError::field(join(path, key), "an object")),
        }
    }

    /// A string → string map (e.g. `attributes`, KVTable `table`); absent → empty.
    pub fn string_map(
        obj: &Value,
        key: &str,
        path: &str,
    ) -> Result<std::collections::BTreeMap<String, String>, BodyError> {
        let mut map = std::collections::BTreeMap::new();
        for (k, v) in entries(obj, key, path)? {
            let name = k
                .key_text()
                .ok_or_else(|| BodyError::field(join(path, key), "string keys"))?;
            let text = match v {
                Value::String(s) | Value::Number(s) => s.clone(),
                Value::Bool(b) => b.to_string(),
                Value::Null => continue,
                _ => {
                    return Err(BodyError::field(
                        format!("{}.{name}", join(path, key)),
                        "a string",
                    ))
                }
            };
            map.insert(name.to_owned(), text);
        }
        Ok(map)
    }

    /// `path.key`, or `key` at the root.
    pub fn join(path: &str, key: &str) -> String {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    }
}

/// Lets a tree built by the body encoders go through any serde format, e.g.
/// `serde_json::to_string_pretty` for the two-space layout of the broker's persisted
/// `config/*.json` files. Keys keep the tree's order; a number goes out as the integer or
/// float its text reads as.
impl serde::Serialize for Value {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self {
            Value::Null => serializer.serialize_unit(),
            Value::Bool(b) => serializer.serialize_bool(*b),
            Value::Number(text) => {
                if let Ok(n) = text.parse::<i64>() {
                    serializer.serialize_i64(n)
                } else if let Ok(n) = text.parse::<u64>() {
                    serializer.serialize_u64(n)
                } else if let Ok(n) = text.parse::<f64>() {
                    serializer.serialize_f64(n)
                } else {
                    Err(serde::ser::Error::custom(format!(
                        "JSON number text {text:?} is not a number"
                    )))
                }
            }
            Value::String(s) => serializer.serialize_str(s),
            Value::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Value::Object(entries) => {
                let mut map = serializer.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    match k {
                        Value::String(s) | Value::Number(s) => map.serialize_key(s)?,
                        // fastjson's object keys: their compact text names the entry.
                        other => map.serialize_key(&other.to_json())?,
                    }
                    map.serialize_value(v)?;
                }
                map.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_standard_json() {
        let v = parse_str(r#" {"a":1,"b":[true,false,null],"c":"x\"y\u00e9"} "#).unwrap();
        assert_eq!(v.get("a").and_then(Value::as_i64), Some(1));
        assert_eq!(
            v.get("b").and_then(Value::as_array).map(<[Value]>::len),
            Some(3)
        );
        assert_eq!(v.get("c").and_then(Value::as_str), Some("x\"yé"));
    }

    #[test]
    fn reads_bare_numeric_keys() {
        let v = parse_str(r#"{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}}"#).unwrap();
        let addrs = v.get("brokerAddrs").unwrap();
        assert_eq!(
            addrs.get("1").and_then(Value::as_str),
            Some("10.0.0.2:10911")
        );
        let keys: Vec<_> = addrs
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(keys, vec![Value::int(0), Value::int(1)]);
    }

    #[test]
    fn reads_object_keys_in_order() {
        let text = r#"{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"T"}:{"brokerOffset":10},{"brokerName":"b","queueId":0,"topic":"T"}:{"brokerOffset":7}}}"#;
        let v = parse_str(text).unwrap();
        let table = v.get("offsetTable").unwrap().as_object().unwrap();
        assert_eq!(table.len(), 2);
        assert_eq!(table[0].0.get("queueId").and_then(Value::as_i64), Some(1));
        assert_eq!(
            table[1].1.get("brokerOffset").and_then(Value::as_i64),
            Some(7)
        );
        // Written back in fastjson form it is byte-identical.
        assert_eq!(v.to_fastjson(), text);
    }

    #[test]
    fn lenient_forms() {
        let v = parse_str("{a:'x',\"n\":\"12\",\"t\":\"TRUE\",\"l\":[1,2,],}\n\n").unwrap();
        assert_eq!(v.get("a").and_then(Value::as_str), Some("x"));
        assert_eq!(v.get("n").and_then(Value::as_i64), Some(12));
        assert_eq!(v.get("t").and_then(Value::as_bool), Some(true));
        assert_eq!(
            v.get("l").and_then(Value::as_array).map(<[Value]>::len),
            Some(2)
        );
        assert_eq!(
            parse_str("\u{feff}[1]").unwrap(),
            Value::Array(vec![Value::int(1)])
        );
    }

    #[test]
    fn surrogate_pairs_and_bad_escapes() {
        assert_eq!(parse_str(r#""\ud83d\ude00""#).unwrap(), Value::str("😀"));
        assert_eq!(parse_str(r#""\ud83d""#).unwrap(), Value::str("\u{FFFD}"));
        assert!(parse_str(r#""\q""#).is_err());
    }

    #[test]
    fn rejects_garbage_with_offsets() {
        for bad in [
            "",
            "{",
            "{\"a\" 1}",
            "[1 2]",
            "{\"a\":1} x",
            "tru",
            "\"abc",
            "-",
            "1e",
            "{:1}",
        ] {
            let err = parse_str(bad).unwrap_err();
            assert!(err.offset <= bad.len(), "{bad:?}: {err}");
        }
    }

    #[test]
    fn depth_is_bounded() {
        let deep = "[".repeat(MAX_JSON_DEPTH + 1) + &"]".repeat(MAX_JSON_DEPTH + 1);
        assert!(parse_str(&deep).unwrap_err().reason.contains("nesting"));
        let ok = "[".repeat(MAX_JSON_DEPTH - 1) + &"]".repeat(MAX_JSON_DEPTH - 1);
        assert!(parse_str(&ok).is_ok());
    }

    #[test]
    fn writes_compact_and_escaped() {
        let v = ObjectBuilder::new()
            .field("a", "q\"\\\n\u{1}")
            .field("b", int_map_value([(0, "x"), (1, "y")]))
            .field_opt("c", None::<i64>)
            .field("d", string_array(["p"]))
            .build();
        assert_eq!(
            v.to_json(),
            r#"{"a":"q\"\\\n\u0001","b":{"0":"x","1":"y"},"d":["p"]}"#
        );
        assert_eq!(
            v.to_fastjson(),
            r#"{"a":"q\"\\\n\u0001","b":{0:"x",1:"y"},"d":["p"]}"#
        );
        assert_eq!(parse_str(&v.to_json()).unwrap().to_json(), v.to_json());
    }

    #[test]
    fn pretty_form() {
        let v = ObjectBuilder::new()
            .field("a", 1i64)
            .field("b", string_array(["x"]))
            .build();
        assert_eq!(
            v.to_pretty_json(),
            "{\n\t\"a\":1,\n\t\"b\":[\n\t\t\"x\"\n\t]\n}"
        );
        assert_eq!(Value::Object(vec![]).to_pretty_json(), "{}");
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "out of order")]
    fn builder_checks_key_order() {
        let _ = ObjectBuilder::new().field("b", 1i64).field("a", 2i64);
    }
}
