"""`attndsl bench --decode HF_FOLDER`: generation speed, side by side in one run: attndsl's
decoding model (imported from the checkpoint, run by `decoding.generate` in ONNX Runtime),
and, where installed, onnxruntime-genai running attndsl's genai folder and the model its own
builder makes from the same checkpoint (the same loop for both), and transformers'
`generate`. Per prompt length: the first-token latency (prefill)
and the median ms per later token, against the memory-bandwidth floor: the bytes a token step
must read (every weight once, but one embedding row, and the KV cache) over the bandwidth this
machine measures with the same thread count."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .targets import CPU_TARGET  # the bench runs on the CPU: its plan

__all__ = ["DecodeRow", "bench_decode", "measure_bandwidth", "render_decode"]


@dataclass
class DecodeRow:
    backend: str
    prompt: int
    new: int
    first_token_ms: float
    ms_per_token: float
    floor_ms: float  # bytes read per token step / measured bandwidth
    note: str = ""
    precision: str = "fp32"  # of its weights: fp32, int8 or int4

    @property
    def tokens_per_s(self) -> float:
        return 1000.0 / self.ms_per_token if self.ms_per_token else math.nan


def last_level_cache() -> int | None:
    """Bytes of the CPU's largest cache level (Linux sysfs), or None where it cannot be read."""
    sizes = {}
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:], 1)
        if text.rstrip("KMG").isdigit():
            sizes[level] = int(text.rstrip("KMG")) * scale
    return sizes[max(sizes)] if sizes else None


