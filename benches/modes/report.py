"""Pure parts of the mode-matrix harness: parsing, arithmetic and rendering (no I/O).

Owns: reading `ringmq bench --json` output, CPU-per-message and ratio math, finding the
lock-hold histogram in a broker's runtime info or log, and rendering results.md,
throughput.svg and latency.svg (hand-written SVG). Everything here is a function of its
arguments so test_run.py can check it without a broker.
"""

import html
import json
import math
import re

MIB = 1024 * 1024
# The performance bar from the project brief (a ratio target, never a test assertion).
TARGET_ASYNC_TPS = 100_000
TARGET_CPU_US_PER_MSG = 10.0
BENCH_KEYS = ("tps", "mb_per_s", "p50_ms", "p99_ms", "p999_ms", "max_ms", "failures")


# ---------------------------------------------------------------- parsing

def parse_bench_json(stdout):
    """The summary object `ringmq bench --json` prints on its last line.

    Scans from the end for the last line that is a JSON object with a `tps` field, so a
    trailing log line or blank line does not break it. Raises ValueError if none.
    """
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not (line.startswith("{") and line.endswith("}")):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and "tps" in obj:
            for key in BENCH_KEYS:
                obj.setdefault(key, 0)
            return obj
    raise ValueError("no JSON summary line (with a tps field) in the bench output")


def parse_proc_stat(text):
    """(comm, utime+stime ticks) from a /proc/<pid>/stat or task stat line.

    comm may contain spaces and parentheses, so split at the last ')'.
    """
    lpar, rpar = text.index("("), text.rindex(")")
    comm = text[lpar + 1:rpar]
    fields = text[rpar + 2:].split()
    # fields[0] is state (field 3); utime and stime are fields 14 and 15.
    return comm, int(fields[11]) + int(fields[12])


def parse_cpu_line(text):
    """(busy, iowait, total) jiffies summed over all cores from /proc/stat's first line."""
    parts = text.split()
    vals = [int(v) for v in parts[1:]]
    idle, iowait = vals[3], vals[4] if len(vals) > 4 else 0
    total = sum(vals[:8])  # user..steal; guest is already inside user
    return total - idle - iowait, iowait, total


# ---------------------------------------------------------------- arithmetic

def cpu_us_per_msg(ticks_before, ticks_after, clk_tck, messages):
    """Microseconds of CPU per message from utime+stime ticks around a window."""
    if messages <= 0:
        return None
    return (ticks_after - ticks_before) / float(clk_tck) * 1e6 / messages


def thread_cpu(before, after, clk_tck, secs, top=6):
    """Busiest threads in a window: [(name, % of one core)] from {tid: (comm, ticks)} maps."""
    rows = []
    for tid, (comm, ticks) in after.items():
        start = before.get(tid, (comm, 0))[1]
        pct = (ticks - start) / float(clk_tck) / max(secs, 1e-9) * 100.0
        if pct > 0.5:
            rows.append((comm, pct))
    rows.sort(key=lambda r: -r[1])
    return rows[:top]


def body_mib_per_s(tps, size):
    return tps * size / MIB


def ratio(numer, denom):
    if not denom or numer is None:
        return None
    return numer / denom


def median(values):
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2.0


