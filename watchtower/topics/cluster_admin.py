"""Administering a cluster as its admin principal: ACL grants, SCRAM users, and whether its brokers
have registered.

Callers describe what they want in plain values (`Grant`, user names and passwords) and pass the
admin's librdkafka settings (``bootstrap.servers`` and its security settings); they never name the
Kafka client's types. A refusal raises `ClusterAdminError` carrying the broker's own reason and what
was asked, for the caller to wrap in its advice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

from watchtower.topics.errors import BrokerError

Resource = Literal["topic", "group", "transactional_id", "broker"]
Operation = Literal["read", "write", "describe", "all", "idempotent_write"]

_RESOURCES: Final = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP,
                     "transactional_id": ResourceType.TRANSACTIONAL_ID, "broker": ResourceType.BROKER}
_OPERATIONS: Final = {"read": AclOperation.READ, "write": AclOperation.WRITE, "describe": AclOperation.DESCRIBE,
                      "all": AclOperation.ALL, "idempotent_write": AclOperation.IDEMPOTENT_WRITE}
#: The iterations of the SCRAM-SHA-512 credentials created (the broker's own default is 4096).
SCRAM_ITERATIONS: Final = 8192


class ClusterAdminError(BrokerError):
    """The cluster refused or did not answer an administrative request; the message says which."""


@dataclass(frozen=True)
class Grant:
    """ALLOW `operation` on a resource to ``User:<principal>`` from any host.

    `name` is the resource's exact name, or a name prefix when `prefixed`; the cluster itself is the
    resource ``broker`` named ``kafka-cluster``."""

    principal: str
    resource: Resource
    name: str
    operation: Operation
    prefixed: bool = False

    def binding(self) -> AclBinding:
        pattern = ResourcePatternType.PREFIXED if self.prefixed else ResourcePatternType.LITERAL
        return AclBinding(_RESOURCES[self.resource], self.name, pattern, f"User:{self.principal}", "*",
                          _OPERATIONS[self.operation], AclPermissionType.ALLOW)

    def __str__(self) -> str:
        pattern = "names starting " if self.prefixed else ""
        return f"{self.operation} on {self.resource} {pattern}{self.name!r} for {self.principal}"


def _admin(settings: Mapping[str, Any]) -> AdminClient:
    return AdminClient({**settings, "log_level": 3})


def create_acls(settings: Mapping[str, Any], grants: Sequence[Grant], timeout_s: float = 30.0) -> int:
    """Create every grant (creating one that exists is a no-op); returns how many were asked for."""
    by_binding = {g.binding(): g for g in grants}
    admin = _admin(settings)  # held until every answer is in: a destroyed client fails its futures
    futures = admin.create_acls(list(by_binding), request_timeout=timeout_s)
    for binding, future in futures.items():
        try:
            future.result(timeout=timeout_s)
        except Exception as exc:  # KafkaException or a timeout: refused either way
            raise ClusterAdminError(f"creating the ACL ({by_binding[binding]}) failed: {exc}") from None
    return len(grants)


def users_without_scram(settings: Mapping[str, Any], names: Sequence[str], timeout_s: float = 30.0) -> list[str]:
    """Those of `names` the cluster holds no SCRAM credential for, in the order given."""
    if not names:
        return []
    admin = _admin(settings)  # held until every answer is in: a destroyed client fails its futures
    described = admin.describe_user_scram_credentials(list(names), request_timeout=timeout_s)
    assert isinstance(described, dict)  # a dict of futures when users are named
    return [name for name in names if not _has_credential(described[name], timeout_s)]


def _has_credential(future: Any, timeout_s: float) -> bool:
    """Whether a described user has a SCRAM credential (a user without one is RESOURCE_NOT_FOUND)."""
    try:
        return bool(future.result(timeout=timeout_s).scram_credential_infos)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.RESOURCE_NOT_FOUND:
            return False
        raise ClusterAdminError(f"the cluster did not describe the SCRAM users: {exc}") from None


def upsert_scram_users(settings: Mapping[str, Any], passwords: Mapping[str, str], timeout_s: float = 30.0) -> None:
    """Create or replace the SCRAM-SHA-512 credential of each user in `passwords` (name -> password)."""
    if not passwords:
        return
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS)
    upserts: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(name, info, password.encode()) for name, password in passwords.items()]
    admin = _admin(settings)  # held until every answer is in: a destroyed client fails its futures
    for name, future in admin.alter_user_scram_credentials(upserts, request_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
        except Exception as exc:  # KafkaException or a timeout: refused either way
            raise ClusterAdminError(f"creating the SCRAM credential of {name!r} failed: {exc}") from None


def registration_problem(settings: Mapping[str, Any], brokers: int, timeout_s: float) -> str | None:
    """None when a metadata request within `timeout_s` shows at least `brokers` brokers and a
    controller; else what is missing, or why nothing answered. Never raises: an unreachable cluster
    is an answer here (the client logs nothing about it either)."""
    admin = AdminClient({**settings, "log_level": 0, "socket.timeout.ms": max(100, int(timeout_s * 1000))})
    try:
        md = admin.list_topics(timeout=timeout_s)
    except Exception as exc:  # KafkaException or a transport error: no answer either way
        return str(exc) or type(exc).__name__
    if len(md.brokers) < brokers or md.controller_id < 0:
        return f"{len(md.brokers)}/{brokers} brokers registered"
    return None