def measure_bandwidth(threads: int, mib: float = 512, repeat: int = 7) -> float:
    """Read bandwidth in bytes/s as a decoding step meets it: ONNX Runtime, with `threads`
    threads, multiplying one row by a float32 matrix of `mib` MiB (a GEMV reads every weight
    once; the default is larger than the caches: DRAM's); the best of `repeat` runs."""
    from onnx import TensorProto, helper

    from .backends.runtime import onnxruntime

    ort = onnxruntime()

    k = 4096
    n = max(1, int(mib * 1024 * 1024) // (4 * k))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "gemv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [k, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    w = np.random.default_rng(0).standard_normal((k, n), dtype=np.float32)
    x = np.ones((1, k), dtype=np.float32)
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        session.run(None, {"x": x, "w": w})
        best = min(best, time.perf_counter() - start)
    return w.nbytes / best


BUILDER = "onnxruntime-genai builder"
# bytes a weight takes per precision: int4 and int8 codes with a float32 scale per block of 32
BYTES_PER_WEIGHT = {"fp32": 4.0, "int8": 1 + 4 / 32, "int4": 0.5 + 4 / 32}


def bench_decode(source: Path, *, prompts: Sequence[int] = (128, 2048), new: int = 64,
                 threads: int = 2, repeat: int = 3,
                 baselines: Sequence[str] = ("genai", "transformers"),
                 precisions: Sequence[str] = ("fp32",),
                 progress: Callable[[str], None] | None = None) -> tuple[list[DecodeRow], dict]:
    """Rows for every prompt length and backend (medians of `repeat` generations, run
    round-robin), and the machine facts the table states. Each of `precisions` (fp32, int8,
    int4) gives attndsl's model and the builder's at that precision (`--quantize`: blocks of
    32, symmetric, accuracy_level 4, the builder's CPU defaults); transformers runs fp32."""
    from .hf_fields import read_config

    cfg, _ = read_config(source)
    layers, kv = cfg["num_hidden_layers"], cfg.get("num_key_value_heads",
                                                   cfg["num_attention_heads"])
    head = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    window = cfg.get("sliding_window")
    weights = _weight_bytes(source, cfg)
    bandwidth = measure_bandwidth(threads)  # from DRAM
    llc = last_level_cache()
    cached: dict[float, float] = {}  # working-set MiB -> bandwidth measured at that size

    def floor(prompt: int, precision: str = "fp32") -> float:
        """ms: weights (at `precision`) plus the average cache read over the generated
        tokens, over DRAM's bandwidth; or, when they fit in the last-level cache, over the
        bandwidth measured at their size (from the cache: no DRAM floor applies)."""
        keys = prompt + (new - 1) / 2
        if window:
            keys = min(keys, window)
        step = weights * BYTES_PER_WEIGHT[precision] / 4 + 2 * layers * kv * head * 4 * keys
        if llc is None or step > llc:
            return 1000.0 * step / bandwidth
        mib = round(step / 2**20, 1)
        if mib not in cached:
            cached[mib] = measure_bandwidth(threads, mib)
        return 1000.0 * step / cached[mib]

    # (name, precision, run)
    runners: list[tuple[str, str, Callable[[list[int], int], tuple[float, list[float]]]]] = []
    with tempfile.TemporaryDirectory(prefix="attndsl-bench-") as tmp:
        notes = {}
        for p in precisions:
            runners.append((f"attndsl ({CPU_TARGET}, {p})", p,
                            _attndsl(source, Path(tmp), threads, p)))
            if "genai" in baselines:  # attndsl's genai folder, and the builder's, in genai
                for name, make in (("attndsl folder in onnxruntime-genai", _attndsl_folder),
                                   (BUILDER, _builder_folder)):
                    made = _in_genai(make(source, Path(tmp), p), threads)
                    if isinstance(made, str):
                        notes[f"{name} ({p})"] = made
                    else:
                        runners.append((f"{name} ({p})", p, made))
        if "transformers" in baselines:
            made = _transformers(source, threads)
            if isinstance(made, str):
                notes["transformers generate"] = made
            else:
                runners.append(("transformers generate", "fp32", made))
        rows = []
        rng = np.random.default_rng(0)
        vocab = cfg["vocab_size"]
        for prompt in prompts:
            ids = [int(t) for t in rng.integers(3, vocab, size=prompt)]
            firsts: dict[str, list[float]] = {name: [] for name, _, _ in runners}
            steps: dict[str, list[float]] = {name: [] for name, _, _ in runners}
            for _, _, run in runners:  # warm-up at this prompt length (arenas, caches)
                run(ids, 2)
            for r in range(repeat):  # round-robin: a slow spell hits every backend alike,
                # in the opposite order every other round: no backend always runs first
                for name, _, run in runners if r % 2 == 0 else runners[::-1]:
                    if progress:
                        progress(f"decode bench: prompt {prompt}, {name}", r, repeat)
                    first, times = run(ids, new)
                    firsts[name].append(first)
                    steps[name].append(float(np.median(times)))
            for name, precision, _ in runners:
                rows.append(DecodeRow(name, prompt, new, 1000 * float(np.median(firsts[name])),
                                      1000 * float(np.median(steps[name])),
                                      floor(prompt, precision), precision=precision))
        for name, why in notes.items():
            rows.append(DecodeRow(name, 0, new, math.nan, math.nan, math.nan, why))
    facts = {"threads": threads, "bandwidth_gb_s": bandwidth / 1e9,
             "llc_mb": llc / 1e6 if llc else None,
             "in_cache": {mib: bw / 1e9 for mib, bw in cached.items()},
             "weights_mb": weights / 1e6, "layers": layers, "kv_heads": kv, "head_dim": head,
             "window": window}
    return rows, facts


def _weight_bytes(source: Path, cfg: dict) -> int:
    """float32 bytes a token step reads: every parameter but the embedding table (one row)."""
    from .checkpoints import open_checkpoint

    ckpt = open_checkpoint(source)
    total = sum(4 * math.prod(ckpt.shape(n)) for n in ckpt.files)
    embed = 4 * cfg["vocab_size"] * cfg["hidden_size"]
    tied = cfg.get("tie_word_embeddings", False)
    return total - (0 if tied else embed) + 4 * cfg["hidden_size"]


def _attndsl(source: Path, tmp: Path, threads: int, precision: str = "fp32"):
    from .api import loads
    from .backends.runtime import make_session
    from .decoding import generate
    from .genai import folder_context
    from .hf_import import import_config
    from .quantize import Quantization

    program = loads(import_config(source), "imported.attn")
    layer = next(program[n] for n in program if getattr(program[n].spec, "vocab", None))
    quantize = None if precision == "fp32" else Quantization(int(precision[3:]))
    session = make_session(layer.decoder_model(
        target=CPU_TARGET, weights=source, quantize=quantize,
        max_length=folder_context(str(source))), "cpu", threads=threads)

    def run(ids: list[int], new: int) -> tuple[float, list[float]]:
        g = generate(session, [ids], new)
        return g.first_token_s, g.step_s

    generate(session, [[3, 4, 5]], 3)  # warm-up
    return run


def _builder_folder(source: Path, tmp: Path, precision: str) -> Path | str:
    """onnxruntime-genai's own model of the checkpoint (CPU, at `precision`), or why there is
    none."""
    if not (source / "tokenizer.json").is_file():  # the builder saves a tokenizer
        return "the builder needs tokenizer.json in the checkpoint folder " \
               "(benchmarks/make_llama.py writes one)"
    out = tmp / f"genai_builder_{precision}"
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(source), "-o",
           str(out), "-p", precision, "-e", "cpu"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"its builder failed: {done.stderr.strip().splitlines()[-1:]}"
    return out


def _attndsl_folder(source: Path, tmp: Path, precision: str) -> Path | str:
    """attndsl's onnxruntime-genai folder of the checkpoint (as `compile --export genai`
    writes it, through the library: `genai.genai_folder`), or why there is none."""
    from .api import loads
    from .errors import ExportError, SpecError, UsageError
    from .genai import genai_folder
    from .hf_import import import_config
    from .output import Outputs
    from .quantize import Quantization
    from .targets import CPU_TARGET

    try:
        program = loads(import_config(source), f"{source.name}.attn")
        layer = program[next(n for n in program if getattr(program[n].spec, "vocab", None))]
        quantize = None if precision == "fp32" else Quantization(bits=int(precision[3:]))
        _, files = genai_folder(layer, target=CPU_TARGET, weights=str(source),
                                quantize=quantize)
    except (SpecError, UsageError, ExportError, StopIteration) as e:
        return f"attndsl cannot compile this checkpoint for onnxruntime-genai: {e}"
    folder = tmp / f"attndsl_{precision}" / layer.name
    outputs = Outputs()
    outputs.tree(folder, files)
    outputs.commit()
    return folder


def _in_genai(folder: Path | str, threads: int):
    """A greedy run of the folder in onnxruntime-genai with `threads` intra-op threads, or why
    there is none."""
    try:
        import onnxruntime_genai as og
    except ImportError:
        return "not installed (pip install onnxruntime-genai)"
    if isinstance(folder, str):
        return folder
    config_file = folder / "genai_config.json"
    config = json.loads(config_file.read_text())
    options = config["model"]["decoder"]["session_options"]
    options["intra_op_num_threads"] = threads
    options["inter_op_num_threads"] = 1
    config_file.write_text(json.dumps(config, indent=4))
    model = og.Model(str(folder))

    def run(ids: list[int], new: int) -> tuple[float, list[float]]:
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(ids) + new, min_length=len(ids) + new,
                                  do_sample=False)
        gen = og.Generator(model, params)
        start = time.perf_counter()
        gen.append_tokens([ids])  # the prompt's forward pass: logits of the first new token
        gen.generate_next_token()
        first = time.perf_counter() - start
        steps = []
        while not gen.is_done():
            start = time.perf_counter()
            gen.generate_next_token()
            steps.append(time.perf_counter() - start)
        return first, steps

    run([3, 4, 5], 3)  # warm-up
    return run


