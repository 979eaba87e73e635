"""The deployment's genesis configuration, read from the worker's environment.

The rules that use it live in `watchtower.protocol.deployment`; this module only reads the
operator's settings (docs/deployment.md), so no command can carry them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from watchtower.protocol.deployment import Deployment
from watchtower.protocol.errors import InvalidArgumentError, WatchtowerError

ENV_PROTOCOL_TREASURY = "WATCHTOWER_PROTOCOL_TREASURY"


def deployment_from_env(environ: Mapping[str, str] = os.environ) -> Deployment:
    """The `Deployment` the operator configured; INVALID_ARGUMENT naming the variable if it is wrong."""
    treasury = environ.get(ENV_PROTOCOL_TREASURY) or None
    try:
        return Deployment(protocol_treasury=treasury)
    except WatchtowerError as err:
        raise InvalidArgumentError(
            f"{ENV_PROTOCOL_TREASURY} must be an address (0x + 64 hex digits): {err.message}"
        ) from None
