"""One log format for every service: text for people, or JSON lines for machines.

``WATCHTOWER_LOG_FORMAT`` chooses it (``text``, the default, or ``json``); ``WATCHTOWER_LOG_LEVEL``
the level (default WARNING). A JSON line always carries the same field names:

    {"ts": "2026-11-26T19:41:35.123Z", "level": "WARNING", "service": "worker", "worker_id": "w1",
     "logger": "watchtower.worker", "message": "...", "partition": 3, "stream": "s-1", "code": "..."}

``partition``, ``stream`` and ``code`` appear when the call site passes them
(``log.warning("...", extra={"partition": p})``) or, for ``code``, when the logged exception is a
`WatchtowerError` (its spec code). Exceptions add ``exc_type`` and ``exc`` (the traceback text).
Nothing here formats a value it was not given: no key material reaches a log through it.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import sys
from typing import Any, Final

#: ``app.conf.Worker`` of a Faust app run by `faust_worker_argv` (a path: Faust is imported only then).
QUIET_WORKER: Final = "watchtower.logs.faust_worker:QuietWorker"

ENV_FORMAT: Final = "WATCHTOWER_LOG_FORMAT"
ENV_LEVEL: Final = "WATCHTOWER_LOG_LEVEL"
TEXT_FORMAT: Final = "%(asctime)s %(name)s %(levelname)s %(message)s"
#: Fields a call site may pass with ``extra=`` that a JSON line carries under these names.
CONTEXT_FIELDS: Final = ("partition", "stream", "code")


class JsonFormatter(logging.Formatter):
    """A record as one JSON object on one line, with the service's identity on every line."""

    def __init__(self, service: str, worker_id: str | None = None) -> None:
        super().__init__()
        self.service, self.worker_id = service, worker_id

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        doc: dict[str, Any] = {
            "ts": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "service": self.service,
            "worker_id": self.worker_id,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                doc[name] = value
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            code = getattr(exc, "code", None)
            if "code" not in doc and isinstance(code, str):
                doc["code"] = code
            doc["exc_type"] = type(exc).__name__
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False, default=str)


def log_format() -> str:
    """``text`` or ``json`` from the environment; ValueError naming the variable otherwise."""
    chosen = os.environ.get(ENV_FORMAT, "text").strip().lower() or "text"
    if chosen not in ("text", "json"):
        raise ValueError(f"{ENV_FORMAT} must be text or json, got {chosen!r}")
    return chosen


def setup_logging(service: str, worker_id: str | None = None, *, default_level: str = "WARNING") -> None:
    """Send this process's logs to stderr in the chosen format and level (module docstring)."""
    level = os.environ.get(ENV_LEVEL, default_level).upper()
    handler = logging.StreamHandler(sys.stderr)
    if log_format() == "json":
        handler.setFormatter(JsonFormatter(service, worker_id))
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level, logging.WARNING))


def faust_logging_config(service: str, worker_id: str | None = None, *,
                         default_level: str = "WARNING") -> dict[str, Any] | None:
    """For a Faust worker (the API process, the ingestion scheduler): the ``logging_config`` that
    makes it log as `setup_logging` does, or None for the text format (Faust's own handler).

    A Faust worker replaces the root handlers when it starts, with ``logging.config.dictConfig``
    of its app's ``logging_config`` when there is one: this one installs `JsonFormatter`."""
    if log_format() != "json":
        return None
    level = os.environ.get(ENV_LEVEL, default_level).upper()
    level = level if isinstance(getattr(logging, level, None), int) else "WARNING"
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter, "service": service, "worker_id": worker_id}},
        "handlers": {"default": {"class": "logging.StreamHandler", "formatter": "json",
                                 "stream": "ext://sys.stderr", "level": level}},
        "root": {"level": level, "handlers": ["default"]},
    }


def faust_worker_argv(app: Any, *worker_args: str) -> list[str]:
    """The ``sys.argv`` with which ``app.main()`` runs ``faust worker worker_args...`` and writes
    nothing of Faust's own beside the logs: the app's worker is `QuietWorker` (no terminal spinner,
    whose first frame is a cursor-hide escape written even to a file), and under JSON logs
    ``faust --quiet`` drops the start-up banner, which is not a log line (with text logs it stays,
    on stdout, for people)."""
    app.conf.Worker = QUIET_WORKER
    quiet = ["--quiet"] if log_format() == "json" else []
    return ["faust", *quiet, "worker", *worker_args]
