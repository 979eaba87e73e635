"""The embedded broker in secure mode: SASL/SCRAM-SHA-512, the standard authorizer and ACLs.

One secure broker for the module, with a stack on it (a stream-actor worker and a projection with
the command gateway) whose processes connect as the service principal. The tests then act as the
client principal, as nobody, and as an impostor, and check the broker lets each do exactly what
docs/security.md says.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nacl.public
import nacl.signing
import pytest
from api_calls import Caller, http, wait_for
from confidential_feed import publish_confidential_feed
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka_fixture import embedded_spec, free_ports
from leak_scan import LeakScanner

from watchtower.gateway.transport import CommandClient
from watchtower.local.broker import LocalKafka
from watchtower.local.config import ADMIN_PRINCIPAL
from watchtower.local.errors import LocalStackError
from watchtower.local.security import (
    CLIENT_PRINCIPAL,
    PRINCIPALS,
    RUNNER_PRINCIPAL,
    SERVICE_PRINCIPAL,
    credentials_file,
    ensure_credentials,
    runner_group_prefix,
)
from watchtower.local.security import main as security_main
from watchtower.local.stack import ServiceSet
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.signing import sign_message
from watchtower.schemas.records import decode_message
from watchtower.topics.admin import ensure_topics
from watchtower.topics.catalogue import catalogue
from watchtower.topics.connection import ENV_CREDENTIALS, ENV_PRINCIPAL, kafka_config, read_credentials

pytestmark = pytest.mark.integration

TIMEOUT_S = 60.0


@dataclass
class SecureStack:
    kafka: LocalKafka
    services: ServiceSet
    prefix: str

    @property
    def bootstrap(self) -> str:
        return self.kafka.spec.bootstrap

    def settings(self, principal: str, **extra: Any) -> dict[str, Any]:
        """librdkafka settings of ``principal`` on this cluster."""
        secret = read_credentials(credentials_file(self.kafka.spec))[principal]
        return {"bootstrap.servers": self.bootstrap, **secret.librdkafka(), **extra}

    def topic(self, role: str) -> str:
        return f"{self.prefix}.{role}"


def _set_env(values: dict[str, str | None]) -> dict[str, str | None]:
    """Set (or, for None, remove) environment variables; returns what they were."""
    saved = {k: os.environ.get(k) for k in values}
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    return saved


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    root = tmp_path_factory.mktemp("secure")
    kafka = LocalKafka(embedded_spec(root / "kafka", secure=True))
    prefix = f"s{uuid.uuid4().hex[:8]}"
    kafka.up(prefix=prefix)
    # This process creates the topics as the admin; the stack's processes get the service file only.
    saved = _set_env({ENV_CREDENTIALS: str(credentials_file(kafka.spec, ADMIN_PRINCIPAL)), ENV_PRINCIPAL: None})
    services = ServiceSet(kafka.spec.bootstrap, prefix, root / "logs", api_port=free_ports(1)[0],
                          credentials=credentials_file(kafka.spec, SERVICE_PRINCIPAL))
    try:
        ensure_topics(kafka.spec.bootstrap, catalogue(prefix, partitions=2))
        services.start_worker("w1")
        services.start_projection("p1")
        services.wait_ready()
        yield SecureStack(kafka, services, prefix)
    finally:
        services.stop()
        _set_env(saved)
        kafka.down()


def _publish_and_read(stack: SecureStack) -> str:
    """Create a stream, publish one message through the stack's API, and read it back; its stream id."""
    owner, publisher = Caller(stack.services.api_url), nacl.signing.SigningKey.generate()
    sid = f"sec-{uuid.uuid4().hex[:10]}"
    owner.ok("create_stream", sid, {"publisher_key_hex": bytes(publisher.verify_key).hex()})
    msg = sign_message(stream_id=sid, sequence=1, timestamp_unix_ms=1, kind="t", payload=b"{}", signing_key=publisher)
    assert owner.ok("publish", sid, msg.to_json_dict())["sequence"] == 1
    wait_for(lambda: http("GET", f"{stack.services.api_url}/v1/streams/{sid}/head")[1].get("head") == 1,
             TIMEOUT_S, "the published message to be visible")
    return sid


