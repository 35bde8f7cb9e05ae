"""Hostile input to the ACL check and to the plain_acl.yml loader: garbage
signatures, huge and odd ext fields, broken bodies, random YAML. The only
outcomes allowed are a pass, NoPermissionError (the broker answers
NO_PERMISSION with its remark) or AclConfigError (a clear load error):
never another exception, a hang, or memory growing with alias tricks."""

from __future__ import annotations

import json
import pathlib
import tracemalloc

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyrmq.acl import AclClientRPCHook, AclConfigError, PlainAccessValidator, parse_plain_acl
from pyrmq.acl.config import read_plain_acl
from pyrmq.common.errors import NoPermissionError
from pyrmq.remoting import RemotingCommand

ACL = """
accounts:
  - accessKey: fuzzAK01
    secretKey: fuzzSK01
    defaultTopicPerm: SUB
    topicPerms: [T=PUB|SUB]
"""
CODES = [10, 11, 12, 14, 15, 17, 34, 35, 36, 38, 41, 42, 50, 310, 320, 9999]
_validator: PlainAccessValidator | None = None


def validator(tmp: pathlib.Path) -> PlainAccessValidator:
    global _validator
    if _validator is None:
        p = tmp / "plain_acl.yml"
        p.write_text(ACL)
        cfg, stat = read_plain_acl(str(p))
        _validator = PlainAccessValidator(str(p), cfg, stat)
    return _validator


def check(v: PlainAccessValidator, peer: str, code: int, ext: dict[str, str], body: bytes) -> None:
    try:
        v.validate(peer, code, ext, body)
    except NoPermissionError as e:
        assert e.remark


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)
bodies = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({"consumerDataSet": json_values, "consumerGroup": json_values}).map(
        lambda v: json.dumps(v).encode()
    ),
)
ext_fields = st.dictionaries(
    st.sampled_from(["AccessKey", "Signature", "topic", "b", "consumerGroup", "group", "x"])
    | st.text(max_size=8),
    st.text(max_size=40),
    max_size=8,
)
peers = st.sampled_from(["127.0.0.1:1", "::1:2", "?", "", "garbage", "[::1]:3", "1.2.3.4:5"])


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(code=st.sampled_from(CODES), ext=ext_fields, body=bodies, peer=peers, sign=st.booleans())
def test_validate_never_crashes(tmp_path, code, ext, body, peer, sign):
    v = validator(tmp_path)
    cmd = RemotingCommand(code, dict(ext), body)
    if sign:
        AclClientRPCHook("fuzzAK01", "fuzzSK01")(cmd)
    check(v, peer, code, cmd.ext_fields, cmd.body)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sig=st.one_of(st.text(max_size=200), st.binary(max_size=64).map(lambda b: b.hex())),
    size=st.sampled_from([0, 1, 1 << 10, 1 << 20]),
)
def test_garbage_signatures_and_huge_fields(tmp_path, sig, size):
    v = validator(tmp_path)
    ext = {"AccessKey": "fuzzAK01", "Signature": sig, "topic": "T", "huge": "x" * size}
    try:
        v.validate("127.0.0.1:1", 10, ext, b"y" * size)
        raise AssertionError("a garbage signature passed")
    except NoPermissionError as e:
        assert "signature" in e.remark


def load(text: str | bytes) -> None:
    try:
        parse_plain_acl(text)
    except AclConfigError as e:
        assert str(e)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400) | st.binary(max_size=400))
def test_loader_random_text(text):
    load(text)


account_values = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=12),
    st.lists(st.text(max_size=12) | st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)  # fmt: skip
accounts = st.dictionaries(
    st.sampled_from(["accessKey", "secretKey", "whiteRemoteAddress", "admin", "defaultTopicPerm",
                     "defaultGroupPerm", "topicPerms", "groupPerms", "other"]),
    account_values,
    max_size=9,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.fixed_dictionaries(
        {"accounts": st.lists(accounts, max_size=4) | account_values},
        optional={
            "globalWhiteRemoteAddresses": st.lists(st.text(max_size=20), max_size=3)
            | account_values
        },
    )
)
def test_loader_wrong_types(doc):
    load(yaml.safe_dump(doc))


def test_alias_bomb_is_refused_without_expanding():
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 12):
        prev = f"*a{i - 1}"
        levels.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
    bomb = "\n".join(levels) + "\naccounts: [{accessKey: *a11, secretKey: *a11}]\n"
    tracemalloc.start()
    try:
        load(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 << 20, f"the loader used {peak} bytes on a {len(bomb)}-byte file"
    try:
        parse_plain_acl(bomb)
        raise AssertionError("an alias bomb loaded")
    except AclConfigError as e:
        assert "aliases" in str(e)


@settings(max_examples=300, deadline=None)
@given(key=st.binary(max_size=200), parts=st.lists(st.binary(max_size=300), max_size=3))
def test_hmac_sha1_equals_the_standard_library(key, parts):
    import hashlib
    import hmac

    from pyrmq.acl.signing import HmacSha1

    assert HmacSha1(key).digest(*parts) == hmac.new(key, b"".join(parts), hashlib.sha1).digest()
