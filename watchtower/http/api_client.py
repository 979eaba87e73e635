"""The transport of the Watchtower HTTP API (docs/http-api.md): one JSON request, its errors, and
``POST /v1/commands``, over the standard library.

`ApiTransport` is what every caller of the API shares: the SDK's `watchtower.client.http.ApiClient`
adds the query routes on top, and a server that only submits signed commands (an ingestion runner
registering itself) uses it as it is. Failures are always a `WatchtowerError`:

- an error body ``{"error": {"code", "message"}}`` is raised as the matching subclass
  (`WatchtowerError.from_dict`), e.g. STALE_SEQUENCE or FEED_NOT_FOUND;
- nothing listening (connection refused, unknown host) is API_UNAVAILABLE, saying to start the
  stack with ``watchtower up``;
- no answer within the timeout is TIMEOUT;
- a reply that is not Watchtower JSON keeps its HTTP status as the code (``HTTP_502``).
"""

from __future__ import annotations

import ipaddress
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any, Final

from opentelemetry import propagate

from watchtower.home.paths import watchtower_home
from watchtower.protocol.errors import MalformedRecordError, RequestTimeoutError, WatchtowerError
from watchtower.protocol.signed_command import Command

DEFAULT_API_URL: Final = "http://127.0.0.1:8470"
ENV_API: Final = "WATCHTOWER_API"
#: Where commands go when a command gateway runs apart from the read API (default: the API URL).
ENV_COMMANDS_API: Final = "WATCHTOWER_COMMANDS_API"
DEFAULT_TIMEOUT_S: Final = 30.0
DEFAULT_COMMAND_TIMEOUT_S: Final = 30.0
# The HTTP request outlives the server-side wait by this much, so the server's TIMEOUT reply
# (which says the command may still commit) arrives instead of a bare socket timeout.
_REPLY_MARGIN_S: Final = 5.0


class ApiUnavailableError(WatchtowerError):
    """Nothing answers at the API URL."""

    CODE = "API_UNAVAILABLE"
    DEFAULT_MESSAGE = "No Watchtower API answers; start it with `watchtower up`."


def resolve_api_url(flag: str | None = None) -> str:
    """The API base URL: `flag`, else ``$WATCHTOWER_API``, else the one `watchtower up` recorded in
    ``$WATCHTOWER_HOME/config.json``, else http://127.0.0.1:8470."""
    return (flag or os.environ.get(ENV_API) or _recorded_api() or DEFAULT_API_URL).rstrip("/")


