"""``POST /v1/commands/batch``: ICRC-77's vector methods, a vector in and a vector out.

The body is ``{"commands": [<signed command>, ...], "timeout_s": 30}``, each command in the form
``POST /v1/commands`` takes, all of one method: ``register_replay`` (ICRC-77
``icrc77_register_replay : (vec ReplayRegistration) -> (vec ReplayRegisterResult)``) or
``cancel_replay`` (``icrc77_cancel_replay : (vec ReplayId) -> (vec CancelReplayResult)``). The
batch is checked as a whole first (`parse_batch`), and refused as a whole with ICRC-77's
GenericBatchError (``GENERIC_BATCH_ERROR``, HTTP 400) before anything is produced when it is
empty, longer than `MAX_BATCH_ITEMS`, holds a command that cannot be read or that is neither
method, mixes the two, or holds the same (caller, nonce) twice. A refused batch answers, as ICRC-77
does, a vector: ``{"results": [...]}`` with one ``{"ok": false, "error": <GenericBatchError>}``
per item sent (one for an empty batch), and beside it ``"error"``, the same GenericBatchError once
(what earlier releases answered, kept for their readers).

Otherwise every command is produced in request order and its reply awaited concurrently; the answer
is ``{"results": [...]}`` in request order, each item ``{"ok": true, "result": {...}}`` (the single
route's result) or ``{"ok": false, "error": {"code", "message", "details"}}`` (the single route's
codes; TIMEOUT for an item whose reply did not come in time). An item's ``details`` always hold
``icrc77``, the ICRC-77 variant the code answers to (``ImproperConfig``, ``NotFound`` ...;
``GenericError`` for a code the draft does not name), and ``index``, the item's place in the
request, beside the code's own details.

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
#: The methods a batch takes, one per batch: ICRC-77's icrc77_register_replay and icrc77_cancel_replay
#: are the APIs that take a vector.
BATCH_METHOD: Final = "register_replay"
CANCEL_METHOD: Final = "cancel_replay"
BATCH_METHODS: Final = (BATCH_METHOD, CANCEL_METHOD)
#: The HTTP status of a batch refused as a whole: the request is at fault, not the server (the code
#: GENERIC_BATCH_ERROR answers 500 elsewhere, where only the service can fail a whole batch).
BATCH_REFUSED_STATUS: Final = 400
USAGE = '{"commands": [<signed register_replay or cancel_replay command>, ...], "timeout_s": 30}'


def batch_refused(message: str, reason: str, *, items: int, index: int | None = None) -> GenericBatchError:
    """The whole-batch refusal (ICRC-77 GenericBatchError) of a batch of `items` commands: nothing of
    the batch was produced."""
    details: dict[str, str | int] = {"reason": reason, "max_items": MAX_BATCH_ITEMS, "items": items,
                                     "icrc77": "GenericBatchError"}
    if index is not None:
        details["index"] = index
    return GenericBatchError(f"{message}; nothing of the batch was sent", details=details)


def refused_body(err: GenericBatchError) -> dict[str, Any]:
    """The answer to a batch refused as a whole: the GenericBatchError once per item sent (at least
    once), as ICRC-77's vector, and once on its own under ``error``."""
    items = (err.details or {}).get("items", 1)
    count = items if isinstance(items, int) and items > 0 else 1
    item = {"ok": False, "error": err.to_dict()}
    return {"error": err.to_dict(), "results": [item] * count}


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
    items = len(raw)
    if not raw:
        raise batch_refused(f"the batch is empty; send 1 to {MAX_BATCH_ITEMS} signed register_replay (or "
                            "cancel_replay) commands", "empty", items=items)
    if len(raw) > MAX_BATCH_ITEMS:
        raise batch_refused(f"the batch has {len(raw)} commands, more than {MAX_BATCH_ITEMS}; split it into "
                            f"batches of at most {MAX_BATCH_ITEMS}", "too_many", items=items)
    commands: list[Command] = []
    seen: dict[tuple[str, int], int] = {}
    for index, item in enumerate(raw):
        try:
            cmd = Command.from_dict(item)
        except (TypeError, ValueError, KeyError, AttributeError, RecursionError, WatchtowerError) as exc:
            why = exc.message if isinstance(exc, WatchtowerError) else type(exc).__name__
            raise batch_refused(f"command {index} is malformed ({why}); build it with the Watchtower SDK or CLI",
                                "malformed", items=items, index=index) from None
        if cmd.method not in BATCH_METHODS:
            raise batch_refused(f"command {index} is {cmd.method!r}; the batch route takes only {BATCH_METHOD} "
                                f"or {CANCEL_METHOD} (ICRC-77's vector methods): send other commands one by one to "
                                "POST /v1/commands", "not_register_replay", items=items, index=index)
        if commands and cmd.method != commands[0].method:
            raise batch_refused(f"command {index} is {cmd.method!r} but command 0 is {commands[0].method!r}; a batch "
                                "is one ICRC-77 call: send registrations and cancels in separate batches",
                                "mixed_methods", items=items, index=index)
        key = (cmd.caller, cmd.nonce)
        if key in seen:
            raise batch_refused(f"commands {seen[key]} and {index} are both signed by {cmd.caller} with nonce "
                                f"{cmd.nonce}; sign each command with its own, increasing nonce (the SDK's "
                                "ReplayClient.register_many does)", "duplicate_nonce", items=items, index=index)
        seen[key] = index
        commands.append(cmd)
    return commands, timeout


def item_ok(result: dict[str, Any]) -> dict[str, Any]:
    """One accepted item of the answer."""
    return {"ok": True, "result": result}


def item_error(err: WatchtowerError, index: int) -> dict[str, Any]:
    """One refused item of the answer: the single route's code and message, and details that always
    name the ICRC-77 variant and the item's index (module docstring)."""
    error = err.to_dict()
    error["details"] = {**dict(err.details or {}), "icrc77": err.ICRC77_VARIANT or "GenericError", "index": index}
    return {"ok": False, "error": error}
