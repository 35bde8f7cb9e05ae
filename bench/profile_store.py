"""Run one store workload of bench/store_report.py in its steady state, for
profiling: with ``--cprofile`` under cProfile, or under ``perf record`` with
only the measured window sampled (setup such as warming 1 GiB segments is
left out). perf's control FIFOs are passed in PYRMQ_PERF_CTL / PYRMQ_PERF_ACK:

    mkfifo /tmp/ctl /tmp/ack
    PYRMQ_PERF_CTL=/tmp/ctl PYRMQ_PERF_ACK=/tmp/ack perf record -F 2000 -g -D -1 \\
        --control=fifo:/tmp/ctl,/tmp/ack -o /tmp/perf.data -- \\
        python -m bench.profile_store append --body 1024 --api core.put_batch --batch 256
    perf report -i /tmp/perf.data --no-children --sort sym

Workloads: ``append`` (--body, --api, --batch, --props, --no-index),
``sync`` (--tasks), ``cq`` (--units, --max-msgs), ``send`` (--ranges, --mode).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import os
import pstats
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import rmqcore
from bench import _workloads as w
from bench._args import work_dir
from pyrmq.storage import FlushDiskType, MessageStore


@contextlib.contextmanager
def window(cprofile: bool, top: int = 25) -> Iterator[None]:
    """The measured window: perf enabled (if its FIFOs are given) and/or cProfile."""
    ctl, ack = os.environ.get("PYRMQ_PERF_CTL"), os.environ.get("PYRMQ_PERF_ACK")
    prof = cProfile.Profile() if cprofile else None
    with contextlib.ExitStack() as stack:
        if ctl and ack:
            c = stack.enter_context(open(ctl, "w"))
            a = stack.enter_context(open(ack))
            c.write("enable\n")
            c.flush()
            a.readline()
            stack.callback(lambda: (c.write("disable\n"), c.flush(), a.readline()))
        if prof is not None:
            prof.enable()
            stack.callback(prof.disable)
        yield
    if prof is not None:
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(top)


def _report(label: str, rate: w.Rate) -> None:
    print(f"{label}: {rate.msgs:,} msgs in {rate.secs:.2f} s = {rate.msgs_per_s:,.0f} msg/s, "
          f"{rate.mb_per_s:,.0f} MB/s {rate.extra or ''}")


def profile_append(a: argparse.Namespace) -> None:
    body = b"\xab" * a.body
    pool = w.props_pool(a.props)
    max_bytes = 1800 * w.MIB
    with w.temp_root(a.dir) as root:
        if a.api == "store.put_message_nowait":
            async def main() -> w.Rate:
                cfg = w.store_config(root, message_index_enable=not a.no_index)
                async with MessageStore(cfg) as store:
                    rec = w.ready_core(store.core, body, pool[0])
                    with window(a.cprofile):
                        return await w.append_per_call_async(
                            store.put_message_nowait, body, pool, rec, max_bytes // rec,
                            a.seconds)
            _report("append", asyncio.run(main()))
            return
        core = w.open_core(root, index_enable=not a.no_index)
        try:
            rec = w.ready_core(core, body, pool[0])
            batches = w.build_batches(body, pool, a.batch) if a.batch else None
            with window(a.cprofile):
                if batches:
                    rate = w.append_batched(core.put_batch, batches, max_bytes // rec, a.seconds)
                else:
                    rate = w.append_per_call(core.put, body, pool, rec, max_bytes // rec,
                                             a.seconds)
            _report("append", rate)
        finally:
            core.close()


def profile_sync(a: argparse.Namespace) -> None:
    body = b"\xcd" * 128
    pool = w.realistic_props(4096)

    async def main(root: str) -> w.Rate:
        cfg = w.store_config(root, flush_disk_type=FlushDiskType.SYNC_FLUSH)
        async with MessageStore(cfg) as store:
            w.ready_core(store.core, body, pool[0], prepare_next=False)
            await store.put_message(w.TOPIC, 0, body, pool[0])
            with window(a.cprofile):
                return await w.sync_appenders(store, a.tasks, body, pool, 10_000_000,
                                              a.seconds)

    with w.temp_root(a.dir) as root:
        _report(f"SYNC_FLUSH {a.tasks} tasks", asyncio.run(main(root)))


def profile_cq(a: argparse.Namespace) -> None:
    with w.temp_root(a.dir) as root:
        core = w.open_core(root, index_enable=False)
        try:
            core.put_batch("Cq", 0, rmqcore.encode_batch([(b"\x01", b"", 0)]))
            core.prepare_next_segment()
            w.fill_queue(core, "Cq", a.units - 1)
            offs = w.random_offsets(a.units, 2_000_000, a.max_msgs)
            with window(a.cprofile):
                rate = w.cq_random_reads(core, "Cq", offs, a.max_msgs, a.seconds)
            _report("cq", rate)
            print(f"{rate.secs / max(1, rate.msgs) * 1e9:.1f} ns/unit")
        finally:
            core.close()


def profile_send(a: argparse.Namespace) -> None:
    with w.temp_root(a.dir) as root:
        core = w.open_core(root, index_enable=False)
        try:
            body = b"\xee" * 1024
            for i in range(2 * 16384):
                core.put(w.TOPIC, i & 1, body)
            w.fill_for_send(core, w.TOPIC, 2, 1024, 16 * w.MIB)
            if a.ranges == "1mib":
                end = core.commit_log_max_offset
                lists = [[(o, w.MIB)] for o in range(0, end - w.MIB, 2 * w.MIB + 4096)]
            else:
                qid = 0 if a.ranges == "interleaved" else 2
                size = core.max_offset_in_queue(w.TOPIC, qid)
                lists = [core.get_message(w.TOPIC, qid, off, 32).ranges
                         for off in w.random_offsets(size, 256, 32)]
            with window(a.cprofile):
                rate = w.send_ranges(core, a.mode, lists, 10_000_000, a.seconds)
            _report("send", rate)
        finally:
            core.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=work_dir, default=tempfile.gettempdir())
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--cprofile", action="store_true", help="print a cProfile table")
    sub = parser.add_subparsers(dest="workload", required=True)
    p = sub.add_parser("append")
    p.add_argument("--body", type=int, default=1024)
    p.add_argument("--api", default="core.put",
                   choices=["core.put", "core.put_batch", "store.put_message_nowait"])
    p.add_argument("--batch", type=int, default=0)
    p.add_argument("--props", default="realistic", choices=["realistic", "none"])
    p.add_argument("--no-index", action="store_true")
    p = sub.add_parser("sync")
    p.add_argument("--tasks", type=int, default=64)
    p = sub.add_parser("cq")
    p.add_argument("--units", type=int, default=10_000_000)
    p.add_argument("--max-msgs", type=int, default=1)
    p = sub.add_parser("send")
    p.add_argument("--ranges", default="interleaved", choices=["interleaved", "contiguous", "1mib"])
    p.add_argument("--mode", default="sendfile", choices=list(w.SEND_MODES))
    a = parser.parse_args(argv)
    run: dict[str, Callable[[Any], None]] = {
        "append": profile_append, "sync": profile_sync, "cq": profile_cq, "send": profile_send,
    }
    run[a.workload](a)


if __name__ == "__main__":
    main()
