"""Where Watchtower keeps per-user state: ``$WATCHTOWER_HOME`` (default ``~/.watchtower``).

Account keys, ingestion keys and the recorded API address live there; the local stack keeps its
broker data and logs there too (`watchtower.local.paths` names this rule again).
"""

from __future__ import annotations

import os
from pathlib import Path


def watchtower_home() -> Path:
    """The per-user Watchtower directory."""
    return Path(os.environ.get("WATCHTOWER_HOME", Path.home() / ".watchtower")).expanduser()
