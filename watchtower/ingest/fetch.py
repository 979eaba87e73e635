"""The runner's HTTP(S) JSON fetch, fenced: what a task definition may make a runner do.

- Only ``http``/``https`` (parsed by `protocol.ingestion`: never ``file:`` or anything local).
- Every address the host resolves to must be public (no loopback, private, link-local, multicast,
  reserved or unspecified address) unless the deployment allows it in
  ``WATCHTOWER_INGEST_ALLOW_NETS`` (comma-separated CIDRs, e.g. ``127.0.0.1/32`` for local tests).
  The check is made when a connection is opened, and the connection goes to the address that was
  checked (no second lookup a rebinding DNS server could answer differently).
- Redirects are followed by hand, at most 3, only to the same scheme, each target checked again;
  a redirect to another origin does not carry the task's credential headers.
- ONE deadline per fetch, ``timeout_ms`` (or the task's own deadline, if sooner), covers the DNS
  lookup, connect, TLS, the request, the headers, every byte of the body and every redirect: each
  socket operation is given only the time left, so a source that drips a byte at a time is cut
  off at the deadline, not at the deadline per read.
- The body is abandoned past ``max_bytes`` (a declared ``Content-Length`` over it at once).
- A non-2xx answer, a connection error, a body that is not JSON (or nests too deeply to decode) is
  SOURCE_UNAVAILABLE; a body or selection over the bound is OVERSIZED_RESULT. No failure ever
  echoes a header value.

`Fetcher` is a runner's client: one pool of keep-alive connections (httpcore, the core of httpx)
shared by its worker threads; `fetch_json` with no fetcher opens and closes one for a single fetch.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

import httpcore
import httpx

from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.ingestion import (
    MAX_RESULT_BYTES,
    HttpJsonTask,
    IngestReason,
    SelectionError,
    apply_selection,
    is_credential_header,
)
from watchtower.protocol.ingestion.results import canonical_json

ENV_ALLOW_NETS: Final = "WATCHTOWER_INGEST_ALLOW_NETS"
MAX_REDIRECTS: Final = 3
USER_AGENT: Final = b"watchtower-ingest-runner"
_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class FetchError(Exception):
    """The fetch produced no result: `reason` (an IngestReason) and a `detail` safe to publish."""

    def __init__(self, reason: IngestReason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def allowed_nets(env: str | None = None) -> tuple[Network, ...]:
    """The non-public networks the deployment lets runners reach (`ENV_ALLOW_NETS`)."""
    raw = os.environ.get(ENV_ALLOW_NETS, "") if env is None else env
    return tuple(ipaddress.ip_network(part.strip(), strict=False) for part in raw.split(",") if part.strip())


def _is_public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return not (ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_reserved
                or ip.is_unspecified)


def check_addresses(host: str, addresses: Iterable[str], allow: Iterable[Network]) -> list[str]:
    """`addresses` (what `host` resolves to) if every one is public or in `allow`, else FetchError."""
    nets, out = tuple(allow), []
    for text in addresses:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
        if not _is_public(ip) and not any(ip in net for net in nets):
            raise FetchError(IngestReason.SOURCE_UNAVAILABLE,
                             f"the source host {host!r} resolves to the non-public address {ip}, which this "
                             f"deployment does not allow (add it to {ENV_ALLOW_NETS} to allow it)")
        out.append(text)
    return out


# --- One deadline for everything a fetch does ---------------------------------------------------

_deadline = threading.local()


@contextlib.contextmanager
def _until(at: float) -> Iterator[None]:
    """Every socket operation of this thread's fetch, until the block ends, ends by `at` (monotonic)."""
    _deadline.at = at
    try:
        yield
    finally:
        _deadline.at = None


def _left(kind: type[Exception] = httpcore.ReadTimeout) -> float:
    at = getattr(_deadline, "at", None)
    if at is None:
        raise RuntimeError("a runner's socket operation outside a fetch")  # every fetch sets one
    left = at - time.monotonic()
    if left <= 0:
        raise kind("the fetch's deadline passed")
    return left


