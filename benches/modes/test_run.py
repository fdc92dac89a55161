"""Unit tests of the harness's pure parts -- no broker, no disk benchmark, well under a second.

    python3 -m unittest benches/modes/test_run.py        (from the repo root)
    cd benches/modes && python3 -m unittest test_run

Covers bench-JSON parsing, /proc parsing, CPU and ratio math, lock-hold discovery, the
Markdown and SVG renderers, broker.conf/bench argv generation, the README block update and
the Remoting codec (including one request against an in-process fake server).
"""

import json
import os
import socket
import struct
import sys
import threading
import unittest
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import remoting  # noqa: E402
import report  # noqa: E402
import run  # noqa: E402

BENCH_LINE = ('{"mode":"producer","elapsed_secs":8.0,"messages":800000,"bytes":819200000,'
              '"tps":100000.0,"mb_per_s":97.66,"avg_ms":1.1,"p50_ms":1.0,"p99_ms":3.5,'
              '"p999_ms":9.0,"max_ms":20.0,"failures":0,"failures_by_code":{}}')


def fake_cell(name, flush, wm, tps, p50=1.0, p99=4.0, p999=9.0, cpu=8.0, lock=None):
    bench = json.loads(BENCH_LINE)
    bench.update({"tps": tps, "p50_ms": p50, "p99_ms": p99, "p999_ms": p999})
    return {"name": name, "flush": flush, "write_mode": wm, "status": "ok",
            "runs": [{"bench": bench, "broker_cpu_us_per_msg": cpu,
                      "client_cpu_us_per_msg": 5.0, "machine_busy_pct": 97.0,
                      "threads": [("ringmq-net-0", 99.0), ("append", 40.0)],
                      "log_mib_per_s": 115.0, "lock_hold": lock,
                      "device_write_mib_per_s": 230.0, "device_bytes_per_log_byte": 2.0,
                      "dirty_mib_end": 900.0}]}


def fake_result():
    disk = {"seq_buffered": {"mib_per_s": 300.0}, "seq_direct": {"mib_per_s": 310.0},
            "group_commit": {"mib_per_s": 68.0, "fdatasync_p50_ms": 6.8, "fdatasync_p99_ms": 14.0},
            "lone_fdatasync": {"write4k_fdatasync_p50_ms": 4.0, "write4k_fdatasync_p99_ms": 8.0,
                               "clean_fdatasync_p50_ms": 3.9},
            "raw_seq_mib_per_s": 310.0}
    cells = [fake_cell("ASYNC_FLUSH/mmap", "ASYNC_FLUSH", "mmap", 120000.0,
                       lock={"p50_us": 3, "p99_us": 20, "max_us": 900}),
             fake_cell("ASYNC_FLUSH/direct", "ASYNC_FLUSH", "direct", 110000.0),
             fake_cell("SYNC_FLUSH/mmap", "SYNC_FLUSH", "mmap", 60000.0, p50=8, p99=15, p999=40),
             fake_cell("SYNC_FLUSH/direct", "SYNC_FLUSH", "direct", 50000.0, p50=9, p99=16, p999=41),
             {"name": "ASYNC_FLUSH/mmap+SYNC_MASTER", "flush": "ASYNC_FLUSH", "write_mode": "mmap",
              "status": "skipped", "note": "HA not available", "runs": []}]
    return {"meta": {"size": 1024, "concurrency": 256, "connections": 4, "threads": 1,
                     "warmup_secs": 3, "measure_secs": 8, "repeats": 1, "cpus": 2,
                     "started": "2026-11-30 09:00:00"},
            "disk": disk, "cells": cells, "notes": ["a note <with> markup"]}


class ParseTests(unittest.TestCase):
    def test_bench_json_is_the_last_json_line(self):
        out = "interval lines\nsummary: 800000 msgs ...\n" + BENCH_LINE + "\n\n"
        b = report.parse_bench_json(out)
        self.assertEqual(b["tps"], 100000.0)
        self.assertEqual(b["p999_ms"], 9.0)

    def test_bench_json_skips_trailing_noise_and_fills_missing_keys(self):
        out = '{"tps": 5}\n{"not": "a summary"}\nlog line {braces}\n'
        b = report.parse_bench_json(out)
        self.assertEqual(b["tps"], 5)
        self.assertEqual(b["failures"], 0)
        self.assertEqual(b["p99_ms"], 0)

    def test_bench_json_missing_raises(self):
        with self.assertRaises(ValueError):
            report.parse_bench_json("error: no route for topic\n")

    def test_proc_stat_with_awkward_comm(self):
        fields = ["S"] + [str(i) for i in range(4, 14)] + ["250", "50"] + ["0"] * 30
        line = "1234 (ring mq) (x)) " + " ".join(fields)
        comm, ticks = report.parse_proc_stat(line)
        self.assertEqual(comm, "ring mq) (x)")
        self.assertEqual(ticks, 300)

    def test_diskstats_and_meminfo(self):
        stats = ("   7       0 loop0 1 0 2 0 0 0 0 0 0 0 0\n"
                 " 254       0 vda 100 0 800 10 50 0 4096 20 0 30 30\n")
        self.assertEqual(report.parse_diskstats_written(stats, (254, 0)), 4096 * 512)
        self.assertIsNone(report.parse_diskstats_written(stats, (8, 0)))
        self.assertEqual(report.parse_meminfo_kib("MemTotal: 10 kB\nDirty:   2048 kB\n", "Dirty"), 2048)

    def test_cpu_line(self):
        busy, iowait, total = report.parse_cpu_line("cpu  100 0 50 800 30 5 5 10 0 0")
        self.assertEqual(total, 1000)
        self.assertEqual(iowait, 30)
        self.assertEqual(busy, 1000 - 800 - 30)


