"""One run of a `pyrmq` command as a benchmark step, and the paired ratio
the same-run comparisons report.

``pyrmq_json("bench", "produce", ...)`` runs ``python -m pyrmq ARGS -q
--json -`` in a child process and returns its JSON summary with the CPU
seconds the child used (``client_cpu_s``, from the children's rusage) and,
given the server's PID, the server's (``server_cpu_s``, from /proc).

``paired_ratio(a, b, value)``: the rounds of two cases run in the same
rounds, each round's ratio value(a)/value(b), then the median, so that the
machine's own load swings, which hit both cases of a round alike, cancel."""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bench.broker_load import proc_cpu_s


def pyrmq_json(
    *args: str,
    timeout: float,
    env: Mapping[str, str] | None = None,
    server_pid: int | None = None,
) -> dict[str, Any]:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    s0 = proc_cpu_s(server_pid) if server_pid is not None else 0.0
    out = subprocess.run(
        [sys.executable, "-m", "pyrmq", *args, "-q", "--json", "-"],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(env) if env is not None else None,
    )
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_cpu = proc_cpu_s(server_pid) - s0 if server_pid is not None else 0.0
    if out.returncode != 0:
        raise RuntimeError(f"pyrmq {' '.join(args[:3])} failed: {out.stderr[-2000:]}")
    summary = dict(json.loads(out.stdout))
    summary["client_cpu_s"] = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    summary["server_cpu_s"] = server_cpu
    return summary


def paired_ratio(
    a: Sequence[dict[str, Any]], b: Sequence[dict[str, Any]], value: Callable[[Any], float]
) -> float:
    """The median over the rounds of value(a[i]) / value(b[i]) (rounds where
    b's value is 0 left out; 0.0 when none is left)."""
    ratios = [value(x) / value(y) for x, y in zip(a, b, strict=True) if value(y)]
    return statistics.median(ratios) if ratios else 0.0


__all__ = ["paired_ratio", "pyrmq_json"]
