"""Secure mode of the embedded cluster: its principals, their credentials files, and their ACLs.

Four principals (docs/security.md):

- ``admin``: the brokers' own identity and the only super user; creates topics and ACLs;
- ``service``: the stream-actor workers, the projections, the command gateway and the other
  deployment services (replay, delivery, key manager, the ingestion scheduler and aggregator);
- ``runner``: the ingestion runners, which the deployment does not trust with its log (QUORUM
  and MEDIAN exist because one runner may lie): they read their tasks and write their results;
- ``client``: the SDK, the CLI and any outside consumer (kcat, Spark, a Java consumer).

Passwords are random per cluster, drawn when the cluster is first formatted, and kept in
``<data dir>/credentials/``: ``credentials.json`` holds every principal, and ``admin.json``,
``service.json``, ``runner.json`` and ``client.json`` one each (so a process can be handed only
its own secret). Every file is 0600. A cluster formatted before a principal existed gets it on its
next ``up``: drawn, written, and its SCRAM credential created by the admin (`ensure_scram_users`).

ACLs for a topic prefix ``P`` (created with the admin principal; creating one that exists is a no-op):

- client: WRITE+DESCRIBE ``P.commands``; READ+DESCRIBE ``P.messages``, ``P.replies``,
  ``P.deliveries``; READ on consumer groups prefixed ``P.client.`` and ``wt-client-`` (the
  command client's reply reader);
- service: ALL on topics prefixed ``P.`` and ``wt-projections-P-`` (Faust's changelog and
  assignor topics), ALL on groups and transactional ids prefixed ``wt-`` (every group and
  transactional id Watchtower's processes use starts so), and IDEMPOTENT_WRITE + DESCRIBE on the cluster;
- runner: READ+DESCRIBE ``P.ingest.tasks``; WRITE+DESCRIBE ``P.ingest.results``; READ on the
  consumer groups prefixed ``wt-P.ingest-runner-`` (its task reader) and ``wt-ingest-read-`` (a
  ``kafka_topic`` task's reader, which commits nothing); IDEMPOTENT_WRITE on the cluster (its
  producer is idempotent). Nothing else: not ``events``, ``snapshots`` or ``commands``. A
  ``kafka_topic`` task reads a user's topic, outside the prefix: READ+DESCRIBE on that one topic
  is granted by name (`runner_source_bindings`, ``grant-source``), never by pattern.
"""

from __future__ import annotations

import secrets
from dataclasses import replace
from pathlib import Path

from watchtower.local.config import ADMIN_PRINCIPAL, SCRAM_MECHANISM, SECURE_LISTENER, ClusterSpec
from watchtower.local.errors import LocalStackError
from watchtower.topics.cluster_admin import (
    ClusterAdminError,
    Grant,
    create_acls,
    upsert_scram_users,
    users_without_scram,
)
from watchtower.topics.connection import CredentialsError, Principal, read_credentials, write_credentials

SERVICE_PRINCIPAL = "service"
RUNNER_PRINCIPAL = "runner"
CLIENT_PRINCIPAL = "client"
PRINCIPALS = (ADMIN_PRINCIPAL, SERVICE_PRINCIPAL, RUNNER_PRINCIPAL, CLIENT_PRINCIPAL)
ALL_FILE = "credentials.json"
# Every consumer group and transactional id Watchtower's own processes use starts with this.
SERVICE_ID_PREFIX = "wt-"
COMMAND_CLIENT_GROUP_PREFIX = "wt-client-"
# The consumer group of a `kafka_topic` task's one-off reader (watchtower.ingest.kafka_source).
SOURCE_READ_GROUP_PREFIX = "wt-ingest-read-"
ACL_TIMEOUT_S = 30.0


def credentials_file(spec: ClusterSpec, principal: str | None = None) -> Path:
    """The file holding every principal (``principal`` None) or only ``principal``."""
    return spec.credentials_dir / (ALL_FILE if principal is None else f"{principal}.json")


def client_group_prefix(prefix: str) -> str:
    """Consumer groups a client principal may use for deployment ``prefix`` start with this."""
    return f"{prefix}.client."


def runner_group_prefix(prefix: str) -> str:
    """A runner's task reader's consumer group starts with this (watchtower.ingest.runner.serve)."""
    return f"{SERVICE_ID_PREFIX}{prefix}.ingest-runner-"


