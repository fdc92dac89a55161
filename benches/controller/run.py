"""Controller failover soak: three `ringmq controller` processes as one Raft group on
loopback; each round kills the Raft leader with SIGKILL, measures how long until the two
survivors agree on a new leader and it commits a write, restarts the killed controller on
its store, lets it catch up (`--settle-ms`), and checks that every write committed in
earlier rounds is still there.

A write is CONTROLLER_APPLY_BROKER_ID of a fresh broker id (one broker set per round); the
check applies each earlier id again with another register check code, which a controller
that kept the id refuses with BROKER_ID_INVALID (2014). Lost commits are counted, never
tolerated: the exit code is 1 when any is missing.

Reports the failover time distribution (p50/p99/max, ms) with the Raft timing used.
Standard library only; not part of any test suite. See benches/README.md ("Controller
failover").

    python3 benches/controller/run.py --binary target/release/ringmq --rounds 100
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "modes"))
import remoting  # noqa: E402

GET_METADATA_INFO = 1005
APPLY_BROKER_ID = 1013
SUCCESS = 0
NOT_LEADER = 2007
BROKER_ID_INVALID = 2014


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def leader_seen_by(addr):
    try:
        header, _ = remoting.call(addr, GET_METADATA_INFO, timeout=1.0)
    except (OSError, remoting.RemotingError):
        return None
    return (header.get("extFields") or {}).get("controllerLeaderAddress")


def apply_id(addr, broker_name, broker_id, check_code):
    try:
        header, _ = remoting.call(addr, APPLY_BROKER_ID, {
            "clusterName": "Soak",
            "brokerName": broker_name,
            "appliedBrokerId": str(broker_id),
            "registerCheckCode": check_code,
        }, timeout=3.0)
    except (OSError, remoting.RemotingError):
        return None
    return header.get("code")


class Group:
    def __init__(self, binary, work, timing):
        self.binary, self.work, self.timing = binary, work, timing
        self.ports = [free_port() for _ in range(3)]
        self.addrs = ["127.0.0.1:%d" % p for p in self.ports]
        self.procs = [None, None, None]

    def start(self, i):
        peers = ";".join("n%d-%s" % (j, a) for j, a in enumerate(self.addrs))
        conf = os.path.join(self.work, "n%d.conf" % i)
        heartbeat, low, high = self.timing
        with open(conf, "w") as f:
            f.write("controllerDLegerGroup=soak\ncontrollerDLegerPeers=%s\n"
                    "controllerDLegerSelfId=n%d\ncontrollerStorePath=%s\nbindAddress=127.0.0.1\n"
                    "ringmq.controller.heartbeatIntervalMs=%d\n"
                    "ringmq.controller.electionTimeoutMinMs=%d\n"
                    "ringmq.controller.electionTimeoutMaxMs=%d\n"
                    % (peers, i, os.path.join(self.work, "store-n%d" % i), heartbeat, low, high))
        log = open(os.path.join(self.work, "n%d.log" % i), "ab")
        self.procs[i] = subprocess.Popen([self.binary, "controller", "-c", conf],
                                         stdout=log, stderr=log, stdin=subprocess.DEVNULL)

    def kill(self, i):
        p = self.procs[i]
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        self.procs[i] = None

    def stop_all(self):
        for p in self.procs:
            if p is not None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            if p is not None:
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()

    def agreed_leader(self, members, exclude=None, deadline_s=30.0):
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            seen = [leader_seen_by(self.addrs[i]) for i in members]
            if seen[0] and seen[0] != exclude and all(s == seen[0] for s in seen):
                return seen[0]
            time.sleep(0.02)
        raise SystemExit("no agreed leader among %s within %.0f s" % (members, deadline_s))


def percentile(sorted_values, q):
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return sorted_values[k]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default="target/release/ringmq")
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--heartbeat-ms", type=int, default=100)
    ap.add_argument("--election-min-ms", type=int, default=500)
    ap.add_argument("--election-max-ms", type=int, default=1000)
    ap.add_argument("--settle-ms", type=int, default=1000,
                    help="after the killed member rejoins, wait this long before the next kill so it "
                         "catches up; a member behind the others cannot win an election, and its failed "
                         "elections delay theirs (Raft without pre-vote)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="ringmq-controller-soak-")
    timing = (args.heartbeat_ms, args.election_min_ms, args.election_max_ms)
    group = Group(os.path.abspath(args.binary), work, timing)
    failover_ms, committed, lost = [], [], 0
    try:
        for i in range(3):
            group.start(i)
        leader = group.agreed_leader([0, 1, 2])
        for rnd in range(args.rounds):
            name = "soak-%d" % rnd
            code = apply_id(leader, name, 1, "127.0.0.1:1;%d" % rnd)
            if code != SUCCESS:
                raise SystemExit("round %d: write on leader %s answered %s" % (rnd, leader, code))
            committed.append(name)
            victim = group.addrs.index(leader)
            killed_at = time.monotonic()
            group.kill(victim)
            survivors = [i for i in range(3) if i != victim]
            # Failover ends when a new leader commits a write.
            while True:
                new_leader = group.agreed_leader(survivors, exclude=leader)
                agreed_ms = (time.monotonic() - killed_at) * 1000.0
                if apply_id(new_leader, name, 2, "127.0.0.1:2;%d" % rnd) == SUCCESS:
                    break
            failover_ms.append((time.monotonic() - killed_at) * 1000.0)
            print("round %d: leader agreed after %.0f ms" % (rnd, agreed_ms), flush=True)
            group.start(victim)
            leader = group.agreed_leader([0, 1, 2])
            time.sleep(args.settle_ms / 1000.0)
            for earlier in committed:
                if apply_id(leader, earlier, 1, "127.0.0.1:9;other") != BROKER_ID_INVALID:
                    lost += 1
                    print("round %d: the commit of %s is gone" % (rnd, earlier), file=sys.stderr)
            print("round %d: failover %.0f ms, leader now %s" % (rnd, failover_ms[-1], leader), flush=True)
    finally:
        group.stop_all()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("work directory kept: %s" % work)
    s = sorted(failover_ms)
    print("controller failover over %d rounds (Raft heartbeat %d ms, election %d-%d ms): "
          "p50 %.0f ms, p99 %.0f ms, max %.0f ms; lost commits %d"
          % (len(s), timing[0], timing[1], timing[2], percentile(s, 0.5), percentile(s, 0.99),
             s[-1] if s else float("nan"), lost))
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