def pick_median_run(runs):
    """The run whose tps is the median (lower middle for an even count), for the table."""
    ok = [r for r in runs if r.get("bench")]
    if not ok:
        return None
    ok.sort(key=lambda r: r["bench"]["tps"])
    return ok[(len(ok) - 1) // 2]


def choose_concurrency(sweep, within=0.95):
    """Smallest in-flight count whose tps is within `within` of the best: saturation
    without inflating latency by queueing more than needed. sweep: [(w, tps)]."""
    good = [(w, t) for w, t in sweep if t is not None]
    if not good:
        return None
    best = max(t for _, t in good)
    return min(w for w, t in good if t >= within * best)


_NORM = re.compile(r"[^a-z0-9]")


def extract_lock_hold(kv):
    """Lock-hold p50/p99/max (µs) from runtime-info keys, whatever the exact spelling:
    any key containing "lockhold" plus p50 / p99 / max (e.g. `ringmq.lockHoldP99Us`).
    Millisecond keys (`...Ms`/`...Mills`) are converted. None when absent."""
    found = {}
    for key, value in (kv or {}).items():
        k = _NORM.sub("", key.lower())
        if "lockhold" not in k:
            continue
        try:
            v = float(value)
        except (TypeError, ValueError):
            continue
        if k.endswith("ms") or k.endswith("mills") or k.endswith("millis"):
            v *= 1000.0
        for q in ("p50", "p99", "max"):
            if q in k:
                found[q + "_us"] = v
    return found or None


_LOG_LOCK = re.compile(
    r"lock[_ -]?hold\D*?p50\D*?(\d+(?:\.\d+)?)\D*?p99\D*?(\d+(?:\.\d+)?)\D*?max\D*?(\d+(?:\.\d+)?)",
    re.IGNORECASE)


def extract_lock_hold_from_log(text):
    """The last `lock_hold ... p50 X ... p99 Y ... max Z` (µs) line a broker logged."""
    hits = _LOG_LOCK.findall(text or "")
    if not hits:
        return None
    p50, p99, pmax = (float(x) for x in hits[-1])
    return {"p50_us": p50, "p99_us": p99, "max_us": pmax}


def summarize_cell(cell, size, disk):
    """Flat row for the table and charts from a cell's chosen run."""
    run = pick_median_run(cell.get("runs", []))
    row = {"name": cell["name"], "status": cell.get("status", "ok"),
           "note": cell.get("note", ""), "flush": cell.get("flush"),
           "write_mode": cell.get("write_mode")}
    if run is None:
        return row
    b = run["bench"]
    raw = (disk or {}).get("raw_seq_mib_per_s")
    gc = ((disk or {}).get("group_commit") or {}).get("mib_per_s")
    body = body_mib_per_s(b["tps"], size)
    row.update({
        "tps": b["tps"], "body_mib_s": body,
        "log_mib_s": run.get("log_mib_per_s"),
        "of_raw_seq": ratio(body, raw),
        "of_group_commit": ratio(body, gc),
        "p50_ms": b["p50_ms"], "p99_ms": b["p99_ms"], "p999_ms": b["p999_ms"],
        "max_ms": b["max_ms"], "failures": b["failures"],
        "broker_cpu_us": run.get("broker_cpu_us_per_msg"),
        "client_cpu_us": run.get("client_cpu_us_per_msg"),
        "machine_busy_pct": run.get("machine_busy_pct"),
        "iowait_pct": run.get("iowait_pct"),
        "threads": run.get("threads", []),
        "lock_hold": run.get("lock_hold"),
        "runs": len([r for r in cell.get("runs", []) if r.get("bench")]),
        "tps_all": [round(r["bench"]["tps"]) for r in cell.get("runs", []) if r.get("bench")],
    })
    return row


def mode_ratios(rows):
    """Cross-mode ratios from one run: SYNC/ASYNC per write mode, direct/mmap per flush."""
    by = {(r.get("flush"), r.get("write_mode")): r for r in rows if r.get("tps")}
    out = []
    for wm in ("mmap", "direct"):
        s, a = by.get(("SYNC_FLUSH", wm)), by.get(("ASYNC_FLUSH", wm))
        if s and a:
            out.append(("SYNC_FLUSH / ASYNC_FLUSH (%s)" % wm, ratio(s["tps"], a["tps"]), 0.5))
    for fl in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        d, m = by.get((fl, "direct")), by.get((fl, "mmap"))
        if d and m:
            out.append(("direct / mmap (%s)" % fl, ratio(d["tps"], m["tps"]), None))
    return out


# ---------------------------------------------------------------- Markdown

def _f(v, fmt="%.0f", none="–"):
    if v is None:
        return none
    return fmt % v


def _pct(v):
    return "–" if v is None else "%.0f%%" % (v * 100)


def render_markdown(result):
    """results.md: the mode table, ratios, raw-disk numbers and the run's parameters."""
    meta = result.get("meta", {})
    size = meta.get("size", 1024)
    disk = result.get("disk") or {}
    rows = [summarize_cell(c, size, disk) for c in result.get("cells", [])]
    out = []
    out.append("# ringmq mode matrix — %s" % meta.get("started", ""))
    out.append("")
    out.append("Load per cell: `ringmq bench producer`, %s B bodies, sync sends, %s in flight over "
               "%s connection(s) × %s client thread(s); %s s warm-up, %s s measured, %s run(s) "
               "per cell on a fresh broker each (median run shown). Host: %s cores, %s."
               % (size, meta.get("concurrency"), meta.get("connections"), meta.get("threads"),
                  meta.get("warmup_secs"), meta.get("measure_secs"), meta.get("repeats"),
                  meta.get("cpus"), meta.get("kernel", "")))
    out.append("")
    out.append("| mode | msg/s | body MiB/s | log MiB/s | of raw seq | p50 ms | p99 ms | p99.9 ms "
               "| max ms | fail | broker µs/msg | client µs/msg | CPU busy | lock-hold p50/p99/max µs |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        if r.get("tps") is None:
            out.append("| %s | %s |  |  |  |  |  |  |  |  |  |  |  | %s |"
                       % (r["name"], r["status"], r.get("note", "")))
            continue
        lh = r.get("lock_hold")
        lh_text = ("%s / %s / %s" % (_f(lh.get("p50_us")), _f(lh.get("p99_us")),
                                     _f(lh.get("max_us")))) if lh else "n/a"
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["name"], _f(r["tps"]), _f(r["body_mib_s"], "%.1f"), _f(r["log_mib_s"], "%.1f"),
            _pct(r["of_raw_seq"]), _f(r["p50_ms"], "%.2f"), _f(r["p99_ms"], "%.2f"),
            _f(r["p999_ms"], "%.2f"), _f(r["max_ms"], "%.1f"), _f(r["failures"]),
            _f(r["broker_cpu_us"], "%.1f"), _f(r["client_cpu_us"], "%.1f"),
            _f(r["machine_busy_pct"], "%.0f%%"), lh_text))
    out.append("")
    ratios = mode_ratios(rows)
    bar = []
    for r in rows:
        if r.get("tps") is None:
            continue
        if r.get("flush") == "ASYNC_FLUSH" and not r["name"].count("+"):
            bar.append("%s: msg/s ÷ 100k = %.2f" % (r["name"], r["tps"] / TARGET_ASYNC_TPS))
        if r.get("flush") == "SYNC_FLUSH" and r.get("of_group_commit"):
            bar.append("%s: body MiB/s ÷ 512 KiB group-commit MiB/s = %.2f"
                       % (r["name"], r["of_group_commit"]))
        lone = ((result.get("disk") or {}).get("lone_fdatasync") or {}).get(
            "write4k_fdatasync_p50_ms")
        if r.get("flush") == "SYNC_FLUSH" and lone and r.get("p50_ms"):
            bar.append("%s: p50 ÷ lone fdatasync p50 = %.1f" % (r["name"], r["p50_ms"] / lone))
        if r.get("broker_cpu_us"):
            bar.append("%s: 10 µs ÷ broker µs/msg = %.2f"
                       % (r["name"], TARGET_CPU_US_PER_MSG / r["broker_cpu_us"]))
    if ratios or bar:
        out.append("Ratios (same run; ≥ 1.00 meets the bar where one is given):")
        out.append("")
        for name, v, goal in ratios:
            out.append("- %s = %s%s" % (name, _f(v, "%.2f"),
                                        "" if goal is None else " (bar ≥ %.2f)" % goal))
        for line in bar:
            out.append("- " + line)
        out.append("")
    out.append("Busiest broker threads during the measured window (% of one core):")
    out.append("")
    for r in rows:
        if r.get("threads"):
            out.append("- %s: %s" % (r["name"], ", ".join(
                "%s %.0f%%" % (html.escape(n), p) for n, p in r["threads"])))
    out.append("")
    out.append("Raw disk, same run, same file system as the stores:")
    out.append("")
    out.append("| measurement | value |")
    out.append("|---|---:|")
    for label, v in disk_lines(disk):
        out.append("| %s | %s |" % (label, v))
    out.append("")
    for note in result.get("notes", []):
        out.append("- " + note)
    if result.get("notes"):
        out.append("")
    return "\n".join(out)


