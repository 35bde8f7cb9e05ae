"""The hostile-input fuzzer of tests/chaos/test_hostile_input.py: seeded
random mutations of valid requests, sent over real sockets to a broker and a
name server running as processes.

Three classes of input:

* ``handler``: a well-formed frame (JSON or ROCKETMQ binary header) built
  from a valid request of some code, with its code, extFields, body, flag,
  language, version and remark mutated. The frame codec accepts all of
  them, so they are pipelined, thousands per connection; every request
  that is not one-way must be answered with a RocketMQ code (never an
  unhandled Python error, never silence), and the broker must never close
  such a connection.
* ``header``: the bytes of an encoded header mutated (flips, cuts,
  insertions, splices), with the frame lengths kept consistent.
* ``frame``: any byte of the whole frame mutated, length fields included.

For the last two the client's own decoder (the broker's codec, FrameDecoder)
is the oracle: a frame it rejects must make the broker close the
connection (and log why); frames it accepts must be answered; a frame it
still waits for more bytes of is left for us to close. They are sent one at
a time on short-lived connections.

Not hypothesis: a million inputs over TCP in minutes needs a generator that
costs microseconds per input. Each worker's random.Random is seeded from
(seed, worker number), so a run is replayed by its seed (PYRMQ_FUZZ_SEED);
every failure record names its worker and the request itself."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import re
import struct
import time
from collections import Counter

from pyrmq.broker.runtime_config import parse_properties_text
from pyrmq.common.errors import RemotingError
from pyrmq.remoting import RemotingCommand
from pyrmq.remoting.client import split_addr
from pyrmq.remoting.codes import LanguageCode
from pyrmq.remoting.codes import RequestCode as RC
from pyrmq.remoting.command import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    MAX_FRAME,
    SERIALIZE_ROCKETMQ,
    FrameDecoder,
)
from tests.integration.fuzz_vocabulary import (
    BODIES,
    CONFIG_BODIES,
    GROUP_BODIES,
    KEYS,
    SQL_EXPRESSIONS,
    VALUES,
    Template,
    broker_templates,
    namesrv_templates,
)
from tests.integration.helpers import props

#: the answer Connection gives when a processor raised something unexpected
UNHANDLED = re.compile(r"^[A-Z]\w*(Error|Exception): ")
#: topics and groups the inputs use (a small set, so auto-created topics,
#: groups and offsets stay few and the store small)
TOPICS = ("FuzzT", "FuzzT2", "%RETRY%FuzzG", "%DLQ%FuzzG", "TBW102")
GROUPS = ("FuzzG", "FuzzG2", "CID_ONSAPI_OWNER")
#: requests pipelined on a handler connection before waiting for answers
WINDOW = 128
#: seconds an expected answer may take before the input counts as a hang
ANSWER_TIMEOUT = 10.0
#: handler inputs per connection before it is closed and another opened
INPUTS_PER_CONNECTION = 5000
_PREFIX = struct.Struct(">II")
_LANGS = [m.name for m in LanguageCode]


def stops_the_good_client(cmd: RemotingCommand) -> bool:
    """Whether cmd is an UPDATE_BROKER_CONFIG the broker would take (and
    rightly) that leaves it without read or write permission: the
    well-behaved client sending and pulling beside the fuzz would be
    refused. Such inputs are drawn again; the in-process fuzzer
    (tests/integration/test_fuzz_handlers.py) sends them and sets the
    permission back afterwards."""
    if cmd.code != RC.UPDATE_BROKER_CONFIG or cmd.flag & FLAG_RESPONSE:
        return False
    try:
        perm = int(parse_properties_text(cmd.body.decode("utf-8"))["brokerPermission"])
    except (ValueError, KeyError, UnicodeDecodeError):
        return False
    return perm & 6 != 6


class Mutator:
    """Seeded mutations of valid requests (see the module docstring)."""

    def __init__(self, rng: random.Random, templates: list[Template], codes: list[int]) -> None:
        self.rng = rng
        self.templates = templates
        self.codes = sorted({*codes, *(t[0] for t in templates)})
        self.bodies = [t[2] for t in templates if t[2]] + BODIES
        self.bodies += CONFIG_BODIES + GROUP_BODIES

    # -- values -------------------------------------------------------------------------

    def value(self) -> str:
        rng = self.rng
        k = rng.randrange(12)
        if k < 4:
            return rng.choice(VALUES)
        if k == 4:
            return str(rng.choice((0, 1, -1, 2**31 - 1, -(2**31), 2**31, 2**63 - 1, -(2**63),
                                   2**63, 2**64, 10**30, -(10**30))))  # fmt: skip
        if k == 5:
            return str(rng.randrange(-1000, 100_000))
        if k == 6:
            return rng.choice(TOPICS + GROUPS)
        if k == 7:  # random code points, surrogates and controls excluded
            return "".join(
                chr(rng.choice((rng.randrange(0x20, 0x7F), rng.randrange(0x80, 0xD800))))
                for _ in range(rng.randrange(1, 24))
            )
        if k == 8:
            return rng.choice("x9%|\x01\x02 ") * rng.choice((0, 1, 127, 128, 255, 256, 4096))
        if k == 9:
            return rng.choice((" 1", "1 ", "+1", "0x10", "1e3", "1_000", "٣", "NaN", "inf", "--1",
                               "true", "false", "TRUE", "null", "[]", "{}", '"', "\\"))  # fmt: skip
        if k == 10:  # properties strings, well-formed or not
            return rng.choice(
                (props(TAGS="t", DELAY="3"), props(KEYS="a b c", WAIT="false"),
                 "TAGS\x01", "\x01\x02\x01\x02", "DELAY\x01999\x02", "a\x01b\x02c",
                 props(UNIQ_KEY="x" * 200), props(MAX_OFFSET="-1", MIN_OFFSET="x"))
            )  # fmt: skip
        if k == 11 and rng.random() < 0.5:  # SQL92 expressions, valid and hostile
            return rng.choice((*SQL_EXPRESSIONS, "SQL92", "TAG", "XPATH"))
        return ""

    def _bytes(self, n: int) -> bytes:
        return self.rng.randbytes(n)

    def mutate_bytes(self, data: bytes, ops: int = 0) -> bytes:
        """Byte-level edits: flip, set, insert, delete, duplicate, truncate."""
        rng = self.rng
        b = bytearray(data)
        for _ in range(ops or rng.randrange(1, 5)):
            k = rng.randrange(7)
            pos = rng.randrange(len(b) + 1)
            if k == 0 and b:
                b[pos % len(b)] ^= 1 << rng.randrange(8)
            elif k == 1 and b:
                b[pos % len(b)] = rng.choice((0, 0xFF, 0x7F, 0x80, ord('"'), ord("{"),
                                              ord("}"), ord("\\"), ord(":"), ord(","), ord("9"),
                                              rng.randrange(256)))  # fmt: skip
            elif k == 2:
                b[pos:pos] = self._bytes(rng.randrange(1, 9))
            elif k == 3 and b:
                del b[pos : pos + rng.randrange(1, 9)]
            elif k == 4 and b:
                n = rng.randrange(1, 17)
                b[pos:pos] = b[max(0, pos - n) : pos]
            elif k == 5:
                del b[pos:]
            else:
                b[pos:pos] = rng.choice((b"\x00", b"\xff\xfe", b'"', b"\\u0000", b"\\ud800",
                                         b"1e999", b"-", b"[", b"{}"))  # fmt: skip
        return bytes(b)

    # -- requests -------------------------------------------------------------------------

    def request(self) -> RemotingCommand:
        """A well-formed request with hostile contents (one that would
        legitimately stop the good client is drawn again)."""
        for _ in range(100):
            cmd = self._request()
            if not stops_the_good_client(cmd):
                return cmd
        raise AssertionError("100 requests in a row stopped the good client")

    def _request(self) -> RemotingCommand:
        rng = self.rng
        code, ext, body = rng.choice(self.templates)
        ext = dict(ext)
        r = rng.random()
        if r < 0.08:
            code = rng.choice(self.codes)
        elif r < 0.1:
            code = rng.randrange(-32768, 32768)
        for _ in range(rng.choice((0, 1, 1, 2, 2, 3, 5))):
            op = rng.randrange(5)
            if op == 0 and ext:
                del ext[rng.choice(list(ext))]
            elif op == 1 and ext:
                ext[rng.choice(list(ext))] = self.value()
            elif op == 2:
                ext[rng.choice(KEYS)] = self.value()
            elif op == 3 and ext:
                key = rng.choice(list(ext))
                ext[key] = self.mutate_bytes(ext[key].encode()).decode("utf-8", "replace")
            else:
                ext[self.value()[:40]] = self.value()
        r = rng.random()
        if r < 0.15:
            body = self.mutate_bytes(body or rng.choice(self.bodies))
        elif r < 0.22:
            body = self._bytes(rng.randrange(0, 2048))
        elif r < 0.3:
            body = rng.choice(self.bodies)
        elif r < 0.35:
            body = b""
        cmd = RemotingCommand(code, ext, body)
        r = rng.random()
        if r < 0.05:
            cmd.flag = FLAG_ONEWAY
        elif r < 0.07:
            cmd.flag = FLAG_RESPONSE
        elif r < 0.09:
            cmd.flag = rng.randrange(-(2**31), 2**31)
        if rng.random() < 0.05:
            cmd.version = rng.choice((-1, 0, 63, 401, 32767, -32768))
        if rng.random() < 0.05:
            cmd.language = rng.choice((*_LANGS, "", "ZZZ", "é"))
        if rng.random() < 0.05:
            cmd.remark = self.value()
        if rng.random() < 0.15 and -32768 <= cmd.code < 32768:
            cmd.serialize_type = SERIALIZE_ROCKETMQ
        return cmd

    def header_frame(self, cmd: RemotingCommand) -> bytes:
        """The frame of cmd with its header bytes mutated (lengths consistent)."""
        header = self.mutate_bytes(cmd.encode_header())
        return (
            _PREFIX.pack(4 + len(header) + len(cmd.body), (cmd.serialize_type << 24) | len(header))
            + header
            + cmd.body
        )

    def whole_frame(self, cmd: RemotingCommand) -> bytes:
        """The frame of cmd with any bytes mutated, the length fields included."""
        rng = self.rng
        frame = cmd.encode()
        if rng.random() < 0.5:  # aim at the 8 bytes of lengths
            b = bytearray(frame)
            for _ in range(rng.randrange(1, 3)):
                b[rng.randrange(min(8, len(b)))] = rng.choice((0, 0xFF, 0x01, 0x80,
                                                               rng.randrange(256)))  # fmt: skip
            return bytes(b)
        return self.mutate_bytes(frame)


def oracle(frame: bytes) -> tuple[list[RemotingCommand], bool, bool]:
    """What the broker's codec makes of frame: (commands, rejected, waits
    for more bytes)."""
    dec = FrameDecoder(MAX_FRAME)
    try:
        cmds = dec.feed(frame)
    except RemotingError:
        return [], True, False
    return cmds, False, dec.buffered > 0


def expects_answer(cmd: RemotingCommand) -> bool:
    return not cmd.flag & (FLAG_RESPONSE | FLAG_ONEWAY)


def may_be_held(cmd: RemotingCommand) -> bool:
    """A pull or a pop may be held (long polling) for up to 20 s: not waited for."""
    return cmd.code in (RC.PULL_MESSAGE, RC.POP_MESSAGE)


@dataclasses.dataclass
class FuzzStats:
    inputs: Counter[str] = dataclasses.field(default_factory=Counter)
    answers: Counter[int] = dataclasses.field(default_factory=Counter)
    connections: int = 0
    #: connections the server closed, by our local port (for the log check)
    server_closed_ports: list[int] = dataclasses.field(default_factory=list)
    client_closed: int = 0
    #: (class, seed, index, what) of every broken promise; a few kept
    failures: list[str] = dataclasses.field(default_factory=list)
    failure_count: int = 0
    unhandled: int = 0
    held_unanswered: int = 0

    def fail(self, what: str) -> None:
        self.failure_count += 1
        if len(self.failures) < 20:
            self.failures.append(what)

    @property
    def total(self) -> int:
        return sum(self.inputs.values())


class _Conn:
    """One raw connection: writes frames, reads answers (frames with the
    response bit; requests from the server, such as
    NOTIFY_CONSUMER_IDS_CHANGED, are skipped)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder(MAX_FRAME)
        self.port: int = writer.get_extra_info("sockname")[1]
        self.eof = False

    @classmethod
    async def open(cls, addr: str) -> _Conn:
        host, port = split_addr(addr)
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
        return cls(reader, writer)

    async def answers(self, timeout: float) -> list[RemotingCommand]:
        """The next answers to arrive ([] with eof set when the server closed)."""
        async with asyncio.timeout(timeout):
            while True:
                try:
                    data = await self.reader.read(1 << 18)
                except (ConnectionResetError, BrokenPipeError):
                    data = b""
                if not data:
                    self.eof = True
                    return []
                out = [c for c in self.decoder.feed(data) if c.flag & FLAG_RESPONSE]
                if out:
                    return out

    def write(self, data: bytes) -> None:
        if not self.writer.is_closing():
            self.writer.write(data)

    async def close(self) -> None:
        self.writer.transport.abort()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


