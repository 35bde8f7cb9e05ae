"""`pyrmq store ...` and the servers' start-up, run as a user runs them:
real subprocesses, a store written by a real `pyrmq standalone` with the
broker's default geometry (1 GiB CommitLog segments, sparse on disk).

The store tools read the store's geometry from its files and never write:
`dump` works on any store without being told its segment size, and on a
store directory that does not exist it creates nothing. A user's mistake
is answered with one `error: ...` line and exit status 1, never a
traceback."""

from __future__ import annotations

import pathlib
import shutil
import socket
import subprocess
from collections.abc import Iterator

import pytest

from pyrmq.testing.cluster import StandaloneProcess
from tests.client.test_admin_cli import pyrmq


def one_error_line(r: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a refused command (exit status 1)."""
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def default_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pathlib.Path]:
    """A store with the broker's default geometry, written through a real
    standalone and the produce tool, then stopped (by its PID)."""
    work = tmp_path_factory.mktemp("defaults")
    server = StandaloneProcess(work)  # no settings: 1 GiB CommitLog segments
    server.start()
    try:
        for i in range(5):
            r = pyrmq("produce", "-n", server.namesrv, "-t", "DumpT", "--body", f"m{i}", "-q")
            assert r.returncode == 0, r.stderr
    finally:
        assert server.stop() == 0
    yield work / "store"
    # 1 GiB segments, allocated: not kept until the session ends
    shutil.rmtree(work, ignore_errors=True)


def test_store_dump_reads_a_default_geometry_store_without_being_told(default_store):
    seg = next((default_store / "commitlog").iterdir())
    assert seg.stat().st_size == 1 << 30  # the broker's default segment size
    bodies = []
    for q in range(4):  # the auto-created topic's queues (empty ones too)
        r = pyrmq("store", "dump", str(default_store), "--topic", "DumpT", "--queue", str(q))
        assert r.returncode == 0, r.stderr
        got = [line.split("\t")[3] for line in r.stdout.splitlines()]
        assert got or "no messages in DumpT queue" in r.stderr
        bodies += got
    assert sorted(bodies) == [f"b'm{i}'" for i in range(5)]
    # an override that agrees is accepted; one that does not is refused
    r = pyrmq("store", "dump", str(default_store), "--topic", "DumpT", "--segment-mb", "1024")
    assert r.returncode == 0, r.stderr
    line = one_error_line(
        pyrmq("store", "dump", str(default_store), "--topic", "DumpT", "--segment-mb", "64")
    )
    assert "does not match the store" in line and "1024 MiB" in line
    # check agrees, and demo opens the store with its own geometry
    assert pyrmq("store", "check", str(default_store)).returncode == 0
    r = pyrmq("store", "demo", str(default_store), "--count", "10")
    assert r.returncode == 0, r.stderr
    assert pyrmq("store", "check", str(default_store)).returncode == 0


def test_store_tool_mistakes_are_one_line_and_create_nothing(tmp_path, default_store):
    missing = tmp_path / "missing"
    a_file = tmp_path / "a-file"
    a_file.write_text("not a store\n")
    not_a_store = tmp_path / "empty-dir"
    not_a_store.mkdir()
    cases = [
        (("store", "dump", str(missing), "--topic", "T"), "no such directory"),
        (("store", "check", str(missing)), "no such directory"),
        (("store", "dump", str(a_file), "--topic", "T"), "is not a directory"),
        (("store", "check", str(a_file)), "is not a directory"),
        (("store", "demo", str(a_file), "--count", "1"), "is not a directory"),
        (("store", "dump", str(not_a_store), "--topic", "T"), "not a pyrmq store"),
        (("store", "dump", str(default_store), "--topic", "NoSuchT"), "no messages of topic"),
        (("store", "dump", str(default_store), "--topic", "DumpT", "--queue", "-1"), "negative"),
        (("store", "dump", str(default_store), "--topic", "DumpT", "--count", "-1"), ">= 0"),
        (("store", "demo", str(tmp_path / "d"), "--segment-mb", "0"), "positive"),
    ]
    for args, words in cases:
        line = one_error_line(pyrmq(*args))
        assert words in line, (args, line)
    assert not missing.exists(), "a read-only tool created a store"
    assert list(not_a_store.iterdir()) == []


def test_server_start_mistakes_are_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = ["standalone", "--host", "127.0.0.1", "--store", str(tmp_path / "s")]
        args += ["--namesrv-port", str(port), "--broker-port", "0"]
        line = one_error_line(pyrmq(*args))
        assert str(port) in line
    line = one_error_line(pyrmq("broker", "-c", str(tmp_path / "nope.conf")))
    assert "nope.conf" in line
    bad = tmp_path / "bad.conf"
    bad.write_text("flushDiskType=SOMETIMES\n")
    line = one_error_line(pyrmq("broker", "-c", str(bad)))
    assert "flushDiskType" in line