def disk_lines(disk):
    """(label, formatted value) pairs for the raw-disk table."""
    lines = []

    def mib(rec):
        return "%.0f MiB/s" % rec["mib_per_s"] if rec else "n/a"
    lines.append(("sequential 1 MiB writes + fdatasync (page cache)", mib(disk.get("seq_buffered"))))
    lines.append(("sequential 1 MiB writes, O_DIRECT", mib(disk.get("seq_direct"))))
    gc = disk.get("group_commit")
    lines.append(("512 KiB write + fdatasync loop", mib(gc)))
    if gc:
        lines.append(("  fdatasync p50 / p99 in that loop", "%.2f / %.2f ms"
                      % (gc["fdatasync_p50_ms"], gc["fdatasync_p99_ms"])))
    lone = disk.get("lone_fdatasync")
    if lone:
        lines.append(("lone 4 KiB write + fdatasync p50 / p99", "%.2f / %.2f ms"
                      % (lone["write4k_fdatasync_p50_ms"], lone["write4k_fdatasync_p99_ms"])))
        lines.append(("fdatasync with nothing dirty p50", "%.3f ms" % lone["clean_fdatasync_p50_ms"]))
    return lines


def render_compare_markdown(result):
    """compare.md: one line per pair, the median ratio."""
    m = result.get("meta", {})
    out = ["# ringmq vs %s — %s" % (m.get("target"), m.get("started", "")), "",
           "Same load both sides: %s B bodies, sync sends, %s in flight, %s s per run after a "
           "warm-up; runs alternate (ABBA) so drift cancels. ringmq side: %s."
           % (m.get("size"), m.get("concurrency"), m.get("measure_secs"), m.get("ringmq_mode")),
           "", "| pair | ringmq msg/s | target msg/s | tps ratio | ringmq p99 ms | target p99 ms "
           "| p99 ratio (target/ringmq) |", "|---:|---:|---:|---:|---:|---:|---:|"]
    for i, p in enumerate(result.get("pairs", []), 1):
        out.append("| %d | %s | %s | %s | %s | %s | %s |" % (
            i, _f(p.get("ringmq_tps")), _f(p.get("target_tps")), _f(p.get("tps_ratio"), "%.2f"),
            _f(p.get("ringmq_p99_ms"), "%.2f"), _f(p.get("target_p99_ms"), "%.2f"),
            _f(p.get("p99_ratio"), "%.2f")))
    out.append("")
    out.append("Median tps ratio (ringmq / target): **%s**; median p99 ratio (target / ringmq): "
               "**%s**." % (_f(result.get("median_tps_ratio"), "%.2f"),
                            _f(result.get("median_p99_ratio"), "%.2f")))
    out.append("")
    for note in result.get("notes", []):
        out.append("- " + note)
    return "\n".join(out)


