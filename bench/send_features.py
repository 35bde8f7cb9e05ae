"""What a send feature costs: plain sends beside transactional ones, beside
sends to a broker with duplicateDetection and to one with metrics on, in
one run.

Two ``pyrmq standalone`` (ASYNC_FLUSH, fresh stores): "plain" with the
defaults, "dedup" with ``duplicateDetection=true``; ``pyrmq bench
produce`` against them, one case after the other, ``--rounds`` times (so a
noisy moment on a shared machine hurts every case alike):

- ``sync``: 64 coroutines each awaiting its send;
- ``transaction``: ``send_message_in_transaction``, every local transaction
  committing (the half message, its answer, END_TRANSACTION oneway; RT
  runs from the half message to END_TRANSACTION written);
- ``async``: pipelined, ``send_async`` with 64 sends in flight;
- ``sync`` and ``async`` with message trace on (``--trace``: a Pub record
  per send, written by the producer's trace dispatcher to
  RMQ_SYS_TRACE_TOPIC, auto-created; its messages are not counted);
- the same ``sync`` and ``async`` against the dedup broker;
- the same against a broker with ``metricsExporterType=PROM``, its endpoint
  scraped every second meanwhile (Prometheus' default is every 15 s).

Per case: the median over the rounds of messages/s and of the RT
percentiles; the ratio to its plain twin, taken round by round (every
other round runs the cases in reverse order) and then the median, so the
machine's own load swings cancel; and the CPU each acknowledged message
cost the producer process and the broker, which other load on the machine
does not change much. After the runs every
acknowledged message must be in its topic, on its broker (commits arrive
oneway: waited for, bounded): a duplicate check that suppressed a distinct
message fails the run.

    python -m bench.send_features --out DIR [--seconds 5] [--rounds 2] [--cases a,b]

Writes DIR/send_features.json and prints a Markdown table."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Any

from bench import broker_load as bl
from bench._runs import paired_ratio, pyrmq_json

TOPIC = "BenchSendFeatures"
QUEUES = 8
#: case -> (broker, pyrmq bench produce --mode, the case it is compared with, more options)
CASES: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    "sync": ("plain", "sync", "sync", ()),
    "transaction": ("plain", "transaction", "sync", ()),
    "traced_sync": ("plain", "sync", "sync", ("--trace",)),
    "async": ("plain", "async", "async", ()),
    "traced_async": ("plain", "async", "async", ("--trace",)),
    "dedup_sync": ("dedup", "sync", "sync", ()),
    "dedup_async": ("dedup", "async", "async", ()),
    "metrics_sync": ("metrics", "sync", "sync", ()),
    "metrics_async": ("metrics", "async", "async", ()),
}
LABELS = {
    "sync": "plain send, awaited",
    "transaction": "transactional send (commit), awaited",
    "traced_sync": "message trace on, awaited",
    "traced_async": "message trace on, pipelined",
    "async": "plain send, pipelined",
    "dedup_sync": "duplicateDetection, awaited",
    "dedup_async": "duplicateDetection, pipelined",
    "metrics_sync": "metrics on (scraped 1/s), awaited",
    "metrics_async": "metrics on (scraped 1/s), pipelined",
}
BROKERS: dict[str, dict[str, object]] = {
    "plain": {},
    "dedup": {"duplicateDetection": "true"},
    "metrics": {"metricsExporterType": "PROM", "metricsPromExporterHost": "127.0.0.1"},
}
#: seconds between two scrapes of the metrics broker during the run
SCRAPE_INTERVAL = 1.0


class Scraper:
    """GET /metrics every SCRAPE_INTERVAL s on a thread of this process
    (the broker pays for the scrapes, as it would in production)."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.scrapes = 0
        self.bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-scraper", daemon=True)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(SCRAPE_INTERVAL):
            with urllib.request.urlopen(self.url, timeout=10) as r:
                self.bytes = len(r.read())
            self.scrapes += 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def produce(
    namesrv: str, mode: str, seconds: float, body: int, extra: tuple[str, ...] = ()
) -> dict[str, Any]:
    """One `pyrmq bench produce` run: its JSON summary, plus the CPU seconds
    the producer process used (``produce.client_cpu_s``)."""
    summary = pyrmq_json("bench", "produce", "-n", namesrv, "-t", TOPIC, "--mode", mode,
                         "-d", str(seconds), "-s", str(body), *extra,
                         timeout=seconds + 120)  # fmt: skip
    summary["produce"]["client_cpu_s"] = summary["client_cpu_s"]
    return summary


def stored(srv: bl.Server) -> int:
    with bl.BlockingClient(srv.broker) as c:
        return sum(bl.max_offsets(c, TOPIC, QUEUES))


