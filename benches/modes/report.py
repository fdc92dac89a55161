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
# Cores used by unrelated processes during a window above which a cell is flagged.
OTHER_LOAD_WARN = 0.2
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


def parse_diskstats_written(text, dev):
    """Bytes written (sectors × 512) for device (major, minor) from /proc/diskstats."""
    major, minor = dev
    for line in text.splitlines():
        f = line.split()
        if len(f) > 9 and int(f[0]) == major and int(f[1]) == minor:
            return int(f[9]) * 512
    return None


def parse_meminfo_kib(text, key):
    """A /proc/meminfo value in KiB (None if absent)."""
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return None


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


def other_cores(machine_busy_pct, ncpu, broker_cpu_secs, client_cpu_secs, wall_secs):
    """Cores' worth of CPU used in a window by processes other than the broker and the
    load generator (never negative; None without a machine sample)."""
    if machine_busy_pct is None or wall_secs <= 0:
        return None
    used = machine_busy_pct / 100.0 * ncpu
    return max(0.0, used - (broker_cpu_secs + client_cpu_secs) / wall_secs)


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


def _numbers(value):
    try:
        return [float(x) for x in str(value).split()]
    except ValueError:
        return None


def extract_lock_hold(kv):
    """Lock-hold p50/p99/max (µs) from runtime-info keys. Accepts the broker's single key
    `ringmq.appendLockHoldUs` = "p50 p99 max", or one key per quantile whatever the
    spelling (any key containing "lockhold" plus p50 / p99 / max, e.g.
    `ringmq.lockHoldP99Us`). Millisecond keys (`...Ms`/`...Mills`) are converted. None
    when absent."""
    found = {}
    for key, value in (kv or {}).items():
        k = _NORM.sub("", key.lower())
        if "lockhold" not in k:
            continue
        nums = _numbers(value)
        if not nums:
            continue
        scale = 1000.0 if (k.endswith("ms") or k.endswith("mills") or k.endswith("millis")) else 1.0
        quantiles = [q for q in ("p50", "p99", "max") if q in k]
        if len(nums) == 3 and not quantiles:
            found.update({"p50_us": nums[0] * scale, "p99_us": nums[1] * scale,
                          "max_us": nums[2] * scale})
        elif len(nums) == 1:
            for q in quantiles:
                found[q + "_us"] = nums[0] * scale
    return found or None


def window_store_stats(before, after, secs):
    """Store profile over the measured window from two snapshots of the broker's
    cumulative `ringmq.*` runtime-info counters: records per append batch, bytes per
    fdatasync, fdatasyncs per second, network-core stalls and busy refusals."""
    def num(kv, key):
        try:
            return float((kv or {}).get(key, ""))
        except ValueError:
            return None

    def delta(key):
        a, b = num(before, key), num(after, key)
        return None if a is None or b is None else b - a
    out = {}
    batches, records = delta("ringmq.appendBatches"), delta("ringmq.appendRecords")
    if batches:
        out["records_per_batch"] = records / batches if records is not None else None
        out["batches_per_s"] = batches / secs if secs else None
    flushes, flushed = delta("ringmq.flushCount"), delta("ringmq.flushedBytes")
    if flushes:
        out["bytes_per_fdatasync"] = flushed / flushes if flushed is not None else None
        out["fdatasyncs_per_s"] = flushes / secs if secs else None
    flat = _numbers((after or {}).get("ringmq.flushLatencyUs", ""))
    if flat and len(flat) == 2:
        out["flush_p50_us"], out["flush_p99_us"] = flat
    lag = num(after, "ringmq.reputLagBytes")
    if lag is not None:
        out["reput_lag_mib"] = lag / MIB
    stalls = sum(d for d in (delta(k) for k in (after or {}) if k.startswith("ringmq.stallCount"))
                 if d)
    if stalls:
        out["stalls"] = stalls
    busy = {k.split("ringmq.busyRefusals.", 1)[1]: d for k, d in
            ((k, delta(k)) for k in (after or {}) if k.startswith("ringmq.busyRefusals."))
            if d}
    if busy:
        out["busy_refusals"] = busy
    return out