def _produce_error(settings: dict[str, Any], topic: str) -> KafkaError | None:
    """The delivery error of one record produced to ``topic`` with ``settings`` (None: delivered)."""
    outcome: list[KafkaError | None] = []
    producer = Producer({**settings, "message.timeout.ms": 20000, "log_level": 0})
    producer.produce(topic, key=b"k", value=b"forged", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(30)
    assert outcome, f"no delivery report for {topic}"
    return outcome[0]


def test_a_client_principal_cannot_write_events_messages_or_internal_and_the_stack_is_unaffected(
        secure: SecureStack) -> None:
    client = secure.settings(CLIENT_PRINCIPAL)
    for role in ("events", "messages", "internal"):
        err = _produce_error(client, secure.topic(role))
        assert err is not None, f"the client principal wrote {secure.topic(role)}"
        assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (role, err)
    # The refused writes left nothing behind: the stack still takes a publish and serves the read.
    _publish_and_read(secure)


def test_the_service_principal_may_write_what_the_client_may_not(secure: SecureStack) -> None:
    """The refusal above is the ACLs at work, not a broken topic: the service principal writes `internal`."""
    topic = f"{secure.prefix}.acl-probe"
    admin = AdminClient(secure.settings(ADMIN_PRINCIPAL))
    from confluent_kafka.admin import NewTopic

    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT_S)
    assert _produce_error(secure.settings(SERVICE_PRINCIPAL), topic) is None
    assert _produce_error(secure.settings(CLIENT_PRINCIPAL), topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def _connect_errors(settings: dict[str, Any]) -> tuple[bool, list[KafkaError]]:
    """(whether metadata was served, the client errors reported) for a client with ``settings``."""
    errors: list[KafkaError] = []
    admin = AdminClient({**settings, "log_level": 0, "error_cb": errors.append})
    try:
        admin.list_topics(timeout=8)
    except KafkaException:
        # Error callbacks are served by poll(): collect what the client reported.
        for _ in range(10):
            admin.poll(0.5)
            if errors:
                break
        return False, errors
    return True, errors


def test_a_client_without_credentials_cannot_connect(secure: SecureStack) -> None:
    served, _ = _connect_errors({"bootstrap.servers": secure.bootstrap})
    assert not served, "a client with no credentials got metadata from the secure broker"


def test_a_client_with_a_wrong_password_fails_authentication(secure: SecureStack) -> None:
    wrong = secure.settings(CLIENT_PRINCIPAL, **{"sasl.password": "not-the-password"})
    served, errors = _connect_errors(wrong)
    assert not served, "a client with a wrong password got metadata"
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


def test_the_client_principal_writes_commands_and_reads_replies_and_messages(secure: SecureStack) -> None:
    # The command client (as the SDK's transport would run it) connects as the client principal.
    saved = _set_env({ENV_CREDENTIALS: str(credentials_file(secure.kafka.spec, CLIENT_PRINCIPAL)),
                      ENV_PRINCIPAL: None})
    try:
        assert kafka_config(secure.bootstrap)["sasl.username"] == CLIENT_PRINCIPAL
        commands = CommandClient(secure.bootstrap, prefix=secure.prefix)
    finally:
        _set_env(saved)
    owner, publisher = nacl.signing.SigningKey.generate(), nacl.signing.SigningKey.generate()
    sid = f"cli-{uuid.uuid4().hex[:10]}"
    try:
        created = commands.call(sign_command(owner, "create_stream", sid, 1,
                                             {"publisher_key_hex": bytes(publisher.verify_key).hex()}), TIMEOUT_S)
        assert created["stream_id"] == sid, created
        msg = sign_message(stream_id=sid, sequence=1, timestamp_unix_ms=1, kind="t", payload=b"{}",
                           signing_key=publisher)
        published = commands.call(sign_command(owner, "publish", sid, 2, msg.to_json_dict()), TIMEOUT_S)
        assert published["sequence"] == 1, published
    finally:
        commands.close()
    assert sid in _read_stream_ids(secure.settings(CLIENT_PRINCIPAL), secure.topic("messages"))


def _read_stream_ids(settings: dict[str, Any], topic: str) -> set[str]:
    """Stream ids of every committed message in ``topic``, read with assign() (no group offsets)."""
    return {decode_message(value).stream_id for value in _read_values(settings, topic)}


def _read_values(settings: dict[str, Any], topic: str) -> list[bytes]:
    """The value of every committed record in ``topic``, read with assign() (no group offsets): what
    kcat with these credentials would print."""
    consumer = Consumer({**settings, "group.id": f"{topic.rsplit('.', 1)[0]}.client.{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "isolation.level": "read_committed", "log_level": 0})
    try:
        md = consumer.list_topics(topic, timeout=TIMEOUT_S)
        parts = [TopicPartition(topic, p, 0) for p in md.topics[topic].partitions]
        ends = {p.partition: consumer.get_watermark_offsets(p, timeout=TIMEOUT_S)[1] for p in parts}
        consumer.assign(parts)
        found: list[bytes] = []

        def behind() -> bool:
            # A transactional topic's last offset is a commit marker, never a record, so only the
            # position (not "the last record read") says a partition is read to its end.
            return any(ends[tp.partition] > 0 and tp.offset < ends[tp.partition] for tp in consumer.position(parts))

        deadline_polls = 600
        while deadline_polls and behind():
            deadline_polls -= 1
            record = consumer.poll(0.2)
            if record is None:
                continue
            assert record.error() is None, record.error()
            found.append(record.value() or b"")
        return found
    finally:
        consumer.close()


def test_a_confidential_feed_is_ciphertext_to_a_client_principal_reading_messages(
        secure: SecureStack, tmp_path: Path) -> None:
    """docs/private-feeds.md: the client principal may read ``messages`` (ACLs cannot filter by
    key), so what it reads of a confidential feed must be ciphertext and sealed boxes only."""
    feed = publish_confidential_feed(secure.services.api_url, tmp_path, prefix="sec-conf", count=2,
                                     timeout_s=TIMEOUT_S)

    values = _read_values(secure.settings(CLIENT_PRINCIPAL), secure.topic("messages"))
    mine = sorted((m for m in (decode_message(v) for v in values) if m.stream_id == feed.stream_id),
                  key=lambda m: m.sequence)
    assert [m.sequence for m in mine] == [1, 2, 3]
    leaks = [f for v in values for f in LeakScanner(feed.secrets()).scan_bytes(v, "messages record")]
    assert leaks == []
    reader = feed.reader()  # the member reads the same records
    assert [reader.read(m).plaintext for m in mine][1:] == list(feed.plaintexts)


def test_a_client_principal_cannot_read_events(secure: SecureStack) -> None:
    consumer = Consumer(secure.settings(CLIENT_PRINCIPAL, **{"group.id": f"{secure.prefix}.client.x",
                                                             "log_level": 0}))
    try:
        md = consumer.list_topics(secure.topic("events"), timeout=TIMEOUT_S)
        assert md.topics[secure.topic("events")].error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        consumer.close()


def test_every_credentials_file_is_readable_by_its_owner_only(secure: SecureStack) -> None:
    spec = secure.kafka.spec
    files = [credentials_file(spec), *(credentials_file(spec, p) for p in PRINCIPALS)]
    files += [n.properties_file for n in spec.node_specs]  # they hold the admin password
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(spec.credentials_dir.stat().st_mode) == 0o700
    # Each per-principal file holds that principal alone, so a process gets only its own secret.
    for principal in PRINCIPALS:
        assert list(read_credentials(credentials_file(spec, principal))) == [principal]


def test_the_brokers_data_and_config_are_readable_by_their_owner_only(secure: SecureStack) -> None:
    """ACLs guard the broker's port, not its disk: `events`, `keymgr.state` and every delivery
    sit in the data directory, so no other local user may list or read it (dirs 0700, files 0600)."""
    _publish_and_read(secure)  # segments, checkpoints and logs written since the start included
    spec = secure.kafka.spec
    open_to_others = []
    for path in [spec.data_dir, *spec.data_dir.rglob("*")]:
        if path.is_symlink():
            continue
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode & 0o077:
            open_to_others.append((str(path.relative_to(spec.data_dir)), oct(mode)))
    assert open_to_others == [], open_to_others[:10]
    segments = [p for n in spec.node_specs for p in n.log_dirs.rglob("*.log")]
    assert segments, "no segment was written"


def test_the_credentials_fields_map_onto_kafka_client_settings(secure: SecureStack) -> None:
    entry = read_credentials(credentials_file(secure.kafka.spec))[CLIENT_PRINCIPAL]
    assert entry.bootstrap == secure.bootstrap
    assert (entry.security_protocol, entry.sasl_mechanism) == ("SASL_PLAINTEXT", "SCRAM-SHA-512")
    served, errors = _connect_errors({
        "bootstrap.servers": entry.bootstrap, "security.protocol": entry.security_protocol,
        "sasl.mechanism": entry.sasl_mechanism, "sasl.username": entry.username, "sasl.password": entry.password})
    assert served, errors


def test_without_a_credentials_file_the_config_is_exactly_plaintext(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    monkeypatch.delenv(ENV_CREDENTIALS, raising=False)
    assert kafka_config("h:1", **{"group.id": "g"}) == {"bootstrap.servers": "h:1", "group.id": "g"}
    monkeypatch.setenv(ENV_CREDENTIALS, str(tmp_path / "missing.json"))
    with pytest.raises(RuntimeError, match="cannot be used"):
        kafka_config("h:1")


def test_a_runner_is_never_handed_the_service_principal(tmp_path: Path) -> None:
    service = tmp_path / f"{SERVICE_PRINCIPAL}.json"
    service.write_text("{}")
    services = ServiceSet("127.0.0.1:1", "p", tmp_path / "logs", credentials=service)
    with pytest.raises(LocalStackError, match="runner principal, never as the service"):
        services.start_runner("r1")
    assert services.procs == {}
    (tmp_path / f"{RUNNER_PRINCIPAL}.json").write_text("{}")
    assert services.runner_file() == tmp_path / f"{RUNNER_PRINCIPAL}.json"
    assert ServiceSet("127.0.0.1:1", "p", tmp_path / "logs").runner_file() is None  # plaintext: the environment's


def _local(*args: str) -> Any:
    from click.testing import CliRunner

    from watchtower.cli.local_cmd import local

    return CliRunner().invoke(local, list(args))


def test_local_up_secure_on_a_running_cluster_says_so_and_keeps_its_acls(secure: SecureStack) -> None:
    spec = secure.kafka.spec
    where = ["--data-dir", str(spec.data_dir), "--port", str(spec.port), "--controller-port", str(spec.controller_port)]
    result = _local("up", "--secure", *where)
    assert result.exit_code == 0, result.output
    assert "already running" in result.output
    assert "secure: SASL/SCRAM-SHA-512 and ACLs" in result.output
    assert str(credentials_file(spec, CLIENT_PRINCIPAL)) in result.output
    # Asking again for the ACLs (every `up` does) changed nothing: the client is still refused.
    err = _produce_error(secure.settings(CLIENT_PRINCIPAL), secure.topic("events"))
    assert err is not None
    assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # A plaintext `up` on the secure data directory is refused, not silently opened.
    plain = _local("up", *where)
    assert plain.exit_code != 0
    assert "holds a secure cluster" in plain.output + str(plain.exception)
    # `status` knows from the data directory that the cluster is secure, and reaches it.
    status = _local("status", *where)
    assert status.exit_code == 0, status.output


def test_a_runner_of_the_stack_connects_as_the_runner_principal_and_reads_its_tasks(
        secure: SecureStack, tmp_path: Path) -> None:
    """A runner's process gets the runner principal (not the service's, which could write `events`),
    and with it joins its group on `ingest.tasks`; its idempotent producer may write `ingest.results`."""
    from watchtower.ingest import keys

    keys.scheduler_key(tmp_path)  # the deployment's scheduler: the runner reads its public key
    name = secure.services.start_runner("acl", extra_env={"WATCHTOWER_HOME": str(tmp_path)})
    proc = secure.services.procs[name]
    try:
        admin = AdminClient(secure.settings(ADMIN_PRINCIPAL))
        prefix = runner_group_prefix(secure.prefix)

        def joined() -> bool:
            groups = [g.group_id for g in admin.list_consumer_groups(request_timeout=10).result(TIMEOUT_S).valid
                      if g.group_id.startswith(prefix)]
            found = admin.describe_consumer_groups(groups, request_timeout=10) if groups else {}
            return any(f.result(TIMEOUT_S).members for f in found.values())

        wait_for(lambda: proc.poll() is not None or joined(), TIMEOUT_S, "the runner to join its group")
        assert proc.poll() is None, (secure.services.log_dir / f"{name}.log").read_text()[-2000:]
        environ = dict(item.split(b"=", 1) for item in Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
                       if b"=" in item)
        assert environ[ENV_CREDENTIALS.encode()] == str(credentials_file(secure.kafka.spec, RUNNER_PRINCIPAL)).encode()
    finally:
        proc.terminate()
        proc.wait(60)
    runner = secure.settings(RUNNER_PRINCIPAL, **{"enable.idempotence": True})
    assert _produce_error(runner, secure.topic("ingest.results")) is None
    for role in ("events", "snapshots", "commands"):
        err = _produce_error(runner, secure.topic(role))
        assert err is not None, f"the runner principal wrote {role}"
        assert err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (role, err)


def test_a_cluster_formatted_before_the_runner_principal_gets_it_on_its_next_up(secure: SecureStack) -> None:
    """An earlier release's cluster has no runner principal: `up` (grant) draws it, writes its file
    and creates its SCRAM credential, leaving the other principals' secrets as they were."""
    spec = secure.kafka.spec
    before = read_credentials(credentials_file(spec))
    from confluent_kafka.admin import ScramMechanism, UserScramCredentialDeletion

    admin = AdminClient(secure.settings(ADMIN_PRINCIPAL))
    deletion = UserScramCredentialDeletion(RUNNER_PRINCIPAL, ScramMechanism.SCRAM_SHA_512)
    admin.alter_user_scram_credentials([deletion])[RUNNER_PRINCIPAL].result(TIMEOUT_S)
    old = {name: p for name, p in before.items() if name != RUNNER_PRINCIPAL}
    from watchtower.topics.connection import write_credentials

    write_credentials(credentials_file(spec), list(old.values()))
    credentials_file(spec, RUNNER_PRINCIPAL).unlink()
    with pytest.raises(Exception, match="lacks a principal"):
        ensure_credentials(spec)  # reading alone does not invent a principal
    secure.kafka.grant(secure.prefix)
    after = read_credentials(credentials_file(spec))
    assert {n: p for n, p in after.items() if n != RUNNER_PRINCIPAL} == old
    assert after[RUNNER_PRINCIPAL].password != before[RUNNER_PRINCIPAL].password
    assert list(read_credentials(credentials_file(spec, RUNNER_PRINCIPAL))) == [RUNNER_PRINCIPAL]
    served, errors = _connect_errors(secure.settings(RUNNER_PRINCIPAL))
    assert served, errors


# --- The ACL matrix -------------------------------------------------------------------------------
# What each principal may do with each topic of a deployment (docs/security.md), written out by hand
# so that it is checked against the ACLs the product creates (`acl_bindings`), not derived from them.
# A topic the catalogue gains without a row here fails `test_every_catalogue_topic_has_a_row`.
R, W = "read", "write"
SERVICE_ONLY: dict[str, frozenset[str]] = {SERVICE_PRINCIPAL: frozenset({R, W})}
# The runner principal reads its tasks and writes its results, and nothing else: a runner that
# could write `events` or `snapshots` (or read `keymgr-state`) would undo what QUORUM and MEDIAN
# protect against.
ACL_MATRIX: dict[str, dict[str, frozenset[str]]] = {
    "commands": {**SERVICE_ONLY, CLIENT_PRINCIPAL: frozenset({W})},
    "events": SERVICE_ONLY,
    "messages": {**SERVICE_ONLY, CLIENT_PRINCIPAL: frozenset({R})},
    "internal": SERVICE_ONLY,
    "replies": {**SERVICE_ONLY, CLIENT_PRINCIPAL: frozenset({R})},
    "snapshots": SERVICE_ONLY,
    "deliveries": {**SERVICE_ONLY, CLIENT_PRINCIPAL: frozenset({R})},
    "replay": SERVICE_ONLY,
    "keymgr": SERVICE_ONLY,
    "keymgr-state": SERVICE_ONLY,
    "delivery-state": SERVICE_ONLY,
    "ingest-tasks": {**SERVICE_ONLY, RUNNER_PRINCIPAL: frozenset({R})},
    "ingest-results": {**SERVICE_ONLY, RUNNER_PRINCIPAL: frozenset({W})},
    # The ingestion service's lane of commands: a client writes `commands` only.
    "ingest-commands": SERVICE_ONLY,
}
# Faust's own topics (changelogs, the assignor's) live under this prefix: the service's alone.
FAUST_ROW = "faust"
# A user's topic outside the deployment's prefix that a `kafka_topic` task reads: granted to the
# runner principal by name (`grant-source`), read only; no other principal but the admin reaches it.
SOURCE_ROW = "source"
EXTRA_ROWS: dict[str, dict[str, frozenset[str]]] = {FAUST_ROW: SERVICE_ONLY,
                                                    SOURCE_ROW: {RUNNER_PRINCIPAL: frozenset({R})}}
# Consumer groups and transactional ids: (name pattern, principals allowed to use it).
GROUP_MATRIX = {
    "{prefix}.client.probe": {CLIENT_PRINCIPAL},  # the service has ALL on wt-* groups only
    "wt-client-probe": {CLIENT_PRINCIPAL, SERVICE_PRINCIPAL},
    "wt-projections-{prefix}-g1": {SERVICE_PRINCIPAL},
    "wt-{prefix}.stream-worker": {SERVICE_PRINCIPAL},
    "wt-{prefix}.ingest-runner-0123456789abcdef": {SERVICE_PRINCIPAL, RUNNER_PRINCIPAL},
    "wt-ingest-read-probe": {SERVICE_PRINCIPAL, RUNNER_PRINCIPAL},
    "wt-{prefix}.ingest": {SERVICE_PRINCIPAL},  # the scheduler's and aggregator's, not a runner's
}
TXN_MATRIX = {"wt-{prefix}.worker-w1": {SERVICE_PRINCIPAL}, "wt-{prefix}.worker-w1#2": {SERVICE_PRINCIPAL},
              "{prefix}.client-txn": set[str](),
              "wt-{prefix}.ingest-runner-txn": {SERVICE_PRINCIPAL}}


def test_every_catalogue_topic_has_a_row() -> None:
    assert set(ACL_MATRIX) == {spec.role for spec in catalogue("p")}, (
        "a topic was added to (or removed from) the catalogue without its row in ACL_MATRIX: decide which "
        "principal may read and write it, grant that in watchtower/local/security.py, and add the row")


@pytest.fixture(scope="module")
def matrix_topics(secure: SecureStack) -> dict[str, str]:
    """A deployment of its own on the secure broker (its ACLs, one partition a topic), each topic
    holding one record written by the admin, so an allowed read has something to return."""
    prefix = f"m{uuid.uuid4().hex[:8]}"
    names = {spec.role: spec.name for spec in catalogue(prefix, partitions=1)}
    names[FAUST_ROW] = f"wt-projections-{prefix}-probe-changelog"
    names[SOURCE_ROW] = f"prices-{prefix}"  # a user's topic: outside the prefix
    from confluent_kafka.admin import NewTopic

    admin = AdminClient(secure.settings(ADMIN_PRINCIPAL))
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names.values()]).values():
        future.result(TIMEOUT_S)
    secure.kafka.grant(prefix)
    # The operator makes the user's topic a source, as docs/security.md says, as the admin.
    saved = _set_env({ENV_CREDENTIALS: str(credentials_file(secure.kafka.spec, ADMIN_PRINCIPAL)),
                      ENV_PRINCIPAL: None, "WATCHTOWER_BOOTSTRAP": secure.bootstrap})
    try:
        assert security_main(["grant-source", names[SOURCE_ROW]]) == 0
    finally:
        _set_env(saved)
    for name in names.values():
        assert _produce_error(secure.settings(ADMIN_PRINCIPAL), name) is None, name
    return {**names, "prefix": prefix}


def _expected(principal: str, role: str, op: str) -> bool:
    if principal == ADMIN_PRINCIPAL:
        return True  # the brokers' identity, the one super user
    row = EXTRA_ROWS[role] if role in EXTRA_ROWS else ACL_MATRIX[role]
    return op in row.get(principal, frozenset())


def _write_outcomes(settings: dict[str, Any], topics: dict[str, str]) -> dict[str, bool]:
    """role -> whether one record produced to its topic was acknowledged."""
    outcome: dict[str, KafkaError | None] = {}
    producer = Producer({**settings, "message.timeout.ms": 20000, "log_level": 0})
    for role, topic in topics.items():
        producer.produce(topic, key=b"k", value=b"probe",
                         on_delivery=lambda err, _msg, role=role: outcome.__setitem__(role, err))
    producer.flush(60)
    assert set(outcome) == set(topics), f"no delivery report for {set(topics) - set(outcome)}"
    for role, err in outcome.items():
        assert err is None or err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (role, err)
    return {role: err is None for role, err in outcome.items()}


def _read_outcomes(settings: dict[str, Any], topics: dict[str, str]) -> dict[str, bool]:
    """role -> whether the first record of its topic could be fetched (assign(): no group offsets)."""
    from confluent_kafka import OFFSET_BEGINNING

    consumer = Consumer({**settings, "group.id": f"wt-client-acl-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "log_level": 0})
    outcome: dict[str, bool] = {}
    try:
        # READ implies DESCRIBE in Kafka: a topic whose metadata is refused cannot be read, and
        # librdkafka reports nothing for an assigned partition it cannot even describe.
        for role, topic in topics.items():
            error = consumer.list_topics(topic, timeout=TIMEOUT_S).topics[topic].error
            if error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                outcome[role] = False
        by_topic = {topic: role for role, topic in topics.items() if role not in outcome}
        consumer.assign([TopicPartition(t, 0, OFFSET_BEGINNING) for t in by_topic])
        polls = 600
        while polls and set(outcome) != set(topics):
            polls -= 1
            record = consumer.poll(0.2)
            if record is None:
                continue
            topic = record.topic()
            err = record.error()
            if err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED and topic in by_topic:
                outcome[by_topic[topic]] = False
            elif err is None and topic in by_topic:
                outcome.setdefault(by_topic[topic], True)
        assert set(outcome) == set(topics), f"no answer for {set(topics) - set(outcome)}"
        return outcome
    finally:
        consumer.close()


@pytest.mark.parametrize("principal", [ADMIN_PRINCIPAL, SERVICE_PRINCIPAL, RUNNER_PRINCIPAL, CLIENT_PRINCIPAL])
def test_the_acl_matrix_holds_for_every_topic(secure: SecureStack, matrix_topics: dict[str, str],
                                               principal: str) -> None:
    topics = {role: name for role, name in matrix_topics.items() if role != "prefix"}
    settings = secure.settings(principal)
    wrote, read = _write_outcomes(settings, topics), _read_outcomes(settings, topics)
    wrong = [(role, op, got) for role in topics for op, got in ((W, wrote[role]), (R, read[role]))
             if got != _expected(principal, role, op)]
    assert not wrong, f"{principal}: (topic role, operation, allowed) that break the matrix: {wrong}"


def _group_allowed(settings: dict[str, Any], group: str) -> bool:
    """Whether the principal may use consumer group ``group`` (DESCRIBE, which its READ implies)."""
    admin = AdminClient({**settings, "log_level": 0})
    try:
        admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S)[group].result(TIMEOUT_S)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.GROUP_AUTHORIZATION_FAILED:
            raise
        return False
    return True


def _txn_allowed(settings: dict[str, Any], txn_id: str) -> bool:
    producer = Producer({**settings, "transactional.id": txn_id, "log_level": 0})
    try:
        producer.init_transactions(TIMEOUT_S)
    except KafkaException as exc:
        if exc.args[0].code() not in (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                      KafkaError.CLUSTER_AUTHORIZATION_FAILED):
            raise
        return False
    return True


@pytest.mark.parametrize("principal", [SERVICE_PRINCIPAL, RUNNER_PRINCIPAL, CLIENT_PRINCIPAL])
def test_consumer_groups_and_transactional_ids_follow_the_matrix(secure: SecureStack,
                                                                  matrix_topics: dict[str, str],
                                                                  principal: str) -> None:
    prefix, settings = matrix_topics["prefix"], secure.settings(principal)
    groups = {g.format(prefix=prefix): principal in allowed for g, allowed in GROUP_MATRIX.items()}
    got = {g: _group_allowed(settings, g) for g in groups}
    assert got == groups, f"{principal}: consumer groups allowed (got vs matrix)"
    txns = {t.format(prefix=prefix): principal in allowed for t, allowed in TXN_MATRIX.items()}
    assert {t: _txn_allowed(settings, t) for t in txns} == txns, f"{principal}: transactional ids"


# --- interop: the documented kcat recipe -----------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
KCAT_DOC_CREDENTIALS = "C=~/.watchtower/local/kafka-9092/credentials/client.json"


def _kcat_recipe() -> str:
    """The ``sh`` block under docs/security.md's ``### kcat``, as written."""
    text = (REPO / "docs" / "security.md").read_text()
    section = text.split("### kcat", 1)[1]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


def test_the_documented_kcat_recipe_reads_messages_as_the_client_principal(secure: SecureStack) -> None:
    """Debian's kcat 1.7.1 on its librdkafka 2.0.2 fails SCRAM against Kafka 4 (kcat #462); the
    recipe runs it on the venv's bundled librdkafka. Only the credentials path and the topic prefix
    (this broker's, not the default deployment's) are substituted."""
    if shutil.which("kcat") is None or shutil.which("jq") is None:
        pytest.fail("kcat or jq is not installed: `./run test` installs Debian's kcat and jq")
    recipe = _kcat_recipe()
    assert KCAT_DOC_CREDENTIALS in recipe, recipe
    assert "-t wt.messages" in recipe, recipe
    client_file = credentials_file(secure.kafka.spec, CLIENT_PRINCIPAL)
    script = recipe.replace(KCAT_DOC_CREDENTIALS, f"C={client_file}").replace(
        "-t wt.messages", f"-t {secure.topic('messages')}")
    sid = _publish_and_read(secure)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=REPO, capture_output=True,
                          timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert sid.encode() in done.stdout, done.stderr.decode(errors="replace")