def _resolve(host: str, port: int) -> list[str]:
    """The addresses of `host`, looked up within the deadline (a lookup that hangs is left behind
    on a daemon thread; the system resolver's own timeout ends it)."""
    with contextlib.suppress(ValueError):
        return [str(ipaddress.ip_address(host))]
    box: dict[str, Any] = {}
    done = threading.Event()

    def lookup() -> None:
        try:
            box["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=lookup, name="runner-dns", daemon=True).start()
    if not done.wait(_left(httpcore.ConnectTimeout)):
        raise httpcore.ConnectTimeout("the DNS lookup outlasted the fetch's deadline")
    if "error" in box:
        raise FetchError(IngestReason.SOURCE_UNAVAILABLE, f"the source host {host!r} does not resolve")
    return list(dict.fromkeys(str(info[4][0]) for info in box["infos"]))


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every read, write and TLS handshake ends by the fetch's deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ARG002 (the deadline's)
        return self._inner.read(max_bytes, _left(httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ARG002
        self._inner.write(buffer, _left(httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:  # noqa: ARG002
        # CPython's handshake treats the socket timeout as one deadline for the whole handshake.
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, _left(httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _FencedBackend(httpcore.SyncBackend):
    """Opens connections only to checked addresses (see the module docstring), within the deadline."""

    def __init__(self, allow: tuple[Network, ...]) -> None:
        self.allow = allow

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,  # noqa: ARG002 (the deadline's)
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        addresses = check_addresses(host, _resolve(host, port), self.allow)
        error: Exception | None = None
        for address in addresses:
            try:
                stream = super().connect_tcp(address, port, _left(httpcore.ConnectTimeout), local_address,
                                             socket_options)
                return _DeadlineStream(stream)
            except httpcore.ConnectError as exc:
                error = exc
        raise error or httpcore.ConnectError(f"{host!r} has no address")


class Fetcher:
    """A runner's HTTP client: keep-alive connections to checked addresses, shared by threads."""

    def __init__(self, allow: Iterable[Network] | None = None, max_connections: int = 64) -> None:
        self.allow = tuple(allowed_nets() if allow is None else allow)
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False), max_connections=max_connections,
            max_keepalive_connections=max_connections, keepalive_expiry=30.0,
            network_backend=_FencedBackend(self.allow))

    def close(self) -> None:
        self._pool.close()

    def fetch_json(self, task: HttpJsonTask, *, headers: Mapping[str, str] | None = None,
                   secret_headers: Iterable[str] = (), deadline: float | None = None) -> Any:
        """The decoded JSON document the source answers. `headers`: the request headers with the
        task's secret references resolved (default: the task's, which then may name no secret);
        `secret_headers`: the names of those resolved, never carried to another origin;
        `deadline`: a monotonic instant to stop by, if sooner than ``timeout_ms``."""
        at = time.monotonic() + task.timeout_ms / 1000
        at = at if deadline is None else min(at, deadline)
        sent = _literal(task) if headers is None else dict(headers)
        private = {name.lower() for name in secret_headers}
        with _until(at):
            url, origin = task.url, _origin(task.url)
            for _ in range(MAX_REDIRECTS + 1):
                body, location = self._request(task, url, sent)
                if location is None:
                    return _decode(body)
                url = urllib.parse.urljoin(url, location)
                if _origin(url)[0] != origin[0]:
                    raise FetchError(IngestReason.SOURCE_UNAVAILABLE,
                                     f"a redirect to another scheme ({_origin(url)[0]!r}) is refused")
                if _origin(url) != origin:  # the credentials were for the first origin only
                    sent = {k: v for k, v in sent.items() if k.lower() not in private and not is_credential_header(k)}
            raise FetchError(IngestReason.SOURCE_UNAVAILABLE, f"more than {MAX_REDIRECTS} redirects")

    def _request(self, task: HttpJsonTask, url: str, headers: Mapping[str, str]) -> tuple[bytes, str | None]:
        parts = urllib.parse.urlsplit(url)
        if not parts.hostname:
            raise FetchError(IngestReason.SOURCE_UNAVAILABLE, "the source URL has no host")
        try:
            content = None if task.body is None else task.body.encode()
            raw = [(b"Host", parts.netloc.rpartition("@")[2].encode("ascii")), (b"User-Agent", USER_AGENT),
                   *((k.encode(), v.encode()) for k, v in headers.items())]
            if content is not None:
                raw.append((b"Content-Length", str(len(content)).encode()))
            left = _left()
            timeouts = {"connect": left, "read": left, "write": left, "pool": left}
            with self._pool.stream(task.method, url, headers=raw, content=content,
                                   extensions={"timeout": timeouts}) as response:
                if response.status in _REDIRECTS:
                    return b"", _header(response.headers, b"location") or ""
                if not 200 <= response.status < 300:
                    raise FetchError(IngestReason.SOURCE_UNAVAILABLE, f"the source answered HTTP {response.status}")
                declared = _header(response.headers, b"content-length")
                if declared is not None and declared.isdigit() and int(declared) > task.max_bytes:
                    raise _oversized(task)
                chunks, size = [], 0
                for chunk in response.iter_stream():
                    size += len(chunk)
                    if size > task.max_bytes:
                        raise _oversized(task)
                    chunks.append(chunk)
                return b"".join(chunks), None
        except httpcore.TimeoutException:
            raise FetchError(IngestReason.SOURCE_UNAVAILABLE,
                             f"the source took longer than the fetch's deadline ({task.timeout_ms} ms)") from None
        except (httpcore.ProtocolError, httpcore.NetworkError, httpcore.UnsupportedProtocol, UnicodeError,
                ValueError) as exc:
            raise FetchError(IngestReason.SOURCE_UNAVAILABLE,
                             f"the source is unreachable ({type(exc).__name__})") from None


def _literal(task: HttpJsonTask) -> dict[str, str]:
    """The task's headers when no secret was resolved for it: a reference cannot be sent."""
    out = {}
    for name, value in task.headers:
        if not isinstance(value, str):
            raise FetchError(IngestReason.SOURCE_UNAVAILABLE,
                             f"the header {name} names a secret, and this fetch was given none")
        out[name] = value
    return out


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, (parts.hostname or ""), parts.port


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1").strip()
    return None


def _oversized(task: HttpJsonTask) -> FetchError:
    return FetchError(IngestReason.OVERSIZED_RESULT,
                      f"the source answered more than max_bytes ({task.max_bytes}) bytes")


def _decode(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8"))
    except RecursionError:  # nesting deeper than the decoder recurses
        raise FetchError(IngestReason.SOURCE_UNAVAILABLE, "the source answered JSON nested too deeply") from None
    except (UnicodeDecodeError, ValueError):
        raise FetchError(IngestReason.SOURCE_UNAVAILABLE, "the source did not answer JSON") from None


def fetch_json(task: HttpJsonTask, *, allow: Iterable[Network] | None = None, client: Fetcher | None = None,
               deadline: float | None = None, headers: Mapping[str, str] | None = None,
               secret_headers: Iterable[str] = ()) -> Any:
    """The decoded JSON document the task's source answers (see the module docstring for the fences
    and `Fetcher.fetch_json` for the arguments)."""
    fetcher = client or Fetcher(allow, max_connections=1)
    try:
        return fetcher.fetch_json(task, headers=headers, secret_headers=secret_headers, deadline=deadline)
    finally:
        if client is None:
            fetcher.close()


def select_result(task: HttpJsonTask, document: Any) -> bytes:
    """The runner's result for `task` from its fetched `document`: the selection, as canonical JSON."""
    try:
        selected = apply_selection(document, task.select)
        result = canonical_json(selected)
    except SelectionError as exc:
        raise FetchError(IngestReason.SCHEMA_MISMATCH, f"the selection failed: {exc}") from None
    except WatchtowerError as exc:  # INVALID_ARGUMENT: NaN, unsafe integers
        raise FetchError(IngestReason.SCHEMA_MISMATCH, str(exc)) from None
    except RecursionError:
        raise FetchError(IngestReason.SCHEMA_MISMATCH, "the selection nests too deeply to encode") from None
    if len(result) > MAX_RESULT_BYTES:
        raise FetchError(IngestReason.OVERSIZED_RESULT,
                         f"the selection is {len(result)} bytes, over {MAX_RESULT_BYTES}")
    return result


def run_http_task(task: HttpJsonTask, *, allow: Iterable[Network] | None = None,
                  client: Fetcher | None = None) -> bytes:
    """The runner's result for `task`: the selection from the fetched document, as canonical JSON."""
    return select_result(task, fetch_json(task, allow=allow, client=client))