def ensure_credentials(spec: ClusterSpec, *, create: bool = False) -> dict[str, Principal]:
    """The cluster's principals: read from its credentials file, or (``create``) drawn and written."""
    path = credentials_file(spec)
    if not path.exists() and not create:
        raise LocalStackError(f"no credentials file at {path}; start the cluster with `watchtower local up --secure`")
    if path.exists():
        try:
            found = read_credentials(path)
        except CredentialsError as exc:
            raise LocalStackError(f"{exc}; or remove the cluster (`watchtower local down --purge`)") from None
        missing = [name for name in PRINCIPALS if name not in found]
        if ADMIN_PRINCIPAL in missing or (missing and not create):
            raise LocalStackError(f"the credentials file {path} lacks a principal ({', '.join(missing)}); start "
                                  "the cluster with `watchtower local up --secure` (it adds a principal a newer "
                                  "release introduced), or remove it (`watchtower local down --purge`)")
        stale = any(p.bootstrap != spec.bootstrap for p in found.values())
        if missing or (create and stale):
            # A principal this release added (its SCRAM credential is created once the cluster
            # answers, `ensure_scram_users`), or credentials placed before the first start, copied
            # from another cluster: same secrets, but the files must name this cluster's address.
            found = {name: replace(p, bootstrap=spec.bootstrap) for name, p in found.items()}
            found.update({name: _draw(spec, name) for name in missing})
            found = {name: found[name] for name in PRINCIPALS}
            _write_all(spec, found)
        return found
    # token_urlsafe draws [A-Za-z0-9_-] only, so a password needs no quoting in a JAAS line or
    # in the `--add-scram` argument.
    principals = {name: _draw(spec, name) for name in PRINCIPALS}
    _write_all(spec, principals)
    return principals


def _draw(spec: ClusterSpec, name: str) -> Principal:
    """Principal `name` of this cluster with a new random password."""
    return Principal(name, spec.bootstrap, SECURE_LISTENER, SCRAM_MECHANISM, name, secrets.token_urlsafe(24))


def _write_all(spec: ClusterSpec, principals: dict[str, Principal]) -> None:
    write_credentials(credentials_file(spec), list(principals.values()))
    for principal in principals.values():
        write_credentials(credentials_file(spec, principal.name), [principal])


def scram_format_args(principals: dict[str, Principal]) -> list[str]:
    """``kafka-storage format`` arguments that create every principal's SCRAM credentials.

    Created at format time, they exist before the first broker starts, which the brokers need:
    they authenticate to each other as the admin principal.
    """
    args: list[str] = []
    for p in principals.values():
        args += ["--add-scram", f"{SCRAM_MECHANISM}=[name={p.username},password={p.password}]"]
    return args


def admin_settings(principals: dict[str, Principal]) -> dict[str, str]:
    """librdkafka security settings of the admin principal."""
    return principals[ADMIN_PRINCIPAL].librdkafka()


def acl_bindings(prefix: str) -> list[Grant]:
    """Every ACL grant the principals need for the deployment whose topics start with ``prefix.``."""
    client, service, runner = CLIENT_PRINCIPAL, SERVICE_PRINCIPAL, RUNNER_PRINCIPAL
    grants = [Grant(client, "topic", f"{prefix}.commands", o) for o in ("write", "describe")]
    for role in ("messages", "replies", "deliveries"):
        grants += [Grant(client, "topic", f"{prefix}.{role}", o) for o in ("read", "describe")]
    grants.append(Grant(client, "group", client_group_prefix(prefix), "read", prefixed=True))
    # The command client's reply reader (watchtower.gateway.transport) names its group so.
    grants.append(Grant(client, "group", COMMAND_CLIENT_GROUP_PREFIX, "read", prefixed=True))
    for topic_prefix in (f"{prefix}.", f"wt-projections-{prefix}-"):
        grants.append(Grant(service, "topic", topic_prefix, "all", prefixed=True))
    grants.append(Grant(service, "group", SERVICE_ID_PREFIX, "all", prefixed=True))
    grants.append(Grant(service, "transactional_id", SERVICE_ID_PREFIX, "all", prefixed=True))
    grants += [Grant(service, "broker", "kafka-cluster", o) for o in ("idempotent_write", "describe")]
    grants += [Grant(runner, "topic", f"{prefix}.ingest.tasks", o) for o in ("read", "describe")]
    grants += [Grant(runner, "topic", f"{prefix}.ingest.results", o) for o in ("write", "describe")]
    grants.append(Grant(runner, "group", runner_group_prefix(prefix), "read", prefixed=True))
    grants.append(Grant(runner, "group", SOURCE_READ_GROUP_PREFIX, "read", prefixed=True))
    grants.append(Grant(runner, "broker", "kafka-cluster", "idempotent_write"))
    return grants


