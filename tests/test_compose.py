"""compose.yaml parses and configures the same 3-node cluster as `watchtower local up --nodes 3`,
secured as `watchtower local up --secure` is, with TLS in addition (docs/security.md)."""

from __future__ import annotations

from pathlib import Path

import yaml

from watchtower.local.config import ClusterSpec
from watchtower.local.jars import KAFKA_VERSION

REPO = Path(__file__).resolve().parents[1]
COMPOSE = REPO / "compose.yaml"


def _props(spec: ClusterSpec, node: int) -> dict[str, str]:
    text = spec.server_properties(spec.node_specs[node - 1], admin_password="unused" if spec.secure else None)
    return dict(line.split("=", 1) for line in text.splitlines())


def _env_to_props(env: dict[str, str]) -> dict[str, str]:
    return {k.removeprefix("KAFKA_").lower().replace("_", "."): str(v)
            for k, v in env.items() if k.startswith("KAFKA_")}


def test_compose_matches_local_cluster_config() -> None:
    doc = yaml.safe_load(COMPOSE.read_text())
    brokers = {name: svc for name, svc in doc["services"].items() if name.startswith("kafka-")}
    assert len(brokers) == 3
    spec = ClusterSpec(Path("/unused"), nodes=3, secure=True)
    external_ports = []
    for i in (1, 2, 3):
        svc = brokers[f"kafka-{i}"]
        assert svc["image"] == f"apache/kafka:{KAFKA_VERSION}", "compose and embedded run the same release"
        env = _env_to_props(svc["environment"])
        ours = _props(spec, i)
        for key in ("process.roles", "node.id", "controller.listener.names",
                    "default.replication.factor", "min.insync.replicas", "offsets.topic.replication.factor",
                    "transaction.state.log.replication.factor", "transaction.state.log.min.isr",
                    "group.initial.rebalance.delay.ms", "auto.create.topics.enable",
                    "unclean.leader.election.enable",
                    # The same authorization and client authentication as the embedded secure mode.
                    "authorizer.class.name", "allow.everyone.if.no.acl.found", "sasl.enabled.mechanisms"):
            assert env[key] == ours[key], key
        # Every listener authenticates: clients with SCRAM over TLS, brokers and controllers with
        # certificates (mutual TLS); nothing is PLAINTEXT.
        env_map = dict(p.split(":") for p in env["listener.security.protocol.map"].split(","))
        assert env_map == {"INTERNAL": "SSL", "CONTROLLER": "SSL", "CLIENT": "SASL_SSL", "EXTERNAL": "SASL_SSL"}
        assert env[f"listener.name.{env['inter.broker.listener.name'].lower()}.ssl.client.auth"] == "required"
        assert env["listener.name.controller.ssl.client.auth"] == "required"
        assert f"User:{'admin'}" in env["super.users"].split(";")
        assert env["ssl.keystore.location"] == f"/secrets/kafka-{i}.p12"
        # No secret in this file: passwords come from the secrets volume ("$$" is compose for "$").
        assert all(v.startswith("$${file:/secrets/") for k, v in env.items() if k.endswith("password"))
        # Three voters, one per node, on the controller listener.
        assert len(env["controller.quorum.voters"].split(",")) == 3
        advertised = dict(a.split("://") for a in env["advertised.listeners"].split(","))
        external_ports.append(int(advertised["EXTERNAL"].rsplit(":", 1)[1]))
        assert f"127.0.0.1:{external_ports[-1]}:{external_ports[-1]}" in svc["ports"]
    # Clients reach compose's cluster at the bootstrap the embedded 3-node cluster uses.
    assert external_ports == [n.port for n in spec.node_specs]
    for i in (1, 2, 3):
        env = _env_to_props(brokers[f"kafka-{i}"]["environment"])
        listener_ports = [int(addr.rsplit(":", 1)[1]) for addr in env["listeners"].split(",")]
        assert len(set(listener_ports)) == len(listener_ports), f"kafka-{i} binds one port twice"


