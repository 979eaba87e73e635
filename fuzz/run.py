"""The fuzz runner: ``python -m fuzz.run --decoder NAME --runs 100000`` or ``--all``.

For each decoder it runs the coverage-guided harness (`fuzz.harness`, one libFuzzer process) from
the committed seed corpus ``fuzz/corpus/<decoder>/`` until `--runs` inputs were executed, with a
progress bar, then prints a JSON summary: inputs run, crashes, corpus size and seconds per decoder.

A crash stops libFuzzer; the runner copies the input to ``fuzz/crashes/<decoder>/`` (where the
suite replays it forever after), notes the exception, and starts the harness again for the
remaining inputs, so one run reports every distinct crash it meets. Inputs that reached new
coverage are kept in the corpus (libFuzzer already reduces them; at most `--keep` new files, the
smallest first, so the committed corpus stays small). ``--decoder http-api`` is the live run:
schemathesis against a real stack (`fuzz.http_api`).

Exit status: 0 when no decoder crashed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

from fuzz.targets import DECODERS

ROOT = Path(__file__).resolve().parent
CORPUS = ROOT / "corpus"
CRASHES = ROOT / "crashes"
DICTS = ROOT / "dicts"
MAX_LEN = 4096
MAX_RESTARTS = 50
_COUNT = re.compile(r"^#(\d+)\s")
_EXECUTED = re.compile(r"stat::number_of_executed_units:\s*(\d+)")


def write_seeds() -> dict[str, int]:
    """Write the seed inputs (from `targets.seeds`) into each decoder's corpus directory."""
    from fuzz.targets import seeds

    counts = {}
    for name, values in seeds().items():
        folder = CORPUS / name
        folder.mkdir(parents=True, exist_ok=True)
        for value in values:
            (folder / f"seed-{hashlib.sha1(value).hexdigest()[:16]}").write_bytes(value)  # noqa: S324 - a name
        counts[name] = len(values)
    return counts


def _crash_signature(log: str) -> str:
    """The exception type and the innermost Watchtower frame of a crash's traceback."""
    lines = log.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if "Uncaught Python exception" in line)
    except StopIteration:
        if any(line.startswith("Traceback") for line in lines):  # the harness itself failed
            last = next(line for line in reversed(lines) if line.strip() and not line.startswith(" "))
            return f"harness error: {last.strip()}"
        found = next((line for line in lines if "ERROR: libFuzzer" in line), "libFuzzer error")
        return re.sub(r"^==\d+== ", "", found.strip())
    block = lines[start:]
    frames = [line.strip() for line in block if line.strip().startswith('File "') and "watchtower" in line]
    kind = next((line.strip() for line in block[1:] if line and not line.startswith((" ", "Traceback"))), "?")
    return f"{kind} at {frames[-1] if frames else '?'}"


