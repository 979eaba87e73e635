"""A local cluster's data directory: the marker that claims it, and the KRaft storage it holds.

A fresh directory is claimed by writing `MARKER` (owner-only): the cluster id, drawn as Kafka
draws one, the node count, the Kafka version and whether the cluster is secure. Every later start
checks the directory against its marker and each node's ``meta.properties`` against both, and
refuses (LocalStackError, saying what to do) rather than reformat a directory that may hold data:
one not made by Watchtower, one with an unreadable marker, another node count or security, or a
node's storage of another cluster. `storage_format_argv` formats a node's storage with the id.
"""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

from watchtower.local.config import ClusterSpec, NodeSpec
from watchtower.local.errors import LocalStackError
from watchtower.local.jars import KAFKA_VERSION
from watchtower.local.processes import write_private

MARKER = "watchtower-kafka.json"


def claim_data_dir(spec: ClusterSpec) -> str:
    """The cluster id of `spec`'s data directory, creating the marker on a fresh directory.

    A non-empty directory without our marker, or with an unreadable marker or storage
    metadata that disagrees with it, is refused rather than reformatted: it may hold data.
    """
    marker = spec.data_dir / MARKER
    if not marker.exists():
        # Credentials placed before the first start are used instead of drawing new ones.
        foreign = [p.name for p in spec.data_dir.iterdir()
                   if p.name != ".lock" and p != spec.credentials_dir]
        if foreign:
            raise LocalStackError(
                f"data directory {spec.data_dir} is not empty and was not made by Watchtower "
                f"(found {', '.join(sorted(foreign)[:3])}); pass --data-dir with an empty or "
                "Watchtower-made directory"
            )
        cluster_id = random_cluster_id()
        write_private(marker, json.dumps({"cluster_id": cluster_id, "nodes": spec.nodes,
                                           "kafka_version": KAFKA_VERSION, "secure": spec.secure}))
        return cluster_id
    try:
        meta = json.loads(marker.read_text())
        cluster_id = str(meta["cluster_id"])
        nodes = int(meta["nodes"])
        secure = bool(meta.get("secure", False))
    except (ValueError, KeyError, TypeError) as exc:
        raise LocalStackError(
            f"data directory {spec.data_dir} is corrupt ({MARKER} unreadable: {exc}); "
            "remove it (`watchtower local down --purge`) or pass another --data-dir"
        ) from None
    if nodes != spec.nodes:
        raise LocalStackError(
            f"data directory {spec.data_dir} holds a {nodes}-node cluster, not {spec.nodes}; "
            "use the matching --nodes or another --data-dir"
        )
    if secure != spec.secure:
        have, want = ("secure", "plaintext") if secure else ("plaintext", "secure")
        raise LocalStackError(
            f"data directory {spec.data_dir} holds a {have} cluster, not a {want} one; "
            f"{'add' if secure else 'drop'} --secure, or remove it (`watchtower local down --purge`)"
        )
    for node in spec.all_node_specs:
        _check_storage_meta(node, cluster_id)
    return cluster_id


def _check_storage_meta(node: NodeSpec, cluster_id: str) -> None:
    meta = node.log_dirs / "meta.properties"
    if not meta.exists():
        return
    props: dict[str, str] = {}
    for line in meta.read_text(errors="replace").splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            props[key.strip()] = value.strip()
    if props.get("cluster.id") != cluster_id or props.get("node.id") != str(node.node_id):
        raise LocalStackError(
            f"data directory {node.log_dirs} is corrupt or belongs to another cluster "
            f"(meta.properties does not match {MARKER}); remove it (`watchtower local down --purge`) "
            "or pass another --data-dir"
        )


def recorded_secure(data_dir: Path) -> bool:
    """Whether the cluster formatted in ``data_dir`` is secure (False when there is none yet)."""
    try:
        return bool(json.loads((data_dir / MARKER).read_text()).get("secure", False))
    except (OSError, ValueError, AttributeError):
        return False


# Kafka's Uuid.randomUuid() never returns these (Uuid.RESERVED: ZERO_UUID and ONE_UUID).
_RESERVED_IDS = (bytes(16), bytes(15) + b"\x01")


def random_cluster_id() -> str:
    """A KRaft cluster id drawn exactly as Kafka's ``Uuid.randomUuid()`` draws one.

    A random (version 4) UUID, written as URL-safe base64 without padding (22 characters), drawn
    again while it is reserved or starts with ``-``: URL-safe base64 starts with ``-`` once in 64
    draws, and command-line tools would read such an id as an option.
    """
    while True:
        raw = uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
        if raw not in _RESERVED_IDS and not text.startswith("-"):
            return text


def storage_format_argv(cp: str, node: NodeSpec, cluster_id: str) -> list[str]:
    """The ``kafka-storage format`` command for ``node``.

    The id is passed as ``--cluster-id=ID`` (one argument) so the tool can never parse it as an
    option, whatever its first character: ids from other tools or older data directories may
    start with ``-`` even though :func:`random_cluster_id` never draws one.
    """
    return ["java", "-cp", cp, f"-Dlog4j2.configurationFile={node.log4j_file}",
            "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(node.properties_file)]


__all__ = ["MARKER", "claim_data_dir", "random_cluster_id", "recorded_secure", "storage_format_argv"]
