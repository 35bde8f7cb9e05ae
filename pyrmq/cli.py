"""The `pyrmq` command.

pyrmq store demo DIR     write and read back messages through the store
pyrmq store check DIR    verify a store directory offline (read-only)
pyrmq store dump DIR     print the messages of a queue

pyrmq standalone         a NameServer and a Broker in one process
pyrmq namesrv            a NameServer (port 9876)
pyrmq broker -c FILE     a Broker configured by a RocketMQ broker.conf
pyrmq cluster            a name server and master/slave broker groups, as processes
pyrmq controller -c FILE a RocketMQ 5 controller (master failover) from a controller.conf
pyrmq admin ...          mqadmin commands (pyrmq admin --help)
pyrmq dashboard          a web dashboard on port 8082 (needs pyrmq[dashboard])
pyrmq produce -t TOPIC   send --body, or each line of stdin, as messages
pyrmq consume -t TOPIC   print a topic's messages as they arrive
pyrmq bench ...          load generators: produce, consume, e2e (pyrmq bench --help)"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any, NoReturn

import rmqcore
from pyrmq.common.errors import NotAStoreError, RMQError
from pyrmq.storage import MessageStore, MessageStoreConfig
from pyrmq.storage.check import check_store
from pyrmq.storage.files import StoreGeometry, queue_ids, read_queue

#: CommitLog segment size of a store `pyrmq store demo` creates
DEMO_SEGMENT_MB = 64


class _Parser(argparse.ArgumentParser):
    """Bad arguments: one `error: ...` line on stderr and exit status 1,
    like every other failure of the command."""

    def error(self, message: str) -> NoReturn:
        self.exit(1, f"error: {message} (see '{self.prog} --help')\n")


def _segment_bytes(args: argparse.Namespace) -> int | None:
    if args.segment_mb is None:
        return None
    if args.segment_mb <= 0:
        raise ValueError("--segment-mb must be a positive number of MiB")
    return int(args.segment_mb) << 20


def _store_config(args: argparse.Namespace) -> MessageStoreConfig:
    """A new store gets --segment-mb (64 by default); an existing one is
    opened with the geometry its files have (--segment-mb must agree)."""
    wanted = _segment_bytes(args)
    size = wanted if wanted is not None else DEMO_SEGMENT_MB << 20
    if os.path.exists(args.dir):
        if not os.path.isdir(args.dir):
            raise NotAStoreError(f"{args.dir} is not a directory")
        if os.listdir(args.dir):
            size = StoreGeometry.read(args.dir).check_commit_log_size(wanted) or size
    return MessageStoreConfig(store_path_root_dir=args.dir, mapped_file_size_commit_log=size)


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


def _dump(args: argparse.Namespace) -> int:
    """Read-only, from the files: safe on a running broker's store."""
    StoreGeometry.read(args.dir).check_commit_log_size(_segment_bytes(args))
    if args.count < 0 or args.offset < 0:
        raise ValueError("--count and --offset must be >= 0")
    shown = 0
    for m in read_queue(args.dir, args.topic, args.queue, args.offset, args.count):
        props = rmqcore.decode_properties(m["properties"])
        print(f"{m['queue_offset']}\t{m['commit_log_offset']}\t{props}\t{m['body']!r}")
        shown += 1
    if not shown:
        held = ", ".join(map(str, queue_ids(args.dir, args.topic)))
        print(
            f"no messages in {args.topic} queue {args.queue} from offset {args.offset} "
            f"(queues of {args.topic} holding messages: {held})",
            file=sys.stderr,
        )
    return 0


# -- produce / consume ---------------------------------------------------------------------


