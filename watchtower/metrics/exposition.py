"""The ``/metrics`` endpoint of one process, on a port of its own.

`start_metrics` starts prometheus_client's HTTP server in a daemon thread (so no aiohttp app is
touched) and sets ``watchtower_build_info{service, version}``. The default registry already holds
the process collector (``process_cpu_seconds_total``, ``process_resident_memory_bytes``,
``process_open_fds``, ...), the platform and the GC collectors.

Settings (environment):

- ``WATCHTOWER_METRICS_PORT``: the port; ``0`` (the default) takes a free one from the OS, so the
  processes of one ``watchtower up`` never collide; ``off`` serves none.
- ``WATCHTOWER_METRICS_BIND``: the address (default 127.0.0.1; a container sets 0.0.0.0).
- ``WATCHTOWER_METRICS_FILE``: where to write the address actually bound, as
  ``{"service", "url", "pid"}`` JSON (the local stack sets it per process, and `watchtower status`
  and the Prometheus file-discovery list read it).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, Gauge, start_http_server
from prometheus_client.registry import Collector

from watchtower import __version__, tracing

log = logging.getLogger("watchtower.metrics")

ENV_PORT: Final = "WATCHTOWER_METRICS_PORT"
ENV_BIND: Final = "WATCHTOWER_METRICS_BIND"
ENV_FILE: Final = "WATCHTOWER_METRICS_FILE"
DEFAULT_BIND: Final = "127.0.0.1"

BUILD_INFO = Gauge("watchtower_build_info", "Always 1: the service this process runs and the Watchtower version.",
                   ["service", "version"])

_lock = threading.Lock()
_started: MetricsServer | None = None


@dataclass(frozen=True)
class MetricsServer:
    """A running endpoint: its URL (``http://host:port/metrics``) and the server (for tests to close)."""

    service: str
    url: str
    server: WSGIServer

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def metrics_port(env: dict[str, str] | None = None) -> int | None:
    """The configured port (None: switched off); a value that is not a port is refused loudly."""
    raw = (os.environ if env is None else env).get(ENV_PORT, "0").strip().lower()
    if raw in ("off", "none", "-"):
        return None
    try:
        port = int(raw)
    except ValueError:
        raise ValueError(f"{ENV_PORT}={raw!r} is not a port; give a number (0: any free port) or 'off'") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"{ENV_PORT}={port} is not a port (0..65535)")
    return port


def start_metrics(service: str, collectors: Iterable[Collector] = ()) -> MetricsServer | None:
    """Serve this process's ``/metrics`` (once per process; a second call returns the first server)
    and register `collectors` (read at scrape time). None when switched off.

    Every long-running process calls this once at start, so it also installs the process's tracer
    when ``WATCHTOWER_TRACES`` asks for one (`watchtower.tracing.configure`, service name `service`).
    """
    global _started
    tracing.configure(service)
    with _lock:
        for collector in collectors:
            try:
                REGISTRY.register(collector)  # collects once, to learn its names
            except Exception:  # a broken collector costs its metrics, never the service
                log.exception("%s: the metrics collector %r could not be registered", service, collector)
        if _started is not None:
            return _started
        BUILD_INFO.labels(service, __version__).set(1)
        port = metrics_port()
        if port is None:
            return None
        bind = os.environ.get(ENV_BIND, DEFAULT_BIND)
        try:
            server, _thread = start_http_server(port, addr=bind)
        except OSError as exc:  # a port in use: the service runs on, without its endpoint
            log.error("%s: cannot serve metrics on %s:%d (%s); set %s to a free port, 0 or off",
                      service, bind, port, exc, ENV_PORT)
            return None
        host = "127.0.0.1" if bind in ("0.0.0.0", "") else bind  # noqa: S104 (compared, not bound)
        url = f"http://{host}:{server.server_port}/metrics"
        _started = MetricsServer(service, url, server)
    log.info("%s metrics on %s", service, url)
    path = os.environ.get(ENV_FILE)
    if path:
        _write_address(Path(path), service, url)
    return _started


def _write_address(path: Path, service: str, url: str) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps({"service": service, "url": url, "pid": os.getpid()}))
        os.replace(tmp, path)
    except OSError as exc:  # best effort: metrics must never stop a service
        log.warning("cannot write the metrics address to %s: %s", path, exc)
