"""The runner registry: which ed25519 identities may run ingestion tasks (one aggregate instance,
keyed `RUNNERS_KEY`).

Admission. Whoever holds many registered runners wins most selections and can outvote honest
runners under QUORUM, so a deployment names a *registrar* at genesis (`Deployment.runner_registrar`)
and only the registrar admits runners: its signed ``register_runner`` names the runner in the body
(``{"runner": address, "label": ...}``). A runner's own ``register_runner`` is then refused
(UNAUTHORIZED, saying whom to ask). A deployment without a registrar keeps open registration, where
a runner registers itself (its address is its public key, so the signature proves it holds the
key): fit for a single operator's machine only. ``retire_runner`` removes a runner: sent by the
runner itself, or by the registrar naming it.

Each is an event on ``events`` (RunnerRegistered / RunnerRetired; ``caller`` is who signed), so
the list that selection is computed from is in the log and anyone can recompute a selection.
``decide_runner`` / ``evolve_runners`` are pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

import cbor2

from watchtower.protocol.addresses import public_key_from_address, require_address
from watchtower.protocol.command_auth import check_nonce
from watchtower.protocol.commands import AdmitRunner, RegisterRunner, RemoveRunner, RetireRunner, read_body
from watchtower.protocol.errors import InvalidArgumentError, MalformedRecordError, UnauthorizedError, WatchtowerError
from watchtower.protocol.event_names import RUNNER_REGISTERED, RUNNER_RETIRED
from watchtower.protocol.events import RunnerRegistered, RunnerRetired
from watchtower.protocol.frozen_json import freeze_json, from_tagged_json, to_tagged_json
from watchtower.protocol.signed_command import Command, Method, command_digest, verify_command
from watchtower.protocol.stream.state import CallerRecord, Event, FrozenMap
from watchtower.protocol.validation import require_text

RUNNERS_KEY: Final = "ingest:runners"
RUNNER_METHODS: Final = frozenset({Method.REGISTER_RUNNER, Method.RETIRE_RUNNER})
RUNNER_EVENTS: Final = frozenset({RUNNER_REGISTERED, RUNNER_RETIRED})
MAX_RUNNERS: Final = 1_000
MAX_LABEL: Final = 64


@dataclasses.dataclass(frozen=True, slots=True)
class RunnerRegistry:
    """Registered runners (address -> label) and each runner's replay protection."""

    runners: FrozenMap[str] = dataclasses.field(default_factory=FrozenMap)
    callers: FrozenMap[CallerRecord] = dataclasses.field(default_factory=FrozenMap)

    def public_keys(self) -> tuple[bytes, ...]:
        """The registered runners' public keys, in address order."""
        return tuple(public_key_from_address(a) for a in sorted(self.runners))


