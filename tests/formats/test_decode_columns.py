"""rmqcore.decode_columns (the columnar decoder the Spark reader uses)
agrees with decode_records + decode_properties on every field."""

from __future__ import annotations

import glob
import os
import tempfile
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rmqcore
from pyrmq.common.errors import CorruptStoreError
from tests.formats.test_record_format import SMALL, hosts, int32, int64, ptext

raw_props = st.one_of(
    st.dictionaries(st.sampled_from(["UNIQ_KEY", "KEYS", "TAGS", "a", "b"]), ptext, max_size=5).map(
        rmqcore.encode_properties
    ),
    # malformed items (no separator, two separators, empty) are dropped as Java does
    st.lists(st.sampled_from(["x\x01y", "bad", "k\x01v\x01w", "", "TAGS\x01t", "a\x01"])).map(
        lambda items: "\x02".join(items).encode()
    ),
)


@st.composite
def records(draw):  # type: ignore[no-untyped-def]
    out = []
    for _ in range(draw(st.integers(1, 8))):
        body = draw(st.binary(max_size=600))
        compressed = draw(st.booleans())
        out.append(
            dict(
                qid=draw(st.integers(0, 3)),
                body=body,
                stored=zlib.compress(body) if compressed else body,
                sysflag=1 if compressed else 0,
                props=draw(raw_props),
                born_timestamp=draw(int64),
                born_host=draw(hosts),
                reconsume_times=draw(int32),
            )
        )
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recs=records(), include=st.booleans())
def test_columns_match_records(recs: list[dict], include: bool) -> None:
    with tempfile.TemporaryDirectory() as d:
        core = rmqcore.MessageStoreCore(os.path.join(d, "s"), **SMALL)
        try:
            last = None
            for m in recs:
                last = core.put(
                    "ColT", m["qid"], m["stored"], m["props"], sysflag=m["sysflag"],
                    born_timestamp=m["born_timestamp"], born_host=m["born_host"],
                    reconsume_times=m["reconsume_times"],
                )  # fmt: skip
            assert last is not None
            path = sorted(glob.glob(os.path.join(d, "s", "commitlog", "*")))[0]
            with open(path, "rb") as f:
                data = f.read(last.next_phys_offset)
        finally:
            core.close()
    want = rmqcore.decode_records(data)
    got = rmqcore.decode_columns(data, include)
    assert got["n"] == len(want) == len(recs)
    for i, (w, m) in enumerate(zip(want, recs, strict=True)):
        props = rmqcore.decode_properties(w["properties"])
        assert got["body"][i] == m["body"]
        for col in (
            "queue_offset",
            "commit_log_offset",
            "born_timestamp",
            "store_timestamp",
            "queue_id",
            "reconsume_times",
            "sys_flag",
            "born_host",
            "store_host",
            "topic",
        ):
            assert got[col][i] == w[col], col
        assert got["uniq_key"][i] == props.get("UNIQ_KEY")
        assert got["keys"][i] == props.get("KEYS")
        assert got["tags"][i] == props.get("TAGS")
        if include:
            a, b = got["prop_offsets"][i], got["prop_offsets"][i + 1]
            assert dict(zip(got["prop_names"][a:b], got["prop_values"][a:b], strict=True)) == props
            assert len(set(got["prop_names"][a:b])) == b - a
        else:
            assert got["prop_offsets"] is None


def test_crc_mismatch_raises() -> None:
    with tempfile.TemporaryDirectory() as d:
        core = rmqcore.MessageStoreCore(os.path.join(d, "s"), **SMALL)
        try:
            r = core.put("ColT", 0, b"hello world", b"")
            path = sorted(glob.glob(os.path.join(d, "s", "commitlog", "*")))[0]
            with open(path, "rb") as f:
                data = bytearray(f.read(r.next_phys_offset))
        finally:
            core.close()
    data[-12] ^= 0xFF  # a body byte
    with pytest.raises(CorruptStoreError, match="CRC"):
        rmqcore.decode_columns(bytes(data))
