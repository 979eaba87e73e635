"""``POST /v1/commands``: parse the request, produce the signed command, answer the committed reply.

``POST /v1/commands/batch`` (`watchtower.gateway.batch`) is ICRC-77's icrc77_register_replay and
icrc77_cancel_replay: a list of signed register_replay (or cancel_replay) commands, each produced
and answered as on the single route.

The HTTP contract is the API's (docs/http-api.md): the body is ``{"command": <signed command>,
"timeout_s": 30}``; the answer is ``{"result": ...}`` or the spec JSON error with its status. The
request is checked in full (JSON, shape, timeout, command) before anything is produced, so a
malformed request never reaches the log.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import Future
from typing import Any

from aiohttp import web

from watchtower import tracing
from watchtower.gateway import batch
from watchtower.gateway.transport import CommandClient
from watchtower.http import params
from watchtower.http.errors import error_body, http_status
from watchtower.protocol.errors import (
    GenericBatchError,
    InvalidArgumentError,
    NotReadyError,
    RequestTimeoutError,
    WatchtowerError,
)
from watchtower.protocol.json_ints import json_safe_ints
from watchtower.protocol.signed_command import Command
from watchtower.topics.errors import BrokerError

log = logging.getLogger("watchtower.gateway")

COMMANDS_PATH = "/v1/commands"
BATCH_PATH = batch.BATCH_PATH
_USAGE = '{"command": <signed command>, "timeout_s": 30}'


class CommandGateway:
    """Submits commands through one lazily connected `CommandClient` (shared by every request)."""

    def __init__(self, bootstrap: str, *, prefix: str | None = None) -> None:
        self.bootstrap = bootstrap
        self.prefix = prefix
        self._client: CommandClient | None = None
        self._lock = threading.Lock()

    @property
    def connected(self) -> bool:
        """True once the command producer and the reply reader are set up."""
        return self._client is not None

    def client(self) -> CommandClient:
        """The process's command client, connected on first use (blocking: call from a thread)."""
        with self._lock:
            if self._client is None:
                self._client = CommandClient(self.bootstrap, prefix=self.prefix)
            return self._client

    async def _connected(self) -> CommandClient:
        client = self._client
        if client is None:  # connecting blocks (topic metadata, reply offsets): not on the event loop
            client = await asyncio.get_running_loop().run_in_executor(None, self.client)
        return client

    async def submit(self, cmd: Command, timeout_s: float) -> dict[str, Any]:
        """The committed result of `cmd`, or its spec error; TIMEOUT when no worker answered in time."""
        client = await self._connected()
        return await _reply(client.submit(cmd), timeout_s)

    async def submit_batch(self, commands: list[Command], timeout_s: float) -> list[dict[str, Any]]:
        """Each command's answer item (`batch.item_ok` / `batch.item_error`), in the order given.

        The commands are produced one after the other in that order (so a caller's increasing
        nonces reach their stream's partition in order), then every reply is awaited concurrently,
        each for at most `timeout_s`: an item whose reply is late answers TIMEOUT, the others still
        answer.
        """
        client = await self._connected()
        pending: list[Future[dict[str, Any]] | WatchtowerError] = []
        for cmd in commands:
            try:
                pending.append(client.submit(cmd))
            except (BufferError, BrokerError) as exc:  # the producer's queue is full, or it failed
                pending.append(NotReadyError(f"the gateway could not queue this command ({type(exc).__name__}); "
                                             "send it again"))

        async def answer(index: int, item: Future[dict[str, Any]] | WatchtowerError) -> dict[str, Any]:
            try:
                if isinstance(item, WatchtowerError):
                    raise item
                return batch.item_ok(await _reply(item, timeout_s))
            except WatchtowerError as err:
                return batch.item_error(err, index)

        return list(await asyncio.gather(*(answer(i, item) for i, item in enumerate(pending))))

    async def handle(self, request: web.Request) -> web.Response:
        """The aiohttp handler of ``POST /v1/commands``."""
        # A caller's traceparent is the parent of this hop; the command record carries this span's.
        with tracing.maybe(tracing.span("gateway command", request.headers)):
            try:
                return web.json_response({"result": json_safe_ints(await self.submit(*await _parse(request)))})
            except WatchtowerError as err:
                return web.json_response(error_body(err), status=http_status(err.code))

    async def handle_batch(self, request: web.Request) -> web.Response:
        """The aiohttp handler of ``POST /v1/commands/batch`` (`watchtower.gateway.batch`)."""
        try:
            commands, timeout = batch.parse_batch(await _json_body(request, batch.USAGE))
            return web.json_response({"results": json_safe_ints(await self.submit_batch(commands, timeout))})
        except GenericBatchError as err:
            return web.json_response(json_safe_ints(batch.refused_body(err)), status=batch.BATCH_REFUSED_STATUS)
        except WatchtowerError as err:
            return web.json_response(error_body(err), status=http_status(err.code))

    def mount(self, app: web.Application) -> None:
        """Add ``POST /v1/commands`` and ``POST /v1/commands/batch`` to `app` (before it starts), and close
        the client when it stops."""
        app.router.add_post(COMMANDS_PATH, self.handle, name="commands")
        app.router.add_post(BATCH_PATH, self.handle_batch, name="commands-batch")
        app.on_cleanup.append(self._on_cleanup)

    async def _on_cleanup(self, _app: web.Application) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


async def _reply(future: Future[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
    """The committed result `future` resolves to; TIMEOUT when it does not within `timeout_s`."""
    try:
        return await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
    except TimeoutError:
        raise RequestTimeoutError(
            f"no worker answered within {timeout_s:g}s; check `watchtower status` and retry the same "
            "signed command (a retry is idempotent)") from None


async def _json_body(request: web.Request, usage: str = _USAGE) -> Any:
    return params.json_text(await request.read(), what="the request body", usage=f"send {usage}")


async def _parse(request: web.Request) -> tuple[Command, float]:
    body = await _json_body(request)
    if not isinstance(body, dict) or "command" not in body:
        raise InvalidArgumentError(f"send {_USAGE}")
    timeout = params.timeout_param(body)  # before anything is produced
    try:
        cmd = Command.from_dict(body["command"])
    except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as exc:
        raise InvalidArgumentError(f"the command is malformed ({type(exc).__name__}); build it "
                                   "with the Watchtower SDK or CLI") from None
    return cmd, timeout
