"""``watchtower replay register`` without a broker: ranges or a --batch file become one batch of
`ReplayRequest`s, and each result is printed in order (text or --json); a refused item exits 1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from watchtower.cli import replay_cmd
from watchtower.cli.main import _register, cli
from watchtower.client.replay import ReplayRequest, ReplayTicket
from watchtower.protocol.errors import GenericBatchError, ImproperConfigError, WatchtowerError

_register()


class FakeReplays:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.requests: list[ReplayRequest] = []

    def register_many(self, requests: list[ReplayRequest]) -> list[ReplayTicket | WatchtowerError]:
        self.requests = list(requests)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer  # type: ignore[no-any-return]


def ticket(replay_id: int, first: int, end: int) -> ReplayTicket:
    return ReplayTicket(replay_id, "s-1", "0xab", first, end, None, 0)


def invoke(fake: FakeReplays, monkeypatch: pytest.MonkeyPatch, *args: str) -> Result:
    monkeypatch.setattr(replay_cmd, "_client", lambda *_a, **_kw: fake)
    return CliRunner().invoke(cli, ["replay", "register", *args])


def test_ranges_are_registered_in_one_batch_and_printed_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeReplays([ticket(1740308173478772655, 2, 6), ImproperConfigError("to 3 is before from 5")])
    result = invoke(fake, monkeypatch, "12", "2:6", "5:3", "--skip", "2", "--max-payment", "4")
    assert [(r.namespace, r.from_sequence, r.to_sequence, r.skip, r.max_payment_cby) for r in fake.requests] == [
        ("12", 2, 6, [2], 4), ("12", 5, 3, [2], 4)]
    lines = result.output.splitlines()
    assert lines[0] == "1. replay 1740308173478772655 registered: s-1 [2, 6), 4 sequence(s), price 0 CBY"
    assert lines[1].startswith("2. error [IMPROPER_CONFIG]: to 3 is before from 5 (ICRC-77 ImproperConfig)")
    assert result.exit_code == 1  # one registration was refused


def test_json_prints_one_result_per_registration(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeReplays([ticket(7, 9, 10), ticket(8, 1, 3)])
    result = invoke(fake, monkeypatch, "s-1", "9:", "1:3", "--json")
    assert result.exit_code == 0, result.output
    assert [(r.from_sequence, r.to_sequence) for r in fake.requests] == [(9, None), (1, 3)]
    out = json.loads(result.output)["results"]
    assert [(r["ok"], r["replay_id"]) for r in out] == [(True, "7"), (True, "8")]


def test_a_batch_file_carries_each_registration(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "batch.json"
    path.write_text(json.dumps([{"from": 1, "to": 4}, {"namespace": "s-2", "from": 3, "skip": "3,1",
                                                        "filter": {"field": "kind", "op": "eq", "value": "t"},
                                                        "max_payment_cby": 5, "memo": "hi"}]))
    fake = FakeReplays([ticket(1, 1, 4), ImproperConfigError("bad")])
    result = invoke(fake, monkeypatch, "s-1", "--batch", str(path), "--json")
    assert result.exit_code == 1
    flt = {"field": "kind", "op": "eq", "value": "t"}
    assert fake.requests == [ReplayRequest("s-1", 1, 4), ReplayRequest("s-2", 3, None, flt, [3, 1], 5, b"hi")]
    out = json.loads(result.output)["results"]
    assert out[1] == {"ok": False, "error": {"code": "IMPROPER_CONFIG", "message": "bad"}}


@pytest.mark.parametrize("args", [("12",), ("12", "5"), ("12", "a:b"), ("--batch", "missing.json")])
def test_usage_errors_send_nothing(monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]) -> None:
    fake = FakeReplays([])
    result = invoke(fake, monkeypatch, *args)
    assert result.exit_code == 2, result.output
    assert fake.requests == []


def test_a_batch_refused_as_a_whole_is_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    result = invoke(FakeReplays(GenericBatchError("the batch has 101 commands")), monkeypatch, "s-1", "1:2")
    assert isinstance(result.exception, GenericBatchError)
    assert "ICRC-77 GenericBatchError" in result.exception.message
