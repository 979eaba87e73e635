"""The SDK imports only `watchtower.protocol` and `watchtower.schemas` (and its own modules).

The SDK is what an application embeds to talk to a Watchtower API: `watchtower.client` itself and
the modules listed in `SDK_MODULES`. It must not pull in Kafka, Faust or aiohttp, nor the worker,
read-side, gateway or local-stack packages. The check walks the source (ast) of every module
reachable from the SDK, so an import buried in a function counts too.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

SDK_MODULES = ("watchtower.client", "watchtower.client.sdk", "watchtower.client.account", "watchtower.client.http",
               "watchtower.client.home", "watchtower.client.fake", "watchtower.client.stream_modes")
ALLOWED_PREFIXES = ("watchtower.protocol", "watchtower.schemas")
# Third-party packages that belong to the server side.
SERVER_ONLY = ("confluent_kafka", "faust", "mode", "aiohttp", "fastavro")


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


def sdk_closure() -> dict[str, set[str]]:
    """Each watchtower module reachable from the SDK, with what it imports."""
    seen: dict[str, set[str]] = {}
    todo = list(SDK_MODULES)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen[module] = imports_of(module)
        todo.extend(m for m in seen[module] if m.startswith("watchtower.") and m not in seen)
    return seen


def test_sdk_modules_import_only_protocol_and_schemas() -> None:
    closure = sdk_closure()
    assert set(SDK_MODULES) <= set(closure)
    offending = {(module, imported) for module, imports in closure.items() for imported in imports
                 if imported.startswith("watchtower") and imported != "watchtower"
                 and not imported.startswith(ALLOWED_PREFIXES) and imported not in SDK_MODULES}
    assert not offending, f"the SDK reaches outside protocol/ and schemas/: {sorted(offending)}"


def test_no_module_the_sdk_reaches_imports_a_server_side_package() -> None:
    offending = {(module, imported) for module, imports in sdk_closure().items() for imported in imports
                 if imported.split(".")[0] in SERVER_ONLY and not module.startswith("watchtower.schemas")}
    assert not offending, f"the SDK pulls in server-side packages: {sorted(offending)}"


def test_importing_the_sdk_loads_no_kafka_faust_or_server_package() -> None:
    """The same rule at run time, in a fresh interpreter (catches imports the ast walk cannot see)."""
    probe = ("import sys\n" + "".join(f"import {m}\n" for m in SDK_MODULES) +
             "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('confluent_kafka', 'faust', 'aiohttp')"
             " or m.startswith(('watchtower.agents', 'watchtower.projections', 'watchtower.topics', "
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
