"""One fuzz target per decoder: bytes in, and the decoder's contract checked.

The contract every target checks: the decoder returns a value, or raises a `WatchtowerError`
subclass carrying one of the spec's codes (`protocol.errors.known_error_codes`). Any other
exception escapes the target, and the fuzzer records it as a crash. Where a decoded value has an
encoder, the target also checks the round trip (encode, decode again, same value): a decoder that
accepts what it cannot give back is a bug too, and it surfaces as an `AssertionError`.

Inputs that are not the decoder's input at all (bytes that are not JSON, for a decoder that takes
a parsed JSON document) are skipped, since the JSON parser is not ours to fuzz.

The targets import Watchtower lazily (`build()`), so the coverage-guided harness can instrument
the ``watchtower`` package before its first import.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import urllib.parse
from collections.abc import Callable
from typing import Any

Target = Callable[[bytes], None]

#: Every decoder, in the order `--all` runs them (http-api is a separate, live run).
DECODERS: tuple[str, ...] = ("command", "event", "avro", "cbor", "snapshot", "filter", "http-params", "reply",
                             "message")
#: The decoders whose input is a JSON document (they also get the structure-aware mutator).
JSON_DECODERS: frozenset[str] = frozenset({"command", "filter", "reply", "message"})

_HEADERS: tuple[dict[str, Any], ...] = (
    {"kind": "trade", "sequence": 7, "timestamp_unix_ms": 1_700_000_000_000, "tags": {"venue": "a", "size": 1.5}},
    {"kind": "", "sequence": 0, "timestamp_unix_ms": 0, "tags": {"x": True, "a": "n", "flag": False}},
    {"kind": "k", "sequence": 2**63 - 1, "timestamp_unix_ms": 1, "tags": {}},
)


class ContractBrokenError(AssertionError):
    """A decoder raised a WatchtowerError whose code is not one of the spec's."""


def _json(data: bytes) -> tuple[bool, Any]:
    # Only the document is fuzzed here: bytes that are not JSON never reach these decoders.
    try:
        return True, json.loads(data)
    except (ValueError, RecursionError):
        return False, None


