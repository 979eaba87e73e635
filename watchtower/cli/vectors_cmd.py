"""`watchtower vectors check FILE...`: run conformance vectors (DESIGN §7.9).

Prints ``PASS id`` or ``FAIL id: why`` per vector, then ``N passed, N failed``; exits 1 when
anything failed (including a file that cannot be read). `--json` prints one JSON object instead.
The judging lives in `watchtower.protocol.conformance`; this module only reads files and prints.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from watchtower.cli.json_output import echo_json
from watchtower.protocol.conformance import VectorOutcome, run_document
from watchtower.protocol.vector_input import VectorFormatError


@click.group()
def vectors() -> None:
    """Conformance vectors."""


def _load(path: Path) -> object:
    # Python's json accepts NaN, which the vectors use for the NaN-tag case.
    return json.loads(path.read_text(encoding="utf-8"))


@vectors.command("check")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text lines.")
def check(files: tuple[Path, ...], as_json: bool) -> None:
    """Compute every vector in FILES with Watchtower's own code and compare with its expectation."""
    rows: list[dict[str, Any]] = []
    for path in files:
        try:
            outcomes = run_document(_load(path))
        except (OSError, UnicodeDecodeError, ValueError, VectorFormatError) as exc:
            outcomes = [VectorOutcome(str(path), "file", False, f"cannot read vectors: {exc}")]
        for outcome in outcomes:
            rows.append({"file": str(path), **outcome.to_dict()})
    passed = sum(1 for r in rows if r["passed"])
    failed = len(rows) - passed
    if as_json:
        echo_json({"passed": passed, "failed": failed, "results": rows})
    else:
        for r in rows:
            click.echo(f"PASS {r['id']}" if r["passed"] else f"FAIL {r['id']}: {r['reason']}")
        click.echo(f"{passed} passed, {failed} failed")
    if failed:
        raise SystemExit(1)
