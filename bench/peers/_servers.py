"""Start and stop the peers' servers for one benchmark run.

Each launcher is a context manager: it starts the Debian-packaged server as
a subprocess in its own session (so its PID is its process group), on
127.0.0.1 with free ports and a temp data directory under `root`, waits
until the server answers, yields a ``PeerServer``, and in ``finally`` stops
exactly what it started (by PID, then that process group if anything of it
is left) and removes the directory.

- NATS: ``nats-server -js -sd DIR -a 127.0.0.1 -p PORT``.
- Redis: ``redis-server --appendonly yes --appendfsync everysec|always
  --save "" --dir DIR --port PORT``.
- RabbitMQ: ``rabbitmq-server`` from /usr/lib/rabbitmq/bin (the /usr/sbin
  wrapper would switch to the rabbitmq user), with every path it writes
  (mnesia, logs, cookie via HOME, enabled-plugins file, config) in DIR, the
  stream plugin enabled, its own ``epmd`` on a free port (ERL_EPMD_PORT), a
  free distribution port bound to 127.0.0.1 and a node name unique to this
  run; stopped with ``rabbitmqctl -n NODE stop``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator

from bench._e2e import file_tail, group_cpu_s, group_stats

RABBIT_BIN = "/usr/lib/rabbitmq/bin"


@dataclasses.dataclass
class PeerServer:
    """A running peer server: where it listens, its PID (= process group),
    its data directory and log."""

    name: str
    host: str
    port: int
    pid: int
    workdir: str
    log_path: str
    version: str

    def cpu_s(self) -> float:
        """CPU seconds of the server's whole process group."""
        return group_cpu_s(self.pid)

    def log_tail(self, lines: int = 30) -> str:
        return file_tail(self.log_path, lines)