def trim_log(text, keep=300, max_lines=2000):
    """A long log cut to its first and last `keep` lines plus a count of the elided
    messages by kind (timestamps and colours stripped), so a flood of per-send warnings
    does not put tens of MB into the results folder."""
    lines = text.splitlines()
    if len(lines) <= max_lines:
        return text
    middle = lines[keep:-keep]
    kinds = {}
    for line in middle:
        kind = re.sub(r"^\S+Z\s+", "", _ANSI.sub("", line).strip())
        kinds[kind] = kinds.get(kind, 0) + 1
    summary = ["... %d lines elided; by message:" % len(middle)]
    for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1])[:20]:
        summary.append("...   %8d × %s" % (n, kind[:300]))
    return "\n".join(lines[:keep] + summary + lines[-keep:]) + "\n"


_SHUTDOWN_BAD = re.compile(r"unclean shutdown|abort file kept|panicked|cannot persist", re.I)


def shutdown_problems(log_text, limit=3):
    """WARN/ERROR lines about the shutdown itself (unclean store, failed persists, panics),
    ANSI colours and timestamps stripped, de-duplicated, at most `limit`."""
    out = []
    for line in _ANSI.sub("", log_text or "").splitlines():
        if _SHUTDOWN_BAD.search(line):
            text = re.sub(r"^\S+Z\s+", "", line.strip())
            if text not in out:
                out.append(text)
    return out[:limit]


def format_store_stats(st):
    """One clause for the diagnostics line (empty when nothing is known)."""
    if not st:
        return ""
    parts = []
    if st.get("records_per_batch") is not None:
        parts.append("%.1f records/append batch (%.0f batches/s)"
                     % (st["records_per_batch"], st.get("batches_per_s") or 0))
    if st.get("bytes_per_fdatasync") is not None:
        parts.append("%.0f KiB per flush, %.0f flushes/s"
                     % (st["bytes_per_fdatasync"] / 1024, st.get("fdatasyncs_per_s") or 0))
    if st.get("flush_p50_us") is not None:
        parts.append("flush p50/p99 %.0f/%.0f µs" % (st["flush_p50_us"], st["flush_p99_us"]))
    if st.get("reput_lag_mib"):
        parts.append("reput %.0f MiB behind at the end" % st["reput_lag_mib"])
    if st.get("stalls"):
        parts.append("%d core stalls > 500 µs" % st["stalls"])
    if st.get("busy_refusals"):
        parts.append("busy refusals " + ", ".join(
            "%s %d" % (k, v) for k, v in sorted(st["busy_refusals"].items())))
    return "; ".join(parts)


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_LOG_LOCK = re.compile(
    r"lock[_ -]?hold\D*?p50\D*?(\d+(?:\.\d+)?)\D*?p99\D*?(\d+(?:\.\d+)?)\D*?max\D*?(\d+(?:\.\d+)?)",
    re.IGNORECASE)


def extract_lock_hold_from_log(text):
    """The last `lock_hold ... p50 X ... p99 Y ... max Z` (µs) line a broker logged."""
    # tracing colours its output: drop ANSI escapes, whose digits would look like values.
    hits = _LOG_LOCK.findall(_ANSI.sub("", text or ""))
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
    gc = (disk or {}).get("best_group_commit_mib_per_s") or \
        ((disk or {}).get("group_commit") or {}).get("mib_per_s")
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
        "other_cores": run.get("other_cores"),
        "disk_probe": run.get("disk_probe"),
        "device_write_mib_s": run.get("device_write_mib_per_s"),
        "device_per_log": run.get("device_bytes_per_log_byte"),
        "dirty_mib_end": run.get("dirty_mib_end"),
        "broker_write_per_log": run.get("broker_write_bytes_per_log_byte"),
        "broker_read_per_log": run.get("broker_read_bytes_per_log_byte"),
        "store_window": run.get("store_window"),
        "rss_anon_mib": run.get("rss_anon_mib"),
        "rss_file_mib": run.get("rss_file_mib"),
        "threads": run.get("threads", []),
        "lock_hold": run.get("lock_hold"),
        "replication": run.get("replication"),
        "ha_cpu_us_per_mib": run.get("ha_cpu_us_per_mib"),
        "paced": run.get("paced"),
        "runs": len([r for r in cell.get("runs", []) if r.get("bench")]),
        "tps_all": [round(r["bench"]["tps"]) for r in cell.get("runs", []) if r.get("bench")],
    })
    return row


