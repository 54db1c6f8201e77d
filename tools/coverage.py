"""The coverage sweep: every model type of transformers' causal-LM mapping, a tiny random
checkpoint of each imported by attndsl and its logits compared with transformers'
(tools/coverage_check.py), one row per type.

    .venv/bin/python tools/coverage.py [--types a,b] [--write docs/CHECKPOINTS.md] [--jobs N]
                                       [--genai] [--timeout S]

(the table in docs/CHECKPOINTS.md: `--genai --jobs 2 --write docs/CHECKPOINTS.md`)

Each type runs in a worker process (a hang or a crash of one type costs that type alone:
after `--timeout` seconds its worker is killed and the type is `skipped: timeout`). With
`--write FILE` the section of FILE between `<!-- coverage:begin -->` and
`<!-- coverage:end -->` is replaced by the table: deterministic (sorted, no timings), so it is
regenerated rather than written by hand. With `--types` too, those types' rows are replaced in
the table FILE holds, the others kept as last swept, and the counts recomputed (a family's
change can reword another type's refusal that reads it: the whole sweep rewrites those).
Needs transformers (the test extra), not a dependency of attndsl."""

from __future__ import annotations

import argparse
import json
import os
import re
import selectors
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BEGIN, END = "<!-- coverage:begin -->", "<!-- coverage:end -->"
COMMAND = ".venv/bin/python tools/coverage.py --genai --jobs 2 --write docs/CHECKPOINTS.md"
MEMORY = 10 << 30  # bytes of address space a worker may take (a config that is no tiny)
STATUSES = ("exact", "WRONG", "refused", "crash", "out of scope", "skipped")


def all_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def _worker(genai: bool) -> None:
    """Reads model types from stdin, one a line; writes each one's row as a JSON line."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.path.insert(0, str(HERE))
    import torch

    torch.set_num_threads(1)
    from coverage_check import Row, check

    out = sys.stdout
    sys.stdout = sys.stderr  # what a library prints stays off the answers
    for line in sys.stdin:
        model_type = line.strip()
        try:
            row = check(model_type, genai)
        except BaseException as exc:
            row = Row(model_type, "skipped", f"harness: {type(exc).__name__}: {exc}"[:300])
        out.write(json.dumps(row.__dict__) + "\n")
        out.flush()


class Worker:
    """One worker process; `run` answers a type's row or None after `timeout` seconds."""

    def __init__(self, genai: bool) -> None:
        argv = [sys.executable, str(Path(__file__).resolve()), "--worker"]
        if genai:
            argv.append("--genai")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, env=env,
                                     cwd=str(ROOT))

    def run(self, model_type: str, timeout: float) -> dict | None:
        self.proc.stdin.write(model_type + "\n")
        self.proc.stdin.flush()
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                return None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def sweep(types: list[str], jobs: int = 1, timeout: float = 300, genai: bool = False,
          progress=None) -> list[dict]:
    """Every type's row, in `types`' order, over `jobs` worker processes."""
    pending = list(reversed(types))
    rows: dict[str, dict] = {}
    lock = threading.Lock()

    def loop() -> None:
        worker = Worker(genai)
        try:
            while True:
                with lock:
                    if not pending:
                        return
                    model_type = pending.pop()
                row = worker.run(model_type, timeout)
                if row is None:  # a hang, or the worker died (out of memory): a new one
                    died = worker.proc.poll() is not None
                    worker.stop()
                    worker = Worker(genai)
                    row = {"model_type": model_type, "status": "skipped", "genai": "-",
                           "detail": "the worker died (out of memory?)" if died
                           else f"timeout after {timeout:g} s"}
                with lock:
                    rows[model_type] = row
                if progress:
                    progress(row)
        finally:
            worker.stop()

    threads = [threading.Thread(target=loop) for _ in range(max(1, min(jobs, len(types))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [rows[t] for t in types]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(rows: list[dict]) -> str:
    lines = ["| type | status | detail | genai |", "|---|---|---|---|"]
    for row in sorted(rows, key=lambda r: r["model_type"]):
        lines.append(f"| `{row['model_type']}` | {row['status']} | {_cell(row['detail'])} | "
                     f"{row['genai']} |")
    return "\n".join(lines)


def counts(rows: list[dict]) -> str:
    found = Counter(r["status"] for r in rows)
    return ", ".join(f"{found[s]} {s}" for s in STATUSES if found[s])


def section(rows: list[dict]) -> str:
    import transformers

    return (f"Made by `{COMMAND}` with transformers {transformers.__version__}, for every "
            f"model type of its causal-LM mapping ({len(rows)}): a tiny random checkpoint "
            "of each built from its config class, imported, compiled with `--weights` for "
            "ort-cpu and its logits (or, where attndsl imports the stack alone, its last "
            "hidden states) compared with transformers' at B = 2 with padding, within 1e-4 x "
            "max(1, max\\|ref\\|). `exact` gives the max error in those units; `refused` is "
            "attndsl's diagnostic, naming what it cannot express; `out of scope`, what the "
            "sweep does not build; `genai`: onnxruntime-genai's greedy tokens are "
            "transformers' (`yes`), or `-` where not run (`--genai` runs it). Counts: "
            f"{counts(rows)}.\n\n{table(rows)}\n")


def write(path: Path, rows: list[dict]) -> None:
    text = path.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{path}: no {BEGIN} ... {END} section to replace")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    path.write_text(f"{head}{BEGIN}\n{section(rows)}{END}{tail}")


def update(path: Path, rows: list[dict]) -> None:
    """`write` with `rows` in place of their types' rows in the table `path` holds."""
    write(path, list((read_table(path) | {r["model_type"]: r for r in rows}).values()))


def read_table(path: Path) -> dict[str, dict]:
    """The rows of the table in `path`'s coverage section, by model type."""
    text = path.read_text().split(BEGIN, 1)[1].split(END, 1)[0]
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\| `([^`]+)` \| ([^|]+) \| (.*) \| ([^|]*) \|$", line)
        if m:
            rows[m[1]] = {"model_type": m[1], "status": m[2].strip(),
                          "detail": m[3].replace("\\|", "|"), "genai": m[4].strip()}
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--types", help="comma-separated model types (default: every one)")
    parser.add_argument("--write", type=Path, help="replace the coverage section of this file")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per type")
    parser.add_argument("--genai", action="store_true",
                        help="for exact types, onnxruntime-genai's greedy tokens too")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.genai)
        return 0
    known = all_types()
    types = known if not args.types else args.types.split(",")
    unknown = sorted(set(types) - set(known))
    if unknown:
        parser.error(f"not in the causal-LM mapping: {', '.join(unknown)}")

    def progress(row: dict) -> None:
        print(f"{row['model_type']}: {row['status']} {row['detail']}", file=sys.stderr,
              flush=True)

    rows = sweep(types, args.jobs, args.timeout, args.genai, progress)
    print(table(rows))
    print(counts(rows))
    if args.write:
        (update if args.types else write)(args.write, rows)
    return 1 if any(r["status"] in ("WRONG", "crash") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
