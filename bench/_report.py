"""The bench suite's Markdown: tables for each part, pyrmq/peer ratios and
the issue's targets, computed from the suite's result document (see
bench.suite for its shape). Pure functions of that document, so a
results.json can be re-rendered without re-running anything:

    python -m bench._report DIR/results.json > DIR/results.md
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterable
from typing import Any

#: display names, in table and plot order
SYSTEMS = {
    "pyrmq": "pyrmq ASYNC_FLUSH",
    "nats": "NATS JetStream",
    "redis-everysec": "Redis AOF everysec",
    "rabbitmq": "RabbitMQ streams",
    "pyrmq-sync": "pyrmq SYNC_FLUSH",
    "redis-always": "Redis AOF always",
}
#: which pyrmq run each peer is compared with (comparable durability)
TWIN = {
    "nats": "pyrmq",
    "redis-everysec": "pyrmq",
    "rabbitmq": "pyrmq",
    "redis-always": "pyrmq-sync",
}
RATIO_HEAD = {
    "nats": "pyrmq ÷ NATS",
    "redis-everysec": "pyrmq ÷ Redis everysec",
    "rabbitmq": "pyrmq ÷ RabbitMQ",
    "redis-always": "pyrmq SYNC ÷ Redis always",
}
CONSUME_CASES = ("consume", "consume(push)", "consume(poll)")
#: a row whose server stored less than this share of what the client sent is
#: a harness or product failure, never a figure (a broker does not lose most
#: of a run's messages; the reference run once published "0 msgs/s, 524,287
#: of 524,288 not stored" for a harness that never handed its frames over)
STORED_AT_LEAST = 0.5


def row_failure(r: dict[str, Any]) -> str | None:
    """Why row r is not a figure, or None: its runner failed (``row_failed``,
    e.g. a peer client that crashed twice), or it says that most of what was
    sent was not stored."""
    if r.get("row_failed"):
        return str(r["row_failed"])
    sent, lost = r.get("sent") or 0, r.get("lost") or 0
    if sent and lost > (1 - STORED_AT_LEAST) * sent:
        return f"{lost:,} of {sent:,} not stored: a harness or broker failure, not a figure"
    return None


def failed_rows(doc: dict[str, Any]) -> list[str]:
    """One line per row of the document that is not a figure (row_failure),
    in parts 2 and 3 and in part 2's broker report."""
    out = []
    for name, d in systems(doc).items():
        for r in d.get("rows", []):
            why = row_failure(r)
            if why:
                out.append(f"{name} {r['case']} {r['body']} B: {why}")
    rep = (doc.get("parts", {}).get("2") or {}).get("broker_report") or {}
    out += [f"broker_report: {f}" for f in rep.get("failed_rows", [])]
    return out