def mode_ratios(rows):
    """Cross-mode ratios from one run: SYNC/ASYNC per write mode, SYNC_MASTER/ASYNC_MASTER,
    direct/mmap per flush."""
    # The replication cells share a flush type and write mode with a base cell: keep
    # them out of the base comparison.
    by = {(r.get("flush"), r.get("write_mode")): r for r in rows
          if r.get("tps") and "+" not in r["name"]}
    out = []
    for wm in ("mmap", "direct"):
        s, a = by.get(("SYNC_FLUSH", wm)), by.get(("ASYNC_FLUSH", wm))
        if s and a:
            out.append(("SYNC_FLUSH / ASYNC_FLUSH (%s)" % wm, ratio(s["tps"], a["tps"]), 0.8))
    names = {r["name"]: r for r in rows if r.get("tps")}
    for fl in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        sm, am = names.get(fl + "/mmap+SYNC_MASTER"), names.get(fl + "/mmap+ASYNC_MASTER")
        if sm and am:
            out.append(("SYNC_MASTER / ASYNC_MASTER (%s, mmap)" % fl,
                        ratio(sm["tps"], am["tps"]), 0.5))
    plain = by.get(("ASYNC_FLUSH", "mmap"))
    for feature in ("ACL", "TLS"):
        cell = names.get("ASYNC_FLUSH/mmap+" + feature)
        if cell and plain:
            out.append(("%s on / off, msg/s (ASYNC_FLUSH, mmap)" % feature,
                        ratio(cell["tps"], plain["tps"]), None))
            out.append(("%s on / off, broker CPU per message (ASYNC_FLUSH, mmap)" % feature,
                        ratio(cell.get("broker_cpu_us"), plain.get("broker_cpu_us")), None))
    for fl in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        d, m = by.get((fl, "direct")), by.get((fl, "mmap"))
        if d and m:
            out.append(("direct / mmap (%s)" % fl, ratio(d["tps"], m["tps"]), None))
    return out


def percentile(values, q):
    """Nearest-rank percentile of a non-empty list (q in 0..100)."""
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(round(q / 100.0 * len(v) + 0.5)) - 1))
    return v[k]


def replication_lag(samples):
    """Replication lag from HA-status samples [(t_secs, master_max_offset, diff_bytes)] in
    time order, where diff_bytes is the slowest slave's distance behind the master.

    Bytes behind come straight from the samples. Time behind is how long before a sample
    the master's CommitLog had reached the offset that slave acknowledges (the master's
    max offset is linear between samples): the age of the newest byte the slave holds.
    Samples whose acknowledged offset predates the first sample have no time lag."""
    if not samples:
        return None
    diffs = [d for _, _, d in samples]
    lags_ms = []
    for i, (t, master_max, d) in enumerate(samples):
        if d <= 0:
            lags_ms.append(0.0)
            continue
        ack = master_max - d
        reach = None
        for j in range(i, 0, -1):
            t0, m0, _ = samples[j - 1]
            t1, m1, _ = samples[j]
            if m0 <= ack <= m1:
                reach = t1 if m1 == m0 else t0 + (ack - m0) / float(m1 - m0) * (t1 - t0)
                break
        if reach is not None:
            lags_ms.append((t - reach) * 1000.0)
    out = {"samples": len(samples),
           "diff_bytes_p50": percentile(diffs, 50), "diff_bytes_p99": percentile(diffs, 99),
           "diff_bytes_max": max(diffs)}
    if lags_ms:
        out.update({"lag_ms_p50": percentile(lags_ms, 50), "lag_ms_p99": percentile(lags_ms, 99),
                    "lag_ms_max": max(lags_ms), "lag_samples": len(lags_ms)})
    return out


def ack_lag_window(info0, info1):
    """The master's own replication-lag histogram over a window: the difference of
    runtime info's `ringmq.haAckLagMsBuckets` ("bound:count" per bucket, cumulative since
    the broker started) between two readings. Each count is one slave report, aged by the
    oldest byte it acknowledged. Quantiles are bucket upper bounds (None above them all)."""
    def parse(info):
        out = []
        for part in (info or {}).get("ringmq.haAckLagMsBuckets", "").split():
            bound, _, n = part.partition(":")
            out.append((None if bound == "inf" else float(bound), int(n)))
        return out
    before, after = parse(info0), parse(info1)
    if not after:
        return None
    if len(before) != len(after):
        before = [(b, 0) for b, _ in after]
    counts = [(b, n1 - n0) for (b, n1), (_, n0) in zip(after, before)]
    total = sum(n for _, n in counts)
    if total <= 0:
        return {"reports": 0}

    def quantile(q):
        rank, seen = max(1, math.ceil(total * q)), 0
        for bound, n in counts:
            seen += n
            if seen >= rank:
                return bound
        return None
    return {"reports": total, "p50_ms_le": quantile(0.5), "p99_ms_le": quantile(0.99),
            "max_ms_le": quantile(1.0),
            "within_5ms": sum(n for b, n in counts if b is not None and b <= 5.0) / float(total)}