def _add_client_tools(sub: Any) -> None:
    from pyrmq.admin.cli import add_common, add_tls_options, default_namesrv

    pr = sub.add_parser(
        "produce",
        help="send messages: --body TEXT, or one per line of stdin",
        description="Send --body (--count times), or each non-empty line of stdin "
        "(at most --count lines), to a topic, printing each SendResult.",
    )
    add_common(pr)
    pr.add_argument("-t", "--topic", required=True)
    pr.add_argument("--tags", default=None, help="tag of every message")
    pr.add_argument("--keys", default=None, help="keys of every message (space-separated)")
    pr.add_argument("--count", type=int, default=None, help="messages to send")
    pr.add_argument("--body", default=None, help="message body (default: read lines of stdin)")
    pr.add_argument("-g", "--group", default="TOOLS_PRODUCER", help="producer group")
    pr.add_argument("-q", "--quiet", action="store_true", help="print only a summary")
    pr.set_defaults(tool=_produce)

    co = sub.add_parser(
        "consume",
        help="print a topic's messages as they arrive",
        description="Consume a topic with a PushConsumer and print each message "
        "(one JSON object per line with --json). Without -g, a group of its own "
        "(pyrmq-console-<pid>-<ms>) that starts at the end of each queue, or at the "
        "first message with --from-beginning; with -g, the group resumes from its "
        "committed offsets (--from-beginning then only matters for queues it has "
        "none for). Offsets of printed messages are committed; messages pulled "
        "beyond --count are not, so the group sees them again.",
    )
    co.add_argument(
        "-n",
        "--namesrv-addr",
        "--namesrvAddr",
        dest="namesrv_addr",
        default=default_namesrv(),
        help="name servers, 'host:port[;host:port]' (default: $NAMESRV_ADDR or 127.0.0.1:9876)",
    )
    co.add_argument("-t", "--topic", required=True)
    co.add_argument("-g", "--group", default=None, help="consumer group")
    co.add_argument("-s", "--subscription", default="*", help="tag expression ('*')")
    co.add_argument("--from-beginning", action="store_true", help="start at the first message")
    co.add_argument("--count", type=int, default=None, help="stop after this many messages")
    co.add_argument(
        "--timeout",
        dest="idle_timeout",
        metavar="SECONDS",
        type=float,
        default=None,
        help="stop when no message arrived for this many seconds (default: run until Ctrl-C)",
    )
    co.add_argument("--json", action="store_true", help="one JSON object per message and line")
    add_tls_options(co)
    co.set_defaults(tool=_consume)


def _client_tool(args: argparse.Namespace) -> int:
    from pyrmq.admin.cli import error_line, quiet_logging

    with quiet_logging():
        try:
            return int(asyncio.run(args.tool(args)))
        except KeyboardInterrupt:
            return 130
        except Exception as e:
            print(error_line(e), file=sys.stderr)
            return 1


def _bodies(args: argparse.Namespace) -> Any:
    """The bodies to send: --body --count times, else stdin's non-empty lines."""
    if args.body is not None:
        for _ in range(1 if args.count is None else args.count):
            yield args.body
        return
    n = 0
    for line in sys.stdin:
        if args.count is not None and n >= args.count:
            return
        line = line.rstrip("\r\n")
        if line:
            n += 1
            yield line


async def _produce(args: argparse.Namespace) -> int:
    """Blocking stdin reads happen between sends, when the producer has
    nothing in flight."""
    from pyrmq.admin.results import send_result_as_dict
    from pyrmq.common.message import Message
    from pyrmq.producer import Producer

    if args.count is not None and args.count < 0:
        raise ValueError("--count must be >= 0")
    sent = 0
    t0 = time.perf_counter()
    from pyrmq.admin.cli import tls_kwargs

    async with Producer(
        args.group, args.namesrv_addr, send_msg_timeout=args.timeout, **tls_kwargs(args)
    ) as producer:
        for body in _bodies(args):
            r = await producer.send(Message(args.topic, body, tags=args.tags, keys=args.keys))
            sent += 1
            if args.quiet:
                continue
            if args.json:
                print(json.dumps(send_result_as_dict(r)), flush=True)
            else:
                mq = r.message_queue
                print(
                    f"{r.send_status.name} {mq} offset={r.queue_offset} msgId={r.msg_id} "
                    f"offsetMsgId={r.offset_msg_id}",
                    flush=True,
                )
    if args.quiet:
        dt = time.perf_counter() - t0
        if args.json:
            print(json.dumps({"topic": args.topic, "sent": sent, "seconds": round(dt, 3)}))
        else:
            print(f"sent {sent} message(s) to {args.topic} in {dt:.3f}s")
    return 0


