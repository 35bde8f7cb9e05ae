"""The exporter's settings at startup: a bad exporter type or a taken port
stops the server with one error line (no traceback); the name server's
endpoint from its command line, with a real broker registering."""

from __future__ import annotations

import asyncio
import pathlib
import socket
import subprocess
import sys

from pyrmq.testing.cluster import SMALL_STORE, ServerProcess
from tests._waiting import wait_until

from ._scrape import scrape, series, total

REPO = pathlib.Path(__file__).resolve().parents[2]


def _pyrmq(*args: str, cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pyrmq", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        check=False,
    )


def _broker_conf(tmp: pathlib.Path, **keys: object) -> pathlib.Path:
    settings = {
        **SMALL_STORE,
        "listenPort": 0,
        "listenHost": "127.0.0.1",
        "brokerIP1": "127.0.0.1",
        "storePathRootDir": tmp / "store",
        **keys,
    }
    conf = tmp / "broker.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return conf


def _one_error_line(r: subprocess.CompletedProcess[str], *words: str) -> str:
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, r.stderr
    assert all(w in errors[0] for w in words), errors[0]
    return errors[0]


def test_bad_exporter_type_is_one_line(tmp_path: pathlib.Path) -> None:
    conf = _broker_conf(tmp_path, metricsExporterType="PROMETHEUS")
    line = _one_error_line(_pyrmq("broker", "-c", str(conf), cwd=tmp_path), "metricsExporterType")
    assert "PROM" in line
    r = _pyrmq(
        "namesrv", "--host", "127.0.0.1", "-p", "0", "--metrics-exporter-type", "OTLP",
        cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "--metrics-exporter-type: invalid choice: 'OTLP'" in r.stderr
    ns_conf = tmp_path / "namesrv.conf"
    ns_conf.write_text("metricsExporterType=OTLP_GRPC\n")
    r = _pyrmq("namesrv", "--host", "127.0.0.1", "-p", "0", "-c", str(ns_conf), cwd=tmp_path)
    _one_error_line(r, "metricsExporterType=OTLP_GRPC", "PROM only")


def test_taken_port_is_one_line(tmp_path: pathlib.Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        conf = _broker_conf(
            tmp_path,
            metricsExporterType="PROM",
            metricsPromExporterHost="127.0.0.1",
            metricsPromExporterPort=port,
        )
        r = _pyrmq("broker", "-c", str(conf), cwd=tmp_path)
        _one_error_line(r, "metricsPromExporterPort", f"127.0.0.1:{port}")
        r = _pyrmq(
            "namesrv", "--host", "127.0.0.1", "-p", "0",
            "--metrics-exporter-type", "PROM",
            "--metrics-prom-exporter-host", "127.0.0.1",
            "--metrics-prom-exporter-port", str(port),
            cwd=tmp_path,
        )  # fmt: skip
        _one_error_line(r, "metricsPromExporterPort", f"127.0.0.1:{port}")


def test_name_server_endpoint(tmp_path: pathlib.Path) -> None:
    ns_conf = tmp_path / "namesrv.conf"
    ns_conf.write_text("metricsRpcLatencySampleEvery=1\n")  # time every request
    ns = ServerProcess(
        "namesrv",
        [
            "namesrv", "--host", "127.0.0.1", "-p", "0", "-c", str(ns_conf),
            "--kv-config", str(tmp_path / "kv.json"),
            "--metrics-exporter-type", "PROM",
            "--metrics-prom-exporter-host", "127.0.0.1",
            "--metrics-prom-exporter-port", "0",
        ],
        tmp_path,
    )  # fmt: skip
    ns.start()
    broker = None
    try:
        maddr = str(ns.info["metrics"])
        text = scrape(maddr)
        assert total(text, "pyrmq_namesrv_brokers") == 0
        conf = _broker_conf(tmp_path, namesrvAddr=ns.info["namesrv"])
        broker = ServerProcess("broker", ["broker", "-c", str(conf)], tmp_path)
        broker.start()
        assert "metrics" not in broker.info  # the broker's own is off

        async def registered() -> bool:
            text = await asyncio.get_running_loop().run_in_executor(None, scrape, maddr)
            return total(text, "pyrmq_namesrv_brokers") == 1

        asyncio.run(wait_until(registered, "the broker registered", stall_after=30))
        text = scrape(maddr)
        # REGISTER_BROKER (103) answered SUCCESS, labelled as RocketMQ's name server
        assert total(text, "rocketmq_rpc_latency_count", request_code="103", response_code="0") >= 1
        assert total(text, "pyrmq_namesrv_topics") >= 1
        [(labels, _)] = series(text, "pyrmq_namesrv_topics")
        assert (labels["node_type"], labels["node_id"]) == ("nameserver", ns.info["namesrv"])
    finally:
        if broker is not None:
            broker.stop()
        ns.stop()