def fuzz_decoder(name: str, runs: int, keep: int, seed: int | None) -> dict[str, Any]:
    """Run `name`'s harness for `runs` inputs; returns its summary row."""
    corpus = CORPUS / name
    crash_dir = CRASHES / name
    corpus.mkdir(parents=True, exist_ok=True)
    done, restarts, signatures = 0, 0, []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"fuzz-{name}-") as tmp:
        work, artifacts = Path(tmp, "corpus"), Path(tmp, "artifacts")
        work.mkdir()
        artifacts.mkdir()
        bar = tqdm(total=runs, desc=f"{name:>11}", unit="in", leave=True, file=sys.stderr)
        while done < runs and restarts <= MAX_RESTARTS:
            # -timeout=0: on a starved machine libFuzzer's per-input alarm fires spuriously, and its
            # handler can deadlock the Python process; a slow decoder shows in seconds per decoder.
            argv = [sys.executable, "-m", "fuzz.harness", name, f"-runs={runs - done}", f"-max_len={MAX_LEN}",
                    f"-artifact_prefix={artifacts}/", "-print_final_stats=1", "-timeout=0", "-rss_limit_mb=4096"]
            if seed is not None:
                argv.append(f"-seed={seed + restarts}")
            if (DICTS / f"{name}.dict").exists():
                argv.append(f"-dict={DICTS / f'{name}.dict'}")
            argv += [str(work), str(corpus)]
            log, executed, last = [], None, 0
            with subprocess.Popen(argv, cwd=ROOT.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, errors="replace") as proc:
                assert proc.stdout is not None  # atheris prints the uncaught exception on stdout
                for line in proc.stdout:
                    log.append(line)
                    if (m := _COUNT.match(line)) is not None:
                        count = int(m.group(1))
                        bar.update(max(0, min(count, runs - done) - last))
                        last = max(last, min(count, runs - done))
                    if (m := _EXECUTED.search(line)) is not None:
                        executed = int(m.group(1))
            ran = executed if executed is not None else last
            bar.update(max(0, min(ran, runs - done) - last))
            done += ran
            if proc.returncode == 0:
                break
            text = "".join(log)
            signatures.append(_crash_signature(text))
            restarts += 1
            crash_dir.mkdir(parents=True, exist_ok=True)
            for artifact in artifacts.iterdir():
                shutil.move(str(artifact), crash_dir / artifact.name)
            if ran == 0:  # the same input crashes at start-up (a corpus file): stop, it is reported
                signatures.append("crashed before running any input (a corpus file crashes)")
                break
        bar.close()
        added = _keep_new(work, corpus, keep)
    return {"decoder": name, "inputs": done, "crashes": len(signatures), "distinct_crashes": sorted(set(signatures)),
            "corpus_size": sum(1 for _ in corpus.iterdir()), "new_corpus_files": added,
            "seconds": round(time.monotonic() - started, 1)}


def _keep_new(work: Path, corpus: Path, keep: int) -> int:
    """Copy up to `keep` of the inputs libFuzzer kept for new coverage into the committed corpus."""
    known = {p.read_bytes() for p in corpus.iterdir()}
    fresh = sorted((p for p in work.iterdir() if p.read_bytes() not in known), key=lambda p: (p.stat().st_size, p.name))
    room = max(0, keep - sum(1 for p in corpus.iterdir() if not p.name.startswith("seed-")))
    for path in fresh[:room]:
        shutil.copy(path, corpus / path.name)
    return min(room, len(fresh))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz.run", description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--decoder", choices=[*DECODERS, "http-api"])
    which.add_argument("--all", action="store_true", help="every decoder (not http-api, which needs a stack)")
    which.add_argument("--write-seeds", action="store_true", help="regenerate the seed files of every corpus")
    parser.add_argument("--runs", type=int, default=100_000, help="inputs per decoder (http-api: examples per "
                                                                  "operation and mode)")
    parser.add_argument("--keep", type=int, default=150, help="at most this many non-seed corpus files per decoder")
    parser.add_argument("--seed", type=int, default=None, help="libFuzzer seed, for a repeatable run")
    parser.add_argument("--json-out", type=Path, default=None, help="also write the summary to this file")
    args = parser.parse_args(argv)
    if args.write_seeds:
        print(json.dumps(write_seeds(), indent=2))
        return 0
    if args.decoder == "http-api":
        from fuzz.http_api import run_http_api

        summary: dict[str, Any] = run_http_api(args.runs)
        failed = summary["server_errors"] + summary["schema_breaks"] + summary["missing_codes"] > 0
    else:
        names = list(DECODERS) if args.all else [args.decoder]
        rows = [fuzz_decoder(name, args.runs, args.keep, args.seed) for name in names]
        summary = {"runs_per_decoder": args.runs, "decoders": rows,
                   "total_inputs": sum(r["inputs"] for r in rows), "total_crashes": sum(r["crashes"] for r in rows)}
        failed = summary["total_crashes"] > 0
    text = json.dumps(summary, indent=2)
    print(text)
    if args.json_out is not None:
        args.json_out.write_text(text + "\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
