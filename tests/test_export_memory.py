"""`compile --weights` streams the checkpoint (issue 39, item 14): each tensor is read, written
into the model file and dropped, so that the memory an export adds stays near its largest
tensor, not its whole model. Measured in a subprocess (its peak resident memory, reset after
the imports), on a checkpoint written here with NumPy (nothing downloads); the streamed file
is byte-identical to protobuf's own serialization of the whole model."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest

from attndsl.backends import exported
from attndsl.cli import main

HIDDEN, FFN, LAYERS, VOCAB = 256, 1024, 24, 1000

# compile in-process after the imports, with the peak (VmHWM) reset so that it counts from
# there: what the export itself adds, in MiB
_MEASURE = textwrap.dedent("""
    import sys
    from attndsl.cli import main
    import attndsl.backends.lower, attndsl.backends.finalize, attndsl.checkpoints  # noqa
    import onnx, onnx.checker, onnx.shape_inference  # noqa
    import onnxruntime.quantization.matmul_nbits_quantizer  # noqa  (what --quantize runs)

    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    open("/proc/self/clear_refs", "w").write("5")  # resets VmHWM to the current RSS
    start = status("VmRSS")
    code = main(sys.argv[1:])
    print(f"GROWTH {status('VmHWM') - start:.1f}")
    sys.exit(code)
""")


def _write_checkpoint(folder: Path) -> int:
    """A random Llama (float32 safetensors, as save_pretrained names it) and its config; the
    bytes of its weights."""
    folder.mkdir()
    kv = HIDDEN // 2
    shapes = {"model.embed_tokens.weight": (VOCAB, HIDDEN), "model.norm.weight": (HIDDEN,),
              "lm_head.weight": (VOCAB, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        shapes |= {p + "input_layernorm.weight": (HIDDEN,),
                   p + "post_attention_layernorm.weight": (HIDDEN,),
                   p + "self_attn.q_proj.weight": (HIDDEN, HIDDEN),
                   p + "self_attn.k_proj.weight": (kv, HIDDEN),
                   p + "self_attn.v_proj.weight": (kv, HIDDEN),
                   p + "self_attn.o_proj.weight": (HIDDEN, HIDDEN),
                   p + "mlp.gate_proj.weight": (FFN, HIDDEN),
                   p + "mlp.up_proj.weight": (FFN, HIDDEN),
                   p + "mlp.down_proj.weight": (HIDDEN, FFN)}
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = int(np.prod(shape)) * 4
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset,
                                                                               offset + size]}
        offset += size
    head = json.dumps(header).encode()
    rng = np.random.default_rng(0)
    with open(folder / "model.safetensors", "wb") as f:
        f.write(len(head).to_bytes(8, "little") + head)
        for shape in shapes.values():
            f.write((rng.standard_normal(shape, np.float32) * 0.05).tobytes())
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": HIDDEN,
        "intermediate_size": FFN, "num_hidden_layers": LAYERS, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": VOCAB, "rms_norm_eps": 1e-5,
        "max_position_embeddings": 2048, "rope_theta": 10000.0, "hidden_act": "silu",
        "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2}))
    return offset


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> tuple[Path, Path, int]:
    """(checkpoint folder, its imported spec, its weights' bytes: about 120 MB)."""
    root = tmp_path_factory.mktemp("streamed")
    size = _write_checkpoint(root / "llama")
    spec = root / "llama.attn"
    assert main(["import", str(root / "llama"), "-o", str(spec)]) == 0
    return root / "llama", spec, size


@pytest.mark.parametrize("export", [["onnx"], ["genai"], ["onnx", "--quantize", "int4"]],
                         ids=["onnx", "genai", "int4"])
def test_compile_adds_far_less_memory_than_the_model(checkpoint, tmp_path: Path,
                                                     export: list[str]) -> None:
    """A whole-model export holds the weights at least once more (read as float32, then in
    the protobuf: twice the model, 3.5 times measured before streaming); streamed, the growth
    stays under half the model (a tenth here: the graph and a tensor at a time; int4 blocks
    are made as they are written, twice the model before)."""
    folder, spec, size = checkpoint
    run = subprocess.run([sys.executable, "-c", _MEASURE, "compile", str(spec), "--weights",
                          str(folder), "--export", *export, "-q", "-o", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    growth = float(run.stdout.split("GROWTH")[-1])
    model = tmp_path / ("llama/model.onnx" if export == ["genai"] else "llama.onnx")
    assert model.stat().st_size > size / 8  # the weights are in it (int4: in blocks)
    assert growth < size / 2 / 2**20, (growth, size / 2**20)


def test_streamed_file_is_protobufs_bytes(checkpoint, tmp_path: Path) -> None:
    """The single file written tensor by tensor is the bytes of the whole model serialized by
    protobuf; over the 2 GiB limit (lowered here), the external data holds the same tensors."""
    folder, spec, _ = checkpoint
    assert main(["compile", str(spec), "--weights", str(folder), "--export", "onnx", "-q",
                 "-o", str(tmp_path / "one")]) == 0
    written = (tmp_path / "one" / "llama.onnx").read_bytes()
    model = onnx.load_from_string(written)
    assert model.SerializeToString(deterministic=True) == written
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(exported, "MAX_ONNX_BYTES", 10_000_000)
        assert main(["compile", str(spec), "--weights", str(folder), "--export", "onnx",
                     "-q", "-o", str(tmp_path / "two")]) == 0
    split = onnx.load(str(tmp_path / "two" / "llama.onnx"))  # with its external data
    for a, b in zip(model.graph.initializer, split.graph.initializer, strict=True):
        assert a.name == b.name
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(a),
                                      onnx.numpy_helper.to_array(b))


def test_the_two_gigabyte_rule_counts_the_streamed_tensors(tmp_path: Path) -> None:
    """Whether a model needs external data is decided before its tensors are read, from their
    sizes: a model of exactly MAX_ONNX_BYTES stays one file, one byte more does not."""
    def compile_to(out: str) -> Path:
        assert main(["compile", "examples/llama_lm.attn", "--name", "llama_lm", "--export",
                     "onnx", "-q", "-o", str(tmp_path / out)]) == 0
        return tmp_path / out
    size = (compile_to("whole") / "llama_lm.onnx").stat().st_size
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(exported, "MAX_ONNX_BYTES", size)
        assert not (compile_to("at") / "llama_lm.onnx.data").exists()
        patch.setattr(exported, "MAX_ONNX_BYTES", size - 1)
        assert (compile_to("past") / "llama_lm.onnx.data").exists()
