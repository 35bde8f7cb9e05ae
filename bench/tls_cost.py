"""What TLS costs on the remoting ports: sends and consumes over TLS beside
plain ones, against one server, in one run.

One ``pyrmq standalone`` with ``tls.server.mode=permissive`` (so the same
broker serves both kinds on the same port; its registration is TLS), with
certificates made for the run by ``openssl`` (pyrmq.testing.certs, in a
temporary folder that is deleted after). ``--rounds`` rounds, every other
one in reverse order (a noisy moment on a shared machine hurts both alike):

- produce: ``pyrmq bench produce --mode sync`` (64 coroutines awaiting
  sends) with and without ``--tls``; messages/s and send RT p50/p99, and
  the CPU per message of the producer process and of the server (read from
  /proc: Linux);
- consume: ``pyrmq bench consume --consumer pull --from-beginning`` of the
  messages produced, a new group each time, with and without ``--tls``.
  Plain pulls of 32 x 1 KiB go out by sendfile (answers >= 16 KiB); over
  TLS the broker copies them through the cipher, so this also prices the
  lost sendfile; ``--sendfile-min-bytes 1073741824`` copies plain pulls too,
  leaving the cipher alone in the ratio.

Per case the median over the rounds, and the TLS/plain ratio taken round
by round, then its median.

    python -m bench.tls_cost [--seconds 5] [--rounds 3] [--body 1024] [--out FILE.json]"""

from __future__ import annotations

import argparse
import json
import operator
import pathlib
import statistics
import subprocess
import sys
import tempfile
from typing import Any

from bench._runs import paired_ratio, pyrmq_json
from pyrmq.testing.certs import make_test_certs
from pyrmq.testing.cluster import StandaloneProcess

TOPIC = "TlsCost"
QUEUES = 8


def run(
    seconds: float, rounds: int, body: int, sendfile_min_bytes: int | None = None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pyrmq-tls-cost-") as tmp:
        work = pathlib.Path(tmp)
        certs = make_test_certs(work / "certs")
        settings = {
            **certs.server_properties(
                "permissive", **{"tls.enable": "true", "tls.client.trustCertPath": str(certs.ca)}
            ),
            "mappedFileSizeCommitLog": 256 << 20,
        }
        if sendfile_min_bytes is not None:
            settings["transferBySendfileMinBytes"] = sendfile_min_bytes
        srv = StandaloneProcess(work, settings)
        srv.start()
        try:
            ns = srv.namesrv
            tls = ("--tls", "--tls-ca", str(certs.ca))
            subprocess.run(
                [sys.executable, "-m", "pyrmq", "admin", "updateTopic", "-n", ns,
                 "-c", "DefaultCluster", "-t", TOPIC, "-r", str(QUEUES), "-w", str(QUEUES),
                 *tls],
                check=True, capture_output=True, timeout=60,
            )  # fmt: skip
            pid = int(srv.info["pid"])
            for on in (False, True):  # warm up both paths (imports, page cache, files)
                pyrmq_json("bench", "produce", "-n", ns, "-t", TOPIC, "-d", "1", "-s", str(body),
                     *(tls if on else ()), timeout=120, server_pid=pid)  # fmt: skip
            rows: list[dict[str, Any]] = []
            for r in range(rounds):
                order = [False, True] if r % 2 == 0 else [True, False]
                row: dict[str, Any] = {}
                for on in order:
                    s = pyrmq_json(
                        "bench", "produce", "-n", ns, "-t", TOPIC, "--mode", "sync",
                        "-d", str(seconds), "-s", str(body), *(tls if on else ()),
                        timeout=seconds + 120, server_pid=pid,
                    )  # fmt: skip
                    p = s["produce"]
                    row["produce_tls" if on else "produce_plain"] = {
                        "msgs_per_s": p["msgs_per_s"],
                        "p50_ms": p["rt_ms"]["p50"],
                        "p99_ms": p["rt_ms"]["p99"],
                        "client_cpu_us_per_msg": 1e6 * s["client_cpu_s"] / max(p["messages"], 1),
                        "server_cpu_us_per_msg": 1e6 * s["server_cpu_s"] / max(p["messages"], 1),
                    }
                for on in order:
                    s = pyrmq_json(
                        "bench", "consume", "-n", ns, "-t", TOPIC, "--consumer", "pull",
                        "--from-beginning", "-b", "32", "-d", str(seconds),
                        *(tls if on else ()),
                        timeout=seconds + 120, server_pid=pid,
                    )  # fmt: skip
                    c = s["consume"]
                    row["consume_tls" if on else "consume_plain"] = {
                        "msgs_per_s": c["msgs_per_s"],
                        "bytes_per_s": c.get("bytes_per_s", 0.0),
                        "client_cpu_us_per_msg": 1e6 * s["client_cpu_s"] / max(c["messages"], 1),
                        "server_cpu_us_per_msg": 1e6 * s["server_cpu_s"] / max(c["messages"], 1),
                    }
                rows.append(row)
                print(f"round {r + 1}/{rounds}: {json.dumps(row)}", file=sys.stderr)
        finally:
            srv.stop()
    return {
        "seconds": seconds,
        "rounds": rounds,
        "body": body,
        "transfer_by_sendfile_min_bytes": sendfile_min_bytes,
        "per_round": rows,
        **_summary(rows),
    }


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for op, fields in (
        (
            "produce",
            ("msgs_per_s", "p50_ms", "p99_ms", "client_cpu_us_per_msg", "server_cpu_us_per_msg"),
        ),
        (
            "consume",
            ("msgs_per_s", "bytes_per_s", "client_cpu_us_per_msg", "server_cpu_us_per_msg"),
        ),
    ):
        for f in fields:
            plain = [r[f"{op}_plain"] for r in rows]
            tls = [r[f"{op}_tls"] for r in rows]
            ratio = paired_ratio(tls, plain, operator.itemgetter(f))
            out[f"{op}.{f}"] = {
                "plain": statistics.median(x[f] for x in plain),
                "tls": statistics.median(x[f] for x in tls),
                "tls_over_plain": round(ratio, 3) if ratio else None,
            }
    return {"median": out}


def render(result: dict[str, Any]) -> str:
    lines = [
        f"TLS vs plain, {result['body']} B bodies, {result['rounds']} rounds of "
        f"{result['seconds']:g} s, transferBySendfileMinBytes="
        f"{result['transfer_by_sendfile_min_bytes'] or 'default'} "
        "(medians; ratio = median of per-round TLS/plain)",
        "",
        "| measure | plain | TLS | TLS/plain |",
        "|---|---:|---:|---:|",
    ]
    for name, v in result["median"].items():
        lines.append(f"| {name} | {v['plain']:,.3f} | {v['tls']:,.3f} | {v['tls_over_plain']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--body", type=int, default=1024)
    p.add_argument(
        "--sendfile-min-bytes",
        type=int,
        default=None,
        help="the broker's transferBySendfileMinBytes (a huge value: plain pulls are copied "
        "too, so the comparison prices the cipher alone)",
    )
    p.add_argument("--out", default=None, help="write the result as JSON here")
    a = p.parse_args(argv)
    result = run(a.seconds, a.rounds, a.body, a.sendfile_min_bytes)
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(result, indent=2))
    print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
