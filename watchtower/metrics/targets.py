"""Prometheus file discovery for a local stack: ``python -m watchtower.metrics.targets [LOG_DIR] > targets.json``.

Every process of `watchtower up` (and of `local.stack.ServiceSet`) writes ``<name>.metrics.json``
(``{"service", "url", "pid"}``) next to its log, with the port the OS gave it. This turns those
files into Prometheus's ``file_sd_configs`` format: one target group per process, with the job
``watchtower-<service>`` (as in compose/prometheus/prometheus.yml) and the process name as the
``process`` label. LOG_DIR defaults to the recorded stack's (``$WATCHTOWER_HOME/stack/logs``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from watchtower.home.paths import watchtower_home


def target_groups(files: Iterable[Path]) -> list[dict[str, Any]]:
    """The file-discovery target groups of the metrics address files that can be read."""
    groups = []
    for path in sorted(files):
        try:
            doc = json.loads(path.read_text())
            url = urlsplit(str(doc["url"]))
            service = str(doc["service"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        groups.append({"targets": [url.netloc], "labels": {"job": f"watchtower-{service}", "__metrics_path__": url.path,
                                                           "process": path.name.removesuffix(".metrics.json")}})
    return groups


def main(argv: list[str]) -> int:
    log_dir = Path(argv[0]) if argv else watchtower_home() / "stack" / "logs"
    print(json.dumps(target_groups(log_dir.glob("*.metrics.json")), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