class MathTests(unittest.TestCase):
    def test_cpu_per_message(self):
        # 150 ticks at 100 Hz = 1.5 s of CPU over 150k messages = 10 µs each.
        self.assertAlmostEqual(report.cpu_us_per_msg(1000, 1150, 100, 150_000), 10.0)
        self.assertIsNone(report.cpu_us_per_msg(0, 10, 100, 0))

    def test_thread_cpu_sorts_and_drops_idle(self):
        before = {1: ("net-0", 100), 2: ("append", 0), 3: ("idle", 5)}
        after = {1: ("net-0", 900), 2: ("append", 400), 3: ("idle", 5), 4: ("new", 100)}
        rows = report.thread_cpu(before, after, 100, 8.0)
        self.assertEqual([r[0] for r in rows], ["net-0", "append", "new"])
        self.assertAlmostEqual(rows[0][1], 100.0)

    def test_ratio_and_median(self):
        self.assertIsNone(report.ratio(1, 0))
        self.assertAlmostEqual(report.ratio(3, 2), 1.5)
        self.assertEqual(report.median([3, None, 1, 2]), 2)
        self.assertEqual(report.median([1, 2, 3, 4]), 2.5)
        self.assertIsNone(report.median([]))

    def test_other_cores(self):
        # 2 cores 90 % busy over 10 s = 18 core-seconds; broker 8 + client 4 -> 0.6 cores other.
        self.assertAlmostEqual(report.other_cores(90.0, 2, 8.0, 4.0, 10.0), 0.6)
        self.assertEqual(report.other_cores(10.0, 2, 8.0, 4.0, 10.0), 0.0)
        self.assertIsNone(report.other_cores(None, 2, 1, 1, 10))

    def test_body_mib(self):
        self.assertAlmostEqual(report.body_mib_per_s(1024, 1024), 1.0)

    def test_pick_median_run(self):
        runs = [{"bench": {"tps": 3}}, {"error": "x"}, {"bench": {"tps": 1}}, {"bench": {"tps": 2}}]
        self.assertEqual(report.pick_median_run(runs)["bench"]["tps"], 2)
        self.assertIsNone(report.pick_median_run([{"error": "x"}]))

    def test_choose_concurrency(self):
        self.assertEqual(report.choose_concurrency([(32, 50e3), (128, 97e3), (512, 100e3)]), 128)
        self.assertEqual(report.choose_concurrency([(32, None), (128, 10.0)]), 128)
        self.assertIsNone(report.choose_concurrency([(32, None)]))

    def test_pair_ratios(self):
        p = report.pair_ratios({"tps": 200, "p99_ms": 2.0}, {"tps": 100, "p99_ms": 8.0})
        self.assertAlmostEqual(p["tps_ratio"], 2.0)
        self.assertAlmostEqual(p["p99_ratio"], 4.0)

    def test_replication_lag(self):
        # The master grows 1 MB per 10 ms. At t=0.03 the slave is 0.5 MB behind: it holds
        # what the master had at t=0.025, 5 ms earlier.
        samples = [(0.00, 0, 0), (0.01, 1_000_000, 0), (0.02, 2_000_000, 0),
                   (0.03, 3_000_000, 500_000), (0.04, 4_000_000, 0)]
        lag = report.replication_lag(samples)
        self.assertEqual(lag["diff_bytes_max"], 500_000)
        self.assertAlmostEqual(lag["lag_ms_max"], 5.0, places=6)
        self.assertEqual(lag["lag_ms_p50"], 0.0)
        # An acknowledged offset older than the first sample has no time lag.
        lag = report.replication_lag([(0.0, 1000, 900), (0.01, 2000, 0)])
        self.assertEqual(lag["lag_samples"], 1)
        self.assertIsNone(report.replication_lag([]))

    def test_ack_lag_window_diffs_the_masters_buckets(self):
        info0 = {"ringmq.haAckLagMsBuckets": "1:10 5:0 inf:0"}
        info1 = {"ringmq.haAckLagMsBuckets": "1:108 5:1 inf:1"}
        got = report.ack_lag_window(info0, info1)
        self.assertEqual(got["reports"], 100)
        self.assertEqual(got["p50_ms_le"], 1.0)
        self.assertEqual(got["p99_ms_le"], 5.0)
        self.assertIsNone(got["max_ms_le"])
        self.assertAlmostEqual(got["within_5ms"], 0.99)
        self.assertIsNone(report.ack_lag_window({}, {}))
        self.assertEqual(report.ack_lag_window(info1, info1), {"reports": 0})
        text = report._lag_text(dict(report.replication_lag([(0.0, 0, 0)]), broker=got))
        self.assertIn("p99 ≤ 5 / max > 5000 ms", text)

    def test_replication_ratio_keeps_base_cells_apart(self):
        rows = [{"name": "ASYNC_FLUSH/mmap", "flush": "ASYNC_FLUSH", "write_mode": "mmap",
                 "tps": 100.0},
                {"name": "SYNC_FLUSH/mmap", "flush": "SYNC_FLUSH", "write_mode": "mmap",
                 "tps": 90.0},
                {"name": "ASYNC_FLUSH/mmap+ASYNC_MASTER", "flush": "ASYNC_FLUSH",
                 "write_mode": "mmap", "tps": 60.0},
                {"name": "ASYNC_FLUSH/mmap+SYNC_MASTER", "flush": "ASYNC_FLUSH",
                 "write_mode": "mmap", "tps": 30.0},
                {"name": "SYNC_FLUSH/mmap+ASYNC_MASTER", "flush": "SYNC_FLUSH",
                 "write_mode": "mmap", "tps": 40.0},
                {"name": "SYNC_FLUSH/mmap+SYNC_MASTER", "flush": "SYNC_FLUSH",
                 "write_mode": "mmap", "tps": 30.0}]
        got = dict((n, v) for n, v, _ in report.mode_ratios(rows))
        self.assertAlmostEqual(got["SYNC_FLUSH / ASYNC_FLUSH (mmap)"], 0.9)
        self.assertAlmostEqual(got["SYNC_MASTER / ASYNC_MASTER (ASYNC_FLUSH, mmap)"], 0.5)
        self.assertAlmostEqual(got["SYNC_MASTER / ASYNC_MASTER (SYNC_FLUSH, mmap)"], 0.75)

    def test_acl_ratios_compare_with_the_plain_base_cell(self):
        rows = [{"name": "ASYNC_FLUSH/mmap", "flush": "ASYNC_FLUSH", "write_mode": "mmap",
                 "tps": 100.0, "broker_cpu_us": 8.0},
                {"name": "ASYNC_FLUSH/mmap+ACL", "flush": "ASYNC_FLUSH", "write_mode": "mmap",
                 "tps": 80.0, "broker_cpu_us": 10.0}]
        got = dict((n, v) for n, v, _ in report.mode_ratios(rows))
        self.assertAlmostEqual(got["ACL on / off, msg/s (ASYNC_FLUSH, mmap)"], 0.8)
        self.assertAlmostEqual(got["ACL on / off, broker CPU per message (ASYNC_FLUSH, mmap)"], 1.25)

    def test_tls_cell_runs_the_bench_with_tls_and_reports_its_ratios(self):
        conf = run.broker_conf(run.tls_cells()[0], 10911, 9876, "/x/store-master")
        self.assertIn("tls.server.mode=permissive\n", conf)
        argv = run.bench_argv("ringmq", "ns", {"size": 1, "concurrency": 1, "connections": 1,
                                               "threads": 1}, 1, tls=True)
        self.assertIn("--tls", argv)
        self.assertNotIn("--tls", run.bench_argv("ringmq", "ns", {"size": 1, "concurrency": 1,
                                                                  "connections": 1, "threads": 1}, 1))
        rows = [{"name": "ASYNC_FLUSH/mmap", "flush": "ASYNC_FLUSH", "write_mode": "mmap",
                 "tps": 100.0, "broker_cpu_us": 8.0},
                {"name": "ASYNC_FLUSH/mmap+TLS", "flush": "ASYNC_FLUSH", "write_mode": "mmap",
                 "tps": 50.0, "broker_cpu_us": 16.0}]
        got = dict((n, v) for n, v, _ in report.mode_ratios(rows))
        self.assertAlmostEqual(got["TLS on / off, msg/s (ASYNC_FLUSH, mmap)"], 0.5)
        self.assertAlmostEqual(got["TLS on / off, broker CPU per message (ASYNC_FLUSH, mmap)"], 2.0)

    def test_acl_cell_signs_as_the_broker_checks(self):
        import remoting
        fields = remoting.signed_fields({"a": "1", "b": "topicA"}, b"hello", ("rocketmq2", "12345678"))
        # The worked example of the signature layout; the same vector pins ringmq's signer.
        self.assertEqual(fields["Signature"], "9leZtC79TvRQGAv6eYD/n/41FTU=")
        conf = run.broker_conf(run.acl_cells()[0], 10911, 9876, "/x/store-master")
        self.assertIn("aclEnable=true\nrocketmqHome=/x\n", conf)
        self.assertIn("--access-key", run.bench_argv("ringmq", "ns", {"size": 1, "concurrency": 1,
                      "connections": 1, "threads": 1}, 1, acl=True))

    def test_thread_cpu_secs_by_prefix(self):
        before = {1: ("ringmq-ha", 10), 2: ("ringmq-append", 0)}
        after = {1: ("ringmq-ha", 60), 2: ("ringmq-append", 500)}
        self.assertAlmostEqual(report.thread_cpu_secs(before, after, 100, "ringmq-ha"), 0.5)

    def test_mode_ratios(self):
        rows = [report.summarize_cell(c, 1024, None) for c in fake_result()["cells"]]
        got = dict((n, v) for n, v, _ in report.mode_ratios(rows))
        self.assertAlmostEqual(got["SYNC_FLUSH / ASYNC_FLUSH (mmap)"], 0.5)
        self.assertAlmostEqual(got["direct / mmap (ASYNC_FLUSH)"], 110 / 120)


