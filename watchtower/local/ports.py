"""Whether a local TCP port is free to listen on: the one check the broker and the supervisor share."""

from __future__ import annotations

import socket


def port_bindable(host: str, port: int) -> bool:
    """True when nothing listens on `host`:`port` (IPv6 when `host` has a colon)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True
