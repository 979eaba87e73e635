"""One log format for every service (watchtower.logs): JSON lines with the same field names, chosen
by WATCHTOWER_LOG_FORMAT; a real side-worker process writes them."""

from __future__ import annotations

import json
import logging
import logging.config
import os
import subprocess
import sys
from pathlib import Path

import pytest
from api_calls import wait_for

from watchtower.logs import JsonFormatter, faust_logging_config, faust_worker_argv, log_format, setup_logging
from watchtower.protocol.errors import StaleSequenceError


def record(msg: str, *, exc: BaseException | None = None, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("watchtower.worker", logging.WARNING, __file__, 1, msg, (), None)
    if exc is not None:
        try:
            raise exc
        except BaseException:
            rec.exc_info = sys.exc_info()
    for k, v in extra.items():
        setattr(rec, k, v)
    return rec


def test_a_line_carries_the_same_fields_everywhere() -> None:
    line = json.loads(JsonFormatter("worker", "w1").format(record("batch aborted", partition=3, stream="s-1")))
    assert {k: line[k] for k in ("level", "service", "worker_id", "logger", "message", "partition", "stream")} == {
        "level": "WARNING", "service": "worker", "worker_id": "w1", "logger": "watchtower.worker",
        "message": "batch aborted", "partition": 3, "stream": "s-1"}
    assert line["ts"].endswith("Z")


def test_a_logged_watchtower_error_gives_its_spec_code() -> None:
    line = json.loads(JsonFormatter("gateway").format(record("refused", exc=StaleSequenceError("old"))))
    assert line["code"] == "STALE_SEQUENCE"
    assert line["exc_type"] == "StaleSequenceError"
    assert "Traceback" in line["exc"]


def test_the_format_is_chosen_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WATCHTOWER_LOG_FORMAT", raising=False)
    assert log_format() == "text"
    monkeypatch.setenv("WATCHTOWER_LOG_FORMAT", "JSON")
    assert log_format() == "json"
    monkeypatch.setenv("WATCHTOWER_LOG_FORMAT", "xml")
    with pytest.raises(ValueError, match="WATCHTOWER_LOG_FORMAT must be text or json"):
        log_format()


def test_setup_replaces_the_root_handlers(monkeypatch: pytest.MonkeyPatch) -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    monkeypatch.setenv("WATCHTOWER_LOG_FORMAT", "json")
    try:
        setup_logging("keymgr", default_level="INFO")
        assert len(root.handlers) == 1
        assert isinstance(root.handlers[0].formatter, JsonFormatter)
        assert root.level == logging.INFO
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def test_a_worker_process_logs_json_lines(tmp_path: Path) -> None:
    """A stream worker pointed at an address where no broker listens logs its client's connection
    failures; with JSON chosen, every log line it writes is one JSON object naming the service
    and the worker (librdkafka's own lines reach Python logging through the worker's logger)."""
    env = {**os.environ, "WATCHTOWER_LOG_FORMAT": "json", "WATCHTOWER_LOG_LEVEL": "INFO",
           "WATCHTOWER_METRICS_PORT": "off"}
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "watchtower.workers.worker_main", "127.0.0.1:1", "w9",
                                 "tjsonlogs"], env=env, stderr=out)
    try:
        # Until it has logged a line of its own (not for a fixed time: a busy machine starts it slowly).
        wait_for(lambda: proc.poll() is not None or b'"service": "worker"' in log.read_bytes(), 60,
                 "the worker's first JSON log line")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    err = log.read_text().splitlines()
    lines = [ln for ln in err if ln.startswith("{")]
    assert lines, f"the worker logged nothing as JSON: {err[-5:]}"
    # Nothing of ours in the old text format (librdkafka's own "%3|" lines are not Python logging).
    assert not [ln for ln in err if " watchtower." in ln and not ln.startswith("{")], err[-5:]
    for ln in lines:
        doc = json.loads(ln)
        assert (doc["service"], doc["worker_id"]) == ("worker", "w9")
        assert {"ts", "level", "logger", "message"} <= set(doc)


def test_a_faust_worker_gets_the_same_json_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """The API process and the ingestion scheduler are Faust workers, which replace the root
    handlers with dictConfig(app.conf.logging_config) when they start: that config installs the
    same formatter (None with text logs: Faust's own handler stays)."""
    monkeypatch.delenv("WATCHTOWER_LOG_FORMAT", raising=False)
    assert faust_logging_config("projection", "p1") is None
    monkeypatch.setenv("WATCHTOWER_LOG_FORMAT", "json")
    monkeypatch.setenv("WATCHTOWER_LOG_LEVEL", "info")
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        config = faust_logging_config("projection", "p1")
        assert config is not None
        logging.config.dictConfig(config)
        [handler] = root.handlers
        assert root.level == logging.INFO
        line = json.loads(handler.format(record("Marking the coordinator dead")))
        assert (line["service"], line["worker_id"], line["level"]) == ("projection", "p1", "WARNING")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])



def test_the_api_workers_faust_level_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """WATCHTOWER_LOG_LEVEL reaches the API worker's Faust ``--loglevel`` (the deploy tier reads its
    assignments at INFO); unset or unknown stays ``warn``."""
    from watchtower.api.main import faust_loglevel

    monkeypatch.delenv("WATCHTOWER_LOG_LEVEL", raising=False)
    assert faust_loglevel() == "warn"
    for given, level in (("INFO", "info"), ("debug", "debug"), ("WARNING", "warn"), ("loud", "warn")):
        monkeypatch.setenv("WATCHTOWER_LOG_LEVEL", given)
        assert faust_loglevel() == level

FAUST_CHILD = """
import sys
import faust
from watchtower.logs import faust_logging_config, faust_worker_argv
app = faust.App("tjsonlogs-faust", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False,
                datadir=sys.argv[1])
app.conf.logging_config = faust_logging_config("projection", "p9")
sys.argv = faust_worker_argv(app, "--loglevel", "warn", "--without-web")
app.main()
"""


def test_a_faust_worker_writes_json_lines_only(tmp_path: Path) -> None:
    """The API process and the ingestion scheduler run `app.main()` with `faust_worker_argv`: with
    JSON logs, nothing but JSON lines, where Faust's worker wrote its start-up banner (a table on
    stdout) and, with the first record at WARNING or above, its spinner's cursor-hide escape
    (ESC[?25l) in front of that record's line. Pointed at an address where no broker listens, the
    worker logs the connection error and exits by itself."""
    env = {**os.environ, "WATCHTOWER_LOG_FORMAT": "json", "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", FAUST_CHILD, str(tmp_path / "data")], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120, check=False)
    lines = done.stdout.decode(errors="replace").splitlines()
    assert any('"logger": "aiokafka"' in ln for ln in lines), lines[-5:]
    not_json = [ln for ln in lines if not ln.startswith("{")]
    assert not_json == [], not_json[:5]
    for ln in lines:
        assert json.loads(ln)["service"] == "projection"


def test_the_faust_worker_argv_is_quiet_only_under_json_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    class Conf:
        Worker: object = "faust.worker:Worker"

    class App:
        conf = Conf()

    monkeypatch.setenv("WATCHTOWER_LOG_FORMAT", "json")
    assert faust_worker_argv(App(), "--loglevel", "warn") == ["faust", "--quiet", "worker", "--loglevel", "warn"]
    assert App.conf.Worker == "watchtower.logs.faust_worker:QuietWorker"
    monkeypatch.setenv("WATCHTOWER_LOG_FORMAT", "text")  # people read the banner; the spinner stays off
    assert faust_worker_argv(App(), "-l", "info") == ["faust", "worker", "-l", "info"]
