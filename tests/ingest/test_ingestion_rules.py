"""The pure ingestion rules: schedule, selection, the NONE/QUORUM/MEDIAN proofs, result checks and transforms."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from watchtower.protocol.config import IngestionConfig
from watchtower.protocol.errors import InvalidArgumentError, SchemaMismatchError
from watchtower.protocol.ingestion import (
    HttpJsonTask,
    IngestReason,
    ProofType,
    SecretRef,
    SelectionError,
    apply_selection,
    check_config,
    due_ticks,
    latest_tick,
    parse_task_definition,
    select_path,
    task_id,
    tick_height,
)
from watchtower.protocol.ingestion.proof import Outcome, decide_proof, lower_median, majority, select_runners
from watchtower.protocol.ingestion.results import canonical_json, parse_result, validate_result
from watchtower.protocol.ingestion.transform import (
    TransformError,
    apply_transform,
    check_payload_size,
    parse_transform,
)

keys = st.lists(st.binary(min_size=32, max_size=32), min_size=1, max_size=12, unique=True)
tids = st.binary(min_size=32, max_size=32)

# --- schedule ------------------------------------------------------------------------------------


@given(anchor=st.integers(0, 10**6), interval=st.integers(1, 50), last=st.integers(0, 200),
       advance=st.integers(0, 400), cap=st.integers(1, 20))
def test_due_ticks_cover_every_tick_once_emitted_or_skipped(anchor: int, interval: int, last: int, advance: int,
                                                            cap: int) -> None:
    height = tick_height(anchor, interval, last) + advance
    due = due_ticks(last, anchor, interval, height, cap)
    newest = latest_tick(anchor, interval, height)
    covered = list(due.ticks)
    if due.skipped is not None:
        covered = list(range(due.skipped[0], due.skipped[1] + 1)) + covered
    assert covered == list(range(last + 1, newest + 1)), "every due tick is emitted or skipped, in order, once"
    assert len(due.ticks) <= cap
    for t in due.ticks:
        assert tick_height(anchor, interval, t) <= height


@given(anchor=st.integers(0, 10**6), interval=st.integers(1, 50), height=st.integers(0, 2 * 10**6))
def test_writing_the_due_ticks_leaves_nothing_due(anchor: int, interval: int, height: int) -> None:
    first = due_ticks(0, anchor, interval, height, 10**9)
    last = first.ticks[-1] if first.ticks else 0
    assert due_ticks(last, anchor, interval, height).ticks == ()


@given(st.text(min_size=1, max_size=40), st.integers(1, 10**9), st.integers(1, 10**9))
def test_task_ids_are_per_stream_and_tick(stream: str, a: int, b: int) -> None:
    assert task_id(stream, a) == task_id(stream, a)
    assert (task_id(stream, a) == task_id(stream, b)) == (a == b)
    assert task_id(stream, a) != task_id(stream + "x", a)


# --- selection -----------------------------------------------------------------------------------


@given(tid=tids, runners=keys, n=st.integers(1, 15), seed=st.randoms())
def test_selection_is_deterministic_and_order_free(tid: bytes, runners: list[bytes], n: int, seed: Any) -> None:
    picked = select_runners(tid, runners, n)
    shuffled = list(runners)
    seed.shuffle(shuffled)
    assert select_runners(tid, shuffled + shuffled[:2], n) == picked
    assert len(picked) == min(n, len(runners))
    assert len(set(picked)) == len(picked)
    assert set(picked) <= set(runners)


@given(tid=tids, runners=keys, n=st.integers(1, 6), newcomer=st.binary(min_size=32, max_size=32))
def test_a_new_runner_displaces_at_most_one_selected(tid: bytes, runners: list[bytes], n: int,
                                                     newcomer: bytes) -> None:
    assume(newcomer not in runners)
    before = set(select_runners(tid, runners, n))
    after = set(select_runners(tid, [*runners, newcomer], n))
    assert len(before - after) <= 1
    assert after - before <= {newcomer}


# --- proofs --------------------------------------------------------------------------------------


def _ok(runner: str, value: Any) -> Outcome:
    return Outcome(runner, result=canonical_json(value))


@given(n=st.integers(1, 9), honest=st.integers(0, 9), truth=st.integers(0, 10**6), lies=st.lists(st.integers(0, 10**6)),
       seed=st.randoms())
def test_quorum_never_decides_a_minority_value(n: int, honest: int, truth: int, lies: list[int], seed: Any) -> None:
    honest = min(honest, n)
    liars = n - honest
    outcomes = [_ok(f"h{i}", {"p": truth}) for i in range(honest)]
    outcomes += [_ok(f"l{i}", {"p": lies[i % len(lies)] if lies else truth + 1}) for i in range(liars)]
    seed.shuffle(outcomes)
    for prefix in range(len(outcomes) + 1):
        verdict = decide_proof(ProofType.QUORUM, n, outcomes[:prefix], expired=prefix == len(outcomes))
        if verdict.result is not None:
            count = sum(1 for o in outcomes[:prefix] if o.result == verdict.result)
            assert count >= majority(n), "only a value a strict majority returned is decided"
            if honest >= majority(n):
                assert verdict.result == canonical_json({"p": truth})
        if not verdict.pending:
            break
    else:
        pytest.fail("a complete, expired set of answers always gets a verdict")
    if honest >= majority(n):
        assert verdict.result == canonical_json({"p": truth}), "an honest majority always wins"


@given(n=st.integers(1, 9), answered=st.integers(0, 9))
def test_quorum_waits_while_a_majority_is_still_possible(n: int, answered: int) -> None:
    answered = min(answered, n)
    outcomes = [_ok(f"r{i}", i) for i in range(answered)]  # all different
    verdict = decide_proof(ProofType.QUORUM, n, outcomes, expired=False)
    if majority(n) == 1 and answered:
        assert verdict.result is not None
    elif 1 + (n - answered) >= majority(n):
        assert verdict.pending
    else:
        assert verdict.reason is IngestReason.QUORUM_NOT_REACHED if answered >= majority(n) else verdict.reason


@given(honest=st.lists(st.integers(-10**9, 10**9), min_size=1, max_size=7),
       lies=st.lists(st.integers(-10**12, 10**12), max_size=6), seed=st.randoms())
def test_median_stays_within_the_honest_values(honest: list[int], lies: list[int], seed: Any) -> None:
    assume(len(lies) < len(honest))
    values = honest + lies
    seed.shuffle(values)
    outcomes = [_ok(f"r{i}", {"price": v, "symbol": "BTC"}) for i, v in enumerate(values)]
    verdict = decide_proof(ProofType.MEDIAN, len(values), outcomes, expired=False)
    assert verdict.result is not None
    decided = json.loads(verdict.result)
    assert min(honest) <= decided["price"] <= max(honest)
    assert decided["price"] in values
    assert decided["symbol"] == "BTC"


@given(st.lists(st.integers(-1000, 1000), min_size=1, max_size=20))
def test_lower_median_is_an_element_with_half_on_each_side(values: list[int]) -> None:
    m = lower_median(values)
    assert m in values
    assert sum(v <= m for v in values) >= (len(values) + 1) // 2
    assert sum(v >= m for v in values) >= len(values) // 2 + (len(values) % 2)


def test_median_waits_for_every_runner_until_the_deadline() -> None:
    two = [_ok("a", 1), _ok("b", 3)]
    assert decide_proof(ProofType.MEDIAN, 3, two, expired=False).pending
    assert decide_proof(ProofType.MEDIAN, 3, two, expired=True).result == b"1"
    assert decide_proof(ProofType.MEDIAN, 3, [*two, _ok("c", 2)], expired=False).result == b"2"
    assert decide_proof(ProofType.MEDIAN, 3, [_ok("a", 1)], expired=True).reason is IngestReason.TOO_FEW_RESULTS


def test_median_needs_a_majority_on_text_fields() -> None:
    outs = [_ok("a", {"p": 1, "s": "BTC"}), _ok("b", {"p": 2, "s": "ETH"}), _ok("c", {"p": 3, "s": "XRP"})]
    assert decide_proof(ProofType.MEDIAN, 3, outs, expired=False).reason is IngestReason.QUORUM_NOT_REACHED


def test_none_takes_the_first_valid_result_and_failures_name_their_reason() -> None:
    outs = [Outcome("a", error=IngestReason.SOURCE_UNAVAILABLE), _ok("b", 7), _ok("c", 8)]
    assert decide_proof(ProofType.NONE, 3, outs, expired=False).result == b"7"
    down = [Outcome(r, error=IngestReason.SOURCE_UNAVAILABLE) for r in "abc"]
    assert decide_proof(ProofType.NONE, 3, down[:2], expired=False).pending
    assert decide_proof(ProofType.QUORUM, 3, down, expired=False).reason is IngestReason.SOURCE_UNAVAILABLE
    assert decide_proof(ProofType.QUORUM, 3, [], expired=True).reason is IngestReason.TIMEOUT
    big = [Outcome(r, error=IngestReason.OVERSIZED_RESULT) for r in "ab"]
    assert decide_proof(ProofType.QUORUM, 3, big, expired=False).reason is IngestReason.OVERSIZED_RESULT


def test_a_runner_counts_once() -> None:
    outs = [_ok("a", 1), _ok("a", 1), _ok("b", 2)]
    assert decide_proof(ProofType.QUORUM, 3, outs, expired=False).pending


# --- results -------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200)
@given(json_values)
def test_canonical_json_round_trips(value: Any) -> None:
    data = canonical_json(value)
    assert canonical_json(parse_result(data)) == data


def test_unsafe_integers_and_non_canonical_bytes_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="2\\^53"):
        canonical_json({"n": 2**53})
    with pytest.raises(InvalidArgumentError, match="canonical"):
        parse_result(b'{"b":1, "a":2}')
    with pytest.raises(InvalidArgumentError):
        parse_result(b'{"a":NaN}')


def test_result_schema_is_checked_by_jsonschema() -> None:
    schema = {"type": "object", "required": ["price"], "properties": {"price": {"type": "number", "minimum": 0}}}
    validate_result({"price": 3.5}, schema)
    with pytest.raises(SchemaMismatchError, match="price"):
        validate_result({"price": -1}, schema)
    with pytest.raises(SchemaMismatchError):
        validate_result({"prize": 1}, schema)
    with pytest.raises(SchemaMismatchError, match="resolvable"):
        validate_result(1, {"$ref": "https://example.com/schema.json"})


def test_config_checks_schema_proof_task_and_transform() -> None:
    base: dict[str, Any] = {"enabled": True, "num_runners": 3, "proof_type": "QUORUM",
                            "task_definition": {"kind": "http_json", "url": "http://127.0.0.1:9/p"},
                            "result_schema": {"type": "object"}}
    check_config(IngestionConfig(**base))
    bad: list[dict[str, Any]] = [
        {"proof_type": "MAJORITY"},
        {"result_schema": {"type": 12}},
        {"task_definition": {"kind": "shell", "cmd": "ls"}},
        {"task_definition": {"kind": "http_json", "url": "file:///etc/passwd"}},
        {"task_definition": {"kind": "http_json", "url": "http://x/", "headers": {"Host": "y"}}},
        {"task_definition": {"kind": "http_json", "url": "http://x/", "select": "$..price"}},
        {"transform_method": "eval"},
    ]
    for change in bad:
        with pytest.raises(InvalidArgumentError):
            check_config(IngestionConfig(**{**base, **change}))


# --- credentials: by reference only ---------------------------------------------------------------


def _http(**fields: Any) -> dict[str, Any]:
    return {"kind": "http_json", "url": "https://prices.example/btc", **fields}


@pytest.mark.parametrize("name", ["Authorization", "proxy-authorization", "Cookie", "X-Api-Key", "X-Auth-Token",
                                  "X-Client-Secret", "apikey", "X-ACCESS-TOKEN", "Session-Key"])
def test_a_literal_credential_header_is_refused_with_the_way_to_name_a_secret(name: str) -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        parse_task_definition(_http(headers={name: "Bearer s3cr3t-value"}))
    assert refused.value.code == "INVALID_ARGUMENT"
    assert '{"secret": "NAME"}' in refused.value.message
    assert "s3cr3t-value" not in refused.value.message


@pytest.mark.parametrize("url", ["https://user:pass@prices.example/btc", "http://token@prices.example/",
                                 "https://:pw@prices.example:8443/x"])
def test_credentials_in_a_url_are_refused(url: str) -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        parse_task_definition(_http(url=url))
    assert "secret" in refused.value.message
    assert "pass" not in refused.value.message.replace("password", "")


def test_a_header_may_name_a_secret() -> None:
    spec = parse_task_definition(_http(headers={"Authorization": {"secret": "btc-api.token"}, "Accept": "json"}))
    assert isinstance(spec.source, HttpJsonTask)
    assert spec.source.headers == (("Accept", "json"), ("Authorization", SecretRef("btc-api.token")))


@pytest.mark.parametrize("value", [{"secret": "../etc/passwd"}, {"secret": ""}, {"secret": ".hidden"},
                                   {"secret": "a", "fallback": "x"}, {"name": "a"}, {"secret": 5}])
def test_a_malformed_secret_reference_is_refused(value: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_task_definition(_http(headers={"Authorization": value}))


def test_create_stream_refuses_a_credential_and_an_older_config_still_folds() -> None:
    import nacl.signing

    from watchtower.ingest.view import IngestionView
    from watchtower.protocol.config import StreamConfig
    from watchtower.protocol.events import StreamCreated
    from watchtower.protocol.signed_command import sign_command
    from watchtower.protocol.stream.actor import StreamState, decide, evolve
    from watchtower.schemas.wire import decode_event, encode_event

    owner = nacl.signing.SigningKey(b"\x05" * 32)
    leaky = {"enabled": True, "num_runners": 1, "proof_type": "NONE", "result_schema": {},
             "task_definition": _http(headers={"Authorization": "Bearer s3cr3t"})}
    create = sign_command(owner, "create_stream", "leaky", 1, {"publisher_key": bytes(32), "ingestion": leaky})
    with pytest.raises(InvalidArgumentError, match="secret"):
        decide(StreamState.initial("leaky"), create, block_height=100)
    # The same config, created before the rule, is on the log: its event decodes and folds.
    accepted = {**leaky, "task_definition": _http(headers={"Authorization": {"secret": "t"}})}
    create = sign_command(owner, "create_stream", "leaky", 1, {"publisher_key": bytes(32), "ingestion": accepted})
    [event] = decide(StreamState.initial("leaky"), create, block_height=100).events
    old_config = StreamConfig.from_dict({**event.body.config.to_dict(), "ingestion": leaky})
    old = dataclasses.replace(event, body=StreamCreated(config=old_config, command=event.body.command))
    state = evolve(StreamState.initial("leaky"), decode_event(encode_event(old)))
    assert state.config is not None
    assert state.config.ingestion is not None
    view = IngestionView()
    view.fold(encode_event(old))
    assert "leaky" in view.streams


def test_selection_paths() -> None:
    doc = {"data": {"items": [{"price": 1}, {"price": 2}]}, "x": 5}
    assert select_path(doc, "$.data.items[1].price") == 2
    assert apply_selection(doc, {"a": "$.x", "b": "data.items[0].price"}) == {"a": 5, "b": 1}
    assert apply_selection(doc, "$") == doc
    with pytest.raises(SelectionError):
        select_path(doc, "$.data.items[5]")
    spec = parse_task_definition({"kind": "http_json", "url": "https://a/b", "select": {"p": "$.x"}})
    assert spec.timeout_blocks == 3


# --- transforms ----------------------------------------------------------------------------------

ticks = st.lists(st.fixed_dictionaries({"symbol": st.sampled_from(["BTC", "ETH"]), "price": st.integers(1, 10**6),
                                        "venue": st.just("cb"), "ts_ms": st.integers(0, 10**6)}),
                 min_size=1, max_size=30)


@given(ticks)
def test_price_batch_is_one_message_with_count_and_window(batch: list[dict[str, Any]]) -> None:
    (payload,) = apply_transform(parse_transform("price_batch", {}), canonical_json({"ticks": batch}))
    assert payload.kind == "price_batch"
    assert json.loads(payload.payload) == {"ticks": batch}
    assert payload.tags["count"] == float(len(batch))
    stamps = [t["ts_ms"] for t in batch]
    assert payload.tags["window_ms"] == float(max(stamps) - min(stamps))
    symbols = {t["symbol"] for t in batch}
    assert payload.tags["symbol"] == (symbols.pop() if len(symbols) == 1 else "*")
    check_payload_size(payload, paid=False)


@given(json_values)
def test_identity_publishes_the_result_bytes(value: Any) -> None:
    data = canonical_json(value)
    (payload,) = apply_transform(parse_transform(None, {"publish_kind": "news"}), data)
    assert payload.payload == data
    assert payload.kind == "news"
    assert payload.tags == {}


def test_field_map_and_size_limit() -> None:
    t = parse_transform("field_map", {"field_map": {"payload": "$.body", "tags": {"symbol": "$.s", "px": "$.p"}}})
    (p,) = apply_transform(t, canonical_json({"body": {"a": 1}, "s": "BTC", "p": 3}))
    assert p.payload == b'{"a":1}'
    assert p.tags == {"symbol": "BTC", "px": 3.0}
    with pytest.raises(TransformError) as missing:
        apply_transform(t, canonical_json({"body": 1}))
    assert missing.value.reason is IngestReason.TRANSFORM_FAILED
    (big,) = apply_transform(parse_transform(None, {}), canonical_json("x" * 16_400))
    with pytest.raises(TransformError) as too_big:
        check_payload_size(big, paid=False)
    assert too_big.value.reason is IngestReason.PAYLOAD_TOO_LARGE
    (edge,) = apply_transform(parse_transform(None, {}), canonical_json("x" * 16_350))
    check_payload_size(edge, paid=False)
    with pytest.raises(TransformError):
        check_payload_size(edge, paid=True)
