"""W3C trace context through Kafka headers, and OpenTelemetry spans per hop, off unless configured.

Setting (environment), read once per process by `configure` (through `observe.start_observability`):

- ``WATCHTOWER_TRACES`` unset, empty or ``off``: no tracer provider is installed; `inject` returns
  the headers it was given and `span` / `http_span` return None: one global read per call.
- ``console``: spans are written to stdout as JSON (the SDK's console exporter).
- ``file:DIR``: each process appends its spans as JSON lines (``span.to_json()`` on one line) to
  ``DIR/<service>-<pid>.jsonl``; one file per process, so no two processes write one file.

A hop that carries a record (`span`) starts a span whose parent is the ``traceparent`` (and
``tracestate``) header of the record it handles, if any; what the hop writes meanwhile carries the
span's own context (`inject`). The span's attributes are low-cardinality and never a key, a
signature or a payload. Nothing here is a rule of the protocol: ``traceparent`` is an extra Kafka
header that every reader ignores.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

ENV: Final = "WATCHTOWER_TRACES"
TRACEPARENT: Final = "traceparent"
TRACESTATE: Final = "tracestate"
_NAMES: Final = (TRACEPARENT, TRACESTATE)

_propagator = TraceContextTextMapPropagator()
#: The process's tracer; None while tracing is off (the default): every function here then returns at once.
_tracer: trace.Tracer | None = None


def enabled() -> bool:
    return _tracer is not None


def parse_setting(raw: str | None) -> tuple[str, Path | None] | None:
    """``WATCHTOWER_TRACES`` as (kind, directory); None: off. A value it does not know is refused loudly."""
    value = (raw or "").strip()
    if value.lower() in ("", "off", "none", "-"):
        return None
    if value.lower() == "console":
        return ("console", None)
    if value.startswith("file:") and len(value) > len("file:"):
        return ("file", Path(value[len("file:"):]))
    raise ValueError(f"{ENV}={value!r}: give off, console or file:DIR")


def configure(service: str, env: Mapping[str, str] | None = None) -> bool:
    """Install a tracer provider for this process if ``WATCHTOWER_TRACES`` asks for one (True then).

    Once per process: a second call keeps the first provider.
    """
    global _tracer
    setting = parse_setting((os.environ if env is None else env).get(ENV))
    if setting is None or _tracer is not None:
        return _tracer is not None
    # The SDK is imported only when tracing is on: a process with tracing off never loads it.
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    from watchtower.tracing.file_exporter import JsonLinesExporter

    kind, directory = setting
    exporter: SpanExporter
    if kind == "file":
        assert directory is not None
        exporter = JsonLinesExporter(directory / f"{service}-{os.getpid()}.jsonl")
    else:
        exporter = ConsoleSpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service, "process.pid": os.getpid()}))
    # Exported off the serving thread, in batches; flushed at exit (the SDK's atexit shutdown).
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=200))
    trace.set_tracer_provider(provider)
    _tracer = trace.get_tracer("watchtower")
    return True


def _carrier(headers: Iterable[tuple[Any, Any]] | Mapping[Any, Any] | None) -> dict[str, str]:
    """The trace context headers among Kafka headers (a list of pairs or a dict, bytes or text)."""
    if not headers:
        return {}
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    out = {}
    for k, v in pairs:
        # HTTP header names arrive in any case (urllib sends "Traceparent"); Kafka's as written.
        name = (k.decode("latin-1") if isinstance(k, bytes) else str(k)).lower()
        if name in _NAMES and v is not None:
            out[name] = v.decode() if isinstance(v, bytes) else str(v)
    return out


def context_of(headers: Iterable[tuple[Any, Any]] | Mapping[Any, Any] | None) -> Context | None:
    """The trace context Kafka or HTTP headers carry (None: none, or tracing is off)."""
    if _tracer is None:
        return None
    carrier = _carrier(headers)
    return _propagator.extract(carrier) if carrier else None


def inject(headers: dict[str, Any] | None) -> dict[str, Any] | None:
    """`headers` plus the current span's ``traceparent`` (a new dict when `headers` is None).

    With tracing off, or outside any span, `headers` itself: no copy, no allocation.
    """
    if _tracer is None or not trace.get_current_span().get_span_context().is_valid:
        return headers
    out = dict(headers) if headers else {}
    _propagator.inject(out)
    return out


def span(name: str, headers: Iterable[tuple[Any, Any]] | Mapping[Any, Any] | None,
         **attributes: str | int) -> AbstractContextManager[Any] | None:
    """A span named `name`, child of the context `headers` carry, current while its block runs.

    None with tracing off, so a hot path pays one call and one test: ``s = span(...)``, then
    ``with s:`` only when it is not None.
    """
    if _tracer is None:
        return None
    return _tracer.start_as_current_span(name, context=context_of(headers), kind=trace.SpanKind.CONSUMER,
                                          attributes=attributes)


@contextmanager
def maybe(cm: AbstractContextManager[Any] | None) -> Iterator[None]:
    """``with maybe(span(...)):``, for the paths that are not hot."""
    if cm is None:
        yield
        return
    with cm:
        yield


def http_headers() -> dict[str, str]:
    """The current span's context as HTTP headers (empty with tracing off or outside a span)."""
    out: dict[str, str] = {}
    if _tracer is not None and trace.get_current_span().get_span_context().is_valid:
        _propagator.inject(out)
    return out


def shutdown() -> None:
    """Export what is still buffered (a process about to exit; also called at exit by the SDK)."""
    provider = trace.get_tracer_provider()
    flush = getattr(provider, "force_flush", None)
    if _tracer is not None and flush is not None:
        flush()


def install_http(app: Any) -> bool:
    """Give an aiohttp `app` (a key manager's, a gateway's) a span per request, `http request`,
    child of the request's ``traceparent`` header, with the route's pattern (never the path: it may
    hold a stream id) and the status as attributes. Nothing is installed while tracing is off, so a
    process without tracing pays nothing per request. True when installed."""
    if _tracer is None:
        return False
    from aiohttp import web

    tracer = _tracer

    @web.middleware
    async def traced(request: web.Request, handler: Any) -> Any:
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "unmatched"
        with tracer.start_as_current_span("http request", context=context_of(request.headers),
                                          kind=trace.SpanKind.SERVER,
                                          attributes={"http.method": request.method, "http.route": route}) as current:
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                current.set_attribute("http.status_code", exc.status)
                raise
            current.set_attribute("http.status_code", response.status)
            return response

    app.middlewares.append(traced)
    return True
