"""A paid (PLATFORM_MANAGED) ingesting feed: every tick is sealed by stream_encrypt as the delegated
publisher key and published as CIPHERTEXT with the key manager's receipt, which the stream actor
checks; without a key manager the tick is IngestFailed(ENCRYPT_REFUSED) and consumes no sequence."""

from __future__ import annotations

import sys
from pathlib import Path

import nacl.signing
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "keymgr"))

from ingest_harness import PriceSource, health, ingest_failures, serve_source, wait_for
from keymgr_harness import keymgr_stack

from watchtower.client.account import Account
from watchtower.client.http import ApiClient
from watchtower.client.sdk import create_feed, wait_until_visible
from watchtower.client.subscriber import Subscriber
from watchtower.ingest import keys

pytestmark = [pytest.mark.integration, pytest.mark.secure]


def test_a_paid_feed_ingests_ciphertext_sealed_by_the_key_manager(kafka_bootstrap: str,
                                                                   tmp_path_factory: pytest.TempPathFactory) -> None:
    home = tmp_path_factory.mktemp("paid-ingest-home")
    keys.scheduler_key(home)
    delegated = keys.ingestion_publisher_key(home)
    source = PriceSource()
    with serve_source(source) as url, keymgr_stack(kafka_bootstrap, tmp_path_factory.mktemp("paid-ingest")) as (
            services, _kek_file, _kek):
        assert services.keymgr_url is not None
        extra = {"WATCHTOWER_HOME": str(home), "WATCHTOWER_INGEST_ALLOW_NETS": "127.0.0.1/32"}
        services.start_runner("r1", extra_env=extra)
        services.start_ingest(extra_env={**extra, "WATCHTOWER_KEYMGR": services.keymgr_url})
        api = ApiClient(services.api_url)
        owner = Account(nacl.signing.SigningKey.generate(), home=home)
        ingestion = {"enabled": True, "interval_blocks": 1, "num_runners": 1, "proof_type": "NONE",
                     "result_schema": {"type": "object"},
                     "task_definition": {"kind": "http_json", "url": url, "select": {"p": "$.data.price"}}}
        paid = {"fee_per_key_epoch_cby": 10, "protocol_fee_bps": 0, "publisher_treasury": owner.address}
        sid = create_feed(api, owner, name="paid-ingest", publisher_key_hex=bytes(delegated.verify_key).hex(),
                          ingestion=ingestion, access_mode="PLATFORM_MANAGED", paid_stream_config=paid)["stream_id"]
        wait_until_visible(api, sid)
        wait_for("3 ingested ciphertext messages", lambda: api.get_head(sid)["head_sequence"] >= 3, 90)
        messages = Subscriber(api, sid, expected_owner=owner.address).poll(100)
        assert len(messages) >= 3
        for msg in messages:
            assert str(msg.payload_format) == "CIPHERTEXT"
            assert msg.key_epoch is not None
            assert b"97000" not in msg.payload_inline, "the price travels sealed"
        # The first tick may time out while the runner still joins its group; nothing else fails.
        early = {e.body.reason for e in ingest_failures(services.bootstrap, services.prefix, sid)}
        assert early <= {"TIMEOUT"}, early

        # The same service without a key manager: every tick is refused before publishing.
        services.kill9("ingest")
        services.start_ingest(extra_env=extra)
        def refused() -> int:
            return int(health(services.health_file("ingest")).get("failed", {}).get("ENCRYPT_REFUSED", 0))

        wait_for("an ENCRYPT_REFUSED", lambda: refused() >= 1, 90)
        head = api.get_head(sid)["head_sequence"]
        wait_for("three more refused ticks", lambda: refused() >= 4, 60)
        assert api.get_head(sid)["head_sequence"] == head, "a refused tick consumes no sequence"
        reasons = {e.body.reason for e in ingest_failures(services.bootstrap, services.prefix, sid)}
        # Ticks due while the service was down and past their deadline when it came back are TIMEOUTs.
        assert "ENCRYPT_REFUSED" in reasons
        assert reasons <= {"ENCRYPT_REFUSED", "TIMEOUT", "TICKS_SKIPPED"}
