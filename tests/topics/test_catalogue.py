"""`watchtower init` creates the catalogue idempotently with the documented settings."""

from __future__ import annotations

import json
import uuid

import pytest
from click.testing import CliRunner

from watchtower.cli.main import _register, cli
from watchtower.topics.admin import TopicMismatchError, describe_topics, ensure_topics
from watchtower.topics.catalogue import FOREVER, catalogue, topic_name


def test_co_partitioned_topics_share_partition_counts() -> None:
    specs = {s.role: s for s in catalogue(prefix="x", partitions=5)}
    assert {specs[r].partitions for r in ("commands", "events", "messages", "replies")} == {5}
    assert specs["messages"].retention_ms == FOREVER, "messages is the archive replay reads"
    assert specs["events"].retention_ms == FOREVER, "events are the source of truth"
    assert topic_name("messages", "x") == "x.messages"
    with pytest.raises(KeyError):
        topic_name("nope", "x")


@pytest.mark.integration
def test_init_is_idempotent_and_applies_settings(kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: object) -> None:
    prefix = f"t{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("WATCHTOWER_TOPIC_PREFIX", prefix)
    monkeypatch.setenv("WATCHTOWER_HOME", str(tmp_path))
    _register()
    runner = CliRunner()
    first = runner.invoke(cli, ["init", "--bootstrap", kafka_bootstrap, "--partitions", "2", "--json"])
    assert first.exit_code == 0, first.output
    actions = {t["name"]: t["action"] for t in json.loads(first.output)["topics"]}
    assert set(actions) == {s.name for s in catalogue(prefix)}
    assert set(actions.values()) == {"created"}

    second = runner.invoke(cli, ["init", "--bootstrap", kafka_bootstrap, "--partitions", "2", "--json"])
    assert second.exit_code == 0, second.output
    assert {t["action"] for t in json.loads(second.output)["topics"]} == {"exists"}

    info = describe_topics(kafka_bootstrap, catalogue(prefix, partitions=2))
    assert info[f"{prefix}.messages"]["retention.ms"] == str(FOREVER)
    assert info[f"{prefix}.keymgr.state"]["cleanup.policy"] == "compact"
    assert info[f"{prefix}.snapshots"]["cleanup.policy"] == "compact"
    assert info[f"{prefix}.replies"]["retention.ms"] == str(3_600_000)
    assert all(v["partitions"] == 2 for v in info.values())

    with pytest.raises(TopicMismatchError, match="partitions"):
        ensure_topics(kafka_bootstrap, catalogue(prefix, partitions=3))