async def _consume(args: argparse.Namespace) -> int:
    from pyrmq.admin.cli import fmt_time, tls_kwargs
    from pyrmq.admin.results import message_as_dict
    from pyrmq.common.errors import TopicNotExistError
    from pyrmq.common.message import MessageExt
    from pyrmq.consumer import ConsumeConcurrentlyStatus, ConsumeFromWhere, PushConsumer

    if args.count is not None and args.count <= 0:
        raise ValueError("--count must be > 0")
    group = args.group or f"pyrmq-console-{os.getpid()}-{int(time.time() * 1000)}"
    where = (
        ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
        if args.from_beginning
        else ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    )
    consumer = PushConsumer(
        group,
        args.namesrv_addr,
        consume_from_where=where,
        consume_message_batch_max_size=1,
        await_termination_seconds=1.0,
        **tls_kwargs(args),
    )
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    never = asyncio.Event()
    printed = 0
    last = loop.time()

    async def show(msgs: list[MessageExt], ctx: Any) -> ConsumeConcurrentlyStatus:
        nonlocal printed, last
        for m in msgs:
            if args.count is not None and printed >= args.count:
                # Not printed, so not acknowledged: wait to be cancelled at
                # shutdown; the group's offset stays before this message.
                await never.wait()
            printed += 1
            last = loop.time()
            if args.json:
                print(json.dumps(message_as_dict(m), ensure_ascii=False), flush=True)
            else:
                head = f"{m.topic}@{m.broker_name}#{m.queue_id} offset={m.queue_offset}"
                meta = f"msgId={m.msg_id} tags={m.tags or '-'} keys={' '.join(m.keys) or '-'}"
                when = fmt_time(m.store_timestamp)
                print(f"[{head} {when} {meta}] {m.body.decode(errors='replace')}", flush=True)
            if args.count is not None and printed >= args.count:
                done.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    try:
        route = await consumer.client.update_topic_route(args.topic)
        if route is None:
            raise TopicNotExistError(f"topic {args.topic!r} does not exist (no route)")
        if args.group is None and not args.from_beginning:
            await _start_at_end(consumer.client, group, args.topic)
    except BaseException:
        await consumer.client.shutdown()
        raise
    consumer.subscribe(args.topic, args.subscription)
    consumer.register_message_listener(show)
    await consumer.start()
    try:
        while not done.is_set():
            wait = None if args.idle_timeout is None else last + args.idle_timeout - loop.time()
            if wait is not None and wait <= 0:
                break
            try:
                async with asyncio.timeout(wait):
                    await done.wait()
            except TimeoutError:
                continue
    finally:
        await consumer.shutdown()
    print(f"{printed} message(s) consumed by group {group}", file=sys.stderr)
    return 0


async def _start_at_end(client: Any, group: str, topic: str) -> None:
    """Commit each queue's max offset for a new group, so it reads only
    messages sent from now on (the broker would start a group without an
    offset at 0 on a queue whose first message is still stored)."""
    route = client.routes[topic]
    for mq in route.subscribe_queues(topic):
        addr = client.find_broker_addr(mq.broker_name)
        if addr is None:
            continue
        offset = await client.api.get_max_offset(addr, mq)
        await client.api.update_consumer_offset(addr, group, mq, offset)


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # the reader of our output went away (`pyrmq admin topicList | head`):
        # nothing to tell it; end as a command killed by SIGPIPE would, and
        # point stdout at /dev/null so the interpreter's final flush is quiet
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


def _main(argv: list[str] | None) -> int:
    p = _Parser(
        prog="pyrmq", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    store = sub.add_parser("store", help="work with a store directory")
    ssub = store.add_subparsers(dest="store_cmd", required=True)
    demo = ssub.add_parser("demo", help="write and read back messages")
    demo.add_argument("dir")
    demo.add_argument("--count", type=int, default=100_000)
    demo.add_argument(
        "--segment-mb",
        type=int,
        default=None,
        help=f"CommitLog segment size of a new store (default {DEMO_SEGMENT_MB}); "
        "an existing store keeps its own",
    )
    check = ssub.add_parser("check", help="verify a store offline (read-only)")
    check.add_argument("dir")
    check.add_argument("--json", action="store_true")
    dump = ssub.add_parser("dump", help="print the messages of a queue")
    dump.add_argument("dir")
    dump.add_argument("--topic", required=True)
    dump.add_argument("--queue", type=int, default=0)
    dump.add_argument("--offset", type=int, default=0)
    dump.add_argument("--count", type=int, default=20)
    dump.add_argument(
        "--segment-mb",
        type=int,
        default=None,
        help="not needed: the store's files say; if given, it must match them",
    )
    from pyrmq import dashboard, deploy, serve
    from pyrmq.admin import cli as admin
    from pyrmq.benchmark import cli as bench_cli

    serve.add_arguments(sub)
    deploy.add_arguments(sub)
    admin.add_arguments(sub)
    dashboard.add_arguments(sub)
    _add_client_tools(sub)
    bench_cli.add_arguments(sub)
    args = p.parse_args(argv)
    if args.cmd in ("namesrv", "broker", "standalone", "controller", "proxy"):
        try:
            return serve.main(args)
        except (RMQError, OSError, ValueError) as e:
            return _fail(e)
    if args.cmd == "cluster":
        try:
            return deploy.run(args)
        except (RMQError, OSError, ValueError, RuntimeError) as e:
            return _fail(e)
    if args.cmd == "admin":
        return admin.main(args)
    if args.cmd == "dashboard":
        return dashboard.main(args)
    if args.cmd == "bench":
        return bench_cli.main(args)
    if args.cmd in ("produce", "consume"):
        return _client_tool(args)
    try:
        if args.store_cmd == "check":
            return _check(args)
        if args.store_cmd == "demo":
            return asyncio.run(_demo(args))
        return _dump(args)
    except (RMQError, OSError, ValueError) as e:
        return _fail(e)


def _fail(e: BaseException) -> int:
    """A user's mistake (or the machine's): one line on stderr, status 1."""
    from pyrmq.admin.cli import error_line

    print(error_line(e), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
