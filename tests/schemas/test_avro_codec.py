"""Framed Avro codec: round trips, framing, the two error types, and upcasting."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import struct
from typing import Any

import fastavro
import pytest
from avro_strategies import PROPERTY, records_for
from hypothesis import given
from hypothesis import strategies as st

from watchtower.protocol.errors import MalformedRecordError, SchemaMismatchError
from watchtower.schemas import codec
from watchtower.schemas.schema_ids import CATALOG, RETIRED_IDS, SchemaKind, names_of_kind

ALL_NAMES = sorted(CATALOG)
EVENTS = {
    "StreamCreated",
    "StreamMessagePublished",
    "SubscriberUpdated",
    "PublisherKeyRotated",
    "SubscriptionPolicyChanged",
    "AllowlistChanged",
    "KeyEpochRotated",
    "FeedRegistered",
    "AccountKeyRegistered",
    "AccountKeyRevoked",
    "ActorAuthorizationGranted",
    "ActorAuthorizationRevoked",
    "ActorCreated",
    "SpendingAllowanceGranted",
    "SpendingAllowanceRevoked",
    "CbyCredited",
    "CbyDebited",
    "CbyMinted",
    "CbyBurned",
    "PaidStreamRegistered",
    "EpochAccessRequested",
    "EpochAccessPurchased",
    "EpochAccessIdempotent",
    "EpochAccessFailed",
    "ReplayPricingSet",
    "ReplayOrdered",
    "ReplayRegistered",
    "ReplayPaymentFailed",
    "ReplayCancelRequested",
    "ReplayFinished",
    "IngestFailed",
    "RunnerRegistered",
    "RunnerRetired",
}
ORIGIN = {"aggregate_id": "s", "caller": "0x" + "ab" * 32, "nonce": 3, "digest": b"\x01" * 32, "reply_json": "{}"}
POLICY = {"stream_id": "s", "policy": "PUBLIC", "block_height": 9, "caused_by": ORIGIN}
PUBLISHED = {"stream_id": "s", "version": 1, "sequence": 1, "kind": "k", "content_type": "application/json",
             "payload_format": "PLAINTEXT", "payload_hash": b"\x02" * 32, "key_epoch": None, "signing_key_id": 1,
             "timestamp_unix_ms": 5, "block_height": 9, "caused_by": ORIGIN}


def test_catalogue_has_one_schema_per_event_type_and_the_stream_message() -> None:
    assert set(names_of_kind(SchemaKind.EVENT)) == EVENTS
    assert set(CATALOG) == EVENTS | {"StreamMessage", "IngestTask", "IngestResult", "IngestTaskBatch",
                                     "IngestResultBatch"}


def test_retired_ids_are_never_reused() -> None:
    assert not {info.schema_id for info in CATALOG.values()} & set(RETIRED_IDS.values())
    assert not set(CATALOG) & set(RETIRED_IDS)


@pytest.mark.parametrize("name", ALL_NAMES)
def test_every_schema_is_versioned_and_self_contained_when_expanded(name: str) -> None:
    expanded = codec.avro_schema(name)
    assert expanded["namespace"] == f"watchtower.v{codec.latest_version(name)}"
    text = json.dumps(expanded)  # JSON-safe, as Spark's from_avro wants it
    fastavro.parse_schema(json.loads(text), named_schemas={})  # no unresolved references
    if CATALOG[name].kind is SchemaKind.EVENT:
        assert [f["name"] for f in expanded["fields"]][-2:] == ["block_height", "caused_by"]


@pytest.mark.parametrize("name", ALL_NAMES)
@PROPERTY
@given(data=st.data())
def test_every_schema_survives_a_round_trip(name: str, data: st.DataObject) -> None:
    record = data.draw(records_for(codec.avro_schema(name)))
    framed = codec.encode(name, record)
    decoded = codec.decode(framed)
    assert (decoded.name, decoded.version) == (name, codec.latest_version(name))
    assert decoded.record == record
    assert codec.read_header(framed) == (name, codec.latest_version(name))


def test_frame_header_layout() -> None:
    framed = codec.encode("SubscriptionPolicyChanged", POLICY)
    assert framed[0] == 0x57
    assert struct.unpack(">HH", framed[1:5]) == (CATALOG["SubscriptionPolicyChanged"].schema_id, 1)
    assert (
        fastavro.schemaless_reader(
            io.BytesIO(framed[codec.HEADER_BYTES :]),
            fastavro.parse_schema(codec.avro_schema("SubscriptionPolicyChanged")),
        )
        == POLICY
    )


def test_defaults_are_filled_for_omitted_optional_fields() -> None:
    record = {k: v for k, v in PUBLISHED.items() if k != "key_epoch"}
    assert codec.decode_as("StreamMessagePublished", codec.encode("StreamMessagePublished", record)) == PUBLISHED


@pytest.mark.parametrize(
    ("record", "fragment"),
    [
        ({**POLICY, "colour": "red"}, "unknown field"),
        ({k: v for k, v in POLICY.items() if k != "policy"}, "missing field 'policy'"),
        ({**POLICY, "block_height": "nine"}, "does not fit"),
        ({**POLICY, "block_height": True}, "does not fit"),  # a bool is not a long
        ({**POLICY, "block_height": 1.5}, "does not fit"),
        ({**POLICY, "block_height": 2**63}, "does not fit"),
        ({**POLICY, "policy": b"bytes"}, "does not fit"),
        ("not a record", "must be a record"),
    ],
)
def test_records_that_do_not_fit_are_schema_mismatch(record: Any, fragment: str) -> None:
    with pytest.raises(SchemaMismatchError, match=fragment):
        codec.encode("SubscriptionPolicyChanged", record)


def test_unknown_names_and_versions_are_schema_mismatch() -> None:
    with pytest.raises(SchemaMismatchError):
        codec.encode("Teleported", {})
    with pytest.raises(SchemaMismatchError):
        codec.encode("SubscriptionPolicyChanged", POLICY, version=9)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x57\x00",
        b"\x00\x00\x01\x00\x01",  # Confluent-style magic
        b"\x57" + struct.pack(">HH", CATALOG["SubscriptionPolicyChanged"].schema_id, 1),  # empty body
        b"\x57" + struct.pack(">HH", CATALOG["SubscriptionPolicyChanged"].schema_id, 1) + b"\x02s",  # truncated
        "text",
    ],
)
def test_unreadable_bytes_are_malformed_record(data: Any) -> None:
    with pytest.raises(MalformedRecordError):
        codec.decode(data)


def test_trailing_bytes_are_malformed_record() -> None:
    with pytest.raises(MalformedRecordError, match="trailing"):
        codec.decode(codec.encode("SubscriptionPolicyChanged", POLICY) + b"\x00")


def test_unknown_schema_id_or_newer_version_is_schema_mismatch() -> None:
    with pytest.raises(SchemaMismatchError, match="unknown"):
        codec.decode(b"\x57" + struct.pack(">HH", 999, 1) + b"\x00")
    body = codec.encode("SubscriptionPolicyChanged", POLICY)[codec.HEADER_BYTES :]
    with pytest.raises(SchemaMismatchError, match="upgrade"):
        codec.decode(b"\x57" + struct.pack(">HH", CATALOG["SubscriptionPolicyChanged"].schema_id, 2) + body)


def test_expect_restricts_the_schema() -> None:
    framed = codec.encode("SubscriptionPolicyChanged", POLICY)
    expect = {"SubscriptionPolicyChanged", "StreamCreated"}
    assert codec.decode(framed, expect=expect).name == "SubscriptionPolicyChanged"
    with pytest.raises(SchemaMismatchError, match="expected StreamMessage"):
        codec.decode_as("StreamMessage", framed)


@PROPERTY
@given(st.sampled_from(ALL_NAMES), st.binary(max_size=200))
def test_random_bodies_raise_only_the_codec_errors(name: str, body: bytes) -> None:
    framed = b"\x57" + struct.pack(">HH", CATALOG[name].schema_id, 1) + body
    try:
        decoded = codec.decode(framed)
    except (MalformedRecordError, SchemaMismatchError):
        return
    assert decoded.name == name


@PROPERTY
@given(st.binary(max_size=60))
def test_random_bytes_raise_only_the_codec_errors(data: bytes) -> None:
    with contextlib.suppress(MalformedRecordError, SchemaMismatchError):  # anything else fails the test
        codec.decode(data)


# --- upcasting -------------------------------------------------------------------------------------


@pytest.fixture
def policy_v2(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend SubscriptionPolicyChanged has a v2 that adds `attempt`, without touching the package files."""
    real = codec._schemas()
    raw_v2 = copy.deepcopy(real.raw[("SubscriptionPolicyChanged", 1)])
    raw_v2["namespace"] = "watchtower.v2"
    raw_v2["fields"].append({"name": "attempt", "type": "long", "doc": "Attempt number."})
    parsed = dict(real.parsed)
    parsed[("SubscriptionPolicyChanged", 2)] = fastavro.parse_schema(copy.deepcopy(raw_v2), named_schemas={})
    fake = codec._Schemas(
        raw={**real.raw, ("SubscriptionPolicyChanged", 2): raw_v2},
        parsed=parsed,
        named_raw={**real.named_raw, "watchtower.v2.SubscriptionPolicyChanged": raw_v2},
        latest={**real.latest, "SubscriptionPolicyChanged": 2},
    )
    monkeypatch.setattr(codec, "_schemas", lambda: fake)
    monkeypatch.setattr(codec, "_UPCASTERS", {})


