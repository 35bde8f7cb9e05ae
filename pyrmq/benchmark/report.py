"""What `pyrmq bench` prints: the live line each second (and a progress
bar on a terminal), and at the end the summary as a table or JSON."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, TextIO

from pyrmq.benchmark.stats import Meter, Tally
from pyrmq.benchmark.workloads import E2E_HEADER

_BAR_WIDTH = 30


class Live:
    """The live lines, and the progress bar of a --count run on a terminal."""

    def __init__(self, args: argparse.Namespace, out: TextIO = sys.stderr) -> None:
        self.cmd = args.bench_cmd
        self.quiet = args.quiet
        self.total = args.count
        self.out = out
        self.tty = out.isatty() and self.total is not None and not self.quiet
        self.t0 = time.perf_counter()
        self.done = 0
        self._bar_shown = False

    def _progress(self) -> str:
        assert self.total is not None
        return f"{self.done:,}/{self.total:,} ({min(100, 100 * self.done // self.total)}%)"

    def line(self, k: int, dt: float, iv: dict[str, Tally]) -> None:
        if self.quiet:
            return
        text = f"[{k:>4}s] {interval_text(self.cmd, dt, iv)}"
        if self.total is not None and not self.tty:
            text += f" | {self._progress()}"
        if self._bar_shown:
            self.out.write("\r\x1b[K")
        self.out.write(text + "\n")
        self._bar_shown = False
        self.bar()

    def bar(self) -> None:
        if not self.tty:
            return
        assert self.total is not None
        frac = min(1.0, self.done / self.total)
        full = int(frac * _BAR_WIDTH)
        elapsed = time.perf_counter() - self.t0
        eta = f"ETA {elapsed / frac - elapsed:4.0f}s" if 0 < frac < 1 else ""
        bar = "#" * full + "-" * (_BAR_WIDTH - full)
        self.out.write(f"\r[{bar}] {self._progress()} {eta}\x1b[K")
        self.out.flush()
        self._bar_shown = True

    def close(self) -> None:
        if self._bar_shown:
            self.bar()
            self.out.write("\n")
            self._bar_shown = False
        self.out.flush()


def interval_text(cmd: str, dt: float, iv: dict[str, Tally]) -> str:
    dt = dt or 1.0
    parts = []
    s = iv.get("send")
    if s is not None:
        parts += [
            f"Send TPS: {s.msgs / dt:,.0f}",
            f"Avg RT(ms): {s.lat.avg / 1000:.3f}",
            f"Max RT(ms): {s.lat.max / 1000:.3f}",
            f"Failed: {s.failures:,}",
        ]
    c = iv.get("consume")
    if c is not None:
        parts.append(f"Consume TPS: {c.msgs / dt:,.0f}")
        if cmd == "e2e":
            p50, p99 = c.lat.percentile(0.5) / 1000, c.lat.percentile(0.99) / 1000
            parts.append(f"E2E p50/p99/max(ms): {p50:.2f}/{p99:.2f}/{c.lat.max / 1000:.2f}")
        else:
            parts += [
                f"MB/s: {c.bytes / dt / 1e6:.2f}",
                f"Avg B2C(ms): {c.lat.avg / 1000:.1f}",
                f"Max B2C(ms): {c.lat.max / 1000:.0f}",
            ]
    return " | ".join(parts)


def progress_of(cmd: str, meters: dict[str, Meter]) -> int:
    if cmd == "consume":
        m = meters.get("consume")
        return m.total.msgs if m else 0
    m = meters.get("send")
    return m.total.msgs + m.total.failures if m else 0


class Outcome:
    """A finished run: merged meters, when sending started and the worker
    ended (perf_counter seconds), the per-second timeline, and the worker's
    extra figures."""

    def __init__(self) -> None:
        self.meters: dict[str, Meter] = {}
        self.start = 0.0
        self.end = 0.0
        self.timeline: list[dict[str, Any]] = []
        self.extra: dict[str, Any] = {}
        self.interrupted = False


def timeline_row(k: int, dt: float, iv: dict[str, Tally]) -> dict[str, Any]:
    row: dict[str, Any] = {"second": k}
    for name, t in iv.items():
        row[name] = {
            "msgs_per_s": round(t.msgs / (dt or 1.0), 1),
            "failures": t.failures,
            "lat_avg_ms": round(t.lat.avg / 1000, 3),
            "lat_max_ms": round(t.lat.max / 1000, 3),
        }
    return row


# -- the summary ----------------------------------------------------------------------------


def _rate(n: float, seconds: float) -> float:
    return round(n / seconds, 1) if seconds > 0 else 0.0


def summarize(args: argparse.Namespace, out: Outcome) -> dict[str, Any]:
    """The run's figures, as --json prints them."""
    cmd = args.bench_cmd
    config = {
        k: v
        for k, v in vars(args).items()
        if k not in ("bench_run", "cmd", "bench_cmd", "json", "quiet")
    }
    res: dict[str, Any] = {"command": cmd, "config": config, "interrupted": out.interrupted}
    s, c = out.meters.get("send"), out.meters.get("consume")
    if s is not None:
        send_end = out.extra.get("send_end", out.end)
        secs = max(0.0, send_end - out.start)
        res["produce"] = {
            "messages": s.total.msgs,
            "failures": s.total.failures,
            "requests": s.total.lat.n,
            "seconds": round(secs, 3),
            "msgs_per_s": _rate(s.total.msgs, secs),
            "bytes": s.total.bytes,
            "bytes_per_s": _rate(s.total.bytes, secs),
            "rt_ms": s.total.lat.summary_ms(),
            "errors": dict(s.errors.most_common()),
        }
    if c is not None:
        res["consume"] = {
            "messages": c.total.msgs,
            "seconds": round(c.seconds, 3),
            "msgs_per_s": _rate(c.total.msgs, c.seconds),
            "bytes": c.total.bytes,
            "bytes_per_s": _rate(c.total.bytes, c.seconds),
            ("latency_ms" if cmd == "e2e" else "born_to_consume_ms"): c.total.lat.summary_ms(),
        }
        if cmd == "consume":
            res["consume"]["group"] = args.group
    if cmd == "e2e" and s is not None and c is not None:
        x = out.extra
        res["e2e"] = {
            "sent": x["sent"],
            "acknowledged": s.total.msgs,
            "failures": s.total.failures,
            "consumed": x["unique"],
            "lost": max(0, s.total.msgs - x["unique"]),
            "duplicates": x["duplicates"],
            "other_messages": x["foreign"],
            "rate_target": x["rate_target"],
            "rate_achieved": res["produce"]["msgs_per_s"],
            "latency_ms": c.total.lat.summary_ms(),
            "group": x["group"],
        }
    res["timeline"] = out.timeline
    return res


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    """Columns right-aligned, but a first column of names left-aligned."""

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:,.3f}" if v < 100 else f"{v:,.0f}"
        return f"{v:,}" if isinstance(v, int) else str(v)

    names = bool(rows) and isinstance(rows[0][0], str)
    cells = [headers] + [[cell(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(
            c.ljust(w) if i == 0 and names else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in cells
    )


_LAT_HEADS = ["avg", "p50", "p90", "p99", "p99.9", "max"]


def _lat_row(name: str, ms: dict[str, float]) -> list[Any]:
    return [name, *(ms[k] for k in _LAT_HEADS)]


def render(res: dict[str, Any]) -> str:
    """The summary table of a run."""
    cfg = res["config"]
    cmd = res["command"]
    parts = []
    p, c = res.get("produce"), res.get("consume")
    if cmd == "produce":
        parts.append(
            f"produce {cfg['topic']}: {cfg['body_size']} B bodies, --mode {cfg['mode']}, "
            f"concurrency {cfg['concurrency']}, batch {cfg['batch_size']}, "
            f"{cfg['processes']} process(es)"
        )
    elif cmd == "consume":
        parts.append(
            f"consume {cfg['topic']}: group {cfg['group']}, {cfg['consumer']} consumer, "
            f"{cfg['processes']} process(es)"
        )
    else:
        rate = f"{cfg['rate']:,.0f} msgs/s" if cfg["rate"] else "unpaced"
        parts.append(
            f"e2e {cfg['topic']}: {max(cfg['body_size'], E2E_HEADER.size)} B bodies, "
            f"target {rate}, at most {cfg['concurrency']} in flight"
        )
    if res["interrupted"]:
        parts[0] += " (interrupted)"
    if p is not None:
        parts.append(
            _table(
                ["sent", "failures", "seconds", "msgs/s", "MB/s"],
                [
                    [
                        p["messages"],
                        p["failures"],
                        p["seconds"],
                        p["msgs_per_s"],
                        p["bytes_per_s"] / 1e6,
                    ]
                ],
            )
        )
    if c is not None:
        parts.append(
            _table(
                ["consumed", "seconds", "msgs/s", "bytes/s"],
                [[c["messages"], c["seconds"], c["msgs_per_s"], c["bytes_per_s"]]],
            )
        )
    lat_rows = []
    if p is not None:
        lat_rows.append(_lat_row("send RT", p["rt_ms"]))
    if cmd == "e2e":
        e = res["e2e"]
        lat_rows.append(_lat_row("produce-to-consume", e["latency_ms"]))
    elif c is not None:
        lat_rows.append(_lat_row("born-to-consume", c["born_to_consume_ms"]))
    parts.append(_table(["latency (ms)", *_LAT_HEADS], lat_rows))
    if cmd == "e2e":
        e = res["e2e"]
        parts.append(
            f"lost {e['lost']:,}, duplicates {e['duplicates']:,}, "
            f"rate achieved {e['rate_achieved']:,.1f} msgs/s"
        )
    if p is not None and p["errors"]:
        parts.append("failures: " + "; ".join(f"{n:,} x {text}" for text, n in p["errors"].items()))
    return "\n\n".join(parts)
