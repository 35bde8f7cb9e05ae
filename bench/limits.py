"""Measure this machine's physical limits on a filesystem directory.

Store benchmarks print these figures beside their own numbers so results can be
read as a fraction of what the hardware and kernel allow. Every loop is bounded
in both iteration count and wall time; temp files are removed in ``finally``.

Usage: ``python -m bench.limits --dir /tmp/x [--quick] [--json]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator

from bench._args import work_dir

_MIB = 1 << 20


@contextlib.contextmanager
def _temp_file(directory: str) -> Iterator[int]:
    """Yield the fd of a new temp file in ``directory``; unlink and close it after."""
    fd, path = tempfile.mkstemp(prefix=".pyrmq-limits-", dir=directory)
    try:
        yield fd
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)


def seq_write_bandwidth(
    directory: str,
    total_bytes: int,
    chunk_bytes: int = _MIB,
    fdatasync: bool = False,
    time_limit_s: float = 30.0,
) -> float:
    """Return bytes/s of sequential os.write into a new temp file.

    With ``fdatasync=False`` this is page-cache bandwidth; otherwise a final
    fdatasync is included in the timing.
    """
    buf = b"\xa5" * chunk_bytes
    with _temp_file(directory) as fd:
        written = 0
        start = time.perf_counter()
        deadline = start + time_limit_s
        for _ in range(-(-total_bytes // chunk_bytes)):
            written += os.write(fd, buf)
            if time.perf_counter() > deadline:
                break
        if fdatasync:
            os.fdatasync(fd)
        return written / (time.perf_counter() - start)


def fdatasync_latency(
    directory: str, count: int = 2000, write_bytes: int = 128, time_limit_s: float = 5.0
) -> dict[str, float]:
    """Time pwrite+fdatasync appends into a posix_fallocate'd file.

    Returns ``p50_us``, ``p99_us``, ``mean_us`` and ``per_second``.
    """
    buf = b"\x5a" * write_bytes
    with _temp_file(directory) as fd:
        os.posix_fallocate(fd, 0, max(count * write_bytes, 4096))
        lat_ns: list[int] = []
        deadline = time.perf_counter_ns() + int(time_limit_s * 1e9)
        for i in range(max(1, count)):
            t0 = time.perf_counter_ns()
            os.pwrite(fd, buf, i * write_bytes)
            os.fdatasync(fd)
            t1 = time.perf_counter_ns()
            lat_ns.append(t1 - t0)
            if t1 > deadline:
                break
    lat_ns.sort()
    mean_ns = statistics.fmean(lat_ns)
    return {
        "p50_us": lat_ns[len(lat_ns) // 2] / 1e3,
        "p99_us": lat_ns[min(len(lat_ns) - 1, int(len(lat_ns) * 0.99))] / 1e3,
        "mean_us": mean_ns / 1e3,
        "per_second": 1e9 / mean_ns,
    }


def group_commit_pwrite(
    directory: str,
    writers: int,
    duration_s: float = 2.0,
    write_bytes: int = 128,
    max_records: int = 10_000_000,
) -> float:
    """Return durable records/s for raw-syscall group commit.

    ``writers`` threads reserve an offset under a lock, pwrite their record and
    wait until one flusher thread's fdatasync covers it. Offsets wrap inside a
    64 MiB preallocated file so the file size never changes.
    """
    file_bytes = 64 * _MIB
    buf = b"\x3c" * write_bytes
    lock = threading.Lock()
    work = threading.Condition(lock)  # flusher waits here for written records
    done = threading.Condition(lock)  # writers wait here for durability
    state = {"next": 0, "durable": 0, "stop": False}
    in_flight: set[int] = set()

    def written_upto() -> int:
        return min(in_flight) if in_flight else state["next"]

    def writer(fd: int) -> None:
        while True:
            with lock:
                if state["stop"] or state["next"] >= max_records:
                    return
                seq = state["next"]
                state["next"] += 1
                in_flight.add(seq)
            os.pwrite(fd, buf, (seq * write_bytes) % file_bytes)
            with lock:
                in_flight.discard(seq)
                work.notify()
                while state["durable"] <= seq and not state["stop"]:
                    done.wait(0.5)

    def flusher(fd: int) -> None:
        while True:
            with lock:
                while written_upto() <= state["durable"] and not state["stop"]:
                    work.wait(0.5)
                if state["stop"]:
                    return
                mark = written_upto()
            os.fdatasync(fd)
            with lock:
                state["durable"] = mark
                done.notify_all()

    with _temp_file(directory) as fd:
        os.posix_fallocate(fd, 0, file_bytes)
        targets = [flusher] + [writer] * writers
        threads = [threading.Thread(target=f, args=(fd,), daemon=True) for f in targets]
        start = time.perf_counter()
        for t in threads:
            t.start()
        time.sleep(duration_s)
        with lock:
            durable, elapsed = state["durable"], time.perf_counter() - start
            state["stop"] = True
            work.notify_all()
            done.notify_all()
        for t in threads:
            t.join(timeout=5.0)
    return durable / elapsed


def memcpy_bandwidth(size_bytes: int = 64 * _MIB, repeat: int = 5) -> float:
    """Return bytes/s of a big memoryview slice copy, best of ``repeat``."""
    src = memoryview(b"\x11" * size_bytes)
    dst = bytearray(size_bytes)
    dst_view = memoryview(dst)
    dst_view[:] = src  # fault in destination pages before timing
    best = float("inf")
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        dst_view[:] = src
        best = min(best, time.perf_counter() - t0)
    return size_bytes / best


def loopback_tcp_bandwidth(
    total_bytes: int = 512 * _MIB, chunk: int = 256 << 10, time_limit_s: float = 10.0
) -> float:
    """Return bytes/s sent over a 127.0.0.1 socket pair (sender thread + receive loop)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(time_limit_s)
        client = socket.create_connection(server.getsockname(), timeout=time_limit_s)
        conn, _ = server.accept()
    deadline = time.perf_counter() + time_limit_s
    payload = b"\x77" * chunk

    def sender() -> None:
        try:
            for _ in range(-(-total_bytes // chunk)):
                if time.perf_counter() > deadline:
                    break
                client.sendall(payload)
        except OSError:
            pass
        finally:
            client.close()

    conn.settimeout(time_limit_s)
    rbuf = memoryview(bytearray(chunk))
    received = 0
    thread = threading.Thread(target=sender, daemon=True)
    try:
        start = time.perf_counter()
        thread.start()
        for _ in range(total_bytes + 1):  # each recv returns >= 1 byte or EOF
            n = conn.recv_into(rbuf)
            received += n
            if n == 0 or time.perf_counter() > deadline + 1.0:
                break
        elapsed = time.perf_counter() - start
    finally:
        conn.close()
        thread.join(timeout=time_limit_s)
    return received / elapsed


def measure_all(directory: str, quick: bool = False) -> dict[str, float]:
    """Run every probe and return a flat dict of named figures."""
    seq_total = (256 if quick else 1024) * _MIB
    sync_total = (64 if quick else 256) * _MIB
    # Best of two: the first pass may fault in never-touched (VM) page-cache RAM.
    seq = max(seq_write_bandwidth(directory, seq_total) for _ in range(2))
    sync = seq_write_bandwidth(directory, sync_total, fdatasync=True)
    out = {"seq_write_MBps": seq / 1e6, "seq_write_fdatasync_MBps": sync / 1e6}
    fds = fdatasync_latency(directory, count=500 if quick else 2000)
    for key in ("p50_us", "p99_us", "mean_us"):
        out[f"fdatasync_{key}"] = fds[key]
    out["fdatasync_per_s"] = fds["per_second"]
    for n in (1, 64) if quick else (1, 8, 64):
        rate = group_commit_pwrite(directory, n, 1.0 if quick else 2.0)
        out[f"group_commit_{n}_per_s"] = rate
    out["memcpy_GBps"] = memcpy_bandwidth(repeat=3 if quick else 5) / 1e9
    tcp_total = (128 if quick else 512) * _MIB
    out["loopback_tcp_MBps"] = loopback_tcp_bandwidth(tcp_total) / 1e6
    return out


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point: print the figures as a table or JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=work_dir, default=tempfile.gettempdir(), help="directory")
    parser.add_argument("--quick", action="store_true", help="smaller, faster probes")
    parser.add_argument("--json", action="store_true", help="print JSON, not a table")
    args = parser.parse_args(argv)
    results = measure_all(args.dir, quick=args.quick)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    width = max(len(k) for k in results)
    print(f"machine limits on {os.path.abspath(args.dir)}")
    for key, value in results.items():
        print(f"  {key:<{width}}  {value:>14,.1f}")


if __name__ == "__main__":
    main()