class LockHoldTests(unittest.TestCase):
    def test_runtime_info_keys_any_spelling(self):
        kv = {"ringmq.lockHoldP50Us": "4", "ringmq.lockHoldP99Us": "30",
              "ringmq.lockHoldMaxUs": "1200", "putTps": "0.0 0.0 0.0"}
        self.assertEqual(report.extract_lock_hold(kv),
                         {"p50_us": 4.0, "p99_us": 30.0, "max_us": 1200.0})

    def test_runtime_info_millisecond_keys_are_converted(self):
        kv = {"lock_hold_p99_ms": "0.5", "lockHoldMaxMills": "2"}
        self.assertEqual(report.extract_lock_hold(kv), {"p99_us": 500.0, "max_us": 2000.0})

    def test_broker_single_key_p50_p99_max(self):
        kv = {"ringmq.appendLockHoldUs": "3 41 1500", "ringmq.flushLatencyUs": "900 4000"}
        self.assertEqual(report.extract_lock_hold(kv),
                         {"p50_us": 3.0, "p99_us": 41.0, "max_us": 1500.0})
        self.assertIsNone(report.extract_lock_hold({"ringmq.appendLockHoldUs": "n/a"}))

    def test_window_store_stats(self):
        before = {"ringmq.appendBatches": "100", "ringmq.appendRecords": "1000",
                  "ringmq.flushCount": "10", "ringmq.flushedBytes": "1048576",
                  "ringmq.stallCount.core0": "1", "ringmq.busyRefusals.OVERLOAD": "0",
                  "ringmq.busyRefusals.PC_SYNCHRONIZED": "5"}
        after = {"ringmq.appendBatches": "1100", "ringmq.appendRecords": "81000",
                 "ringmq.flushCount": "410", "ringmq.flushedBytes": str(1048576 + 400 * 262144),
                 "ringmq.flushLatencyUs": "800 3000", "ringmq.stallCount.core0": "4",
                 "ringmq.busyRefusals.OVERLOAD": "0", "ringmq.busyRefusals.PC_SYNCHRONIZED": "7",
                 "ringmq.reputLagBytes": str(3 * 1048576)}
        st = report.window_store_stats(before, after, 10.0)
        self.assertAlmostEqual(st["records_per_batch"], 80.0)
        self.assertAlmostEqual(st["batches_per_s"], 100.0)
        self.assertAlmostEqual(st["bytes_per_fdatasync"], 262144.0)
        self.assertAlmostEqual(st["fdatasyncs_per_s"], 40.0)
        self.assertEqual(st["stalls"], 3)
        self.assertEqual(st["busy_refusals"], {"PC_SYNCHRONIZED": 2})
        text = report.format_store_stats(st)
        self.assertIn("80.0 records/append batch (100 batches/s)", text)
        self.assertIn("256 KiB per flush, 40 flushes/s", text)
        self.assertIn("flush p50/p99 800/3000 µs", text)
        self.assertIn("busy refusals PC_SYNCHRONIZED 2", text)
        self.assertIn("reput 3 MiB behind at the end", text)
        self.assertEqual(report.window_store_stats({}, {}, 1.0), {})
        self.assertEqual(report.format_store_stats({}), "")

    def test_shutdown_problems(self):
        text = ("\x1b[2m2026-11-30T09:04:29.366658Z\x1b[0m \x1b[33m WARN\x1b[0m ringmq_store::store: "
                "unclean shutdown: abort file kept, next start recovers abnormally\n"
                "2026-11-30T09:04:29Z INFO broker stopped\n"
                "2026-11-30T09:04:30Z ERROR ringmq_broker::broker: cannot persist delayOffset.json\n"
                "2026-11-30T09:04:31Z ERROR ringmq_broker::broker: cannot persist delayOffset.json\n")
        self.assertEqual(report.shutdown_problems(text), [
            "WARN ringmq_store::store: unclean shutdown: abort file kept, next start recovers abnormally",
            "ERROR ringmq_broker::broker: cannot persist delayOffset.json"])
        self.assertEqual(report.shutdown_problems(""), [])

    def test_trim_log(self):
        lines = ["2026-11-30T09:00:00.%06dZ WARN send not stored status=\"X\"" % i for i in range(5000)]
        text = "boot\n" + "\n".join(lines) + "\nstopped\n"
        out = report.trim_log(text, keep=10, max_lines=100).splitlines()
        self.assertEqual(out[0], "boot")
        self.assertEqual(out[-1], "stopped")
        self.assertIn("... 4982 lines elided; by message:", out)
        self.assertIn('...       4982 × WARN send not stored status="X"', out)
        self.assertEqual(report.trim_log("short\n"), "short\n")

    def test_absent(self):
        self.assertIsNone(report.extract_lock_hold({"pageCacheLockTimeMills": "0"}))
        self.assertIsNone(report.extract_lock_hold_from_log("nothing here"))

    def test_from_log_ignores_ansi_colours(self):
        text = ("\x1b[2m2026\x1b[0m \x1b[32m INFO\x1b[0m store stopped \x1b[3mlock_hold_p50_us"
                "\x1b[0m\x1b[2m=\x1b[0m7 \x1b[3mlock_hold_p99_us\x1b[0m\x1b[2m=\x1b[0m61 "
                "\x1b[3mlock_hold_max_us\x1b[0m\x1b[2m=\x1b[0m2048\n")
        self.assertEqual(report.extract_lock_hold_from_log(text),
                         {"p50_us": 7.0, "p99_us": 61.0, "max_us": 2048.0})

    def test_from_log_takes_last(self):
        text = ("INFO store: lock_hold_us p50=1 p99=2 max=3\n"
                "INFO store stopped: lock-hold p50 5us p99 40us max 800us\n")
        self.assertEqual(report.extract_lock_hold_from_log(text),
                         {"p50_us": 5.0, "p99_us": 40.0, "max_us": 800.0})


