"""Thousands of random topic names do not grow the metrics without bound:
past metricsLabelValueLimit, topics are counted under `_other`; the
tallies, the scrape and the totals stay right (a LocalCluster, real sockets,
sends to 2,000 new topics)."""

from __future__ import annotations

import asyncio
import pathlib
import uuid

from tests.integration.helpers import cluster, send_ok

from ._scrape import scrape, series, total

LIMIT = 50
FIRST, SECOND = 1000, 1000


def test_random_topics_fold_into_other(tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        async with cluster(
            tmp_path,
            metrics_exporter_type="PROM",
            metrics_prom_exporter_host="127.0.0.1",
            metrics_prom_exporter_port=0,
            metrics_label_value_limit=LIMIT,
            mapped_file_size_consume_queue=100 * 20,
        ) as (c, cl):
            assert c.broker is not None and c.broker.metrics is not None
            metrics = c.broker.metrics
            loop = asyncio.get_running_loop()

            async def send_to_new_topics(n: int) -> None:
                for _ in range(n):
                    topic = f"rnd-{uuid.uuid4().hex}"
                    await send_ok(cl, c.broker_addr, topic, b"x", 0, defaultTopicQueueNums="1")

            await send_to_new_topics(FIRST)
            first = await loop.run_in_executor(None, scrape, metrics.addr)
            await send_to_new_topics(SECOND)
            second = await loop.run_in_executor(None, scrape, metrics.addr)

            # memory: the tallies hold LIMIT topics and _other, whatever was sent
            assert metrics.tallies.in_label_values() == LIMIT + 1
            for text, sent in ((first, FIRST), (second, FIRST + SECOND)):
                got = series(text, "rocketmq_messages_in_total")
                assert len(got) == LIMIT + 1
                assert total(text, "rocketmq_messages_in_total") == sent
                assert total(text, "rocketmq_messages_in_total", topic="_other") == sent - LIMIT
                [(_, held)] = series(
                    text, "pyrmq_metrics_label_values", metric="rocketmq_messages_in_total"
                )
                assert held == LIMIT + 1
            # the scrape did not grow with the topics (only numbers changed),
            # and names no random topic past the LIMIT it named at first
            assert abs(len(second) - len(first)) < 200, (len(first), len(second))
            assert _random_topic_series(second) == _random_topic_series(first)
            assert total(second, "rocketmq_topic_number") >= FIRST + SECOND

    asyncio.run(asyncio.wait_for(main(), 240))


def _random_topic_series(text: str) -> set[str]:
    return {line.split(" ")[0] for line in text.splitlines() if 'topic="rnd-' in line}
