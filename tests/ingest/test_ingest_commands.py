"""report_ingest_failure on the stream actor, and the runner registry, through the pure decide/evolve."""

from __future__ import annotations

from typing import Any

import nacl.signing
import pytest
from hypothesis import given
from hypothesis import strategies as st

from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.errors import InvalidArgumentError, InvalidSignatureError, UnauthorizedError, WatchtowerError
from watchtower.protocol.ingestion.runners import (
    RUNNERS_KEY,
    RunnerRegistry,
    decide_runner,
    decode_registries,
    encode_registries,
    evolve_runners,
)
from watchtower.protocol.signed_command import sign_command
from watchtower.protocol.stream.actor import StreamState, decide, evolve, get_head, state_digest
from watchtower.protocol.stream.snapshots import decode_streams, encode_streams
from watchtower.protocol.stream.state import INGEST_FAILED

OWNER = nacl.signing.SigningKey(b"\x01" * 32)
DELEGATE = nacl.signing.SigningKey(b"\x02" * 32)  # the publisher key the owner gave ingestion
STRANGER = nacl.signing.SigningKey(b"\x03" * 32)
SID = "ingest-prices"
HEIGHT = 5_000_000
INGESTION = {"enabled": True, "num_runners": 3, "proof_type": "QUORUM", "interval_blocks": 1,
             "task_definition": {"kind": "http_json", "url": "http://127.0.0.1:1/p"}, "result_schema": {}}


def addr(key: nacl.signing.SigningKey) -> str:
    return address_from_public_key(bytes(key.verify_key))


class Stream:
    def __init__(self, ingestion: dict[str, Any] | None = INGESTION) -> None:
        self.state = StreamState.initial(SID)
        self.nonce = 1
        body: dict[str, Any] = {"publisher_key": bytes(DELEGATE.verify_key)}
        if ingestion is not None:
            body["ingestion"] = ingestion
        self.do(OWNER, "create_stream", body)

    def do(self, key: nacl.signing.SigningKey, method: str, body: dict[str, Any]) -> dict[str, Any]:
        self.nonce += 1
        decision = decide(self.state, sign_command(key, method, SID, self.nonce, body), block_height=HEIGHT)
        for event in decision.events:
            self.state = evolve(self.state, event)
        return decision.reply

    def fail(self, first: int, last: int | None = None, *, key: nacl.signing.SigningKey = DELEGATE,
             reason: str = "SOURCE_UNAVAILABLE") -> dict[str, Any]:
        return self.do(key, "report_ingest_failure", {
            "reason": reason, "timestamp_unix_ms": 1_767_225_600_000 + first * 1000, "first_tick": first,
            "last_tick": first if last is None else last, "detail": "the source answered 503"})


def test_a_failure_counts_once_and_consumes_no_sequence() -> None:
    s = Stream()
    head_before = s.state.head
    reply = s.fail(1)
    assert reply["ingest_fail_count"] == 1
    assert s.state.head == head_before
    assert get_head(s.state)["ingest_fail_count"] == 1
    s.fail(2, 7, reason="TICKS_SKIPPED")
    assert (s.state.ingest_fail_count, s.state.last_failed_tick) == (2, 7)
    with pytest.raises(InvalidArgumentError) as again:
        s.fail(7)
    assert again.value.details == {"last_failed_tick": 7}
    assert s.state.ingest_fail_count == 2
    restored = decode_streams(encode_streams({SID: s.state}))[SID]
    assert (restored.ingest_fail_count, restored.last_failed_tick) == (2, 7)


def test_only_the_delegated_publisher_key_reports_failures() -> None:
    s = Stream()
    for key in (OWNER, STRANGER):
        with pytest.raises(UnauthorizedError, match="current publisher key"):
            s.fail(1, key=key)
    assert s.state.ingest_fail_count == 0


def test_a_stream_without_ingestion_cannot_fail_to_ingest() -> None:
    s = Stream(ingestion=None)
    with pytest.raises(InvalidArgumentError, match="no enabled ingestion"):
        s.fail(1)


