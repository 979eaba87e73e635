"""The aggregate contract: what the host needs to know about an aggregate, and nothing more.

An aggregate is a key function, ``decide``, ``evolve`` and a snapshot codec, plus the decoders of
its records and the tests that say which decoded records are its own (so the host can route
records to it). The host
(:class:`~watchtower.workers.command_processor.CommandProcessor`) gives every registered aggregate
the same guarantees - one Kafka transaction per batch, zombie fencing, request/reply on
``replies``, forwards between aggregates on ``internal``, quarantine of bad log records, snapshots
and recovery - and never names one. Pure parts (decide/evolve/state codecs) live in
``watchtower.protocol``; adapters implementing this protocol live in ``watchtower.workers.aggregates``.

Routing, without any metadata on the records, and decoding each record once:

- a command or forward record is decoded by each distinct ``command_decoder`` of the hosted
  aggregates at most once (every aggregate of the protocol shares `schemas.wire.decode_command`,
  so a record is decoded exactly once), and goes to the first registered aggregate whose
  ``accept_command`` accepts the decoded record (the same record on ``internal`` or ``commands``
  may be accepted or refused: that is how a forward is trusted only from workers); when none
  accepts it, the caller gets the refusal of the first aggregate that recognised the record (any
  code but MALFORMED_RECORD / SCHEMA_MISMATCH, e.g. UNAUTHORIZED), else the first one's;
- an events record is decoded once per distinct ``event_decoder`` likewise, and goes to the
  first aggregate that ``owns_event`` the result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from watchtower.protocol.deployment import Deployment
from watchtower.protocol.errors import WatchtowerError


class Context(NamedTuple):
    """What the host knows when it decides a batch: the block height (from its clock, read once per
    batch) and the deployment's genesis configuration."""

    block_height: int
    deployment: Deployment


class Record(NamedTuple):
    """An extra record a decision writes in the batch's transaction, e.g. a StreamMessage.
    ``role`` is a catalogue role (``messages``); it goes to the partition of the command."""

    role: str
    key: bytes
    value: bytes
    headers: Mapping[str, str] | None = None


class Forward(NamedTuple):
    """A record for another aggregate, written on ``internal`` in the same transaction, to the
    partition of ``key``. With ``answers`` (the default) it carries the caller's reply headers:
    when the decision has no reply, the aggregate that receives the forward answers the caller.
    Without, it carries none, so its receiver never answers (e.g. a credit to a treasury)."""

    key: str
    value: bytes
    answers: bool = True


class Outcome(NamedTuple):
    """A decision: the events (the host folds them with ``evolve`` and writes them), the reply
    (None: a forward's receiver answers), extra records and forwards. ``error``: the caller is
    refused with it although the events (and forwards) are committed, e.g. a purchase that failed
    after it was recorded as requested; ``reply`` is then ignored."""

    events: Sequence[Any]
    reply: Mapping[str, Any] | None
    records: Sequence[Record] = ()
    forwards: Sequence[Forward] = ()
    error: WatchtowerError | None = None


class Aggregate(Protocol):
    """One kind of aggregate. ``name`` names its part of a snapshot; it must be unique per host."""

    name: str

    @property
    def command_decoder(self) -> Callable[[bytes | None], Any]:
        """Bytes of ``commands`` / ``internal`` to a record (raise a WatchtowerError with the spec's
        code when they are none). Aggregates that share one decoder (the same object) share its result."""

    @property
    def event_decoder(self) -> Callable[[bytes | None], Any]:
        """Bytes of ``events`` to an event (raise when they are none); shared like `command_decoder`."""

    def accept_command(self, record: Any, *, internal: bool) -> Any:
        """The command in a decoded `record` (from ``internal`` or from ``commands``); raise a
        WatchtowerError (with the spec's code) when the record is not one this aggregate accepts:
        MALFORMED_RECORD when it is another aggregate's."""

    def key(self, command: Any) -> str:
        """The instance the command addresses; its events are keyed by it."""

    def initial(self, key: str) -> Any:
        """The state of an instance nothing has happened to."""

    def decide(self, state: Any, command: Any, ctx: Context) -> Outcome:
        """Pure: the outcome of ``command`` against ``state``; raise a WatchtowerError to refuse it."""

    def evolve(self, state: Any, event: Any) -> Any:
        """Pure: the state after ``event``; raise to refuse an event that cannot apply (quarantine)."""

    def encode_event(self, event: Any) -> bytes: ...

    def owns_event(self, event: Any) -> bool:
        """Whether this aggregate folds ``event`` (e.g. by its type)."""

    def event_key(self, event: Any) -> str:
        """The instance an event belongs to (the record must be keyed by it, on its partition)."""

    def check_event(self, event: Any, now_block_height: int | None) -> None:
        """Extra rules a log record must pass before ``evolve`` (raise to quarantine it)."""

    def encode_snapshot(self, states: Mapping[str, Any]) -> bytes:
        """The instances of one partition as deterministic bytes (never pickle)."""

    def decode_snapshot(self, data: bytes) -> dict[str, Any]:
        """Inverse of ``encode_snapshot``; raise on anything it did not write."""


class BrokenRuleError(Exception):
    """A log record breaks one of the fold's rules; the message says which and how."""


def check_unique(aggregates: Sequence[Aggregate]) -> None:
    """Refuse a host configuration where two aggregates share a name (their snapshots would clash)."""
    names = [a.name for a in aggregates]
    if not names:
        raise ValueError("a host needs at least one aggregate")
    if len(set(names)) != len(names):
        raise ValueError(f"aggregate names must be unique, got {names}")


class DecodeOnce:
    """The decoded forms of one record, one per distinct decoder: a decoder runs at most once, and
    what it raised is raised again to every aggregate that shares it. (The first decoder's outcome
    is kept in slots: on the hot path every aggregate shares one, so no dict is built.)"""

    __slots__ = ("_decoder", "_ok", "_others", "_result", "_value")

    def __init__(self, value: bytes | None) -> None:
        self._value = value
        self._decoder: Callable[[bytes | None], Any] | None = None
        self._ok = False
        self._result: Any = None
        self._others: dict[Any, tuple[bool, Any]] | None = None

    def get(self, decoder: Callable[[bytes | None], Any]) -> Any:
        if self._decoder is None:
            self._decoder = decoder
            self._ok, self._result = self._run(decoder)
        if decoder == self._decoder:
            ok, result = self._ok, self._result
        else:
            others = self._others if self._others is not None else {}
            self._others = others
            if decoder not in others:
                others[decoder] = self._run(decoder)
            ok, result = others[decoder]
        if not ok:
            raise result
        return result

    def _run(self, decoder: Callable[[bytes | None], Any]) -> tuple[bool, Any]:
        try:
            return True, decoder(self._value)
        except Exception as exc:  # kept for every aggregate sharing the decoder
            return False, exc
