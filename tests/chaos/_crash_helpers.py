"""Helpers shared by the chaos tests: bare admin requests (create a topic,
read a queue whole), the committed offsets a broker persisted, pyrmq send
loops that tally what every send came to, and the parent side of the C++
client load process (_crash_cpp.py)."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import rmqcore
from pyrmq.client.api import MQClientAPI
from pyrmq.common.errors import RMQError, StoreError
from pyrmq.common.message import Message, MessageExt, MessageQueue
from pyrmq.common.results import SendStatus
from pyrmq.producer import Producer
from pyrmq.remoting import RemotingClient, RequestCode
from tests._reading import pull_all, read_queue

REPO = pathlib.Path(__file__).resolve().parents[2]


class Admin:
    """MQClientAPI requests the chaos tests need, over one RemotingClient."""

    def __init__(self, namesrv_addr: str) -> None:
        self.remoting = RemotingClient(name="chaos-admin")
        self.api = MQClientAPI(self.remoting, namesrv_addr.split(";"))

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.remoting.shutdown()

    async def create_topic(self, broker_addr: str, topic: str, queues: int) -> None:
        """UPDATE_AND_CREATE_TOPIC on the broker, then wait (at most 15 s) for
        the name server to route it."""
        fields = {
            "topic": topic,
            "defaultTopic": "TBW102",
            "readQueueNums": str(queues),
            "writeQueueNums": str(queues),
            "perm": "6",
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0",
            "order": "false",
        }
        await self.api.broker_request(broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
        await self.wait_route(topic, 15.0)

    async def routed(self, topic: str) -> bool:
        try:
            route = await self.api.get_topic_route(topic, timeout=2.0)
        except RMQError:  # the name server is down or starting
            return False
        return route is not None and bool(route.queue_datas)

    async def wait_route(self, topic: str, timeout: float) -> None:
        for _ in range(int(timeout / 0.1) + 1):
            if await self.routed(topic):
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"no route of {topic} within {timeout:.0f} s")

    async def read_queue(self, broker_addr: str, mq: MessageQueue) -> list[MessageExt]:
        """Every message of one queue from offset 0 (no group state), in
        order. A pull answered OFFSET_MOVED or NO_MATCHED_MSG (units the
        broker skips) moves on to the offset it names; at most 10,000 pulls."""
        return await read_queue(self.api, broker_addr, mq, group="chaos-reader")


@dataclass
class Served:
    """A queue as a broker served it: records decoded without trusting them."""

    records: list[dict[str, Any]] = field(default_factory=list)  # with "crc_ok"
    malformed: int = 0  # pull bodies whose records did not even decode


async def read_served(admin: Admin, broker_addr: str, mq: MessageQueue) -> Served:
    """Every record of one queue from offset 0, pulled raw: each decoded with
    its CRC checked here (not by the client's decoder, which would raise), so
    a corrupted record the broker serves is counted, not an exception."""
    out = Served()
    reads = pull_all(admin.api, broker_addr, mq, group="chaos-reader", raw=True, missing_ok=False)
    async for r in reads:
        try:
            for _, rec in rmqcore.iter_records(r.body or b"", 0, False):
                rec["crc_ok"] = rmqcore.body_crc(rec["body"]) == rec["body_crc"]
                out.records.append(rec)
        except StoreError:
            out.malformed += 1
    return out


def persisted_offsets(store_dir: pathlib.Path, topic: str, group: str) -> dict[int, int]:
    """queue id -> the committed offset of group in the broker's
    consumerOffset.json ({} when the file or the group is absent)."""
    try:
        data = json.loads((store_dir / "config" / "consumerOffset.json").read_text())
    except FileNotFoundError:
        return {}
    table = data.get("offsetTable", {}).get(f"{topic}@{group}", {})
    return {int(q): int(o) for q, o in table.items()}


@dataclass
class Delivery:
    """One message as a consumer's listener saw it."""

    mid: str
    queue_id: int
    queue_offset: int
    epoch: int  # broker restarts begun before the delivery was seen


@dataclass
class Tally:
    """What one producer had acknowledged and one consumer received."""

    acked: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    deliveries: list[Delivery] = field(default_factory=list)

    @property
    def received(self) -> set[str]:
        return {d.mid for d in self.deliveries}

    def duplicates(self) -> int:
        """Deliveries of a stored record after its first one."""
        per_record = Counter((d.queue_id, d.queue_offset) for d in self.deliveries)
        return sum(n - 1 for n in per_record.values())


class SendLoops:
    """`senders` loops on one started Producer, each sending bodies
    <prefix>-<n> (n shared, the body also the key) to topic one at a time,
    `pause` s apart, until stop(). Every body ends in `acked` (SEND_OK) or
    `failed` (raised, or another status: stored maybe, not acknowledged);
    `acked` and `failed` may be the caller's sets (a Tally's)."""

    def __init__(
        self,
        producer: Producer,
        topic: str,
        *,
        senders: int,
        pause: float,
        prefix: str = "py",
        acked: set[str] | None = None,
        failed: set[str] | None = None,
    ) -> None:
        self.producer = producer
        self.topic = topic
        self.senders = senders
        self.pause = pause
        self.prefix = prefix
        self.acked: set[str] = set() if acked is None else acked
        self.failed: set[str] = set() if failed is None else failed
        #: SEND_OK answers by broker name
        self.acked_by: Counter[str] = Counter()
        #: answers other than SEND_OK, by status
        self.not_ok: Counter[str] = Counter()
        #: sends that raised, by error class
        self.errors: Counter[str] = Counter()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._next = 0

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._loop(), name=f"chaos:{self.prefix}-sender{i}")
            for i in range(self.senders)
        ]

    async def _loop(self) -> None:
        for _ in range(10_000_000):
            if self._stop.is_set():
                return
            body = f"{self.prefix}-{self._next:07d}"
            self._next += 1
            try:
                r = await self.producer.send(Message(self.topic, body.encode(), keys=body))
            except RMQError as e:  # a broker (or its route) is away
                self.failed.add(body)
                self.errors[type(e).__name__] += 1
                await asyncio.sleep(0.05)
                continue
            if r.send_status is SendStatus.SEND_OK:
                self.acked.add(body)
                self.acked_by[r.message_queue.broker_name] += 1
            else:  # FLUSH_DISK_TIMEOUT, SLAVE_NOT_AVAILABLE...: stored, not safe
                self.failed.add(body)
                self.not_ok[r.send_status.name] += 1
            await asyncio.sleep(self.pause)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    async def stop(self) -> None:
        """Stop the loops (idempotent); the producer stays the caller's."""
        self._stop.set()
        await asyncio.gather(*self._tasks)


