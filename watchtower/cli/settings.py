"""Where the CLI finds the cluster: flag, then environment, then the file `init` wrote."""

from __future__ import annotations

import json
import os
from typing import Any

from watchtower.local.config import DEFAULT_PORT, HOST
from watchtower.local.paths import watchtower_home

DEFAULT_BOOTSTRAP = f"{HOST}:{DEFAULT_PORT}"


def config_path() -> Any:
    return watchtower_home() / "config.json"


def load() -> dict[str, Any]:
    """The saved deployment config, or an empty dict."""
    path = config_path()
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save(values: dict[str, Any]) -> None:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    merged = {**load(), **values}
    path.write_text(json.dumps(merged, indent=2) + "\n")


def bootstrap(flag: str | None = None) -> str:
    """The Kafka bootstrap address to use."""
    return flag or os.environ.get("WATCHTOWER_BOOTSTRAP") or str(load().get("bootstrap") or DEFAULT_BOOTSTRAP)
