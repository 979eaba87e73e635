"""The import rules of docs/architecture.md, held against the code.

Every module of `watchtower` is parsed (ast, so an import inside a function counts too) and each
import of another watchtower package is checked against `MAY_IMPORT`. A new arrow the wrong way, or
a new package that is not in the table, fails here; so does any cycle between packages.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

import watchtower

ROOT = Path(watchtower.__file__).parent

#: Each package and the watchtower packages it may import (docs/architecture.md, "The rooms").
MAY_IMPORT: dict[str, frozenset[str]] = {
    "protocol": frozenset(),
    "logs": frozenset(),
    "tracing": frozenset(),
    "home": frozenset({"protocol"}),  # the per-user home, its seed files and the KEK wrap
    "schemas": frozenset({"protocol"}),
    "topics": frozenset({"protocol"}),
    "http": frozenset({"home", "protocol", "topics"}),
    "metrics": frozenset({"home", "protocol", "topics", "tracing"}),
    "workers": frozenset({"logs", "metrics", "protocol", "schemas", "topics", "tracing"}),
    "delivery": frozenset({"workers", "logs", "metrics", "protocol", "schemas", "topics", "tracing"}),
    "replay": frozenset({"logs", "workers", "metrics", "protocol", "schemas", "topics"}),
    "projections": frozenset({"http", "metrics", "protocol", "schemas", "topics", "tracing"}),
    "gateway": frozenset({"http", "logs", "metrics", "protocol", "schemas", "topics", "tracing"}),
    # The vault writes through the one transactional writer (`workers.tx_writer`).
    "keymgr": frozenset({"home", "logs", "http", "metrics", "protocol", "schemas", "topics", "tracing", "workers"}),
    "api": frozenset({"gateway", "logs", "metrics", "projections"}),
    # topics: only its Kafka readers (test_sdk_imports); http: the API's and the key manager's transports
    "client": frozenset({"home", "http", "protocol", "schemas", "topics"}),
    "local": frozenset({"home", "topics"}),
    "spark": frozenset({"protocol", "schemas", "topics"}),
    # gateway: its Kafka transport only; http: the command and key-manager transports
    # The scheduler writes through the one transactional writer (`workers.tx_writer`).
    "ingest": frozenset({"gateway", "home", "http", "logs", "metrics", "protocol", "schemas", "topics", "workers"}),
    "cli": frozenset({"client", "gateway", "ingest", "keymgr", "local", "metrics", "protocol", "schemas", "spark",
                      "topics"}),
}
#: Arrows that must never be, not even through other packages (the house's "never" rules):
#: (importer, imported, why).
NEVER: tuple[tuple[str, str, str], ...] = (
    ("ingest", "client", "servers never import the SDK"),
    ("ingest", "keymgr", "ingestion is a client of the key manager, not its internals"),
    ("metrics", "local", "metrics know no local stack"),
    ("spark", "local", "a job runs on any cluster"),
)
#: Modules directly under watchtower/ (not packages): imported by anyone, importing nothing of ours.
LEAVES = frozenset({"__init__"})


def package_of(path: Path) -> str:
    rel = path.relative_to(ROOT)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def watchtower_imports(path: Path) -> set[str]:
    """The watchtower packages `path` imports, at any depth of its code."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "watchtower":
                names = [f"watchtower.{alias.name}" for alias in node.names  # a package, not a name like __version__
                         if (ROOT / alias.name).is_dir() or (ROOT / f"{alias.name}.py").exists()]
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            raise AssertionError(f"{path}: a relative import; write it absolute")
        found.update(n.split(".")[1] for n in names if n.startswith("watchtower.") and n.count(".") >= 1)
    return found


def arrows() -> dict[str, dict[str, set[str]]]:
    """package -> imported package -> the files that import it."""
    out: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path in sorted(ROOT.rglob("*.py")):
        source = package_of(path)
        for target in watchtower_imports(path) - {source}:
            out[source][target].add(str(path.relative_to(ROOT.parent)))
    return out


def test_every_package_is_in_the_table() -> None:
    packages = {package_of(p) for p in ROOT.rglob("*.py")} - LEAVES
    assert packages == set(MAY_IMPORT), ("a package is missing from MAY_IMPORT (and docs/architecture.md), or "
                                         f"gone from the code: {sorted(packages ^ set(MAY_IMPORT))}")


