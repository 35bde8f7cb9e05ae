"""The check that no `python -m pyrmq` process outlives the test module that
started it (tests/conftest.py no_leaked_servers, pyrmq.testing.procs)."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap

from pyrmq.testing.cluster import ServerProcess
from pyrmq.testing.procs import argv_of, is_pyrmq_command, pyrmq_children, read_stat

REPO = pathlib.Path(__file__).resolve().parents[1]


def namesrv(workdir: pathlib.Path) -> ServerProcess:
    args = ["namesrv", "--host", "127.0.0.1", "-p", "0"]
    return ServerProcess("namesrv", [*args, "--kv-config", str(workdir / "kv.json")], workdir)


def test_a_server_is_seen_while_it_runs(tmp_path: pathlib.Path) -> None:
    ns = namesrv(tmp_path)
    ns.start()
    try:
        assert ns.proc is not None
        pid = ns.proc.pid
        seen = pyrmq_children()
        assert pid in seen, seen
        assert "namesrv" in seen[pid]
    finally:
        ns.stop()
    assert pid not in pyrmq_children()


def test_only_python_dash_m_pyrmq_counts() -> None:
    assert is_pyrmq_command(["/venv/bin/python", "-m", "pyrmq", "standalone"])
    assert is_pyrmq_command(["python3", "-X", "dev", "-m", "pyrmq", "broker", "-c", "b.conf"])
    assert not is_pyrmq_command(["python", "-m", "pyrmq_other"])
    assert not is_pyrmq_command(["python", "-m", "bench.duel", "pyrmq"])
    assert not is_pyrmq_command(["java", "-cp", "pyrmq", "Main"])
    assert not is_pyrmq_command([])


LEAKY_MODULE = """
import pathlib
import subprocess
import sys


def test_starts_a_name_server_and_forgets_it(tmp_path: pathlib.Path) -> None:
    # plain Popen, in a session of its own: no atexit hook of ours knows it
    args = ["namesrv", "--host", "127.0.0.1", "-p", "0", "--kv-config", str(tmp_path / "kv")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyrmq", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    pathlib.Path({pid_file!r}).write_text(str(proc.pid))
"""


def _state(pid: int) -> str:
    try:
        return read_stat(f"/proc/{pid}/stat")[1][0]
    except FileNotFoundError:
        return "gone"


def test_a_module_that_leaves_a_server_running_errors_and_the_server_ends(
    tmp_path: pathlib.Path,
) -> None:
    """An inner pytest run, with this suite's conftest as a plugin, of a
    module whose test starts a name server and never stops it."""
    pid_file = tmp_path / "leaked.pid"
    module = tmp_path / "test_leaky.py"
    module.write_text(textwrap.dedent(LEAKY_MODULE.format(pid_file=str(pid_file))))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest"]
    cmd += ["--rootdir", str(tmp_path), "--basetemp", str(tmp_path / "tmp"), str(module)]
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path)
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    pid = int(pid_file.read_text())
    try:
        assert r.returncode == 1, out
        assert "1 passed, 1 error" in out, out
        assert "servers left running by this module (now killed)" in out, out
        assert f"{pid}: " in out, out
        # ended by the check (nothing else knew it): gone, or a zombie of init's
        assert _state(pid) in ("gone", "Z"), _state(pid)
    finally:
        if _state(pid) not in ("gone", "Z") and is_pyrmq_command(argv_of(pid)):
            os.kill(pid, signal.SIGKILL)
