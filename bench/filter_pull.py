"""What a consumer's filter costs: the same backlog consumed with no filter,
a tag filter, and SQL92 filters that select 10% and 90% of it, in one run.

One ``pyrmq standalone`` (ASYNC_FLUSH, ``enablePropertyFilter=true``); a
backlog of ``--messages`` messages of ``--body`` bytes, each with a
property ``p`` (0..99, evenly) and the tag TagA when p < 10, else TagB.
Then, ``--rounds`` times (every other round in reverse order), ``pyrmq
bench consume --from-beginning`` in a new group for each case until it has
the messages its filter selects:

- ``none``: ``*`` (every message);
- ``tag 10%``: ``TagA`` (the broker filters by tag code);
- ``sql 10%``: ``p < 10`` (the broker evaluates every message's properties);
- ``sql 90%``: ``p >= 10``.

Per case, medians over the rounds: messages delivered per second, backlog
scanned per second (the whole backlog over the time to consume it) and the
broker's CPU per scanned message, with ratios to the unfiltered case.

    python -m bench.filter_pull --out DIR [--messages 200000] [--rounds 2]

Writes DIR/filter_pull.json and prints a Markdown table."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench import broker_load as bl
from bench._runs import paired_ratio

TOPIC = "BenchFilter"
QUEUES = 8
#: case -> (expression, SQL92?, the share of the backlog it selects)
CASES: dict[str, tuple[str, bool, float]] = {
    "none": ("*", False, 1.0),
    "tag 10%": ("TagA", False, 0.1),
    "sql 10%": ("p < 10", True, 0.1),
    "sql 90%": ("p >= 10", True, 0.9),
}


async def _fill(namesrv: str, messages: int, body: int) -> None:
    from pyrmq import Message, Producer

    payload = b"x" * body
    async with Producer("bench-filter-fill", namesrv) as p:
        for start in range(0, messages, 100):
            batch = []
            for i in range(start, min(start + 100, messages)):
                m = Message(TOPIC, payload, tags="TagA" if i % 100 < 10 else "TagB")
                m.properties["p"] = str(i % 100)
                batch.append(m)
            await p.send_batch(batch)


def consume(namesrv: str, case: str, count: int, n: int) -> dict[str, Any]:
    expr, sql, _ = CASES[case]
    cmd = [sys.executable, "-m", "pyrmq", "bench", "consume", "-n", namesrv, "-t", TOPIC,
           "-e", expr, "--from-beginning", "--count", str(count), "-d", "600",
           "-g", f"bench-filter-{case.replace(' ', '').replace('%', '')}-{n}",
           "-q", "--json", "-", *(["--sql"] if sql else [])]  # fmt: skip
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=720)
    seconds = time.monotonic() - t0
    if out.returncode != 0:
        raise RuntimeError(f"pyrmq bench consume ({case}) failed: {out.stderr[-2000:]}")
    s = json.loads(out.stdout)["consume"]
    s["wall_s"] = seconds
    return dict(s)


def run(out: pathlib.Path, messages: int, rounds: int, body: int) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in CASES}
    cases = list(CASES)
    with bl.standalone(tempfile.gettempdir(), conf={"enablePropertyFilter": "true"}) as srv:
        bl.create_topic(srv.broker, TOPIC, QUEUES)
        bl.wait_route(srv.namesrv, TOPIC)
        asyncio.run(_fill(srv.namesrv, messages, body))
        # every message in its ConsumeQueue before the first case starts
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with bl.BlockingClient(srv.broker) as c:
                if sum(bl.max_offsets(c, TOPIC, QUEUES)) >= messages:
                    break
            time.sleep(0.2)
        else:
            raise RuntimeError("the backlog never reached the ConsumeQueues")
        for n in range(rounds):
            for case in cases if n % 2 == 0 else cases[::-1]:
                want = round(messages * CASES[case][2])
                b0 = srv.cpu_s()
                s = consume(srv.namesrv, case, want, n)
                s["broker_cpu_s"] = srv.cpu_s() - b0
                if s["messages"] != want:
                    raise RuntimeError(f"{case}: consumed {s['messages']} of {want}")
                runs[case].append(s)
                print(f"{case}: {s['messages']:,} in {s['seconds']:.2f} s", file=sys.stderr)
    rows: dict[str, dict[str, Any]] = {}
    for case, rs in runs.items():
        rows[case] = {
            "delivered_per_s": statistics.median(r["messages"] / r["seconds"] for r in rs),
            "scanned_per_s": statistics.median(messages / r["seconds"] for r in rs),
            "broker_cpu_us_per_scanned": statistics.median(
                r["broker_cpu_s"] / messages * 1e6 for r in rs
            ),
            "rounds_s": [r["seconds"] for r in rs],
        }
    base = runs["none"]
    for case, r in rows.items():
        # a scan over the backlog: speed is the inverse of the time taken
        r["scan_vs_none"] = paired_ratio(runs[case], base, lambda x: 1 / x["seconds"])
    result = {"messages": messages, "rounds": rounds, "body": body, "cases": rows}
    (out / "filter_pull.json").write_text(json.dumps(result, indent=2))
    print(render(result))
    return result


def render(result: dict[str, Any]) -> str:
    lines = [
        f"A backlog of {result['messages']:,} messages of {result['body']} B consumed from the "
        f"start by a push consumer, {result['rounds']} rounds per case (medians; every other "
        "round in reverse order)",
        "",
        "| filter | delivered msg/s | backlog scanned msg/s | scan speed vs none "
        "| broker CPU µs per scanned msg |",
        "|---|---:|---:|---:|---:|",
    ]
    for case, r in result["cases"].items():
        lines.append(
            f"| {case} ({CASES[case][0]}) | {r['delivered_per_s']:,.0f} | "
            f"{r['scanned_per_s']:,.0f} | {r['scan_vs_none']:.2f} | "
            f"{r['broker_cpu_us_per_scanned']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=pathlib.Path, required=True)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--body", type=int, default=128)
    a = p.parse_args(argv)
    if a.messages < 100 or a.rounds <= 0 or a.body <= 0:
        print("error: --messages >= 100, --rounds and --body positive", file=sys.stderr)
        return 2
    try:
        run(a.out, a.messages, a.rounds, a.body)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
