"""The `pyrmq` command.

pyrmq store demo DIR     write and read back messages through the store
pyrmq store check DIR    verify a store directory offline (read-only)
pyrmq store dump DIR     print the messages of a queue

pyrmq standalone         a NameServer and a Broker in one process
pyrmq namesrv            a NameServer (port 9876)
pyrmq broker -c FILE     a Broker configured by a RocketMQ broker.conf
pyrmq admin ...          topics, routes and cluster info"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import rmqcore
from pyrmq.storage import MessageStore, MessageStoreConfig
from pyrmq.storage.check import check_store


def _store_config(args: argparse.Namespace) -> MessageStoreConfig:
    return MessageStoreConfig(
        store_path_root_dir=args.dir, mapped_file_size_commit_log=args.segment_mb << 20
    )


async def _demo(args: argparse.Namespace) -> int:
    async with MessageStore(_store_config(args)) as store:
        t0 = time.perf_counter()
        for i in range(args.count):
            props = rmqcore.encode_properties({"TAGS": "demo", "KEYS": f"demo-{i}"})
            store.put_message_nowait("DemoTopic", i % 4, b"hello pyrmq %d" % i, props)
        dt = time.perf_counter() - t0
        print(f"stored {args.count} messages in {dt:.3f}s ({args.count / dt:,.0f} msgs/s)")
        r = store.get_message("DemoTopic", 0, store.max_offset_in_queue("DemoTopic", 0) - 3, 3)
        for m in rmqcore.decode_records(store.read(r.ranges)):
            print(f"  DemoTopic/0 offset {m['queue_offset']}: {m['body'].decode()}")
        key = f"demo-{args.count - 1}"
        found = await store.query_message("DemoTopic", key)
        print(f"  lookup by key {key}: {[m['body'].decode() for m in found]}")
        rec = store.recovery
        print(
            f"opened {'after a crash' if rec['abnormal'] else 'cleanly'}; "
            f"CommitLog now ends at {store.commit_log_max_offset}"
        )
    return 0


def _check(args: argparse.Namespace) -> int:
    rep = check_store(args.dir)
    if args.json:
        print(json.dumps(rep.as_dict(), indent=2))
    else:
        print(
            f"{rep.root}: {rep.segments} segment(s), {rep.records} records, "
            f"CommitLog ends at {rep.commit_log_end}, {len(rep.queues)} queue(s)"
        )
        for p in rep.problems:
            print(f"  problem: {p}")
        print("OK" if rep.ok else f"{len(rep.problems)} problem(s)")
    return 0 if rep.ok else 1


async def _dump(args: argparse.Namespace) -> int:
    async with MessageStore(_store_config(args)) as store:
        offset, shown = args.offset, 0
        for _ in range(100_000):
            r = store.get_message(args.topic, args.queue, offset, 32)
            if r.status != "FOUND" or shown >= args.count:
                break
            for m in rmqcore.decode_records(store.read(r.ranges))[: args.count - shown]:
                props = rmqcore.decode_properties(m["properties"])
                print(f"{m['queue_offset']}\t{m['commit_log_offset']}\t{props}\t{m['body']!r}")
                shown += 1
            offset = r.next_begin_offset
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="pyrmq", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    store = sub.add_parser("store", help="work with a store directory")
    ssub = store.add_subparsers(dest="store_cmd", required=True)
    demo = ssub.add_parser("demo", help="write and read back messages")
    demo.add_argument("dir")
    demo.add_argument("--count", type=int, default=100_000)
    demo.add_argument("--segment-mb", type=int, default=64)
    check = ssub.add_parser("check", help="verify a store offline (read-only)")
    check.add_argument("dir")
    check.add_argument("--json", action="store_true")
    dump = ssub.add_parser("dump", help="print the messages of a queue")
    dump.add_argument("dir")
    dump.add_argument("--topic", required=True)
    dump.add_argument("--queue", type=int, default=0)
    dump.add_argument("--offset", type=int, default=0)
    dump.add_argument("--count", type=int, default=20)
    dump.add_argument("--segment-mb", type=int, default=64)
    from pyrmq import admin, serve

    serve.add_arguments(sub)
    admin.add_arguments(sub)
    args = p.parse_args(argv)
    if args.cmd in ("namesrv", "broker", "standalone"):
        return serve.main(args)
    if args.cmd == "admin":
        return admin.main(args)
    if args.store_cmd == "check":
        return _check(args)
    if args.store_cmd == "demo":
        return asyncio.run(_demo(args))
    return asyncio.run(_dump(args))


if __name__ == "__main__":
    sys.exit(main())