def systems(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every system run by parts 2 and 3, by name (skipped ones included)."""
    out: dict[str, dict[str, Any]] = {}
    for part in ("2", "3"):
        out.update(doc.get("parts", {}).get(part, {}).get("systems", {}))
    return out


def find(
    sysdoc: dict[str, Any] | None, case: str, size: int, rate: float | None = None
) -> dict[str, Any] | None:
    """The row of `case` for `size`-byte bodies (and e2e `rate`), or None."""
    if not sysdoc:
        return None
    for r in sysdoc.get("rows", []):
        if r["case"] == case and r["body"] == size and (rate is None or r.get("rate") == rate):
            return r
    return None


def produce_best(sysdoc: dict[str, Any] | None, size: int) -> tuple[float | None, str]:
    """The better of the pipelined and batched rates, and which it was."""
    best: tuple[float | None, str] = (None, "")
    for case in ("pipelined", "batched"):
        r = find(sysdoc, case, size)
        if r and _figure(r) and (best[0] is None or r["msgs_per_s"] > best[0]):
            best = (r["msgs_per_s"], case)
    return best


def _figure(r: dict[str, Any]) -> bool:
    return bool(r.get("msgs_per_s")) and row_failure(r) is None


def consume_best(sysdoc: dict[str, Any] | None, size: int) -> tuple[float | None, str]:
    best: tuple[float | None, str] = (None, "")
    for case in CONSUME_CASES:
        r = find(sysdoc, case, size)
        if r and _figure(r) and (best[0] is None or r["msgs_per_s"] > best[0]):
            best = (r["msgs_per_s"], case)
    return best


def _n(x: float | None, digits: int = 0) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.{digits}f}"


#: a comparison cell whose row is not a figure (row_failure)
FAILED: Any = object()


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not b or math.isnan(a) or math.isnan(b):
        return None
    return a / b


def _r(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def table(head: list[str], rows: Iterable[list[str]], align: str = "") -> str:
    """A Markdown table; `align` is one character per column ('l' or 'r')."""
    spec = [("---:" if (align[i : i + 1] or "r") == "r" else "---") for i in range(len(head))]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(spec) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


# -- targets --------------------------------------------------------------------------


def targets(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets (128 B bodies, one client process per system)."""
    s = systems(doc)
    size = 128
    out: list[dict[str, Any]] = []

    def add(
        what: str,
        mine: tuple[float | None, str],
        peer_name: str,
        theirs: tuple[float | None, str],
        goal: float,
        lower_is_better: bool = False,
    ) -> None:
        peer = s.get(peer_name, {})
        ratio = _ratio(theirs[0], mine[0]) if lower_is_better else _ratio(mine[0], theirs[0])
        row = {
            "target": what,
            "pyrmq": mine[0],
            "pyrmq_case": mine[1],
            "peer": peer_name,
            "peer_value": theirs[0],
            "peer_case": theirs[1],
            "ratio": ratio,
            "goal": goal,
            "met": None if ratio is None else ratio >= goal,
        }
        if peer.get("skipped"):
            row["note"] = f"{peer_name} skipped: {peer['skipped']}"
        out.append(row)

    py, sync = s.get("pyrmq"), s.get("pyrmq-sync")

    def case(sysname: str, c: str) -> tuple[float | None, str]:
        r = find(s.get(sysname), c, size)
        return (r["msgs_per_s"] if r and row_failure(r) is None else None, c)

    add(
        "pipelined/batched produce ≥ 2x NATS JetStream async publish",
        produce_best(py, size),
        "nats",
        case("nats", "pipelined"),
        2.0,
    )
    add(
        "pipelined/batched produce ≥ 1x Redis XADD pipelined (AOF everysec)",
        produce_best(py, size),
        "redis-everysec",
        case("redis-everysec", "pipelined"),
        1.0,
    )
    add(
        "pipelined/batched produce ≥ 1x RabbitMQ streams batched publish with confirms",
        produce_best(py, size),
        "rabbitmq",
        case("rabbitmq", "batched"),
        1.0,
    )
    add(
        "SYNC_FLUSH produce ≥ 3x Redis with AOF always (pipelined)",
        produce_best(sync, size),
        "redis-always",
        case("redis-always", "pipelined"),
        3.0,
    )
    add(
        "consume ≥ 1x Redis XREADGROUP with batched XACK",
        consume_best(py, size),
        "redis-everysec",
        case("redis-everysec", "consume"),
        1.0,
    )
    duel = (doc.get("parts", {}).get("3") or {}).get("duel") or {}
    d = duel.get("systems")
    for what, goal, system in (
        ("p50 no worse than Redis XADD", 1.0, "pyrmq"),
        ("pyrmq's p50 ≤ 0.8x Redis's (issue 18)", 1.25, "pyrmq"),
        (
            "with busy polling off (eventLoopBusyPollUs=0), p50 no worse than Redis",
            1.0,
            "pyrmq-nopoll",
        ),
    ):
        if not d or system not in d:
            break
        add(
            f"one-at-a-time acknowledged send, {what} (ratio: Redis p50 / pyrmq p50; median "
            f"of {duel['rounds']} alternating rounds, bench.duel)",
            (d[system]["median_p50_ms"], "awaited p50 ms, alternating"),
            "redis-everysec",
            (d["redis-everysec"]["median_p50_ms"], "awaited p50 ms, alternating"),
            goal,
            lower_is_better=True,
        )
    piped = (doc.get("parts", {}).get("3") or {}).get("duel_pipelined") or {}
    for what, ratio_name, mine_name, peer_name in (
        (
            "pipelined single sends, auto-batched, ≥ 3x Redis XADD pipelined (AOF everysec)",
            "autobatch_vs_redis_everysec",
            "pyrmq-autobatch",
            "redis-everysec",
        ),
        (
            "SYNC_FLUSH pipelined single sends, auto-batched, ≥ 3x Redis XADD pipelined "
            "(AOF always)",
            "sync_autobatch_vs_redis_always",
            "pyrmq-sync-autobatch",
            "redis-always",
        ),
    ):
        if not piped.get("systems"):
            break
        # both measured side by side (bench.duel --pipelined): the ratio is
        # the median of the rounds' ratios, not the ratio of the medians
        ps = piped["systems"]
        ratio = piped["ratios"][ratio_name]["median"]
        row = {
            "target": f"{what} (median of {piped['rounds']} alternating rounds' ratios)",
            "pyrmq": ps[mine_name]["median_msgs_per_s"],
            "pyrmq_case": "pipelined, auto_batch, alternating",
            "peer": peer_name,
            "peer_value": ps[peer_name]["median_msgs_per_s"],
            "peer_case": "pipelined, alternating",
            "ratio": ratio,
            "goal": 3.0,
            "met": None if ratio is None else ratio >= 3.0 and not piped.get("lost"),
        }
        if piped.get("lost"):
            row["note"] = f"{piped['lost']} acknowledged messages not stored"
        out.append(row)
    if piped.get("systems"):
        ps = piped["systems"]
        single = ps["pyrmq-single"]["median_msgs_per_s"]
        redis = ps["redis-everysec"]["median_msgs_per_s"]
        # the median of the rounds' ratios, as the 3x rows (runs from before
        # the duel took this ratio: the ratio of the medians)
        taken = piped["ratios"].get("single_vs_redis_everysec")
        ratio = taken["median"] if taken else _ratio(single, redis)
        out.append({
            "target": "pipelined single sends without auto-batching ≥ 1x Redis XADD pipelined "
            f"(AOF everysec; median of {piped['rounds']} alternating rounds' ratios)",
            "pyrmq": single, "pyrmq_case": "pipelined, auto_batch=False, alternating",
            "peer": "redis-everysec", "peer_value": redis, "peer_case": "pipelined, alternating",
            "ratio": ratio, "goal": 1.0, "met": None if ratio is None else ratio >= 1.0,
        })  # fmt: skip
    out += capacity_targets(doc)
    aw = find(py, "awaited", size)
    pr = find(s.get("redis-everysec"), "awaited", size)
    add(
        "one-at-a-time acknowledged send, p50 no worse than Redis XADD (ratio: Redis p50 / "
        "pyrmq p50; " + ("parts 2 and 3, minutes apart)" if duel.get("systems") else "parts 2, 3)"),
        (aw["p50_ms"] if aw else None, "awaited p50 ms"),
        "redis-everysec",
        (pr["p50_ms"] if pr else None, "awaited p50 ms"),
        1.0,
        lower_is_better=True,
    )
    return out


def capacity_targets(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 18's broker capacity targets, from bench.broker_report's
    section b: pre-encoded 128 B single sends into one broker, beside the
    same load on the Python send path (sendFastPathEnable=false)."""
    rep = (doc.get("parts", {}).get("2") or {}).get("broker_report") or {}
    sends = rep.get("send") or []

    def find_send(server: str, flush: str) -> dict[str, Any] | None:
        return next(
            (r for r in sends if r["server"] == server and r["flush"] == flush
             and r["body_len"] == 128 and r["shape"] == "pipelined"),
            None,
        )  # fmt: skip

    python = find_send("python", "ASYNC_FLUSH")
    out = []
    for flush, goal in (("ASYNC_FLUSH", 250_000), ("SYNC_FLUSH", 150_000)):
        r = find_send("pyrmq", flush)
        if r is None:
            continue
        ratio = r["msgs_per_s"] / goal
        beside = ""
        if python is not None and flush == "ASYNC_FLUSH":
            beside = f"; the Python send path {python['msgs_per_s']:,.0f} in the same run"
        out.append({
            "target": f"pre-encoded 128 B single sends into one broker, {flush}, ≥ {goal:,} "
            f"msgs/s (issue 18; broker {r['server_cpu_us_per_msg']:.1f} µs CPU/msg{beside})",
            "pyrmq": r["msgs_per_s"], "pyrmq_case": "bench.broker_report b, 2x4x256",
            "peer": "target", "peer_value": goal, "peer_case": "",
            "ratio": ratio, "goal": 1.0, "met": ratio >= 1.0,
        })  # fmt: skip
    return out


def duel_md(duel: dict[str, Any]) -> str:
    if duel.get("skipped"):
        return f"skipped: {duel['skipped']}"
    d = duel["systems"]
    rows = [
        [
            name,
            ", ".join(f"{x:.3f}" for x in v["p50_ms_per_round"]),
            _n(v["median_p50_ms"], 3),
            _n(v["pooled_p50_ms"], 3),
            _n(v["pooled_p99_ms"], 3),
            _n(v["sends"], 0),
            _n(v["server_cpu_us_per_send"], 1) if "server_cpu_us_per_send" in v else "-",
        ]
        for name, v in d.items()
    ]
    us = duel.get("busy_poll_us")
    polled = (
        f" pyrmq's broker, at its defaults, busy polled for up to {us} µs before it slept."
        if us
        else " pyrmq's broker, at its defaults, did not busy poll (one usable CPU)."
    )
    if duel.get("no_poll_ratio"):
        polled += (
            f" With busy polling off (`pyrmq-nopoll`, eventLoopBusyPollUs=0): "
            f"{_r(duel['no_poll_ratio'])}."
        )
    return (
        f"Servers up at once, one client alternating {duel['rounds']} rounds of "
        f"{duel['seconds']:g} s ({duel['body']} B, order swapped every round; `bench.duel`). "
        f"Ratio Redis ÷ pyrmq of the median p50: {_r(duel['ratio'])}; pyrmq's p50 was the "
        f"lower in {duel['pyrmq_faster_rounds']} of {duel['rounds']} rounds.{polled} "
        "Server CPU: the server process's, all threads, over the system's rounds.\n\n"
        + table(
            [
                "system",
                "p50 per round, ms",
                "median p50",
                "pooled p50",
                "pooled p99",
                "sends",
                "server CPU µs a send",
            ],
            rows,
            "llrrrrr",
        )
    )


def duel_pipelined_md(duel: dict[str, Any]) -> str:
    if duel.get("skipped"):
        return f"skipped: {duel['skipped']}"
    rows = [
        [
            name,
            v["server"],
            ", ".join(f"{x:,.0f}" for x in v["msgs_per_s_per_round"]),
            _n(v["median_msgs_per_s"]),
            _n(v["client_us_per_msg"], 2) if "client_us_per_msg" in v else "-",
            _n(v["lost"]),
        ]
        for name, v in duel["systems"].items()
    ]
    ratios = [
        [name, ", ".join(f"{x:.2f}" for x in r["per_round"]), _r(r["median"])]
        for name, r in duel["ratios"].items()
    ]
    return (
        f"The four servers up at once, one client process, {duel['rounds']} rounds of "
        f"{duel['seconds']:g} s per system ({duel['body']} B, {duel['window']:,} "
        "unacknowledged, order reversed every other round; `bench.duel --pipelined`).\n\n"
        + table(
            ["system", "server", "msgs/s per round", "median", "client µs/msg", "lost"],
            rows,
            "llrrrr",
        )
        + "\n\n"
        + table(["ratio", "per round", "median"], ratios, "lrr")
    )


def targets_md(rows: list[dict[str, Any]]) -> str:
    body = []
    for t in rows:
        unit = "ms" if "p50" in t["pyrmq_case"] else "msg/s"
        digits = 3 if unit == "ms" else 0
        met = "-" if t["met"] is None else ("yes" if t["met"] else "**NO**")
        if t.get("note"):
            met += f" ({t['note']})"
        body.append(
            [
                t["target"],
                f"{_n(t['pyrmq'], digits)} {unit} ({t['pyrmq_case'] or '-'})",
                f"{_n(t['peer_value'], digits)} {unit} ({t['peer']} {t['peer_case']})",
                _r(t["ratio"]),
                f"≥ {t['goal']:g}x",
                met,
            ]
        )
    return table(["target (128 B)", "pyrmq", "peer", "ratio", "goal", "met"], body, "lrrrrl")


# -- part 1 ---------------------------------------------------------------------------


def store_md(part: dict[str, Any]) -> str:
    lim = part.get("limits") or {}
    out = []
    if lim:
        rows = [[k, _n(v, 1)] for k, v in lim.items()]
        out.append(
            "Physical limits (`bench.limits`, same directory, same run):\n\n"
            + table(["limit", "value"], rows, "lr")
        )
    benches = part.get("benchmarks") or []
    if benches:
        rows = []
        for b in benches:
            ref = b.get("reference")
            rows.append(
                [
                    b["group"],
                    b["name"].split("[", 1)[-1].rstrip("]"),
                    f"{b['min_s'] * 1e3:,.3f} ms",
                    b.get("rate", ""),
                    ref or "",
                    _r(b.get("ratio")) if b.get("ratio") is not None else "",
                ]
            )
        out.append(
            "pytest-benchmark (`bench/bench_store.py`, `bench/bench_remoting.py`; one "
            "round = one bounded workload, the fastest round shown):\n\n"
            + table(
                ["group", "case", "min per round", "best rate", "reference", "ratio"],
                rows,
                "llrrlr",
            )
        )
    return "\n\n".join(out)


# -- parts 2 and 3 --------------------------------------------------------------------


def system_md(sysdoc: dict[str, Any]) -> str:
    """One system's rows: throughput cases, then latencies."""
    if sysdoc.get("skipped"):
        return f"skipped: {sysdoc['skipped']}"
    rows = []
    for r in sysdoc.get("rows", []):
        if r["case"] == "e2e":
            rows.append(
                [
                    f"e2e at {r['rate']:,.0f}/s",
                    str(r["body"]),
                    "",
                    "",
                    f"{_n(r['p50_ms'], 2)} / {_n(r['p99_ms'], 2)} / {_n(r['p999_ms'], 2)}",
                    "",
                    "",
                    f"{r['received']:,} of {r['sent']:,}",
                ]
            )
            continue
        lat = ""
        if "p50_ms" in r:
            lat = f"{_n(r['p50_ms'], 3)} / {_n(r['p99_ms'], 3)} / {_n(r['p999_ms'], 3)}"
        note = ""
        if r.get("failed"):
            note = f"{r['failed']:,} failed"
        if r.get("expected") and r["messages"] < r["expected"]:
            note = f"{r['messages']:,} of {r['expected']:,}"
        if r.get("sent") is not None and r.get("lost") is not None:
            # counted at the server: what was stored of what was sent
            note = f"{r['sent'] - r['lost']:,} of {r['sent']:,} stored"
        if r.get("error"):
            note = f"error: {r['error']}"
        why = row_failure(r)
        if why:
            note = f"**FAILED: {why}**"
        rows.append(
            [
                r["case"],
                str(r["body"]),
                "**FAILED**" if why else _n(r.get("msgs_per_s")),
                "" if why else _n(r.get("MBps"), 1),
                lat,
                _n(r.get("client_us_per_msg"), 1),
                f"{r.get('client_cpu_share', 0):.2f} / {r.get('server_cpu_share', 0):.2f}",
                note,
            ]
        )
    head = [
        "case",
        "body B",
        "msgs/s",
        "MB/s",
        "p50 / p99 / p99.9 ms",
        "client µs/msg",
        "CPU client / server",
        "note",
    ]
    return table(head, rows, "lrrrrrrl")


def comparison_md(doc: dict[str, Any], sizes: Iterable[int]) -> str:
    """Per body size: each case's figure for every system, and pyrmq's ratio
    to each peer (pyrmq ÷ peer; for latencies, below 1 means pyrmq is faster)."""
    s = systems(doc)
    names = [n for n in SYSTEMS if n in s]
    peers = [n for n in names if n in TWIN]
    head = ["case"] + [SYSTEMS[n] for n in names] + [RATIO_HEAD[p] for p in peers]
    rates = sorted({r["rate"] for d in s.values() for r in d.get("rows", []) if r["case"] == "e2e"})
    out = []
    for size in sizes:
        rows = _comparison_rows(s, names, peers, size, rates)
        out.append(f"**{size} B bodies**\n\n" + table(head, rows, "l" + "r" * (len(head) - 1)))
    return "\n\n".join(out)


def _comparison_rows(
    s: dict[str, dict[str, Any]], names: list[str], peers: list[str], size: int, rates: list[float]
) -> list[list[str]]:
    rows: list[list[str]] = []

    def line(label: str, get: Callable[[dict[str, Any]], float | None], digits: int = 0) -> None:
        vals = {n: get(s[n]) for n in names}
        if all(v is None for v in vals.values()):
            return
        cells = [label]
        cells += ["**FAILED**" if vals[n] is FAILED else _n(vals[n], digits) for n in names]
        figs = {n: None if v is FAILED else v for n, v in vals.items()}
        cells += [_r(_ratio(figs.get(TWIN[p]), figs[p])) for p in peers]
        rows.append(cells)

    def field(case: str, key: str, rate: float | None = None) -> Callable[[dict[str, Any]], Any]:
        def get(d: dict[str, Any]) -> Any:
            r = find(d, case, size, rate) or {}
            return FAILED if row_failure(r) else r.get(key)

        return get

    line("awaited send, msgs/s", field("awaited", "msgs_per_s"))
    line("awaited send p50, ms", field("awaited", "p50_ms"), 3)
    line("awaited send p99, ms", field("awaited", "p99_ms"), 3)
    line("pipelined, msgs/s", field("pipelined", "msgs_per_s"))
    line("batched, msgs/s", field("batched", "msgs_per_s"))
    line("best of pipelined/batched, msgs/s", lambda d: produce_best(d, size)[0])
    line("oneway, msgs/s", field("oneway", "msgs_per_s"))
    line("consume, msgs/s (pyrmq: best of push/poll)", lambda d: consume_best(d, size)[0])
    for rt in rates:
        for p in ("p50", "p99", "p999"):
            line(
                f"e2e at {rt:,.0f}/s {p.replace('999', '99.9')}, ms", field("e2e", f"{p}_ms", rt), 2
            )
    return rows


def cpp_md(report: dict[str, Any] | None) -> str:
    if not report:
        return "not run"
    rows = [
        [
            r["section"],
            r["measurement"],
            r["value"],
            r.get("reference", ""),
            r.get("ratio", ""),
            r.get("target", ""),
            r.get("met", ""),
        ]
        for r in report.get("rows", [])
    ]
    return table(
        ["#", "measurement", "value", "reference", "ratio", "target", "met"], rows, "llrrrrl"
    )


# -- the whole document ---------------------------------------------------------------


def render(doc: dict[str, Any]) -> str:
    meta = doc.get("suite", {})
    m = meta.get("machine", {})
    parts = doc.get("parts", {})
    sizes = meta.get("budget", {}).get("sizes", [128, 1024, 16384])
    out = [
        f"# pyrmq bench suite ({'quick' if meta.get('quick') else 'full'} run, "
        f"{meta.get('elapsed_s', 0):,.0f} s, tree {meta.get('git', '?')})",
        f"Machine: {m.get('nproc', '?')} CPUs ({m.get('cpu', '?')}), {m.get('ram_gib', '?')} GiB "
        f"RAM, kernel {m.get('kernel', '?')}, Python {m.get('python', '?')}; data in "
        f"{m.get('dir', '?')} on {m.get('filesystem', '?')}. Every system ran on this machine "
        "in this run, one Python client process at a time; figures from a shared or busy "
        "machine are noisy.",
    ]
    if doc.get("errors"):
        out.append(
            "**Errors** (those parts are incomplete):\n\n"
            + "\n".join(f"- part {e['part']}: {e['error']}" for e in doc["errors"])
        )
    bad = failed_rows(doc)
    if bad:
        out.append(
            "**Failed rows** (not figures: each is marked FAILED in its table; a harness, "
            "peer client or product failure to look into, not a measurement):\n\n"
            + "\n".join(f"- {b}" for b in bad)
        )
    out.append("## Targets\n\n" + targets_md(doc.get("targets") or targets(doc)))
    if "1" in parts:
        out.append("## 1. Store microbenchmarks and physical limits\n\n" + store_md(parts["1"]))
    s = systems(doc)
    if "3" in parts or "2" in parts:
        out.append(
            "## pyrmq against its peers (same cases, counts and sizes)\n\n"
            "Ratios are pyrmq ÷ peer, each peer against the pyrmq run of comparable "
            "durability (SYNC_FLUSH for Redis AOF always, ASYNC_FLUSH otherwise). For "
            "latencies a ratio below 1 means pyrmq is faster.\n\n" + comparison_md(doc, sizes)
        )
    if "2" in parts:
        out.append("## 2. Broker end to end\n\n### Our client (`bench.client_bench`)")
        for name in ("pyrmq", "pyrmq-sync"):
            if name in s:
                out.append(
                    f"**{SYSTEMS[name]}** ({s[name].get('client', '')})\n\n" + system_md(s[name])
                )
        out.append(
            "### The C++ client and the broker's capacity (`bench.broker_report`)\n\n"
            + cpp_md(parts["2"].get("broker_report"))
        )
    if "3" in parts:
        out.append("## 3. Peers")
        for name in ("nats", "redis-everysec", "redis-always", "rabbitmq"):
            if name in s:
                d = s[name]
                out.append(
                    f"**{SYSTEMS[name]}**: {d.get('server', '')}, {d.get('client', '')}; "
                    f"{d.get('durability', '')}\n\n" + system_md(d)
                )
        if parts["3"].get("duel"):
            out.append(
                "### Awaited send latency, pyrmq and Redis alternating\n\n"
                + duel_md(parts["3"]["duel"])
            )
        if parts["3"].get("duel_pipelined"):
            out.append(
                "### Pipelined single sends, auto-batched, beside Redis\n\n"
                + duel_pipelined_md(parts["3"]["duel_pipelined"])
            )
    for part, title in (
        ("4", "4. Backlog and recovery"),
        ("5", "5. Scale"),
        ("6", "6. Replication (master/slave)"),
    ):
        p = parts.get(part)
        if p is None:
            continue
        out.append(
            f"## {title}\n\n"
            + (
                f"skipped: {p['skipped']}"
                if p.get("skipped")
                else p.get("table_md", "see the JSON")
            )
        )
    plots = meta.get("plots") or []
    if plots:
        out.append("## Plots\n\n" + "\n".join(f"![{p}]({p})" for p in plots))
    return "\n\n".join(out) + "\n"


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        d = json.load(f)
    for b in failed_rows(d):
        print(f"FAILED ROW: {b}", file=sys.stderr)
    print(render(d), end="")
