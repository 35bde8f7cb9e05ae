"""The bench suite: one command, bounded time, results in one folder.

    python -m bench.suite --out DIR [--quick] [--parts 123456] [--peers nats,rabbitmq]
                          [--dir WORKDIR] [--sizes 128,1024,16384]

Parts (bench/README.md, "Suite and peers", says what every figure means):

1. Store: the pytest-benchmark suites (bench/bench_store.py: append, SYNC
   flush, ConsumeQueue reads, index lookups; bench/bench_remoting.py: the
   codec) beside this machine's physical limits (bench.limits: sequential
   write, fdatasync latency, raw pwrite+fdatasync group commit, memcpy,
   loopback TCP) measured on the same directory in the same run.
2. Broker end to end: our client (bench.client_bench: awaited, pipelined,
   batched, oneway, consume, produce-to-consume latency at fixed rates, for
   every body size, ASYNC_FLUSH and SYNC_FLUSH), then bench.broker_report
   (the C++ client for every mode, size and flush type; the broker's
   capacity under pre-encoded load; pull throughput; latency).
3. Peers (bench.peers): NATS JetStream, Redis Streams (AOF everysec and
   always), RabbitMQ streams, each started here and driven by its usual
   Python client through the same cases, counts and sizes as part 2's;
   then bench.duel: awaited-send latency of pyrmq and Redis (everysec)
   in alternating rounds, the servers up at once (the latency target's
   figure; pyrmq's broker at its defaults, which busy poll, and with
   eventLoopBusyPollUs=0),
   and bench.duel --pipelined: auto-batched pipelined single sends beside
   Redis pipelined XADD, everysec and always (issue 18's targets).
4. Backlog and recovery (bench.backlog), 5. scale (bench.scale), when
   those modules are present.
6. Replication (bench.ha): send throughput and latency of a broker without
   a slave, ASYNC_MASTER and SYNC_MASTER with one, replication lag.

DIR gets ``results.json`` (everything, written again after every part),
``results.md`` (tables, pyrmq/peer ratios, the targets met or missed),
PNG plots, and each part's own files (store_bench.json, broker_report.json
and .md, backlog.json, scale.json, suite.log). Stores and data directories
live under --dir (default: the temp directory) and are removed. A part that
fails is recorded in ``errors`` and the suite goes on.

Time: --quick is a smoke run with small counts (~7 min on a busy 2-core
machine); the full run took 24 minutes on 2 cores (2026-11-22 reference run).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

from bench import _plots, _report
from bench._args import work_dir
from bench._e2e import Budget

REPO = pathlib.Path(__file__).resolve().parent.parent
ALL_PARTS = "123456"


class Log:
    """Progress to stderr and to DIR/suite.log, stamped with the elapsed time."""

    def __init__(self, path: pathlib.Path) -> None:
        self.t0 = time.perf_counter()
        self.f = open(path, "a", buffering=1)  # noqa: SIM115 (closed in close())

    def __call__(self, msg: str) -> None:
        line = f"[{time.perf_counter() - self.t0:7.1f}s] {msg}"
        print(line, file=sys.stderr, flush=True)
        self.f.write(line + "\n")

    def close(self) -> None:
        self.f.close()


# -- part 1 ---------------------------------------------------------------------------

#: quick: one body size, no sendfile group, the smaller queue
QUICK_STORE_FILTER = "not 1024 and not sendfile and not 64"


def part_store(work: str, out: pathlib.Path, quick: bool, log: Log) -> dict[str, Any]:
    from bench import limits

    log("part 1: physical limits (bench.limits)")
    lim = limits.measure_all(work, quick=quick)
    log("  " + ", ".join(f"{k} {v:,.1f}" for k, v in lim.items()))
    bench_json = out / "store_bench.json"
    store_dir = tempfile.mkdtemp(prefix="pyrmq-bench-store-", dir=work)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "bench/bench_store.py",
        "bench/bench_remoting.py",
        "--benchmark-only",
        f"--benchmark-json={bench_json}",
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
    ]
    env = dict(os.environ, PYRMQ_BENCH_DIR=store_dir)
    if quick:
        cmd += ["-k", QUICK_STORE_FILTER]
        env["PYRMQ_BENCH_CQ_UNITS"] = "200000"
    log(f"part 1: pytest-benchmark{' (quick subset)' if quick else ''}")
    try:
        with open(out / "store_bench.log", "w") as f:
            rc = subprocess.run(
                cmd,
                cwd=REPO,
                env=env,
                stdout=f,
                stderr=subprocess.STDOUT,
                timeout=600 if quick else 1800,
                check=False,
            ).returncode
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)
    benches = store_rows(json.loads(bench_json.read_text()), lim) if bench_json.exists() else []
    log(f"  {len(benches)} benchmarks (pytest exit {rc})")
    res: dict[str, Any] = {"limits": lim, "benchmarks": benches, "pytest_exit": rc}
    if rc != 0:
        res["error"] = f"pytest exited {rc}; see store_bench.log"
    return res


def store_rows(bench: dict[str, Any], lim: dict[str, float]) -> list[dict[str, Any]]:
    """pytest-benchmark's JSON as table rows, each with its best rate and,
    where the limits give one, the reference and the ratio to it."""
    out = []
    for b in bench.get("benchmarks", []):
        x = b.get("extra_info", {})
        row: dict[str, Any] = {
            "group": b["group"],
            "name": b["name"],
            "params": b.get("params"),
            "min_s": b["stats"]["min"],
            "mean_s": b["stats"]["mean"],
            "rounds": b["stats"]["rounds"],
            "extra_info": x,
        }
        if "frames_per_s_best" in x:
            row["rate"] = f"{x['frames_per_s_best']:,} frames/s"
        elif "queries_per_s_best" in x:
            row["rate"] = f"{x['queries_per_s_best']:,} queries/s"
        elif "msgs_per_s_best" in x:
            row["rate"] = f"{x['msgs_per_s_best']:,} msgs/s, {x.get('MBps_best', 0):,} MB/s"
        group = b["group"]
        if group == "store.append" and lim.get("seq_write_MBps"):
            row["reference"] = f"page-cache write {lim['seq_write_MBps']:,.0f} MB/s"
            row["ratio"] = x.get("MBps_best", 0) / lim["seq_write_MBps"]
        elif group == "store.flush_sync":
            key = f"group_commit_{(b.get('params') or {}).get('tasks')}_per_s"
            if lim.get(key):
                row["reference"] = f"raw group commit {lim[key]:,.0f} /s"
                row["ratio"] = x.get("msgs_per_s_best", 0) / lim[key]
        elif group == "store.sendfile" and lim.get("loopback_tcp_MBps"):
            row["reference"] = f"loopback TCP {lim['loopback_tcp_MBps']:,.0f} MB/s"
            row["ratio"] = x.get("MBps_best", 0) / lim["loopback_tcp_MBps"]
        out.append(row)
    return out


# -- part 2 ---------------------------------------------------------------------------


def part_broker(
    work: str,
    out: pathlib.Path,
    quick: bool,
    budget: Budget,
    log: Log,
    doc: dict[str, Any],
    save: Callable[[], None],
) -> dict[str, Any]:
    from bench import client_bench

    res: dict[str, Any] = {"systems": {}}
    doc["parts"]["2"] = res
    for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        log(f"part 2: our client, {flush}")
        name = "pyrmq" if flush == "ASYNC_FLUSH" else "pyrmq-sync"
        try:
            d = client_bench.run(work, budget, flush, log)
        except Exception as e:  # one run's failure costs that run, not the part
            log(f"  {name} failed: {e!r}")
            d = {"system": name, "skipped": f"failed: {e!r}", "traceback": traceback.format_exc()}
            doc["errors"].append({"part": "2", "error": f"{name}: {e!r}"})
        res["systems"][d["system"]] = d
        save()
    return res


def part_broker_report(
    work: str, out: pathlib.Path, quick: bool, budget: Budget, log: Log, res: dict[str, Any]
) -> None:
    """bench.broker_report in its own process (sections a-e)."""
    log("part 2: bench.broker_report (C++ client, capacity, pull, latency)")
    rep_json = out / "broker_report.json"
    cmd = [
        sys.executable,
        "-m",
        "bench.broker_report",
        "--dir",
        work,
        "--json",
        str(rep_json),
        "--sections",
        "abcde",
        "--sizes",
        ",".join(map(str, budget.sizes)),
    ]
    if quick:
        cmd.append("--quick")
    with open(out / "broker_report.md", "w") as md, open(out / "broker_report.log", "w") as err:
        rc = subprocess.run(
            cmd, cwd=REPO, stdout=md, stderr=err, timeout=1200 if quick else 3000, check=False
        ).returncode
    res["broker_report"] = json.loads(rep_json.read_text()) if rep_json.exists() else None
    if rc != 0:
        res["broker_report_error"] = f"exit {rc}; see broker_report.log"
        raise RuntimeError(f"bench.broker_report exited {rc}; see broker_report.log")
    log(f"  {len(res['broker_report'].get('rows', []))} rows")


# -- part 3 ---------------------------------------------------------------------------


def part_peers(
    work: str,
    budget: Budget,
    peers: list[str],
    log: Log,
    doc: dict[str, Any],
    save: Callable[[], None],
) -> dict[str, Any]:
    from bench.peers import run_peer

    res: dict[str, Any] = {"systems": {}}
    doc["parts"]["3"] = res
    for name in peers:
        log(f"part 3: {name}")
        try:
            res["systems"][name] = run_peer(name, work, budget, log)
        except Exception as e:
            log(f"  {name} failed: {e!r}")
            res["systems"][name] = {
                "system": name,
                "skipped": f"failed: {e!r}",
                "traceback": traceback.format_exc(),
            }
            doc["errors"].append({"part": "3", "error": f"{name}: {e!r}"})
        save()
    if "redis-everysec" in peers:
        from bench import duel

        log("part 3: awaited latency, pyrmq and Redis alternating (bench.duel)")
        res["duel"] = duel.run(work, rounds=4 if budget.awaited_seconds < 1 else 10, log=log)
        save()
        log("part 3: pipelined auto-batched sends beside Redis, alternating (bench.duel)")
        quick = budget.awaited_seconds < 1
        res["duel_pipelined"] = duel.run_pipelined(
            work, rounds=3 if quick else 7, seconds=1.0 if quick else 2.0, log=log
        )
        save()
    return res


# -- parts 4 and 5 --------------------------------------------------------------------


def part_module(name: str, work: str, out: pathlib.Path, quick: bool, log: Log) -> dict[str, Any]:
    """bench.<name>.run(out_dir, quick, work_dir=...) if that module exists."""
    if importlib.util.find_spec(f"bench.{name}") is None:
        log(f"bench.{name} not present: skipped")
        return {"skipped": f"bench/{name}.py not present"}
    mod = importlib.import_module(f"bench.{name}")
    log(f"bench.{name}.run({'quick' if quick else 'full'})")
    result = mod.run(out, quick, work_dir=work)
    res: dict[str, Any] = {"result": result}
    table = getattr(mod, "table", None)
    if callable(table):
        try:
            res["table_md"] = table(result)
        except Exception as e:  # a rendering bug must not lose the figures
            res["table_md"] = f"(table failed: {e!r})"
    return res


# -- the run --------------------------------------------------------------------------


def git_head() -> str:
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=10,
            check=False,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run(
    out: pathlib.Path,
    quick: bool,
    parts: str = ALL_PARTS,
    peers: list[str] | None = None,
    work_dir: str | None = None,
    sizes: tuple[int, ...] | None = None,
) -> dict[str, Any]:
    """Run the chosen parts; write DIR/results.json, results.md and the
    plots; return the result document."""
    from bench.peers import PEERS
    from bench.store_report import describe_machine

    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "suite.log")
    work = tempfile.mkdtemp(prefix="pyrmq-bench-suite-", dir=work_dir)
    budget = Budget.make(quick, sizes)
    peers = list(PEERS) if peers is None else peers
    doc: dict[str, Any] = {
        "suite": {
            "quick": quick,
            "parts": parts,
            "peers": peers,
            "git": git_head(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "machine": describe_machine(work),
            "budget": dataclasses.asdict(budget),
        },
        "parts": {},
        "errors": [],
    }

    def save() -> None:
        doc["suite"]["elapsed_s"] = round(time.perf_counter() - log.t0, 1)
        (out / "results.json").write_text(json.dumps(doc, indent=1, default=str))

    def attempt(part: str, fn: Callable[[], Any]) -> None:
        t = time.perf_counter()
        try:
            fn()
        except Exception as e:
            log(f"part {part} FAILED: {e!r}")
            doc["errors"].append(
                {"part": part, "error": repr(e), "traceback": traceback.format_exc()}
            )
            doc["parts"].setdefault(part, {})["error"] = repr(e)
        doc["parts"].setdefault(part, {})["elapsed_s"] = round(time.perf_counter() - t, 1)
        log(f"part {part} done in {time.perf_counter() - t:.0f} s")
        save()

    log(f"bench suite ({'quick' if quick else 'full'}), parts {parts}, out {out}, work {work}")
    try:
        if "1" in parts:
            attempt("1", lambda: doc["parts"].__setitem__("1", part_store(work, out, quick, log)))
        if "2" in parts:
            attempt("2", lambda: part_broker(work, out, quick, budget, log, doc, save))
        if "3" in parts:
            attempt("3", lambda: part_peers(work, budget, peers, log, doc, save))
        if "2" in parts:
            attempt(
                "2",
                lambda: part_broker_report(
                    work, out, quick, budget, log, doc["parts"].setdefault("2", {})
                ),
            )
        for part, name in (("4", "backlog"), ("5", "scale"), ("6", "ha")):
            if part in parts:

                def module_part(part: str = part, name: str = name) -> None:
                    doc["parts"][part] = part_module(name, work, out, quick, log)

                attempt(part, module_part)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        doc["targets"] = _report.targets(doc)
        for bad in _report.failed_rows(doc):
            log(f"FAILED ROW (not a figure): {bad}")
            doc["errors"].append({"part": "rows", "error": f"failed row: {bad}"})
        try:
            doc["suite"]["plots"] = _plots.draw_all(doc, out)
        except Exception as e:
            doc["errors"].append(
                {"part": "plots", "error": repr(e), "traceback": traceback.format_exc()}
            )
        save()
        (out / "results.md").write_text(_report.render(doc))
        log(
            f"wrote {out / 'results.json'}, {out / 'results.md'} and "
            f"{len(doc['suite'].get('plots', []))} plots"
        )
        log.close()
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n", 2)[2],
    )
    ap.add_argument("--out", required=True, type=pathlib.Path, help="results folder")
    ap.add_argument("--quick", action="store_true", help="a smoke run of a few minutes")
    ap.add_argument("--parts", default=ALL_PARTS, help="which parts, e.g. 13 (default 123456)")
    ap.add_argument(
        "--peers",
        type=lambda v: [x for x in v.split(",") if x],
        help="peers of part 3 (default: all)",
    )
    ap.add_argument(
        "--dir", type=work_dir, help="where stores and data directories go (default: temp dir)"
    )
    ap.add_argument(
        "--sizes",
        type=lambda v: tuple(int(x) for x in v.split(",")),
        help="body sizes of parts 2 and 3 (default 128,1024,16384)",
    )
    args = ap.parse_args(argv)
    doc = run(args.out, args.quick, args.parts, args.peers, args.dir, args.sizes)
    for t in doc.get("targets", []):
        met = "-" if t["met"] is None else ("met" if t["met"] else "MISSED")
        ratio = "-" if t["ratio"] is None else f"{t['ratio']:.2f}x"
        print(f"{met:>6}  {ratio:>7}  {t['target']}")
    return 1 if doc["errors"] else 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