class RenderTests(unittest.TestCase):
    def test_markdown_table(self):
        md = report.render_markdown(fake_result())
        self.assertIn("| ASYNC_FLUSH/mmap | 120000 | 117.2 |", md)
        self.assertIn("3 / 20 / 900", md)          # lock-hold column
        self.assertIn("| ASYNC_FLUSH/direct |", md)
        self.assertIn("n/a", md)                    # no lock-hold for the others
        self.assertIn("skipped", md)
        self.assertIn("SYNC_FLUSH / ASYNC_FLUSH (mmap) = 0.50 (bar ≥ 0.80)", md)
        self.assertIn("ASYNC_FLUSH/mmap: msg/s ÷ 100k = 1.20", md)
        self.assertIn("38%", md)                    # 117.2 MiB/s of 310 MiB/s raw
        self.assertIn("| 512 KiB write + fdatasync loop | 68 MiB/s |", md)
        self.assertIn("ringmq-net-0 99%", md)
        self.assertIn("device writes 230 MiB/s (2.00× the CommitLog's growth); 900 MiB dirty", md)
        self.assertNotIn("Shared machine", md)
        res = fake_result()
        res["cells"][1]["runs"][0]["other_cores"] = 0.7
        md2 = report.render_markdown(res)
        self.assertIn("0.70 cores", md2)
        self.assertIn("Shared machine:** other processes used ≥ 0.2 cores during "
                      "ASYNC_FLUSH/direct;", md2)
        # every table row has the header's column count
        header = [l for l in md.splitlines() if l.startswith("| mode |")][0]
        for line in md.splitlines():
            if line.startswith("| ASYNC") or line.startswith("| SYNC"):
                self.assertEqual(line.count("|"), header.count("|"), line)

    def test_disk_start_and_end_columns_and_notes(self):
        res = fake_result()
        res["disk_end"] = {"seq_direct": {"mib_per_s": 200.0}}
        res["cells"][0]["runs"][0]["disk_probe"] = {"seq_mib_per_s": 280.0, "fdatasync_p50_ms": 3.9}
        res["cells"][2]["runs"][0]["bench"]["failures"] = 12
        md = report.render_markdown(res)
        self.assertIn("| sequential 1 MiB writes, O_DIRECT | 310 MiB/s | 200 MiB/s |", md)
        self.assertIn("| lone 4 KiB write + fdatasync p50 / p99 | 4.00 / 8.00 ms | n/a |", md)
        self.assertIn("ASYNC_FLUSH/mmap 280 MiB/s, fdatasync p50 3.90 ms", md)
        res["cells"][2]["runs"][0]["disk_probe"] = {"seq_mib_per_s": 280.0, "fdatasync_p50_ms": 0.5}
        res["disk"]["best_group_commit_mib_per_s"] = 117.2
        md = report.render_markdown(res)
        self.assertIn("SYNC_FLUSH/mmap: p50 ÷ lone fdatasync p50 (0.50 ms) = 16.0", md)
        self.assertIn("SYNC_FLUSH/direct: p50 ÷ lone fdatasync p50 (4.00 ms) = 2.2", md)
        self.assertIn("SYNC_FLUSH/mmap: body MiB/s ÷ best 512 KiB group-commit MiB/s = 0.50", md)
        self.assertIn("Failed sends (msg/s counts acknowledged sends only; codes in "
                      "results.json): SYNC_FLUSH/mmap 12.", md)
        self.assertEqual(len(report.disk_lines({})), len(report.disk_lines(res["disk"])))

    def test_svgs_are_well_formed_with_one_bar_per_mode(self):
        res = fake_result()
        rows = [report.summarize_cell(c, 1024, res["disk"]) for c in res["cells"]]
        ns = "{http://www.w3.org/2000/svg}"
        tp = ET.fromstring(report.render_throughput_svg(rows, 310.0, 1024))
        bars = [r for r in tp.iter(ns + "rect") if r.find(ns + "title") is not None]
        self.assertEqual(len(bars), 4)              # the skipped cell has no bar
        heights = [float(b.get("height")) for b in bars]
        self.assertGreater(heights[0], heights[2])  # 120k taller than 60k
        self.assertAlmostEqual(heights[0] / heights[2], 2.0, places=2)
        lat = ET.fromstring(report.render_latency_svg(rows))
        bars = [r for r in lat.iter(ns + "rect") if r.find(ns + "title") is not None]
        self.assertEqual(len(bars), 12)             # p50/p99/p99.9 × 4 modes
        for b in bars:
            self.assertGreaterEqual(float(b.get("height")), 0.0)

    def test_svg_empty_rows(self):
        ET.fromstring(report.render_throughput_svg([], None))
        ET.fromstring(report.render_latency_svg([]))

    def test_nice_ceiling(self):
        self.assertEqual(report._nice_ceiling(123000), 200000.0)
        self.assertEqual(report._nice_ceiling(0.3), 0.5)

    def test_compare_markdown(self):
        res = {"meta": {"target": "10.0.0.1:9876", "size": 1024, "concurrency": 256,
                        "measure_secs": 8, "ringmq_mode": "ASYNC_FLUSH/mmap"},
               "pairs": [report.pair_ratios({"tps": 200, "p99_ms": 2}, {"tps": 100, "p99_ms": 4})],
               "median_tps_ratio": 2.0, "median_p99_ratio": 2.0, "notes": []}
        md = report.render_compare_markdown(res)
        self.assertIn("| 1 | 200 | 100 | 2.00 | 2.00 | 4.00 | 2.00 | – | – |", md)
        self.assertIn("**2.00**", md)


