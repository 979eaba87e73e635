"""Errors raised by the local stack; each message names the fix in one line."""

from __future__ import annotations


class LocalStackError(Exception):
    """A problem with the embedded broker or its tooling that the user can fix.

    The CLI prints ``str(error)`` as a single line, with no traceback.
    """
