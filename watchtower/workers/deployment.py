"""The deployment's genesis configuration, read from the worker's environment.

The rules that use it live in `watchtower.protocol.deployment`; this module only reads the
operator's settings (docs/deployment.md, docs/ledger.md), so no command can carry them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from watchtower.protocol.deployment import DEFAULT_REPLAY_MAX_RANGE, Deployment
from watchtower.protocol.errors import InvalidArgumentError, WatchtowerError

ENV_PROTOCOL_TREASURY = "WATCHTOWER_PROTOCOL_TREASURY"
ENV_CBY_MINTER = "WATCHTOWER_CBY_MINTER"
ENV_KEYMGR_PUBLIC_KEY = "WATCHTOWER_KEYMGR_PUBLIC_KEY"
ENV_REPLAY_MAX_RANGE = "WATCHTOWER_REPLAY_MAX_RANGE"
ENV_RUNNER_REGISTRAR = "WATCHTOWER_RUNNER_REGISTRAR"

_WHAT = {
    ENV_PROTOCOL_TREASURY: "an address (0x + 64 hex digits)",
    ENV_CBY_MINTER: "an address (0x + 64 hex digits)",
    ENV_KEYMGR_PUBLIC_KEY: "the key manager's ed25519 public key as 64 hex digits",
    ENV_REPLAY_MAX_RANGE: f"a positive whole number of sequences (default {DEFAULT_REPLAY_MAX_RANGE:,})",
    ENV_RUNNER_REGISTRAR: "an address (0x + 64 hex digits)",
}


def deployment_from_env(environ: Mapping[str, str] = os.environ) -> Deployment:
    """The `Deployment` the operator configured; INVALID_ARGUMENT naming the variable if it is wrong."""
    values = {name: environ.get(name) or None for name in _WHAT}
    for name in _WHAT:  # one at a time, so the error names the variable that is wrong
        try:
            _build({n: v if n == name else None for n, v in values.items()})
        except WatchtowerError as err:
            raise InvalidArgumentError(f"{name} must be {_WHAT[name]}: {err.message}") from None
    return _build(values)


def _build(values: Mapping[str, str | None]) -> Deployment:
    key_hex = values[ENV_KEYMGR_PUBLIC_KEY]
    try:
        key = None if key_hex is None else bytes.fromhex(key_hex)
    except ValueError:
        raise InvalidArgumentError(f"{key_hex!r} is not hex") from None
    max_range = values[ENV_REPLAY_MAX_RANGE]
    if max_range is not None and not max_range.strip().isdigit():
        raise InvalidArgumentError(f"{max_range!r} is not a whole number")
    return Deployment(protocol_treasury=values[ENV_PROTOCOL_TREASURY], cby_minter=values[ENV_CBY_MINTER],
                      keymgr_public_key=key,
                      replay_max_range=DEFAULT_REPLAY_MAX_RANGE if max_range is None else int(max_range),
                      runner_registrar=values[ENV_RUNNER_REGISTRAR])
