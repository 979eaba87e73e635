"""The runner's HTTP(S) JSON fetch, fenced: what a task definition may make a runner do.

- Only ``http``/``https`` (parsed by `protocol.ingestion`: never ``file:`` or anything local).
- Every address the host resolves to must be public (no loopback, private, link-local, multicast,
  reserved or unspecified address) unless the deployment allows it in
  ``WATCHTOWER_INGEST_ALLOW_NETS`` (comma-separated CIDRs, e.g. ``127.0.0.1/32`` for local tests).
- Redirects are followed by hand, at most 3, only to the same scheme, each target checked again.
- The body is read in chunks and abandoned past ``max_bytes``; the whole fetch past ``timeout_ms``.
- A non-2xx answer, a connection error or a body that is not JSON is SOURCE_UNAVAILABLE; a body
  or selection over the bound is OVERSIZED_RESULT. No failure ever echoes the headers (they may
  hold the task's credentials).
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import time
import urllib.parse
from collections.abc import Iterable
from typing import Any, Final

import httpx

from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.ingestion import (
    MAX_RESULT_BYTES,
    HttpJsonTask,
    IngestReason,
    SelectionError,
    apply_selection,
)
from watchtower.protocol.ingestion_results import canonical_json

ENV_ALLOW_NETS: Final = "WATCHTOWER_INGEST_ALLOW_NETS"
MAX_REDIRECTS: Final = 3
_CHUNK: Final = 16 * 1024

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


def check_host(host: str, port: int, allow: Iterable[Network]) -> None:
    """FetchError unless every address `host` resolves to is public or in `allow`."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        raise FetchError(IngestReason.SOURCE_UNAVAILABLE, f"the source host {host!r} does not resolve") from None
    nets = tuple(allow)
    for info in infos:
        ip = ipaddress.ip_address(info[4][0])
        if not _is_public(ip) and not any(ip in net for net in nets):
            raise FetchError(IngestReason.SOURCE_UNAVAILABLE,
                             f"the source host {host!r} resolves to the non-public address {ip}, which this "
                             f"deployment does not allow (add it to {ENV_ALLOW_NETS} to allow it)")


def _target(url: str, scheme: str | None, allow: Iterable[Network]) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or (scheme is not None and parts.scheme != scheme):
        raise FetchError(IngestReason.SOURCE_UNAVAILABLE, f"a redirect to another scheme ({parts.scheme!r}) is refused")
    if not parts.hostname:
        raise FetchError(IngestReason.SOURCE_UNAVAILABLE, "the source URL has no host")
    check_host(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), allow)
    return parts.scheme


def fetch_json(task: HttpJsonTask, *, allow: Iterable[Network] | None = None,
               client: httpx.Client | None = None) -> Any:
    """The decoded JSON document the task's source answers (see the module docstring for the fences)."""
    nets = tuple(allowed_nets() if allow is None else allow)
    deadline = time.monotonic() + task.timeout_ms / 1000
    own = client is None
    http = client or httpx.Client(follow_redirects=False, trust_env=False)
    try:
        url, scheme = task.url, None
        for _ in range(MAX_REDIRECTS + 1):
            scheme = _target(url, scheme, nets)
            body, location = _request(http, task, url, deadline)
            if location is None:
                return _decode(body)
            url = urllib.parse.urljoin(url, location)
        raise FetchError(IngestReason.SOURCE_UNAVAILABLE, f"more than {MAX_REDIRECTS} redirects")
    finally:
        if own:
            http.close()


def _request(http: httpx.Client, task: HttpJsonTask, url: str, deadline: float) -> tuple[bytes, str | None]:
    left = deadline - time.monotonic()
    if left <= 0:
        raise FetchError(IngestReason.SOURCE_UNAVAILABLE, f"the source took longer than {task.timeout_ms} ms")
    try:
        with http.stream(task.method, url, headers=dict(task.headers),
                         content=None if task.body is None else task.body.encode(),
                         timeout=httpx.Timeout(left)) as response:
            if response.is_redirect:
                return b"", response.headers.get("location", "")
            if not 200 <= response.status_code < 300:
                raise FetchError(IngestReason.SOURCE_UNAVAILABLE, f"the source answered HTTP {response.status_code}")
            chunks, size = [], 0
            for chunk in response.iter_raw(_CHUNK):
                size += len(chunk)
                if size > task.max_bytes:
                    raise FetchError(IngestReason.OVERSIZED_RESULT,
                                     f"the source answered more than max_bytes ({task.max_bytes}) bytes")
                if time.monotonic() > deadline:
                    raise FetchError(IngestReason.SOURCE_UNAVAILABLE,
                                     f"the source took longer than {task.timeout_ms} ms")
                chunks.append(chunk)
            return b"".join(chunks), None
    except httpx.HTTPError as exc:
        raise FetchError(IngestReason.SOURCE_UNAVAILABLE, f"the source is unreachable ({type(exc).__name__})") from None


def _decode(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise FetchError(IngestReason.SOURCE_UNAVAILABLE, "the source did not answer JSON") from None


def run_http_task(task: HttpJsonTask, *, allow: Iterable[Network] | None = None,
                  client: httpx.Client | None = None) -> bytes:
    """The runner's result for `task`: the selection from the fetched document, as canonical JSON."""
    document = fetch_json(task, allow=allow, client=client)
    try:
        selected = apply_selection(document, task.select)
        result = canonical_json(selected)
    except SelectionError as exc:
        raise FetchError(IngestReason.SCHEMA_MISMATCH, f"the selection failed: {exc}") from None
    except WatchtowerError as exc:  # INVALID_ARGUMENT: NaN, unsafe integers
        raise FetchError(IngestReason.SCHEMA_MISMATCH, str(exc)) from None
    if len(result) > MAX_RESULT_BYTES:
        raise FetchError(IngestReason.OVERSIZED_RESULT,
                         f"the selection is {len(result)} bytes, over {MAX_RESULT_BYTES}")
    return result