def pair_ratios(ringmq_bench, target_bench):
    """Per-pair numbers: throughput ratio ringmq/target, latency ratio target/ringmq
    (both > 1 when ringmq is better)."""
    r_tps, t_tps = ringmq_bench.get("tps"), target_bench.get("tps")
    r_p99, t_p99 = ringmq_bench.get("p99_ms"), target_bench.get("p99_ms")
    return {"ringmq_tps": r_tps, "target_tps": t_tps, "tps_ratio": ratio(r_tps, t_tps),
            "ringmq_p99_ms": r_p99, "target_p99_ms": t_p99, "p99_ratio": ratio(t_p99, r_p99)}


# ---------------------------------------------------------------- SVG

_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1")


def _esc(s):
    return html.escape(str(s), quote=True)


def _nice_ceiling(v):
    """Round an axis maximum up to 1, 2 or 5 × 10^k."""
    if v <= 0:
        return 1.0
    exp = math.floor(math.log10(v))
    for m in (1, 2, 5, 10):
        if m * 10 ** exp >= v:
            return float(m * 10 ** exp)
    return float(10 ** (exp + 1))


def _svg_open(w, h, title):
    return ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
            'viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">' % (w, h, w, h),
            '<rect width="100%" height="100%" fill="white"/>',
            '<text x="%d" y="20" text-anchor="middle" font-size="15" font-weight="bold">%s</text>'
            % (w // 2, _esc(title))]


def render_throughput_svg(rows, raw_seq_mib=None, size=1024, target_tps=TARGET_ASYNC_TPS):
    """Bars of msg/s per mode, with dashed lines for the 100k bar and for the raw disk's
    sequential limit expressed in messages of `size` bytes."""
    rows = [r for r in rows if r.get("tps") is not None]
    w, h, left, right, top, bottom = 720, 380, 70, 20, 40, 90
    pw, ph = w - left - right, h - top - bottom
    disk_tps = raw_seq_mib * MIB / size if raw_seq_mib else None
    ymax = _nice_ceiling(max([r["tps"] for r in rows] + [target_tps] + ([disk_tps] if disk_tps else [])
                             + [1]) * 1.05)
    s = _svg_open(w, h, "Throughput per mode (1 KiB sync sends, msg/s)")

    def y(v):
        return top + ph - ph * min(v, ymax) / ymax
    for i in range(6):
        v = ymax * i / 5
        s.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (left, y(v), left + pw, y(v)))
        s.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>' % (left - 6, y(v) + 4, _esc(_k(v))))
    n = max(len(rows), 1)
    slot = pw / n
    bw = min(70.0, slot * 0.6)
    for i, r in enumerate(rows):
        x = left + slot * i + (slot - bw) / 2
        s.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s: %.0f msg/s</title></rect>'
                 % (x, y(r["tps"]), bw, top + ph - y(r["tps"]), _COLORS[i % len(_COLORS)],
                    _esc(r["name"]), r["tps"]))
        s.append('<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>'
                 % (x + bw / 2, y(r["tps"]) - 4, _esc(_k(r["tps"]))))
        s.append('<text x="%.1f" y="%d" text-anchor="end" transform="rotate(-30 %.1f %d)">%s</text>'
                 % (x + bw / 2, top + ph + 16, x + bw / 2, top + ph + 16, _esc(r["name"])))
    s.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (left, top + ph, left + pw, top + ph))
    for v, label, color in ((target_tps, "target 100k msg/s", "#c00"),
                            (disk_tps, "raw disk seq limit", "#555")):
        if v:
            s.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-dasharray="6,4"/>'
                     % (left, y(v), left + pw, y(v), color))
            s.append('<text x="%d" y="%.1f" text-anchor="end" fill="%s">%s</text>'
                     % (left + pw - 4, y(v) - 4, color, _esc(label)))
    s.append("</svg>")
    return "\n".join(s) + "\n"