class BuildCompareTests(unittest.TestCase):
    @staticmethod
    def run_of(tps, cpu, p99):
        return {"bench": {"tps": tps, "p99_ms": p99}, "broker_cpu_us_per_msg": cpu}

    def test_pair_ratios_point_the_right_way(self):
        pair = report.build_pair(self.run_of(200000, 4.0, 2.0), self.run_of(220000, 3.0, 1.5))
        self.assertAlmostEqual(pair["tps_ratio"], 1.1)
        self.assertAlmostEqual(pair["cpu_ratio"], 0.75)
        self.assertEqual(pair["candidate_p99_ms"], 1.5)
        self.assertIsNone(report.build_pair({"error": "boom"}, self.run_of(1, 1, 1)))
        self.assertIsNone(report.build_pair(self.run_of(1, 1, 1), {"bench": None}))

    def test_medians_and_markdown(self):
        pairs = [report.build_pair(self.run_of(100, 4.0, 2.0), self.run_of(t, c, 1.0))
                 for t, c in ((110, 3.0), (90, 5.0), (105, 3.6))]
        med = report.build_medians(pairs)
        self.assertAlmostEqual(med["tps_ratio"], 1.05)
        self.assertAlmostEqual(med["cpu_ratio"], 0.9)
        result = {"meta": {"baseline": "old", "candidate": "new", "size": 1024,
                           "concurrency": 256, "connections": 4, "measure_secs": 8},
                  "cells": [{"name": "ASYNC_FLUSH/mmap", "pairs": pairs, "median": med},
                            {"name": "SYNC_FLUSH/mmap", "pairs": [], "median": {}}],
                  "notes": ["SYNC_FLUSH/mmap pair 1 failed: baseline boom, candidate ok"]}
        md = report.render_builds_markdown(result)
        self.assertIn("| ASYNC_FLUSH/mmap | **median** | 100 | 105 | 1.050 | 4.00 | 3.60 "
                      "| 0.900 |", md)
        self.assertIn("| ASYNC_FLUSH/mmap | 2 | 100 | 90 | 0.900 | 4.00 | 5.00 | 1.250 |", md)
        self.assertNotIn("| SYNC_FLUSH/mmap |", md)
        self.assertIn("- SYNC_FLUSH/mmap pair 1 failed", md)
        header = [l for l in md.splitlines() if l.startswith("| cell |")][0]
        for line in md.splitlines():
            if line.startswith("| ") and "ASYNC" in line:
                self.assertEqual(line.count("|"), header.count("|"))

    def test_cells_default_to_the_four_modes_and_reject_unknown_names(self):
        args = run.build_parser().parse_args(["--baseline", "old"])
        self.assertEqual([c["name"] for c in run.build_cells(args)],
                         [c["name"] for c in run.matrix_cells()])
        args = run.build_parser().parse_args(["--baseline", "old", "--cells",
                                              "SYNC_FLUSH/mmap,ASYNC_FLUSH/mmap"])
        self.assertEqual(sorted(c["name"] for c in run.build_cells(args)),
                         ["ASYNC_FLUSH/mmap", "SYNC_FLUSH/mmap"])
        args = run.build_parser().parse_args(["--baseline", "old", "--cells", "FAST/mode"])
        with self.assertRaises(SystemExit):
            run.build_cells(args)