def thread_cpu_secs(before, after, clk_tck, prefix):
    """CPU seconds used in a window by the threads whose name starts with `prefix`."""
    total = 0
    for tid, (comm, ticks) in after.items():
        if comm.startswith(prefix):
            total += ticks - before.get(tid, (comm, 0))[1]
    return total / float(clk_tck)


# ---------------------------------------------------------------- Markdown

def _f(v, fmt="%.0f", none="–"):
    if v is None:
        return none
    return fmt % v


def _pct(v):
    return "–" if v is None else "%.0f%%" % (v * 100)


def _lag_text(lag):
    if not lag:
        return "no lag samples"
    if "diff_bytes_p50" not in lag:
        text = "no HA status samples"
    else:
        text = "slave behind by p50 %s / p99 %s / max %s KiB" % (
            _f(lag["diff_bytes_p50"] / 1024.0, "%.1f"),
            _f(lag["diff_bytes_p99"] / 1024.0, "%.1f"),
            _f(lag["diff_bytes_max"] / 1024.0, "%.1f"))
    if lag.get("lag_ms_p99") is not None:
        text += ", p50 %s / p99 %s / max %s ms" % (
            _f(lag["lag_ms_p50"], "%.2f"), _f(lag["lag_ms_p99"], "%.2f"),
            _f(lag["lag_ms_max"], "%.2f"))
    ack = lag.get("broker")
    if ack and ack.get("reports"):
        le = lambda v: "> 5000" if v is None else "≤ %g" % v  # noqa: E731
        text += "; measured by the master over %d slave reports: p50 %s / p99 %s / max %s ms" % (
            ack["reports"], le(ack["p50_ms_le"]), le(ack["p99_ms_le"]), le(ack["max_ms_le"]))
    return text


