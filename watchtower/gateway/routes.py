"""``POST /v1/commands``: parse the request, produce the signed command, answer the committed reply.

The HTTP contract is the API's (docs/http-api.md): the body is ``{"command": <signed command>,
"timeout_s": 30}``; the answer is ``{"result": ...}`` or the spec JSON error with its status. The
request is checked in full (JSON, shape, timeout, command) before anything is produced, so a
malformed request never reaches the log.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from aiohttp import web

from watchtower.gateway.transport import CommandClient
from watchtower.projections import http_params as params
from watchtower.projections.http_errors import error_body, http_status
from watchtower.protocol.errors import InvalidArgumentError, RequestTimeoutError, WatchtowerError
from watchtower.protocol.json_ints import json_safe
from watchtower.protocol.signed_command import Command

log = logging.getLogger("watchtower.gateway")

COMMANDS_PATH = "/v1/commands"
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

    async def submit(self, cmd: Command, timeout_s: float) -> dict[str, Any]:
        """The committed result of `cmd`, or its spec error; TIMEOUT when no worker answered in time."""
        loop = asyncio.get_running_loop()
        client = self._client
        if client is None:  # connecting blocks (topic metadata, reply offsets): not on the event loop
            client = await loop.run_in_executor(None, self.client)
        future = client.submit(cmd)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout_s)
        except TimeoutError:
            raise RequestTimeoutError(
                f"no worker answered within {timeout_s:g}s; check `watchtower status` and retry the same "
                "signed command (a retry is idempotent)") from None

    async def handle(self, request: web.Request) -> web.Response:
        """The aiohttp handler of ``POST /v1/commands``."""
        try:
            return web.json_response({"result": json_safe(await self.submit(*await _parse(request)))})
        except WatchtowerError as err:
            return web.json_response(error_body(err), status=http_status(err.code))

    def mount(self, app: web.Application) -> None:
        """Add ``POST /v1/commands`` to `app` (before it starts), and close the client when it stops."""
        app.router.add_post(COMMANDS_PATH, self.handle, name="commands")
        app.on_cleanup.append(self._on_cleanup)

    async def _on_cleanup(self, _app: web.Application) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


async def _parse(request: web.Request) -> tuple[Command, float]:
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise InvalidArgumentError(f"the request body is not JSON (or nests too deep); send {_USAGE}") from None
    if not isinstance(body, dict) or "command" not in body:
        raise InvalidArgumentError(f"send {_USAGE}")
    timeout = params.timeout_param(body)  # before anything is produced
    try:
        cmd = Command.from_dict(body["command"])
    except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as exc:
        raise InvalidArgumentError(f"the command is malformed ({type(exc).__name__}); build it "
                                   "with the Watchtower SDK or CLI") from None
    return cmd, timeout
