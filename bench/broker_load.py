"""Load generators for the broker benchmarks (used by bench/broker_report.py).

Every workload talks to a server in another process over loopback TCP:
``pyrmq standalone`` or the trivial bench.answer_server. Each is bounded in
wall time (and in count where it has one); servers are stopped by their PID
with SIGTERM in ``finally`` blocks, and their stores are temp directories.

Workloads:

- ``cpp_producer``: the real C++ client (``rocketmq==0.4.4``) in a child
  process, N threads calling ``send_sync`` or ``send_oneway`` on one
  Producer for a fixed time. Throughput is counted at the server
  (GET_MAX_OFFSET summed over the queues) in a window after a warm-up; sync
  sends are counted at the client too.
- ``send_load``, ``preload`` + ``pull_all``: pipelined raw frames from
  several processes (bench.pipelined); the frames they send are built here
  (``send_ring``, ``pull_frame``: shaped like the C++ client's, the same
  extFields and TAGS/KEYS/UNIQ_KEY/WAIT properties), and ``preload`` fills a
  topic with batch sends for the pulls to read.
- ``latency`` (bench.raw_latency): one connection holding a long-poll
  pull on every queue, another sending at a fixed rate.

Server CPU time is read from /proc/PID/stat over each measured window.

Run one workload by hand: ``python -m bench.broker_load send --addr ip:port
--topic T`` (and ``cpp``, ``pull``, ``latency``; ``--help`` lists options).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import random
import shutil
import signal
import socket
import string
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import rmqcore
from bench._e2e import file_tail, process_cpu_s_of, thread_cpu
from pyrmq.remoting.command import FrameDecoder, RemotingCommand, decode_frame

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_U32 = struct.Struct(">I")
OK_HEAD = b'{"code":0,'
PRODUCER_GROUP = "GID_BENCH_P"
CONSUMER_GROUP = "GID_BENCH_C"


# -- servers --------------------------------------------------------------------------


@dataclasses.dataclass
class Server:
    kind: str
    namesrv: str
    broker: str
    pid: int
    proc: subprocess.Popen[bytes]
    log_path: str
    #: the gRPC proxy's host:port (started with --enable-proxy), else ""
    grpc: str = ""

    def cpu_s(self) -> float:
        return proc_cpu_s(self.pid)

    def log_tail(self, lines: int = 30) -> str:
        return file_tail(self.log_path, lines)


def proc_cpu_s(pid: int) -> float:
    """user + system CPU seconds of a process (all its threads; to the
    nanosecond: bench._e2e.process_cpu_s_of)."""
    return process_cpu_s_of(pid)


#: the name thread_cpu_s gives a process's first thread: a pyrmq server's event loop
MAIN_THREAD = "event loop"


def thread_cpu_s(pid: int) -> dict[str, float]:
    """user + system CPU seconds of a process per thread name (what the
    thread shows to the OS: pyrmq/common/threads.py), threads of one name
    summed; the first thread is MAIN_THREAD. Threads that ended are not
    counted."""
    out: dict[str, float] = {}
    with contextlib.suppress(FileNotFoundError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                name, cpu = thread_cpu(pid, tid)
            except OSError:  # the thread ended meanwhile
                continue
            if tid == str(pid):
                name = MAIN_THREAD
            out[name] = out.get(name, 0.0) + cpu
    return out


def cpu_by_thread_us(before: dict[str, float], after: dict[str, float],
                     msgs: int) -> dict[str, float]:
    """µs of CPU a message per thread name between two thread_cpu_s, the
    largest first; names under 0.05 µs are left out."""
    per = {name: (after[name] - before.get(name, 0.0)) / max(1, msgs) * 1e6 for name in after}
    return {n: round(us, 2) for n, us in sorted(per.items(), key=lambda kv: -kv[1]) if us >= 0.05}


def by_thread_text(split: Mapping[str, float]) -> str:
    """'event loop 0.42, SendMessage_0 0.96, ...' of a split by thread
    (cpu_by_thread_us, or medians of such), the largest first, names
    under 0.05 µs left out."""
    ranked = sorted(split.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{name} {us:.2f}" for name, us in ranked if us >= 0.05)


@contextlib.contextmanager
def _spawn(kind: str, cmd: list[str], workdir: str, timeout: float = 60.0) -> Iterator[Server]:
    ready = os.path.join(workdir, f"{kind}.ready.json")
    log_path = os.path.join(workdir, f"{kind}.log")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(ready)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([*cmd, "--ready-file", ready], stdout=log,
                                stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        deadline = time.monotonic() + timeout
        info: dict[str, Any] | None = None
        while info is None:
            if proc.poll() is not None:
                raise RuntimeError(f"{kind} exited with {proc.returncode}; log {log_path}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{kind} not ready within {timeout:.0f} s; log {log_path}")
            with contextlib.suppress(OSError, ValueError), open(ready) as f:
                info = json.load(f)
            time.sleep(0.05)
        yield Server(kind, info["namesrv"], info["broker"], proc.pid, proc, log_path,
                     info.get("grpc", ""))
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


@contextlib.contextmanager
def standalone(root: str, flush: str = "ASYNC_FLUSH", extra: tuple[str, ...] = (),
               conf: Mapping[str, object] | None = None) -> Iterator[Server]:
    """``pyrmq standalone`` on a fresh store under root (removed after);
    conf: broker.conf settings (key -> value), written beside the store
    and passed as -c."""
    workdir = tempfile.mkdtemp(prefix="pyrmq-bench-broker-", dir=root)
    try:
        if conf:
            path = os.path.join(workdir, "broker.conf")
            with open(path, "w") as f:
                f.write("".join(f"{k}={v}\n" for k, v in conf.items()))
            extra = ("-c", path, *extra)
        with _spawn("standalone", [sys.executable, "-m", "pyrmq", "standalone",
                                   "--store", os.path.join(workdir, "store"),
                                   "--namesrv-port", "0", "--broker-port", "0",
                                   "--host", "127.0.0.1", "--flush", flush, *extra],
                    workdir) as srv:
            yield srv
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def answer_server(root: str, queues: int = 4) -> Iterator[Server]:
    workdir = tempfile.mkdtemp(prefix="pyrmq-bench-answer-", dir=root)
    try:
        with _spawn("answer", [sys.executable, "-m", "bench.answer_server",
                               "--queues", str(queues)], workdir) as srv:
            yield srv
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# -- a blocking client for setup and counters ----------------------------------------


class BlockingClient:
    """One socket, one request at a time (setup, counters; not measured)."""

    def __init__(self, addr: str, timeout: float = 10.0) -> None:
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._opaque = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("server closed the connection")
            buf += chunk
        return bytes(buf)

    def call(self, code: int, fields: dict[str, str], body: bytes = b"") -> RemotingCommand:
        self._opaque += 1
        self.sock.sendall(RemotingCommand(code, fields, body, opaque=self._opaque).encode())
        while True:
            head = self._recv(4)
            (n,) = _U32.unpack(head)
            resp = decode_whole_frame(head + self._recv(n))
            if resp.is_response and resp.opaque == self._opaque:
                return resp


def decode_whole_frame(frame: bytes) -> RemotingCommand:
    """One frame with its length field, through FrameDecoder (the servers'
    path); older FrameDecoders return the raw frame, decoded here."""
    (item,) = FrameDecoder().feed(frame)
    return item if isinstance(item, RemotingCommand) else decode_frame(item)


def create_topic(broker: str, topic: str, queues: int) -> None:
    with BlockingClient(broker) as c:
        r = c.call(17, {"topic": topic, "readQueueNums": str(queues),
                        "writeQueueNums": str(queues), "perm": "6"})
        if r.code != 0:
            raise RuntimeError(f"UPDATE_AND_CREATE_TOPIC {topic}: {r.code} {r.remark}")


def max_offsets(client: BlockingClient, topic: str, queues: int) -> list[int]:
    out = []
    for q in range(queues):
        r = client.call(30, {"topic": topic, "queueId": str(q)})
        out.append(int(r.ext_fields.get("offset", "0")) if r.code == 0 else 0)
    return out


def wait_route(namesrv: str, topic: str, timeout: float = 10.0) -> None:
    """Until the name server has a route for topic (the broker re-registers
    after a topic is created)."""
    deadline = time.monotonic() + timeout
    with BlockingClient(namesrv) as c:
        while c.call(105, {"topic": topic}).code != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no route for {topic} at {namesrv} after {timeout:.0f} s")
            time.sleep(0.1)


def settle_store(server: Server, topic: str, queues: int, quiet: float = 0.05,
                 timeout: float = 20.0) -> tuple[bool, float]:
    """One message put on each of topic's queues, then wait until the
    server's CPU is quiet (under `quiet` of a core over a quarter second):
    the store's one-time work at its first puts (the first CommitLog
    segment made, the next one preallocated and warmed, about a second of
    a core at 1 GiB) is then done before a measurement, instead of being
    charged to the messages of its first window. Returns (quiet reached,
    seconds waited)."""
    with BlockingClient(server.broker) as c:
        for q in range(queues):
            r = c.call(10, send_fields(topic, q, cpp_properties(q), int(time.time() * 1000)),
                       b"settle")
            if r.code != 0:
                raise RuntimeError(f"SEND_MESSAGE to {topic}/{q}: {r.code} {r.remark}")
    t0 = time.monotonic()
    step = 0.25
    cpu = server.cpu_s()
    while time.monotonic() - t0 < timeout:
        time.sleep(step)
        now = server.cpu_s()
        if now - cpu < quiet * step:
            return True, time.monotonic() - t0
        cpu = now
    return False, time.monotonic() - t0


# -- frames shaped like the C++ client's --------------------------------------------


def cpp_properties(i: int, tags: str = "TagA") -> str:
    """TAGS, KEYS, UNIQ_KEY (32 hex, distinct per i) and WAIT, sorted by key
    as the C++ client writes them."""
    return (f"KEYS\x01k{i % 100_000:05d}\x02TAGS\x01{tags}\x02"
            f"UNIQ_KEY\x017F0000010000{i:020X}\x02WAIT\x01true\x02")


def send_fields(topic: str, queue_id: int, props: str, born_ms: int,
                batch: bool = False) -> dict[str, str]:
    return {
        "AccessKey": "", "OnsChannel": "ALIYUN",
        "Signature": "N/YT7X6tIcbS2dPZJLA4aoMqYSk=",
        "batch": "1" if batch else "0", "bornTimestamp": str(born_ms),
        "defaultTopic": "TBW102", "defaultTopicQueueNums": "4", "flag": "0",
        "producerGroup": PRODUCER_GROUP, "properties": props, "queueId": str(queue_id),
        "reconsumeTimes": "0", "sysFlag": "0", "topic": topic, "unitMode": "0",
    }


def send_frame(topic: str, queue_id: int, body: bytes, i: int, opaque: int,
               born_ms: int = 1_700_000_000_000) -> bytes:
    return RemotingCommand(10, send_fields(topic, queue_id, cpp_properties(i), born_ms), body,
                           opaque=opaque, language="CPP", version=63).encode()


def send_ring(topic: str, queues: int, body_len: int, n: int = 8192) -> tuple[bytes, int]:
    """n SEND_MESSAGE frames of equal length back to back, cycling over the
    queues, each with its own UNIQ_KEY and opaque; returns (ring, frame length)."""
    body = b"\xa5" * body_len
    frames = [send_frame(topic, i % queues, body, i, 10_000_000 + i) for i in range(n)]
    flen = len(frames[0])
    if any(len(f) != flen for f in frames):
        raise ValueError("ring frames differ in length (queue ids must be single digits)")
    return b"".join(frames), flen


# -- preload + pull ------------------------------------------------------------------


async def _preload(addr: str, topic: str, queues: int, per_queue: int, body_len: int,
                   batch: int, window: int) -> float:
    """Batch sends (code 10, batch "1"), round robin over the queues, until
    each queue holds per_queue messages; returns the seconds taken."""
    body = b"\x5a" * body_len
    plan: list[tuple[int, int]] = []  # (queue, count)
    for start in range(0, per_queue, batch):
        for q in range(queues):
            plan.append((q, min(batch, per_queue - start)))
    cache: dict[int, bytes] = {}

    def batch_body(n: int, seq: int) -> bytes:
        return rmqcore.encode_batch([
            (body, cpp_properties(seq + k).encode(), 0) for k in range(n)])

    frames = []
    for i, (q, n) in enumerate(plan):
        b = cache.get(n) if i >= 64 else None
        if b is None:
            b = batch_body(n, i * batch)
            cache.setdefault(n, b)
        frames.append(RemotingCommand(10, send_fields(topic, q, "WAIT\x01true\x02", 0, True), b,
                                      opaque=i + 1).encode())
    loop = asyncio.get_running_loop()
    host, _, port = addr.rpartition(":")
    done = loop.create_future()
    state = {"next": 0, "answered": 0, "bad": 0}
    buf = bytearray()

    class P(asyncio.Protocol):
        def connection_made(self, t: asyncio.BaseTransport) -> None:
            self.t = t

        def data_received(self, data: bytes) -> None:
            nonlocal buf
            buf += data
            pos, end, n = 0, len(buf), 0
            while end - pos >= 4:
                size = int.from_bytes(buf[pos:pos + 4], "big")
                if end - pos - 4 < size:
                    break
                if buf[pos + 8:pos + 18] != OK_HEAD:
                    state["bad"] += 1
                n += 1
                pos += 4 + size
            del buf[:pos]
            state["answered"] += n
            k = min(n, len(frames) - state["next"])
            if k > 0:
                self.t.write(b"".join(frames[state["next"]:state["next"] + k]))  # type: ignore[attr-defined]
                state["next"] += k
            if state["answered"] == len(frames) and not done.done():
                done.set_result(None)

    t, _ = await loop.create_connection(P, host, int(port))
    t0 = time.monotonic()
    k = min(window, len(frames))
    t.write(b"".join(frames[:k]))
    state["next"] = k
    async with asyncio.timeout(600):
        await done
    secs = time.monotonic() - t0
    t.close()
    if state["bad"]:
        raise RuntimeError(f"{state['bad']} batch sends failed while preloading")
    return secs


def preload(server: Server, topic: str, queues: int, per_queue: int, body_len: int = 128,
            batch: int = 256, window: int = 16) -> dict[str, Any]:
    create_topic(server.broker, topic, queues)
    # a batch stays within 1 MiB (256 x 16 KiB would pass maxMessageSize, 4 MiB)
    batch = max(1, min(batch, (1 << 20) // (body_len + 128)))
    secs = asyncio.run(_preload(server.broker, topic, queues, per_queue, body_len, batch, window))
    with BlockingClient(server.broker) as c:
        offs = max_offsets(c, topic, queues)
    if offs != [per_queue] * queues:
        raise RuntimeError(f"preload left queue sizes {offs}, wanted {per_queue} each")
    n = per_queue * queues
    return {"msgs": n, "secs": secs, "msgs_per_s": n / secs, "batch": batch}


def pull_frame(topic: str, queue_id: int, offset: int, opaque: int, max_msgs: int = 32,
               sysflag: int = 4, suspend_ms: int = 20000) -> bytes:
    """PULL_MESSAGE shaped like the C++ PullConsumer's (§15 of the protocol doc)."""
    return RemotingCommand(11, {
        "AccessKey": "", "OnsChannel": "ALIYUN", "Signature": "N/YT7X6tIcbS2dPZJLA4aoMqYSk=",
        "commitOffset": "0", "consumerGroup": CONSUMER_GROUP, "maxMsgNums": str(max_msgs),
        "queueId": str(queue_id), "queueOffset": str(offset), "subVersion": "0",
        "subscription": "*", "suspendTimeoutMillis": str(suspend_ms), "sysFlag": str(sysflag),
        "topic": topic,
    }, opaque=opaque, language="CPP", version=63).encode()


