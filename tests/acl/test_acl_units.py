"""ACL 1.0 without sockets: the signature (an oracle written from the spec in
pyrmq/acl/signing.py), white-list forms, admin codes, the resources of each
request code, plain_acl.yml checks, the validator's decisions and reload."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import os
import pathlib

import pytest

from pyrmq.acl import AclClientRPCHook, AclConfigError, PlainAccessValidator, parse_plain_acl
from pyrmq.acl import permission as P
from pyrmq.acl.config import MAX_FILE_BYTES, read_plain_acl
from pyrmq.acl.remote_address import AddressSpecError, normalize_ip, remote_address_matcher
from pyrmq.acl.signing import credentials_hook, mac_for, signature
from pyrmq.common.errors import NoPermissionError
from pyrmq.remoting import RemotingCommand, RequestCode

ACL = """
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: userAK01
    secretKey: userSK01
    whiteRemoteAddress: 192.168.9.9
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - TopicA=PUB|SUB
      - TopicB=PUB
      - TopicC=SUB
      - TopicD=DENY
    groupPerms:
      - GroupX=DENY
  - accessKey: adminAK1
    secretKey: adminSK1
    admin: true
  - accessKey: openAK01
    secretKey: openSK01
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
    topicPerms: [Locked=DENY]
"""


def oracle(secret: str, ext: dict[str, str], body: bytes) -> str:
    content = "".join(v for k, v in sorted(ext.items()) if k != "Signature").encode() + body
    return base64.b64encode(hmac.new(secret.encode(), content, hashlib.sha1).digest()).decode()


def signed(ak: str, sk: str, code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
    cmd = RemotingCommand(code, dict(ext), body)
    AclClientRPCHook(ak, sk)(cmd)
    return cmd


# -- signing ---------------------------------------------------------------------------


def test_signature_is_sorted_values_then_body():
    ext = {"topic": "TopicTest", "AccessKey": "AK", "OnsChannel": "ALIYUN", "queueId": "0"}
    body = b"\x78\x5e\x00body\n"
    sig = signature(mac_for("SK"), ext, body)
    assert sig == oracle("SK", ext, body)
    # upper case sorts first: AccessKey, OnsChannel, queueId, topic
    content = b"AKALIYUN0TopicTest" + body
    assert sig == base64.b64encode(hmac.new(b"SK", content, hashlib.sha1).digest()).decode()
    # Signature itself is never part of the content
    assert signature(mac_for("SK"), {**ext, "Signature": "junk"}, body) == sig


def test_empty_secret_signs_like_the_cpp_client_without_credentials():
    ext = {"AccessKey": "", "OnsChannel": "ALIYUN", "topic": "TopicTest"}
    assert signature(mac_for(""), ext, b"") == oracle("", ext, b"")


def test_hook_sets_keys_and_text_values():
    cmd = RemotingCommand(10, {"queueId": 3, "batch": False, "topic": "T"}, b"x")  # type: ignore[dict-item]
    AclClientRPCHook("AK123456", "SK123456", "ALIYUN")(cmd)
    ext = cmd.ext_fields
    assert ext["queueId"] == "3" and ext["batch"] == "false"
    assert ext["AccessKey"] == "AK123456" and ext["OnsChannel"] == "ALIYUN"
    assert ext["Signature"] == oracle("SK123456", ext, b"x")
    assert "SK123456" not in repr(AclClientRPCHook("AK123456", "SK123456"))


def test_credentials_from_environment(monkeypatch):
    monkeypatch.delenv("ROCKETMQ_ACCESS_KEY", raising=False)
    monkeypatch.delenv("ROCKETMQ_SECRET_KEY", raising=False)
    assert credentials_hook() is None
    monkeypatch.setenv("ROCKETMQ_ACCESS_KEY", "envAK123")
    monkeypatch.setenv("ROCKETMQ_SECRET_KEY", "envSK123")
    hook = credentials_hook()
    assert hook is not None and hook.access_key == "envAK123"
    assert credentials_hook("argAK123", "argSK123").access_key == "argAK123"  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="both"):
        credentials_hook("onlyAK12", None)


# -- white lists -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "ip", "ok"),
    [
        ("", "127.0.0.1", False),
        ("*", "1.2.3.4", True),
        ("*.*.*.*", "1.2.3.4", True),
        ("192.168.0.1", "192.168.0.1", True),
        ("192.168.0.1", "192.168.0.2", False),
        ("192.168.0.*", "192.168.0.77", True),
        ("192.168.0.*", "192.168.1.77", False),
        ("10.*.*.*", "10.200.3.4", True),
        ("10.*.*.*", "11.0.0.1", False),
        ("192.168.*.*", "192.168.44.1", True),
        ("192.168.1.10-20", "192.168.1.15", True),
        ("192.168.1.10-20", "192.168.1.21", False),
        ("192.168.0-7.*", "192.168.7.200", True),
        ("192.168.0-7.*", "192.168.8.1", False),
        ("192.168.1.{1,2,3}", "192.168.1.2", True),
        ("192.168.1.{1,2,3}", "192.168.1.4", False),
        ("192.168.1.1,192.168.1.9", "192.168.1.9", True),
        ("192.168.1.1,192.168.1.9", "192.168.1.5", False),
        ("::1", normalize_ip("::1"), True),
        ("1050:0:0:0:5:600:300c:326b", normalize_ip("1050::5:600:300c:326b"), True),
        ("1050:0:0:0:5:600:300c:{326b,326c}", normalize_ip("1050::5:600:300c:326c"), True),
        ("1050:0:0:0:5:600:300c:*", normalize_ip("1050::5:600:300c:1"), True),
        ("1050:0:0:0:5:600:300c:*", normalize_ip("1051::5:600:300c:1"), False),
        ("127.0.0.1", normalize_ip("::ffff:127.0.0.1"), True),
    ],
)
def test_white_address_forms(spec, ip, ok):
    assert remote_address_matcher(spec)(ip) is ok


@pytest.mark.parametrize(
    "spec",
    ["192.168.1", "300.1.1.1", "192.*.1.*", "192.168.1.20-10", "192.168.1.1-300", "*.1.1.1",
     "192.168.{1,2}.1", "1.2.3.4,", "abc", "192.168.1.{}", "192.168.1.-5"],
)  # fmt: skip
def test_bad_white_addresses_are_errors(spec):
    with pytest.raises(AddressSpecError):
        remote_address_matcher(spec)


# -- codes and resources -------------------------------------------------------------------


def test_code_constants_match_request_codes():
    for name in ("SEND_MESSAGE", "PULL_MESSAGE", "HEART_BEAT", "UPDATE_AND_CREATE_TOPIC",
                 "DELETE_TOPIC_IN_BROKER", "UPDATE_BROKER_CONFIG", "SEND_MESSAGE_V2",
                 "SEND_BATCH_MESSAGE", "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP",
                 "DELETE_SUBSCRIPTIONGROUP", "UPDATE_AND_CREATE_ACL_CONFIG", "DELETE_ACL_CONFIG",
                 "GET_BROKER_CLUSTER_ACL_INFO", "UPDATE_GLOBAL_WHITE_ADDRS_CONFIG",
                 "GET_BROKER_CLUSTER_ACL_CONFIG", "LOCK_BATCH_MQ", "UNLOCK_BATCH_MQ",
                 "QUERY_CONSUMER_OFFSET", "UPDATE_CONSUMER_OFFSET", "CONSUMER_SEND_MSG_BACK",
                 "UNREGISTER_CLIENT", "GET_CONSUMER_LIST_BY_GROUP", "QUERY_MESSAGE",
                 "POP_MESSAGE", "ACK_MESSAGE", "CHANGE_MESSAGE_INVISIBLETIME"):  # fmt: skip
        assert getattr(P, name) == RequestCode[name], name
    assert {17, 25, 215, 200, 207, 50, 51, 52, 53, 54} == P.ADMIN_CODES


def test_resources_per_code():
    hb = (
        json.dumps(
            {
                "clientID": "c",
                "consumerDataSet": [
                    {
                        "groupName": "G1",
                        "subscriptionDataSet": [{"topic": "T1"}, {"topic": "%RETRY%G1"}],
                    }
                ],
                "producerDataSet": [{"groupName": "PG"}],
            }
        ).encode()
        + b"\n"
    )
    cases = [
        (10, {"topic": "T"}, b"", {"T": P.PUB}),
        (10, {"topic": "%RETRY%G"}, b"", {"%RETRY%G": P.SUB}),
        (310, {"b": "T"}, b"", {"T": P.PUB}),
        (320, {"b": "T"}, b"", {"T": P.PUB}),
        (11, {"topic": "T", "consumerGroup": "G"}, b"", {"T": P.SUB, "%RETRY%G": P.SUB}),
        (12, {"topic": "T"}, b"", {"T": P.SUB}),
        (14, {"topic": "T", "consumerGroup": "G"}, b"", {"T": P.SUB, "%RETRY%G": P.SUB}),
        (15, {"topic": "T", "consumerGroup": "G"}, b"", {"T": P.SUB, "%RETRY%G": P.SUB}),
        (34, {}, hb, {"%RETRY%G1": P.SUB, "T1": P.SUB}),
        (34, {}, b'{"clientID":"c","producerDataSet":[{"groupName":"PG"}]}\n', {}),
        (35, {"consumerGroup": "G"}, b"", {"%RETRY%G": P.SUB}),
        (35, {"producerGroup": "PG", "consumerGroup": ""}, b"", {}),
        (36, {"group": "G", "offset": "1"}, b"", {"%RETRY%G": P.SUB}),
        (36, {"group": "G", "originTopic": "T"}, b"", {"%RETRY%G": P.SUB, "T": P.PUB}),
        (38, {"consumerGroup": "G"}, b"", {"%RETRY%G": P.SUB}),
        (41, {}, b'{"consumerGroup":"G","clientId":"c","mqSet":[]}\n', {"%RETRY%G": P.SUB}),
        (42, {}, b'{"consumerGroup":"G","mqSet":[]}', {"%RETRY%G": P.SUB}),
        (30, {"topic": "T"}, b"", {}),
        (200050, {"topic": "T", "consumerGroup": "G"}, b"", {"T": P.SUB, "%RETRY%G": P.SUB}),
        (200051, {"topic": "T", "consumerGroup": "G"}, b"", {"T": P.SUB, "%RETRY%G": P.SUB}),
        (200053, {"topic": "T", "consumerGroup": "G"}, b"", {"T": P.SUB, "%RETRY%G": P.SUB}),
        (351, {"topic": "T"}, b"", {}),
        (352, {"group": "G"}, b"", {}),
    ]
    for code, ext, body, want in cases:
        assert P.needed_resources(code, ext, body) == want, (code, ext)
    for bad in (b"", b"not json", b"[1]", b'{"consumerDataSet": 5}', b'{"consumerDataSet":[{}]}'):
        if bad in (b"[1]",):
            assert P.needed_resources(34, {}, bad) == {}
            continue
        with pytest.raises(P.ResourceError):
            P.needed_resources(34, {}, bad)


def test_permission_checks():
    assert P.check_permission(P.PUB, P.PUB | P.SUB)
    assert not P.check_permission(P.PUB, P.SUB)
    assert not P.check_permission(P.PUB, P.DENY | P.PUB)
    assert P.check_permission(P.ANY, P.SUB)
    assert P.parse_perm(None) == P.DENY
    assert P.parse_perm(" SUB|PUB ") == P.PUB | P.SUB
    with pytest.raises(ValueError):
        P.parse_perm("PUBSUB")


# -- plain_acl.yml ---------------------------------------------------------------------------


def test_parse_plain_acl():
    cfg = parse_plain_acl(ACL)
    assert cfg.global_white_remote_addresses == ("10.10.103.*",)
    assert [a.access_key for a in cfg.accounts] == ["userAK01", "adminAK1", "openAK01"]
    assert cfg.account("adminAK1").admin  # type: ignore[union-attr]
    assert parse_plain_acl("").accounts == ()
    assert parse_plain_acl("# only a comment\n").accounts == ()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("accounts: [", "not valid YAML"),
        ("- a\n- b\n", "expected a mapping"),
        ("accounts: 5\n", "accounts must be a list"),
        ("accounts:\n  - accessKey: short\n    secretKey: longenough\n", "longer than 6"),
        ("accounts:\n  - secretKey: longenough\n", "accessKey is missing"),
        ("accounts:\n  - accessKey: [1]\n    secretKey: longenough\n", "must be text"),
        ("accounts:\n  - accessKey: abcdefgh\n    secretKey: longenough\n    admin: maybe\n",
         "true or false"),
        ("accounts:\n  - accessKey: abcdefgh\n    secretKey: longenough\n"
         "    topicPerms: [TopicA=PUBSUB]\n", "permission"),
        ("accounts:\n  - accessKey: abcdefgh\n    secretKey: longenough\n"
         "    topicPerms: [TopicA]\n", "name=PERM"),
        ("accounts:\n  - accessKey: abcdefgh\n    secretKey: longenough\n"
         "    whiteRemoteAddress: 1.2.3\n", "white address"),
        ("accounts:\n  - {accessKey: abcdefgh, secretKey: longenough}\n"
         "  - {accessKey: abcdefgh, secretKey: otherother}\n", "appears twice"),
        ("globalWhiteRemoteAddresses: [999.1.1.1]\n", "globalWhiteRemoteAddresses"),
        ("a: &x [1]\nb: *x\n", "aliases"),
        ("[" * 5000, "not valid YAML"),
    ],
)  # fmt: skip
def test_malformed_plain_acl_is_a_clear_error(text, why):
    with pytest.raises(AclConfigError, match=why):
        parse_plain_acl(text)


def test_too_large_file_refused(tmp_path):
    p = tmp_path / "plain_acl.yml"
    p.write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    with pytest.raises(AclConfigError, match="larger than"):
        read_plain_acl(str(p))
    with pytest.raises(AclConfigError, match="cannot read"):
        read_plain_acl(str(tmp_path / "missing.yml"))


# -- the validator ---------------------------------------------------------------------------


def _validator(tmp_path: pathlib.Path, text: str = ACL) -> PlainAccessValidator:
    p = tmp_path / "plain_acl.yml"
    p.write_text(text)
    cfg, st = read_plain_acl(str(p))
    return PlainAccessValidator(str(p), cfg, st)


def refused(v: PlainAccessValidator, cmd: RemotingCommand, peer: str = "127.0.0.1:5555") -> str:
    with pytest.raises(NoPermissionError) as info:
        v.validate(peer, cmd.code, cmd.ext_fields, cmd.body)
    return info.value.remark


def test_validator_decisions(tmp_path):
    v = _validator(tmp_path)
    ok = lambda cmd, peer="127.0.0.1:5555": v.validate(peer, cmd.code, cmd.ext_fields, cmd.body)  # noqa: E731
    ok(signed("userAK01", "userSK01", 310, {"b": "TopicA", "a": "PG"}, b"body"))
    ok(signed("userAK01", "userSK01", 310, {"b": "TopicB"}))
    r = refused(v, signed("userAK01", "userSK01", 310, {"b": "TopicC"}))
    assert "topic TopicC" in r and "userAK01" in r and "needs PUB" in r and "has SUB" in r
    assert "has DENY" in refused(v, signed("userAK01", "userSK01", 310, {"b": "TopicD"}))
    assert "topic Other" in refused(v, signed("userAK01", "userSK01", 10, {"topic": "Other"}))
    # groups: default SUB, GroupX explicitly denied
    ok(signed("userAK01", "userSK01", 11, {"topic": "TopicC", "consumerGroup": "G1"}))
    r = refused(
        v, signed("userAK01", "userSK01", 11, {"topic": "TopicC", "consumerGroup": "GroupX"})
    )
    assert "group GroupX" in r
    # signature, unknown and missing keys
    assert "signature" in refused(v, signed("userAK01", "wrongSK1", 310, {"b": "TopicA"}))
    tampered = signed("userAK01", "userSK01", 310, {"b": "TopicA"}, b"one")
    tampered.body = b"two"
    assert "signature" in refused(v, tampered)
    assert "No acl config" in refused(v, signed("nobody99", "whatever", 310, {"b": "TopicA"}))
    assert "No accessKey" in refused(v, RemotingCommand(310, {"b": "TopicA"}))
    unsigned_cpp = RemotingCommand(10, {"AccessKey": "", "OnsChannel": "ALIYUN", "topic": "T"})
    unsigned_cpp.ext_fields["Signature"] = oracle("", unsigned_cpp.ext_fields, b"")
    assert "No accessKey" in refused(v, unsigned_cpp)
    # admin codes
    assert "admin" in refused(v, signed("userAK01", "userSK01", 17, {"topic": "TopicA"}))
    ok(signed("adminAK1", "adminSK1", 17, {"topic": "TopicA"}))
    ok(signed("adminAK1", "adminSK1", 310, {"b": "AnyTopic"}))  # admin without perms: all
    # explicit DENY is final even with permissive defaults
    ok(signed("openAK01", "openSK01", 310, {"b": "Whatever"}))
    assert "topic Locked" in refused(v, signed("openAK01", "openSK01", 310, {"b": "Locked"}))
    # white lists: global passes everything, the account's skips the signature
    ok(RemotingCommand(17, {"topic": "x"}), "10.10.103.7:1234")
    ok(signed("userAK01", "badbadbad", 310, {"b": "TopicD"}), "192.168.9.9:4444")
    assert "No accessKey" in refused(v, RemotingCommand(310, {"b": "T"}), "192.168.9.9:4444")
    # a heartbeat that cannot be read is refused, not an error
    assert "HEART_BEAT" in refused(v, signed("userAK01", "userSK01", 34, {}, b"{broken"))


def test_java_unique_key_query_flag_signed_or_not(tmp_path):
    v = _validator(tmp_path)
    cmd = signed("userAK01", "userSK01", 12, {"topic": "TopicA", "_UNIQUE_KEY_QUERY": "true"})
    v.validate("127.0.0.1:1", cmd.code, cmd.ext_fields, cmd.body)
    ext = {k: v2 for k, v2 in cmd.ext_fields.items() if k != "Signature"}
    without = {k: v2 for k, v2 in ext.items() if k != "_UNIQUE_KEY_QUERY"}
    cmd.ext_fields["Signature"] = oracle("userSK01", without, b"")
    v.validate("127.0.0.1:1", cmd.code, cmd.ext_fields, cmd.body)


def test_reload_keeps_last_good_config(tmp_path, caplog):
    async def main() -> None:
        v = _validator(tmp_path)
        path = pathlib.Path(v.path)
        cmd = signed("newAK001", "newSK001", 310, {"b": "TopicA"})
        refused(v, cmd)
        path.write_text(
            ACL + "  - {accessKey: newAK001, secretKey: newSK001, defaultTopicPerm: PUB}\n"
        )
        os.utime(path, ns=(1, 1_000_000_000))  # a different mtime even on coarse clocks
        assert await v.check_file()
        v.validate("127.0.0.1:1", cmd.code, cmd.ext_fields, cmd.body)
        before = v.version
        with caplog.at_level(logging.ERROR, "pyrmq.acl"):
            path.write_text("accounts: [\n")
            assert not await v.check_file()
            assert not await v.check_file()  # logged once per version of the file
        assert sum("keeping the last good config" in r.message for r in caplog.records) == 1
        assert v.version == before
        v.validate("127.0.0.1:1", cmd.code, cmd.ext_fields, cmd.body)
        path.write_text(ACL)
        assert await v.check_file()
        refused(v, cmd)

    asyncio.run(main())


def test_admin_updates_rewrite_the_file(tmp_path):
    async def main() -> None:
        v = _validator(tmp_path, ACL + "extraKey: kept\n")
        await v.update_account(
            {"accessKey": "made4you", "secretKey": "madeSK01", "topicPerms": "T1=PUB,T2=SUB"}
        )
        cmd = signed("made4you", "madeSK01", 310, {"b": "T1"})
        v.validate("127.0.0.1:1", cmd.code, cmd.ext_fields, cmd.body)
        await v.update_account({"accessKey": "made4you", "topicPerms": "T1=DENY"})
        refused(v, cmd)
        on_disk, _ = read_plain_acl(v.path)
        acc = on_disk.account("made4you")
        assert acc is not None and acc.secret_key == "madeSK01" and acc.topic_perms == ("T1=DENY",)
        assert ("extraKey", "kept") in on_disk.extra
        await v.update_global_white_addrs(["1.2.3.*", " "])
        assert read_plain_acl(v.path)[0].global_white_remote_addresses == ("1.2.3.*",)
        await v.delete_account("made4you")
        assert read_plain_acl(v.path)[0].account("made4you") is None
        with pytest.raises(AclConfigError, match="no account"):
            await v.delete_account("made4you")
        with pytest.raises(AclConfigError, match="secretKey"):
            await v.update_account({"accessKey": "brandnew1"})
        with pytest.raises(AclConfigError, match="permission"):
            await v.update_account({"accessKey": "userAK01", "defaultTopicPerm": "ALL"})
        with pytest.raises(AclConfigError, match="white address"):
            await v.update_global_white_addrs(["1.2.3"])
        assert sorted(os.listdir(tmp_path)) == ["plain_acl.yml"]  # no temporary left

    asyncio.run(main())