def _recorded(name: str) -> str | None:
    """A URL `watchtower up` recorded in ``$WATCHTOWER_HOME/config.json`` (None: none, or unreadable)."""
    try:
        data = json.loads((watchtower_home() / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = data.get(name) if isinstance(data, dict) else None
    return value.rstrip("/") if isinstance(value, str) and value else None


def _recorded_api() -> str | None:
    return _recorded("api")


def recorded_gateway(api_url: str) -> str | None:
    """The command gateway `watchtower up` started beside `api_url` (its ``commands_api``), or None
    when `api_url` is not the API it recorded: a gateway belongs to its own stack."""
    return _recorded("commands_api") if _recorded_api() == api_url.rstrip("/") else None


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ApiTransport:
    """The transport to one Watchtower API. Holds no connection; safe to share between threads.

    `timeout` bounds every request in seconds (long polls and commands extend it by their own wait).
    Commands go to `commands_url`, else ``$WATCHTOWER_COMMANDS_API``, else the command gateway
    `watchtower up` recorded beside this API (`recorded_gateway`), else the API URL itself: a
    deployment may run the command gateway apart from the projections that answer reads. A recorded
    gateway that does not answer (stopped, restarting) sends the command to the API, which takes
    commands too; an explicit one never falls back.
    """

    def __init__(self, base_url: str | None = None, timeout: float = DEFAULT_TIMEOUT_S, *,
                 commands_url: str | None = None) -> None:
        self.base_url = resolve_api_url(base_url)
        explicit = commands_url or os.environ.get(ENV_COMMANDS_API)
        recorded = None if explicit else recorded_gateway(self.base_url)
        self.commands_url = (explicit or recorded or self.base_url).rstrip("/")
        self._api_takes_commands = recorded is not None and self.commands_url != self.base_url
        self.timeout = float(timeout)
        self._opener = _opener_for(self.base_url)
        self._command_opener = self._opener if self.commands_url == self.base_url else _opener_for(self.commands_url)

    # --- Transport -------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        commands: bool = False,
    ) -> dict[str, Any]:
        """Send one request and return the decoded JSON object; raise a `WatchtowerError` on any failure.

        `query` values that are None are left out; `timeout` overrides the client's for this call;
        `commands` sends it to the command gateway's URL.
        """
        if commands and self._api_takes_commands:
            try:
                return self._request(method, path, query, body, timeout, commands=True)
            except ApiUnavailableError:
                pass  # `watchtower up`'s gateway is away: its API takes the very same command (idempotent)
        return self._request(method, path, query, body, timeout,
                             commands=commands and not self._api_takes_commands)

    def _request(self, method: str, path: str, query: Mapping[str, Any] | None, body: Mapping[str, Any] | None,
                 timeout: float | None, *, commands: bool) -> dict[str, Any]:
        url = (self.commands_url if commands else self.base_url) + path
        params = {k: str(v) for k, v in (query or {}).items() if v is not None}
        if params:
            url += "?" + urllib.parse.urlencode(params)
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        req = urllib.request.Request(url, data=data, method=method)  # noqa: S310 (scheme checked in __init__)
        req.add_header("Accept", "application/json")
        # The application's current trace, if it runs OpenTelemetry (W3C traceparent): the gateway
        # and every hop after it continue it. Without a tracer provider this adds nothing.
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        for name, value in carrier.items():
            req.add_header(name, value)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        wait = self.timeout if timeout is None else timeout
        try:
            with (self._command_opener if commands else self._opener).open(req, timeout=wait) as resp:
                return self._decode(resp.status, resp.read(), url)
        except urllib.error.HTTPError as err:
            raw = err.read()
            err.close()
            raise self._error(err.code, raw, url) from None
        except urllib.error.URLError as err:
            raise self._transport_error(err.reason, url, wait) from None
        except (TimeoutError, ConnectionError) as err:
            raise self._transport_error(err, url, wait) from None

    def _decode(self, status: int, raw: bytes, url: str) -> dict[str, Any]:
        try:
            data = json.loads(raw)
        except ValueError:
            raise self._error(status, raw, url) from None
        if not isinstance(data, dict):
            raise MalformedRecordError(f"{url} answered {type(data).__name__} JSON; the API answers objects")
        return data

    def _error(self, status: int, raw: bytes, url: str) -> WatchtowerError:
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        error = data.get("error") if isinstance(data, dict) else None
        if isinstance(error, dict):
            try:
                return WatchtowerError.from_dict(error)
            except MalformedRecordError:
                pass
        snippet = raw[:200].decode("utf-8", "replace").strip()
        return WatchtowerError(
            f"{url} answered HTTP {status} without a Watchtower error body ({snippet or 'empty'}); "
            f"check that --api / ${ENV_API} points at a Watchtower API",
            code=f"HTTP_{status}",
        )

    def _transport_error(self, reason: object, url: str, wait: float) -> WatchtowerError:
        if isinstance(reason, TimeoutError):
            return RequestTimeoutError(
                f"{url} did not answer within {wait:g}s; check the API and workers (`watchtower up`), then retry"
            )
        parsed = urllib.parse.urlsplit(url)
        return ApiUnavailableError(
            f"no Watchtower API at {parsed.scheme}://{parsed.netloc} ({reason}); start it with `watchtower up`, "
            f"or point --api / ${ENV_API} at a running one"
        )

    @staticmethod
    def _seg(value: object) -> str:
        return urllib.parse.quote(str(value), safe="")

    # --- Commands --------------------------------------------------------------------------------

    def command(self, cmd: Command, *, timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S) -> dict[str, Any]:
        """POST /v1/commands: submit a signed command and return the worker's committed reply.

        A retry of the very same `cmd` is idempotent (the reply then carries ``"duplicate": true``).
        """
        body = {"command": cmd.to_dict(), "timeout_s": timeout_s}
        reply = self.request("POST", "/v1/commands", body=body, timeout=max(self.timeout, timeout_s + _REPLY_MARGIN_S),
                             commands=True)
        return answer_field(reply, "result", dict, "/v1/commands")


def _opener_for(url: str) -> urllib.request.OpenerDirector:
    """An opener for `url` (INVALID_ARGUMENT unless http(s)); loopback bypasses any proxy."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise WatchtowerError(f"API URL {url!r} is not an http(s) URL; pass one like {DEFAULT_API_URL}",
                              code="INVALID_ARGUMENT")
    # A proxy configured for the outside world must not swallow requests to this machine.
    handlers = [urllib.request.ProxyHandler({})] if _is_loopback(parsed.hostname) else []
    return urllib.request.build_opener(*handlers)


def answer_field(data: Mapping[str, Any], name: str, kind: type, what: str) -> Any:
    """``data[name]`` when it is a `kind`, else MALFORMED_RECORD naming the answer (`what`)."""
    value = data.get(name)
    if not isinstance(value, kind):
        raise MalformedRecordError(f"the API's {what} answer has no {name!r} {kind.__name__}; is it a Watchtower API?")
    return value