def render_latency_svg(rows):
    """Grouped bars p50 / p99 / p99.9 (ms) per mode on a log scale (they span decades)."""
    rows = [r for r in rows if r.get("tps") is not None]
    w, h, left, right, top, bottom = 720, 380, 70, 20, 40, 90
    pw, ph = w - left - right, h - top - bottom
    vals = [r[k] for r in rows for k in ("p50_ms", "p99_ms", "p999_ms") if r.get(k)]
    lo = 10 ** math.floor(math.log10(min(vals))) if vals else 0.01
    hi = 10 ** math.ceil(math.log10(max(vals) * 1.01)) if vals else 10.0
    if hi <= lo:
        hi = lo * 10
    s = _svg_open(w, h, "Send latency per mode (ms, log scale)")

    def y(v):
        v = max(v, lo)
        return top + ph - ph * (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
    decade = lo
    while decade <= hi * 1.0001:
        s.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>'
                 % (left, y(decade), left + pw, y(decade)))
        s.append('<text x="%d" y="%.1f" text-anchor="end">%s</text>'
                 % (left - 6, y(decade) + 4, _esc("%g" % decade)))
        decade *= 10
    n = max(len(rows), 1)
    slot = pw / n
    bw = min(22.0, slot * 0.25)
    keys = (("p50_ms", "p50"), ("p99_ms", "p99"), ("p999_ms", "p99.9"))
    for i, r in enumerate(rows):
        x0 = left + slot * i + (slot - 3 * bw) / 2
        for j, (k, label) in enumerate(keys):
            v = r.get(k) or lo
            x = x0 + j * bw
            s.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %.3f ms</title></rect>'
                     % (x, y(v), bw - 2, top + ph - y(v), _COLORS[j], _esc(r["name"]), label, v))
        s.append('<text x="%.1f" y="%d" text-anchor="end" transform="rotate(-30 %.1f %d)">%s</text>'
                 % (x0 + 1.5 * bw, top + ph + 16, x0 + 1.5 * bw, top + ph + 16, _esc(r["name"])))
    for j, (_, label) in enumerate(keys):
        s.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>' % (left + 10 + j * 80, top, _COLORS[j]))
        s.append('<text x="%d" y="%d">%s</text>' % (left + 26 + j * 80, top + 11, label))
    s.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (left, top + ph, left + pw, top + ph))
    s.append("</svg>")
    return "\n".join(s) + "\n"


def _k(v):
    if v >= 1_000_000:
        return "%.1fM" % (v / 1e6)
    if v >= 1000:
        return "%.0fk" % (v / 1e3)
    return "%.0f" % v
