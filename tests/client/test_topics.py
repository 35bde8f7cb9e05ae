"""pyrmq.common.topics: RocketMQ's topic names of its own."""

from pyrmq.common.topics import dlq_topic, is_system_topic, retry_topic

SYSTEM = [
    "TBW102",
    "SCHEDULE_TOPIC_XXXX",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "rmq_sys_wheel",
    retry_topic("g"),
    dlq_topic("g"),
]


def test_system_topics_are_told_from_user_topics():
    for t in SYSTEM:
        assert is_system_topic(t), t
    for t in ("TopicTest", "orders", "RETRY_orders", "BenchmarkTest", "DLQ"):
        assert not is_system_topic(t), t
