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