@given(st.dictionaries(st.sampled_from(["reason", "timestamp_unix_ms", "first_tick", "last_tick", "detail", "x"]),
                       st.one_of(st.integers(-5, 2**60), st.text(max_size=600), st.none(), st.booleans()),
                       max_size=6))
def test_bad_bodies_are_refused_with_a_spec_code(body: dict[str, Any]) -> None:
    s = Stream()
    try:
        reply = s.do(DELEGATE, "report_ingest_failure", body)
    except WatchtowerError as exc:
        code = exc.code
        assert s.state.ingest_fail_count == 0
        assert code == "INVALID_ARGUMENT"
    else:
        assert reply["ingest_fail_count"] == 1
        assert set(body) == {"reason", "timestamp_unix_ms", "first_tick", "last_tick", "detail"}
        assert 1 <= body["first_tick"] <= body["last_tick"]


def test_runner_registry_registers_retires_and_snapshots() -> None:
    reg = RunnerRegistry()
    runners = [nacl.signing.SigningKey(bytes([0x20 + i]) * 32) for i in range(3)]
    for i, key in enumerate(runners):
        event, reply = decide_runner(reg, sign_command(key, "register_runner", RUNNERS_KEY, 10, {"label": f"r{i}"}),
                                     block_height=HEIGHT)
        assert event is not None
        assert reply["registered"] is True
        reg = evolve_runners(reg, event)
    assert set(reg.public_keys()) == {bytes(k.verify_key) for k in runners}
    retry = sign_command(runners[0], "register_runner", RUNNERS_KEY, 10, {"label": "r0"})
    assert decide_runner(reg, retry, block_height=HEIGHT)[0] is None
    event, _ = decide_runner(reg, sign_command(runners[0], "retire_runner", RUNNERS_KEY, 11, {}), block_height=HEIGHT)
    assert event is not None
    reg = evolve_runners(reg, event)
    assert len(reg.runners) == 2
    assert decode_registries(encode_registries({RUNNERS_KEY: reg}))[RUNNERS_KEY] == reg
    with pytest.raises(UnauthorizedError):
        decide_runner(reg, sign_command(runners[0], "retire_runner", RUNNERS_KEY, 12, {}), block_height=HEIGHT)
    forged = sign_command(STRANGER, "register_runner", RUNNERS_KEY, 13, {"label": "x"})
    object.__setattr__(forged, "signature", bytes(64))
    with pytest.raises(InvalidSignatureError):
        decide_runner(reg, forged, block_height=HEIGHT)


def test_the_event_type_is_ingest_failed() -> None:
    s = Stream()
    decision = decide(s.state, sign_command(DELEGATE, "report_ingest_failure", SID, 99, {
        "reason": "TIMEOUT", "timestamp_unix_ms": 1, "first_tick": 1, "last_tick": 1, "detail": ""}),
        block_height=HEIGHT)
    assert [e.type for e in decision.events] == [INGEST_FAILED]


def test_a_stream_created_with_ingestion_encodes_and_snapshots() -> None:
    # The config's objects arrive deep-frozen from the signed command; the event's Avro record
    # carries them as JSON text (this used to fail and stop the worker).
    from watchtower.schemas.wire import decode_event, encode_event

    ingestion = {**INGESTION, "task_definition": {"kind": "http_json", "url": "http://127.0.0.1:1/p",
                                                  "select": {"p": "$.a[0]"}, "headers": {"X-K": "v"}},
                 "result_schema": {"type": "object", "required": ["p"]}}
    s = Stream(ingestion=ingestion)
    decision = decide(StreamState.initial(SID), sign_command(OWNER, "create_stream", SID, 1, {
        "publisher_key": bytes(DELEGATE.verify_key), "ingestion": ingestion}), block_height=HEIGHT)
    decoded = decode_event(encode_event(decision.events[0]))
    assert decoded.body.config.to_dict()["ingestion"]["task_definition"]["select"] == {"p": "$.a[0]"}
    restored = decode_streams(encode_streams({SID: s.state}))[SID]
    assert state_digest(restored) == state_digest(s.state)
