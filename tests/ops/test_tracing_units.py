"""`watchtower.tracing` without a broker: the setting, the no-op when off, and the spans a hop writes.

Tracing is configured once per process, so the "on" case runs in a child interpreter: this test
process keeps no tracer provider (other tests in it must see tracing off).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from watchtower import tracing


def test_the_setting() -> None:
    assert tracing.parse_setting(None) is None
    assert tracing.parse_setting("off") is None
    assert tracing.parse_setting("console") == ("console", None)
    assert tracing.parse_setting("file:/var/spans") == ("file", Path("/var/spans"))
    for bad in ("file:", "otlp", "yes"):
        with pytest.raises(ValueError, match="WATCHTOWER_TRACES"):
            tracing.parse_setting(bad)


def test_off_installs_nothing_and_hands_the_headers_back_untouched() -> None:
    assert not tracing.configure("test", env={})
    assert not tracing.enabled()
    headers = {"x": "1"}
    assert tracing.inject(headers) is headers
    assert tracing.inject(None) is None
    assert tracing.span("hop", [("traceparent", b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01")]) is None
    assert tracing.context_of({"traceparent": "x"}) is None
    assert tracing.http_headers() == {}


CHILD = textwrap.dedent('''
    import sys
    from watchtower import tracing
    assert tracing.configure("hop", env={"WATCHTOWER_TRACES": "file:" + sys.argv[1]})
    parent = [(b"traceparent", b"00-" + b"a" * 32 + b"-" + b"b" * 16 + b"-01"), (b"other", b"x")]
    with tracing.span("hop one", parent, partition=2):
        out = tracing.inject({"wt-correlation": "c"})
    with tracing.span("hop two", out):
        pass
    with tracing.span("over http", {"Traceparent": out["traceparent"]}):  # as urllib capitalises it
        pass
    with tracing.span("untraced", None):
        pass
    print(out["traceparent"])
    tracing.shutdown()
''')


def test_a_span_continues_the_records_trace_and_what_it_writes_carries_its_own(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True,
                          check=False, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    written = done.stdout.strip()
    files = list(tmp_path.glob("hop-*.jsonl"))
    assert len(files) == 1
    spans = {s["name"]: s for s in map(json.loads, files[0].read_text().splitlines())}
    one, two, alone = spans["hop one"], spans["hop two"], spans["untraced"]
    assert one["context"]["trace_id"] == "0x" + "a" * 32
    assert one["parent_id"] == "0x" + "b" * 16
    assert one["attributes"] == {"partition": 2}
    assert one["resource"]["attributes"]["service.name"] == "hop"
    assert written == f"00-{'a' * 32}-{one['context']['span_id'][2:]}-01"
    assert two["context"]["trace_id"] == one["context"]["trace_id"]
    assert two["parent_id"] == one["context"]["span_id"]
    assert spans["over http"]["parent_id"] == one["context"]["span_id"]
    assert alone["parent_id"] is None
    assert alone["context"]["trace_id"] != one["context"]["trace_id"]


HTTP_CHILD = textwrap.dedent('''
    import asyncio, sys
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer
    from watchtower import tracing
    assert tracing.configure("keymgr", env={"WATCHTOWER_TRACES": "file:" + sys.argv[1]})

    async def main():
        app = web.Application()
        app.router.add_get("/v1/keys/{stream_id}", lambda r: web.json_response({"ok": True}))
        assert tracing.install_http(app)
        async with TestClient(TestServer(app)) as client:
            tp = "00-" + "c" * 32 + "-" + "d" * 16 + "-01"
            assert (await client.get("/v1/keys/s-secret", headers={"traceparent": tp})).status == 200
            assert (await client.get("/nowhere")).status == 404

    asyncio.run(main())
    tracing.shutdown()
''')


def test_an_http_service_writes_a_span_per_request_continuing_the_callers_trace(tmp_path: Path) -> None:
    """The key manager (and any aiohttp service that installs it) writes a span per request: its
    parent is the request's traceparent; its attributes name the route pattern, never the path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", HTTP_CHILD, str(tmp_path)], capture_output=True, text=True,
                          check=False, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    [path] = tmp_path.glob("keymgr-*.jsonl")
    spans = [json.loads(line) for line in path.read_text().splitlines()]
    assert [s["name"] for s in spans] == ["http request", "http request"]
    keys, missing = spans
    assert keys["context"]["trace_id"] == "0x" + "c" * 32
    assert keys["parent_id"] == "0x" + "d" * 16
    assert keys["attributes"] == {"http.method": "GET", "http.route": "/v1/keys/{stream_id}", "http.status_code": 200}
    assert "s-secret" not in path.read_text()
    assert missing["attributes"]["http.status_code"] == 404
    assert missing["parent_id"] is None


def test_with_tracing_off_no_http_middleware_is_installed() -> None:
    from aiohttp import web

    app = web.Application()
    assert not tracing.install_http(app)
    assert list(app.middlewares) == []