def replication_lines(rows):
    """One line per replication cell: lag at full load, lag at the paced rate, HA CPU."""
    lines = []
    for r in rows:
        if r.get("replication") is None and r.get("paced") is None:
            continue
        parts = ["full load: %s" % _lag_text(r.get("replication"))]
        paced = r.get("paced") or {}
        if paced.get("tps"):
            parts.append("paced at %s msg/s (%s achieved): %s" % (
                _f(paced.get("rate")), _f(paced["tps"]), _lag_text(paced.get("replication"))))
        elif paced.get("error"):
            parts.append("paced run failed: %s" % paced["error"])
        if r.get("ha_cpu_us_per_mib") is not None:
            parts.append("HA sender %s µs CPU per MiB replicated" % _f(r["ha_cpu_us_per_mib"], "%.0f"))
        lines.append("%s — %s" % (r["name"], "; ".join(parts)))
    return lines


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
    if meta.get("broker_conf_extra"):
        out.append("")
        out.append("Extra broker.conf lines: `%s`." % "`, `".join(meta["broker_conf_extra"]))
    out.append("")
    out.append("| mode | msg/s | body MiB/s | log MiB/s | of raw seq | p50 ms | p99 ms | p99.9 ms "
               "| max ms | fail | broker µs/msg | client µs/msg | CPU busy | other load | "
               "lock-hold p50/p99/max µs |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        if r.get("tps") is None:
            out.append("| %s | %s |  |  |  |  |  |  |  |  |  |  |  |  | %s |"
                       % (r["name"], r["status"], r.get("note", "")))
            continue
        lh = r.get("lock_hold")
        lh_text = ("%s / %s / %s" % (_f(lh.get("p50_us")), _f(lh.get("p99_us")),
                                     _f(lh.get("max_us")))) if lh else "n/a"
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["name"], _f(r["tps"]), _f(r["body_mib_s"], "%.1f"), _f(r["log_mib_s"], "%.1f"),
            _pct(r["of_raw_seq"]), _f(r["p50_ms"], "%.2f"), _f(r["p99_ms"], "%.2f"),
            _f(r["p999_ms"], "%.2f"), _f(r["max_ms"], "%.1f"), _f(r["failures"]),
            _f(r["broker_cpu_us"], "%.1f"), _f(r["client_cpu_us"], "%.1f"),
            _f(r["machine_busy_pct"], "%.0f%%"), _f(r.get("other_cores"), "%.2f cores"),
            lh_text))
    out.append("")
    ratios = mode_ratios(rows)
    bar = []
    for r in rows:
        if r.get("tps") is None:
            continue
        if r.get("flush") == "ASYNC_FLUSH" and not r["name"].count("+"):
            bar.append("%s: msg/s ÷ 100k = %.2f" % (r["name"], r["tps"] / TARGET_ASYNC_TPS))
        if r.get("flush") == "SYNC_FLUSH" and r.get("of_group_commit"):
            bar.append("%s: body MiB/s ÷ best 512 KiB group-commit MiB/s = %.2f"
                       % (r["name"], r["of_group_commit"]))
        # The device's fdatasync latency drifts; prefer the probe taken right before the cell.
        lone = (r.get("disk_probe") or {}).get("fdatasync_p50_ms") or \
            ((result.get("disk") or {}).get("lone_fdatasync") or {}).get("write4k_fdatasync_p50_ms")
        if r.get("flush") == "SYNC_FLUSH" and lone and r.get("p50_ms"):
            bar.append("%s: p50 ÷ lone fdatasync p50 (%.2f ms) = %.1f"
                       % (r["name"], lone, r["p50_ms"] / lone))
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
    repl = replication_lines(rows)
    if repl:
        out.append("Replication (master and slave are separate processes on this machine; lag "
                   "is sampled from the master's GET_BROKER_HA_STATUS every 20 ms):")
        out.append("")
        out.extend("- " + line for line in repl)
        out.append("")
    failed = ["%s %s" % (r["name"], _f(r["failures"])) for r in rows if r.get("failures")]
    if failed:
        out.append("Failed sends (msg/s counts acknowledged sends only; codes in results.json): "
                   + ", ".join(failed) + ".")
        out.append("")
    busy = [r["name"] for r in rows if (r.get("other_cores") or 0) >= OTHER_LOAD_WARN]
    if busy:
        out.append("**Shared machine:** other processes used ≥ %.1f cores during %s; those "
                   "cells' numbers understate ringmq — rerun on an idle machine."
                   % (OTHER_LOAD_WARN, ", ".join(busy)))
        out.append("")
    out.append("Busiest broker threads during the measured window (% of one core), and what "
               "reached the disk device:")
    out.append("")
    for r in rows:
        if r.get("threads"):
            io = ""
            if r.get("device_write_mib_s") is not None:
                io = "; device writes %.0f MiB/s" % r["device_write_mib_s"]
                if r.get("device_per_log"):
                    io += " (%.2f× the CommitLog's growth)" % r["device_per_log"]
            if r.get("broker_write_per_log") is not None:
                io += "; broker's own write_bytes %.2f× the CommitLog's growth" % r["broker_write_per_log"]
            if r.get("broker_read_per_log"):
                io += "; broker read_bytes %.2f× the CommitLog's growth" % r["broker_read_per_log"]
            if r.get("rss_anon_mib") is not None:
                io += "; broker RSS anon %.0f MiB + file %.0f MiB" % (
                    r["rss_anon_mib"], r.get("rss_file_mib") or 0)
            if r.get("dirty_mib_end") is not None:
                io += "; %.0f MiB dirty in the page cache at the end" % r["dirty_mib_end"]
            extra = format_store_stats(r.get("store_window"))
            if extra:
                io += "; store: " + extra
            out.append("- %s: %s%s" % (r["name"], ", ".join(
                "%s %.0f%%" % (html.escape(n), p) for n, p in r["threads"]), io))
    out.append("")
    probes = [(r["name"], r["disk_probe"]) for r in rows
              if r.get("disk_probe") and r["disk_probe"].get("fdatasync_p50_ms") is not None]
    if probes:
        out.append("Disk right before each cell (2 s probe): " + "; ".join(
            "%s %s MiB/s, fdatasync p50 %.2f ms" % (n, _f(p.get("seq_mib_per_s")),
                                                   p["fdatasync_p50_ms"]) for n, p in probes))
        out.append("")
    end = result.get("disk_end")
    out.append("Raw disk, same run, same file system as the stores (the ratios use the best "
               "sequential rate seen: %s MiB/s):" % _f(disk.get("raw_seq_mib_per_s")))
    out.append("")
    if end:
        out.append("| measurement | run start | run end |")
        out.append("|---|---:|---:|")
        for (label, v), (_, v2) in zip(disk_lines(disk), disk_lines(end)):
            out.append("| %s | %s | %s |" % (label, v, v2))
    else:
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
    """(label, formatted value) pairs for the raw-disk table; always the same six labels
    so a run-start and a run-end measurement line up."""
    disk = disk or {}

    def mib(rec):
        return "%.0f MiB/s" % rec["mib_per_s"] if rec else "n/a"
    gc = disk.get("group_commit")
    lone = disk.get("lone_fdatasync")
    return [
        ("sequential 1 MiB writes + fdatasync (page cache)", mib(disk.get("seq_buffered"))),
        ("sequential 1 MiB writes, O_DIRECT", mib(disk.get("seq_direct"))),
        ("512 KiB write + fdatasync loop", mib(gc)),
        ("  fdatasync p50 / p99 in that loop", "%.2f / %.2f ms"
         % (gc["fdatasync_p50_ms"], gc["fdatasync_p99_ms"]) if gc else "n/a"),
        ("lone 4 KiB write + fdatasync p50 / p99", "%.2f / %.2f ms"
         % (lone["write4k_fdatasync_p50_ms"], lone["write4k_fdatasync_p99_ms"]) if lone else "n/a"),
        ("fdatasync with nothing dirty p50",
         "%.3f ms" % lone["clean_fdatasync_p50_ms"] if lone else "n/a"),
    ]


