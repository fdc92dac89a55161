//! Table-driven option parsing for the admin sub-commands, with the option rules operators
//! know from `mqadmin` (Apache Commons CLI's default parser): `-t T`, `-tT`, `--topic T`,
//! `--topic=T` and the single-dash long form `-topic T`. Every command also takes
//! `-h/--help`, `-n/--namesrvAddr` and ringmq's `--json`.
//!
//! Differences from mqadmin, on purpose: an unknown option, a missing value, a missing
//! required option or a stray positional argument is a one-line error and a non-zero exit
//! (mqadmin prints the help and exits 0).

use std::collections::BTreeMap;

/// One option of a command. `long` is also the key commands read values by.
#[derive(Debug, Clone, Copy)]
pub struct Opt {
    pub short: Option<&'static str>,
    pub long: &'static str,
    /// Takes a value (`-t <arg>`); otherwise a flag.
    pub arg: bool,
    pub required: bool,
    pub help: &'static str,
}

/// Optional option with a value.
pub const fn opt(short: &'static str, long: &'static str, help: &'static str) -> Opt {
    Opt {
        short: Some(short),
        long,
        arg: true,
        required: false,
        help,
    }
}

/// Required option with a value.
pub const fn req(short: &'static str, long: &'static str, help: &'static str) -> Opt {
    Opt {
        short: Some(short),
        long,
        arg: true,
        required: true,
        help,
    }
}

/// Flag without a value.
pub const fn flag(short: &'static str, long: &'static str, help: &'static str) -> Opt {
    Opt {
        short: Some(short),
        long,
        arg: false,
        required: false,
        help,
    }
}

/// Option with a value and only a long name.
pub const fn long_only(long: &'static str, help: &'static str) -> Opt {
    Opt {
        short: None,
        long,
        arg: true,
        required: false,
        help,
    }
}

/// Options every command accepts.
pub const COMMON: &[Opt] = &[
    flag("h", "help", "print this help"),
    opt("n", "namesrvAddr", "name server address list, e.g. '192.168.0.1:9876;192.168.0.2:9876' (default: $NAMESRV_ADDR)"),
    Opt { short: None, long: "json", arg: false, required: false, help: "print the result as JSON (ringmq)" },
    long_only("access-key", "sign every request with this ACL account (ringmq; default: accessKey of $ROCKETMQ_HOME/conf/tools.yml)"),
    long_only("secret-key", "the secret of --access-key (ringmq; default: secretKey of $ROCKETMQ_HOME/conf/tools.yml)"),
    Opt { short: None, long: "tls", arg: false, required: false, help: "connect with TLS (ringmq; upstream: -Dtls.enable=true)" },
    long_only("tls-config", "tls.properties with the tls.client.* keys and tls.enable (ringmq; default: /etc/rocketmq/tls.properties)"),
];

/// A sub-command: its mqadmin name, a one-line description, its own options, and groups
/// of options of which at least one must be given (mqadmin's required option groups).
#[derive(Debug)]
pub struct Cmd {
    pub name: &'static str,
    pub desc: &'static str,
    pub opts: &'static [Opt],
    pub one_of: &'static [&'static [&'static str]],
}

impl Cmd {
    /// The command's options followed by the common ones (a command's own option wins
    /// when both define the same letter).
    pub fn all_opts(&self) -> Vec<&'static Opt> {
        let mut all: Vec<&'static Opt> = self.opts.iter().collect();
        for c in COMMON {
            let clash = all
                .iter()
                .any(|o| o.long == c.long || (o.short.is_some() && o.short == c.short));
            if !clash {
                all.push(c);
            }
        }
        all
    }