# -- the real C++ client -------------------------------------------------------------


def cpp_body(body_len: int) -> str:
    """A body for the C++ client: random letters and digits (its
    SetMessageBody takes a C string, so no NUL bytes; ~6 bits of entropy a
    byte, so bodies of 4 KiB and more, which it compresses, barely shrink)."""
    rng = random.Random(body_len)
    return "".join(rng.choices(string.ascii_letters + string.digits, k=body_len))


def _cpp_child(args: argparse.Namespace) -> dict[str, Any]:
    """Runs in its own process (the C++ client keeps global state). Modes:
    sync (send_sync), oneway (send_oneway), async (send_async, args.window
    unacknowledged sends spread over the threads), batch (send_batch of
    args.batch messages)."""
    from rocketmq.client import Message, Producer  # type: ignore[import-untyped]

    body = cpp_body(args.body)
    prod = Producer(PRODUCER_GROUP + f"_{os.getpid()}")
    prod.set_namesrv_addr(args.namesrv)
    prod.start()
    counts = [0] * args.threads
    errors = [0] * args.threads
    stop = threading.Event()
    mode = args.mode
    per_thread = max(1, args.window // args.threads)

    def work(k: int) -> None:
        msg = Message(args.topic)
        msg.set_keys(f"k{k}")
        msg.set_tags("TagA")
        msg.set_body(body)
        if mode == "async":
            window = threading.BoundedSemaphore(per_thread)

            def ok(_r: Any) -> None:
                counts[k] += 1
                window.release()

            def failed(_e: Any) -> None:
                errors[k] += 1
                window.release()

            while not stop.is_set():
                if window.acquire(timeout=0.5):
                    prod.send_async(msg, ok, failed)
            for _ in range(per_thread):  # every callback has run
                window.acquire(timeout=10)
            return
        batch = [msg] * args.batch
        while not stop.is_set():
            try:
                if mode == "sync":
                    r = prod.send_sync(msg)
                    ok_, n = int(r.status) == 0, 1
                elif mode == "batch":
                    r = prod.send_batch(batch)
                    ok_, n = int(r.status) == 0, len(batch)
                else:
                    prod.send_oneway(msg)
                    ok_, n = True, 1
                if ok_:
                    counts[k] += n
                else:
                    errors[k] += n
            except Exception:
                errors[k] += 1
                time.sleep(0.001)

    # One synchronous send first: routes are fetched and the connection is up.
    first = Message(args.topic)
    first.set_body(body)
    prod.send_sync(first)
    threads = [threading.Thread(target=work, args=(k,), daemon=True)
               for k in range(args.threads)]
    with BlockingClient(args.broker) as c:
        for t in threads:
            t.start()
        time.sleep(args.warmup)
        t0, n0, s0 = time.monotonic(), sum(counts), sum(max_offsets(c, args.topic, args.queues))
        cpu0, scpu0 = time.process_time(), proc_cpu_s(args.server_pid)
        threads0 = thread_cpu_s(args.server_pid)
        time.sleep(args.seconds)
        t1, n1, s1 = time.monotonic(), sum(counts), sum(max_offsets(c, args.topic, args.queues))
        cpu1, scpu1 = time.process_time(), proc_cpu_s(args.server_pid)
        threads1 = thread_cpu_s(args.server_pid)
        stop.set()
        for t in threads:
            t.join(15)
    secs = t1 - t0
    server_msgs = s1 - s0
    result = {
        "mode": mode, "threads": args.threads, "body_len": args.body, "secs": secs,
        "window": args.window if mode == "async" else None,
        "batch": args.batch if mode == "batch" else None,
        "client_msgs": n1 - n0, "client_msgs_per_s": (n1 - n0) / secs,
        "server_msgs": server_msgs, "server_msgs_per_s": server_msgs / secs,
        "errors": sum(errors),
        "client_cpu_util": (cpu1 - cpu0) / secs,
        "client_cpu_us_per_msg": (cpu1 - cpu0) / max(1, server_msgs) * 1e6,
        "server_cpu_util": (scpu1 - scpu0) / secs,
        "server_cpu_us_per_msg": (scpu1 - scpu0) / max(1, server_msgs) * 1e6,
        "server_cpu_us_per_msg_by_thread": cpu_by_thread_us(threads0, threads1, server_msgs),
    }
    # The measurement is complete: out before shutdown, where the C++ client
    # has been seen to abort (boost::thread_interrupted, SIGABRT).
    _emit(result)
    prod.shutdown()
    return result


def _emit(result: dict[str, Any]) -> None:
    """A child's result: one JSON line on stdout, flushed at once."""
    print(json.dumps(result), flush=True)


def describe_exit(returncode: int) -> str:
    """'aborted (SIGABRT)', 'killed by SIGKILL', 'exited 2'."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"aborted ({name})" if name == "SIGABRT" else f"killed by {name}"
    return f"exited {returncode}"


def isolated_row(cmd: list[str], timeout: float, who: str = "C++ client",
                 attempts: int = 2) -> dict[str, Any]:
    """Run one row's runner as a child process and return its result: the
    last JSON line of its stdout. A crash costs that row only:

    - a complete result is kept whatever the exit status (the C++ client
      can abort at shutdown after printing it); a nonzero status is noted
      in ``child_exit`` and ``note``;
    - no result (crash, timeout, unparsable output): run again, up to
      `attempts` runs in all; if none gave one, the row is
      ``{"row_failed": "<who> aborted (SIGABRT) twice", ...}`` with each
      run's stderr tail in ``attempts``.
    """
    tried: list[dict[str, Any]] = []
    for _ in range(max(1, attempts)):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO,
                                 timeout=timeout, check=False)
        except subprocess.TimeoutExpired as e:
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
            tried.append({"why": f"timed out after {timeout:.0f} s", "stderr": (err or "")[-2000:]})
            continue
        result = None
        for ln in reversed(out.stdout.splitlines()):
            if ln.startswith("{"):
                with contextlib.suppress(ValueError):
                    result = json.loads(ln)
                break
        if isinstance(result, dict):
            if out.returncode != 0:
                how = describe_exit(out.returncode)
                result["child_exit"] = out.returncode
                result["note"] = f"{who} {how} after printing its result (result kept)"
            if tried:
                result["retried"] = [t["why"] for t in tried]
            return result
        why = describe_exit(out.returncode)
        why = f"{why} without a result" if out.returncode == 0 else why
        tried.append({"why": why, "stderr": out.stderr[-2000:]})
    whys = [t["why"] for t in tried]
    if len(whys) == 2 and whys[0] == whys[1]:
        reason = f"{who} {whys[0]} twice"
    else:
        reason = f"{who}: " + "; then ".join(whys)
    return {"row_failed": reason, "attempts": tried}


def cpp_producer(server: Server, topic: str, queues: int, mode: str, threads: int = 4,
                 seconds: float = 10.0, warmup: float = 2.0, body_len: int = 128,
                 window: int = 1024, batch: int = 64) -> dict[str, Any]:
    """The C++ producer in a child process; its JSON result, or a row
    marked ``row_failed`` (isolated_row: a crash is retried once)."""
    cmd = [sys.executable, "-m", "bench.broker_load", "cpp", "--namesrv", server.namesrv,
           "--broker", server.broker, "--topic", topic, "--queues", str(queues),
           "--mode", mode, "--threads", str(threads), "--seconds", str(seconds),
           "--warmup", str(warmup), "--body", str(body_len), "--server-pid", str(server.pid),
           "--window", str(window), "--batch", str(batch)]
    r = isolated_row(cmd, seconds + warmup + 90)
    return {"mode": mode, "threads": threads, "body_len": body_len, **r}


def _cpp_consume_child(args: argparse.Namespace) -> dict[str, Any]:
    """The C++ PushConsumer (a new group, which the C++ client starts at
    offset 0 of a young topic) reading args.messages messages; timed from
    the first delivery to the last."""
    from rocketmq.client import PushConsumer  # type: ignore[import-untyped]

    lock = threading.Lock()
    state = {"n": 0, "t_first": 0.0, "t_last": 0.0}
    done = threading.Event()

    def on_message(_msg: Any) -> None:
        now = time.monotonic()
        with lock:
            state["n"] += 1
            if state["n"] == 1:
                state["t_first"] = now
            state["t_last"] = now
            if state["n"] >= args.messages:
                done.set()

    c = PushConsumer(f"{CONSUMER_GROUP}_CPP_{os.getpid()}")
    c.set_namesrv_addr(args.namesrv)
    c.set_thread_count(args.threads)
    c.set_message_batch_max_size(32)
    c.subscribe(args.topic, on_message)
    cpu0, scpu0 = time.process_time(), proc_cpu_s(args.server_pid)
    c.start()
    done.wait(args.seconds)
    cpu1, scpu1 = time.process_time(), proc_cpu_s(args.server_pid)
    with lock:
        n = int(state["n"])
        secs = state["t_last"] - state["t_first"]
    result = {
        "mode": "consume", "threads": args.threads, "body_len": args.body, "msgs": n,
        "expected": args.messages, "secs": secs,
        "msgs_per_s": (n - 1) / secs if secs > 0 else 0.0,
        "client_cpu_us_per_msg": (cpu1 - cpu0) / max(1, n) * 1e6,
        "server_cpu_us_per_msg": (scpu1 - scpu0) / max(1, n) * 1e6,
    }
    _emit(result)  # before shutdown, as in _cpp_child
    c.shutdown()
    return result


def cpp_consumer(server: Server, topic: str, messages: int, threads: int = 4,
                 body_len: int = 128, timeout: float = 60.0) -> dict[str, Any]:
    """The C++ PushConsumer in a child process, reading `messages` already
    stored in topic; its JSON result, or a row marked ``row_failed``."""
    cmd = [sys.executable, "-m", "bench.broker_load", "cpp-consume", "--namesrv",
           server.namesrv, "--topic", topic, "--messages", str(messages), "--threads",
           str(threads), "--seconds", str(timeout), "--body", str(body_len),
           "--server-pid", str(server.pid)]
    r = isolated_row(cmd, timeout + 90)
    return {"mode": "consume", "threads": threads, "body_len": body_len,
            "expected": messages, **r}


# -- command line (one workload by hand) -----------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cpp", help="the C++ producer (used by cpp_producer)")
    c.add_argument("--namesrv", required=True)
    c.add_argument("--broker", required=True, help="where GET_MAX_OFFSET is asked")
    c.add_argument("--topic", required=True)
    c.add_argument("--queues", type=int, default=4)
    c.add_argument("--mode", choices=("sync", "oneway", "async", "batch"), default="sync")
    c.add_argument("--window", type=int, default=1024, help="async: unacknowledged sends")
    c.add_argument("--batch", type=int, default=64, help="batch: messages per send_batch")
    c.add_argument("--threads", type=int, default=4)
    c.add_argument("--seconds", type=float, default=10.0)
    c.add_argument("--warmup", type=float, default=2.0)
    c.add_argument("--body", type=int, default=128)
    c.add_argument("--server-pid", type=int, required=True)
    cc = sub.add_parser("cpp-consume", help="the C++ PushConsumer (used by cpp_consumer)")
    cc.add_argument("--namesrv", required=True)
    cc.add_argument("--topic", required=True)
    cc.add_argument("--messages", type=int, required=True)
    cc.add_argument("--threads", type=int, default=4)
    cc.add_argument("--seconds", type=float, default=60.0, help="give up after")
    cc.add_argument("--body", type=int, default=128)
    cc.add_argument("--server-pid", type=int, required=True)
    for name in ("send", "pull", "latency"):
        s = sub.add_parser(name, help=f"the {name} workload against a running broker")
        s.add_argument("--addr", required=True, help="broker ip:port")
        s.add_argument("--pid", type=int, required=True, help="the broker's PID (CPU time)")
        s.add_argument("--topic", default=f"BenchT{name.title()}{os.getpid()}")
        s.add_argument("--queues", type=int, default=8)
        s.add_argument("--body", type=int, default=128)
        s.add_argument("--seconds", type=float, default=5.0)
        s.add_argument("--procs", type=int, default=2)
        s.add_argument("--conns", type=int, default=4)
        s.add_argument("--window", type=int, default=256)
        s.add_argument("--messages", type=int, default=200_000, help="pull: preloaded total")
        s.add_argument("--rate", type=float, default=1000.0, help="latency: msgs/s")
    args = p.parse_args(argv)
    if args.cmd == "cpp":
        _cpp_child(args)  # prints its result itself, before the client's shutdown
        return 0
    if args.cmd == "cpp-consume":
        _cpp_consume_child(args)
        return 0
    from bench import pipelined, raw_latency  # which build on this module

    srv = Server("external", args.addr, args.addr, args.pid, None, "")  # type: ignore[arg-type]
    if args.cmd == "send":
        create_topic(args.addr, args.topic, args.queues)
        res = pipelined.send_load(srv, args.topic, args.queues, args.body, args.procs, args.conns,
                        args.window, duration=args.seconds)
    elif args.cmd == "pull":
        per_queue = args.messages // args.queues
        pre = preload(srv, args.topic, args.queues, per_queue, args.body)
        res = {"preload": pre, **pipelined.pull_all(srv, args.topic, args.queues, per_queue,
                                         args.procs, args.conns, min(args.window, 64))}
    else:
        res = raw_latency.latency(srv, args.topic, min(args.queues, 4), args.rate, 1.0,
                                  args.seconds, args.body)
    print(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