def test_compose_generates_its_tls_material_and_credentials_before_the_brokers_start() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    script = REPO / services["secrets"]["entrypoint"][-1].replace("/compose/", "compose/")
    text = script.read_text()
    assert "keytool -genkeypair" in text, "the CA and the broker keystores are made here"
    assert "-gencert" in text
    for who in ("admin", "service", "client"):
        assert who in text
    assert '"security_protocol": "SASL_SSL"' in text
    assert "SCRAM-SHA-512" in text
    for i in (1, 2, 3):
        assert services[f"kafka-{i}"]["depends_on"] == {"secrets": {"condition": "service_completed_successfully"}}
    setup = (REPO / "compose" / "scram-setup.sh").read_text()
    assert "SCRAM-SHA-512=[" in setup
    assert "--entity-type users" in setup
    assert services["init"]["depends_on"] == {"scram-setup": {"condition": "service_completed_successfully"}}
    assert services["init"]["environment"]["WATCHTOWER_KAFKA_CREDENTIALS"] == "/secrets/admin.json"
    assert "watchtower.local.security grant" in services["init"]["command"][-1]


def test_compose_runs_the_watchtower_services_against_the_brokers() -> None:
    doc = yaml.safe_load(COMPOSE.read_text())
    services = doc["services"]
    internal = ",".join(f"kafka-{i}:19092" for i in (1, 2, 3))
    # The topics, then the ACLs (a one-line shell command, so both run as the admin, in order).
    assert services["init"]["command"][:2] == ["sh", "-c"]
    assert services["init"]["command"][2].startswith("watchtower init && ")
    assert services["init"]["environment"]["WATCHTOWER_BOOTSTRAP"] == internal
    workers = [s for name, s in services.items() if name.startswith("worker-")]
    assert len(workers) >= 2, "compose shows several workers sharing the partitions"
    ids = [w["command"][-1] for w in workers]
    assert len(set(ids)) == len(ids), "each worker needs its own id (its transactional.id)"
    for w in workers:
        assert w["command"][:3] == ["python", "-m", "watchtower.workers.worker_main"]
        assert w["command"][3] == internal
    for name in [n for n in services if n.startswith(("worker-", "api-"))] + ["gateway"]:
        # The service principal, never the admin.
        assert services[name]["environment"]["WATCHTOWER_KAFKA_CREDENTIALS"] == "/secrets/service.json", name
    apis = {name: s for name, s in services.items() if name.startswith("api-")}
    assert len(apis) >= 2
    for name, api in apis.items():
        assert api["command"][:3] == ["python", "-m", "watchtower.api.main"]
        assert api["environment"]["WATCHTOWER_CANONICAL_URL"] == f"http://{name}:{api['command'][-1]}"
        # Peers forward routed reads to the advertised host, so it must be the service's name.
        assert api["environment"]["WATCHTOWER_WEB_HOST"] == name
        # Inside its container the API must listen on all interfaces (the default is loopback only)...
        assert api["environment"]["WATCHTOWER_WEB_BIND"] == "0.0.0.0"  # noqa: S104
        # ...while the host publishes it on loopback only.
        assert all(str(p).startswith("127.0.0.1:") for p in api["ports"]), name
    assert {"spark-master", "spark-worker"} <= services.keys()


def test_compose_runs_the_command_gateway_apart_from_the_read_api() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    internal = ",".join(f"kafka-{i}:19092" for i in (1, 2, 3))
    gateway = services["gateway"]
    assert gateway["command"] == ["python", "-m", "watchtower.gateway.main", internal, "8480"]
    assert gateway["environment"]["WATCHTOWER_WEB_BIND"] == "0.0.0.0"  # noqa: S104 (inside its container)
    assert gateway["ports"] == ["127.0.0.1:8480:8480"], "published on the host's loopback only"
    prefix = services["init"]["environment"]["WATCHTOWER_TOPIC_PREFIX"]
    assert gateway["environment"]["WATCHTOWER_TOPIC_PREFIX"] == prefix
    for name, api in services.items():
        if name.startswith("api-"):
            assert api["environment"]["WATCHTOWER_GATEWAY"] == "0", f"{name} answers reads only"