@pytest.mark.usefixtures("policy_v2")
def test_old_versions_are_upcast_by_registered_functions() -> None:
    old = codec.encode("SubscriptionPolicyChanged", POLICY, version=1)
    with pytest.raises(SchemaMismatchError, match="no upcaster from SubscriptionPolicyChanged v1 to v2"):
        codec.decode(old)

    @codec.register_upcaster("SubscriptionPolicyChanged", 1)
    def add_attempt(record: dict[str, Any]) -> dict[str, Any]:
        return {**record, "attempt": 1}

    decoded = codec.decode(old)
    assert decoded.version == 1
    assert decoded.record == {**POLICY, "attempt": 1}
    assert codec.decode(codec.encode("SubscriptionPolicyChanged", {**POLICY, "attempt": 4})).record["attempt"] == 4
    with pytest.raises(Exception, match="already registered"):
        codec.register_upcaster("SubscriptionPolicyChanged", 1, lambda r: r)


@pytest.mark.usefixtures("policy_v2")
def test_an_upcaster_that_produces_a_bad_record_is_schema_mismatch() -> None:
    codec.register_upcaster("SubscriptionPolicyChanged", 1, lambda record: record)  # forgets `attempt`
    with pytest.raises(SchemaMismatchError, match="does not fit v2"):
        codec.decode(codec.encode("SubscriptionPolicyChanged", POLICY, version=1))
