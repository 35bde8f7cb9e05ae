"""ProcessCluster: a NameServer and several Brokers, each its own `python -m
pyrmq` process on 127.0.0.1, so a test can SIGKILL a broker and start it
again on the same store and port (what LocalCluster, in process, cannot).

    with ProcessCluster(tmp_path, ["broker-a", "broker-b"]) as c:
        c.namesrv_addr, c.broker_addr("broker-a")
        c.kill_broker("broker-a")        # SIGKILL: nothing flushed at exit
        c.start_broker("broker-a")       # same store, same port
        await c.start_broker_async("broker-a")   # the same, from a coroutine
        c.kill_namesrv(); c.start_namesrv()      # the name server too, same port

Each process writes its log to <root>/<name>.log and, once listening, a
ready file {namesrv|broker: "ip:port", pid}; brokers read a broker.conf
written here. Only the processes started here are ever signalled, by the
PID of their Popen; each runs in its own session (a Ctrl-C aimed at pytest
does not reach it) and an atexit hook SIGKILLs any a test left running."""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

#: seconds a process may take from exec to its ready file
READY_TIMEOUT = 30.0
#: seconds SIGTERM may take before the process is SIGKILLed
STOP_TIMEOUT = 20.0
#: the repository (so `python -m pyrmq` works without an install)
_REPO = pathlib.Path(__file__).resolve().parents[2]

