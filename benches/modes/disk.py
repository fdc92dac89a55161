"""Raw-disk baselines measured in the same run as the brokers (stdlib only).

Owns the three numbers every broker cell is compared with, all taken on a file in the
directory the brokers' stores live in (so the same file system and device):

* sequential write MiB/s: 1 MiB blocks into a pre-allocated file, one fdatasync at the end,
  both through the page cache and with O_DIRECT from an aligned buffer; the larger of the
  two is the "physical" sequential limit the ASYNC_FLUSH cells are divided by;
* group-commit MiB/s: 512 KiB write + fdatasync in a loop -- what a SYNC_FLUSH broker whose
  group commits gather ~512 KiB at a time could reach at best;
* lone fdatasync latency: a 4 KiB write + fdatasync (the floor of one SYNC_FLUSH send's
  latency), and an fdatasync with nothing dirty (the syscall's fixed cost).

A virtual disk's speed drifts with the host's other I/O (10x swings in fdatasync latency
within minutes were seen on the dev VM), so the harness measures at the start and the end
of a run and `probe` takes a two-second look before every cell.

Each test is bounded by bytes and by seconds, whichever comes first.
"""

import mmap
import os
import time

MIB = 1024 * 1024


def _percentile(sorted_values, q):
    if not sorted_values:
        return 0.0
    idx = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return sorted_values[idx]


def _open(path, direct):
    flags = os.O_WRONLY | os.O_CREAT
    if direct:
        flags |= getattr(os, "O_DIRECT", 0)
    return os.open(path, flags, 0o644)


def _preallocate(fd, size):
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError:
        os.ftruncate(fd, size)
    # The allocation's metadata is made durable outside the measured window.
    os.fsync(fd)


def _aligned_buffer(size):
    """Anonymous mmap: page-aligned, as O_DIRECT requires."""
    buf = mmap.mmap(-1, size)
    buf.write(b"\x5a" * size)
    return buf


def seq_write(path, total_bytes, block=MIB, direct=False, time_limit=15.0):
    """MiB/s of sequential `block` writes + one final fdatasync. None if O_DIRECT refused."""
    try:
        fd = _open(path, direct)
    except OSError:
        return None
    try:
        _preallocate(fd, total_bytes)
        buf = _aligned_buffer(block)
        view = memoryview(buf)
        written = 0
        t0 = time.perf_counter()
        try:
            while written < total_bytes and time.perf_counter() - t0 < time_limit:
                written += os.pwrite(fd, view, written)
        except OSError:
            if direct:
                return None  # e.g. EINVAL: this file system has no O_DIRECT
            raise
        os.fdatasync(fd)
        dt = time.perf_counter() - t0
        view.release()
        buf.close()
        return {"bytes": written, "secs": dt, "mib_per_s": written / MIB / dt}
    finally:
        os.close(fd)
        _unlink(path)


def group_commit(path, total_bytes, chunk=512 * 1024, time_limit=8.0):
    """512 KiB write + fdatasync, repeated: MiB/s and the fdatasync latency spread."""
    fd = _open(path, False)
    try:
        _preallocate(fd, total_bytes)
        buf = _aligned_buffer(chunk)
        view = memoryview(buf)
        syncs = []
        written = 0
        t0 = time.perf_counter()
        while written + chunk <= total_bytes and time.perf_counter() - t0 < time_limit:
            os.pwrite(fd, view, written)
            written += chunk
            s = time.perf_counter()
            os.fdatasync(fd)
            syncs.append((time.perf_counter() - s) * 1e3)
        dt = time.perf_counter() - t0
        view.release()
        buf.close()
        syncs.sort()
        return {"bytes": written, "secs": dt, "mib_per_s": written / MIB / dt,
                "commits": len(syncs),
                "fdatasync_p50_ms": _percentile(syncs, 0.5),
                "fdatasync_p99_ms": _percentile(syncs, 0.99)}
    finally:
        os.close(fd)
        _unlink(path)


def lone_fdatasync(path, samples=200, time_limit=5.0):
    """Latency of 4 KiB write + fdatasync (appending) and of fdatasync with nothing dirty."""
    fd = _open(path, False)
    try:
        _preallocate(fd, samples * 4096 + 4096)
        block = b"\x5a" * 4096
        dirty, clean = [], []
        t0 = time.perf_counter()
        for i in range(samples):
            if time.perf_counter() - t0 > time_limit:
                break
            os.pwrite(fd, block, i * 4096)
            s = time.perf_counter()
            os.fdatasync(fd)
            dirty.append((time.perf_counter() - s) * 1e3)
            s = time.perf_counter()
            os.fdatasync(fd)
            clean.append((time.perf_counter() - s) * 1e3)
        dirty.sort()
        clean.sort()
        return {"samples": len(dirty),
                "write4k_fdatasync_p50_ms": _percentile(dirty, 0.5),
                "write4k_fdatasync_p99_ms": _percentile(dirty, 0.99),
                "clean_fdatasync_p50_ms": _percentile(clean, 0.5)}
    finally:
        os.close(fd)
        _unlink(path)


def _unlink(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def probe(directory):
    """A ~2 s look at the disk right before a cell starts (the device's speed drifts with
    other tenants' I/O): O_DIRECT sequential MiB/s and 4 KiB write + fdatasync p50."""
    path = os.path.join(directory, "disk-probe.bin")
    seq = seq_write(path, 128 * MIB, direct=True, time_limit=1.0) or \
        seq_write(path, 128 * MIB, direct=False, time_limit=1.0)
    lone = lone_fdatasync(path, samples=50, time_limit=1.0)
    return {"seq_mib_per_s": seq["mib_per_s"] if seq else None,
            "fdatasync_p50_ms": lone["write4k_fdatasync_p50_ms"]}


def measure(directory, quick=False, log=print):
    """All raw-disk numbers for `directory`. `raw_seq_mib_per_s` is the best sequential."""
    size = (256 if quick else 1024) * MIB
    limit = 6.0 if quick else 15.0
    path = os.path.join(directory, "raw-disk-test.bin")
    out = {}
    log("disk: sequential 1 MiB writes through the page cache + fdatasync ...")
    out["seq_buffered"] = seq_write(path, size, direct=False, time_limit=limit)
    log("disk: sequential 1 MiB O_DIRECT writes ...")
    out["seq_direct"] = seq_write(path, size, direct=True, time_limit=limit)
    log("disk: 512 KiB write + fdatasync (group commit) ...")
    out["group_commit"] = group_commit(path, size, time_limit=4.0 if quick else 8.0)
    log("disk: lone 4 KiB write + fdatasync ...")
    out["lone_fdatasync"] = lone_fdatasync(path, samples=100 if quick else 300,
                                           time_limit=3.0 if quick else 6.0)
    seqs = [r["mib_per_s"] for r in (out["seq_buffered"], out["seq_direct"]) if r]
    out["raw_seq_mib_per_s"] = max(seqs) if seqs else 0.0
    return out
