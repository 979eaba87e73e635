"""A runner's registration: a refusal is logged with its spec code, not only its text."""

from __future__ import annotations

import logging

import pytest

from tests.ingest.test_runner_fetch import a_runner
from watchtower.ingest.runner import register
from watchtower.protocol.errors import UnauthorizedError
from watchtower.protocol.signed_command import Command


def test_a_refused_registration_logs_its_code(caplog: pytest.LogCaptureFixture) -> None:
    def refuse(_command: Command) -> None:
        raise UnauthorizedError("only the runner registrar admits runners: ask for `watchtower runner admit`")

    caplog.set_level(logging.INFO, logger="watchtower.ingest.runner")
    assert register(refuse, a_runner(), "r1") is False
    [record] = [r for r in caplog.records if "registration refused" in r.getMessage()]
    assert "UNAUTHORIZED" in record.getMessage()
    assert "runner registrar" in record.getMessage()


def test_an_accepted_registration_sends_the_runners_own_command() -> None:
    sent: list[Command] = []
    runner = a_runner()
    assert register(sent.append, runner, "r1") is True
    assert [c.method for c in sent] == ["register_runner"]
    assert sent[0].caller == runner.address
