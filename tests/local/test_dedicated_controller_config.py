"""The embedded cluster with a controller in a JVM of its own: what each node's properties say."""
from __future__ import annotations

from pathlib import Path

import pytest

from watchtower.local.config import ClusterSpec


def props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_brokers_only_broker_and_the_controller_only_controller(tmp_path: Path) -> None:
    spec = ClusterSpec(tmp_path, port=40_000, controller_port=41_000, nodes=1, dedicated_controller=True)
    [broker] = spec.node_specs
    [controller] = spec.controller_specs
    assert spec.all_node_specs == [controller, broker]
    assert spec.bootstrap == "127.0.0.1:40000"  # clients never see the controller
    b, c = props(spec.server_properties(broker)), props(spec.server_properties(controller))
    assert b["process.roles"] == "broker"
    assert c["process.roles"] == "controller"
    # Both name the one controller as the quorum: the broker is never a voter.
    assert b["controller.quorum.voters"] == c["controller.quorum.voters"] == "2@127.0.0.1:41001"
    assert b["listeners"] == "PLAINTEXT://127.0.0.1:40000"
    assert c["listeners"] == "CONTROLLER://127.0.0.1:41001"
    assert "advertised.listeners" not in c
    assert "inter.broker.listener.name" not in c
    assert c["broker.session.timeout.ms"] == b["broker.session.timeout.ms"]
    assert controller.directory != broker.directory


def test_the_default_cluster_is_unchanged_combined_nodes(tmp_path: Path) -> None:
    spec = ClusterSpec(tmp_path, port=40_000, controller_port=41_000, nodes=3)
    assert spec.controller_specs == []
    assert [n.roles for n in spec.all_node_specs] == ["broker,controller"] * 3
    text = props(spec.server_properties(spec.node_specs[0]))
    assert text["controller.quorum.voters"] == "1@127.0.0.1:41000,2@127.0.0.1:41001,3@127.0.0.1:41002"
    assert "broker.session.timeout.ms" not in text


def test_a_secure_cluster_with_a_dedicated_controller_is_refused(tmp_path: Path) -> None:
    spec = ClusterSpec(tmp_path, nodes=1, secure=True, dedicated_controller=True)
    with pytest.raises(ValueError, match="plaintext clusters only"):
        spec.server_properties(spec.node_specs[0], admin_password="x")