def _mounts(service: dict[str, object]) -> list[tuple[str, str]]:
    """(volume or path, target) of every mount of a compose service, short or long syntax."""
    out = []
    for entry in service.get("volumes", []):  # type: ignore[attr-defined]
        if isinstance(entry, str):
            source, target = entry.split(":")[:2]
        else:
            source, target = entry["source"], entry["target"]
        out.append((source, target))
    return out


def test_compose_runners_hold_the_runner_principal_and_no_other_secret() -> None:
    """A runner with the service principal could write `events` and `snapshots` directly, and one
    with the secrets volume could read admin.json: runners get a volume with their own credentials
    (runner.json) and the CA, made by the secrets service and given a SCRAM user by scram-setup."""
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    runners = {name: s for name, s in services.items() if name.startswith("runner-")}
    assert len(runners) >= 2
    for name, runner in runners.items():
        assert runner["environment"]["WATCHTOWER_KAFKA_CREDENTIALS"] == "/secrets/runner.json", name
        sources = [source for source, _ in _mounts(runner)]
        assert "secrets" not in sources, f"{name} mounts the whole secrets volume (admin.json included)"
        assert ("runner-secrets", "/secrets") in _mounts(runner), name
    # Only the secrets service writes the runners' volume; no other service mounts it.
    holders = {name for name, s in services.items() if "runner-secrets" in [src for src, _ in _mounts(s)]}
    assert holders == {"secrets", *runners}
    script = (REPO / "compose" / "secrets-init.sh").read_text()
    assert "runner" in script.split("for who in", 1)[1].split(";", 1)[0], "secrets-init makes runner.json"
    assert "/runner-secrets" in script
    setup = (REPO / "compose" / "scram-setup.sh").read_text()
    assert "runner" in setup.split("for who in", 1)[1].split(";", 1)[0], "scram-setup creates the runner user"
    # The ingestion service (scheduler and aggregator) stays the service principal.
    assert services["ingest"]["environment"]["WATCHTOWER_KAFKA_CREDENTIALS"] == "/secrets/service.json"


def test_compose_brokers_have_a_jaas_entry_for_every_sasl_listener() -> None:
    """A SASL listener without its JAAS entry stops the broker at start ('Could not find a
    KafkaServer entry in the JAAS configuration'): every SASL_SSL listener names SCRAM's login module."""
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    for i in (1, 2, 3):
        env = services[f"kafka-{i}"]["environment"]
        protocols = dict(p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
        for listener, protocol in protocols.items():
            if protocol.startswith("SASL"):
                # apache/kafka reads "___" as "-": listener.name.<l>.scram-sha-512.sasl.jaas.config.
                key = f"KAFKA_LISTENER_NAME_{listener}_SCRAM___SHA___512_SASL_JAAS_CONFIG"
                assert "ScramLoginModule required" in env.get(key, ""), f"kafka-{i} {listener}"


def test_compose_runs_the_key_manager_with_its_kek_as_a_secret() -> None:
    doc = yaml.safe_load(COMPOSE.read_text())
    keymgr = doc["services"]["keymgr"]
    assert keymgr["command"][:3] == ["python", "-m", "watchtower.keymgr.main"]
    assert keymgr["secrets"] == ["keymgr_kek"]
    assert "file" in doc["secrets"]["keymgr_kek"]
    # The KEK is read from the secret's file, never from the environment or an image.
    assert keymgr["environment"]["WATCHTOWER_KEYMGR_KEK_FILE"] == "/run/secrets/keymgr_kek"
    assert "WATCHTOWER_KEYMGR_KEK" not in keymgr["environment"]
    assert keymgr["environment"]["WATCHTOWER_KAFKA_CREDENTIALS"] == "/secrets/service.json"
    assert all(str(p).startswith("127.0.0.1:") for p in keymgr["ports"])
    # No other service holds the KEK.
    assert [n for n, s in doc["services"].items() if "keymgr_kek" in s.get("secrets", [])] == ["keymgr"]