class CppLoad:
    """The parent side of `python -m tests.chaos._crash_cpp`: its stdout
    parsed by a thread into a Tally. `epoch` is read when a RECV line is
    parsed (a little after the delivery)."""

    def __init__(
        self, namesrv: str, topic: str, group: str, prefix: str, log_path: pathlib.Path
    ) -> None:
        self.args = [namesrv, topic, group, prefix]
        self.log_path = log_path
        self.tally = Tally()
        self.epoch = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready = threading.Event()
        self.stopped = threading.Event()
        self.closing = False
        self.done = False
        self._lock = threading.Lock()
        self._reader: threading.Thread | None = None

    def start(self, timeout: float = 60.0) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.chaos._crash_cpp", *self.args],
                cwd=REPO,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
            )
        self._reader = threading.Thread(target=self._read, name="chaos:cpp-reader", daemon=True)
        self._reader.start()
        if not self.ready.wait(timeout):
            self.kill()
            raise AssertionError(f"C++ client process not ready in {timeout:.0f} s")

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        tally = self.tally
        for raw in self.proc.stdout:
            parts = raw.decode(errors="replace").split()
            if not parts:
                continue
            kind = parts[0]
            with self._lock:
                if kind == "ACK":
                    tally.acked.add(parts[1])
                elif kind == "FAIL":
                    tally.failed.add(parts[1])
                elif kind == "RECV" and len(parts) == 4:
                    tally.deliveries.append(
                        Delivery(parts[1], int(parts[2]), int(parts[3]), self.epoch)
                    )
                elif kind == "READY":
                    self.ready.set()
                elif kind == "STOPPED":
                    self.stopped.set()
                elif kind == "CLOSING":
                    self.closing = True
                elif kind == "DONE":
                    self.done = True

    def counts(self) -> tuple[int, int]:
        """(acknowledged sends, deliveries) so far."""
        with self._lock:
            return len(self.tally.acked), len(self.tally.deliveries)

    def received(self) -> set[str]:
        with self._lock:
            return {d.mid for d in self.tally.deliveries}

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _command(self, text: str) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(text.encode() + b"\n")
        self.proc.stdin.flush()

    def stop_sending(self, timeout: float = 30.0) -> None:
        self._command("STOP")
        if not self.stopped.wait(timeout):
            raise AssertionError(f"C++ sender did not stop in {timeout:.0f} s")

    def close(self, timeout: float = 60.0) -> str:
        """QUIT and wait for the exit: "clean", or "known-shutdown-crash"
        when the process died after it began shutting its clients down (the
        wheel's native crash on consumer shutdown). Raises when it died
        earlier or did not exit in time."""
        proc = self.proc
        assert proc is not None
        self._command("QUIT")
        try:
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"C++ client process did not exit in {timeout:.0f} s") from None
        if self._reader is not None:
            self._reader.join(10)
        if rc == 0 and self.done:
            return "clean"
        if self.closing:
            return "known-shutdown-crash"
        raise AssertionError(f"C++ client process died (exit {rc}) before shutting down")

    def kill(self) -> None:
        """SIGKILL the process (by its PID) if it still runs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
