"""compose.yaml parses and configures the same 3-node cluster as `watchtower local up --nodes 3`."""

from __future__ import annotations

from pathlib import Path

import yaml

from watchtower.local.config import ClusterSpec
from watchtower.local.jars import KAFKA_VERSION

COMPOSE = Path(__file__).resolve().parents[1] / "compose.yaml"


def _props(spec: ClusterSpec, node: int) -> dict[str, str]:
    text = spec.server_properties(spec.node_specs[node - 1])
    return dict(line.split("=", 1) for line in text.splitlines())


def _env_to_props(env: dict[str, str]) -> dict[str, str]:
    return {k.removeprefix("KAFKA_").lower().replace("_", "."): str(v)
            for k, v in env.items() if k.startswith("KAFKA_")}


def test_compose_matches_local_cluster_config() -> None:
    doc = yaml.safe_load(COMPOSE.read_text())
    brokers = {name: svc for name, svc in doc["services"].items() if name.startswith("kafka-")}
    assert len(brokers) == 3
    spec = ClusterSpec(Path("/unused"), nodes=3)
    external_ports = []
    for i in (1, 2, 3):
        svc = brokers[f"kafka-{i}"]
        assert svc["image"] == f"apache/kafka:{KAFKA_VERSION}", "compose and embedded run the same release"
        env = _env_to_props(svc["environment"])
        ours = _props(spec, i)
        for key in ("process.roles", "node.id", "controller.listener.names", "inter.broker.listener.name",
                    "default.replication.factor", "min.insync.replicas", "offsets.topic.replication.factor",
                    "transaction.state.log.replication.factor", "transaction.state.log.min.isr",
                    "group.initial.rebalance.delay.ms", "auto.create.topics.enable",
                    "unclean.leader.election.enable"):
            assert env[key] == ours[key], key
        # Same listener names and protocols (compose adds EXTERNAL for the host side).
        ours_map = dict(p.split(":") for p in ours["listener.security.protocol.map"].split(","))
        env_map = dict(p.split(":") for p in env["listener.security.protocol.map"].split(","))
        assert ours_map.items() <= env_map.items()
        # Three voters, one per node, on the controller listener.
        assert len(env["controller.quorum.voters"].split(",")) == 3
        advertised = dict(a.split("://") for a in env["advertised.listeners"].split(","))
        external_ports.append(int(advertised["EXTERNAL"].rsplit(":", 1)[1]))
        assert f"127.0.0.1:{external_ports[-1]}:{external_ports[-1]}" in svc["ports"]
    # Clients reach compose's cluster at the bootstrap the embedded 3-node cluster uses.
    assert external_ports == [n.port for n in spec.node_specs]
