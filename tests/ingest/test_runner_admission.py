"""Runner admission: on a deployment with a runner registrar only the registrar admits runners, so
nobody wins selections (and outvotes honest runners under QUORUM) by registering many keys."""

from __future__ import annotations

import time

import nacl.signing
import pytest

from watchtower.ingest.runner import admission_command, registration_command
from watchtower.ingest.view import IngestionView
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.deployment import Deployment
from watchtower.protocol.errors import InvalidArgumentError, UnauthorizedError
from watchtower.protocol.events import RunnerRegistered
from watchtower.protocol.ingestion.runners import RUNNERS_KEY
from watchtower.protocol.ledger.billing import block_height_at
from watchtower.protocol.signed_command import sign_command
from watchtower.schemas.wire import encode_event
from watchtower.workers.aggregate import Context
from watchtower.workers.aggregates.runners import RunnerRegistryAggregate
from watchtower.workers.deployment import ENV_RUNNER_REGISTRAR, deployment_from_env

REGISTRAR = nacl.signing.SigningKey(b"\x71" * 32)
RUNNER = nacl.signing.SigningKey(b"\x72" * 32)
HEIGHT = block_height_at(int(time.time() * 1000))  # the commands' nonces are microseconds of the clock


def address(key: nacl.signing.SigningKey) -> str:
    return address_from_public_key(bytes(key.verify_key))


def ctx(registrar: str | None) -> Context:
    return Context(HEIGHT, Deployment(runner_registrar=registrar))


def test_under_a_registrar_a_runner_cannot_register_itself() -> None:
    registry = RunnerRegistryAggregate()
    with pytest.raises(UnauthorizedError) as refused:
        registry.decide(registry.initial(RUNNERS_KEY), registration_command(RUNNER, "r1"), ctx(address(REGISTRAR)))
    assert address(REGISTRAR) in refused.value.message
    assert f"watchtower runner admit {address(RUNNER)}" in refused.value.message


def test_the_registrar_admits_a_runner_and_ingestion_selects_from_it() -> None:
    registry = RunnerRegistryAggregate()
    outcome = registry.decide(registry.initial(RUNNERS_KEY), admission_command(REGISTRAR, address(RUNNER), "r1"),
                              ctx(address(REGISTRAR)))
    [event] = outcome.events
    assert event.caller == address(REGISTRAR)
    assert event.body == RunnerRegistered(runner=address(RUNNER), label="r1")
    state = registry.evolve(registry.initial(RUNNERS_KEY), event)
    assert dict(state.runners) == {address(RUNNER): "r1"}
    view = IngestionView()  # what the scheduler and the aggregator select from
    view.fold(encode_event(event))
    assert view.runner_keys() == (bytes(RUNNER.verify_key),)
    # The runner may retire itself; so may the registrar, naming it.
    retire = sign_command(RUNNER, "retire_runner", RUNNERS_KEY, 5, {})
    [gone] = registry.decide(state, retire, ctx(address(REGISTRAR))).events
    assert gone.body.runner == address(RUNNER)


def test_another_key_naming_a_runner_is_refused_with_or_without_a_registrar() -> None:
    registry = RunnerRegistryAggregate()
    stranger = nacl.signing.SigningKey(b"\x73" * 32)
    admission = admission_command(stranger, address(RUNNER), "r1")
    with pytest.raises(UnauthorizedError):
        registry.decide(registry.initial(RUNNERS_KEY), admission, ctx(address(REGISTRAR)))
    with pytest.raises(InvalidArgumentError):  # open registration: a runner registers only itself
        registry.decide(registry.initial(RUNNERS_KEY), admission, ctx(None))


def test_open_registration_is_unchanged_without_a_registrar() -> None:
    registry = RunnerRegistryAggregate()
    [event] = registry.decide(registry.initial(RUNNERS_KEY), registration_command(RUNNER, "r1"), ctx(None)).events
    assert event.body == RunnerRegistered(runner=address(RUNNER), label="r1")


def test_the_workers_read_the_registrar_from_their_environment() -> None:
    assert deployment_from_env({ENV_RUNNER_REGISTRAR: address(REGISTRAR)}).runner_registrar == address(REGISTRAR)
    assert deployment_from_env({}).runner_registrar is None
    with pytest.raises(InvalidArgumentError, match=ENV_RUNNER_REGISTRAR):
        deployment_from_env({ENV_RUNNER_REGISTRAR: "registrar"})
