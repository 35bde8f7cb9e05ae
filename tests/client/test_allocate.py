"""Properties of the queue allocation strategies (pyrmq.consumer.allocate):
shares cover every queue and are disjoint, AVG and AVG_BY_CIRCLE are even,
no answer depends on input order, and consistent hashing only moves queues
to a consumer that joins."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from pyrmq.common.message import MessageQueue
from pyrmq.consumer.allocate import (
    AllocateMachineRoomNearby,
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueConsistentHash,
    AllocateMessageQueueStrategy,
    CallableMachineRoomResolver,
    strategy_by_name,
)

GROUP = "test_group"
ROOMS = ("hz", "sh", "bj")

bounded = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _room_of_cid(cid: str) -> str:
    return cid.split("/", 1)[0]


def _room_of_mq(mq: MessageQueue) -> str:
    return mq.broker_name.split("@", 1)[0]


RESOLVER = CallableMachineRoomResolver(_room_of_mq, _room_of_cid)

# name -> factory; every one of these must partition the queues among consumers
# whose names come from `cids` and queues from `queues` below (broker names carry
# a room, consumer ids carry one too, for the machine-room strategies).
PARTITIONING: dict[str, Callable[[], AllocateMessageQueueStrategy]] = {
    "AVG": AllocateMessageQueueAveragely,
    "AVG_BY_CIRCLE": AllocateMessageQueueAveragelyByCircle,
    "CONSISTENT_HASH": AllocateMessageQueueConsistentHash,
    "CONSISTENT_HASH_3": lambda: AllocateMessageQueueConsistentHash(virtual_node_count=3),
    "MACHINE_ROOM": lambda: AllocateMessageQueueByMachineRoom(ROOMS),
    "MACHINE_ROOM_NEARBY-AVG": lambda: AllocateMachineRoomNearby(
        AllocateMessageQueueAveragely(), RESOLVER
    ),
    "MACHINE_ROOM_NEARBY-AVG_BY_CIRCLE": lambda: AllocateMachineRoomNearby(
        AllocateMessageQueueAveragelyByCircle(), RESOLVER
    ),
    "MACHINE_ROOM_NEARBY-CONSISTENT_HASH": lambda: AllocateMachineRoomNearby(
        AllocateMessageQueueConsistentHash(), RESOLVER
    ),
}

# Broker names "<room>@<name>": every room is one of the consumer rooms of
# MACHINE_ROOM, and NEARBY sees rooms with and without consumers.
queue_st = st.builds(
    MessageQueue,
    topic=st.sampled_from(["TopicA", "TopicB", "Tópico"]),
    broker_name=st.builds(
        "{}@{}".format, st.sampled_from(ROOMS), st.sampled_from(["broker-a", "broker-b"])
    ),
    queue_id=st.integers(0, 15),
)
queues = st.lists(queue_st, min_size=1, max_size=40, unique=True)
# Client ids "<room>/<text>"; odd characters exercise the Java string order.
cids = st.lists(
    st.builds("{}/{}".format, st.sampled_from(ROOMS[:2]), st.text(min_size=1, max_size=6)),
    min_size=1,
    max_size=10,
    unique=True,
)


def _shares(
    strategy: AllocateMessageQueueStrategy,
    mq_all: Sequence[MessageQueue],
    cid_all: Sequence[str],
) -> dict[str, list[MessageQueue]]:
    return {cid: strategy.allocate(GROUP, cid, mq_all, cid_all) for cid in cid_all}


def _owners(
    strategy: AllocateMessageQueueStrategy,
    mq_all: Sequence[MessageQueue],
    cid_all: Sequence[str],
) -> dict[MessageQueue, list[str]]:
    owners: dict[MessageQueue, list[str]] = {}
    for cid, share in _shares(strategy, mq_all, cid_all).items():
        for mq in share:
            owners.setdefault(mq, []).append(cid)
    return owners


@pytest.mark.parametrize("name", sorted(PARTITIONING))
@bounded
@given(mq_all=queues, cid_all=cids)
def test_each_queue_goes_to_exactly_one_consumer(
    name: str, mq_all: list[MessageQueue], cid_all: list[str]
) -> None:
    strategy = PARTITIONING[name]()
    owners = _owners(strategy, mq_all, cid_all)
    assert set(owners) == set(mq_all)
    assert all(len(o) == 1 for o in owners.values()), owners


@bounded
@given(mq_all=queues, cid_all=cids)
def test_machine_room_skips_rooms_it_does_not_serve(
    mq_all: list[MessageQueue], cid_all: list[str]
) -> None:
    strategy = AllocateMessageQueueByMachineRoom(["hz"])
    owners = _owners(strategy, mq_all, cid_all)
    assert set(owners) == {mq for mq in mq_all if _room_of_mq(mq) == "hz"}
    assert all(len(o) == 1 for o in owners.values())
    assert strategy.allocate(GROUP, cid_all[0], [MessageQueue("T", "no-room", 0)], cid_all) == []


@bounded
@given(mq_all=queues, cid_all=cids)
def test_nearby_keeps_queues_in_a_room_with_consumers(
    mq_all: list[MessageQueue], cid_all: list[str]
) -> None:
    strategy = PARTITIONING["MACHINE_ROOM_NEARBY-AVG"]()
    consumer_rooms = {_room_of_cid(c) for c in cid_all}
    for cid, share in _shares(strategy, mq_all, cid_all).items():
        for mq in share:
            room = _room_of_mq(mq)
            assert room == _room_of_cid(cid) or room not in consumer_rooms


@pytest.mark.parametrize(
    "strategy",
    [AllocateMessageQueueAveragely(), AllocateMessageQueueAveragelyByCircle()],
    ids=["AVG", "AVG_BY_CIRCLE"],
)
@bounded
@given(mq_all=queues, cid_all=cids)
def test_even_strategies_differ_by_at_most_one(
    strategy: AllocateMessageQueueStrategy, mq_all: list[MessageQueue], cid_all: list[str]
) -> None:
    sizes = [len(s) for s in _shares(strategy, mq_all, cid_all).values()]
    assert max(sizes) - min(sizes) <= 1
    assert sum(sizes) == len(mq_all)


@pytest.mark.parametrize("name", sorted(PARTITIONING))
@bounded
@given(mq_all=queues, cid_all=cids, data=st.data())
def test_answer_ignores_input_order_and_duplicates(
    name: str, mq_all: list[MessageQueue], cid_all: list[str], data: st.DataObject
) -> None:
    strategy = PARTITIONING[name]()
    mq_shuffled = data.draw(st.permutations(mq_all), label="mq_all shuffled")
    cid_shuffled = data.draw(st.permutations(cid_all), label="cid_all shuffled")
    repeated = data.draw(st.lists(st.sampled_from(mq_all), max_size=5), label="mq repeats")
    for cid in cid_all:
        expected = strategy.allocate(GROUP, cid, mq_all, cid_all)
        assert strategy.allocate(GROUP, cid, mq_shuffled, cid_shuffled) == expected
        assert strategy.allocate(GROUP, cid, mq_shuffled + repeated, cid_all + cid_all) == expected
        assert expected == sorted(expected)


# Consistent hashing's defining property. Measured on 300 random groups
# (2..8 consumers, 8..64 queues, one consumer joining): CONSISTENT_HASH moved
# ~19% of queues, all of them to the newcomer; AVG moved ~48% and AVG_BY_CIRCLE
# ~75%, although the newcomer itself only takes ~18% under either.
@bounded
@given(
    mq_all=st.lists(queue_st, min_size=8, max_size=48, unique=True),
    cid_all=st.lists(st.text(min_size=1, max_size=8), min_size=2, max_size=8, unique=True),
    newcomer=st.text(min_size=1, max_size=8),
)
def test_consistent_hash_moves_queues_only_to_a_newcomer(
    mq_all: list[MessageQueue], cid_all: list[str], newcomer: str
) -> None:
    if newcomer in cid_all:
        cid_all = [c for c in cid_all if c != newcomer]
    strategy = AllocateMessageQueueConsistentHash()
    before = {mq: o[0] for mq, o in _owners(strategy, mq_all, cid_all).items()}
    after = {mq: o[0] for mq, o in _owners(strategy, mq_all, [*cid_all, newcomer]).items()}
    moved = [mq for mq in mq_all if before[mq] != after[mq]]
    assert all(after[mq] == newcomer for mq in moved)
    assert len(moved) == sum(owner == newcomer for owner in after.values())
    avg = AllocateMessageQueueAveragely()
    avg_before = {mq: o[0] for mq, o in _owners(avg, mq_all, cid_all).items()}
    avg_after = {mq: o[0] for mq, o in _owners(avg, mq_all, [*cid_all, newcomer]).items()}
    note(
        f"moved: consistent hash {len(moved)}, averagely "
        f"{sum(avg_before[mq] != avg_after[mq] for mq in mq_all)} of {len(mq_all)}"
    )


def test_consistent_hash_matches_java_md5_ring() -> None:
    # The ring hashes "<cid>-<i>" and routes Java's MessageQueue.toString(), so a
    # custom hash function sees exactly those strings.
    seen: list[str] = []

    def spy(key: str) -> int:
        seen.append(key)
        return len(seen)

    strategy = AllocateMessageQueueConsistentHash(virtual_node_count=2, hash_func=spy)
    strategy.allocate(GROUP, "c1", [MessageQueue("T", "b", 3)], ["c1"])
    assert seen == ["c1-0", "c1-1", "MessageQueue [topic=T, brokerName=b, queueId=3]"]
    with pytest.raises(ValueError, match="virtual_node_count"):
        AllocateMessageQueueConsistentHash(virtual_node_count=0)


@bounded
@given(mq_all=queues, cid_all=cids, data=st.data())
def test_by_config_returns_exactly_the_configured_queues(
    mq_all: list[MessageQueue], cid_all: list[str], data: st.DataObject
) -> None:
    # Give each consumer its own slice of the queues: together they partition.
    assignment = {mq: data.draw(st.sampled_from(cid_all), label=f"owner of {mq}") for mq in mq_all}
    for cid in cid_all:
        configured = [mq for mq, owner in assignment.items() if owner == cid]
        strategy = AllocateMessageQueueByConfig(configured)
        share = strategy.allocate(GROUP, cid, mq_all, cid_all)
        assert share == sorted(configured)
    # ... and a configured queue outside mq_all is still returned, as in Java.
    extra = MessageQueue("Other", "x@y", 99)
    assert AllocateMessageQueueByConfig([extra]).allocate(GROUP, cid_all[0], mq_all, cid_all) == [
        extra
    ]


@pytest.mark.parametrize("name", sorted(PARTITIONING))
def test_stranger_and_empty_inputs_get_nothing(name: str, caplog: pytest.LogCaptureFixture) -> None:
    strategy = PARTITIONING[name]()
    mqs = [MessageQueue("T", "hz@b", i) for i in range(4)]
    with caplog.at_level(logging.WARNING, logger="pyrmq.consumer"):
        assert strategy.allocate(GROUP, "hz/stranger", mqs, ["hz/a", "hz/b"]) == []
    assert "hz/stranger" in caplog.text
    assert strategy.allocate(GROUP, "hz/a", [], ["hz/a"]) == []
    assert strategy.allocate(GROUP, "hz/a", mqs, []) == []
    assert strategy.allocate(GROUP, "", mqs, ["hz/a"]) == []


def test_nearby_rejects_unknown_rooms() -> None:
    strategy = AllocateMachineRoomNearby(
        AllocateMessageQueueAveragely(), CallableMachineRoomResolver(lambda mq: "", _room_of_cid)
    )
    with pytest.raises(ValueError, match="machine room"):
        strategy.allocate(GROUP, "hz/a", [MessageQueue("T", "b", 0)], ["hz/a"])
    with pytest.raises(TypeError, match="broker_deploy_in"):
        AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), object())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("names", "cls"),
    [
        (("AVG", "AllocateMessageQueueAveragely"), AllocateMessageQueueAveragely),
        (
            ("AVG_BY_CIRCLE", "AllocateMessageQueueAveragelyByCircle"),
            AllocateMessageQueueAveragelyByCircle,
        ),
        (
            ("CONSISTENT_HASH", "AllocateMessageQueueConsistentHash"),
            AllocateMessageQueueConsistentHash,
        ),
    ],
)
def test_strategy_by_name_accepts_both_names(
    names: tuple[str, str], cls: type[AllocateMessageQueueStrategy]
) -> None:
    for name in names:
        assert type(strategy_by_name(name)) is cls
    assert cls.name == names[0]


def test_strategy_by_name_passes_arguments() -> None:
    mqs = [MessageQueue("T", "b", 1)]
    by_config = strategy_by_name("CONFIG", message_queues=mqs)
    assert isinstance(by_config, AllocateMessageQueueByConfig)
    assert by_config.allocate(GROUP, "a", mqs, ["a"]) == mqs
    room = strategy_by_name("AllocateMessageQueueByMachineRoom", consumer_idcs=["hz"])
    assert isinstance(room, AllocateMessageQueueByMachineRoom)
    assert room.consumer_idcs == {"hz"}
    ch = strategy_by_name("CONSISTENT_HASH", virtual_node_count=5)
    assert isinstance(ch, AllocateMessageQueueConsistentHash)
    assert ch.virtual_node_count == 5
    for nearby in (
        strategy_by_name("MACHINE_ROOM_NEARBY-AVG_BY_CIRCLE", machine_room_resolver=RESOLVER),
        strategy_by_name(
            "MACHINE_ROOM_NEARBY", allocate_strategy="AVG_BY_CIRCLE", machine_room_resolver=RESOLVER
        ),
    ):
        assert isinstance(nearby, AllocateMachineRoomNearby)
        assert nearby.full_name == "MACHINE_ROOM_NEARBY-AVG_BY_CIRCLE"


def test_strategy_by_name_rejects_unknown_names_helpfully() -> None:
    with pytest.raises(ValueError) as info:
        strategy_by_name("AVERAGE")
    message = str(info.value)
    assert "'AVERAGE'" in message
    for accepted in ("AVG", "AllocateMessageQueueAveragely", "CONSISTENT_HASH", "CONFIG"):
        assert accepted in message
