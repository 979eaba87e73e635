"""The JSON integer rule (docs/http-api.md "Integers in JSON"), pinned on real bodies and documents.

Walks every JSON body the read side, the gateway and the key manager write (built by the real view
functions, written through the same `json_safe_ints` / `SafeJsonWeb` the servers use) and every response
schema of the three OpenAPI documents: no JSON number past 2**53 - 1 ever leaves a server, replay ids
are always decimal strings, and the documents say so. Pure.

Before the rule, the replay status answered ``"replayId": 4611686018427387909`` (a JSON number that
JavaScript and jq read as ...900), and the documents typed every integer up to 2**63 - 1.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import jsonschema_rs
import pytest

from watchtower.gateway.server import gateway_openapi
from watchtower.http.errors import error_body
from watchtower.http.openapi import OPENAPI
from watchtower.http.server import SafeJsonWeb
from watchtower.keymgr.openapi import OPENAPI as KEYMGR_OPENAPI
from watchtower.projections.keymgr_tables import account_view
from watchtower.protocol.errors import CursorTooOldError, InsufficientCbyBalanceError
from watchtower.protocol.json_ints import MAX_SAFE_INT, as_int
from watchtower.protocol.replay.status import ReplayView, replay_status_json, view_from_dict, view_to_dict

BIG_ID = 2**62 + 5  # a replay id as a digest gives it: far past 2**53
HUGE = 2**63 - 1
ALICE = "0x" + "a1" * 32


def _view(**changes: Any) -> ReplayView:
    base = ReplayView(replay_id=BIG_ID, stream_id="s1", namespace="s1", requester=ALICE, from_sequence=1,
                      to_sequence=None, first=1, end_exclusive=11, end_id=10, filter=None, skip=None, memo_hex="",
                      price_cby=HUGE, block_height=7, status="running", engine="service", partition=0,
                      next_offset=3, next_sequence=4, delivered=3, filtered=0, skipped=0, cancel_requested=False,
                      error=None, updated_at_ms=1)
    return dataclasses.replace(base, **changes)


class _Web:
    """What a Faust web driver's json() writes: the text of the body."""

    def json(self, value: Any, **_: Any) -> str:
        return json.dumps(value)


def _numbers(text: str) -> list[int]:
    found: list[int] = []
    json.loads(text, parse_int=lambda s: found.append(int(s)) or int(s))
    return found


def _written(body: Any) -> str:
    return SafeJsonWeb(_Web()).json(body)  # type: ignore[no-any-return]


BODIES = {
    "replay status": replay_status_json(_view()),
    "replay page": {"replays": [replay_status_json(_view())], "next": str(BIG_ID)},
    "account": account_view({"account": ALICE, "balance_cby": HUGE, "keys": [], "authorizations": []}, ALICE),
    "register_replay reply": {"replay_id": BIG_ID, "stream_id": "s1", "first": 1, "end_exclusive": 11,
                              "end_id": 10, "price_cby": 2**60},
    "transfer reply": {"from": ALICE, "to": ALICE, "amount_cby": 2**55, "balance_cby": 2**61, "ref": "ab"},
    "entitlement": {"stream_id": "s1", "beneficiary_account": ALICE, "active_until_key_epoch": HUGE,
                    "current_key_epoch": 3, "paid_stream_config": {}},
    "error": error_body(InsufficientCbyBalanceError("no", details={"required_cby": str(HUGE), "n": 2**60})),
    "cursor too old": error_body(CursorTooOldError("old", details={"replay_id": BIG_ID, "floor": 9})),
}


@pytest.mark.parametrize("name", sorted(BODIES))
def test_no_json_number_past_2_53_leaves_a_server_and_replay_ids_are_strings(name: str) -> None:
    text = _written(BODIES[name])
    assert all(abs(n) <= MAX_SAFE_INT for n in _numbers(text)), text
    body = json.loads(text)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("replay_id", "replayId"):
                    assert isinstance(value, str), (key, value)
                    assert value.isdigit(), (key, value)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)
    walk(body)