_LIVE: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _kill_leftovers() -> None:
    for proc in list(_LIVE):
        if proc.poll() is None:
            proc.kill()


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (all held until all are picked)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _term_with_parent() -> None:
    """In the child before exec: PR_SET_PDEATHSIG(SIGTERM) (Linux only)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class ServerProcess:
    """One `python -m pyrmq <args> --ready-file F` process. `exec_prefix`
    is the argv it runs under, e.g. `ip netns exec NS` (it must exec the
    command, keeping the PID). `ready_timeout` bounds each start (a broker
    recovering a large store after a crash may need more than the default)."""

    def __init__(
        self, name: str, args: list[str], workdir: pathlib.Path, die_with_parent: bool = False
    ) -> None:
        self.name = name
        #: Linux: the process gets SIGTERM when the one that started it dies
        #: (a `pyrmq cluster` killed with SIGKILL leaves nothing running)
        self.die_with_parent = die_with_parent
        self.args = args
        self.exec_prefix: list[str] = []
        self.ready_timeout = READY_TIMEOUT
        self.log_path = workdir / f"{name}.log"
        self.ready_path = workdir / f"{name}.ready.json"
        self.proc: subprocess.Popen[bytes] | None = None
        self.info: dict[str, Any] = {}
        self.starts = 0
        self._deadline = 0.0

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def launch(self) -> None:
        """Start the process; poll_ready() tells when it listens."""
        if self.running:
            raise RuntimeError(f"{self.name} is already running")
        self.ready_path.unlink(missing_ok=True)
        cmd = [
            *self.exec_prefix,
            *(sys.executable, "-m", "pyrmq", *self.args, "--ready-file", str(self.ready_path)),
        ]
        self.starts += 1
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.log_path, "ab") as log:
            log.write(f"=== start #{self.starts}: {' '.join(cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=_REPO,
                env=env,
                start_new_session=True,
                preexec_fn=_term_with_parent if self.die_with_parent else None,
            )
        _LIVE.add(self.proc)
        self._deadline = time.monotonic() + self.ready_timeout

    def poll_ready(self) -> bool:
        """True once the ready file is written; raises if the process exited
        or the ready timeout passed."""
        proc = self.proc
        if proc is None:
            raise RuntimeError(f"{self.name} was not started")
        rc = proc.poll()
        if rc is not None:
            self._forget()
            raise RuntimeError(
                f"{self.name} exited with {rc} before it was ready:\n{self.log_tail(60)}"
            )
        try:
            info = json.loads(self.ready_path.read_text())
        except (OSError, ValueError):  # absent, or not complete yet
            info = None
        if isinstance(info, dict) and info.get("pid") == proc.pid:
            self.info = info
            return True
        if time.monotonic() > self._deadline:
            self.kill()
            tail = self.log_tail(60)
            raise RuntimeError(f"{self.name} not ready within {self.ready_timeout:.0f}s:\n{tail}")
        return False

    def start(self) -> None:
        self.launch()
        while not self.poll_ready():
            time.sleep(0.02)

    async def start_async(self) -> None:
        self.launch()
        while not self.poll_ready():
            await asyncio.sleep(0.02)

    def _forget(self) -> None:
        if self.proc is not None:
            _LIVE.discard(self.proc)
        self.proc = None

    def _note(self, text: str) -> None:
        with open(self.log_path, "ab") as log:
            log.write(f"=== {text}\n".encode())

    def kill(self) -> None:
        """SIGKILL (a crash: nothing is flushed or unregistered at exit)."""
        proc = self.proc
        if proc is None:
            return
        self._forget()
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        self._note("killed (SIGKILL)")

    def stop(self) -> int | None:
        """SIGTERM and wait; the exit status, or None when it had to be
        SIGKILLed after STOP_TIMEOUT."""
        proc = self.proc
        if proc is None:
            return None
        self._forget()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
                self._note("killed: no exit within the stop timeout")
                return None
        self._note(f"exited with {proc.returncode}")
        return proc.returncode

    def log_tail(self, lines: int = 80) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as e:
            return f"<{self.log_path}: {e}>"
        return "\n".join(text.splitlines()[-lines:])


class ProcessCluster:
    """A NameServer and one Broker per name in `broker_names` (all masters of
    `cluster_name`), as processes, with stores under `root`. `broker_conf`
    adds broker.conf keys (Java camelCase), e.g. messageDelayLevel;
    `per_broker_conf` adds keys to one broker's (over broker_conf), e.g. its
    own listenHost and brokerIP1; the name server listens on `namesrv_host`,
    with `namesrv_args` added to its command line (--tls-config FILE)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        broker_names: list[str] | tuple[str, ...] = ("broker-a", "broker-b"),
        cluster_name: str = "DefaultCluster",
        broker_conf: Mapping[str, Any] | None = None,
        *,
        per_broker_conf: Mapping[str, Mapping[str, Any]] | None = None,
        namesrv_host: str = "127.0.0.1",
        namesrv_args: Sequence[str] = (),
    ) -> None:
        self.root = pathlib.Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.cluster_name = cluster_name
        self.broker_conf = dict(broker_conf or {})
        self.per_broker_conf = {k: dict(v) for k, v in (per_broker_conf or {}).items()}
        kv = str(self.root / "kv.json")
        self.namesrv = ServerProcess(
            "namesrv",
            ["namesrv", "--host", namesrv_host, "-p", "0", "--kv-config", kv, *namesrv_args],
            self.root,
        )
        self.brokers = {
            name: ServerProcess(name, ["broker", "-c", str(self.root / f"{name}.conf")], self.root)
            for name in broker_names
        }
        self._ports: dict[str, int] = {}

    # -- addresses ------------------------------------------------------------------------

    @property
    def namesrv_addr(self) -> str:
        return str(self.namesrv.info["namesrv"])

    def broker_addr(self, name: str) -> str:
        return str(self.brokers[name].info["broker"])

    def store_dir(self, name: str) -> pathlib.Path:
        return self.root / name

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """The name server, then every broker (started in parallel)."""
        self.namesrv.start()
        for name in self.brokers:
            self._write_conf(name)
            self.brokers[name].launch()
        pending = set(self.brokers)
        while pending:
            pending = {n for n in pending if not self.brokers[n].poll_ready()}
            if pending:
                time.sleep(0.02)
        for name in self.brokers:
            self._ports[name] = int(self.broker_addr(name).rpartition(":")[2])

    def _write_conf(self, name: str) -> None:
        conf = {
            "brokerName": name,
            "brokerClusterName": self.cluster_name,
            "brokerId": 0,
            "listenHost": "127.0.0.1",
            "listenPort": self._ports.get(name, 0),
            "namesrvAddr": self.namesrv_addr,
            "storePathRootDir": str(self.store_dir(name)),
            "flushDiskType": "ASYNC_FLUSH",
            # small files: quick to create, and tests roll them
            "mappedFileSizeCommitLog": 8 << 20,
            "mappedFileSizeConsumeQueue": 10_000 * 20,
            "maxHashSlotNum": 4096,
            "maxIndexNum": 16384,
            "warmMappedFileEnable": "false",
            **self.broker_conf,
            **self.per_broker_conf.get(name, {}),
        }
        text = "".join(f"{k}={v}\n" for k, v in conf.items())
        (self.root / f"{name}.conf").write_text(text)

    def kill_broker(self, name: str) -> None:
        """SIGKILL the broker's process."""
        self.brokers[name].kill()

    def stop_broker(self, name: str) -> int | None:
        """SIGTERM the broker's process; its exit status."""
        return self.brokers[name].stop()

    def start_broker(self, name: str) -> None:
        """Start a stopped broker again, on its store and port."""
        self._write_conf(name)
        self.brokers[name].start()

    async def start_broker_async(self, name: str) -> None:
        self._write_conf(name)
        await self.brokers[name].start_async()

    def launch_broker(self, name: str) -> None:
        """Start a stopped broker without waiting for it to listen (to
        SIGKILL it while it recovers its store, say)."""
        self._write_conf(name)
        self.brokers[name].launch()

    def _pin_namesrv_port(self) -> None:
        """From now on the name server restarts on the port it first took
        (brokers and clients know it by that address)."""
        port = self.namesrv_addr.rpartition(":")[2]
        args = self.namesrv.args
        args[args.index("-p") + 1] = port

    def kill_namesrv(self) -> None:
        """SIGKILL the name server's process (its routes are in memory only)."""
        self._pin_namesrv_port()
        self.namesrv.kill()

    def stop_namesrv(self) -> int | None:
        """SIGTERM the name server's process; its exit status."""
        self._pin_namesrv_port()
        return self.namesrv.stop()

    def start_namesrv(self) -> None:
        """Start a stopped name server again, on its port. It knows no broker
        until each registers again (registerNameServerPeriod)."""
        self.namesrv.start()

    async def start_namesrv_async(self) -> None:
        await self.namesrv.start_async()

    def shutdown(self) -> dict[str, int | None]:
        """SIGTERM every process still running (brokers first); exit statuses."""
        out = {}
        for name, proc in self.brokers.items():
            if proc.proc is not None:
                out[name] = proc.stop()
        if self.namesrv.proc is not None:
            out["namesrv"] = self.namesrv.stop()
        return out

    def log_tails(self, lines: int = 60) -> str:
        procs = [self.namesrv, *self.brokers.values()]
        return "\n".join(f"--- {p.log_path}\n{p.log_tail(lines)}" for p in procs)

    def __enter__(self) -> ProcessCluster:
        try:
            self.start()
        except BaseException:
            self.shutdown()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


