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
