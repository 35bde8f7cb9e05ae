"""ACL administration (AdminBrokerProcessor's ACL part): the requests of
mqadmin's updateAclConfig, deleteAclConfig, updateGlobalWhiteAddr and
clusterAclConfigVersion. Each change rewrites plain_acl.yml atomically
(pyrmq.acl.config.write_plain_acl) and is in force when it is answered.

  code  request                           extFields
    50  UPDATE_AND_CREATE_ACL_CONFIG      accessKey, and any of secretKey,
                                          whiteRemoteAddress, admin ("true"),
                                          defaultTopicPerm, defaultGroupPerm,
                                          topicPerms / groupPerms ("a=PUB,b=SUB"):
                                          absent keys keep the account's values
    51  DELETE_ACL_CONFIG                 accessKey
    52  GET_BROKER_CLUSTER_ACL_INFO       answer extFields: version (DataVersion
                                          JSON), allAclFileVersion ({path: version}),
                                          brokerName, brokerAddr, clusterName
    53  UPDATE_GLOBAL_WHITE_ADDRS_CONFIG  globalWhiteAddrs ("a,b"; "" empties it)
    54  GET_BROKER_CLUSTER_ACL_CONFIG     answer body: {"globalWhiteAddrs": [...],
                                          "plainAccessConfigs": [...]} (secrets too)

Who may send them is the ACL check's business (permission.ADMIN_CODES: an
admin account). A broker with aclEnable=false answers them SYSTEM_ERROR
saying so. A change that would not load (a short key, a bad right or
address) is refused with SYSTEM_ERROR and its reason; nothing is written.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable

from pyrmq.acl import AclConfigError, PlainAccessValidator
from pyrmq.common.errors import BrokerSystemError
from pyrmq.remoting import RemotingCommand, RemotingServer, RequestCode, ResponseCode
from pyrmq.remoting.connection import Connection

_ACCOUNT_KEYS = (
    "accessKey",
    "secretKey",
    "whiteRemoteAddress",
    "admin",
    "defaultTopicPerm",
    "defaultGroupPerm",
    "topicPerms",
    "groupPerms",
)


class AclAdminProcessor:
    def __init__(
        self,
        validator: PlainAccessValidator | None,
        *,
        broker_name: str,
        broker_addr: str,
        cluster_name: str,
    ) -> None:
        self.validator = validator
        self.broker_name = broker_name
        self.broker_addr = broker_addr
        self.cluster_name = cluster_name

    def register(self, server: RemotingServer) -> None:
        reg = server.register
        reg(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, self.update_acl_config)
        reg(RequestCode.DELETE_ACL_CONFIG, self.delete_acl_config)
        reg(RequestCode.GET_BROKER_CLUSTER_ACL_INFO, self.acl_info)
        reg(RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, self.update_global_white_addrs)
        reg(RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG, self.acl_config)

    def _acl(self) -> PlainAccessValidator:
        if self.validator is None:
            raise BrokerSystemError(
                "ACL is disabled on this broker: set aclEnable=true in broker.conf"
            )
        return self.validator

    async def _change(self, cmd: RemotingCommand, change: Awaitable[None]) -> RemotingCommand:
        try:
            await change
        except AclConfigError as e:
            raise BrokerSystemError(str(e)) from None
        return cmd.response(ResponseCode.SUCCESS)

    def update_acl_config(
        self, conn: Connection, cmd: RemotingCommand
    ) -> Awaitable[RemotingCommand]:
        acl = self._acl()
        ext = cmd.ext_fields
        fields = {k: ext[k] for k in _ACCOUNT_KEYS if k in ext}
        if not fields.get("accessKey"):
            raise BrokerSystemError("updateAclConfig needs accessKey")
        return self._change(cmd, acl.update_account(fields))

    def delete_acl_config(
        self, conn: Connection, cmd: RemotingCommand
    ) -> Awaitable[RemotingCommand]:
        acl = self._acl()
        ak = cmd.ext_fields.get("accessKey")
        if not ak:
            raise BrokerSystemError("deleteAclConfig needs accessKey")
        return self._change(cmd, acl.delete_account(ak))

    def update_global_white_addrs(
        self, conn: Connection, cmd: RemotingCommand
    ) -> Awaitable[RemotingCommand]:
        acl = self._acl()
        addrs = cmd.ext_fields.get("globalWhiteAddrs")
        if addrs is None:
            raise BrokerSystemError("updateGlobalWhiteAddr needs globalWhiteAddrs")
        return self._change(cmd, acl.update_global_white_addrs(addrs.split(",")))

    def acl_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        acl = self._acl()
        version = acl.version.to_json()
        return cmd.response(
            ResponseCode.SUCCESS,
            {
                "version": version,
                "allAclFileVersion": json.dumps({acl.path: json.loads(version)}),
                "brokerName": self.broker_name,
                "brokerAddr": self.broker_addr,
                "clusterName": self.cluster_name,
            },
        )

    def acl_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        acl = self._acl()
        return cmd.response(ResponseCode.SUCCESS, body=json.dumps(acl.config_json()).encode())
