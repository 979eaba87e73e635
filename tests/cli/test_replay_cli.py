"""The replay CLI against a running stack: broker, stream-actor worker, replay worker and HTTP API.

A feed with a ring of 5 takes 12 messages from the CLI; a second account replays what left the
window (`replay request --follow` prints the verified messages), reads the status and the list,
is refused with the ICRC-77 code and what to do, and the owner prices replays with
`feed ID replay-price`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from stack_fixture import start_stack

from watchtower.cli.main import _register, cli
from watchtower.client.account import ENV_ACCOUNT, ENV_KEY_FILE
from watchtower.protocol.errors import WatchtowerError

pytestmark = pytest.mark.integration

STATE: dict[str, Any] = {}


@pytest.fixture(scope="module")
def env(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    logs, home = tmp_path_factory.mktemp("replay-cli-logs"), tmp_path_factory.mktemp("replay-cli-home")
    with start_stack(kafka_bootstrap, logs, replay=True) as stack, pytest.MonkeyPatch.context() as patch:
        patch.setenv("WATCHTOWER_HOME", str(home))
        patch.setenv("WATCHTOWER_API", stack.api_url)
        patch.setenv("WATCHTOWER_BOOTSTRAP", stack.bootstrap)
        patch.setenv("WATCHTOWER_TOPIC_PREFIX", stack.prefix)
        patch.delenv(ENV_ACCOUNT, raising=False)
        patch.delenv(ENV_KEY_FILE, raising=False)
        _register()
        run("account", "new", "--json")
        run("account", "new", "reader", "--json")
        feed = run_json("new", "feed", "--name", "ring5", "--ring-buffer-capacity", "5")
        STATE.update(fid=str(feed["feed_id"]), sid=feed["stream_id"])
        for n in range(1, 13):
            run("feed", STATE["fid"], "publish", "--kind", "tick", "--data", json.dumps({"n": n}))
        yield home


def run(*args: str) -> Result:
    result = CliRunner().invoke(cli, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.output
    return result


def run_json(*args: str) -> Any:
    return json.loads(run(*args, "--json").output)


def refused(code: str, *args: str) -> WatchtowerError:
    result = CliRunner().invoke(cli, list(args))
    assert isinstance(result.exception, WatchtowerError), result.output
    assert result.exception.code == code, result.exception
    return result.exception


def test_request_follow_prints_the_verified_replay_of_what_left_the_window(env: Path) -> None:
    result = run("replay", "request", STATE["fid"], "--from", "2", "--to", "6", "--follow", "--account", "reader")
    lines = result.stdout.splitlines()
    assert lines[0].startswith("replay ")
    assert f"{STATE['sid']} [2, 6)" in lines[0]
    assert [line.split()[0] for line in lines[1:-1]] == ["#2", "#3", "#4", "#5"]
    assert lines[-1] == "4 verified message(s) replayed"
    assert "100.0%" in result.stderr
    assert "completed" in result.stderr
    STATE["rid"] = int(lines[0].split()[1])


def test_request_follow_json_prints_one_message_per_line(env: Path) -> None:
    result = run("replay", "request", STATE["sid"], "--from", "1", "--skip", "3,1", "--follow", "--json",
                 "--account", "reader")
    messages = [json.loads(line) for line in result.stdout.splitlines()]
    assert [m["sequence"] for m in messages] == [1, 4, 7, 10]
    assert {m["stream_id"] for m in messages} == {STATE["sid"]}


def test_status_and_list_show_the_replays(env: Path) -> None:
    status = run_json("replay", "status", str(STATE["rid"]))
    assert status["status"] == {"completed": 4}
    assert status["range"] == [2, 6]
    assert "completed; 4 delivered" in run("replay", "status", str(STATE["rid"]), "--watch").stdout
    mine = run_json("replay", "list", "--mine", "--account", "reader")["replays"]
    assert STATE["rid"] in [int(r["replayId"]) for r in mine]
    assert len(mine) == 2
    assert run_json("replay", "list", "--mine")["replays"] == []  # the owner asked for none
    table = run("replay", "list", "--stream", STATE["sid"], "--status", "completed").stdout
    assert table.splitlines()[0].split() == ["REPLAY", "STREAM", "RANGE", "STATUS", "DONE", "DELIVERED", "PRICE"]


def test_refusals_name_the_icrc77_error_and_what_to_do(env: Path) -> None:
    err = refused("IMPROPER_CONFIG", "replay", "request", STATE["fid"], "--from", "5", "--to", "3")
    assert "ICRC-77 ImproperConfig" in err.message
    assert refused("REPLAY_NOT_FOUND", "replay", "status", "987654321").message.startswith("no replay has id")
    refused("UNAUTHORIZED", "feed", STATE["fid"], "replay-price", "3", "--account", "reader")
    assert "now cost 3 CBY per event" in run("feed", STATE["fid"], "replay-price", "3").stdout
    err = refused("PAYMENT_REQUIRED", "replay", "request", STATE["fid"], "--from", "1", "--to", "5",
                  "--account", "reader")
    assert "Rerun with --max-payment 12" in err.message
    assert "ICRC-77 PaymentRequired" in err.message


def test_cancel_of_a_replay_the_worker_finished_is_cannot_cancel(env: Path) -> None:
    # The replay worker told the stream in the transaction that completed the replay (a forward the
    # stream worker decides right after; the tests before this one leave it ample time).
    err = refused("CANNOT_CANCEL", "replay", "cancel", str(STATE["rid"]), "--account", "reader")
    assert "it has finished" in err.message
    assert f"watchtower replay status {STATE['rid']}" in err.message  # what to do instead
    assert run_json("replay", "status", str(STATE["rid"]))["status"] == {"completed": 4}
