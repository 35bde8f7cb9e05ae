"""The JSON RemotingCommand header codec in C (csrc/remoting_header.c),
checked against Python's json module as the oracle, and the frame splitter
against hand-built frames."""

from __future__ import annotations

import contextlib
import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rmqcore

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
json_scalar = st.one_of(
    text,
    st.integers(-(2**53), 2**53),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
)
json_value = st.recursive(
    json_scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(text, inner, max_size=3)),
    max_leaves=8,
)


def _as_text(v: object) -> str:
    if isinstance(v, str):
        return v
    if v is None:
        return ""
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


@settings(max_examples=300, deadline=None)
@given(
    code=st.integers(0, 2**31 - 1),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(0, 3),
    version=st.integers(0, 1000),
    language=text,
    remark=st.one_of(st.none(), text),
    ext=st.dictionaries(text, text, max_size=12),
    ensure_ascii=st.booleans(),
    indent=st.sampled_from([None, 1]),
)
def test_decode_matches_json_module(
    code, opaque, flag, version, language, remark, ext, ensure_ascii, indent
):
    head = {
        "code": code,
        "extFields": ext,
        "flag": flag,
        "language": language,
        "opaque": opaque,
        "remark": remark,
        "version": version,
        "serializeTypeCurrentRPC": "JSON",
    }
    raw = json.dumps(head, ensure_ascii=ensure_ascii, indent=indent).encode() + b"\n"
    assert rmqcore.decode_json_header(raw) == (code, language, version, opaque, flag, remark, ext)


@settings(max_examples=200, deadline=None)
@given(
    ext=st.dictionaries(text, json_value, max_size=8),
    junk=st.dictionaries(text, json_value, max_size=3),
)
def test_non_string_ext_values_arrive_as_their_text(ext, junk):
    junk.pop("code", None)
    for k in ("extFields", "opaque", "flag", "version", "language", "remark"):
        junk.pop(k, None)
    raw = json.dumps(
        {**junk, "code": 10, "extFields": ext}, separators=(",", ":"), ensure_ascii=False
    ).encode()
    got = rmqcore.decode_json_header(raw)[6]
    assert got == {k: _as_text(v) for k, v in ext.items()}


@settings(max_examples=300, deadline=None)
@given(
    code=st.integers(0, 2**31 - 1),
    opaque=st.integers(0, 2**31 - 1),
    language=text,
    remark=st.one_of(st.none(), text),
    # ints past 64 bits, bools and floats take the encoder's str() paths
    ext=st.dictionaries(
        text, st.one_of(text, st.integers(), st.booleans(), st.floats(allow_nan=False))
    ),
)
def test_encode_is_valid_json_with_string_ext_values(code, opaque, language, remark, ext):
    raw = rmqcore.encode_json_header(code, language, 401, opaque, 1, remark, ext)
    head = json.loads(raw)
    assert head["code"] == code and head["opaque"] == opaque and head["flag"] == 1
    assert head["language"] == language and head["remark"] == remark
    assert head["extFields"] == {k: str(v) for k, v in ext.items()}
    assert all(isinstance(v, str) for v in head["extFields"].values())
    assert rmqcore.decode_json_header(raw)[6] == {k: str(v) for k, v in ext.items()}


LONGS = st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([-(2**63), 2**63 - 1]))


@settings(max_examples=200, deadline=None)
@given(
    code=LONGS,
    opaque=LONGS,
    flag=LONGS,
    version=LONGS,
    # short or empty: the header's fixed part then weighs most
    language=st.one_of(st.just(""), text),
    remark=st.one_of(st.none(), text),
    ext=st.dictionaries(text, st.one_of(text, st.integers(), st.booleans())),
    body=st.binary(max_size=300),
    as_view=st.booleans(),
)
def test_encode_frame_is_length_fields_header_and_body(
    code, opaque, flag, version, language, remark, ext, body, as_view
):
    header = rmqcore.encode_json_header(code, language, version, opaque, flag, remark, ext)
    frame = rmqcore.encode_json_frame(
        code, language, version, opaque, flag, remark, ext, memoryview(body) if as_view else body
    )
    assert frame == struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{",
        b"[]",
        b"null",
        b'{"code":"x"}',
        b'{"flag":1}',
        b'{"code":1,"extFields":[1]}',
        b'{"code":1} x',
        b'{"code":1,"a":"\\q"}',
        b"{" * 10_000,
        b'{"code":1.5}',
        b'{"code":99999999999999999999}',
        b'{"code":1,"extFields":{"a":1,}}',
        b'{"code":1,"a":tru}',
        b'{"code":1,"a":"\x01"}',
        b'{"code":1,"extFields":{"a":"\xff\xfe"}}',
    ],
)
def test_malformed_headers_raise_value_error(raw):
    with pytest.raises(ValueError):
        rmqcore.decode_json_header(raw)