def runner_source_bindings(topic: str) -> list[Grant]:
    """READ+DESCRIBE on one topic, by its exact name, for the runner principal: what a
    ``kafka_topic`` task reading `topic` needs. Granted per topic, by the operator who sets up such
    a feed (``python -m watchtower.local.security grant-source TOPIC``), never by a pattern: a
    runner reads only the topics someone chose to make a source."""
    return [Grant(RUNNER_PRINCIPAL, "topic", topic, o) for o in ("read", "describe")]


def _admin_config(bootstrap: str, principals: dict[str, Principal]) -> dict[str, str]:
    return {"bootstrap.servers": bootstrap, **admin_settings(principals)}


_BROKER_LOG_ADVICE = "check the broker log (`watchtower local logs`) and run the command again"


def ensure_scram_users(bootstrap: str, principals: dict[str, Principal]) -> list[str]:
    """Create, as the admin, the SCRAM credential of every principal in `principals` the cluster
    does not know yet (a principal a newer release added to a cluster formatted before it); an
    existing credential is left alone. Returns the names created."""
    config = _admin_config(bootstrap, principals)
    names = [name for name in principals if name != ADMIN_PRINCIPAL]
    try:
        missing = users_without_scram(config, names, ACL_TIMEOUT_S)
        upsert_scram_users(config, {principals[n].username: principals[n].password for n in missing}, ACL_TIMEOUT_S)
    except ClusterAdminError as exc:
        raise LocalStackError(f"{exc}; {_BROKER_LOG_ADVICE}") from None
    return [principals[n].username for n in missing]


def ensure_acls(bootstrap: str, principals: dict[str, Principal], prefix: str) -> int:
    """Create (idempotently) every ACL of :func:`acl_bindings` as the admin; returns how many."""
    return _create_acls(bootstrap, principals, acl_bindings(prefix))


def _create_acls(bootstrap: str, principals: dict[str, Principal], grants: list[Grant]) -> int:
    try:
        return create_acls(_admin_config(bootstrap, principals), grants, ACL_TIMEOUT_S)
    except ClusterAdminError as exc:
        raise LocalStackError(f"{exc}; {_BROKER_LOG_ADVICE}") from None


USAGE = ("usage: python -m watchtower.local.security grant PREFIX\n"
         "       python -m watchtower.local.security grant-source TOPIC  (a kafka_topic task's source, for runners)")


def main(argv: list[str]) -> int:
    """``python -m watchtower.local.security grant PREFIX``: create the ACLs of deployment PREFIX;
    ``grant-source TOPIC``: let the runner principal read TOPIC (a ``kafka_topic`` task's source).

    For a cluster this module did not start (compose, a managed cluster): it connects as the
    principal ``WATCHTOWER_KAFKA_CREDENTIALS`` names, which must be a super user, to
    ``WATCHTOWER_BOOTSTRAP`` (default: the bootstrap in the credentials file).
    """
    import os
    import sys

    from watchtower.topics.connection import current_principal

    if len(argv) != 2 or argv[0] not in ("grant", "grant-source") or not argv[1]:
        print(USAGE, file=sys.stderr)
        return 2
    admin = current_principal()
    if admin is None:
        print("WATCHTOWER_KAFKA_CREDENTIALS is not set: a plaintext cluster has no ACLs to create; "
              "point it at the admin principal's credentials file", file=sys.stderr)
        return 2
    bootstrap = os.environ.get("WATCHTOWER_BOOTSTRAP") or admin.bootstrap
    if argv[0] == "grant-source":
        count = _create_acls(bootstrap, {ADMIN_PRINCIPAL: admin}, runner_source_bindings(argv[1]))
        print(f"{count} ACL bindings in place: the {RUNNER_PRINCIPAL} principal reads topic {argv[1]!r} on {bootstrap}")
        return 0
    count = ensure_acls(bootstrap, {ADMIN_PRINCIPAL: admin}, argv[1])
    print(f"{count} ACL bindings in place for prefix {argv[1]!r} on {bootstrap}")
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
