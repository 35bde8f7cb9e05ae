"""What ACL 1.0 costs a send: the same `pyrmq bench produce` load against a
broker without ACL and one with ``aclEnable=true``, in one run.

Two ``pyrmq standalone`` (ASYNC_FLUSH, fresh stores). The ACL broker's
plain_acl.yml has an admin account and the producer's account (PUB on the
topic, defaults DENY), so every request is signed by the client and checked
by the broker (signature, account, right). The producer signs with the
credentials in ROCKETMQ_ACCESS_KEY / ROCKETMQ_SECRET_KEY, as a user would.

Cases: ``sync`` (64 coroutines each awaiting its send) and ``async`` (64
sends in flight), each against both brokers, ``--rounds`` times, every other
round in reverse order. Per case: the median msg/s and RT percentiles, the
ratio of ACL to no ACL taken round by round (then the median, so the
machine's own load swings cancel), and the client's and broker's CPU per
acknowledged message. Every acknowledged message must be in its topic.

    python -m bench.acl_cost --out DIR [--seconds 5] [--rounds 3] [--body 128]

Writes DIR/acl_cost.json and prints a Markdown table."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
from bench._runs import paired_ratio, pyrmq_json
from pyrmq.acl.signing import ENV_ACCESS_KEY, ENV_SECRET_KEY

TOPIC = "BenchAcl"
QUEUES = 8
ADMIN = ("benchAdmin1", "benchAdminSecret")
PRODUCER = ("benchProducer", "benchProducerSecret")
PLAIN_ACL = f"""
accounts:
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
  - accessKey: {PRODUCER[0]}
    secretKey: {PRODUCER[1]}
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - {TOPIC}=PUB|SUB
"""
CASES = ("sync", "acl_sync", "async", "acl_async")


def produce(namesrv: str, mode: str, seconds: float, body: int, acl: bool) -> dict[str, Any]:
    """One `pyrmq bench produce` run, signed with the producer account when
    `acl` (through the environment, as a user would): its summary with the
    client's CPU seconds."""
    env = dict(os.environ)
    env.pop(ENV_ACCESS_KEY, None)
    env.pop(ENV_SECRET_KEY, None)
    if acl:
        env[ENV_ACCESS_KEY], env[ENV_SECRET_KEY] = PRODUCER
    summary = pyrmq_json("bench", "produce", "-n", namesrv, "-t", TOPIC, "--mode", mode,
                         "-d", str(seconds), "-s", str(body),
                         timeout=seconds + 120, env=env)  # fmt: skip
    return dict(summary["produce"], client_cpu_s=summary["client_cpu_s"])


async def _admin(namesrv: str, broker: str, what: str) -> int:
    from pyrmq.admin import AdminClient

    async with AdminClient(namesrv, access_key=ADMIN[0], secret_key=ADMIN[1]) as admin:
        if what == "create":
            await admin.create_topic(TOPIC, QUEUES, QUEUES, broker_addr=broker)
            return 0
        status = await admin.topic_status(TOPIC)
        return sum(q.max_offset for q in status.queues)


def run(out: pathlib.Path, seconds: float, rounds: int, body: int) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in CASES}
    with tempfile.TemporaryDirectory() as d, contextlib.ExitStack() as stack:
        acl_file = pathlib.Path(d) / "plain_acl.yml"
        acl_file.write_text(PLAIN_ACL)
        acl_conf = {"aclEnable": "true", "aclPlainFile": acl_file}
        srvs = {
            "plain": stack.enter_context(bl.standalone(d)),
            "acl": stack.enter_context(bl.standalone(d, conf=acl_conf)),
        }
        for name, srv in srvs.items():
            asyncio.run(_admin(srv.namesrv, srv.broker, "create"))
            bl.wait_route(srv.namesrv, TOPIC)
            del name
        for n in range(rounds):
            for case in CASES if n % 2 == 0 else CASES[::-1]:
                acl = case.startswith("acl_")
                srv = srvs["acl" if acl else "plain"]
                b0 = srv.cpu_s()
                s = produce(srv.namesrv, case.removeprefix("acl_"), seconds, body, acl)
                s["broker_cpu_s"] = srv.cpu_s() - b0
                if s["failures"]:
                    raise RuntimeError(f"{case}: {s['failures']} sends failed")
                runs[case].append(s)
                print(f"{case}: {s['msgs_per_s']:,.0f} msg/s, p50 {s['rt_ms']['p50']} ms",
                      file=sys.stderr)  # fmt: skip
        acked = {b: sum(r["messages"] for c, rs in runs.items()
                        if c.startswith("acl_") == (b == "acl") for r in rs)
                 for b in srvs}  # fmt: skip
        deadline = time.monotonic() + 30
        in_topic: dict[str, int] = {}
        while time.monotonic() < deadline:
            in_topic = {b: asyncio.run(_admin(s.namesrv, s.broker, "count"))
                        for b, s in srvs.items()}  # fmt: skip
            if in_topic == acked:
                break
            time.sleep(0.2)
    if in_topic != acked:
        raise RuntimeError(f"acknowledged {acked}, in the topics {in_topic}")
    rows = {}
    for case, rs in runs.items():
        n = sum(r["messages"] for r in rs) or 1
        twin = runs[case.removeprefix("acl_")]
        rows[case] = {
            "msgs_per_s": statistics.median(r["msgs_per_s"] for r in rs),
            "rt_p50_ms": statistics.median(r["rt_ms"]["p50"] for r in rs),
            "rt_p99_ms": statistics.median(r["rt_ms"]["p99"] for r in rs),
            "rounds": [r["msgs_per_s"] for r in rs],
            "vs_no_acl": paired_ratio(rs, twin, lambda x: x["msgs_per_s"]),
            "p50_vs_no_acl": paired_ratio(rs, twin, lambda x: x["rt_ms"]["p50"]),
            "client_cpu_us": sum(r["client_cpu_s"] for r in rs) / n * 1e6,
            "broker_cpu_us": sum(r["broker_cpu_s"] for r in rs) / n * 1e6,
        }
    result = {"seconds": seconds, "rounds": rounds, "body": body, "acked": acked,
              "cases": rows}  # fmt: skip
    (out / "acl_cost.json").write_text(json.dumps(result, indent=2))
    print(render(result))
    return result


def render(result: dict[str, Any]) -> str:
    lines = [
        f"Sends of {result['body']} B, 64 coroutines or sends in flight, "
        f"{result['seconds']:.0f} s x {result['rounds']} rounds per case (medians; ratios: "
        "the median of the rounds' ratios to the same mode without ACL)",
        "",
        "| case | msg/s | msg/s vs no ACL | RT p50 ms | p50 vs no ACL | RT p99 ms "
        "| client CPU µs/msg | broker CPU µs/msg |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case, r in result["cases"].items():
        lines.append(
            f"| {case} | {r['msgs_per_s']:,.0f} | {r['vs_no_acl']:.2f} | {r['rt_p50_ms']:.2f} | "
            f"{r['p50_vs_no_acl']:.2f} | {r['rt_p99_ms']:.2f} | {r['client_cpu_us']:.1f} | "
            f"{r['broker_cpu_us']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=pathlib.Path, required=True)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--rounds", type=int, default=3)
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
