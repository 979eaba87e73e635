"""`topics.cluster_admin.Grant`: each plain grant becomes exactly the ACL binding it names.

The secure-broker tests check the grants' effect on a real cluster (tests/local/test_secure_broker.py);
this pins the mapping itself, so a grant can never silently widen (a prefix where a name was meant,
another principal, DENY for ALLOW).
"""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

from watchtower.local.security import acl_bindings, runner_source_bindings
from watchtower.topics.cluster_admin import Grant


@pytest.mark.parametrize(("grant", "binding"), [
    (Grant("client", "topic", "wt.commands", "write"),
     AclBinding(ResourceType.TOPIC, "wt.commands", ResourcePatternType.LITERAL, "User:client", "*",
                AclOperation.WRITE, AclPermissionType.ALLOW)),
    (Grant("service", "group", "wt-", "all", prefixed=True),
     AclBinding(ResourceType.GROUP, "wt-", ResourcePatternType.PREFIXED, "User:service", "*",
                AclOperation.ALL, AclPermissionType.ALLOW)),
    (Grant("service", "transactional_id", "wt-", "all", prefixed=True),
     AclBinding(ResourceType.TRANSACTIONAL_ID, "wt-", ResourcePatternType.PREFIXED, "User:service", "*",
                AclOperation.ALL, AclPermissionType.ALLOW)),
    (Grant("runner", "broker", "kafka-cluster", "idempotent_write"),
     AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:runner", "*",
                AclOperation.IDEMPOTENT_WRITE, AclPermissionType.ALLOW)),
])
def test_a_grant_is_the_binding_it_names(grant: Grant, binding: AclBinding) -> None:
    assert grant.binding() == binding


def test_only_the_service_principal_gets_prefixed_topic_grants_and_a_source_is_granted_by_name() -> None:
    prefixed_topics = {(g.principal, g.name) for g in acl_bindings("wt") if g.resource == "topic" and g.prefixed}
    assert prefixed_topics == {("service", "wt."), ("service", "wt-projections-wt-")}
    assert [(g.name, g.prefixed, g.operation) for g in runner_source_bindings("prices")] == [
        ("prices", False, "read"), ("prices", False, "describe")]
    assert len({g.binding() for g in acl_bindings("wt")}) == len(acl_bindings("wt")), "a grant is listed twice"
