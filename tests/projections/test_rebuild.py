"""Every projection can be rebuilt from the log to the same state (digest equality).

A live projection worker folds a varied workload; its table digest must equal an offline fold of
the log, a fresh worker generation rebuilt from offset 0, and the same worker after kill -9 and
a restart that folds its partitions from the log again (with more traffic after the restart).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import nacl.signing
import pytest
from api_calls import Caller, http, wait_for
from group_offsets import records_past_commit
from kafka_fixture import free_ports
from stack_fixture import start_stack

from watchtower.projections.rebuild import rebuild_digest
from watchtower.protocol.signing import sign_message

pytestmark = pytest.mark.integration


def _publish(owner: Caller, publisher: nacl.signing.SigningKey, sid: str, seq: int, tags: dict[str, Any]) -> None:
    msg = sign_message(stream_id=sid, sequence=seq, timestamp_unix_ms=1_700_000_000_000 + seq, kind="tick",
                       payload=f'{{"n":{seq}}}'.encode(), signing_key=publisher, tags=tags,
                       signing_key_id=1 if seq < 7 else 2)
    assert owner.ok("publish", sid, msg.to_json_dict())["sequence"] == seq


def _workload(api: str) -> dict[str, int]:
    """Streams with feeds, publishes past a small ring, a key rotation, subscriptions, allowlist."""
    owner = Caller(api)
    heads: dict[str, int] = {}
    for i, capacity in enumerate((5, 50, 10_000)):
        sid = f"s-{uuid.uuid4().hex[:12]}"
        publisher = nacl.signing.SigningKey.generate()
        owner.ok("create_stream", sid, {"publisher_key_hex": bytes(publisher.verify_key).hex(),
                                        "ring_buffer_capacity": capacity,
                                        "feed": {"name": f"feed-{i}", "description": "rebuild test"}})
        for seq in range(1, 13):
            if seq == 7:
                publisher = nacl.signing.SigningKey.generate()
                owner.ok("rotate_publisher_key", sid, {"new_key": bytes(publisher.verify_key)})
            _publish(owner, publisher, sid, seq, {"symbol": "BTC" if seq % 2 else "ETH", "n": seq})
        for _ in range(2):
            btc_only = {"field": "tags.symbol", "op": "eq", "value": "BTC"}
            Caller(api).ok("subscribe", sid, {"mode": "PULL", "filter": btc_only})
        owner.ok("set_subscription_policy", sid, {"policy": "PRIVATE_ALLOWLIST"})
        friend = Caller(api)
        owner.ok("allowlist_add", sid, {"address": "0x" + bytes(friend.key.verify_key).hex()})
        friend.ok("subscribe", sid, {"mode": "PULL"})
        heads[sid] = 12
    return heads


def _live(api: str) -> dict[str, Any]:
    status, body = http("GET", f"{api}/v1/admin/digest")
    assert status == 200
    return body


def _caught_up(api: str, heads: dict[str, int]) -> bool:
    for sid, head in heads.items():
        status, body = http("GET", f"{api}/v1/streams/{sid}/head")
        if status != 200 or body["head_sequence"] != head:
            return False
    return True


def test_live_projection_equals_rebuild_from_the_log(kafka_bootstrap: str, tmp_path: Path) -> None:
    with start_stack(kafka_bootstrap, tmp_path) as stack:
        heads = _workload(stack.api_url)
        wait_for(lambda: _caught_up(stack.api_url, heads), what="the projection to reach every head")
        offline = rebuild_digest(stack.bootstrap, stack.prefix)
        assert offline["counts"] == {"streams": 3, "heads": 3, "offsets": 3, "subscriptions": 9, "registry": 3}
        # The live digest settles once the last events are folded; the offline one is fixed.
        wait_for(lambda: _live(stack.api_url)["digest"] == offline["digest"], what="live digest == rebuild")
        assert _live(stack.api_url)["quarantined"] == offline["quarantined"] == {"count": 0, "recent": []}

        # Drop the projection state: a new generation (a new consumer group) rebuilds from 0.
        stack.kill9("projection-p1")
        port = free_ports(1)[0]
        stack.start_projection("p2", port=port, generation=2)
        api2 = f"http://127.0.0.1:{port}"
        stack.wait_ready(api_url=api2)
        wait_for(lambda: _live(api2)["digest"] == offline["digest"], what="rebuilt generation == rebuild")

        # kill -9 and restart, then keep writing: still equal to the log. The group has committed
        # no offset (its consumer fetches none of these records; the reader folds them and keeps its
        # position with the state), so a restart can only start from the log, never skip part of it.
        assert records_past_commit(stack.bootstrap, f"wt-projections-{stack.prefix}-g2") is None
        stack.kill9("projection-p2")
        stack.start_projection("p2b", port=port, generation=2)
        stack.wait_ready(api_url=api2)
        # Ready means every assigned partition is folded from the log to its end: the first answer
        # already holds every stream and listing, never the empty tables of a worker still recovering.
        recovered = _live(api2)["counts"]
        assert (recovered["streams"], recovered["registry"]) == (3, 3)
        owner_more = _workload(api2)
        wait_for(lambda: _caught_up(api2, owner_more), what="the recovered projection to reach the new heads")
        after = rebuild_digest(stack.bootstrap, stack.prefix)
        assert after["digest"] != offline["digest"]
        wait_for(lambda: _live(api2)["digest"] == after["digest"], what="recovered projection == rebuild")
        # And the recovered worker serves pruned windows correctly (index re-learned from the log).
        sid = next(iter(owner_more))
        status, page = http("GET", f"{api2}/v1/streams/{sid}/messages?cursor=7&limit=10")
        assert status == 200
        assert [m["sequence"] for m in page["messages"]] == [8, 9, 10, 11, 12]
