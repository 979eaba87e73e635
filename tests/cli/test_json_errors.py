"""Under ``--json`` every refusal of every command is the spec error object on stdout, exit non-zero.

Pure: the console entry point (`main`) runs in-process; the API client is replaced where a command
would ask the network, or points at a port nobody listens on (NOT_READY).
Failed before the fix: the refusal was a line of text on stderr (``error [CURSOR_TOO_OLD]: ...``),
so a script could not reach CURSOR_TOO_OLD's ready register_replay request.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from watchtower.cli import main as cli_main
from watchtower.client.http import ApiClient
from watchtower.protocol.errors import CursorTooOldError
from watchtower.protocol.stream.ring_window import replay_request

SID = "s-json-errors"


def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["watchtower", *args])
    with pytest.raises(SystemExit) as exit_:
        cli_main.main()
    out = capsys.readouterr()
    return int(exit_.value.code or 0), out.out, out.err


@pytest.fixture(autouse=True)
def _home(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WATCHTOWER_HOME", str(tmp_path))
    monkeypatch.delenv("WATCHTOWER_API", raising=False)


def test_cursor_too_old_under_json_is_the_error_object_with_the_ready_replay_request(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    err = CursorTooOldError.for_floor(cursor=0, floor=41, head=90, replay=replay_request(SID, 0, 41, 2))

    def refuse(*_a: Any, **_k: Any) -> Any:
        raise err

    monkeypatch.setattr(ApiClient, "feed", lambda _self, _fid: {"stream_id": SID, "owner": "0x" + "a1" * 32})
    monkeypatch.setattr(ApiClient, "get_since", refuse)
    monkeypatch.setattr(ApiClient, "key_schedule", refuse)
    code, out, _ = run(monkeypatch, capsys, "feed", "7", "get-since", "--cursor", "0", "--json")
    assert code == 1
    body = json.loads(out)
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == "CURSOR_TOO_OLD"
    replay = body["error"]["details"]["replay"]
    assert replay["method"] == "register_replay"
    assert replay["body"] == {"namespace": SID, "from": 1, "to": 41,
                              "config": {"filter": None, "skip": None, "max_payment_cby": 80}, "memo_hex": ""}


@pytest.mark.parametrize("args", [
    ("feed", "7", "get-head", "--json", "--api", "http://127.0.0.1:9"),  # nothing listens: NOT_READY
    ("replay", "status", "12", "--json", "--api", "http://127.0.0.1:9"),
    ("cby", "balance", "--json", "--api", "http://127.0.0.1:9", "--account", "nobody"),
])
def test_a_refusal_of_any_command_under_json_is_the_error_object(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]) -> None:
    code, out, err = run(monkeypatch, capsys, *args)
    assert code != 0
    body = json.loads(out)
    assert isinstance(body["error"]["code"], str)
    assert body["error"]["message"]
    assert isinstance(body["error"]["details"], dict)
    assert "error [" not in err


def test_a_usage_error_under_json_is_invalid_argument_and_without_json_stays_text(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(monkeypatch, capsys, "feed", "7", "get-since", "--json")  # --cursor is required
    assert code == 2
    assert json.loads(out)["error"]["code"] == "INVALID_ARGUMENT"
    code, out, err = run(monkeypatch, capsys, "feed", "7", "get-head", "--api", "http://127.0.0.1:9")
    assert code == 1
    assert out == ""
    assert err.startswith("error [")
