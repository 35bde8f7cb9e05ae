"""A crashing row runner costs its own row only (issue 14).

The "peer client" here is a real child process that crashes as the C++
client did (SIGABRT, returncode -6), before or after printing its result;
the broker in the matrix test is a real ``pyrmq standalone``. Also: the
report marks a row that says most of what was sent was not stored as
FAILED instead of printing it as a figure."""

from __future__ import annotations

import json
import pathlib
import signal
import sys
from typing import Any

import pytest

from bench import _report, broker_report
from bench import broker_load as bl

RESULT = {"mode": "oneway", "server_msgs_per_s": 1234.5}


def child(tmp_path: pathlib.Path, body: str) -> list[str]:
    """A Python child running `body`, which may use `runs` (how many times
    this command has run before, kept in a file)."""
    counter = tmp_path / "runs"
    prog = (
        "import json, os, pathlib, sys\n"
        f"p = pathlib.Path({str(counter)!r})\n"
        "runs = int(p.read_text()) if p.exists() else 0\n"
        "p.write_text(str(runs + 1))\n" + body
    )
    return [sys.executable, "-c", prog]


def runs(tmp_path: pathlib.Path) -> int:
    return int((tmp_path / "runs").read_text())


def test_abort_twice_fails_the_row_with_the_reason(tmp_path: pathlib.Path) -> None:
    r = bl.isolated_row(child(tmp_path, "os.abort()\n"), timeout=30)
    assert runs(tmp_path) == 2  # retried once, not more
    assert r["row_failed"] == "C++ client aborted (SIGABRT) twice"
    assert len(r["attempts"]) == 2


def test_abort_after_the_result_keeps_it(tmp_path: pathlib.Path) -> None:
    body = f"print(json.dumps({RESULT!r}), flush=True)\nos.abort()\n"
    r = bl.isolated_row(child(tmp_path, body), timeout=30)
    assert runs(tmp_path) == 1  # the output was complete: no retry
    assert r["server_msgs_per_s"] == 1234.5 and not r.get("row_failed")
    assert r["child_exit"] == -signal.SIGABRT
    assert "aborted (SIGABRT) after printing its result" in r["note"]


def test_truncated_output_then_success_is_retried(tmp_path: pathlib.Path) -> None:
    body = (
        "if runs == 0:\n"
        '    print(\'{"mode": "one\', flush=True)\n'  # cut short, then killed
        "    os.kill(os.getpid(), 9)\n"
        f"print(json.dumps({RESULT!r}))\n"
    )
    r = bl.isolated_row(child(tmp_path, body), timeout=30)
    assert runs(tmp_path) == 2
    assert r["server_msgs_per_s"] == 1234.5 and r["retried"] == ["killed by SIGKILL"]


def test_timeout_and_clean_exit_without_result(tmp_path: pathlib.Path) -> None:
    body = "import time\nif runs == 0:\n    time.sleep(30)\n"
    r = bl.isolated_row(child(tmp_path, body), timeout=1, who="peer")
    assert r["row_failed"] == "peer: timed out after 1 s; then exited 0 without a result"