def missing_binary(name: str) -> str | None:
    """Why the peer `name` ("nats", "redis", "rabbitmq") cannot run here, or None."""
    need = {
        "nats": ["nats-server"],
        "redis": ["redis-server"],
        "rabbitmq": [f"{RABBIT_BIN}/rabbitmq-server", f"{RABBIT_BIN}/rabbitmqctl", "epmd"],
    }
    pkg = {"nats": "nats-server", "redis": "redis-server", "rabbitmq": "rabbitmq-server"}
    for exe in need[name]:
        if not (shutil.which(exe) or os.access(exe, os.X_OK)):
            return f"{exe} not found (apt-get install {pkg[name]})"
    return None


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _version(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
        return (out.stdout or out.stderr).strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def _stop(proc: subprocess.Popen[bytes], grace: float = 20.0) -> None:
    """SIGTERM the process we started, then SIGKILL its process group (its
    PID: it was started in a new session) if any of it is still alive."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)
    if proc.poll() is None or group_alive(proc.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)


def group_alive(pgid: int) -> bool:
    """Whether any process of group `pgid` is alive (zombies excluded)."""
    return any(f[0] != "Z" for _, f in group_stats(pgid))


def _wait(
    ready: Callable[[], bool],
    proc: subprocess.Popen[bytes],
    what: str,
    log_path: str,
    timeout: float,
) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            raise RuntimeError(
                f"{what} exited with {proc.returncode} before it was ready; "
                f"log {log_path}:\n{file_tail(log_path, 20)}"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{what} not ready within {timeout:.0f} s; "
                f"log {log_path}:\n{file_tail(log_path, 20)}"
            )
        time.sleep(0.05)


def _popen(
    cmd: list[str], log_path: str, env: dict[str, str] | None = None, cwd: str | None = None
) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
            cwd=cwd,
        )


# -- NATS -----------------------------------------------------------------------------


@contextlib.contextmanager
def nats_server(root: str, timeout: float = 30.0) -> Iterator[PeerServer]:
    """nats-server with JetStream, its store in a temp directory."""
    workdir = tempfile.mkdtemp(prefix="pyrmq-bench-nats-", dir=root)
    log_path = os.path.join(workdir, "nats.log")
    proc = None
    try:
        port = free_port()
        proc = _popen(
            [
                "nats-server",
                "-js",
                "-sd",
                os.path.join(workdir, "js"),
                "-a",
                "127.0.0.1",
                "-p",
                str(port),
            ],
            log_path,
        )
        _wait(lambda: port_open(port), proc, "nats-server", log_path, timeout)
        yield PeerServer(
            "nats",
            "127.0.0.1",
            port,
            proc.pid,
            workdir,
            log_path,
            _version(["nats-server", "--version"]),
        )
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)


# -- Redis ----------------------------------------------------------------------------


@contextlib.contextmanager
def redis_server(
    root: str, appendfsync: str = "everysec", timeout: float = 30.0
) -> Iterator[PeerServer]:
    """redis-server with the AOF on (`appendfsync` everysec or always) and
    RDB snapshots off, its files in a temp directory."""
    if appendfsync not in ("everysec", "always", "no"):
        raise ValueError(f"appendfsync {appendfsync!r}")
    workdir = tempfile.mkdtemp(prefix="pyrmq-bench-redis-", dir=root)
    log_path = os.path.join(workdir, "redis.log")
    proc = None
    try:
        port = free_port()
        proc = _popen(
            [
                "redis-server",
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--dir",
                workdir,
                "--appendonly",
                "yes",
                "--appendfsync",
                appendfsync,
                "--save",
                "",
                "--daemonize",
                "no",
                "--protected-mode",
                "no",
                "--logfile",
                log_path,
            ],
            log_path,
        )

        def ready() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    return s.recv(16).startswith(b"+PONG")
            except OSError:
                return False

        _wait(ready, proc, "redis-server", log_path, timeout)
        yield PeerServer(
            f"redis-{appendfsync}",
            "127.0.0.1",
            port,
            proc.pid,
            workdir,
            log_path,
            _version(["redis-server", "--version"]),
        )
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)


# -- RabbitMQ -------------------------------------------------------------------------


def rabbit_env(
    workdir: str, node: str, epmd_port: int, amqp_port: int, dist_port: int
) -> dict[str, str]:
    """The environment of rabbitmq-server and rabbitmqctl for one node whose
    every file lives in workdir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
    env.update(
        {
            "HOME": workdir,  # the Erlang cookie is created and read here
            "RABBITMQ_CONF_ENV_FILE": os.path.join(workdir, "rabbitmq-env.conf"),
            "RABBITMQ_CONFIG_FILE": os.path.join(workdir, "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": os.path.join(workdir, "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": os.path.join(workdir, "enabled_plugins"),
            "RABBITMQ_NODENAME": node,
            "RABBITMQ_MNESIA_BASE": os.path.join(workdir, "mnesia"),
            "RABBITMQ_LOG_BASE": os.path.join(workdir, "log"),
            "RABBITMQ_PID_FILE": os.path.join(workdir, "rabbit.pid"),
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(amqp_port),
            "RABBITMQ_DIST_PORT": str(dist_port),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            "ERL_EPMD_PORT": str(epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        }
    )
    return env


@contextlib.contextmanager
def rabbitmq_server(root: str, timeout: float = 90.0) -> Iterator[PeerServer]:
    """rabbitmq-server with the stream plugin; yields the stream port."""
    workdir = tempfile.mkdtemp(prefix="pyrmq-bench-rabbit-", dir=root)
    log_path = os.path.join(workdir, "rabbitmq-server.log")
    node = f"pyrmqbench{os.getpid()}x{int(time.time() * 1000) % 100000}@localhost"
    epmd = proc = None
    env: dict[str, str] = {}
    try:
        epmd_port, amqp_port, dist_port, stream_port = (free_port() for _ in range(4))
        env = rabbit_env(workdir, node, epmd_port, amqp_port, dist_port)
        open(env["RABBITMQ_CONF_ENV_FILE"], "w").close()
        with open(env["RABBITMQ_CONFIG_FILE"], "w") as f:
            f.write(
                f"stream.listeners.tcp.1 = 127.0.0.1:{stream_port}\n"
                "stream.advertised_host = 127.0.0.1\n"
                f"stream.advertised_port = {stream_port}\n"
                "loopback_users = none\n"
            )
        # What `rabbitmq-plugins --offline enable rabbitmq_stream` writes
        # (the tool itself boots an Erlang VM: ~1 s for one line).
        with open(env["RABBITMQ_ENABLED_PLUGINS_FILE"], "w") as f:
            f.write("[rabbitmq_stream].\n")
        # Our own epmd, so that nothing daemonized outlives the run.
        epmd = _popen(
            ["epmd", "-port", str(epmd_port), "-address", "127.0.0.1"],
            os.path.join(workdir, "epmd.log"),
        )
        _wait(lambda: port_open(epmd_port), epmd, "epmd", os.path.join(workdir, "epmd.log"), 10)
        proc = _popen([f"{RABBIT_BIN}/rabbitmq-server"], log_path, env=env, cwd=workdir)
        _wait(lambda: port_open(stream_port), proc, "rabbitmq-server", log_path, timeout)
        yield PeerServer(
            "rabbitmq", "127.0.0.1", stream_port, proc.pid, workdir, log_path, _rabbit_version()
        )
    finally:
        if proc is not None:
            if proc.poll() is None:
                with contextlib.suppress(OSError, subprocess.SubprocessError):
                    subprocess.run(
                        [f"{RABBIT_BIN}/rabbitmqctl", "-n", node, "stop"],
                        env=env,
                        capture_output=True,
                        timeout=60,
                        check=False,
                        cwd=workdir,
                    )
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(20)
            _stop(proc)
        if epmd is not None:
            _stop(epmd)
        shutil.rmtree(workdir, ignore_errors=True)


def _rabbit_version() -> str:
    try:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", "rabbitmq-server"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        return f"RabbitMQ {out.stdout.strip() or 'unknown'}"
    except (OSError, subprocess.SubprocessError):
        return "RabbitMQ unknown"