def run(
    out: pathlib.Path, seconds: float, rounds: int, body: int, cases: list[str] | None = None
) -> dict[str, Any]:
    """The cases (all by default; each with its plain twin) `rounds` times."""
    chosen = [c for c in CASES if cases is None or c in cases or any(
        CASES[x][2] == c for x in cases)]  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in chosen}
    with tempfile.TemporaryDirectory() as d, contextlib.ExitStack() as stack:
        srvs = {}
        scraper = None
        for name, conf in BROKERS.items():
            if not any(CASES[c][0] == name for c in chosen):
                continue
            if name == "metrics":
                port = free_port()
                conf = {**conf, "metricsPromExporterPort": port}
            srvs[name] = stack.enter_context(bl.standalone(d, conf=conf))
            if name == "metrics":
                scraper = stack.enter_context(Scraper(port))
            bl.create_topic(srvs[name].broker, TOPIC, QUEUES)
            bl.wait_route(srvs[name].namesrv, TOPIC)
        for n in range(rounds):
            # every other round in reverse order: a case and its twin swap
            # places, so a machine that slows down or speeds up during the
            # run does not favour one of them
            for case in chosen if n % 2 == 0 else chosen[::-1]:
                broker, mode, _, extra = CASES[case]
                srv = srvs[broker]
                b0 = srv.cpu_s()
                s = produce(srv.namesrv, mode, seconds, body, extra)["produce"]
                s["broker_cpu_s"] = srv.cpu_s() - b0
                runs[case].append(s)
                print(f"{case}: {s['msgs_per_s']:,.0f} msg/s, p99 {s['rt_ms']['p99']} ms",
                      file=sys.stderr)  # fmt: skip
        acked = {b: sum(r["messages"] for c, rs in runs.items() if CASES[c][0] == b for r in rs)
                 for b in srvs}  # fmt: skip
        deadline = time.monotonic() + 30
        while any(stored(srvs[b]) < acked[b] for b in srvs) and time.monotonic() < deadline:
            time.sleep(0.2)
        in_topic = {b: stored(srvs[b]) for b in srvs}
        scrapes = (scraper.scrapes, scraper.bytes) if scraper is not None else (0, 0)
    if scraper is not None and scrapes[0] == 0:
        raise RuntimeError("the metrics broker was never scraped")
    if in_topic != acked:
        raise RuntimeError(f"acknowledged {acked}, in the topics {in_topic}")
    rows = {}
    for case, rs in runs.items():
        n = sum(r["messages"] for r in rs) or 1
        rows[case] = {
            "msgs_per_s": statistics.median(r["msgs_per_s"] for r in rs),
            **{
                f"rt_{k}_ms": statistics.median(r["rt_ms"][k] for r in rs)
                for k in ("avg", "p50", "p99")
            },
            "failures": sum(r["failures"] for r in rs),
            "rounds": [r["msgs_per_s"] for r in rs],
            # CPU per acknowledged message, the producer process (start-up
            # included) and the broker: what a feature costs whatever the
            # machine's other load does to the rates
            "client_cpu_us": sum(r["client_cpu_s"] for r in rs) / n * 1e6,
            "broker_cpu_us": sum(r["broker_cpu_s"] for r in rs) / n * 1e6,
        }
    for case, r in rows.items():
        twin = runs[CASES[case][2]]
        # the ratio of each round to its twin's in the same round, then the
        # median: rounds that the machine's load slowed alike cancel out
        r["vs_plain"] = paired_ratio(runs[case], twin, lambda x: x["msgs_per_s"])
    result = {"seconds": seconds, "rounds": rounds, "body": body,
              "acked": sum(acked.values()), "in_topic": sum(in_topic.values()),
              "scrapes": scrapes[0], "scrape_bytes": scrapes[1],
              "cases": rows}  # fmt: skip
    (out / "send_features.json").write_text(json.dumps(result, indent=2))
    print(render(result))
    return result


def render(result: dict[str, Any]) -> str:
    lines = [
        f"Sends of {result['body']} B, 64 coroutines or sends in flight, "
        f"{result['seconds']:g} s x {result['rounds']} rounds per case, every other round "
        "in reverse order (medians; vs plain twin: the median of the rounds' ratios); "
        f"{result['acked']:,} acknowledged, "
        f"{result['in_topic']:,} in the topic"
        + (
            f"; metrics scraped {result['scrapes']} times ({result['scrape_bytes']:,} B)"
            if result.get("scrapes")
            else ""
        ),
        "",
        "| case | msg/s | vs plain twin | RT p50 ms | RT p99 ms | client CPU µs/msg "
        "| broker CPU µs/msg | failures |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case, r in result["cases"].items():
        lines.append(
            f"| {LABELS[case]} | {r['msgs_per_s']:,.0f} | {r['vs_plain']:.2f} | "
            f"{r['rt_p50_ms']:.2f} | {r['rt_p99_ms']:.2f} | {r['client_cpu_us']:.1f} | "
            f"{r['broker_cpu_us']:.1f} | {r['failures']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=pathlib.Path, required=True)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--body", type=int, default=128)
    p.add_argument(
        "--cases", help=f"comma-separated, of {', '.join(CASES)} (each runs with its plain twin)"
    )
    a = p.parse_args(argv)
    if a.seconds <= 0 or a.rounds <= 0 or a.body <= 0:
        print("error: --seconds, --rounds and --body must be positive", file=sys.stderr)
        return 2
    cases = a.cases.split(",") if a.cases else None
    if cases is not None and not set(cases) <= set(CASES):
        unknown = ", ".join(sorted(set(cases) - set(CASES)))
        print(f"error: unknown case(s) {unknown}: choose from {', '.join(CASES)}", file=sys.stderr)
        return 2
    try:
        run(a.out, a.seconds, a.rounds, a.body, cases)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