def test_every_import_follows_the_table() -> None:
    wrong = {f"{source} -> {target}: {sorted(files)}" for source, targets in arrows().items()
             for target, files in targets.items() if target not in MAY_IMPORT.get(source, frozenset())}
    assert not wrong, "imports against docs/architecture.md:\n" + "\n".join(sorted(wrong))


def test_the_table_has_no_cycle() -> None:
    """The allowed arrows form a layering (so the code, which follows them, has no package cycle)."""
    done: set[str] = set()

    def visit(package: str, path: tuple[str, ...]) -> None:
        assert package not in path, f"a cycle: {' -> '.join((*path, package))}"
        if package in done:
            return
        for target in MAY_IMPORT[package]:
            visit(target, (*path, package))
        done.add(package)

    for package in MAY_IMPORT:
        visit(package, ())


def reachable(package: str) -> set[str]:
    """Every package `package` may import, directly or through the packages it imports (by `MAY_IMPORT`)."""
    seen: set[str] = set()
    todo = list(MAY_IMPORT[package])
    while todo:
        target = todo.pop()
        if target not in seen:
            seen.add(target)
            todo.extend(MAY_IMPORT[target])
    return seen


def test_no_never_arrow_is_allowed_even_through_other_packages() -> None:
    """The code follows `MAY_IMPORT` (test_every_import_follows_the_table), so a rule the table keeps
    transitively holds for the code: a package may not reach a forbidden one by way of a third."""
    broken = [f"{source} -> {target} ({why})" for source, target, why in NEVER if target in reachable(source)]
    assert not broken, "the import table allows a never-arrow:\n" + "\n".join(broken)


def test_no_module_makes_a_never_arrow() -> None:
    found = arrows()
    broken = [f"{source} -> {target} ({why}): {sorted(found[source][target])}" for source, target, why in NEVER
              if found.get(source, {}).get(target)]
    assert not broken, "imports that break a never-rule:\n" + "\n".join(broken)


def test_the_never_check_sees_a_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(MAY_IMPORT, "spark", MAY_IMPORT["spark"] | {"http"})
    monkeypatch.setitem(MAY_IMPORT, "http", MAY_IMPORT["http"] | {"local"})
    with pytest.raises(AssertionError, match="spark -> local"):
        test_no_never_arrow_is_allowed_even_through_other_packages()


def test_the_check_sees_an_import_hidden_in_a_function(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from watchtower.workers.decider import Touched\n    import watchtower.cli.main\n")
    assert watchtower_imports(module) == {"workers", "cli"}


# --- Kafka at the edges -----------------------------------------------------------------------------
#: Where the Kafka client may be imported: the topics edge and the one transactional host.
KAFKA_CLIENT_HOMES = ("topics", "workers")
#: Where Faust may be imported: the modules where a Faust app runs (the projection/API worker, its
#: web views and routes, its worker logging) and the probe that checks the Faust client stack.
FAUST_HOMES = frozenset({
    "topics/faust_settings.py",
    "projections/consumer.py", "projections/service.py", "projections/keymgr_routes.py",
    "projections/replay_routes.py", "projections/stream_routes.py",
    "http/server.py",
    "logs/faust_worker.py",
    "local/faust_probe.py",
})


def third_party_imports(path: Path) -> set[str]:
    """The top-level names of every module `path` imports (``confluent_kafka``, ``faust``), at any depth."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_kafka_client_is_imported_only_at_the_edges() -> None:
    outside = sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
                     if "confluent_kafka" in third_party_imports(p) and package_of(p) not in KAFKA_CLIENT_HOMES)
    assert outside == [], (f"{outside} import confluent_kafka: take plain values from a watchtower.topics "
                           "module (or the host, watchtower.workers) instead")


def test_faust_is_imported_only_where_a_faust_app_runs() -> None:
    outside = sorted(rel for p in ROOT.rglob("*.py")
                     if "faust" in third_party_imports(p) and (rel := str(p.relative_to(ROOT))) not in FAUST_HOMES)
    assert outside == [], f"{outside} import faust outside the Faust apps ({sorted(FAUST_HOMES)})"


def test_the_edge_check_sees_an_import_hidden_in_a_function(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from confluent_kafka.admin import AdminClient\n    import faust.web\n")
    assert {"confluent_kafka", "faust"} <= third_party_imports(module)
