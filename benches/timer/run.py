"""Timer message benchmark: many pending timers with random delays on one broker.

Starts `ringmq broker` (no name server) on loopback with a fresh store, sends COUNT messages
with TIMER_DELIVER_MS = send time + a uniform random delay, pipelined over one connection, and
scrapes the broker's `/metrics` page twice a second while the timers are parked and delivered.
Reports:

* send rate (acknowledged sends per second, the client's view) and enqueue rate (how fast the
  broker's timer thread moved them into the wheel: `rocketmq_timer_enqueue_total`);
* broker memory: peak VmRSS (includes the mapped timer wheel and store files it touched) and
  peak pending timers (`ringmq_timer_congest_messages`);
* delivery: `rocketmq_timer_dequeue_total` reaching COUNT, and the p50/p99 upper bounds of
  `ringmq_timer_delivery_lateness_ms` (delivery minus the end of the message's slot).

Standard library only; not part of any test suite. See benches/README.md ("Timer messages").
"""

import argparse
import json
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "modes"))
import remoting  # noqa: E402

SEND_MESSAGE_V2 = 310
TOPIC = "TimerBench"
QUEUES = 4


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def broker_conf(port, metrics_port, store_dir):
    return "\n".join([
        "brokerClusterName=TimerBench",
        "brokerName=timer-bench",
        "brokerIP1=127.0.0.1",
        "listenPort=%d" % port,
        "haListenPort=%d" % free_port(),
        "storePathRootDir=%s" % store_dir,
        "autoCreateTopicEnable=true",
        "ringmq.grpc.port=0",
        "ringmq.metricsPort=%d" % metrics_port,
        "metricsPromExporterHost=127.0.0.1",
    ]) + "\n"


def scrape(metrics_port):
    """Sample values of the timer families (and the lateness buckets) from `/metrics`."""
    url = "http://127.0.0.1:%d/metrics" % metrics_port
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    out, buckets = {}, []
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name_labels, value = line.rsplit(" ", 1)
        name = name_labels.split("{", 1)[0]
        if name == "ringmq_timer_delivery_lateness_ms_bucket":
            le = name_labels.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), float(value)))
        elif name.startswith(("rocketmq_timer_", "ringmq_timer_")):
            out[name] = float(value)
    out["lateness_buckets"] = buckets
    return out


def quantile_bound(buckets, q):
    """Upper bound of the bucket holding quantile `q` of a cumulative histogram."""
    if not buckets or buckets[-1][1] == 0:
        return None
    total = buckets[-1][1]
    for bound, cum in buckets:
        if cum >= q * total:
            return bound
    return float("inf")


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Sender:
    """Pipelined SEND_MESSAGE_V2 over one connection, at most `window` unanswered."""

    def __init__(self, addr, window):
        self.sock = socket.create_connection(addr, timeout=30)
        self.slots = threading.Semaphore(window)
        self.acked = 0
        self.failed = 0
        self.first_error = None
        self.reader = threading.Thread(target=self.read_loop, daemon=True)
        self.reader.start()

    def read_loop(self):
        try:
            while True:
                (total,) = struct.unpack(">i", remoting._read_exact(self.sock, 4))
                header, _ = remoting.decode_frame(remoting._read_exact(self.sock, total))
                if header.get("code") == 0:
                    self.acked += 1
                else:
                    self.failed += 1
                    self.first_error = self.first_error or header.get("remark")
                self.slots.release()
        except (OSError, remoting.RemotingError):
            return

    def send(self, opaque, deliver_ms, body):
        props = "TIMER_DELIVER_MS\x01%d\x02" % deliver_ms
        ext = {"a": "PG-timer-bench", "b": TOPIC, "c": "TBW102", "d": str(QUEUES),
               "e": str(opaque % QUEUES), "f": "0", "g": str(int(time.time() * 1000)),
               "h": "0", "i": props, "j": "0", "k": "false"}
        self.slots.acquire()
        self.sock.sendall(remoting.encode_request(SEND_MESSAGE_V2, opaque, ext, body))