class HarnessTests(unittest.TestCase):
    def test_broker_conf_keys(self):
        cell = run.matrix_cells()[3]
        text = run.broker_conf(cell, 20005, 20000, "/tmp/x")
        kv = dict(l.split("=", 1) for l in text.strip().splitlines())
        self.assertEqual(kv["flushDiskType"], "SYNC_FLUSH")
        self.assertEqual(kv["ringmq.writeMode"], "direct")
        self.assertEqual(kv["listenPort"], "20005")
        self.assertEqual(kv["haListenPort"], "20006")
        self.assertEqual(kv["namesrvAddr"], "127.0.0.1:20000")
        slave = run.broker_conf(run.ha_cells()[1], 20010, 20000, "/tmp/y", broker_id=1, role="SLAVE")
        self.assertIn("brokerRole=SLAVE", slave)
        self.assertIn("brokerId=1", slave)

    def test_set_lines_come_last(self):
        args = run.build_parser().parse_args(["--set", "messageIndexEnable=false",
                                              "--set", "flushDiskType=ASYNC_FLUSH"])
        cell = dict(run.matrix_cells()[2], extra_conf=run.extra_conf(args))
        lines = run.broker_conf(cell, 1, 2, "/x").strip().splitlines()
        self.assertEqual(lines[-2:], ["messageIndexEnable=false", "flushDiskType=ASYNC_FLUSH"])
        with self.assertRaises(SystemExit):
            run.extra_conf(run.build_parser().parse_args(["--set", "novalue"]))

    def test_matrix(self):
        names = [c["name"] for c in run.matrix_cells()]
        self.assertEqual(len(names), 4)
        self.assertEqual(len(set(names)), 4)

    def test_settings_quick_fits_budget(self):
        args = run.build_parser().parse_args(["--quick"])
        s = run.settings(args)
        self.assertFalse(s["calibrate"])
        self.assertEqual(s["concurrency"], 256)
        cells = len(run.matrix_cells()) + len(run.ha_cells())
        self.assertLess(cells * run.cell_estimate_secs(s) + 40, s["budget_secs"])
        full = run.settings(run.build_parser().parse_args([]))
        self.assertTrue(full["calibrate"])
        self.assertLess(cells * full["repeats"] * run.cell_estimate_secs(full) + 110,
                        full["budget_secs"])

    def test_bench_argv(self):
        s = run.settings(run.build_parser().parse_args(["--quick", "-w", "64"]))
        argv = run.bench_argv("ringmq", "127.0.0.1:1", s, 8)
        self.assertEqual(argv[1:3], ["bench", "producer"])
        self.assertIn("--json", argv)
        self.assertEqual(argv[argv.index("-w") + 1], "64")
        self.assertEqual(argv[argv.index("-d") + 1], "8")

    def test_parse_mode(self):
        self.assertEqual(run.parse_mode("sync_flush/direct")["name"], "SYNC_FLUSH/direct")
        with self.assertRaises(SystemExit):
            run.parse_mode("FAST/mmap")

    def test_readme_block(self):
        text = "# B\n\n## echo\nkeep me\n\n" + run.README_BEGIN + "\nold\n" + run.README_END + "\ntail\n"
        new = run.replace_readme_block(text, "# title\n| a |\n", "results/x")
        self.assertIn("keep me", new)
        self.assertIn("| a |", new)
        self.assertIn("![throughput](results/x/throughput.svg)", new)
        self.assertNotIn("old", new)
        self.assertNotIn("# title", new)
        self.assertTrue(new.endswith("tail\n"))
        self.assertIsNone(run.replace_readme_block("no markers", "x", "y"))


