//! The Prometheus text exposition format, version 0.0.4, written by hand: `# HELP` / `# TYPE`
//! lines, samples with escaped label values, and histograms as cumulative `_bucket{le}` series
//! plus `_sum` and `_count`. Every sample carries the broker's constant labels first
//! (`cluster`, `node_type`, `node_id`, as upstream's exporter does).

use std::fmt::Write;

/// The `Content-Type` a scraper expects for this format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A metric family's type, as written in its `# TYPE` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
    Summary,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Summary => "summary",
        }
    }
}

/// A sample value: integers print exactly, floats in a form Prometheus parses.
#[derive(Debug, Clone, Copy)]
pub enum Value {
    Int(u64),
    Float(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Int(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}

fn write_value(out: &mut String, v: Value) {
    match v {
        Value::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Value::Float(f) if f.is_nan() => out.push_str("NaN"),
        Value::Float(f) if f == f64::INFINITY => out.push_str("+Inf"),
        Value::Float(f) if f == f64::NEG_INFINITY => out.push_str("-Inf"),
        Value::Float(f) => {
            let _ = write!(out, "{f}");
        }
    }
}

/// `\`, `"` and newline must be escaped inside a label value.
fn escape_label_value(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// `# HELP` text escapes only backslash and newline.
fn escape_help(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Builds one exposition page.
pub struct Exposition {
    out: String,
    /// The constant labels, already rendered as `a="x",b="y"`.
    base_labels: String,
}

impl Exposition {
    pub fn new(const_labels: &[(&str, &str)]) -> Self {
        let mut base_labels = String::new();
        for (i, (k, v)) in const_labels.iter().enumerate() {
            if i > 0 {
                base_labels.push(',');
            }
            base_labels.push_str(k);
            base_labels.push_str("=\"");
            escape_label_value(&mut base_labels, v);
            base_labels.push('"');
        }
        Self {
            out: String::with_capacity(16 * 1024),
            base_labels,
        }
    }

    /// Starts a family: its HELP and TYPE lines. Samples of the family follow.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let _ = write!(self.out, "# HELP {name} ");
        escape_help(&mut self.out, help);
        let _ = writeln!(self.out, "\n# TYPE {name} {}", kind.as_str());
    }

    /// One sample line: `name{const labels, labels} value`.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Into<Value>) {
        self.out.push_str(name);
        self.labels(labels, None);
        self.out.push(' ');
        write_value(&mut self.out, value.into());
        self.out.push('\n');
    }

    fn labels(&mut self, labels: &[(&str, &str)], le: Option<&str>) {
        if self.base_labels.is_empty() && labels.is_empty() && le.is_none() {
            return;
        }
        self.out.push('{');
        let mut first = true;
        if !self.base_labels.is_empty() {
            self.out.push_str(&self.base_labels);
            first = false;
        }
        let extra = le.map(|v| ("le", v));
        for (k, v) in labels.iter().copied().chain(extra) {
            if !first {
                self.out.push(',');
            }
            first = false;
            self.out.push_str(k);
            self.out.push_str("=\"");
            escape_label_value(&mut self.out, v);
            self.out.push('"');
        }
        self.out.push('}');
    }

    /// One histogram series. `counts[i]` is the number of observations in bucket `i` alone
    /// (not cumulative): `counts.len() == upper_bounds.len() + 1`, the last being above every
    /// bound. Written cumulative, as the format requires, ending with `le="+Inf"`.
    pub fn histogram(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        upper_bounds: &[f64],
        counts: &[u64],
        sum: f64,
    ) {
        debug_assert_eq!(counts.len(), upper_bounds.len() + 1);
        let bucket = format!("{name}_bucket");
        let mut cumulative = 0u64;
        let mut le = String::new();
        for (i, bound) in upper_bounds.iter().enumerate() {
            cumulative += counts.get(i).copied().unwrap_or(0);
            le.clear();
            write_value(&mut le, Value::Float(*bound));
            self.out.push_str(&bucket);
            self.labels(labels, Some(&le));
            let _ = writeln!(self.out, " {cumulative}");
        }
        cumulative += counts.get(upper_bounds.len()).copied().unwrap_or(0);
        self.out.push_str(&bucket);
        self.labels(labels, Some("+Inf"));
        let _ = writeln!(self.out, " {cumulative}");
        self.sample(&format!("{name}_sum"), labels, sum);
        self.sample(&format!("{name}_count"), labels, cumulative);
    }

    pub fn finish(self) -> String {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_carry_constant_labels_first_and_escape_values() {
        let mut e = Exposition::new(&[("cluster", "C"), ("node_type", "broker")]);
        e.family("x_total", Kind::Counter, "help with \\ and\nnewline");
        e.sample("x_total", &[("topic", "a\"b\\c\nd")], 7u64);
        e.sample("y", &[], 0.25f64);
        let text = e.finish();
        assert_eq!(
            text,
            "# HELP x_total help with \\\\ and\\nnewline\n# TYPE x_total counter\n\
             x_total{cluster=\"C\",node_type=\"broker\",topic=\"a\\\"b\\\\c\\nd\"} 7\n\
             y{cluster=\"C\",node_type=\"broker\"} 0.25\n"
        );
    }

    #[test]
    fn no_labels_means_no_braces() {
        let mut e = Exposition::new(&[]);
        e.sample("up", &[], 1u64);
        e.sample("nan", &[], f64::NAN);
        e.sample("inf", &[], f64::INFINITY);
        assert_eq!(e.finish(), "up 1\nnan NaN\ninf +Inf\n");
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_with_inf() {
        let mut e = Exposition::new(&[("node_id", "b")]);
        e.family("lat", Kind::Histogram, "latency");
        e.histogram(
            "lat",
            &[("code", "10")],
            &[1.0, 3.0, 5.5],
            &[2, 0, 3, 1],
            42.5,
        );
        let text = e.finish();
        let lines: Vec<&str> = text.lines().skip(2).collect();
        assert_eq!(
            lines,
            vec![
                "lat_bucket{node_id=\"b\",code=\"10\",le=\"1\"} 2",
                "lat_bucket{node_id=\"b\",code=\"10\",le=\"3\"} 2",
                "lat_bucket{node_id=\"b\",code=\"10\",le=\"5.5\"} 5",
                "lat_bucket{node_id=\"b\",code=\"10\",le=\"+Inf\"} 6",
                "lat_sum{node_id=\"b\",code=\"10\"} 42.5",
                "lat_count{node_id=\"b\",code=\"10\"} 6",
            ]
        );
    }
}
