//! `ringmq tune check|apply`: compares this machine's kernel settings with the ones in
//! `kernel-tuning/` and reports each with its reason; `check` exits 1 on drift, `apply`
//! writes what differs (root) and is idempotent.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The sysctl file shipped in `kernel-tuning/`; compiled in so the binary checks exactly
/// what the package installs.
const SYSCTL_CONF: &str = include_str!("../../../kernel-tuning/60-ringmq.conf");

/// One tunable: where it lives, what we want, and why.
#[derive(Debug, Clone)]
struct Setting {
    name: String,
    path: PathBuf,
    recommended: String,
    reason: String,
    /// Settings whose current value is one of several words (`[none] mq-deadline`) are
    /// matched on the bracketed word.
    bracketed: bool,
    /// The kernel may refuse the write (managed IRQs): a refusal is reported, not a failure.
    kernel_may_refuse: bool,
}

#[derive(Debug, PartialEq, Eq)]
enum State {
    Ok,
    Drift(String),
    Unavailable(String),
}

pub fn main(args: &[String]) -> ExitCode {
    let mut mode = None;
    let mut store_dir = PathBuf::from("ringmq-data/store");
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "check" | "apply" => mode = Some(arg.clone()),
            "--store" => match it.next() {
                Some(dir) => store_dir = PathBuf::from(dir),
                None => return usage("--store needs a directory"),
            },
            other => return usage(&format!("unknown argument {other:?}")),
        }
    }
    let settings = all_settings(&store_dir);
    match mode.as_deref() {
        Some("check") => check(&settings),
        Some("apply") => apply(&settings),
        _ => usage("say check or apply"),
    }
}

fn usage(problem: &str) -> ExitCode {
    eprintln!("ringmq tune: {problem}\nusage: ringmq tune check|apply [--store DIR]");
    ExitCode::from(2)
}

fn all_settings(store_dir: &Path) -> Vec<Setting> {
    let mut settings = parse_sysctl_conf(SYSCTL_CONF);
    settings.push(Setting {
        name: "transparent_hugepage".into(),
        path: "/sys/kernel/mm/transparent_hugepage/enabled".into(),
        recommended: "madvise".into(),
        reason: "THP compaction stalls the append stage for milliseconds; only regions \
                 that ask for huge pages should get them"
            .into(),
        bracketed: true,
        kernel_may_refuse: false,
    });
    settings.extend(block_device_settings(store_dir));
    settings.extend(cpu_governor_settings());
    settings.extend(irq_settings(&ringmq_runtime::cores::CoreMap::detect()));
    settings
}

/// Every device interrupt should avoid the cores of the append, flush and reput stages
/// (the default core map for this machine; `ringmq.cores.*` can move them).
fn irq_settings(cores: &ringmq_runtime::cores::CoreMap) -> Vec<Setting> {
    let mut stage_cores = vec![cores.append, cores.flush, cores.reput];
    stage_cores.sort_unstable();
    stage_cores.dedup();
    let allowed: Vec<usize> = (0..cores.available)
        .filter(|c| !stage_cores.contains(c))
        .collect();
    if allowed.is_empty() {
        return Vec::new();
    }
    let recommended = ringmq_runtime::cores::format_core_list(&allowed);
    let Ok(entries) = std::fs::read_dir("/proc/irq") else {
        return Vec::new();
    };
    let mut irqs: Vec<(u32, String)> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            let irq: u32 = e.file_name().to_str()?.parse().ok()?;
            // An IRQ with a handler has a sub-directory named after its device.
            let device = std::fs::read_dir(e.path()).ok()?.find_map(|d| {
                let d = d.ok()?;
                d.file_type()
                    .ok()?
                    .is_dir()
                    .then(|| d.file_name().to_string_lossy().into_owned())
            })?;
            Some((irq, device))
        })
        .collect();
    irqs.sort();
    irqs.into_iter()
        .map(|(irq, device)| Setting {
            name: format!("irq {irq} ({device}) affinity"),
            path: PathBuf::from(format!("/proc/irq/{irq}/smp_affinity_list")),
            recommended: recommended.clone(),
            reason: format!(
                "interrupt handling on the stage cores ({}) delays appends and fdatasync \
                 completions",
                ringmq_runtime::cores::format_core_list(&stage_cores)
            ),
            bracketed: false,
            kernel_may_refuse: true,
        })
        .collect()
}

