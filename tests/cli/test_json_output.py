"""Every ``--json`` output goes through one writer, which applies the API's integer rule (json_ints):
an integer of magnitude 2**53 or more is printed as its decimal string, never as a JSON number that a
double-based reader (jq, JavaScript) would round."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import pkgutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import click
import pytest
from click.testing import CliRunner

import watchtower.cli
from watchtower.cli import json_output
from watchtower.cli.main import _echo_json_error, _register, cli
from watchtower.client.account import ENV_ACCOUNT, ENV_KEY_FILE, Account
from watchtower.protocol.ledger.billing import KeyAccessReceipt

BIG = 582225359826457723  # the total a purchase of epochs up to 47707 printed as a bare number


def _json_commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, click.Command]]:
    for name, command in group.commands.items():
        here = (*path, name)
        if any("--json" in getattr(p, "opts", ()) for p in command.params):
            yield " ".join(here), command
        if isinstance(command, click.Group):
            yield from _json_commands(command, here)


def _is_json_dumps(node: ast.AST) -> bool:
    func = node.func if isinstance(node, ast.Call) else None
    return (isinstance(func, ast.Attribute) and func.attr in ("dump", "dumps")
            and isinstance(func.value, ast.Name) and func.value.id == "json")


def _raw_json_writes(module: ModuleType, *, hosts_json_command: bool) -> list[str]:
    """The lines of `module` that print JSON they serialised themselves instead of handing it to the
    writer: a ``print``, a ``click.echo`` of a ``json.dumps``, and in a module that hosts a
    ``--json`` command any ``json.dump(s)`` at all."""
    found = []
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        echoes_dumps = (isinstance(func, ast.Attribute) and func.attr == "echo"
                        and any(_is_json_dumps(inner) for arg in node.args for inner in ast.walk(arg)))
        prints = isinstance(func, ast.Name) and func.id == "print"
        if prints or echoes_dumps or (hosts_json_command and _is_json_dumps(node)):
            found.append(f"{module.__name__}:{node.lineno}")
    return found


def _cli_modules() -> list[ModuleType]:
    names = [f"watchtower.cli.{m.name}" for m in pkgutil.iter_modules(watchtower.cli.__path__) if m.name != "__main__"]
    return [importlib.import_module(name) for name in sorted(names) if name != json_output.__name__]


def test_every_json_command_prints_through_the_one_writer() -> None:
    _register()
    commands = dict(_json_commands(cli))
    assert len(commands) > 60, "the walk should reach every --json command (account, feed, cby, replay, …)"
    hosts = {c.callback.__module__ for c in commands.values() if c.callback is not None}
    offenders = sorted({where for module in _cli_modules()
                        for where in _raw_json_writes(module, hosts_json_command=module.__name__ in hosts)})
    assert offenders == [], f"these print JSON themselves instead of through `json_output.echo_json`: {offenders}"
    for module in _cli_modules():
        # a module's `echo_json` (its own or imported) must be the writer, not a look-alike
        assert getattr(module, "echo_json", json_output.echo_json) is json_output.echo_json, module.__name__
    for name in hosts:
        assert "echo_json" in vars(sys.modules[name]), f"{name} hosts a --json command but never uses the writer"


@pytest.mark.parametrize("line", [False, True])
def test_the_writer_prints_integers_past_2_53_as_strings(line: bool, capsys: pytest.CaptureFixture[str]) -> None:
    json_output.echo_json({"total_amount_cby": BIG, "limit": 2**53, "low": -(2**53), "safe": 2**53 - 1,
                           "nested": [{"n": 2**63 - 1}], "replay_id": 7, "ok": True}, line=line)
    out = capsys.readouterr().out
    assert (out.count("\n") == 1) is line
    assert json.loads(out) == {"total_amount_cby": str(BIG), "limit": str(2**53), "low": str(-(2**53)),
                               "safe": 2**53 - 1, "nested": [{"n": str(2**63 - 1)}], "replay_id": "7", "ok": True}


def test_a_json_refusal_goes_through_the_writer(capsys: pytest.CaptureFixture[str]) -> None:
    _echo_json_error("INVALID_TARGET_KEY_EPOCH", "too far", {"target_key_epoch": 2**60})
    assert json.loads(capsys.readouterr().out)["error"]["details"] == {"target_key_epoch": str(2**60)}


class _Api:
    def __init__(self, url: str | None) -> None:
        del url

    def feed(self, feed_id: int) -> dict[str, Any]:
        return {"feed_id": feed_id, "stream_id": "s-paid"}


class _Ledger:
    def __init__(self, api: _Api, signer: Account) -> None:
        del api
        self.payer = signer.address

    def acquire_epoch_access(self, stream_id: str, until: int, **_: Any) -> KeyAccessReceipt:
        return KeyAccessReceipt(stream_id=stream_id, beneficiary_account=self.payer, payer_account=self.payer,
                                from_key_epoch=1, to_key_epoch=until, epochs_charged=until,
                                publisher_amount_cby=BIG - 1000, protocol_fee_cby=1000, total_amount_cby=BIG)


def test_acquire_access_json_prints_a_large_total_as_a_string(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from watchtower.cli import paid_feed_cmd

    monkeypatch.setenv("WATCHTOWER_HOME", str(tmp_path))
    monkeypatch.delenv(ENV_ACCOUNT, raising=False)
    monkeypatch.delenv(ENV_KEY_FILE, raising=False)
    Account.create("default")
    monkeypatch.setattr(paid_feed_cmd, "ApiClient", _Api)
    monkeypatch.setattr(paid_feed_cmd, "Ledger", _Ledger)
    _register()
    result = CliRunner().invoke(cli, ["feed", "11", "acquire-access", "--to-epoch", "47707", "--json"])
    assert result.exit_code == 0, result.output
    receipt = json.loads(result.output)
    assert receipt["total_amount_cby"] == str(BIG)
    assert receipt["to_key_epoch"] == 47707
