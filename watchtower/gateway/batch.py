"""``POST /v1/commands/batch``: ICRC-77 ``icrc77_register_replay``, a vector in and a vector out.

The body is ``{"commands": [<signed register_replay command>, ...], "timeout_s": 30}``, each
command in the form ``POST /v1/commands`` takes. The batch is checked as a whole first
(`parse_batch`), and refused as a whole with ICRC-77's GenericBatchError (``GENERIC_BATCH_ERROR``,
HTTP 400) before anything is produced when it is empty, longer than `MAX_BATCH_ITEMS`, holds a
command that cannot be read or that is not a ``register_replay``, or holds the same (caller, nonce)
twice. Otherwise every command is produced in request order and its reply awaited concurrently;
the answer is ``{"results": [...]}`` in request order, each item ``{"ok": true, "result": {...}}``
(the single route's result: ``replay_id`` ...) or ``{"ok": false, "error": {"code", "message"}}``
(the single route's codes; TIMEOUT for an item whose reply did not come in time).

Items are decided independently, not atomically: each is its own signed command, with its own
nonce and its own replay id (derived from its digest), decided by the writer of its stream's
partition, as if it were sent alone.
"""

from __future__ import annotations

from typing import Any, Final

from watchtower.http import params
from watchtower.protocol.errors import GenericBatchError, InvalidArgumentError, WatchtowerError
from watchtower.protocol.signed_command import Command

BATCH_PATH: Final = "/v1/commands/batch"
#: Most commands one batch may carry (a register_replay is well under 1 KiB: 100 fit the 256 KiB body).
MAX_BATCH_ITEMS: Final = 100
#: The one method a batch takes: ICRC-77's icrc77_register_replay is the API that takes a vector.
BATCH_METHOD: Final = "register_replay"
#: The HTTP status of a batch refused as a whole: the request is at fault, not the server (the code
#: GENERIC_BATCH_ERROR answers 500 elsewhere, where only the service can fail a whole batch).
BATCH_REFUSED_STATUS: Final = 400
USAGE = '{"commands": [<signed register_replay command>, ...], "timeout_s": 30}'


def batch_refused(message: str, reason: str, *, index: int | None = None) -> GenericBatchError:
    """The whole-batch refusal (ICRC-77 GenericBatchError): nothing of the batch was produced."""
    details: dict[str, str | int] = {"reason": reason, "max_items": MAX_BATCH_ITEMS}
    if index is not None:
        details["index"] = index
    return GenericBatchError(f"{message}; nothing of the batch was sent", details=details)


def parse_batch(body: object) -> tuple[list[Command], float]:
    """The commands and the timeout of a batch request body (decoded JSON), checked in full.

    INVALID_ARGUMENT when the body is not a batch request at all (not an object, no ``commands``
    list, a bad ``timeout_s``: the single route's rules); GENERIC_BATCH_ERROR when the batch
    itself is refused (module docstring).
    """
    if not isinstance(body, dict) or "commands" not in body:
        raise InvalidArgumentError(f"send {USAGE}")
    timeout = params.timeout_param(body)  # before anything is produced
    raw = body["commands"]
    if not isinstance(raw, list):
        raise InvalidArgumentError(f"commands must be a list of signed commands; send {USAGE}")
    if not raw:
        raise batch_refused(f"the batch is empty; send 1 to {MAX_BATCH_ITEMS} signed register_replay commands",
                            "empty")
    if len(raw) > MAX_BATCH_ITEMS:
        raise batch_refused(f"the batch has {len(raw)} commands, more than {MAX_BATCH_ITEMS}; split it into "
                            f"batches of at most {MAX_BATCH_ITEMS}", "too_many")
    commands: list[Command] = []
    seen: dict[tuple[str, int], int] = {}
    for index, item in enumerate(raw):
        try:
            cmd = Command.from_dict(item)
        except (TypeError, ValueError, KeyError, AttributeError, RecursionError, WatchtowerError) as exc:
            why = exc.message if isinstance(exc, WatchtowerError) else type(exc).__name__
            raise batch_refused(f"command {index} is malformed ({why}); build it with the Watchtower SDK or CLI",
                                "malformed", index=index) from None
        if cmd.method != BATCH_METHOD:
            raise batch_refused(f"command {index} is {cmd.method!r}; the batch route takes only {BATCH_METHOD} "
                                "(ICRC-77 registrations): send other commands one by one to POST /v1/commands",
                                "not_register_replay", index=index)
        key = (cmd.caller, cmd.nonce)
        if key in seen:
            raise batch_refused(f"commands {seen[key]} and {index} are both signed by {cmd.caller} with nonce "
                                f"{cmd.nonce}; sign each command with its own, increasing nonce (the SDK's "
                                "ReplayClient.register_many does)", "duplicate_nonce", index=index)
        seen[key] = index
        commands.append(cmd)
    return commands, timeout


def item_ok(result: dict[str, Any]) -> dict[str, Any]:
    """One accepted item of the answer."""
    return {"ok": True, "result": result}


def item_error(err: WatchtowerError) -> dict[str, Any]:
    """One refused item of the answer, with the single route's code (and details, when any)."""
    return {"ok": False, "error": err.to_dict()}