def render_compare_markdown(result):
    """compare.md: one line per pair, the median ratio."""
    m = result.get("meta", {})
    out = ["# ringmq vs %s — %s" % (m.get("target"), m.get("started", "")), "",
           "Same load both sides: %s B bodies, sync sends, %s in flight, %s s per run after a "
           "warm-up; runs alternate (ABBA) so drift cancels. ringmq side: %s."
           % (m.get("size"), m.get("concurrency"), m.get("measure_secs"), m.get("ringmq_mode")),
           "", "| pair | ringmq msg/s | target msg/s | tps ratio | ringmq p99 ms | target p99 ms "
           "| p99 ratio (target/ringmq) | ringmq µs/msg | target µs/msg |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for i, p in enumerate(result.get("pairs", []), 1):
        out.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            i, _f(p.get("ringmq_tps")), _f(p.get("target_tps")), _f(p.get("tps_ratio"), "%.2f"),
            _f(p.get("ringmq_p99_ms"), "%.2f"), _f(p.get("target_p99_ms"), "%.2f"),
            _f(p.get("p99_ratio"), "%.2f"), _f(p.get("ringmq_cpu_us_per_msg"), "%.1f"),
            _f(p.get("target_cpu_us_per_msg"), "%.1f")))
    out.append("")
    tps = [p["tps_ratio"] for p in result.get("pairs", []) if p.get("tps_ratio")]
    spread = (" (pairs range %.2f–%.2f)" % (min(tps), max(tps))) if len(tps) > 1 else ""
    out.append("Median tps ratio (ringmq / target): **%s**%s; median p99 ratio (target / ringmq): "
               "**%s**." % (_f(result.get("median_tps_ratio"), "%.2f"), spread,
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


def build_pair(baseline_run, candidate_run):
    """One baseline/candidate pair of a --baseline comparison: msg/s ratio
    (candidate / baseline, > 1 is faster) and broker CPU per message ratio (candidate /
    baseline, < 1 is cheaper). None when either run failed."""
    b, c = baseline_run.get("bench"), candidate_run.get("bench")
    if not b or not c:
        return None
    b_cpu = baseline_run.get("broker_cpu_us_per_msg")
    c_cpu = candidate_run.get("broker_cpu_us_per_msg")
    return {"baseline_tps": b.get("tps"), "candidate_tps": c.get("tps"),
            "tps_ratio": ratio(c.get("tps"), b.get("tps")),
            "baseline_cpu_us_per_msg": b_cpu, "candidate_cpu_us_per_msg": c_cpu,
            "cpu_ratio": ratio(c_cpu, b_cpu),
            "baseline_p99_ms": b.get("p99_ms"), "candidate_p99_ms": c.get("p99_ms")}


def build_medians(pairs):
    """Medians over a cell's pairs of every number `build_pair` reports."""
    keys = ("baseline_tps", "candidate_tps", "tps_ratio", "baseline_cpu_us_per_msg",
            "candidate_cpu_us_per_msg", "cpu_ratio", "baseline_p99_ms", "candidate_p99_ms")
    return {k: median(p[k] for p in pairs if p.get(k) is not None) for k in keys}


def render_builds_markdown(result):
    """builds.md: per cell, each pair and the medians of a --baseline comparison."""
    m = result.get("meta", {})
    out = ["# ringmq build against build — %s" % m.get("started", ""), "",
           "Baseline `%s`, candidate `%s`: same load both sides (%s B bodies, sync sends, %s in "
           "flight over %s connection(s), %s s per run after a warm-up, a fresh broker per run); "
           "pairs alternate which build runs first (ABBA) so the sitting's drift cancels."
           % (m.get("baseline"), m.get("candidate"), m.get("size"), m.get("concurrency"),
              m.get("connections"), m.get("measure_secs")), "",
           "| cell | pair | baseline msg/s | candidate msg/s | msg/s ratio | baseline µs/msg "
           "| candidate µs/msg | µs/msg ratio | baseline p99 ms | candidate p99 ms |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for cell in result.get("cells", []):
        rows = [(str(i), p) for i, p in enumerate(cell.get("pairs", []), 1)]
        if cell.get("pairs"):
            rows.append(("**median**", cell.get("median") or {}))
        for label, p in rows:
            out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                cell["name"], label, _f(p.get("baseline_tps")), _f(p.get("candidate_tps")),
                _f(p.get("tps_ratio"), "%.3f"), _f(p.get("baseline_cpu_us_per_msg"), "%.2f"),
                _f(p.get("candidate_cpu_us_per_msg"), "%.2f"), _f(p.get("cpu_ratio"), "%.3f"),
                _f(p.get("baseline_p99_ms"), "%.2f"), _f(p.get("candidate_p99_ms"), "%.2f")))
    out.append("")
    out.append("msg/s ratio > 1: the candidate is faster; µs/msg ratio < 1: it spends less "
               "broker CPU per message.")
    for note in result.get("notes", []):
        out.append("- " + note)
    return "\n".join(out)


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
    w, h, left, right, top, bottom = 720, 390, 70, 20, 52, 90
    pw, ph = w - left - right, h - top - bottom
    disk_tps = raw_seq_mib * MIB / size if raw_seq_mib else None
    top_bar = max([r["tps"] for r in rows] + [target_tps, 1])
    # A fast disk's limit can be 20x the bars; then it is named, not drawn to scale.
    disk_on_scale = disk_tps is not None and disk_tps <= 2.5 * top_bar
    ymax = _nice_ceiling(max(top_bar, disk_tps if disk_on_scale else 0) * 1.08)
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
        s.append('<text x="%.1f" y="%.1f" text-anchor="middle" font-weight="bold">%s</text>'
                 % (x + bw / 2, y(r["tps"]) - 5, _esc(_k(r["tps"]))))
        s.append('<text x="%.1f" y="%d" text-anchor="end" transform="rotate(-30 %.1f %d)">%s</text>'
                 % (x + bw / 2, top + ph + 16, x + bw / 2, top + ph + 16, _esc(r["name"])))
    s.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (left, top + ph, left + pw, top + ph))
    # Reference lines; their labels sit in a legend row under the title so they never
    # collide with the bars' value labels.
    legend = [(target_tps, "target %s msg/s" % _k(target_tps), "#c00", True)]
    if disk_tps:
        legend.append((disk_tps, "raw disk sequential limit = %s msg/s%s"
                       % (_k(disk_tps), "" if disk_on_scale else " (off scale)"), "#555",
                       disk_on_scale))
    lx = left + 4
    for v, label, color, drawn in legend:
        if drawn:
            s.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-dasharray="6,4"/>'
                     % (left, y(v), left + pw, y(v), color))
        s.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-dasharray="6,4"/>'
                 % (lx, top - 4, lx + 24, top - 4, color))
        s.append('<text x="%d" y="%d" fill="%s">%s</text>' % (lx + 30, top, color, _esc(label)))
        lx += 40 + 7 * len(label)
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
