"""`pyrmq bench`: load generators in the spirit of RocketMQ's benchmark tools
(org.apache.rocketmq.example.benchmark Producer and Consumer), on pyrmq's
asyncio client.

    pyrmq bench produce -n 127.0.0.1:9876 -t BenchmarkTest -s 128 -c 64 --mode async -d 10
    pyrmq bench produce --count 100000 -b 32 --json out.json
    pyrmq bench consume -t BenchmarkTest --from-beginning --count 100000
    pyrmq bench e2e -t BenchmarkTest --rate 5000 -d 10

While it runs, a line a second on stderr (send TPS, average and max RT,
failures; consume TPS and born-to-consume latency; for e2e both, with the
second's produce-to-consume percentiles), and with --count a progress bar
when stderr is a terminal. At the end, a summary table on stdout; --json
FILE also writes every figure as JSON (`--json -`: the JSON on stdout, the
table on stderr).

Without --count a run lasts -d seconds (10); with --count it lasts until
that many messages went (or -d, if given, passed first); `-d 0` runs until
Ctrl-C. Ctrl-C ends any run early and still prints the summary.

produce: concurrency is the number of coroutines each awaiting one send at
a time (--mode sync), of sends in flight (async), or of coroutines writing
oneway requests (oneway; the RT is then the time to hand the request to the
connection). -b N sends batches of N (one SEND_BATCH_MESSAGE request; RT is
per request). Bodies are random bytes, sent uncompressed.

consume: a PushConsumer (or --consumer pull, a lite PullConsumer); without
-g a new group (benchmark_consumer_<pid>) that starts at the end of each
queue, or at the first message with --from-beginning; with -g, the group
resumes from its committed offsets. Latency is
born-to-consume, from the producer's born timestamp (milliseconds, the
producer's clock).

e2e: one producer and one consumer of a new group in this process. Each
body carries its sequence number and send time; the consumer computes the
produce-to-consume latency, and counts messages lost and duplicated. Sends
are paced at --rate messages a second (0: as fast as -c sends in flight
allow); latency counts from the send call, so a producer falling behind
the rate shows as a lower achieved rate. After sending, the run waits up
to 10 s for the consumer to catch up.

--processes N runs N processes (produce, consume) and merges their counts."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from pyrmq.admin.cli import add_tls_options, default_namesrv, error_line, quiet_logging
from pyrmq.benchmark.report import render, summarize
from pyrmq.benchmark.runner import run_processes, run_single
from pyrmq.benchmark.workloads import MAX_BODY, WORKERS

# -- options ------------------------------------------------------------------------------


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text} must be >= 1")
    return v


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v >= 0:  # also NaN
        raise argparse.ArgumentTypeError(f"{text} must be >= 0")
    return v


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-n",
        "--namesrv",
        "--namesrv-addr",
        dest="namesrv_addr",
        metavar="ADDR",
        default=default_namesrv(),
        help="name servers, 'host:port[;host:port]' (default: $NAMESRV_ADDR or 127.0.0.1:9876)",
    )
    p.add_argument("-t", "--topic", default="BenchmarkTest", help="topic (BenchmarkTest)")
    p.add_argument(
        "-d",
        "--duration",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="run this long (default 10 without --count; 0: until Ctrl-C)",
    )
    p.add_argument("--count", type=_positive, default=None, help="stop after this many messages")
    p.add_argument(
        "--json",
        metavar="FILE",
        default=None,
        help="write the results as JSON to FILE ('-': stdout, the table then goes to stderr)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no live lines, only the summary")
    add_tls_options(p)


def _send_options(p: argparse.ArgumentParser, concurrency_help: str) -> None:
    p.add_argument("-s", "--body-size", type=_positive, default=128, help="body bytes (128)")
    p.add_argument("-c", "-w", "--concurrency", type=_positive, default=64, help=concurrency_help)
    p.add_argument(
        "--timeout", type=_seconds, default=3.0, help="deadline of each send, seconds (3)"
    )
    p.add_argument("--producer-group", default="benchmark_producer", help="(benchmark_producer)")


def add_arguments(sub: Any) -> None:
    """Register `bench` and its commands on the `pyrmq` subparsers."""
    raw = argparse.RawDescriptionHelpFormatter
    bench = sub.add_parser(
        "bench",
        help="load generators: produce, consume, e2e (RocketMQ's benchmark tools)",
        description=__doc__,
        formatter_class=raw,
    )
    bsub = bench.add_subparsers(dest="bench_cmd", required=True, metavar="COMMAND")

    pr = bsub.add_parser(
        "produce",
        help="send as fast as --concurrency allows; TPS and RT",
        description="Send messages as fast as the concurrency allows and report send TPS, "
        "RT (average, percentiles, max) and failures.",
    )
    _common(pr)
    _send_options(pr, "coroutines awaiting sends (sync, oneway) or sends in flight (async) (64)")
    pr.add_argument(
        "-b", "--batch-size", type=_positive, default=1, help="messages per request (1)"
    )
    pr.add_argument(
        "--mode",
        choices=("sync", "async", "oneway", "transaction"),
        default="sync",
        help="sync: each coroutine awaits its send; async: send_async, callbacks; "
        "oneway: no answer asked; transaction: send_message_in_transaction, every local "
        "transaction committing (RT: half message to END_TRANSACTION) (sync)",
    )
    pr.add_argument("--processes", type=_positive, default=1, help="producer processes (1)")
    pr.add_argument(
        "--trace",
        action="store_true",
        help="message trace on (enable_msg_trace): what tracing costs a producer",
    )
    pr.add_argument(
        "--no-auto-batch",
        dest="auto_batch",
        action="store_false",
        help="Producer(auto_batch=False): every single send its own request "
        "(the default coalesces concurrent ones into batches)",
    )

    co = bsub.add_parser(
        "consume",
        help="consume a topic; TPS, bytes/s, born-to-consume latency",
        description="Consume a topic and report consume TPS, bytes/s and born-to-consume "
        "latency. Without -g, a new group that starts at the end of each queue (or at "
        "the first message with --from-beginning).",
    )
    _common(co)
    co.add_argument("-g", "--group", default=None, help="consumer group (a new one)")
    co.add_argument("-e", "--subscription", default="*", help="tag expression ('*')")
    co.add_argument(
        "--sql",
        action="store_true",
        help="-e is a SQL92 expression (MessageSelector.by_sql; the broker needs "
        "enablePropertyFilter=true)",
    )
    co.add_argument("--from-beginning", action="store_true", help="start at the first message")
    co.add_argument(
        "--consumer",
        choices=("push", "pull"),
        default="push",
        help="PushConsumer, or a lite PullConsumer's poll() (push)",
    )
    co.add_argument(
        "-b",
        "--batch-size",
        type=_positive,
        default=32,
        help="messages per listener call (push) or per pull (32)",
    )
    co.add_argument("--processes", type=_positive, default=1, help="consumer processes (1)")

    ee = bsub.add_parser(
        "e2e",
        help="produce and consume at --rate; produce-to-consume latency percentiles",
        description="Send at --rate messages a second and consume them with a new group in "
        "the same process; report the produce-to-consume latency (p50 ... max), the rates "
        "achieved, and messages lost or duplicated.",
    )
    _common(ee)
    _send_options(ee, "sends in flight at most (64)")
    ee.add_argument(
        "--rate",
        type=_seconds,
        default=1000.0,
        help="messages a second (1000; 0: as fast as --concurrency allows)",
    )
    ee.set_defaults(processes=1, batch_size=1)


def _check(args: argparse.Namespace) -> None:
    """Option combinations argparse cannot check; ValueError for a bad one."""
    cmd = args.bench_cmd
    if cmd == "produce":
        if args.mode in ("oneway", "transaction") and args.batch_size > 1:
            raise ValueError(f"--mode {args.mode} sends single messages: leave --batch-size at 1")
        if args.batch_size * args.body_size > MAX_BODY:
            raise ValueError(
                f"--batch-size x --body-size is {args.batch_size * args.body_size} bytes; "
                f"a request carries at most {MAX_BODY}"
            )
    if cmd in ("produce", "e2e") and args.body_size > MAX_BODY:
        raise ValueError(f"--body-size must be <= {MAX_BODY}")
    if args.count is not None and args.processes > args.count:
        raise ValueError("--processes must not exceed --count")
    if args.duration is None:
        args.duration = 0.0 if args.count is not None else 10.0
    if cmd == "consume" and args.group is None:
        args.group = f"benchmark_consumer_{os.getpid()}"


# -- entry point ----------------------------------------------------------------------------


def main(args: argparse.Namespace) -> int:
    """Run `pyrmq bench <command>`; 0 when it ran, 1 (one `error:` line) when
    it could not, or when not one message got through."""
    with quiet_logging():
        try:
            _check(args)
            if args.processes > 1:
                out = run_processes(args)
            else:
                out = asyncio.run(run_single(args, WORKERS[args.bench_cmd]))
        except KeyboardInterrupt:
            print("error: interrupted", file=sys.stderr)
            return 130
        except Exception as e:
            print(error_line(e), file=sys.stderr)
            return 1
    res = summarize(args, out)
    table = render(res)
    if args.json == "-":
        print(table, file=sys.stderr)
        print(json.dumps(res, indent=1))
    else:
        print(table)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
    p = res.get("produce")
    if p is not None and p["failures"] and not p["messages"]:
        first = next(iter(p["errors"]), "")
        print(f"error: no message was sent: {first}", file=sys.stderr)
        return 1
    return 0