    fn find_short(&self, s: &str) -> Option<&'static Opt> {
        self.all_opts().into_iter().find(|o| o.short == Some(s))
    }

    fn find_long(&self, l: &str) -> Option<&'static Opt> {
        let all = self.all_opts();
        // mqadmin's parser trims nothing, but some upstream long names carry a trailing
        // space (printMsgByQueue); match them by their trimmed text.
        all.iter()
            .copied()
            .find(|o| o.long == l)
            .or_else(|| all.into_iter().find(|o| o.long.trim() == l))
    }

    /// `-t,--topic <arg>` as the help and the errors print it.
    pub fn label(o: &Opt) -> String {
        match o.short {
            Some(s) => format!("-{s}/--{}", o.long.trim()),
            None => format!("--{}", o.long.trim()),
        }
    }
}

/// `-i/--interval N` and `--rounds N` of the commands that repeat (clusterList, haStatus):
/// without `-i` one round; with it, every N seconds until interrupted or `--rounds` ran.
#[derive(Debug, Clone, Copy)]
pub struct Repeat {
    interval_secs: Option<u64>,
    rounds: Option<u64>,
    done: u64,
}

impl Repeat {
    pub fn from_matches(m: &Matches, default_interval_secs: u64) -> Result<Self, String> {
        let interval_secs = match m.get("interval") {
            Some(_) => Some(m.num("interval", default_interval_secs)?),
            None => None,
        };
        let rounds = match m.get("rounds") {
            Some(_) => Some(m.num("rounds", 1)?),
            None => None,
        };
        Ok(Repeat {
            interval_secs,
            rounds,
            done: 0,
        })
    }

    /// Ends a round: false when it was the last, else waits the interval and says go on.
    pub fn another_round(&mut self) -> bool {
        self.done += 1;
        let Some(secs) = self.interval_secs else {
            return false;
        };
        if self.rounds.is_some_and(|r| self.done >= r) {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_secs(secs));
        true
    }
}

/// Parsed options: values by long name, flags present.
#[derive(Debug, Default, Clone)]
pub struct Matches {
    values: BTreeMap<&'static str, String>,
}

impl Matches {
    /// The trimmed value of an option given with a value.
    pub fn get(&self, long: &str) -> Option<&str> {
        self.values.get(long).map(String::as_str)
    }

    /// Whether the option (flag or valued) was given.
    pub fn has(&self, long: &str) -> bool {
        self.values.contains_key(long)
    }

    pub fn json(&self) -> bool {
        self.has("json")
    }

    pub fn help(&self) -> bool {
        self.has("help")
    }

    /// `Integer.parseInt` / `Long.parseLong` of an option: absent → `default`, bad text → a
    /// usage error naming the option.
    pub fn num<T: std::str::FromStr>(&self, long: &str, default: T) -> Result<T, String> {
        match self.get(long) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("--{long} expects a number, got {v:?}")),
        }
    }

    /// `Boolean.parseBoolean` of an option: `true` in any case is true, anything else false.
    pub fn boolean(&self, long: &str, default: bool) -> bool {
        match self.get(long) {
            None => default,
            Some(v) => v.eq_ignore_ascii_case("true"),
        }
    }

    /// Inserts a value (tests).
    #[cfg(test)]
    pub fn set(&mut self, long: &'static str, value: impl Into<String>) {
        self.values.insert(long, value.into());
    }
}

