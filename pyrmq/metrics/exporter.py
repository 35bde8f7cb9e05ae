"""PromExporter: the Prometheus endpoint (GET /metrics), served by asyncio
on the server's own loop.

A scrape runs in two halves. On the loop, `collect()` copies the numbers
(plain integers from the tallies, gauges read from the server's tables):
bounded work, no await, so the copy is consistent. On the exporter's one
thread ("pyrmq-metrics"), the copy becomes prometheus_client families and
text: formatting, the costly half, never holds the loop."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pyrmq.common import aio
from pyrmq.common.errors import ClientError
from pyrmq.common.listen import AcceptingServer, start_stream_server
from pyrmq.common.threads import single_thread_executor
from pyrmq.metrics.names import (
    BY_NAME,
    MESSAGE_SIZE_BUCKETS,
    NODE_LABELS,
    RPC_LATENCY_BUCKETS_MS,
    MetricSpec,
)
from pyrmq.metrics.tally import cumulative

log = logging.getLogger("pyrmq.metrics")

#: a scrape request's head must arrive within this time and size
REQUEST_TIMEOUT = 10.0
MAX_REQUEST_HEAD = 8192
#: scrapes served at once (more wait): bounds the copies held in memory
MAX_CONCURRENT_SCRAPES = 4

_BUCKETS: dict[str, tuple[float, ...]] = {
    "rocketmq_message_size": tuple(float(b) for b in MESSAGE_SIZE_BUCKETS),
    "rocketmq_rpc_latency": tuple(float(b) for b in RPC_LATENCY_BUCKETS_MS),
}


@dataclasses.dataclass(slots=True)
class Family:
    """One metric's samples, copied on the loop. Counter and gauge samples
    are (label values, value); histogram samples are (label values,
    per-bucket counts with +Inf last, sum)."""

    spec: MetricSpec
    samples: list[tuple[tuple[str, ...], float]] = dataclasses.field(default_factory=list)
    histogram: list[tuple[tuple[str, ...], list[int], float]] = dataclasses.field(
        default_factory=list
    )

    @classmethod
    def of(cls, name: str) -> Family:
        return cls(BY_NAME[name])

    def add(self, labels: Sequence[str], value: float) -> None:
        self.samples.append((tuple(labels), value))


Collect = Callable[[], list[Family]]


def render(node: tuple[str, str, str], families: list[Family]) -> bytes:
    """The text exposition of families (run on the exporter's thread)."""
    from prometheus_client import generate_latest
    from prometheus_client.core import (
        CollectorRegistry,
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )

    merged: dict[str, Family] = {}
    for f in families:  # one family per name, whoever added to it
        have = merged.get(f.spec.name)
        if have is None:
            merged[f.spec.name] = Family(f.spec, list(f.samples), list(f.histogram))
        else:
            have.samples += f.samples
            have.histogram += f.histogram

    def built() -> Iterator[Metric]:
        for f in merged.values():
            spec = f.spec
            labels = [*NODE_LABELS, *spec.labels]
            m: Any
            if spec.kind == "counter":
                m = CounterMetricFamily(spec.name.removesuffix("_total"), spec.help, labels=labels)
            elif spec.kind == "gauge":
                m = GaugeMetricFamily(spec.name, spec.help, labels=labels)
            else:
                m = HistogramMetricFamily(spec.name, spec.help, labels=labels)
                bounds = _BUCKETS[spec.name]
                for values, counts, total in f.histogram:
                    cum = cumulative(counts)
                    buckets = [(_le(b), float(c)) for b, c in zip(bounds, cum, strict=False)]
                    buckets.append(("+Inf", float(cum[-1])))
                    m.add_metric([*node, *values], buckets, total)
                yield m
                continue
            for values, value in f.samples:
                m.add_metric([*node, *values], value)
            yield m

    class _Snapshot:
        def collect(self) -> Iterator[Metric]:
            return built()

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot())
    data: bytes = generate_latest(registry)
    return data


def _le(bound: float) -> str:
    return str(int(bound)) if bound == int(bound) else str(bound)


class PromExporter:
    """`await PromExporter(host, port, node, collect).start()`; `port` is the
    bound one (port 0: any free port)."""

    def __init__(self, host: str, port: int, node: tuple[str, str, str], collect: Collect) -> None:
        self.host = host or "0.0.0.0"
        self.port = port
        self.node = node
        self._collect = collect
        self._server: asyncio.Server | AcceptingServer | None = None
        self._thread: ThreadPoolExecutor | None = None
        self._scrapes = asyncio.Semaphore(MAX_CONCURRENT_SCRAPES)
        self.scrapes = 0

    @property
    def addr(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"{host}:{self.port}"

    async def start(self) -> None:
        try:
            self._server = await start_stream_server(
                self._serve, self.host, self.port, name="metrics"
            )
        except OSError as e:
            raise ClientError(
                f"metricsPromExporterPort: cannot listen on {self.host}:{self.port} "
                f"({e.strerror or e})"
            ) from None
        self.port = self._server.sockets[0].getsockname()[1]
        self._thread = single_thread_executor("pyrmq-metrics")
        log.info("metrics: Prometheus endpoint http://%s/metrics", self.addr)

    async def shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
        if self._thread is not None:
            self._thread.shutdown(wait=True, cancel_futures=True)
            self._thread = None

    async def scrape(self) -> bytes:
        """The exposition text now (what GET /metrics answers)."""
        assert self._thread is not None, "start() first"
        families = self._collect()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, render, self.node, families)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
            if len(head) > MAX_REQUEST_HEAD:
                raise ValueError("request head too large")
            method, path, *_ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            if method != "GET":
                await _reply(writer, 405, b"GET only\n")
            elif path.split("?", 1)[0] not in ("/metrics", "/"):
                await _reply(writer, 404, b"try /metrics\n")
            else:
                async with self._scrapes:
                    body = await self.scrape()
                self.scrapes += 1
                await _reply(writer, 200, body)
        except (TimeoutError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # a client that does not speak HTTP: just close
        except (ConnectionError, OSError):
            pass
        except Exception:
            log.exception("metrics: a scrape failed")
            with contextlib.suppress(Exception):
                await _reply(writer, 500, b"scrape failed\n")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error"}


async def _reply(writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
    from prometheus_client import CONTENT_TYPE_LATEST

    ctype = CONTENT_TYPE_LATEST if status == 200 else "text/plain; charset=utf-8"
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {ctype}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    aio.write(writer, head.encode("latin-1") + body)
    await writer.drain()
