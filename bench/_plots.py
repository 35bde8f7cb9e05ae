"""The bench suite's PNG plots (matplotlib, Agg backend), from the suite's
result document. Each function writes one file and returns its name, or
None when the document has nothing to plot for it.

    python -m bench._plots DIR/results.json     # (re)draw into DIR
"""

from __future__ import annotations

import json
import math
import pathlib
import sys
from typing import Any

from bench._report import SYSTEMS, consume_best, find, row_failure, systems

CPP_MODES = {
    "sync": "send_sync x4 threads",
    "async": "send_async",
    "batch": "send_batch",
    "oneway": "send_oneway",
}


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _sizes(doc: dict[str, Any]) -> list[int]:
    return list(doc.get("suite", {}).get("budget", {}).get("sizes", [128, 1024, 16384]))


def _label(size: int) -> str:
    return f"{size // 1024} KiB" if size >= 1024 else f"{size} B"


def _bars(
    ax: Any, groups: list[str], series: dict[str, list[float | None]], ylabel: str, log: bool = True
) -> None:
    """Grouped bars: one group per entry of `groups`, one bar per series."""
    n = max(1, len(series))
    width = 0.8 / n
    for i, (name, vals) in enumerate(series.items()):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        ys = [v if v is not None and not math.isnan(v) else 0.0 for v in vals]
        ax.bar(xs, ys, width, label=name)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    if log and any(v for vals in series.values() for v in vals if v):
        ax.set_yscale("log")
    ax.grid(axis="y", alpha=0.3)


def produce(doc: dict[str, Any], out: pathlib.Path) -> str | None:
    s = {k: v for k, v in systems(doc).items() if not v.get("skipped")}
    if not s:
        return None
    plt = _plt()
    sizes = _sizes(doc)
    cases = ["awaited", "pipelined", "batched"]
    fig, axes = plt.subplots(1, len(cases), figsize=(16, 5), sharey=True)
    for ax, case in zip(axes, cases, strict=True):
        series = {
            SYSTEMS.get(n, n): [_figure(find(d, case, z)) for z in sizes] for n, d in _ordered(s)
        }
        _bars(ax, [_label(z) for z in sizes], series, "msgs/s (log)" if case == "awaited" else "")
        ax.set_title(f"produce, {case}")
    axes[0].legend(fontsize=8)
    fig.suptitle("Produce throughput by system and body size (one Python client process)")
    return _save(fig, out, "produce_throughput.png")


def consume(doc: dict[str, Any], out: pathlib.Path) -> str | None:
    s = {k: v for k, v in systems(doc).items() if not v.get("skipped")}
    if not s:
        return None
    plt = _plt()
    sizes = _sizes(doc)
    series = {SYSTEMS.get(n, n): [consume_best(d, z)[0] for z in sizes] for n, d in _ordered(s)}
    cpp = _cpp(doc)
    if cpp:
        series["C++ PushConsumer (ASYNC_FLUSH)"] = [
            next(
                (
                    r["msgs_per_s"]
                    for r in cpp
                    if r["mode"] == "consume" and r["body_len"] == z and r["flush"] == "ASYNC_FLUSH"
                ),
                None,
            )
            for z in sizes
        ]
    fig, ax = plt.subplots(figsize=(11, 5))
    _bars(ax, [_label(z) for z in sizes], series, "msgs/s (log)")
    ax.set_title(
        "Consume throughput (preloaded, read back with acks/commits; pyrmq: best of push and poll)"
    )
    ax.legend(fontsize=8)
    return _save(fig, out, "consume_throughput.png")


def latency(doc: dict[str, Any], out: pathlib.Path) -> str | None:
    s = {k: v for k, v in systems(doc).items() if not v.get("skipped")}
    if not s:
        return None
    plt = _plt()
    sizes = _sizes(doc)
    rates = sorted({r["rate"] for d in s.values() for r in d.get("rows", []) if r["case"] == "e2e"})
    panels: list[tuple[str, str, float | None]] = [
        ("awaited", "one-at-a-time send round trip", None)
    ]
    panels += [("e2e", f"produce-to-consume at {r:,.0f} msgs/s", r) for r in rates]
    fig, axes = plt.subplots(
        len(sizes), len(panels), figsize=(6 * len(panels), 3.6 * len(sizes)), squeeze=False
    )
    names = [n for n, _ in _ordered(s)]
    for i, z in enumerate(sizes):
        for j, (case, title, rate) in enumerate(panels):
            ax = axes[i][j]
            series = {
                p.replace("999", "99.9"): [
                    (find(s[n], case, z, rate) or {}).get(f"{p}_ms") for n in names
                ]
                for p in ("p50", "p99", "p999")
            }
            _bars(ax, [SYSTEMS.get(n, n).replace(" ", "\n", 1) for n in names], series, "ms (log)")
            ax.tick_params(axis="x", labelsize=7)
            ax.set_title(f"{title}, {_label(z)}", fontsize=9)
            if i == 0 and j == 0:
                ax.legend(fontsize=8)
    fig.suptitle("Latency percentiles")
    return _save(fig, out, "latency.png")


