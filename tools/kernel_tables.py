"""Regenerate attndsl/placement/{cpu,cuda}.json, ONNX Runtime's kernel tables.

  # the CPU provider's, from the installed onnxruntime (the CPU build)
  .venv/bin/python tools/kernel_tables.py cpu
  # the com.microsoft schemas, for the check where no onnxruntime is installed
  .venv/bin/python tools/kernel_tables.py schemas
  # the CUDA provider's, from ONNX Runtime's generated docs/OperatorKernels.md of a release
  # (github.com/microsoft/onnxruntime, docs/OperatorKernels.md at the release's tag)
  .venv/bin/python tools/kernel_tables.py cuda --markdown OperatorKernels.md \\
      --source "docs/OperatorKernels.md of onnxruntime at <commit>" --version 1.31
  # the kernels a GPU machine's onnxruntime-gpu ran that the markdown lacks, from the GPU
  # runs' placement keys (benchmarks/gpu_plan.py and tools/gpu_mrope.py write
  # placement-keys.json)
  .venv/bin/python tools/kernel_tables.py measured --keys gpu-results/placement-keys.json \\
      --device "NVIDIA H200" --version 1.31.1
  # (several runs' keys: repeat --keys; --merge adds a run on another machine, the one-node
  # probes of tools/gpu_kernels.py and tools/gpu_mrope.py, to the file's rows)

Each file holds the release it was read from, where, and one row per kernel: [domain, op,
first opset, last opset, {type constraint: [types]}], sorted, so that regenerating from the
same source gives the same bytes."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "attndsl" / "placement"
_MAX = 2**31 - 1
_ANCHORS = {"cpu": "cpuexecutionprovider", "cuda": "cudaexecutionprovider"}


def from_markdown(text: str, provider: str) -> list[list]:
    """The kernel rows of `provider`'s section of OperatorKernels.md."""
    start = text.index(f'<a name="{_ANCHORS[provider]}"/>')
    end = text.find('<a name="', start + 10)
    section = text[start:end if end > 0 else len(text)]
    rows, domain, op = [], "ai.onnx", None
    for line in section.splitlines():
        if not line.startswith("|") or line.startswith(("| Op Name", "|---", "| |")):
            continue
        cells = line.split("|")[1:-1]
        found = re.match(r"\*\*Operator Domain:\*\* \*(.+)\*", cells[0])
        if found:
            domain = found.group(1)
            continue
        if len(cells) != 4:
            raise ValueError(f"unexpected row: {line[:120]}")
        name, _params, versions, types = cells
        op = name or op
        rows.append([domain, op, *_versions(versions), _types(types)])
    return sorted(rows, key=json.dumps)


def _versions(text: str) -> tuple[int, int]:
    text = text.strip()
    if text.endswith("+"):
        return int(text[:-1]), _MAX
    if text.startswith("["):
        lo, hi = text.strip("[]").split(",")
        return int(lo), int(hi)
    return int(text), int(text)


def _types(text: str) -> dict[str, list[str]]:
    out = {}
    for part in text.split("<br/>"):
        found = re.match(r"\s*\*\*(\w+)\*\* = (.*)", part)
        if found:
            out[found.group(1)] = sorted(t.strip() for t in found.group(2).split(","))
    return out


def from_installed() -> tuple[str, list[list]]:
    sys.path.insert(0, str(ROOT))
    from attndsl.placement.tables import installed_cpu_rows

    found = installed_cpu_rows()
    if found is None:
        sys.exit("kernel_tables.py cpu: needs the CPU build of onnxruntime installed")
    version, rows = found
    return version, sorted(rows, key=json.dumps)


def measured(keys: list[Path], device: str, version: str) -> dict:
    """attndsl/placement/cuda-measured.json from GPU runs' placement keys (`placed`: the
    (domain, op, opset, types) of nodes its onnxruntime-gpu's CUDA provider took; `missing`:
    of those it logged "CUDA kernel not found" for): the placed keys the markdown's table
    lacks, each a kernel of exactly that version and those types, and the missing keys, which
    the check must keep naming."""
    sys.path.insert(0, str(ROOT))
    from attndsl.placement.tables import _shipped

    runs = [json.loads(k.read_text()) for k in keys]  # (several runs: their union)
    data = {part: sorted({json.dumps(k, sort_keys=True) for r in runs for k in r[part]})
            for part in ("placed", "missing")}
    data = {part: [json.loads(k) for k in keys] for part, keys in data.items()}
    shipped = _shipped("cuda", with_measured=False)
    placed = {(d, op, since, tuple(sorted(b.items()))) for d, op, since, b in data["placed"]}
    covered = {k for k in placed if any(
        kern.covers(k[2]) and all(t in kern.types.get(c, {t}) for c, t in k[3])
        for kern in shipped.of(k[0], k[1]))}
    # (domain, op, opset) -> constraint -> the types measured without a kernel: those a key
    # without one binds that no placed key of the version binds (a key binds several
    # constraints; which type lacked the kernel is the one never seen placed)
    seen = {(k[:3], c, t) for k in placed for c, t in k[3]}
    lacking = {}
    for d, op, since, b in data["missing"]:
        for c, t in b.items():
            if ((d, op, since), c, t) not in seen:
                lacking.setdefault((d, op, since), {}).setdefault(c, set()).add(t)
    # a version the run showed: the types seen, and those of the op's newest kernel in the
    # markdown (a new opset version's kernel takes its predecessor's types in ONNX Runtime),
    # less any measured without a kernel
    found: dict[tuple, dict[str, set[str]]] = {}
    for d, op, since, b in sorted(placed - covered):
        types = found.setdefault((d, op, since), {})
        newest = max(shipped.of(d, op), key=lambda k: k.since, default=None)
        for c, ts in (newest.types.items() if newest else ()):
            types.setdefault(c, set()).update(ts)
        for c, t in b:
            types.setdefault(c, set()).add(t)
    rows = [[d, op, since, since, {c: sorted(f"tensor({t})" for t in ts
                                               - lacking.get((d, op, since), {}).get(c, set()))
                                   for c, ts in sorted(types.items())}]
            for (d, op, since), types in sorted(found.items())]
    return {"onnxruntime": version, "provider": "cuda",
            "source": f"measured with onnxruntime-gpu {version} on an {device} (the nodes "
                      "its CUDA provider took in attndsl's models)",
            "missing": data["missing"], "kernels": rows}