def test_small_integers_stay_numbers_and_readers_take_both_forms() -> None:
    body = json.loads(_written({"head_sequence": 41, "balance_cby": 10_000, "replay_id": 3, "ok": True}))
    assert body == {"head_sequence": 41, "balance_cby": 10_000, "replay_id": "3", "ok": True}
    assert [as_int(v) for v in (41, "41", str(HUGE), None, "x1")] == [41, 41, HUGE, None, "x1"]


def test_a_signed_command_is_written_exactly_as_signed() -> None:
    command = {"method": "m", "stream_id": "s", "caller_public_key_hex": "00", "nonce": HUGE,
               "body": {"amount_cby": HUGE}, "signature_hex": "00"}
    entry = {"signing_key_id": 2, "command": command}
    assert json.loads(_written(entry))["command"] == command


def test_a_peer_share_of_replays_reads_back_after_the_rule() -> None:
    view = _view()
    assert view_from_dict(json.loads(_written(view_to_dict(view)))) == view


def test_the_rule_answers_validate_against_the_documents() -> None:
    status_schema = OPENAPI["paths"]["/v1/replays/{replay_id}"]["get"]["responses"]["200"]["content"][
        "application/json"]["schema"]
    jsonschema_rs.validate(status_schema, json.loads(_written(BODIES["replay status"])))
    account_schema = OPENAPI["paths"]["/v1/accounts/{address}"]["get"]["responses"]["200"]["content"][
        "application/json"]["schema"]
    jsonschema_rs.validate(account_schema, json.loads(_written(BODIES["account"])))
    with pytest.raises(jsonschema_rs.ValidationError):  # a number past 2**53 - 1 is outside the document
        jsonschema_rs.validate(account_schema, {**json.loads(_written(BODIES["account"])), "balance_cby": 2**60})


def _response_schemas(doc: dict[str, Any]) -> list[tuple[str, Any]]:
    out = []
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            for status, resp in op.get("responses", {}).items():
                for media in resp.get("content", {}).values():
                    out.append((f"{method.upper()} {path} {status}", media["schema"]))
    return out


@pytest.mark.parametrize("doc_name", ["api", "gateway", "keymgr"])
def test_every_integer_a_document_promises_in_an_answer_fits_a_double(doc_name: str) -> None:
    doc = {"api": OPENAPI, "gateway": gateway_openapi(), "keymgr": KEYMGR_OPENAPI}[doc_name]

    def walk(where: str, node: Any) -> None:
        if isinstance(node, dict):
            if "$ref" in node:
                name = node["$ref"].rsplit("/", 1)[1]
                if name == "Command":  # signed commands: exact integers as signed (json_ints)
                    return
                walk(where, doc["components"]["schemas"][name])
                return
            types = node.get("type")
            types = types if isinstance(types, list) else [types]
            if "integer" in types:
                bound = node["const"] if "const" in node else node.get("maximum", HUGE)
                assert bound <= MAX_SAFE_INT, (where, node)
                if "string" in types:
                    assert "pattern" in node, (where, node)
            for value in node.values():
                walk(where, value)
        elif isinstance(node, list):
            for item in node:
                walk(where, item)

    for where, schema in _response_schemas(doc):
        walk(where, schema)


def test_a_signed_message_is_written_exactly_as_signed_and_reads_back() -> None:
    """A publisher may sign a timestamp or key epoch past 2**53 (publish accepts up to 2**63 - 1):
    the message is a signed document, so it leaves the server as signed and still decodes and verifies."""
    import nacl.signing

    from watchtower.protocol.signing import sign_message, verify_with_schedule
    from watchtower.protocol.stream.key_schedule import KeySchedule
    from watchtower.protocol.stream.message import StreamMessage

    key = nacl.signing.SigningKey(b"\x07" * 32)
    msg = sign_message(stream_id="s1", sequence=1, timestamp_unix_ms=HUGE, kind="t", payload=b"{}", signing_key=key)
    page = {"messages": [msg.to_json_dict()], "head_sequence": 1}
    back = StreamMessage.from_json_dict(json.loads(_written(page))["messages"][0])
    assert back == msg
    assert verify_with_schedule(back, KeySchedule.initial(bytes(key.verify_key)))