def test_crashing_peer_costs_only_its_row(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Section e of the broker report against a real broker, where the C++
    producer of one mode is a child that aborts every time: that row is
    FAILED with the reason, every other row (producer modes, consumer) is
    measured, and the report and its JSON list the failed row."""
    pytest.importorskip("rocketmq.client", reason="the C++ client (rocketmq==0.4.4)")
    real = bl.cpp_producer
    crash = child(
        tmp_path, "import sys\nsys.stderr.write('boost::thread_interrupted\\n')\nos.abort()\n"
    )

    def cpp_producer(srv: bl.Server, topic: str, queues: int, mode: str, *a: Any) -> Any:
        if mode == "async":
            return {"mode": mode, "threads": 4, "body_len": a[-1], **bl.isolated_row(crash, 30)}
        return real(srv, topic, queues, mode, *a)

    monkeypatch.setattr(bl, "cpp_producer", cpp_producer)
    monkeypatch.setattr(broker_report, "FAILED_ROWS", [])
    b = broker_report.Budget.make(True)
    b = broker_report.dataclasses.replace(
        b, matrix_s=0.3, matrix_warmup_s=0.2, matrix_consume_msgs=400, matrix_consume_bytes=1 << 20
    )
    with bl.standalone(str(tmp_path), "ASYNC_FLUSH") as srv:
        matrix = broker_report.run_cpp_matrix(b, srv, "ASYNC_FLUSH", (128,))
    assert [r["mode"] for r in matrix] == ["sync", "async", "batch", "oneway", "consume"]
    failed = [r for r in matrix if r.get("row_failed")]
    assert [r["mode"] for r in failed] == ["async"], matrix
    assert failed[0]["row_failed"] == "C++ client aborted (SIGABRT) twice"
    assert runs(tmp_path) == 2
    for r in matrix:
        if r["mode"] in ("sync", "batch", "oneway"):
            assert r["server_msgs_per_s"] > 0, r
    assert matrix[-1]["msgs"] == matrix[-1]["expected"], matrix[-1]
    rows = broker_report.build_rows(100.0, {}, [], {}, [], matrix)
    bad = [r for r in rows if r.value == "FAILED"]
    assert len(bad) == 1 and "aborted (SIGABRT) twice" in bad[0].met
    assert broker_report.failed_rows(rows) == [
        "e C++ client send_async, 4 threads, 128 B, ASYNC_FLUSH: C++ client aborted (SIGABRT) twice"
    ]
    doc = {"parts": {"2": {"systems": {}, "broker_report": {"failed_rows": ["x"]}}}}
    assert _report.failed_rows(doc) == ["broker_report: x"]


def test_raising_row_runner_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(broker_report, "FAILED_ROWS", [])

    def boom() -> None:
        raise RuntimeError("pulled 10 of 20")

    assert broker_report.isolated("c", "pull throughput", boom) is None
    assert broker_report.isolated("c", "fine", lambda x: x + 1, 1) == 2
    rows = broker_report.build_rows(100.0, {}, [], {}, [], [])
    assert broker_report.failed_rows(rows) == ["c pull throughput: RuntimeError: pulled 10 of 20"]


def test_report_refuses_an_impossible_row() -> None:
    """The reference run's row: 1 of 524,288 stored. It is not a figure."""
    lost = {
        "case": "oneway",
        "body": 1024,
        "messages": 1,
        "msgs_per_s": 0.2,
        "MBps": 0.0,
        "client_us_per_msg": 12e6,
        "client_cpu_share": 1.0,
        "server_cpu_share": 0.02,
        "sent": 524288,
        "lost": 524287,
    }
    fine = {**lost, "messages": 524288, "msgs_per_s": 50_000.0, "lost": 0}
    some = {**fine, "lost": 10}
    assert _report.row_failure(fine) is None and _report.row_failure(some) is None
    assert "524,287 of 524,288 not stored" in (_report.row_failure(lost) or "")
    doc = {
        "suite": {"budget": {"sizes": [1024]}},
        "parts": {"2": {"systems": {"pyrmq": {"system": "pyrmq", "rows": [lost]}}}},
    }
    md = _report.render(doc)
    assert "**Failed rows**" in md
    ok = _report.system_md({"rows": [fine]})
    assert "| oneway | 1024 | 50,000 |" in ok and "524,288 of 524,288 stored" in ok
    assert "| oneway, msgs/s | **FAILED** |" in md
    assert "| oneway | 1024 | **FAILED** |" in md
    assert "| oneway | 1024 | 0 |" not in md
    json.dumps(doc)


def test_send_rows_and_capacity_targets() -> None:
    """Section b's rows: the C send path against issue 18's goals, and the
    Python send path measured beside it as its reference."""

    def send(server: str, flush: str, rate: float) -> dict[str, Any]:
        return {"server": server, "flush": flush, "body_len": 128, "shape": "pipelined",
                "procs": 2, "conns": 4, "window": 256, "msgs_per_s": rate, "MBps": 1.0,
                "server_cpu_us_per_msg": 3.0, "server_cpu_util": 1.0, "bad": 0}  # fmt: skip

    sends = [
        send("pyrmq", "ASYNC_FLUSH", 300_000.0),
        send("python", "ASYNC_FLUSH", 100_000.0),
        send("pyrmq", "SYNC_FLUSH", 140_000.0),
    ]
    rows = broker_report.build_rows(100.0, {}, sends, {}, [], [])
    (py,) = [r for r in rows if "every send in Python" in r.measurement]
    assert py.ratio == "3.00x faster in C" and "300,000" in py.reference
    doc = {"parts": {"2": {"broker_report": {"send": sends}}}}
    met = {t["target"].split(",")[1].strip(): t["met"] for t in _report.capacity_targets(doc)}
    assert met == {"ASYNC_FLUSH": True, "SYNC_FLUSH": False}
