"""Interop tests: the real RocketMQ C++ client against ``pyrmq standalone``.

The client is the PyPI wheel ``rocketmq==0.4.4``: a ctypes wrapper (``rocketmq/client.py``,
``rocketmq/ffi.py``) over a bundled ``librocketmq.so``, a rocketmq-client-cpp 1.2.x-era
build (see docs §0 of rocketmq-remoting-protocol.md). Facts about its API, read from the
installed source and checked against the library's exports:

* ``Producer(group_id, timeout=None, compress_level=None, max_message_size=None)``;
  ``set_namesrv_addr("ip:port")`` (not set_name_server_address), ``start()``,
  ``shutdown()``. No setter for the instance name in Python; the C symbol
  ``SetProducerInstanceName`` is exported, and ``cpp.Clients`` calls it.
* ``send_sync(msg)`` and ``send_orderly(...)`` return ``SendResult(status, msg_id, offset)``
  (a namedtuple): ``status`` is ``SendStatus`` (OK=0, FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT,
  SLAVE_NOT_AVAILABLE); ``msg_id`` is the client-made UNIQ_KEY (32 hex chars), not the
  broker's offsetMsgId; ``offset`` is the queue offset. There is **no queue id** in it.
* ``send_oneway(msg)`` returns None. ``send_async(msg, on_success, on_exception)`` exists.
* ``send_batch([Message, ...])`` **exists** in 0.4.4. It goes out as SEND_MESSAGE with
  ``batch="1"``; its SendResult has ``msg_id == ""`` (the outer message has no UNIQ_KEY) and
  the queue offset of the first message.
* ``send_orderly(msg, arg: int, retry_times=3, queue_selector=hashing_queue_selector)``:
  ``arg`` must be an int (it is passed to C as ``int*``); the selector is called as
  ``selector(mq_size, RecvMessage, c_void_p)`` and the default returns ``arg % mq_size``.
  ``send_oneway_orderly(msg, arg, queue_selector)`` also exists.
* ``Message(topic)``: ``set_keys``, ``set_tags``, ``set_body``, ``set_property(k, v)``,
  ``set_delay_time_level(n)``. ``set_body`` passes a ``c_char_p``, so a body is cut at its
  first NUL; the exported ``SetByteMessageBody(msg, buf, len)`` is not wrapped and
  ``cpp.make_message(binary=True)`` calls it. No ``set_flag``.
* ``RecvMessage``: ``topic`` (str), ``tags``/``keys``/``body`` (**bytes**, via c_char_p, so
  a received body is also cut at its first NUL; there is no body-length getter: the tests
  send the length in a user property and read the raw pointer), ``id`` (UNIQ_KEY),
  ``queue_id``, ``queue_offset``, ``reconsume_times``, ``born_timestamp``,
  ``store_timestamp`` (ms), ``commit_log_offset``, ``store_size``, ``delay_time_level``,
  ``get_property(name)`` (bytes, ``b""`` when absent). The handle is only valid inside
  the callback.
* ``PushConsumer(group_id, orderly=False, message_model=MessageModel.CLUSTERING)``;
  ``set_message_model``, ``set_instance_name``, ``set_thread_count``,
  ``set_message_batch_max_size``; ``subscribe(topic, callback, expression='*')`` must come
  before ``start()``. **No consume-from-where setter**: a new group uses
  CONSUME_FROM_LAST_OFFSET, so tests start consumers and wait until they pull
  (``cpp.settle``) before producing.
* The listener cannot ask for RECONSUME_LATER through the public API in a defined way:
  ``subscribe`` ignores the callback's return value, and an exception is re-raised inside
  the ctypes callback (its ``finally`` overrides the ``return RECONSUME_LATER``); ctypes
  prints it as unraisable and the C side reads an uninitialised return value (it happened
  to be non-zero, i.e. a retry, when tried here). ``ConsumeStatus`` is not exported either
  (only the private ``ffi._CConsumeStatus``: CONSUME_SUCCESS=0, RECONSUME_LATER=1).
  ``cpp.Clients.push_consumer`` registers its own ctypes callback that returns the status.
  ``reconsume_times`` is a property of the received message; a retried message is shown
  under its original topic, with the ``RETRY_TOPIC`` property set.
* ``PullConsumer(group_id)``; ``pull(topic, expression='*', max_num=32)`` is a generator
  that walks every queue from the offsets in ``PullConsumer.offset_table``, a **class
  attribute shared by all instances**, keyed ``"topic@queueId"``, until NO_NEW_MSG, and
  retries a BROKER_TIMEOUT forever. ``cpp.pull_walk`` does the same walk bounded in time.
  ``FetchSubscriptionMessageQueues`` returns OK with zero queues when the topic has no
  route (DefaultMQPullConsumer logs and swallows the error).
* Every client logs to ``~/logs/rocketmq-cpp/<pid>_rocketmq-cpp.log.0``
  (``SetProducerLogPath`` does not move it); its tail is attached to failing reports.
* Its shutdown can abort the whole process (SIGABRT on one of its own threads: the
  benchmarks saw ``boost::thread_interrupted``; one CI run died inside
  ``PullConsumer.shutdown`` with no Python frame current). Nothing in Python can catch
  it, so the tests load the client only where it is the judge (the 5.x SDK tests ask
  pyrmq's AdminClient for routes: ``sdk5.wait_readable_queues``), and ``.ci/run`` prints
  the tail of that log when pytest dies of a signal.

The server is started as ``python -m pyrmq standalone --store DIR --namesrv-port P
--broker-port P --host 127.0.0.1 --ready-file FILE`` and writes
``{"namesrv": "ip:port", "broker": "ip:port", "pid": N}`` to FILE once both listen.
SIGTERM stops it cleanly with exit status 0. Topics are created explicitly with
``python -m pyrmq admin update-topic -n NAMESRV -b BROKER -t TOPIC --read-queues N
--write-queues N``. The environment variable ``PYRMQ_INTEROP_SERVER`` replaces
``python -m pyrmq`` in the first command (for example to run the suite against another
implementation of the same command line).
"""

