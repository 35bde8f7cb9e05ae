"""Measure the store against this machine's limits and print one Markdown table.

One run, one filesystem directory: the machine's limits and the store's
figures side by side, with ratios and targets.

Usage: ``python -m bench.store_report [--dir DIR] [--quick] [--json out.json] [--repeat N]``

Sections (see bench/README.md for what each figure means):
  1. machine limits (bench.limits) on DIR
  2. ASYNC_FLUSH appends: MessageStoreCore.put, MessageStore.put_message_nowait,
     MessageStoreCore.put_batch; 128 B and 1 KiB bodies, with/without properties
  3. SYNC_FLUSH: 1, 8 and 64 asyncio tasks awaiting MessageStore.put_message
  4. ConsumeQueue random reads in a 1,000-unit vs a 10,000,000-unit queue
  5. SegmentPin.sendfile vs core.read + socket.sendall to a loopback socket

Progress goes to stderr, the table to stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from typing import Any

import rmqcore
from bench import _workloads as w
from bench import limits
from bench._args import work_dir

_T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - _T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class Budget:
    """Counts and time limits of one run."""

    append_s: float
    append_max_bytes: int
    sync_s: float
    sync_max_msgs: int
    cq_big_units: int
    cq_reads: int
    cq_time_limit_s: float
    send_s: float
    send_fill_bytes: int
    repeat: int
    fdatasync_count: int
    group_commit_s: float
    memcpy_repeat: int
    tcp_bytes: int
    cases: tuple[w.AppendCase, ...]

    @classmethod
    def make(cls, quick: bool) -> Budget:
        cases = []
        for size in (128, 1024):
            cases += [
                w.AppendCase(size, "realistic", "core.put"),
                w.AppendCase(size, "none", "core.put"),
                w.AppendCase(size, "realistic", "store.put_message_nowait"),
                w.AppendCase(size, "realistic", "core.put_batch", 64),
                w.AppendCase(size, "realistic", "core.put_batch", 256),
                w.AppendCase(size, "realistic", "store.put_messages_nowait", 256),
                w.AppendCase(size, "realistic", "store.put_messages_nowait", 256,
                             index_async=True),
                w.AppendCase(size, "none", "core.put_batch", 256),
                # isolation: the same shapes without the IndexFile
                w.AppendCase(size, "realistic", "core.put", index=False),
                w.AppendCase(size, "realistic", "core.put_batch", 256, index=False),
            ]
        if quick:
            cases = [c for c in cases if c.batch != 64]
            return cls(append_s=0.25, append_max_bytes=384 * w.MIB, sync_s=0.5,
                       sync_max_msgs=200_000, cq_big_units=1_000_000, cq_reads=50_000,
                       cq_time_limit_s=5.0, send_s=0.3, send_fill_bytes=16 * w.MIB,
                       repeat=1, fdatasync_count=300, group_commit_s=0.5,
                       memcpy_repeat=3, tcp_bytes=128 * w.MIB, cases=tuple(cases))
        return cls(append_s=1.5, append_max_bytes=1800 * w.MIB, sync_s=2.0,
                   sync_max_msgs=2_000_000, cq_big_units=10_000_000, cq_reads=300_000,
                   cq_time_limit_s=30.0, send_s=1.5, send_fill_bytes=64 * w.MIB,
                   repeat=2, fdatasync_count=2000, group_commit_s=2.0,
                   memcpy_repeat=5, tcp_bytes=512 * w.MIB, cases=tuple(cases))


# -- machine ------------------------------------------------------------------------


def describe_machine(directory: str) -> dict[str, Any]:
    info: dict[str, Any] = {
        "nproc": len(os.sched_getaffinity(0)),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "zlib": zlib.ZLIB_RUNTIME_VERSION,
        "dir": os.path.abspath(directory),
    }
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    info["ram_gib"] = round(int(line.split()[1]) / (1 << 20), 1)
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        out = subprocess.run(["findmnt", "-no", "SOURCE,FSTYPE,OPTIONS", "-T", directory],
                             capture_output=True, text=True, timeout=10, check=False)
        info["filesystem"] = out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        info["filesystem"] = "unknown (findmnt failed)"
    return info


# -- formatting ---------------------------------------------------------------------


@dataclasses.dataclass
class Row:
    section: str
    measurement: str
    value: str
    reference: str = ""
    ratio: str = ""
    target: str = ""
    met: str = ""


def _n(x: float, digits: int = 0) -> str:
    return f"{x:,.{digits}f}"


def _met(ok: bool | None, how_far: str = "") -> str:
    if ok is None:
        return ""
    return "yes" if ok else f"**NO**{' (' + how_far + ')' if how_far else ''}"


def render(rows: list[Row]) -> str:
    head = ["#", "measurement", "value", "reference", "ratio", "target", "met"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * len(head)) + "|"]
    for r in rows:
        cells = [r.section, r.measurement, r.value, r.reference, r.ratio, r.target, r.met]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


# -- sections -----------------------------------------------------------------------


def crc32_bandwidth(size: int = 64 * w.MIB, repeat: int = 3) -> float:
    """zlib.crc32 bytes/s over one big buffer (the CommitLog's body CRC uses
    the same system zlib)."""
    buf = b"\x42" * size
    best = float("inf")
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        zlib.crc32(buf)
        best = min(best, time.perf_counter() - t0)
    return size / best


def best_of(n: int, run: Callable[[], w.Rate], label: str,
            key: Callable[[w.Rate], float] = lambda r: r.msgs_per_s) -> dict[str, Any]:
    """Run ``run`` n times; the best run's figures plus every run's rate
    ('runs'). Best-of because interference on a shared VM only slows a run
    down (limits.py takes the best of its sequential-write passes too)."""
    rates = []
    for _ in range(max(1, n)):
        rate = run()
        log(f"{label}: {_n(rate.msgs_per_s)} msg/s, {_n(rate.mb_per_s)} MB/s "
            f"({rate.msgs:,} in {rate.secs:.2f} s) {rate.extra or ''}")
        rates.append(rate)
    best = max(rates, key=key)
    return {**best.as_dict(), "runs": [round(key(r), 1) for r in rates]}


def run_appends(d: str, b: Budget) -> list[dict[str, Any]]:
    out = []
    pools = {"realistic": w.props_pool("realistic"), "none": w.props_pool("none")}
    for case in b.cases:
        res = best_of(b.repeat, lambda c=case: w.run_append_case(
            d, c, b.append_max_bytes, b.append_s, pools[c.props]), f"append {case.name}")
        out.append({"case": case.name, **dataclasses.asdict(case), **res})
    return out


def run_limits_latency(d: str, b: Budget) -> dict[str, float]:
    """The limits that do not depend on the append volume. Run first, before
    the store sections churn gigabytes through the page cache."""
    out: dict[str, float] = {}
    log("limits: fdatasync latency")
    for k, v in limits.fdatasync_latency(d, count=b.fdatasync_count).items():
        out[f"fdatasync_{k}"] = v
    for n in (1, 8, 64):
        log(f"limits: raw group commit, {n} writer threads")
        out[f"group_commit_{n}_per_s"] = max(
            limits.group_commit_pwrite(d, n, b.group_commit_s) for _ in range(b.repeat))
    out["memcpy_GBps"] = limits.memcpy_bandwidth(repeat=b.memcpy_repeat) / 1e9
    out["crc32_GBps"] = crc32_bandwidth() / 1e9
    log("limits: loopback TCP")
    out["loopback_tcp_MBps"] = limits.loopback_tcp_bandwidth(b.tcp_bytes) / 1e6
    return out


def run_limits_bandwidth(d: str, b: Budget, seq_bytes: int) -> dict[str, float]:
    """Sequential write of the bytes the 1 KiB append cases wrote."""
    log(f"limits: page-cache sequential write of {seq_bytes / w.MIB:,.0f} MiB")
    seq = max(limits.seq_write_bandwidth(d, seq_bytes) for _ in range(b.repeat))
    w.settle(d)
    sync = limits.seq_write_bandwidth(d, seq_bytes, fdatasync=True)
    w.settle(d)
    return {"seq_write_bytes": seq_bytes, "seq_write_MBps": seq / 1e6,
            "seq_write_fdatasync_MBps": sync / 1e6}


def run_sync(d: str, b: Budget) -> list[dict[str, Any]]:
    """Best of b.repeat runs per task count (fdatasync tails on a shared VM
    disk vary from run to run; every run is kept in 'runs')."""
    out = []
    pool = w.realistic_props(4096)
    for tasks in (1, 8, 64):
        out.append(best_of(b.repeat, lambda t=tasks: w.run_sync_case(
            d, t, 128, b.sync_max_msgs, b.sync_s, pool), f"SYNC_FLUSH {tasks} appenders"))
    return out


def run_cq(d: str, b: Budget) -> dict[str, Any]:
    res: dict[str, Any] = {"big_units": b.cq_big_units, "small_units": 1000,
                           "reads": b.cq_reads, "cases": []}
    with w.temp_root(d) as root:
        core = w.open_core(root, index_enable=False)
        try:
            core.put_batch("CqBig", 0, rmqcore.encode_batch([(b"\x01", b"", 0)]))
            core.prepare_next_segment()
            log(f"ConsumeQueue: building a {b.cq_big_units:,}-unit queue")
            secs = w.fill_queue(core, "CqBig", b.cq_big_units - 1,
                                progress=lambda n: log(f"  {n + 1:,} units"))
            res["build_secs"] = secs
            res["build_units_per_s"] = (b.cq_big_units - 1) / secs
            w.fill_queue(core, "CqSmall", 1000)
            for topic, size in (("CqSmall", 1000), ("CqBig", b.cq_big_units)):
                assert core.max_offset_in_queue(topic, 0) == size
                for max_msgs in (32, 1):
                    offs = w.random_offsets(size, b.cq_reads, max_msgs)
                    r = best_of(b.repeat, lambda t=topic, o=offs, m=max_msgs: w.cq_random_reads(
                        core, t, o, m, b.cq_time_limit_s), f"  {size:,} units, max_msgs={max_msgs}")
                    r["ns_per_unit"] = r["secs"] / max(1, r["msgs"]) * 1e9
                    r["ns_per_call"] = r["secs"] / max(1, r["calls"]) * 1e9
                    log(f"  -> {r['ns_per_unit']:.1f} ns/unit, {r['ns_per_call']:.0f} ns/call")
                    res["cases"].append({"units": size, "max_msgs": max_msgs, **r})
                # A consumer's pattern: walk forward from an offset half-way in.
                r = best_of(b.repeat, lambda t=topic, n=size: w.cq_sequential_reads(
                    core, t, n // 2, b.cq_reads // 4, 32, b.cq_time_limit_s),
                    f"  {size:,} units, walking, max_msgs=32")
                r["ns_per_unit"] = r["secs"] / max(1, r["msgs"]) * 1e9
                r["ns_per_call"] = r["secs"] / max(1, r["calls"]) * 1e9
                log(f"  -> {r['ns_per_unit']:.1f} ns/unit, {r['ns_per_call']:.0f} ns/call")
                res["cases"].append({"units": size, "max_msgs": "walk", **r})
        finally:
            core.close()
    # Reference: the same random 20-byte reads from a plain file mapping.
    for key, units in (("mmap_small_ns", 1000), ("mmap_big_ns", b.cq_big_units)):
        offs = w.random_offsets(units, b.cq_reads, 1)
        res[key] = min(w.mmap_random_reads(d, units, offs, b.cq_time_limit_s)
                       for _ in range(b.repeat))
    log(f"  mmap reference: {res['mmap_small_ns']:.0f} vs {res['mmap_big_ns']:.0f} ns/read")
    return res


def run_send(d: str, b: Budget) -> dict[str, Any]:
    res: dict[str, Any] = {"cases": []}
    with w.temp_root(d) as root:
        core = w.open_core(root, index_enable=False)
        try:
            body = b"\xee" * 1024
            # Queues 0 and 1 interleaved record by record (as several
            # producers' queues are): a GetResult's 32 ranges are 32 runs.
            n = b.send_fill_bytes // 2048
            for i in range(2 * n):
                core.put(w.TOPIC, i & 1, body)
            # Queue 2 written in batches: its ranges follow each other.
            w.fill_for_send(core, w.TOPIC, 2, 1024, b.send_fill_bytes // 2)
            gets = {}
            for qid, label in ((0, "interleaved"), (2, "contiguous")):
                size = core.max_offset_in_queue(w.TOPIC, qid)
                lists = []
                for off in w.random_offsets(size, 256, 32):
                    g = core.get_message(w.TOPIC, qid, off, 32)
                    if g.message_count == 32:
                        lists.append(g.ranges)
                gets[label] = lists
            end = core.commit_log_max_offset
            big = [[(o, w.MIB)] for o in range(0, min(end, 1 << 30) - w.MIB, 4 * w.MIB + 4096)]
            plans = [
                ("32 x 1 KiB, interleaved", gets["interleaved"],
                 ("sendfile", "read_sendall", "read_ranges_sendall")),
                ("32 x 1 KiB, contiguous", gets["contiguous"],
                 ("sendfile", "sendfile_coalesced", "read_sendall", "read_ranges_sendall")),
                ("1 MiB range", big, ("sendfile", "read_sendall")),
            ]
            for label, lists, modes in plans:
                for mode in modes:
                    r = best_of(b.repeat, lambda m=mode, ls=lists: w.send_ranges(
                        core, m, ls, 10_000_000, b.send_s), f"send {label}, {mode}",
                        key=lambda x: x.mb_per_s)
                    r["us_per_get"] = r["secs"] / max(1, r["rounds"]) * 1e6
                    res["cases"].append({"ranges": label, "mode": mode, **r})
        finally:
            core.close()
    return res


# -- table --------------------------------------------------------------------------


def build_rows(lim: dict[str, float], appends: list[dict[str, Any]],
               sync: list[dict[str, Any]], cq: dict[str, Any],
               send: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    seq = lim["seq_write_MBps"]
    mib = lim["seq_write_bytes"] / w.MIB
    rows += [
        Row("1", f"page-cache sequential write, {mib:,.0f} MiB", f"{_n(seq)} MB/s"),
        Row("1", f"… with a final fdatasync, {mib:,.0f} MiB",
            f"{_n(lim['seq_write_fdatasync_MBps'])} MB/s", "page-cache write",
            f"{lim['seq_write_fdatasync_MBps'] / seq:.2f}"),
        Row("1", "fdatasync after a 128 B pwrite (p50 / p99)",
            f"{lim['fdatasync_p50_us']:.0f} / {lim['fdatasync_p99_us']:.0f} µs",
            "", "", "", ""),
        Row("1", "fdatasync rate (1 / mean)", f"{_n(lim['fdatasync_per_second'])} /s"),
        Row("1", "memcpy (64 MiB)", f"{lim['memcpy_GBps']:.1f} GB/s"),
        Row("1", "zlib crc32 (body CRC)", f"{lim['crc32_GBps']:.2f} GB/s", "memcpy",
            f"{lim['crc32_GBps'] / lim['memcpy_GBps']:.2f}"),
        Row("1", "loopback TCP, 256 KiB sends", f"{_n(lim['loopback_tcp_MBps'])} MB/s"),
    ]
    for n in (1, 8, 64):
        rows.append(Row("1", f"raw group commit, {n} writer thread{'s' if n > 1 else ''}",
                        f"{_n(lim[f'group_commit_{n}_per_s'])} /s"))

    for a in appends:
        ratio = a["MBps"] / seq
        target, ok, far = "", None, ""
        if a["index"]:
            if a["body_len"] == 1024:
                target, ok = "≥ 50% of page-cache write", ratio >= 0.5
                far = f"{ratio / 0.5:.2f}x target"
            elif a["batch"]:
                target, ok = "≥ 2,000,000 msg/s", a["msgs_per_s"] >= 2e6
                far = f"{a['msgs_per_s'] / 2e6:.2f}x target"
            else:
                target, ok = "≥ 500,000 msg/s", a["msgs_per_s"] >= 5e5
                far = f"{a['msgs_per_s'] / 5e5:.2f}x target"
        met = _met(ok, far) if ok is not None else "(isolation)"
        rows.append(Row("2", f"{a['case']} ({a['record_bytes']} B records)",
                        f"{_n(a['msgs_per_s'])} msg/s, {_n(a['MBps'])} MB/s",
                        "page-cache write", f"{ratio:.1%}", target, met))

    base = sync[0]["msgs_per_s"]
    for s in sync:
        n = s["tasks"]
        raw = lim[f"group_commit_{n}_per_s"]
        per_flush = s["msgs"] / s["flushes"] if s.get("flushes") else 0.0
        rows.append(Row("3", f"SYNC_FLUSH, {n} appender task{'s' if n > 1 else ''} "
                        f"({per_flush:.1f} msgs per flush)",
                        f"{_n(s['msgs_per_s'])} msg/s", f"raw group commit {_n(raw)} /s",
                        f"{s['msgs_per_s'] / raw:.2f}"))
    for n, want in ((8, None), (64, 20.0)):
        s = next(x for x in sync if x["tasks"] == n)
        scale = s["msgs_per_s"] / base if base else 0.0
        raw = lim[f"group_commit_{n}_per_s"] / lim["group_commit_1_per_s"]
        rows.append(Row("3", f"SYNC_FLUSH scaling {n} / 1 tasks", f"{scale:.1f}x",
                        f"raw group commit {n} / 1: {raw:.1f}x", f"{scale / raw:.2f}",
                        f"≥ {want:.0f}x" if want else "",
                        _met(scale >= want, f"{scale / want:.2f}x target") if want else ""))

    by = {(c["units"], c["max_msgs"]): c for c in cq["cases"]}
    small, big = cq["small_units"], cq["big_units"]
    rows.append(Row("4", f"build a {big:,}-unit queue (put_batch of 1 B bodies)",
                    f"{cq['build_secs']:.1f} s, {_n(cq['build_units_per_s'])} units/s"))
    for mm in ("walk", 32, 1):
        s, bg = by[(small, mm)], by[(big, mm)]
        what = (f"get_message(max_msgs={mm}) at random offsets" if mm != "walk"
                else "get_message(max_msgs=32) walking the queue (a consumer)")
        rows.append(Row("4", f"{what}, {small:,} units",
                        f"{s['ns_per_unit']:.1f} ns/unit ({s['ns_per_call']:.0f} ns/call)"))
        ratio = bg["ns_per_unit"] / s["ns_per_unit"]
        rows.append(Row("4", f"{what}, {big:,} units",
                        f"{bg['ns_per_unit']:.1f} ns/unit ({bg['ns_per_call']:.0f} ns/call)",
                        f"{small:,}-unit queue", f"{ratio:.2f}", "≤ 1.20 (flat within 20%)",
                        _met(ratio <= 1.2, f"+{(ratio - 1) * 100:.0f}%")))
    mr = cq["mmap_big_ns"] / cq["mmap_small_ns"]
    rows.append(Row("4", f"reference: random 20 B read of a file mapping, {small * 20:,} B vs "
                    f"{big * 20 / 1e6:,.0f} MB (Python loop)",
                    f"{cq['mmap_small_ns']:.0f} vs {cq['mmap_big_ns']:.0f} ns/read",
                    "small mapping", f"{mr:.2f}"))

    cases = send["cases"]
    for c in cases:
        copy = next(x for x in cases if x["ranges"] == c["ranges"] and x["mode"] == "read_sendall")
        ref, ratio = "", ""
        if c["mode"] != "read_sendall":
            ref, ratio = "read + sendall per range", f"{c['MBps'] / copy['MBps']:.2f}"
        else:
            ref = f"loopback TCP {_n(lim['loopback_tcp_MBps'])} MB/s"
            ratio = f"{c['MBps'] / lim['loopback_tcp_MBps']:.2f}"
        rows.append(Row("5", f"{c['ranges']}: {c['mode'].replace('_', ' ')}",
                        f"{_n(c['MBps'])} MB/s ({c['us_per_get']:.1f} µs per list)", ref, ratio))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=work_dir, default=tempfile.gettempdir(),
                        help="directory (filesystem) to measure on")
    parser.add_argument("--quick", action="store_true", help="smaller counts (< 60 s)")
    parser.add_argument("--json", metavar="OUT", help="also write the results as JSON here")
    parser.add_argument("--repeat", type=int, default=0,
                        help="runs per case, best kept (default: 2, or 1 with --quick)")
    args = parser.parse_args(argv)
    os.makedirs(args.dir, exist_ok=True)
    b = Budget.make(args.quick)
    if args.repeat > 0:
        b = dataclasses.replace(b, repeat=args.repeat)
    machine = describe_machine(args.dir)
    log(f"store report on {machine['dir']} ({'quick' if args.quick else 'full'})")

    # Latency-sensitive parts first, before gigabytes of appends go through
    # (and are freed from) the page cache; the table keeps sections 1-5.
    lim = run_limits_latency(args.dir, b)
    sync = run_sync(args.dir, b)
    send = run_send(args.dir, b)
    cq = run_cq(args.dir, b)
    appends = run_appends(args.dir, b)
    seq_bytes = max(a["bytes"] for a in appends if a["body_len"] == 1024)
    lim.update(run_limits_bandwidth(args.dir, b, seq_bytes))
    rows = build_rows(lim, appends, sync, cq, send)
    elapsed = time.perf_counter() - _T0
    log(f"done in {elapsed:.0f} s")

    print(f"pyrmq store report ({'quick' if args.quick else 'full'} run, best of {b.repeat}, "
          f"{elapsed:.0f} s)\n")
    print(f"Machine: {machine.get('nproc')} CPUs ({machine.get('cpu', '?')}), "
          f"{machine.get('ram_gib', '?')} GiB RAM, kernel {machine['kernel']}, "
          f"Python {machine['python']}, zlib {machine['zlib']}; "
          f"directory {machine['dir']} on {machine['filesystem']}\n")
    print(render(rows))
    if args.json:
        doc = {"machine": machine, "quick": args.quick, "elapsed_s": elapsed,
               "budget": {k: v for k, v in dataclasses.asdict(b).items() if k != "cases"},
               "limits": lim, "append": appends, "sync_flush": sync,
               "consume_queue": cq, "sendfile": send,
               "rows": [dataclasses.asdict(r) for r in rows]}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2, default=str)
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
