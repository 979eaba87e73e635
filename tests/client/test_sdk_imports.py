"""The SDK imports only `watchtower.protocol` and `watchtower.schemas` (and its own modules), plus the
shared key files (`watchtower.home`) and HTTP transports (`watchtower.http.api_client`, `.keymgr_client`).

The SDK is what an application embeds to talk to a Watchtower API: every module of
`watchtower.client`, found by walking the package (a new module is checked without being listed).
It must not pull in Faust or aiohttp, nor the worker, read-side, gateway or local-stack packages.
Only the modules that read Kafka (`KAFKA_READERS`: push deliveries and replays) may also import
`watchtower.topics`, whose readers hold the Kafka client: no SDK module imports the client itself,
and every other module stays off Kafka too. The check
walks the source (ast) of every module reachable from the SDK, so an import buried in a function
counts too.
"""

from __future__ import annotations

import ast
import importlib.util
import pkgutil
import subprocess
import sys
from pathlib import Path

import watchtower.client

SDK_MODULES = ("watchtower.client", *sorted(m.name for m in pkgutil.walk_packages(watchtower.client.__path__,
                                                                                    "watchtower.client.")))
#: The SDK modules that read Kafka themselves (a push subscriber's deliveries, a replay's records).
KAFKA_READERS = frozenset({"watchtower.client.push", "watchtower.client.replay"})
#: Beyond the core and the codec: the home's key files, and the two HTTP transports the SDK shares with
#: the servers that call the API and the key manager (the rest of `watchtower.http` is the server).
ALLOWED_PREFIXES = ("watchtower.protocol", "watchtower.schemas", "watchtower.home", "watchtower.http.api_client",
                    "watchtower.http.keymgr_client")
READER_PREFIXES = (*ALLOWED_PREFIXES, "watchtower.topics")
# Third-party packages that belong to the server side.
SERVER_ONLY = ("confluent_kafka", "faust", "mode", "aiohttp", "fastavro")
#: The Kafka client and what reads Kafka for it: only KAFKA_READERS (and what they reach) may import them.
KAFKA_ONLY = ("confluent_kafka", "watchtower.topics")


def _source(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    assert spec is not None, module
    assert spec.origin is not None, module
    return Path(spec.origin)


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ModuleNotFoundError, ValueError):
        return False


def imports_of(module: str) -> set[str]:
    """Every module `module`'s source imports, at any depth of its code (relative imports resolved)."""
    path = _source(module)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            # `from watchtower.client import account` imports the module watchtower.client.account.
            found.update(f"{base}.{a.name}" for a in node.names if base.startswith("watchtower")
                         and _is_module(f"{base}.{a.name}"))
    return found


def sdk_closure(roots: tuple[str, ...] = SDK_MODULES) -> dict[str, set[str]]:
    """Each watchtower module reachable from `roots`, with what it imports."""
    seen: dict[str, set[str]] = {}
    todo = list(roots)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen[module] = imports_of(module)
        todo.extend(m for m in seen[module] if m.startswith("watchtower.") and m not in seen)
    return seen


def test_the_walk_finds_every_module_of_the_sdk() -> None:
    files = {p.stem for p in Path(watchtower.client.__file__).parent.glob("*.py") if p.stem != "__init__"}
    assert {m.rpartition(".")[2] for m in SDK_MODULES if m != "watchtower.client"} == files
    assert set(SDK_MODULES) >= KAFKA_READERS


def test_sdk_modules_import_only_protocol_and_schemas() -> None:
    closure = sdk_closure()
    assert set(SDK_MODULES) <= set(closure)
    offending = {(module, imported) for module, imports in closure.items() for imported in imports
                 if imported.startswith("watchtower") and imported != "watchtower"
                 and not imported.startswith(READER_PREFIXES if module in KAFKA_READERS or
                                             module.startswith("watchtower.topics") else ALLOWED_PREFIXES)
                 and imported not in SDK_MODULES}
    assert not offending, f"the SDK reaches outside protocol/ and schemas/: {sorted(offending)}"


def test_no_module_the_sdk_reaches_imports_a_server_side_package() -> None:
    offending = {(module, imported) for module, imports in sdk_closure().items() for imported in imports
                 if imported.split(".")[0] in SERVER_ONLY and not module.startswith("watchtower.schemas")
                 and not (imported.split(".")[0] == "confluent_kafka" and module.startswith("watchtower.topics"))}
    assert not offending, f"the SDK pulls in server-side packages: {sorted(offending)}"


def test_only_the_kafka_readers_reach_the_kafka_client() -> None:
    """An SDK module that is not a Kafka reader reaches neither Kafka nor `watchtower.topics`,
    through any chain of imports that does not pass through a Kafka reader."""
    others = tuple(m for m in SDK_MODULES if m not in KAFKA_READERS)
    seen: dict[str, set[str]] = {}
    todo = list(others)
    while todo:
        module = todo.pop()
        if module in seen or module in KAFKA_READERS:
            continue
        seen[module] = imports_of(module)
        todo.extend(m for m in seen[module] if m.startswith("watchtower.") and m not in seen)
    offending = {(module, imported) for module, imports in seen.items() for imported in imports
                 if imported.startswith(KAFKA_ONLY)}
    assert not offending, f"an SDK module that is not a Kafka reader reaches Kafka: {sorted(offending)}"


def test_importing_the_sdk_loads_no_kafka_faust_or_server_package() -> None:
    """The same rule at run time, in a fresh interpreter (catches imports the ast walk cannot see)."""
    probe = ("import sys\n" + "".join(f"import {m}\n" for m in SDK_MODULES if m not in KAFKA_READERS) +
             "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('confluent_kafka', 'faust', 'aiohttp')"
             " or m.startswith(('watchtower.workers', 'watchtower.projections', 'watchtower.topics', "
             "'watchtower.local', 'watchtower.gateway', 'watchtower.cli.')) or m == 'watchtower.cli')\n"
             "print(','.join(bad))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"importing the SDK loaded {out}"


def test_the_walk_sees_an_import_hidden_in_a_function(tmp_path: Path) -> None:
    """The checker itself: a lazy import of a forbidden package inside a function is found."""
    pkg = tmp_path / "probe_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("def f():\n    from watchtower.topics.catalogue import topic_name\n"
                                "    from .sibling import g\n    return topic_name, g\n")
    sys.path.insert(0, str(tmp_path))
    try:
        assert {"watchtower.topics.catalogue", "probe_pkg.sibling"} <= imports_of("probe_pkg.mod")
    finally:
        sys.path.remove(str(tmp_path))