from __future__ import annotations

import atexit
import json
import os
import pathlib
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
READY_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0

_LIVE: list[StandaloneServer] = []


@atexit.register
def _kill_leftovers() -> None:
    """If pytest exits without running teardown, SIGKILL the servers it started (only those:
    each runs in its own session, so nothing else would stop them)."""
    for srv in list(_LIVE):
        if srv.proc is not None and srv.proc.poll() is None:
            srv.proc.kill()


def _tail(path: pathlib.Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<{path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


def client_log_path() -> pathlib.Path:
    return pathlib.Path.home() / "logs" / "rocketmq-cpp" / f"{os.getpid()}_rocketmq-cpp.log.0"


class StandaloneServer:
    """One ``pyrmq standalone`` process (NameServer + Broker) over a store directory."""

    def __init__(self, workdir: pathlib.Path, name: str, extra_args: tuple[str, ...] = ()):
        self.name = name
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.store = workdir / "store"
        self.log_path = workdir / "server.log"
        self.ready_path = workdir / "ready.json"
        self.extra_args = extra_args
        self.proc: subprocess.Popen[bytes] | None = None
        self.namesrv = ""
        self.broker = ""
        #: the gRPC proxy's host:port when started with --enable-proxy
        self.grpc = ""
        self.starts = 0

    def start(self, namesrv_port: int = 0, broker_port: int = 0) -> None:
        assert self.proc is None, "already running"
        self.ready_path.unlink(missing_ok=True)
        prefix = shlex.split(os.environ.get("PYRMQ_INTEROP_SERVER", ""))
        cmd = [
            *(prefix or [sys.executable, "-m", "pyrmq"]), "standalone",
            "--store", str(self.store),
            "--namesrv-port", str(namesrv_port),
            "--broker-port", str(broker_port),
            "--host", "127.0.0.1",
            "--ready-file", str(self.ready_path),
            *self.extra_args,
        ]  # fmt: skip
        self.starts += 1
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.log_path, "ab") as log:
            log.write(f"=== start #{self.starts}: {' '.join(cmd)}\n".encode())
            log.flush()
            # Its own session: a Ctrl-C aimed at pytest does not reach it; we stop it.
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env,
                start_new_session=True,
            )  # fmt: skip
        _LIVE.append(self)
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            rc = self.proc.poll()
            if rc is not None:
                self.proc = None
                _LIVE.remove(self)
                pytest.fail(
                    f"pyrmq standalone exited with {rc} before it was ready:\n"
                    f"{_tail(self.log_path, 80)}"
                )
            info = self._read_ready()
            if info is not None:
                break
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(
                    f"pyrmq standalone wrote no ready-file within {READY_TIMEOUT:.0f} s:\n"
                    f"{_tail(self.log_path, 80)}"
                )
            time.sleep(0.05)
        assert info.get("pid") == self.proc.pid, (info, self.proc.pid)
        self.namesrv = info["namesrv"]
        self.broker = info["broker"]
        self.grpc = str(info.get("grpc", ""))
        for addr in (self.namesrv, self.broker):
            host, _, port = addr.rpartition(":")
            assert host == "127.0.0.1" and int(port) > 0, info

    def _read_ready(self) -> dict[str, object] | None:
        try:
            info = json.loads(self.ready_path.read_text())
        except (OSError, ValueError):  # absent, or written but not complete yet
            return None
        if not isinstance(info, dict) or not {"namesrv", "broker", "pid"} <= info.keys():
            return None
        return info

    def stop(self) -> int | None:
        """SIGTERM this server's PID (only it) and wait; returns its exit status, or None
        when it had to be killed after STOP_TIMEOUT s."""
        proc = self.proc
        if proc is None:
            return 0
        self.proc = None
        if self in _LIVE:
            _LIVE.remove(self)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
                with open(self.log_path, "ab") as log:
                    log.write(b"=== killed: no exit within the stop timeout\n")
                return None
        with open(self.log_path, "ab") as log:
            log.write(f"=== exited with {proc.returncode}\n".encode())
        return proc.returncode

    def kill(self) -> None:
        """SIGKILL this server's PID (a crash: nothing flushed at exit)."""
        proc = self.proc
        assert proc is not None
        self.proc = None
        if self in _LIVE:
            _LIVE.remove(self)
        proc.kill()
        proc.wait(10)
        with open(self.log_path, "ab") as log:
            log.write(b"=== killed (SIGKILL) by the test\n")

    def restart(self, *, crash: bool = False) -> None:
        """Stop cleanly (asserting exit 0), or SIGKILL it with crash=True, and start again on
        the same store and ports."""
        ns_port = int(self.namesrv.rpartition(":")[2])
        br_port = int(self.broker.rpartition(":")[2])
        if crash:
            self.kill()
        else:
            rc = self.stop()
            assert rc == 0, f"SIGTERM should exit 0, got {rc}:\n{_tail(self.log_path, 60)}"
        self.start(ns_port, br_port)
        assert self.namesrv.endswith(f":{ns_port}") and self.broker.endswith(f":{br_port}")

    def log_tail(self, lines: int = 150) -> str:
        return _tail(self.log_path, lines)