/// Parses `args` (everything after the command name) against `cmd`'s options.
pub fn parse(cmd: &Cmd, args: &[String]) -> Result<Matches, String> {
    let mut m = Matches::default();
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        i += 1;
        let (opt, inline): (&'static Opt, Option<String>) =
            if let Some(rest) = arg.strip_prefix("--") {
                if rest.is_empty() {
                    return Err("unexpected \"--\"".into());
                }
                let (name, inline) = match rest.split_once('=') {
                    Some((n, v)) => (n, Some(v.to_string())),
                    None => (rest, None),
                };
                let o = cmd
                    .find_long(name)
                    .ok_or_else(|| format!("unrecognized option: --{name}"))?;
                (o, inline)
            } else if let Some(rest) = arg.strip_prefix('-').filter(|r| !r.is_empty()) {
                if let Some(o) = cmd.find_short(rest) {
                    (o, None)
                } else if let Some(o) = cmd.find_long(rest) {
                    // Single-dash long option, as Commons CLI accepts (`-topic T`).
                    (o, None)
                } else {
                    let first: String = rest.chars().take(1).collect();
                    match cmd.find_short(&first) {
                        Some(o) if o.arg => (o, Some(rest[first.len()..].to_string())),
                        _ => return Err(format!("unrecognized option: {arg}")),
                    }
                }
            } else {
                return Err(format!(
                    "unexpected argument {arg:?} (options take the form -x value)"
                ));
            };
        if opt.arg {
            let value = match inline {
                Some(v) => v,
                None => {
                    let v = args.get(i).ok_or_else(|| {
                        format!("missing argument for option {}", Cmd::label(opt))
                    })?;
                    i += 1;
                    v.clone()
                }
            };
            m.values.insert(opt.long, value.trim().to_string());
        } else {
            if inline.is_some() {
                return Err(format!("option {} takes no value", Cmd::label(opt)));
            }
            m.values.insert(opt.long, String::new());
        }
    }
    if m.help() {
        return Ok(m);
    }
    for o in cmd.all_opts() {
        if o.required && !m.has(o.long) {
            return Err(format!("missing required option {}", Cmd::label(o)));
        }
    }
    for group in cmd.one_of {
        if !group.iter().any(|l| m.has(l)) {
            let names: Vec<String> = group
                .iter()
                .filter_map(|l| cmd.find_long(l))
                .map(Cmd::label)
                .collect();
            return Err(format!("one of {} is required", names.join(" or ")));
        }
    }
    Ok(m)
}

/// `mqadmin help <command>`: a usage line and one line per option.
pub fn help_text(cmd: &Cmd) -> String {
    let mut opts = cmd.all_opts();
    opts.sort_by_key(|o| o.short.unwrap_or(o.long).to_ascii_lowercase());
    let mut usage = format!("usage: mqadmin {}", cmd.name);
    let grouped: Vec<&str> = cmd.one_of.iter().flat_map(|g| g.iter().copied()).collect();
    for group in cmd.one_of {
        let parts: Vec<String> = group
            .iter()
            .filter_map(|l| cmd.find_long(l))
            .map(|o| format!("{} <arg>", flag_name(o)))
            .collect();
        usage.push_str(&format!(" ({})", parts.join(" | ")));
    }
    for o in &opts {
        if grouped.contains(&o.long) {
            continue;
        }
        let shown = if o.arg {
            format!("{} <arg>", flag_name(o))
        } else {
            flag_name(o)
        };
        if o.required {
            usage.push_str(&format!(" {shown}"));
        } else {
            usage.push_str(&format!(" [{shown}]"));
        }
    }
    let mut out = format!("{usage}\n");
    let rows: Vec<(String, &str)> = opts
        .iter()
        .map(|o| {
            let mut left = match o.short {
                Some(s) => format!(" -{s},--{}", o.long.trim()),
                None => format!("    --{}", o.long.trim()),
            };
            if o.arg {
                left.push_str(" <arg>");
            }
            (left, o.help)
        })
        .collect();
    let width = rows
        .iter()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(0);
    for (left, help) in rows {
        out.push_str(&format!("{left:<width$}   {help}\n"));
    }
    out
}

fn flag_name(o: &Opt) -> String {
    match o.short {
        Some(s) => format!("-{s}"),
        None => format!("--{}", o.long.trim()),
    }
}

