"""`pyrmq bench` (pyrmq.benchmark): the command run as a subprocess against
a `pyrmq standalone` subprocess, its `--json -` output parsed and checked for
consistency, never for speed; and the latency histogram it counts with.

Runs are fixed counts with a long send deadline (--timeout 30), so a slow
machine makes them slower, not failed. The one duration run asserts only
that it ended and printed. Every subprocess has a timeout; the standalone
server is stopped by its PID."""

from __future__ import annotations

import json
import math
import os
import pathlib
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyrmq import cli
from pyrmq.benchmark.stats import Histogram
from pyrmq.testing.cluster import SMALL_STORE, StandaloneProcess

REPO = pathlib.Path(__file__).resolve().parents[2]
CLI_TIMEOUT = 90.0
SLOW_OK = ("--timeout", "30")  # a send deadline no busy CI machine reaches


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    srv = StandaloneProcess(tmp_path_factory.mktemp("bench-cli"), SMALL_STORE)
    srv.start()
    try:
        yield srv.namesrv
    finally:
        rc = srv.stop()
    assert rc == 0, f"standalone exit status {rc}:\n{srv.log.read_text()[-4000:]}"


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pyrmq", "bench", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )


def bench_json(*args: str) -> dict[str, Any]:
    """Run with `--json -`: JSON on stdout, the table on stderr."""
    r = bench(*args, "--json", "-", "-q")
    assert r.returncode == 0, (args, r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    assert "latency (ms)" in r.stderr  # the table went to stderr
    res: dict[str, Any] = json.loads(r.stdout)
    return res


def assert_latency(ms: dict[str, float]) -> None:
    order = [ms[k] for k in ("min", "p50", "p90", "p99", "p99.9", "max")]
    assert order == sorted(order) and order[0] >= 0, ms
    assert ms["min"] <= ms["avg"] <= ms["max"], ms


def assert_produced(res: dict[str, Any], n: int, size: int = 128) -> None:
    p = res["produce"]
    assert (p["messages"], p["failures"], p["errors"]) == (n, 0, {}), p
    assert p["bytes"] == n * size
    assert p["seconds"] > 0 and p["msgs_per_s"] > 0
    assert_latency(p["rt_ms"])


def consume_all(namesrv: str, topic: str, n: int, *extra: str) -> dict[str, Any]:
    res = bench_json(
        "consume", "-n", namesrv, "-t", topic, "--from-beginning", "--count", str(n),
        "-d", "60", *extra,
    )  # fmt: skip
    c = res["consume"]
    assert c["messages"] >= n, c  # at least: a listener batch may end past --count
    assert_latency(c["born_to_consume_ms"])
    assert not res["interrupted"]
    return c


# -- produce, then consume what it stored ----------------------------------------------------


@pytest.mark.parametrize(
    "mode,batch",
    [("sync", 1), ("async", 1), ("oneway", 1), ("sync", 8), ("async", 8)],
)
def test_produce_fixed_count_then_consume_it(namesrv, mode, batch):
    topic = f"BenchP_{mode}_{batch}"
    n = 400
    res = bench_json(
        "produce", "-n", namesrv, "-t", topic, "--count", str(n), "--mode", mode,
        "-b", str(batch), "-c", "8", *SLOW_OK,
    )  # fmt: skip
    assert res["command"] == "produce" and res["config"]["mode"] == mode
    assert_produced(res, n)
    assert res["produce"]["requests"] == math.ceil(n / batch)  # a batch is one request
    consume_all(namesrv, topic, n)


def test_consume_with_a_lite_pull_consumer(namesrv):
    topic = "BenchPoll"
    res = bench_json(
        "produce", "-n", namesrv, "-t", topic, "--count", "300", "--mode", "async", *SLOW_OK
    )
    assert_produced(res, 300)
    c = consume_all(namesrv, topic, 300, "--consumer", "pull", "-b", "16")
    assert c["bytes"] >= 300 * 128


def test_produce_for_a_duration_prints_live_lines_and_a_table(namesrv, tmp_path):
    out = tmp_path / "res.json"
    r = bench(
        "produce", "-n", namesrv, "-t", "BenchDur", "-d", "1.5", "--mode", "async",
        "-c", "16", "-s", "64", "--json", str(out), *SLOW_OK,
    )  # fmt: skip
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "Send TPS:" in r.stderr and "Avg RT(ms):" in r.stderr  # not a TTY: plain lines
    assert "\r" not in r.stderr  # no progress bar off a terminal
    head = r.stdout.splitlines()
    assert head[0].startswith("produce BenchDur: 64 B bodies, --mode async")
    assert "msgs/s" in r.stdout and "send RT" in r.stdout
    res = json.loads(out.read_text())
    p = res["produce"]
    assert p["messages"] > 0 and p["failures"] == 0 and p["bytes"] == p["messages"] * 64
    assert res["timeline"] and res["timeline"][0]["second"] == 1
    assert res["config"]["duration"] == 1.5 and res["config"]["count"] is None


def test_count_runs_show_progress_without_a_terminal(namesrv):
    r = bench("produce", "-n", namesrv, "-t", "BenchProg", "--count", "200", *SLOW_OK)
    assert r.returncode == 0, r.stderr
    assert "\r" not in r.stderr and "sent" in r.stdout


def test_processes_split_the_count_and_merge_the_results(namesrv):
    topic = "BenchProcs"
    res = bench_json(
        "produce", "-n", namesrv, "-t", topic, "--count", "601", "--processes", "2",
        "--mode", "async", "-c", "16", *SLOW_OK,
    )  # fmt: skip
    assert_produced(res, 601)
    assert res["config"]["processes"] == 2
    consume_all(namesrv, topic, 601, "--processes", "2")


# -- e2e --------------------------------------------------------------------------------------


def test_e2e_fixed_count_loses_nothing(namesrv):
    res = bench_json(
        "e2e", "-n", namesrv, "-t", "BenchE2E", "--count", "500", "--rate", "1000",
        "-s", "100", *SLOW_OK,
    )  # fmt: skip
    e = res["e2e"]
    assert (e["sent"], e["acknowledged"], e["failures"]) == (500, 500, 0), e
    assert (e["consumed"], e["lost"], e["duplicates"]) == (500, 0, 0), e
    assert e["rate_target"] == 1000 and e["rate_achieved"] > 0
    assert_latency(e["latency_ms"])
    assert res["consume"]["messages"] == 500 and res["consume"]["bytes"] == 500 * 100
    assert res["consume"]["latency_ms"] == e["latency_ms"]
    assert_produced(res, 500, size=100)


def test_e2e_for_a_duration_on_a_topic_it_creates(namesrv):
    # a new topic: e2e creates it with one message before it measures; a
    # body smaller than the stamp (24 bytes) grows to it
    res = bench_json(
        "e2e", "-n", namesrv, "-t", "BenchE2ENew", "-d", "1", "--rate", "200", "-s", "8",
        *SLOW_OK,
    )  # fmt: skip
    e = res["e2e"]
    assert e["sent"] > 0 and e["failures"] == 0
    assert e["lost"] == 0 and e["consumed"] == e["acknowledged"] == e["sent"], e
    assert e["other_messages"] == 0  # the creating message is before the group's start
    assert res["consume"]["bytes"] == e["consumed"] * 24
    assert_latency(e["latency_ms"])


# -- errors -----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


BAD_OPTIONS = [
    (["produce", "--mode", "bogus"], "invalid choice: 'bogus'"),
    (["produce", "-s", "0"], "-s/--body-size: 0 must be >= 1"),
    (["produce", "--count", "x"], "'x' is not an integer"),
    (["produce", "-d", "-1"], "-1 must be >= 0"),
    (["produce", "--mode", "oneway", "-b", "4"], "--mode oneway sends single messages"),
    (["produce", "-b", "1024", "-s", "8192"], "a request carries at most"),
    (["produce", "--count", "1", "--processes", "2"], "--processes must not exceed"),
    (["consume", "--rate", "5"], "unrecognized arguments: --rate 5"),
    (["e2e", "--processes", "2"], "unrecognized arguments: --processes 2"),
    (["bogus"], "invalid choice: 'bogus'"),
]


@pytest.mark.parametrize("args,text", BAD_OPTIONS)
def test_bad_options_exit_1_with_one_error_line(args, text, capsys):
    """In this process (cli.main), as the command parses them."""
    try:
        rc = cli.main(["bench", *args])
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    assert rc == 1, (args, rc, out, err)
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and lines[0].startswith("error: "), err
    assert text in lines[0]


def test_a_bad_option_from_the_command_line():
    r = bench("produce", "--mode", "oneway", "--batch-size", "8")
    assert (r.returncode, r.stdout) == (1, "")
    assert r.stderr == "error: --mode oneway sends single messages: leave --batch-size at 1\n"


def test_unreachable_name_server_and_missing_topic_fail_clearly(namesrv):
    dead = f"127.0.0.1:{_free_port()}"
    for args in (
        ["produce", "-n", dead, "-d", "1"],
        ["consume", "-n", dead, "-d", "1"],
        ["e2e", "-n", dead, "-d", "1"],
        ["consume", "-n", namesrv, "-t", "BenchNoSuchTopic", "-d", "1"],
    ):
        r = bench(*args)
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert r.stderr.strip().splitlines()[-1].startswith("error: "), r.stderr
        assert "Traceback" not in r.stderr
    assert "does not exist" in r.stderr


# -- the histogram ------------------------------------------------------------------------


def _exact(values: list[int], q: float) -> int:
    s = sorted(values)
    return s[max(1, math.ceil(q * len(s))) - 1]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 10**9), min_size=1, max_size=300),
    st.lists(st.integers(0, 10**6), max_size=100),
)
def test_histogram_percentiles_are_within_its_bucket_width_and_merge(a, b):
    ha, hb, hall = Histogram(), Histogram(), Histogram()
    for v in a:
        ha.record(v)
        hall.record(v)
    for v in b:
        hb.record(v)
        hall.record(v)
    ha.merge(hb)
    assert ha.state() == hall.state()
    values = a + b
    assert (ha.n, ha.sum, ha.min, ha.max) == (len(values), sum(values), min(values), max(values))
    for q in (0.5, 0.9, 0.99, 0.999):
        got, want = ha.percentile(q), _exact(values, q)
        assert abs(got - want) <= max(1.0, want / 64), (q, got, want)
    assert ha.percentile(1.0) == max(values)
    assert Histogram.from_state(json.loads(json.dumps(ha.state()))).state() == ha.state()