def decide_runner(state: RunnerRegistry, cmd: Command, *, block_height: int,
                  registrar: str | None = None) -> tuple[Event | None, dict[str, Any]]:
    """The event and reply of a signed register_runner / retire_runner (None: an idempotent retry).
    `registrar`: the deployment's runner registrar (module docstring), None for open registration."""
    if cmd.method not in RUNNER_METHODS:
        raise InvalidArgumentError(f"{cmd.method} is not a runner-registry method")
    verify_command(cmd)
    if cmd.stream_id != RUNNERS_KEY:
        raise InvalidArgumentError(f"runner commands are addressed to {RUNNERS_KEY!r}, not {cmd.stream_id!r}")
    digest = command_digest(cmd)
    record = state.callers.get(cmd.caller)
    if record is not None and (record.last_nonce, record.last_digest) == (cmd.nonce, digest):
        return None, {**record.last_reply, "duplicate": True}
    check_nonce(None if record is None else record.last_nonce, cmd.nonce, block_height=block_height)
    by_registrar = registrar is not None and cmd.caller == registrar
    if cmd.method == Method.REGISTER_RUNNER:
        if by_registrar:
            admitted = read_body(cmd, AdmitRunner)
            runner, label = admitted.runner, admitted.label
        else:
            if registrar is not None:
                raise UnauthorizedError(
                    f"this deployment admits runners through its registrar ({registrar}); ask its operator to "
                    f"admit {cmd.caller} (`watchtower runner admit {cmd.caller}`)")
            runner, label = cmd.caller, read_body(cmd, RegisterRunner).label
        if len(label) > MAX_LABEL:
            raise InvalidArgumentError(f"a runner label is at most {MAX_LABEL} characters")
        if runner not in state.runners and len(state.runners) >= MAX_RUNNERS:
            raise InvalidArgumentError(f"the registry holds its maximum of {MAX_RUNNERS} runners; retire one first")
        body: RunnerRegistered | RunnerRetired = RunnerRegistered(runner=runner, label=label)
    else:
        if by_registrar:
            runner = read_body(cmd, RemoveRunner).runner
        else:
            read_body(cmd, RetireRunner)
            runner = cmd.caller
        if runner not in state.runners:
            raise UnauthorizedError(f"{runner} is not a registered runner; there is nothing to retire")
        body = RunnerRetired(runner=runner, label=state.runners[runner])
    reply = {"runner": runner, "registered": isinstance(body, RunnerRegistered), "label": body.label}
    event = Event(stream_id=RUNNERS_KEY, block_height=block_height, caller=cmd.caller, nonce=cmd.nonce,
                  digest=digest, reply=reply, body=body)
    return event, reply


def evolve_runners(state: RunnerRegistry, event: Event) -> RunnerRegistry:
    """The registry after `event` (MALFORMED_RECORD for one that cannot be the registry's).

    Who may register or retire whom is the writer's rule (`decide_runner`, with the deployment's
    registrar): an event does not carry the command's signature, so a reader cannot check it
    again; the ``events`` ACL keeps other writers out (docs/security.md)."""
    try:
        body = event.body
        if not isinstance(body, RunnerRegistered | RunnerRetired) or event.stream_id != RUNNERS_KEY:
            raise InvalidArgumentError(f"{event.type} on {event.stream_id!r} is not a runner-registry event")
        runner = require_address(body.runner, "runner")
        label = require_text(body.label, "label")
        registered = isinstance(body, RunnerRegistered)
        runners = state.runners.set(runner, label) if registered else state.runners.without(runner)
    except WatchtowerError as exc:
        raise MalformedRecordError(f"{event.type}: {exc.message}") from None
    callers = state.callers.set(event.caller, CallerRecord(event.nonce, event.digest, event.reply))
    return RunnerRegistry(runners, callers)


def encode_registries(states: Mapping[str, RunnerRegistry]) -> bytes:
    """A snapshot of the registry instance(s) of one partition: canonical CBOR, like every other
    aggregate's snapshot part (replies in their JSON-safe form)."""
    return bytes(cbor2.dumps({"v": 1, "registries": {key: {
        "runners": [list(item) for item in sorted(s.runners.items())],
        "callers": [[k, r.last_nonce, r.last_digest.hex(), to_tagged_json(r.last_reply)]
                    for k, r in sorted(s.callers.items())],
    } for key, s in states.items()}}, canonical=True))


def decode_registries(data: bytes) -> dict[str, RunnerRegistry]:
    """Inverse of `encode_registries` (MALFORMED_RECORD for anything else)."""
    try:
        doc = cbor2.loads(data)
        if doc.get("v") != 1:
            raise ValueError("unknown runner-registry snapshot version")
        out = {}
        for key, reg in doc["registries"].items():
            runners = FrozenMap((str(a), str(label)) for a, label in reg["runners"])
            callers = FrozenMap((str(k), CallerRecord(int(n), bytes.fromhex(d), freeze_json(from_tagged_json(r))))
                                for k, n, d, r in reg["callers"])
            out[str(key)] = RunnerRegistry(runners, callers)
    except (KeyError, TypeError, ValueError, AttributeError, WatchtowerError, cbor2.CBORDecodeError) as exc:
        raise MalformedRecordError(f"a runner-registry snapshot is malformed ({exc!r})"[:300]) from None
    return out