def _admin_cli_available() -> bool:
    r = subprocess.run(
        [sys.executable, "-m", "pyrmq", "admin", "update-topic", "--help"],
        cwd=REPO, capture_output=True, timeout=60,
    )  # fmt: skip
    return r.returncode == 0


def _create_topic(server: StandaloneServer, topic: str, queues: int) -> None:
    """Create `topic` with the admin CLI; xfail the test when the CLI does not exist."""
    if not _admin_cli_available():
        pytest.xfail("admin CLI missing (python -m pyrmq admin update-topic)")
    cmd = [
        sys.executable, "-m", "pyrmq", "admin", "update-topic",
        "-n", server.namesrv, "-b", server.broker, "-t", topic,
        "--read-queues", str(queues), "--write-queues", str(queues),
    ]  # fmt: skip
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, timeout=60)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)


@pytest.fixture
def create_topic() -> object:
    """create_topic(server, topic, queues): the admin CLI, or xfail when it is missing."""
    return _create_topic


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneServer]:
    """One server for the module; tests keep apart by using their own topics and groups."""
    work = tmp_path_factory.mktemp("standalone")
    srv = StandaloneServer(work, "pyrmq standalone (module)")
    srv.start()
    yield srv
    rc = srv.stop()
    assert rc == 0, f"pyrmq standalone exit status on SIGTERM: {rc}\n{srv.log_tail(60)}"
    # its 1 GiB segments are allocated: not kept until the session ends
    shutil.rmtree(work, ignore_errors=True)


#: proxy_server's broker.conf: a transaction left open for 1 s is asked
#: about, every second
PROXY_BROKER_CONF = """\
transactionTimeOut=1000
transactionCheckInterval=1000
"""


@pytest.fixture(scope="module")
def proxy_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneServer]:
    """A server with the gRPC proxy on (``--enable-proxy``, any free port:
    ``server.grpc``), one per module, the 5.x SDK installed beforehand."""
    from tests.interop import sdk5

    work = tmp_path_factory.mktemp("proxy")
    conf = work / "broker.conf"
    conf.write_text(PROXY_BROKER_CONF)
    srv = StandaloneServer(
        work / "srv",
        "pyrmq standalone (gRPC proxy)",
        ("--enable-proxy", "--grpc-port", "0", "-c", str(conf)),
    )
    sdk5.sdk_path()  # installed before the server starts, not inside a test's wait
    srv.start()
    assert srv.grpc.startswith("127.0.0.1:"), srv.grpc
    yield srv
    rc = srv.stop()
    assert rc == 0, f"exit status on SIGTERM: {rc}\n{srv.log_tail(60)}"
    shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def clients(server: StandaloneServer) -> Iterator[Any]:
    """C++ clients (tests/interop/cpp.py Clients) on the module's server,
    closed after the test."""
    from tests.interop.cpp import Clients

    c = Clients(server.namesrv)
    yield c
    c.close()


@pytest.fixture
def make_server(tmp_path: pathlib.Path) -> Iterator[object]:
    """make_server(*extra_args): a server of the test's own, stopped at teardown."""
    made: list[StandaloneServer] = []

    def make(*extra_args: str) -> StandaloneServer:
        srv = StandaloneServer(tmp_path / f"srv{len(made)}", "pyrmq standalone (own)", extra_args)
        made.append(srv)
        srv.start()
        return srv

    yield make
    for srv in made:
        srv.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """On a failure, attach the tail of every running server's log and of the C++ client's log."""
    outcome = yield
    rep = outcome.get_result()  # type: ignore[attr-defined]
    if rep.failed:
        for srv in _LIVE:
            rep.sections.append((f"{srv.name} log ({srv.log_path})", srv.log_tail()))
        rep.sections.append(
            (f"rocketmq-cpp log ({client_log_path()})", _tail(client_log_path(), 60))
        )
