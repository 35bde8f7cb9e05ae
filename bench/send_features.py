"""What a send feature costs: plain sends beside transactional ones (and,
as they land, traced and deduplicated ones), on one broker in one run.

One ``pyrmq standalone`` (ASYNC_FLUSH, a fresh store) and ``pyrmq bench
produce`` against it, one mode after the other, ``--rounds`` times (so a
noisy moment on a shared machine hurts both modes alike): ``--mode sync``
(each of 64 coroutines awaits its send) and ``--mode transaction``
(``send_message_in_transaction``, every local transaction committing: the
half message, its answer, then END_TRANSACTION oneway; RT runs from the
half message to END_TRANSACTION written). Per mode: the median over the
rounds of messages/s, and of the RT percentiles; the ratio to plain sends.
After the runs, every acknowledged message must be in the topic (the
commits arrive oneway: waited for, bounded), or the run fails.

    python -m bench.send_features --out DIR [--seconds 5] [--rounds 2]

Writes DIR/send_features.json and prints a Markdown table."""

from __future__ import annotations

import argparse
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

TOPIC = "BenchSendFeatures"
QUEUES = 8
MODES = ("sync", "transaction")
LABELS = {"sync": "plain send", "transaction": "transactional send (commit)"}


def produce(namesrv: str, mode: str, seconds: float, body: int) -> dict[str, Any]:
    """One `pyrmq bench produce` run; its JSON summary."""
    cmd = [sys.executable, "-m", "pyrmq", "bench", "produce", "-n", namesrv, "-t", TOPIC,
           "--mode", mode, "-d", str(seconds), "-s", str(body), "-q", "--json", "-"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
    if out.returncode != 0:
        raise RuntimeError(f"pyrmq bench produce --mode {mode} failed: {out.stderr[-2000:]}")
    return dict(json.loads(out.stdout))


def stored(srv: bl.Server) -> int:
    with bl.BlockingClient(srv.broker) as c:
        return sum(bl.max_offsets(c, TOPIC, QUEUES))


def run(out: pathlib.Path, seconds: float, rounds: int, body: int) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory() as d, bl.standalone(d) as srv:
        bl.create_topic(srv.broker, TOPIC, QUEUES)
        bl.wait_route(srv.namesrv, TOPIC)
        for _ in range(rounds):
            for mode in MODES:
                s = produce(srv.namesrv, mode, seconds, body)["produce"]
                runs[mode].append(s)
                print(f"{mode}: {s['msgs_per_s']:,.0f} msg/s, p99 {s['rt_ms']['p99']} ms",
                      file=sys.stderr)  # fmt: skip
        acked = sum(r["messages"] for rs in runs.values() for r in rs)
        deadline = time.monotonic() + 30
        while stored(srv) < acked and time.monotonic() < deadline:
            time.sleep(0.2)
        in_topic = stored(srv)
    if in_topic != acked:
        raise RuntimeError(f"{acked} sends acknowledged, {in_topic} messages in the topic")
    rows = {}
    for mode, rs in runs.items():
        rows[mode] = {
            "msgs_per_s": statistics.median(r["msgs_per_s"] for r in rs),
            **{
                f"rt_{k}_ms": statistics.median(r["rt_ms"][k] for r in rs)
                for k in ("avg", "p50", "p99")
            },
            "failures": sum(r["failures"] for r in rs),
            "rounds": [r["msgs_per_s"] for r in rs],
        }
    base = rows["sync"]["msgs_per_s"]
    for r in rows.values():
        r["vs_plain"] = r["msgs_per_s"] / base
    result = {"seconds": seconds, "rounds": rounds, "body": body, "acked": acked,
              "in_topic": in_topic, "modes": rows}  # fmt: skip
    (out / "send_features.json").write_text(json.dumps(result, indent=2))
    print(render(result))
    return result


def render(result: dict[str, Any]) -> str:
    lines = [
        f"Sends of {result['body']} B, 64 awaiting coroutines, {result['seconds']:.0f} s x "
        f"{result['rounds']} rounds per mode (medians); {result['acked']:,} acknowledged, "
        f"{result['in_topic']:,} in the topic",
        "",
        "| mode | msg/s | vs plain | RT p50 ms | RT p99 ms | failures |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for mode, r in result["modes"].items():
        lines.append(
            f"| {LABELS[mode]} | {r['msgs_per_s']:,.0f} | {r['vs_plain']:.2f} | "
            f"{r['rt_p50_ms']:.2f} | {r['rt_p99_ms']:.2f} | {r['failures']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=pathlib.Path, required=True)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--body", type=int, default=128)
    a = p.parse_args(argv)
    if a.seconds <= 0 or a.rounds <= 0 or a.body <= 0:
        print("error: --seconds, --rounds and --body must be positive", file=sys.stderr)
        return 2
    try:
        run(a.out, a.seconds, a.rounds, a.body)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
