"""ACL administration for AdminClient (DefaultMQAdminExt's ACL methods):
updateAclConfig, deleteAclConfig, updateGlobalWhiteAddr and
clusterAclConfigVersion, sent to one broker or to every master of a
cluster (of every cluster when neither is given). The broker's side and the
request fields: pyrmq/broker/processor/acl.py."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pyrmq.common.errors import ClientError
from pyrmq.remoting import RequestCode

if TYPE_CHECKING:
    from pyrmq.admin.client import AdminClient


@dataclasses.dataclass(frozen=True, slots=True)
class AclVersion:
    """One broker's answer to GET_BROKER_CLUSTER_ACL_INFO."""

    cluster_name: str
    broker_name: str
    broker_addr: str
    #: DataVersion: when plain_acl.yml last changed (ms) and how many times
    timestamp: int
    counter: int


async def _brokers(admin: AdminClient, broker_addr: str | None, cluster: str | None) -> list[str]:
    if broker_addr is not None and cluster is not None:
        raise ClientError("give a broker address or a cluster, not both")
    return [broker_addr] if broker_addr else await admin.masters(cluster)


async def _each(
    admin: AdminClient,
    code: int,
    fields: dict[str, str],
    broker_addr: str | None,
    cluster: str | None,
) -> list[str]:
    brokers = await _brokers(admin, broker_addr, cluster)
    for b in brokers:
        await admin.api.broker_request(b, code, fields, timeout=admin.timeout)
    return brokers


async def update_acl_config(
    admin: AdminClient,
    access_key: str,
    *,
    secret_key: str | None = None,
    white_remote_address: str | None = None,
    admin_account: bool | None = None,
    default_topic_perm: str | None = None,
    default_group_perm: str | None = None,
    topic_perms: Sequence[str] | None = None,
    group_perms: Sequence[str] | None = None,
    broker_addr: str | None = None,
    cluster: str | None = None,
) -> list[str]:
    """Create or update an account (None leaves a value as it is); the
    brokers that took it."""
    if not access_key:
        raise ClientError("no access key given")
    fields = {"accessKey": access_key}
    for key, value in (
        ("secretKey", secret_key),
        ("whiteRemoteAddress", white_remote_address),
        ("defaultTopicPerm", default_topic_perm),
        ("defaultGroupPerm", default_group_perm),
    ):
        if value is not None:
            fields[key] = value
    if admin_account is not None:
        fields["admin"] = "true" if admin_account else "false"
    if topic_perms is not None:
        fields["topicPerms"] = ",".join(topic_perms)
    if group_perms is not None:
        fields["groupPerms"] = ",".join(group_perms)
    return await _each(
        admin, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, fields, broker_addr, cluster
    )


async def delete_acl_config(
    admin: AdminClient, access_key: str, broker_addr: str | None = None, cluster: str | None = None
) -> list[str]:
    if not access_key:
        raise ClientError("no access key given")
    return await _each(
        admin, RequestCode.DELETE_ACL_CONFIG, {"accessKey": access_key}, broker_addr, cluster
    )


async def update_global_white_addrs(
    admin: AdminClient,
    addrs: Sequence[str],
    broker_addr: str | None = None,
    cluster: str | None = None,
) -> list[str]:
    fields = {"globalWhiteAddrs": ",".join(a.strip() for a in addrs if a.strip())}
    return await _each(
        admin, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, fields, broker_addr, cluster
    )


async def cluster_acl_config_version(
    admin: AdminClient, broker_addr: str | None = None, cluster: str | None = None
) -> list[AclVersion]:
    out = []
    for b in await _brokers(admin, broker_addr, cluster):
        resp = await admin.api.broker_request(
            b, RequestCode.GET_BROKER_CLUSTER_ACL_INFO, timeout=admin.timeout
        )
        ext = resp.ext_fields
        try:
            version: dict[str, Any] = json.loads(ext.get("version") or "{}")
            out.append(
                AclVersion(
                    ext.get("clusterName", ""),
                    ext.get("brokerName", ""),
                    ext.get("brokerAddr", b),
                    int(version.get("timestamp", 0)),
                    int(version.get("counter", 0)),
                )
            )
        except (ValueError, TypeError, AttributeError):
            raise ClientError(f"broker {b} sent a malformed ACL version: {ext}") from None
    return out