def _transformers(source: Path, threads: int):
    try:
        import torch
        import transformers as tf
    except ImportError:
        return "not installed"
    torch.set_num_threads(threads)
    model = tf.AutoModelForCausalLM.from_pretrained(str(source), dtype=torch.float32).eval()

    class Clock(tf.LogitsProcessor):
        """Called once per new token, as its logits are ready: the token's time stamp."""

        def __init__(self) -> None:
            self.stamps: list[float] = []

        def __call__(self, input_ids, scores):
            self.stamps.append(time.perf_counter())
            return scores

    def run(ids: list[int], new: int) -> tuple[float, list[float]]:
        x = torch.tensor([ids])
        clock = Clock()
        start = time.perf_counter()
        with torch.no_grad():
            model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False,
                           max_new_tokens=new, min_new_tokens=new, pad_token_id=0,
                           logits_processor=tf.LogitsProcessorList([clock]))
        stamps = [start, *clock.stamps]
        return stamps[1] - stamps[0], list(np.diff(stamps[1:]))

    run([3, 4, 5], 2)  # warm-up
    return run


def render_decode(rows: list[DecodeRow], facts: dict, markdown: bool = False) -> str:
    """The table; "vs genai" compares each row with the builder's model at its precision (the
    fp32 one for transformers)."""
    base = {(r.prompt, r.precision): r for r in rows if r.backend.startswith(BUILDER)}
    head = ["prompt", "backend", "first token ms", "ms/token", "tokens/s", "floor ms/token",
            "x floor", "ms/token vs genai", "first token vs genai"]
    lines = []
    for r in rows:
        if r.note:
            lines.append([str(r.prompt or "-"), r.backend, "-", "-", "-", "-", "-", "-", r.note])
            continue
        b = base.get((r.prompt, r.precision))
        lines.append([str(r.prompt), r.backend, f"{r.first_token_ms:.1f}",
                      f"{r.ms_per_token:.2f}", f"{r.tokens_per_s:.1f}", f"{r.floor_ms:.2f}",
                      f"{r.ms_per_token / r.floor_ms:.2f}x",
                      f"{r.ms_per_token / b.ms_per_token:.2f}x" if b else "-",
                      f"{r.first_token_ms / b.first_token_ms:.2f}x" if b else "-"])
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(line) + " |" for line in lines]
    else:
        widths = [max(len(x) for x in col) for col in zip(head, *lines, strict=True)]
        out = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
        out += ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True))
                for line in lines]
    summary = (f"{facts['threads']} threads; read bandwidth {facts['bandwidth_gb_s']:.1f} GB/s "
               f"(measured, DRAM); {facts['weights_mb']:.0f} MB of float32 weights read per "
               "token (int8: 0.28x, int4: 0.16x with their scales)")
    if facts.get("in_cache"):
        sizes = ", ".join(f"{bw:.1f} GB/s at {mib:g} MiB"
                          for mib, bw in facts["in_cache"].items())
        summary += (f"\nthe weights and cache fit in the {facts['llc_mb']:.0f} MB last-level "
                    f"cache, so no DRAM floor applies: the floor uses the bandwidth measured at "
                    f"their size ({sizes})")
    return summary + "\n\n" + "\n".join(out)
