"""A test run stopped with SIGTERM ends the servers its tests started
(tests/conftest.py turns SIGTERM into an interrupt; pyrmq.testing.cluster's
atexit handler ends what is still running)."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

REPO = pathlib.Path(__file__).resolve().parent.parent

CHILD = """
import pathlib
import time

from pyrmq.testing.cluster import ServerProcess


def test_starts_a_server_and_waits(tmp_path):
    p = ServerProcess("namesrv", ["namesrv", "--host", "127.0.0.1", "-p", "0"], tmp_path)
    p.start()
    pathlib.Path({pidfile!r}).write_text(str(p.proc.pid))
    for _ in range(600):
        time.sleep(0.5)
"""


def _alive(pid: int) -> bool:
    """Running (a zombie, ended but not yet reaped by whoever adopted it,
    is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_sigterm_to_a_test_run_ends_the_servers_it_started(tmp_path: pathlib.Path) -> None:
    pidfile = tmp_path / "server.pid"
    child = tmp_path / "test_child.py"
    child.write_text(textwrap.dedent(CHILD.format(pidfile=str(pidfile))))
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(child)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    server = None
    try:
        for _ in range(1200):  # the server up: 120 s at most
            if pidfile.exists() and pidfile.read_text():
                server = int(pidfile.read_text())
                break
            assert run.poll() is None, run.communicate()[0].decode()
            time.sleep(0.1)
        assert server is not None, "the child run never started its server"
        assert _alive(server)
        run.send_signal(signal.SIGTERM)
        out = run.communicate(timeout=60)[0].decode()
        for _ in range(300):  # ended by the run's exit: 30 s at most
            if not _alive(server):
                break
            time.sleep(0.1)
        assert not _alive(server), f"the server outlived the stopped run:\n{out}"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(10)
        if server is not None and _alive(server):
            os.kill(server, signal.SIGKILL)


def test_a_process_the_tests_fork_dies_of_sigterm() -> None:
    """Only the test run turns SIGTERM into an interrupt: a forked child
    (a benchmark's load process) ends as by default, also while blocked."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: say it runs, then block until killed
        try:
            os.close(r)
            os.write(w, b"x")
            time.sleep(60)
        finally:
            os._exit(3)  # reached only if SIGTERM raised in the child
    os.close(w)
    try:
        assert os.read(r, 1) == b"x"
        os.kill(pid, signal.SIGTERM)
        status = None
        for _ in range(300):  # 30 s at most
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError("the forked child outlived SIGTERM by 30 s")
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, status
    finally:
        os.close(r)