/// The command list mqadmin prints without arguments.
pub fn command_list(cmds: &[&Cmd]) -> String {
    let mut out = String::from("The most commonly used mqadmin commands are:\n");
    for c in cmds {
        out.push_str(&format!("   {:<35} {}\n", c.name, c.desc));
    }
    out.push_str("\nSee 'mqadmin help <command>' for more information on a specific command.\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPTS: &[Opt] = &[
        opt("b", "brokerAddr", "broker"),
        opt("c", "clusterName", "cluster"),
        req("t", "topic", "topic"),
        flag("l", "list", "list form"),
        opt("mf", "mapFile", "file"),
        long_only("attributes", "attrs"),
        opt("a", "brokerName ", "trailing space upstream"),
    ];
    const CMD: Cmd = Cmd {
        name: "demo",
        desc: "demo",
        opts: OPTS,
        one_of: &[&["brokerAddr", "clusterName"]],
    };

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn accepts_the_commons_cli_forms() {
        let m = parse(
            &CMD,
            &args(&[
                "-t",
                " T1 ",
                "-cDefaultCluster",
                "--list",
                "-n",
                "127.0.0.1:9876",
                "--json",
            ]),
        )
        .unwrap();
        assert_eq!(m.get("topic"), Some("T1"));
        assert_eq!(m.get("clusterName"), Some("DefaultCluster"));
        assert!(m.has("list") && m.json());
        assert_eq!(m.get("namesrvAddr"), Some("127.0.0.1:9876"));
        let m = parse(
            &CMD,
            &args(&[
                "--topic=T2",
                "-brokerAddr",
                "1.2.3.4:10911",
                "-mf",
                "f.json",
                "--attributes",
                "+a=b",
            ]),
        )
        .unwrap();
        assert_eq!(m.get("topic"), Some("T2"));
        assert_eq!(m.get("brokerAddr"), Some("1.2.3.4:10911"));
        assert_eq!(m.get("mapFile"), Some("f.json"));
        assert_eq!(m.get("attributes"), Some("+a=b"));
        let m = parse(
            &CMD,
            &args(&["-t", "T", "-b", "x", "--brokerName", "broker-a"]),
        )
        .unwrap();
        assert_eq!(m.get("brokerName "), Some("broker-a"));
    }

    #[test]
    fn rejects_bad_flags_with_one_line() {
        let cases: &[(&[&str], &str)] = &[
            (&["-t", "T", "-b", "x", "-z"], "unrecognized option: -z"),
            (
                &["-t", "T", "-b", "x", "--nope"],
                "unrecognized option: --nope",
            ),
            (&["-b", "x"], "missing required option -t/--topic"),
            (
                &["-t", "T"],
                "one of -b/--brokerAddr or -c/--clusterName is required",
            ),
            (&["-t"], "missing argument for option -t/--topic"),
            (&["-t", "T", "-b", "x", "stray"], "unexpected argument"),
            (&["-t", "T", "-b", "x", "--list=yes"], "takes no value"),
        ];
        for (a, want) in cases {
            let err = parse(&CMD, &args(a)).unwrap_err();
            assert!(err.contains(want), "{a:?}: {err}");
            assert!(!err.contains('\n'));
        }
        // --help short-circuits the required checks.
        assert!(parse(&CMD, &args(&["-h"])).unwrap().help());
    }

    #[test]
    fn help_lists_every_option() {
        let h = help_text(&CMD);
        assert!(
            h.starts_with("usage: mqadmin demo (-b <arg> | -c <arg>)"),
            "{h}"
        );
        for needle in [
            "-t,--topic <arg>",
            "-l,--list ",
            "--attributes <arg>",
            "-n,--namesrvAddr <arg>",
            "--json",
            "-h,--help",
        ] {
            assert!(h.contains(needle), "{needle} missing from\n{h}");
        }
    }

    #[test]
    fn numbers_and_booleans_parse_like_java() {
        let mut m = Matches::default();
        m.set("readQueueNums", "16");
        m.set("order", "TRUE");
        m.set("bad", "x1");
        assert_eq!(m.num("readQueueNums", 8).unwrap(), 16);
        assert_eq!(m.num("writeQueueNums", 8).unwrap(), 8);
        assert!(m.num::<i32>("bad", 0).unwrap_err().contains("--bad"));
        assert!(m.boolean("order", false));
        assert!(!m.boolean("missing", false));
    }
}