#: shares of the inputs: the raw classes cost a connection whenever they
#: break framing (and a round trip each), the handler class is pipelined
RAW_SHARE = 0.06
NAMESRV_SHARE = 0.1


class Fuzzer:
    """Drives `total` inputs at a broker (and a share at a name server):
    `handler_workers` pipelined connections to the broker, one to the name
    server, `raw_workers` one-input connections to the broker."""

    def __init__(self, broker: str, namesrv: str, seed: int, total: int, *, deadline: float,
                 broker_codes: list[int], namesrv_codes: list[int], handler_workers: int = 4,
                 raw_workers: int = 12) -> None:  # fmt: skip
        """broker_codes, namesrv_codes: what the servers serve (their
        RemotingServer.request_codes(), see fuzz_vocabulary.served_codes)."""
        self.broker = broker
        self.namesrv = namesrv
        self.seed = seed
        self.total = total
        self.deadline = deadline
        self.stats = FuzzStats()
        raw = int(total * RAW_SHARE)
        ns = int(total * NAMESRV_SHARE)
        handler = total - raw - ns
        bt, nt = broker_templates(), namesrv_templates()
        self.plan: list[tuple[str, str, list[Template], list[int], int]]
        self.plan = [("handler", namesrv, nt, namesrv_codes, ns)]
        for i in range(handler_workers):
            q = handler // handler_workers + (i < handler % handler_workers)
            self.plan.append(("handler", broker, bt, broker_codes, q))
        for i in range(raw_workers):
            q = raw // raw_workers + (i < raw % raw_workers)
            self.plan.append(("raw", broker, bt, broker_codes, q))

    async def run(self) -> FuzzStats:
        tasks = [
            asyncio.create_task(self._worker(i, *p), name=f"fuzz:{p[0]}{i}")
            for i, p in enumerate(self.plan)
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return self.stats

    async def _worker(self, wid: int, kind: str, addr: str,
                      templates: list[Template],
                      codes: list[int], quota: int) -> None:  # fmt: skip
        rng = random.Random(f"{self.seed}:{wid}")
        mut = Mutator(rng, templates, codes)
        left = quota
        while left > 0 and time.monotonic() < self.deadline:
            if kind == "handler":
                n = min(INPUTS_PER_CONNECTION, left)
                await self._handler_connection(wid, addr, mut, n)
            else:
                n = 1
                await self._raw_episode(wid, addr, mut)
            left -= n

    async def _handler_connection(self, wid: int, addr: str, mut: Mutator, n: int) -> None:
        st = self.stats
        conn = await _Conn.open(addr)
        st.connections += 1
        waiting: dict[int, RemotingCommand] = {}
        held: set[int] = set()
        opaque = 0
        try:
            sent = 0
            while sent < n:
                batch = []
                for _ in range(min(WINDOW - len(waiting), n - sent)):
                    cmd = mut.request()
                    opaque += 1
                    cmd.opaque = opaque
                    try:
                        frame = cmd.encode()
                    except (ValueError, UnicodeError, OverflowError, struct.error):
                        continue  # not encodable by our own client; not an input
                    sent += 1
                    st.inputs["handler"] += 1
                    batch.append(frame)
                    if expects_answer(cmd):
                        if may_be_held(cmd):
                            held.add(opaque)
                        else:
                            waiting[opaque] = cmd
                conn.write(b"".join(batch))
                await self._collect(conn, waiting, held, wid, low=WINDOW // 2)
                if conn.eof:
                    return
            await self._collect(conn, waiting, held, wid, low=0)
        finally:
            st.held_unanswered += len(held)
            if conn.eof:
                st.server_closed_ports.append(conn.port)
            else:
                st.client_closed += 1
            await conn.close()

    async def _collect(self, conn: _Conn, waiting: dict[int, RemotingCommand],
                       held: set[int], wid: int, low: int) -> None:  # fmt: skip
        st = self.stats
        while len(waiting) > low:
            try:
                answers = await conn.answers(ANSWER_TIMEOUT)
            except TimeoutError:
                codes = Counter(c.code for c in waiting.values())
                st.fail(f"worker {wid}: no answer in {ANSWER_TIMEOUT}s to {dict(codes)}; "
                        f"e.g. {next(iter(waiting.values()))!r}")  # fmt: skip
                waiting.clear()
                return
            if conn.eof:
                st.fail(f"worker {wid}: server closed a connection of well-formed frames "
                        f"(port {conn.port}); waiting for {len(waiting)}")  # fmt: skip
                waiting.clear()
                return
            for a in answers:
                req = waiting.pop(a.opaque, None)
                if req is None:
                    held.discard(a.opaque)
                st.answers[a.code] += 1
                if UNHANDLED.match(a.remark or ""):
                    st.unhandled += 1
                    st.fail(f"worker {wid}: unhandled error {a.remark!r} for {req!r}")

    async def _raw_episode(self, wid: int, addr: str, mut: Mutator) -> None:
        """One header- or frame-mutated input on a fresh connection, judged
        by the oracle."""
        st = self.stats
        # a few requests are not encodable by our client; a mutated frame
        # may become one the good client cannot live with (drawn again)
        for _ in range(100):
            cmd = mut.request()
            cmd.opaque = 7
            try:
                if mut.rng.random() < 0.6:
                    kind, frame = "header", mut.header_frame(cmd)
                else:
                    kind, frame = "frame", mut.whole_frame(cmd)
            except (ValueError, UnicodeError, OverflowError, struct.error):
                continue
            # a frame the codec still waits for more bytes of is left to us
            # to close (below): the broker only ever sees it go away
            cmds, rejected, _incomplete = oracle(frame)
            if not any(stops_the_good_client(c) for c in cmds):
                break
        else:
            raise AssertionError("no encodable request in 100 tries")
        st.inputs[kind] += 1
        want = Counter(c.opaque for c in cmds if expects_answer(c) and not may_be_held(c))
        conn = await _Conn.open(addr)
        st.connections += 1
        try:
            conn.write(frame)
            while want and not conn.eof:
                try:
                    answers = await conn.answers(ANSWER_TIMEOUT)
                except TimeoutError:
                    st.fail(f"{kind} input: no answer in {ANSWER_TIMEOUT}s to {cmds!r}: "
                            f"{frame[:200]!r}")  # fmt: skip
                    return
                for a in answers:
                    st.answers[a.code] += 1
                    want[a.opaque] -= 1
                    if want[a.opaque] <= 0:
                        del want[a.opaque]
                    if UNHANDLED.match(a.remark or ""):
                        st.unhandled += 1
                        st.fail(f"{kind} input: unhandled error {a.remark!r}: {frame[:200]!r}")
            if want and conn.eof:
                st.fail(f"{kind} input: closed without answering {cmds!r}: {frame[:200]!r}")
            if rejected and not conn.eof:
                try:
                    while not conn.eof:
                        await conn.answers(ANSWER_TIMEOUT)
                except TimeoutError:
                    st.fail(f"{kind} input: bad frame not closed in {ANSWER_TIMEOUT}s: "
                            f"{frame[:200]!r}")  # fmt: skip
        finally:
            if conn.eof:
                st.server_closed_ports.append(conn.port)
            else:
                st.client_closed += 1
            await conn.close()


def closing_log_lines(log_text: str) -> list[tuple[int, str]]:
    """(peer port, reason) of every 'closing connection from' line."""
    out = []
    for m in re.finditer(r"closing connection from [\d.]+:(\d+): ([^\n]*)", log_text):
        out.append((int(m.group(1)), m.group(2)))
    return out