def cpp(doc: dict[str, Any], out: pathlib.Path) -> str | None:
    rows = _cpp(doc)
    if not rows:
        return None
    plt = _plt()
    sizes = _sizes(doc)
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharey=True)
    for ax, flush in zip(axes, ("ASYNC_FLUSH", "SYNC_FLUSH"), strict=True):
        series = {
            label: [
                next(
                    (
                        r["server_msgs_per_s"]
                        for r in rows
                        if r["mode"] == mode and r["body_len"] == z and r["flush"] == flush
                    ),
                    None,
                )
                for z in sizes
            ]
            for mode, label in CPP_MODES.items()
        }
        _bars(ax, [_label(z) for z in sizes], series, "msgs/s (log)")
        ax.set_title(f"C++ client (rocketmq 0.4.4) → pyrmq, {flush}")
    axes[0].legend(fontsize=8)
    return _save(fig, out, "cpp_client.png")


def backlog(doc: dict[str, Any], out: pathlib.Path) -> str | None:
    res = doc.get("parts", {}).get("4", {}).get("result")
    steps = (res or {}).get("steps") or []
    if not steps:
        return None
    plt = _plt()
    xs = [st["messages"] / 1e6 for st in steps]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    ax = axes[0]
    for key, label in (
        ("produce_rate", "produce (pipelined SEND_MESSAGE)"),
        ("consume_head_rate", "consume newest (page cache)"),
        ("consume_old_rate", "consume oldest (from disk)"),
    ):
        ax.plot(xs, [st.get(key) or 0 for st in steps], marker="o", label=label)
    ax.set_xlabel("messages in the store (millions)")
    ax.set_ylabel("msgs/s")
    ax.set_title("Rates as the backlog grows")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax = axes[1]
    rec = res.get("recovery") or []
    for case in sorted({r["case"] for r in rec}):
        pts = [(r["messages"] / 1e6, r["ready_s"]) for r in rec if r["case"] == case]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=case)
    ax.set_xlabel("messages in the store (millions)")
    ax.set_ylabel("seconds to ready")
    ax.set_title("Restart time")
    ax.grid(alpha=0.3)
    if rec:
        ax.legend(fontsize=8)
    return _save(fig, out, "backlog.png")


def scale(doc: dict[str, Any], out: pathlib.Path) -> str | None:
    res = doc.get("parts", {}).get("5", {}).get("result") or {}
    by_b, by_c = res.get("brokers") or [], res.get("connections") or []
    if not by_b and not by_c:
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    if by_b:
        ax = axes[0]
        ax.bar([str(r["brokers"]) for r in by_b], [r["produce_rate"] for r in by_b])
        ax.set_xlabel("broker processes")
        ax.set_ylabel("msgs/s")
        ax.set_title("Produce throughput, brokers behind one name server")
        ax.grid(axis="y", alpha=0.3)
    if by_c:
        ax = axes[1]
        xs = [r["connections"] for r in by_c]
        ax.plot(xs, [r["produce_rate"] for r in by_c], marker="o", color="C0")
        ax.set_xscale("log")
        ax.set_xlabel("connections to one broker")
        ax.set_ylabel("msgs/s", color="C0")
        ax2 = ax.twinx()
        ax2.plot(xs, [r.get("p99_ms") or 0 for r in by_c], marker="s", color="C3")
        ax2.set_ylabel("p99 round trip, ms", color="C3")
        ax.set_title("Many connections")
        ax.grid(alpha=0.3)
    return _save(fig, out, "scale.png")


def _ordered(s: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    known = [(n, s[n]) for n in SYSTEMS if n in s]
    return known + [(n, d) for n, d in s.items() if n not in SYSTEMS]


def _figure(r: dict[str, Any] | None) -> float | None:
    """A row's msgs/s; None for a row that is not a figure (row_failure)."""
    return None if r is None or row_failure(r) else r.get("msgs_per_s")


def _cpp(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The C++ client matrix rows whose runner did not fail."""
    rep = doc.get("parts", {}).get("2", {}).get("broker_report") or {}
    return [r for r in rep.get("cpp_matrix") or [] if not r.get("row_failed")]


def _save(fig: Any, out: pathlib.Path, name: str) -> str:
    fig.tight_layout()
    fig.savefig(out / name, dpi=100)
    _plt().close(fig)
    return name


ALL = (produce, consume, latency, cpp, backlog, scale)


def draw_all(doc: dict[str, Any], out: pathlib.Path) -> list[str]:
    """Every plot the document has data for; returns the file names."""
    names = []
    for fn in ALL:
        name = fn(doc, out)
        if name:
            names.append(name)
    return names


if __name__ == "__main__":
    path = pathlib.Path(sys.argv[1])
    print("\n".join(draw_all(json.loads(path.read_text()), path.parent)))