/// Reads `key = value` lines; the comment block above a key (or group of keys) is its
/// reason.
fn parse_sysctl_conf(text: &str) -> Vec<Setting> {
    let mut settings = Vec::new();
    let mut reason = String::new();
    let mut reason_closed = false;
    for line in text.lines().map(str::trim) {
        if let Some(comment) = line.strip_prefix('#') {
            if reason_closed {
                reason.clear();
                reason_closed = false;
            }
            if !reason.is_empty() {
                reason.push(' ');
            }
            reason.push_str(comment.trim());
        } else if let Some((key, value)) = line.split_once('=') {
            reason_closed = true;
            let key = key.trim();
            settings.push(Setting {
                name: key.to_string(),
                path: Path::new("/proc/sys").join(key.replace('.', "/")),
                recommended: normalize(value),
                reason: reason.clone(),
                bracketed: false,
                kernel_may_refuse: false,
            });
        } else if line.is_empty() {
            // A blank line ends a comment block: a block not followed directly by a key
            // (the file's header) is nobody's reason.
            reason.clear();
            reason_closed = false;
        }
    }
    settings
}

/// The io scheduler and read-ahead of the block device holding the store directory.
fn block_device_settings(store_dir: &Path) -> Vec<Setting> {
    let Some(queue) = queue_dir_for(store_dir) else {
        return Vec::new();
    };
    vec![
        Setting {
            name: "io scheduler (store device)".into(),
            path: queue.join("scheduler"),
            recommended: "none".into(),
            reason: "virtio and NVMe queues reorder nothing useful; the CommitLog is written \
                     sequentially and a scheduler only adds latency to fdatasync"
                .into(),
            bracketed: true,
            kernel_may_refuse: false,
        },
        Setting {
            name: "read_ahead_kb (store device)".into(),
            path: queue.join("read_ahead_kb"),
            recommended: "128".into(),
            reason: "cold pulls read the CommitLog forward; large read-ahead evicts hot tail \
                     pages, none makes every cold pull a seek"
                .into(),
            bracketed: false,
            kernel_may_refuse: false,
        },
    ]
}

/// Finds `/sys/dev/block/MAJ:MIN/queue` (or its parent disk's, for a partition) for the
/// filesystem holding `dir` or its nearest existing ancestor.
fn queue_dir_for(dir: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let existing = dir.ancestors().find(|p| p.exists())?;
    let dev = std::fs::metadata(existing).ok()?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let sys = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    let sys = std::fs::canonicalize(sys).ok()?;
    [sys.join("queue"), sys.parent()?.join("queue")]
        .into_iter()
        .find(|q| q.join("scheduler").exists())
}

fn cpu_governor_settings() -> Vec<Setting> {
    let mut settings = Vec::new();
    for cpu in 0..1024 {
        let path = PathBuf::from(format!(
            "/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor"
        ));
        if !path.exists() {
            break;
        }
        settings.push(Setting {
            name: format!("cpu{cpu} governor"),
            path,
            recommended: "performance".into(),
            reason: "pinned core loops poll; frequency ramps add tens of microseconds".into(),
            bracketed: false,
            kernel_may_refuse: false,
        });
    }
    settings
}