def test_too_many_ext_fields_is_refused():
    ext = {f"k{i}": "v" for i in range(300)}
    with pytest.raises(ValueError, match="too many"):
        rmqcore.decode_json_header(json.dumps({"code": 1, "extFields": ext}).encode())


@settings(max_examples=500, deadline=None)
@given(
    parts=st.lists(
        st.one_of(
            st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=19),
            st.text(st.characters(min_codepoint=0x80, blacklist_categories=("Cs",)), max_size=3),
            st.sampled_from(['"', "\\", "\\n", "\\u0041", "\\x", "\\u12", "\x01", "\x1f", "\t"]),
        ),
        max_size=12,
    )
)
def test_raw_string_bodies_judged_as_the_json_module_judges_them(parts):
    # the string scanner skips plain bytes eight at a time: quotes,
    # backslashes and raw control characters at every offset of a word
    raw = ('{"code":1,"remark":"' + "".join(parts) + '"}').encode()
    try:
        want = json.loads(raw)
    except ValueError:
        want = None
    if want is None:
        with pytest.raises(ValueError):
            rmqcore.decode_json_header(raw)
        return
    if set(want) != {"code", "remark"}:
        return  # a quote inside ended the string early and what followed parsed
    assert rmqcore.decode_json_header(raw)[5] == want["remark"]


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_never_crashes(raw):
    with contextlib.suppress(ValueError):
        rmqcore.decode_json_header(raw)
    with contextlib.suppress(ValueError):
        rmqcore.split_frames(raw, 1 << 24)


def _frame(header: bytes, body: bytes, stype: int = 0) -> bytes:
    return (
        struct.pack(">II", 4 + len(header) + len(body), (stype << 24) | len(header)) + header + body
    )


def test_split_frames_returns_whole_frames_and_what_it_used():
    a = _frame(b'{"code":10,"opaque":1}', b"body-a")
    b = _frame(b"\x00\x0a\x01", b"", stype=1)
    frames, used = rmqcore.split_frames(a + b + a[:7], 1 << 24)
    assert used == len(a) + len(b)
    assert frames[0] == (0, (10, None, 0, 1, 0, None, {}), b"body-a")
    assert frames[1] == (1, b"\x00\x0a\x01", b"")


@pytest.mark.parametrize(
    "tail",
    [
        b"",
        b"\x00",
        b"\x00\x00\x00\x30\x00",
        b"\xff\xff\xff\xff",
        struct.pack(">II", 8, 100) + b"abcd",
    ],
)
def test_whole_frames_end_stops_where_split_frames_would(tail):
    """The whole frames with sound lengths, up to a partial or a bad one
    (what the broker may hand to a C send thread)."""
    a = _frame(b'{"code":10,"opaque":1}', b"body-a")
    b = _frame(b"\x00\x0a\x01", b"", stype=1)
    assert rmqcore.whole_frames_end(a + b + tail, 1 << 24) == len(a) + len(b)
    assert rmqcore.whole_frames_end(a + b, len(a) - 5) == 0  # a is past max_frame
    assert rmqcore.whole_frames_end(b"", 1 << 24) == 0


@pytest.mark.parametrize(
    "raw,match",
    [
        (b"\xff\xff\xff\xff", "frame length"),
        (b"\x00\x00\x00\x02xx", "frame length"),
        (b"\x01\x00\x00\x01", "frame length"),
        (struct.pack(">II", 8, 100) + b"abcd", "runs past"),
    ],
)
def test_split_frames_rejects_bad_lengths(raw, match):
    with pytest.raises(ValueError, match=match):
        rmqcore.split_frames(raw, 1 << 24)


@settings(max_examples=200, deadline=None)
@given(
    code=st.integers(0, 2**31 - 1),
    opaque=st.integers(0, 2**31 - 1),
    flag=st.integers(0, 3),
    language=st.one_of(st.just(""), text),
    remark=st.one_of(st.none(), text),
    ext=st.dictionaries(text, text, max_size=8),
    body=st.binary(max_size=100),
)
def test_a_command_decodes_to_every_slot_it_was_encoded_with(
    code, opaque, flag, language, remark, ext, body
):
    from pyrmq.remoting.command import FrameDecoder, RemotingCommand

    sent = RemotingCommand(
        code, ext, body, remark=remark, opaque=opaque, flag=flag, language=language
    )
    (got,) = FrameDecoder().feed(sent.encode())
    for slot in RemotingCommand.__slots__:
        want = getattr(sent, slot)
        if slot == "language" and not want:
            want = "OTHER"  # an empty language is read as OTHER
        assert getattr(got, slot) == want, slot
