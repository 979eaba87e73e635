"""The one writer of every ``--json`` output of the CLI.

Each command that prints JSON (a result, a line of a stream, a refusal) prints it through
`echo_json`, so the API's integer rule (`watchtower.protocol.json_ints`, docs/http-api.md "Integers
in JSON") holds on the command line too: an integer of magnitude 2**53 or more is written as its
decimal string, a replay id always is, and a signed document is written exactly as it was signed.
A JSON reader that holds numbers as doubles (jq, JavaScript) then never rounds an amount or an id.
"""

from __future__ import annotations

import json
from typing import Any

import click

from watchtower.protocol.json_ints import json_safe_ints


def json_text(data: Any, *, line: bool = False, sort_keys: bool = False) -> str:
    """`data` as JSON text under the integer rule: indented, or one compact line with `line`."""
    safe = json_safe_ints(data)
    if line:
        return json.dumps(safe, separators=(",", ":"), sort_keys=sort_keys)
    return json.dumps(safe, indent=2, sort_keys=sort_keys)


def echo_json(data: Any, *, line: bool = False, sort_keys: bool = False) -> None:
    """Print `data` on stdout as `json_text` does (one compact line per record for a stream)."""
    click.echo(json_text(data, line=line, sort_keys=sort_keys))