class ScrubTests(unittest.TestCase):
    def test_saved_results_name_no_absolute_repo_path(self):
        import tempfile
        with tempfile.TemporaryDirectory() as out:
            os.makedirs(os.path.join(out, "logs"))
            log = os.path.join(out, "logs", "b.log")
            with open(log, "w") as f:
                f.write("store recovered root=%s/target/modes-bench/cell-x/store\n" % run.REPO)
            with open(os.path.join(out, "blob.bin"), "wb") as f:
                f.write(b"\xff\xfe" + run.REPO.encode())
            run.scrub_repo_paths(out)
            with open(log) as f:
                self.assertEqual(f.read(), "store recovered root=./target/modes-bench/cell-x/store\n")


class RemotingTests(unittest.TestCase):
    def test_request_frame(self):
        frame = remoting.encode_request(28, 7, {"a": "b"}, b"xy")
        total, word = struct.unpack(">ii", frame[:8])
        self.assertEqual(total, len(frame) - 4)
        self.assertEqual(word >> 24, 0)
        header, body = remoting.decode_frame(frame[4:])
        self.assertEqual(header["code"], 28)
        self.assertEqual(header["opaque"], 7)
        self.assertEqual(header["extFields"], {"a": "b"})
        self.assertEqual(body, b"xy")

    def test_binary_header(self):
        remark = b"ok"
        ext = struct.pack(">h", 1) + b"k" + struct.pack(">i", 2) + b"vv"
        h = struct.pack(">hBhiii", 0, 0, 453, 9, 1, len(remark)) + remark + \
            struct.pack(">i", len(ext)) + ext
        frame = struct.pack(">I", (1 << 24) | len(h)) + h + b"BODY"
        header, body = remoting.decode_frame(frame)
        self.assertEqual((header["code"], header["opaque"], header["flag"]), (0, 9, 1))
        self.assertEqual(header["remark"], "ok")
        self.assertEqual(header["extFields"], {"k": "vv"})
        self.assertEqual(body, b"BODY")

    def test_kvtable(self):
        self.assertEqual(remoting.parse_kvtable(b'{"table":{"a":"1","b":2}}'), {"a": "1", "b": "2"})
        self.assertEqual(remoting.parse_kvtable(b""), {})

    def test_runtime_info_against_fake_server(self):
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]

        def serve():
            conn, _ = srv.accept()
            with conn:
                (total,) = struct.unpack(">i", conn.recv(4, socket.MSG_WAITALL))
                req, _ = remoting.decode_frame(conn.recv(total, socket.MSG_WAITALL))
                body = json.dumps({"table": {"commitLogMaxOffset": "42",
                                             "ringmq.lockHoldP99Us": "17"}}).encode()
                # An unrelated frame first (a server-initiated request), then our response.
                noise = json.dumps({"code": 40, "flag": 0, "opaque": 99}).encode()
                hdr = json.dumps({"code": 0, "flag": 1, "opaque": req["opaque"]}).encode()
                for h, b in ((noise, b""), (hdr, body)):
                    conn.sendall(struct.pack(">ii", 4 + len(h) + len(b), len(h)) + h + b)
        t = threading.Thread(target=serve, daemon=True)
        t.start()
        try:
            info = remoting.runtime_info("127.0.0.1:%d" % port, timeout=2)
        finally:
            t.join(timeout=2)
            srv.close()
        self.assertEqual(info["commitLogMaxOffset"], "42")
        self.assertEqual(report.extract_lock_hold(info), {"p99_us": 17.0})

    def test_probe_closed_port(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        self.assertFalse(remoting.probe("127.0.0.1:%d" % port, timeout=0.2))


if __name__ == "__main__":
    unittest.main()