def merged(old: dict, new: dict) -> dict:
    """Two measurements as one: the old file's kernels, then the new run's of op versions the
    old lacks, and both runs' keys without a kernel; each run's source said."""
    have = {tuple(r[:3]) for r in old["kernels"]}
    missing = {json.dumps(k, sort_keys=True) for k in old["missing"] + new["missing"]}
    return {"onnxruntime": new["onnxruntime"], "provider": "cuda",
            "source": f"{old['source']}; {new['source']}",
            "missing": [json.loads(k) for k in sorted(missing)],
            "kernels": sorted(old["kernels"] + [r for r in new["kernels"]
                                                if tuple(r[:3]) not in have], key=json.dumps)}


def contrib_schemas() -> list[list]:
    """The com.microsoft schemas of the installed onnxruntime, as the check reads them where
    no onnxruntime is installed: [op, since, inputs, outputs, constraints], each parameter as
    [name, type string, variadic]."""
    from onnxruntime.capi.onnxruntime_pybind11_state import get_all_operator_schema

    def params(ps):
        return [[p.name, p.typeStr, "Variadic" in str(p.option)] for p in ps]
    return sorted(([s.name, s.since_version, params(s.inputs), params(s.outputs),
                    {c.type_param_str: sorted(c.allowed_type_strs) for c in s.type_constraints}]
                   for s in get_all_operator_schema() if s.domain == "com.microsoft"),
                  key=json.dumps)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("provider", choices=("cpu", "cuda", "measured", "schemas"))
    parser.add_argument("--keys", action="append",
                        help="measured: a GPU run's placement-keys.json (repeat for several: "
                             "the GPU plan's, tools/gpu_mrope.py's)")
    parser.add_argument("--device", help="measured: the GPU it ran on")
    parser.add_argument("--merge", action="store_true",
                        help="measured: add to attndsl/placement/cuda-measured.json's rows "
                             "rather than replace them")
    parser.add_argument("--markdown", help="OperatorKernels.md to read the table from")
    parser.add_argument("--source", help="where the markdown came from (recorded)")
    parser.add_argument("--version", help="the onnxruntime release of the markdown")
    args = parser.parse_args()
    if args.provider == "schemas":
        import onnxruntime as ort

        path = OUT / "contrib-schemas.json"
        rows = contrib_schemas()
        path.write_text(json.dumps({"onnxruntime": ort.__version__})[:-1] + ', "schemas": [\n'
                        + ",\n".join(json.dumps(r, sort_keys=True) for r in rows) + "\n]}\n")
        print(f"wrote {path.relative_to(ROOT)}: {len(rows)} schemas", file=sys.stderr)
        return 0
    if args.provider == "measured":
        if not (args.keys and args.device and args.version):
            parser.error("measured needs --keys, --device and --version")
        data = measured([Path(k) for k in args.keys], args.device, args.version)
        path = OUT / "cuda-measured.json"
        if args.merge:  # beside what the file holds (an earlier run's, on another machine)
            data = merged(json.loads(path.read_text()), data)
        path.write_text(json.dumps({k: v for k, v in data.items() if k != "kernels"})[:-1]
                        + ', "kernels": [\n' + ",\n".join(json.dumps(r, sort_keys=True)
                                                          for r in data["kernels"]) + "\n]}\n")
        print(f"wrote {path.relative_to(ROOT)}: {len(data['kernels'])} kernels beyond the "
              f"markdown's, {len(data['missing'])} keys without one", file=sys.stderr)
        return 0
    if args.markdown:
        if not (args.source and args.version):
            parser.error("--markdown needs --source and --version")
        rows = from_markdown(Path(args.markdown).read_text(), args.provider)
        version, source = args.version, args.source
    elif args.provider == "cpu":
        version, rows = from_installed()
        source = f"onnxruntime {version}'s get_all_opkernel_def() (the CPU build)"
    else:
        parser.error("the CUDA table comes from --markdown (a GPU build's own table loads "
                     "every provider library it ships, and crashes without TensorRT)")
    head = {"onnxruntime": version, "provider": args.provider, "source": source}
    path = OUT / f"{args.provider}.json"
    path.write_text(json.dumps(head)[:-1] + ', "kernels": [\n'  # a kernel a line
                    + ",\n".join(json.dumps(row, sort_keys=True) for row in rows) + "\n]}\n")
    print(f"wrote {path.relative_to(ROOT)}: {len(rows)} kernels of onnxruntime {version}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