def build() -> dict[str, Target]:
    """The targets by decoder name (imports Watchtower)."""
    from fuzz import samples
    from watchtower.http import params as http_params
    from watchtower.protocol import cbor
    from watchtower.protocol.errors import WatchtowerError, known_error_codes
    from watchtower.protocol.registry import RegistryState, evolve_registry
    from watchtower.protocol.signed_command import Command, command_digest
    from watchtower.protocol.stream import filter_ast, filters, snapshot_cbor, snapshots
    from watchtower.protocol.stream.actor import decide
    from watchtower.protocol.stream.message import StreamMessage
    from watchtower.protocol.stream.state import FEED_REGISTERED, StreamState, evolve
    from watchtower.schemas import codec, records, wire

    history = samples.history()
    codes = known_error_codes()
    names = codec.schema_names()

    def contract(fn: Target) -> Target:
        def checked(data: bytes) -> None:
            try:
                fn(data)
            except WatchtowerError as exc:
                if exc.code not in codes:
                    raise ContractBrokenError(f"{type(exc).__name__} carries {exc.code!r}, not a spec code") from exc
        checked.__name__ = fn.__name__
        return checked

    def settle(step: Callable[[], object]) -> None:
        # A later step (decide, evolve) refusing with a spec code is the contract kept.
        try:
            step()
        except WatchtowerError as exc:
            if exc.code not in codes:
                raise ContractBrokenError(f"{type(exc).__name__} carries {exc.code!r}") from exc

    def command(data: bytes) -> None:
        decoded = wire.decode_command(data)
        if isinstance(decoded, wire.RegistryForward):
            assert wire.decode_command(wire.encode_registry_forward(decoded.create)) == decoded
            return
        assert isinstance(decoded, Command)
        command_digest(decoded)
        assert wire.decode_command(wire.encode_command(decoded)) == decoded
        for state in (StreamState.initial(decoded.stream_id),
                      dataclasses.replace(history.final, stream_id=decoded.stream_id)):
            settle(functools.partial(decide, state, decoded, block_height=samples.BLOCK))

    def event(data: bytes) -> None:
        decoded = wire.decode_event(data)
        assert wire.decode_event(wire.encode_event(decoded)) == decoded
        if decoded.type == FEED_REGISTERED:
            settle(lambda: evolve_registry(RegistryState(), decoded))
            settle(lambda: evolve_registry(history.registry, decoded))
        for state in (StreamState.initial(decoded.stream_id),
                      dataclasses.replace(history.created, stream_id=decoded.stream_id),
                      dataclasses.replace(history.final, stream_id=decoded.stream_id)):
            settle(functools.partial(evolve, state, decoded))

    def avro(data: bytes) -> None:
        # First byte 0: a framed record; 1..n: the unframed body of schema n-1 (latest version).
        if not data:
            return
        if data[0] == 0:
            decoded = codec.decode(data[1:])
            record = decoded.record
            name = decoded.name
        else:
            name = names[(data[0] - 1) % len(names)]
            record = codec.decode_body(name, data[1:], codec.latest_version(name))
        if name == "StreamMessage":
            msg = records.message_from_record(record)
            assert records.decode_message(records.encode_message(msg)) == msg

    def cbor_reencode(data: bytes) -> None:
        # protocol/cbor.py encodes; its input domain is every value a CBOR decoder can produce.
        try:
            value = snapshot_cbor.loads(data, "input")
        except snapshot_cbor.SnapshotError:
            return
        out = cbor.encode(value)
        again = snapshot_cbor.loads(out, "re-encoded")
        assert cbor.encode(again) == out, "deterministic CBOR must be a fixed point"

    def snapshot(data: bytes) -> None:
        if data[:1] == b"\x01":
            states = snapshots.decode_streams(data[1:])
            assert snapshots.decode_streams(snapshots.encode_streams(states)) == states
        elif data[:1] == b"\x02":
            regs = snapshots.decode_registry(data[1:])
            assert snapshots.decode_registry(snapshots.encode_registry(regs)) == regs
        else:
            _p, _o, parts = snapshots.decode_snapshot(data)
            for name, part in parts.items():
                decode = snapshots.decode_registry if name == "registry" else snapshots.decode_streams
                settle(functools.partial(decode, part))

    def filter_dsl(data: bytes) -> None:
        ok, spec = _json(data)
        if not ok:
            return
        node = filters.parse_filter(spec)
        if node is None:
            return
        assert filters.parse_filter(filter_ast.to_json(node)) == node
        test = filters.compile_filter(node)
        for headers in _HEADERS:
            assert filters.evaluate(node, headers) is test(headers)

    def http(data: bytes) -> None:
        text = data.decode("utf-8", "replace")
        query = dict(urllib.parse.parse_qsl(text, keep_blank_values=True))
        for step in (
            lambda: http_params.limit_param(query),
            lambda: http_params.wait_ms_param(query),
            lambda: http_params.int_param(query, "cursor", 0),
            lambda: http_params.int_param(query, "min_head", 0),
            lambda: http_params.int_param(query, "from", 1, minimum=1),
            lambda: http_params.int_text(query.get("sequence", "1"), "sequence", minimum=1),
            lambda: http_params.bool_param(query, "proof"),
            lambda: filters.parse_filter(http_params.filter_param(query)),
        ):
            settle(step)
        ok, body = _json(query.get("body", "").encode())
        if ok and isinstance(body, dict):
            timeout = http_params.timeout_param(body)
            assert math.isfinite(timeout)
            assert 0 < timeout <= http_params.MAX_TIMEOUT_S

    def reply(data: bytes) -> None:
        out = wire.decode_reply(data)
        if not out["ok"]:
            WatchtowerError.from_dict(out["error"])

    def message(data: bytes) -> None:
        ok, doc = _json(data)
        if not ok:
            return
        msg = StreamMessage.from_json_dict(doc)
        assert StreamMessage.from_json_dict(msg.to_json_dict()) == msg
        msg.headers()
        settle(msg.validate)

    plain: dict[str, Target] = {"command": command, "event": event, "avro": avro, "cbor": cbor_reencode,
                                "snapshot": snapshot, "filter": filter_dsl, "http-params": http, "reply": reply,
                                "message": message}
    return {name: contract(fn) for name, fn in plain.items()}


def seeds() -> dict[str, list[bytes]]:
    """Valid samples per decoder (from the codecs themselves) plus edge cases."""
    from fuzz import samples
    from watchtower.protocol import cbor

    h = samples.history()
    edges = [b"", b"\x00", b"null", b"{}", b"[]", b'"x"', b"1e400", b"-0", b"[" * 64 + b"]" * 64, b"\xff\xfe"]
    out = {
        "command": [*samples.command_records(), b'{"v":2,"command":{}}', b'{"v":true}', b'{"v":1}'],
        "event": [*samples.event_records(h), b"W\x00\n\x00\x01", b"W\xff\xff\x00\x01"],
        "avro": [*samples.avro_records(h), b"\x00W\x00\x01\x00\x01", b"\x01\x80\x80\x80\x80\x80\x80\x80\x80\x01"],
        "cbor": [cbor.encode(v) for v in samples.cbor_values()] + [b"\xf7", b"\xc1\x1a\x00\x00\x00\x01",
                                                                   b"\x9f\x01\xff", b"\xf9\x7e\x00"],
        "snapshot": samples.snapshot_records(h),
        "filter": [*samples.filter_documents(), b'{"not":{"not":{"not":{"not":{}}}}}', b'{"all":[]}',
                   b'{"field":"tags.","op":"eq","value":1}'],
        "http-params": [*samples.http_queries(), b"limit=0", b"cursor=-1", b"cursor=%EF%BC%91", b"wait_ms=30001",
                        b"filter=%7B", b'body={"timeout_s":1e400}'],
        "reply": [*samples.reply_records(h), b'{"v":1,"ok":false,"error":{"code":"","message":"m"}}'],
        "message": samples.message_documents(h),
    }
    return {name: values + edges for name, values in out.items()}
