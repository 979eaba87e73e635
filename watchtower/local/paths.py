"""Where the local stack keeps its caches and data.

``WATCHTOWER_HOME`` (default ``~/.watchtower``) holds account keys and broker data;
``WATCHTOWER_CACHE`` (default ``~/.cache/watchtower``) holds the Maven-fetched jars,
which are shared by every checkout on the machine.
"""

from __future__ import annotations

import os
from pathlib import Path

from watchtower.home.paths import watchtower_home as watchtower_home


def cache_dir() -> Path:
    """The per-user download cache (jars)."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "watchtower"
    return Path(os.environ.get("WATCHTOWER_CACHE", default)).expanduser()


def default_data_dir(port: int) -> Path:
    """Broker data directory for a broker listening on ``port``."""
    return watchtower_home() / "local" / f"kafka-{port}"
