"""The worker reads the deployment's genesis configuration from its environment, never from a command."""

from __future__ import annotations

import pytest

from watchtower.protocol.errors import WatchtowerError
from watchtower.workers.deployment import ENV_PROTOCOL_TREASURY, deployment_from_env


def test_the_protocol_treasury_comes_from_the_environment() -> None:
    treasury = "0x" + "ab" * 32
    assert deployment_from_env({ENV_PROTOCOL_TREASURY: treasury}).protocol_treasury == treasury
    assert deployment_from_env({}).protocol_treasury is None
    assert deployment_from_env({ENV_PROTOCOL_TREASURY: ""}).protocol_treasury is None


def test_a_malformed_treasury_is_refused_naming_the_variable() -> None:
    with pytest.raises(WatchtowerError) as caught:
        deployment_from_env({ENV_PROTOCOL_TREASURY: "treasury"})
    assert caught.value.code == "INVALID_ARGUMENT"
    assert ENV_PROTOCOL_TREASURY in caught.value.message


def test_the_stream_workers_transaction_timeout_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from watchtower.workers.command_processor import ENV_TRANSACTION_TIMEOUT, transaction_timeout_from_env

    monkeypatch.delenv(ENV_TRANSACTION_TIMEOUT, raising=False)
    assert transaction_timeout_from_env() == 10_000
    monkeypatch.setenv(ENV_TRANSACTION_TIMEOUT, "6000")
    assert transaction_timeout_from_env() == 6_000
    for bad in ("6s", "999", "-1"):
        monkeypatch.setenv(ENV_TRANSACTION_TIMEOUT, bad)
        with pytest.raises(ValueError, match=ENV_TRANSACTION_TIMEOUT):
            transaction_timeout_from_env()