fn normalize(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn current_value(setting: &Setting) -> Result<String, String> {
    let raw = std::fs::read_to_string(&setting.path)
        .map_err(|e| format!("cannot read {}: {e}", setting.path.display()))?;
    if setting.bracketed {
        if let Some(start) = raw.find('[') {
            if let Some(len) = raw[start..].find(']') {
                return Ok(raw[start + 1..start + len].to_string());
            }
        }
    }
    Ok(normalize(&raw))
}

fn state_of(setting: &Setting) -> State {
    match current_value(setting) {
        Ok(current) if current == setting.recommended => State::Ok,
        Ok(current) => State::Drift(current),
        Err(e) => State::Unavailable(e),
    }
}

fn check(settings: &[Setting]) -> ExitCode {
    let width = settings.iter().map(|s| s.name.len()).max().unwrap_or(10);
    println!(
        "{:<width$}  {:<22} {:<22} STATUS",
        "SETTING", "CURRENT", "RECOMMENDED"
    );
    let mut drift = 0;
    for setting in settings {
        let (current, status) = match state_of(setting) {
            State::Ok => (setting.recommended.clone(), "ok"),
            State::Drift(current) => {
                drift += 1;
                (current, "DRIFT")
            }
            State::Unavailable(why) => {
                tracing::debug!(setting = setting.name.as_str(), why, "not checked");
                ("-".to_string(), "n/a")
            }
        };
        println!(
            "{:<width$}  {:<22} {:<22} {status}",
            setting.name, current, setting.recommended
        );
        if status == "DRIFT" {
            println!("{:<width$}    why: {}", "", setting.reason);
        }
    }
    println!(
        "{drift} of {} settings drift from kernel-tuning/",
        settings.len()
    );
    if drift > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn apply(settings: &[Setting]) -> ExitCode {
    let mut failed = 0;
    for setting in settings {
        match state_of(setting) {
            State::Ok => println!("ok       {}", setting.name),
            State::Unavailable(why) => println!("skipped  {} ({why})", setting.name),
            State::Drift(current) => {
                match std::fs::write(&setting.path, format!("{}\n", setting.recommended)) {
                    Ok(()) => println!(
                        "applied  {}: {current} -> {}",
                        setting.name, setting.recommended
                    ),
                    Err(e) if setting.kernel_may_refuse => {
                        println!("skipped  {}: the kernel manages it ({e})", setting.name)
                    }
                    Err(e) => {
                        failed += 1;
                        println!(
                            "FAILED   {}: cannot write {}: {e}",
                            setting.name,
                            setting.path.display()
                        );
                    }
                }
            }
        }
    }
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_sysctl_file_parses_with_reasons() {
        let settings = parse_sysctl_conf(SYSCTL_CONF);
        assert!(settings.len() >= 10);
        let swappiness = settings.iter().find(|s| s.name == "vm.swappiness").unwrap();
        assert_eq!(swappiness.recommended, "1");
        assert_eq!(swappiness.path, Path::new("/proc/sys/vm/swappiness"));
        assert!(swappiness.reason.contains("memory-mapped"));
        let rmem = settings
            .iter()
            .find(|s| s.name == "net.ipv4.tcp_rmem")
            .unwrap();
        assert_eq!(rmem.recommended, "4096 87380 16777216");
        assert!(
            settings.iter().all(|s| !s.reason.is_empty()),
            "every key needs a reason"
        );
        assert!(
            !swappiness.reason.contains("sysctl.d"),
            "the file's header comment is not a reason: {}",
            swappiness.reason
        );
    }

    #[test]
    fn grouped_keys_share_their_reason_and_blocks_do_not_leak() {
        let text = "# first why\na.b = 1\na.c = 2\n\n# second why\nd.e = 3\n";
        let settings = parse_sysctl_conf(text);
        assert_eq!(settings[0].reason, "first why");
        assert_eq!(settings[1].reason, "first why");
        assert_eq!(settings[2].reason, "second why");
    }

    #[test]
    fn bracketed_values_compare_on_the_selected_word() {
        let dir = std::env::temp_dir().join(format!("ringmq-tune-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("scheduler");
        std::fs::write(&path, "mq-deadline [none] kyber\n").unwrap();
        let mut setting = Setting {
            name: "s".into(),
            path: path.clone(),
            recommended: "none".into(),
            reason: "r".into(),
            bracketed: true,
            kernel_may_refuse: false,
        };
        assert_eq!(state_of(&setting), State::Ok);
        setting.recommended = "kyber".into();
        assert_eq!(state_of(&setting), State::Drift("none".into()));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