#: broker.conf keys for a test's standalone store: 128 MiB CommitLog segments
#: and a small IndexFile instead of 1 GiB + 420 MB taken on disk per broker
SMALL_STORE: Mapping[str, object] = {
    "mappedFileSizeCommitLog": 128 << 20,
    "maxHashSlotNum": 50_000,
    "maxIndexNum": 200_000,
}


class StandaloneProcess(ServerProcess):
    """`python -m pyrmq standalone` on 127.0.0.1, ephemeral ports, its store
    under workdir; `namesrv` and `broker` are the addresses it reported."""

    def __init__(self, workdir: pathlib.Path, settings: Mapping[str, object] | None = None) -> None:
        args = [
            "standalone",
            "--store", str(workdir / "store"),
            "--namesrv-port", "0",
            "--broker-port", "0",
            "--host", "127.0.0.1",
        ]  # fmt: skip
        if settings:
            # broker.conf keys, e.g. {"mappedFileSizeCommitLog": 64 << 20} so a
            # test's store does not take the default 1 GiB segments on disk
            conf = workdir / "standalone.conf"
            conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
            args += ["-c", str(conf)]
        super().__init__("standalone", args, workdir)

    @property
    def namesrv(self) -> str:
        return str(self.info["namesrv"])

    @property
    def broker(self) -> str:
        return str(self.info["broker"])

    @property
    def log(self) -> pathlib.Path:
        return self.log_path
