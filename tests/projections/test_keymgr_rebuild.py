"""The key manager's tables can be rebuilt from the log to the same state as the live worker's.

A real broker and a real projection worker: a ledger log (mint, transfers, account keys, a grant, a
paid stream and a sponsored purchase, a key epoch schedule) with forged records among it is folded
live; its keymgr digest must equal the offline rebuild's, with the same quarantine, and so must a
new worker generation that rebuilds its tables from offset 0. The reads answer what the log says.

The log is written here with the real codec, straight to the events topic, as a hostile writer
could: the fold must not depend on who wrote it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from api_calls import http, wait_for
from confluent_kafka import Producer
from kafka_fixture import free_ports
from stack_fixture import start_stack
from test_keymgr_fold import ALICE, BOB, PUBLISHER, SID, TREASURY, key_epoch_events, ledger_history

from watchtower.projections.rebuild import rebuild_digest, rebuild_keymgr_digest
from watchtower.protocol.stream.state import Event
from watchtower.schemas.wire import encode_event
from watchtower.topics.catalogue import topic_name
from watchtower.topics.connection import kafka_config
from watchtower.topics.partitioning import partition_for_key

pytestmark = pytest.mark.integration

PARTITIONS = 3


def write_events(bootstrap: str, prefix: str, records: list[tuple[str, bytes]], partitions: int = PARTITIONS) -> None:
    """(key, value) records on the events topic, each on its key's partition (the writers' murmur2)."""
    producer = Producer(kafka_config(bootstrap, **{"enable.idempotence": True, "log_level": 3}))
    for key, value in records:
        producer.produce(topic_name("events", prefix), key=key.encode(), value=value,
                         partition=partition_for_key(key.encode(), partitions))
    assert producer.flush(60) == 0


def _log() -> list[tuple[str, bytes]]:
    """The genuine log with three forged records the fold must quarantine."""
    history = ledger_history()
    overdraft = _replace_body(history[6], account=BOB, amount_cby=10**6)  # Bob spends what he never had
    forged = [
        (f"acct:{BOB}", encode_event(Event(**{**_fields(overdraft), "stream_id": f"acct:{BOB}"}))),
        (f"acct:{ALICE}", b"\x00not an event"),
        ("cby:supply", encode_event(history[1])),  # Alice's credit, keyed as the supply
    ]
    return [*forged, *((e.stream_id, encode_event(e)) for e in [*key_epoch_events(), *history])]


def _fields(event: Event) -> dict[str, Any]:
    return {name: getattr(event, name) for name in ("stream_id", "block_height", "caller", "nonce", "digest", "reply",
                                                    "body")}


def _replace_body(event: Event, **changes: Any) -> Event:
    return dataclasses.replace(event, body=dataclasses.replace(event.body, **changes))


def _json(url: str) -> Any:
    status, body = http("GET", url)
    return body if status == 200 else None


def _settled(api: str) -> bool:
    alice = _json(f"{api}/v1/accounts/{ALICE}")
    bob = _json(f"{api}/v1/streams/{SID}/entitlements/{BOB}")
    return bool(alice and alice["balance_cby"] == 678 and bob and bob["active_until_key_epoch"] == 6)


def test_the_live_keymgr_tables_equal_the_offline_rebuild_of_a_log_with_forged_records(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    with start_stack(kafka_bootstrap, tmp_path, partitions=PARTITIONS) as stack:
        write_events(stack.bootstrap, stack.prefix, _log())
        wait_for(lambda: _settled(stack.api_url), what="the projection to fold the ledger log")

        offline = rebuild_keymgr_digest(stack.bootstrap, stack.prefix)
        assert offline["counts"] == {"accounts": 4, "paid_streams": 1, "entitlements": 1, "supply": 1,
                                     "key_epochs": 1}
        assert offline["quarantined"]["count"] == 3
        assert rebuild_digest(stack.bootstrap, stack.prefix)["keymgr"] == offline
        wait_for(lambda: _json(f"{stack.api_url}/v1/keymgr/digest") == offline, what="live keymgr digest == rebuild")

        assert _json(f"{stack.api_url}/v1/cby/supply") == {"total_supply_cby": 1_000, "sum_of_balances_cby": 1_000,
                                                           "accounts": 4}
        entitlement = _json(f"{stack.api_url}/v1/streams/{SID}/entitlements/{BOB}")
        assert entitlement["paid_stream_config"]["publisher_treasury"] == PUBLISHER
        assert entitlement["paid_stream_config"]["protocol_treasury"] == TREASURY
        assert entitlement["current_key_epoch"] > 0
        sponsor = _json(f"{stack.api_url}/v1/streams/{SID}/entitlements/{ALICE}")
        assert sponsor["active_until_key_epoch"] is None  # the payer paid for Bob and holds nothing
        epochs = _json(f"{stack.api_url}/v1/streams/s-epochs/key-epochs")
        assert [e["key_epoch"] for e in epochs["epochs"]] == [3, 7]

        # A new generation (a new consumer group) folds everything from offset 0: the same tables.
        stack.kill9("projection-p1")
        port = free_ports(1)[0]
        stack.start_projection("p2", port=port, generation=2)
        api2 = f"http://127.0.0.1:{port}"
        stack.wait_ready(api_url=api2)
        assert _json(f"{api2}/v1/keymgr/digest") == offline