def wait_for(pred, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise SystemExit("timed out waiting for %s" % what)


def run(args):
    store_dir = tempfile.mkdtemp(prefix="ringmq-timer-bench-", dir=args.work_dir)
    port, metrics_port = free_port(), free_port()
    conf = os.path.join(store_dir, "broker.conf")
    with open(conf, "w") as f:
        f.write(broker_conf(port, metrics_port, os.path.join(store_dir, "store")))
    log = open(os.path.join(store_dir, "broker.log"), "wb")
    broker = subprocess.Popen([args.binary, "broker", "-c", conf], stdout=log,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_for(lambda: remoting.probe("127.0.0.1:%d" % port), 30, "the broker to listen")
        wait_for(lambda: _scrapes(metrics_port), 30, "the timer families on /metrics")
        return measure(args, broker.pid, port, metrics_port)
    finally:
        broker.terminate()
        try:
            broker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            broker.kill()
            broker.wait()
        log.close()
        if not args.keep:
            shutil.rmtree(store_dir, ignore_errors=True)


def _scrapes(metrics_port):
    try:
        return "rocketmq_timer_enqueue_total" in scrape(metrics_port)
    except OSError:
        return False


def measure(args, pid, port, metrics_port):
    rng = random.Random(args.seed)
    body = b"x" * args.body_bytes
    samples = []  # (monotonic s, scrape, rss KiB)
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            samples.append((time.monotonic(), scrape(metrics_port), rss_kib(pid)))
            stop.wait(0.5)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    sender = Sender(("127.0.0.1", port), args.window)
    t0 = time.monotonic()
    for i in range(args.count):
        delay_ms = rng.randint(args.min_delay_s * 1000, args.max_delay_s * 1000)
        sender.send(i + 1, int(time.time() * 1000) + delay_ms, body)
    wait_for(lambda: sender.acked + sender.failed >= args.count, 120, "send acknowledgements")
    send_s = time.monotonic() - t0
    wait_for(lambda: samples and samples[-1][1].get("rocketmq_timer_enqueue_total", 0) >= sender.acked,
             args.max_delay_s + 120, "the timer thread to enqueue every message")
    enqueued_at = samples[-1][0]
    wait_for(lambda: samples[-1][1].get("rocketmq_timer_dequeue_total", 0) >= sender.acked,
             args.max_delay_s + 300, "every timer to be delivered")
    stop.set()
    poller.join()
    last = samples[-1][1]
    return {
        "count": args.count,
        "delay_s": [args.min_delay_s, args.max_delay_s],
        "body_bytes": args.body_bytes,
        "send_failures": sender.failed,
        "first_send_error": sender.first_error,
        "send_msgs_per_s": round(sender.acked / send_s),
        "enqueue_msgs_per_s": round(sender.acked / max(enqueued_at - t0, 1e-3)),
        "peak_pending": int(max(s[1].get("ringmq_timer_congest_messages", 0) for s in samples)),
        "peak_rss_mib": round(max(s[2] for s in samples) / 1024, 1),
        "delivered": int(last.get("rocketmq_timer_dequeue_total", 0)),
        "lateness_p50_ms_at_most": quantile_bound(last["lateness_buckets"], 0.50),
        "lateness_p99_ms_at_most": quantile_bound(last["lateness_buckets"], 0.99),
        "lateness_mean_ms": round(last.get("ringmq_timer_delivery_lateness_ms_sum", 0)
                                  / max(last.get("ringmq_timer_delivery_lateness_ms_count", 0), 1), 1),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", default=os.environ.get("RINGMQ_BIN", "target/release/ringmq"))
    ap.add_argument("--count", type=int, default=1_000_000, help="timer messages to send")
    ap.add_argument("--min-delay-s", type=int, default=10)
    ap.add_argument("--max-delay-s", type=int, default=120)
    ap.add_argument("--body-bytes", type=int, default=128)
    ap.add_argument("--window", type=int, default=512, help="sends in flight")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work-dir", default=None, help="where the temporary store goes")
    ap.add_argument("--keep", action="store_true", help="keep the store and broker log")
    args = ap.parse_args(argv)
    print(json.dumps(run(args), indent=2))


if __name__ == "__main__":
    main()
