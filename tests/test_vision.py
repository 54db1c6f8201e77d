"""Vision encoders (docs/LANGUAGE.md, "Vision encoders"): a stack over an image's patches,
its learned 2-D positions interpolated bicubically to other grids; ViT, DINOv2, SigLIP's and
CLIP's vision towers imported from checkpoints as they are, exact against transformers."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

import attndsl
from attndsl.backends.reference_vision import resize
from attndsl.weight_table import weight_table

from .conftest import refused_where
from .test_random_specs import check_stream

tf = pytest.importorskip("transformers")

SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
         "image_size": 30, "patch_size": 6}
MODELS = {  # model type -> (config class, model class, its own config fields)
    "vit": ("ViTConfig", "ViTModel", {"intermediate_size": 37}),
    "vit_msn": ("ViTMSNConfig", "ViTMSNModel", {"intermediate_size": 37, "qkv_bias": False}),
    "deit": ("DeiTConfig", "DeiTModel", {"intermediate_size": 37}),
    "ijepa": ("IJepaConfig", "IJepaModel", {"intermediate_size": 37}),
    "dinov2": ("Dinov2Config", "Dinov2Model", {"mlp_ratio": 2}),
    "dinov2 (giant's SwiGLU MLP)": ("Dinov2Config", "Dinov2Model",
                                    {"mlp_ratio": 2, "use_swiglu_ffn": True}),
    "siglip_vision_model": ("SiglipVisionConfig", "SiglipVisionModel",
                            {"intermediate_size": 37}),
    "clip_vision_model": ("CLIPVisionConfig", "CLIPVisionModel", {"intermediate_size": 37}),
    "dinov2_with_registers": ("Dinov2WithRegistersConfig", "Dinov2WithRegistersModel",
                              {"mlp_ratio": 2, "num_register_tokens": 3}),
}
# (height, width) in pixels: the training grid (5 x 5 patches of 6), a wider and a taller one
# (interpolated), with pixels past the last whole patch
IMAGES = ((30, 30), (25, 43), (47, 19))


def _imported(hf: torch.nn.Module, seed: int, path) -> attndsl.Layer:
    """`hf` with every tensor redrawn (norms and layer scales around 1), saved to `path` and
    imported from there: the folder's last layer."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            around = 1.0 if ("norm" in name and name.endswith("weight")) or "lambda" in name \
                or "ln_pre" in name else 0.0
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() > 1 else 0.2) + around)
    hf.save_pretrained(path)
    program = attndsl.load(path)
    return program[list(program)[-1]]


@pytest.mark.parametrize("kind", list(MODELS))
def test_an_imported_vision_tower_is_transformers_model(tmp_path, kind: str) -> None:
    """The import's hidden states (`last_hidden_state`, with transformers' own interpolation
    of the position table at the other sizes) at B = 2, on ort-cpu and in the torch module,
    from the checkpoint folder."""
    config, model, own = MODELS[kind]
    hf = getattr(tf, model)(getattr(tf, config)(**SMALL, **own)).eval()
    layer = _imported(hf, len(kind), tmp_path)
    assert layer.spec.patches is not None
    session = ort.InferenceSession(layer.onnx_bytes(weights=tmp_path),
                                   providers=["CPUExecutionProvider"])
    module = layer.to_torch(weights=tmp_path)
    for height, width in IMAGES:
        pixels = torch.randn(2, 3, height, width)
        with torch.no_grad():
            extra = {} if kind.startswith("dinov2") else {"interpolate_pos_encoding": True}
            want = hf(pixel_values=pixels, **extra).last_hidden_state.numpy()
            from_torch = module(pixel_values=pixels).numpy()
        got = session.run(None, {"pixel_values": pixels.numpy()})[0]
        bound = 1e-5 * max(1.0, float(np.abs(want).max()))
        for ours in (got, from_torch):
            assert ours.shape == want.shape
            assert float(np.abs(ours - want).max()) <= bound, (kind, height, width)


def test_a_distilled_deit_checkpoint_imports_without_its_heads(tmp_path) -> None:
    """DeiT's distilled checkpoints (DeiTForImageClassificationWithTeacher): the class and
    distillation classifiers lie outside; the hidden states are its `deit` model's."""
    hf = tf.DeiTForImageClassificationWithTeacher(tf.DeiTConfig(
        **SMALL, intermediate_size=37, num_labels=3)).eval()
    layer = _imported(hf, 3, tmp_path)
    assert layer.spec.patches.distillation_token
    pixels = torch.randn(2, 3, 25, 43)
    with torch.no_grad():
        want = hf.deit(pixel_values=pixels, interpolate_pos_encoding=True).last_hidden_state
    got = ort.InferenceSession(layer.onnx_bytes(weights=tmp_path),
                               providers=["CPUExecutionProvider"]).run(
        None, {"pixel_values": pixels.numpy()})[0]
    assert np.abs(got - want.numpy()).max() <= 1e-5 * max(1.0, float(want.abs().max()))


def test_the_oracle_interpolates_as_torch_does() -> None:
    """The reference's bicubic reading (docs/LANGUAGE.md) against torch's own
    `interpolate(mode = "bicubic", align_corners = False)`, up, down, to one cell and at the
    same size (exactly the table)."""
    rng = np.random.default_rng(0)
    grid = rng.standard_normal((5, 4, 3))
    for h, w in ((5, 4), (9, 7), (2, 3), (1, 1), (5, 11)):
        ours = resize(grid, h, w)
        want = torch.nn.functional.interpolate(
            torch.from_numpy(grid).permute(2, 0, 1)[None], size=(h, w), mode="bicubic",
            align_corners=False)[0].permute(1, 2, 0).numpy()
        assert np.abs(ours - want).max() < 1e-12, (h, w)
    assert np.array_equal(resize(grid, 5, 4), grid)


def test_the_antialiased_resize_is_pils_on_every_backend() -> None:
    """The reference's antialiased bicubic (docs/LANGUAGE.md) against torch's `interpolate(
    antialias = True)` and ONNX Runtime's Resize (the lowering's), up, down, to one cell, at
    the same size; to one column of several rows, where torch's kernel repeats the first row
    (its module resizes one axis at a time)."""
    from onnx import TensorProto, helper

    from attndsl.backends.lower.builder import Builder
    from attndsl.backends.lower.sym import OnnxArrays, Sym
    from attndsl.backends.torch_arrays import TorchArrays

    rng = np.random.default_rng(1)
    grid = rng.standard_normal((5, 4, 3))
    square = torch.from_numpy(grid).permute(2, 0, 1)[None].float()
    b = Builder()
    y = OnnxArrays(b).resize_bicubic(Sym(b, "x", "float32", 4), Sym(b, "like", "float32", 4),
                                     True)
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("x", "like")]
    graph = helper.make_graph(b.nodes, "resize", io, [
        helper.make_tensor_value_info(y.name, TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)],
                              ir_version=10)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    for h, w in ((5, 4), (9, 7), (2, 3), (1, 1), (5, 11), (3, 1), (17, 2)):
        ours = resize(grid, h, w, antialias=True)
        empty = np.zeros((1, 1, h, w), np.float32)
        got = {"torch": TorchArrays.resize_bicubic(square, torch.from_numpy(empty), True),
               "onnx": session.run(None, {"x": square.numpy(), "like": empty})[0]}
        for name, out in got.items():
            assert np.abs(np.asarray(out)[0].transpose(1, 2, 0) - ours).max() < 1e-5, (name, h, w)
    assert np.array_equal(resize(grid, 5, 4, antialias=True), grid)


def test_random_vision_stacks_match_the_reference() -> None:
    """Stream 57's vision stacks (`patches`), on every backend and target (the portable
    export for 62, with registers): a class token and registers without positions (7), a
    2 x 2 table with its class row (22), a table of 4 x 4 and a register under CLIP's missing
    final norm (78), DINOv2's layer scale (662), an antialiased table (898), DeiT's
    distillation token with its table row (1750), axial RoPE over registers, all at (0, 0)
    with the class token (735); images of 1, 37 (a row), 23 and 131 patches (columns), none
    the table's."""
    check_stream(((7, ("class_token = true", "registers = 3")), (22, ("grid = 2",)),
                  (78, ("grid = 4", "final_norm = false", "registers = 1")),
                  (62, ("patches",)), (662, ("layer_scale = true",)),
                  (898, ("grid = 4", "antialias = true")),
                  (1750, ("grid = 2", "distillation_token = true")),
                  (735, ("registers =", "axial = true"))), portable=62)


_STACK = """attention a {{
    d_model = 16
    heads = 2
    mask = {mask}
}}
transformer t {{
    attention = a
    layers = 2
    ffn = quick_gelu(24)
    norm = layernorm({placement})
    patches = patches(size = 4, class_token = true, grid = 3){extra}
}}
"""


def _stack(extra: str = "", mask: str = "full", placement: str = "pre") -> str:
    return _STACK.format(extra=extra, mask=mask, placement=placement)


@pytest.mark.parametrize(("text", "words", "at"), [
    (_stack("\n    vocab = 10"), "`patches` and `vocab` do not combine", "vocab"),
    (_stack(mask="padding"), "reads key_lengths: a vision stack's attentions", "padding"),
    (_stack("\n    layer_scale = true", placement="post"), "`layer_scale` needs", "true"),
    (_stack("\n    final_norm = false", placement="post"), "has none", "false"),
    (_stack().replace("size = 4", "size = 0"), "size must be", "0"),
    (_stack().replace("grid = 3", "grid = 2000"), "grid must be at most", "2000"),
    (_stack("\n    layer_scale = true\n    placements = [pre]"), "no `placements`", "true"),
    (_stack().replace("grid = 3", "antialias = true"), "these patches have none", "true"),
    (_stack().replace("grid = 3", "registers = -1"), "registers must be >= 0", "-1"),
    (_stack().replace("class_token = true", "distillation_token = true"),
     "follows the class token", "true"),
])
def test_what_a_vision_stack_cannot_take_is_refused_where_it_is(text, words, at) -> None:
    refused_where(text, words, at)


def test_the_tensors_of_a_vision_stack() -> None:
    """The patch convolution [d, C, P, P] and its bias, the class token [d], the table of
    grid^2 + 1 rows (the class token's first), each block's layer scales; no final norm."""
    t = attndsl.loads(_stack("\n    layer_scale = true\n    final_norm = false"),
                      "t.attn")["t"].spec
    shapes = {w.name: w.shape for w in weight_table(t)}
    assert shapes["patch_embed.weight"] == (16, 3, 4, 4)
    assert shapes["patch_embed.bias"] == (16,) and shapes["class_token"] == (16,)
    assert shapes["position_embeddings.weight"] == (10, 16)
    assert shapes["layers.1.attn_scale"] == shapes["layers.1.ffn_scale"] == (16,)
    assert "norm.weight" not in shapes and "layers.1.attn_norm.weight" in shapes


def test_pixtral_is_axial_rope_over_the_images_grid(tmp_path) -> None:
    """Pixtral's vision encoder (axial 2-D RoPE, `rope(axial = true)`: each patch's row and
    column turn half of each head's pairs) imported from its checkpoint, exact against
    transformers' PixtralVisionModel on one image at a time (transformers packs a batch into
    one sequence), square, wide and tall, with pixels past the last patch."""
    cfg = tf.PixtralVisionConfig(hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                                 num_attention_heads=4, image_size=64, patch_size=4,
                                 hidden_act="silu", rope_parameters={"rope_theta": 100.0})
    hf = tf.PixtralVisionModel(cfg).eval()
    torch.manual_seed(3)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.copy_(torch.randn_like(p) * 0.3 + (1.0 if "norm" in name or "ln_pre" in name
                                                 else 0.0))
    hf.save_pretrained(tmp_path)
    program = attndsl.load(tmp_path)
    layer = program[list(program)[-1]]
    assert layer.spec.attention.position.axial
    session = ort.InferenceSession(layer.onnx_bytes(weights=tmp_path),
                                   providers=["CPUExecutionProvider"])
    for height, width in ((16, 16), (13, 30), (26, 9)):
        pixels = torch.randn(1, 3, height, width)
        with torch.no_grad():
            want = hf(pixel_values=pixels).last_hidden_state.numpy()
        got = session.run(None, {"pixel_values": pixels.numpy()})[0]
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-5 * max(1.0, float(np.abs(want).max()))


def test_random_axial_rope_matches_the_reference() -> None:
    """Stream 58's axial 2-D RoPE on layers alone (their rows and columns an input,
    position_ids [2, B, L]: 1627, the portable export; 1034 normed after RoPE) and stream 57's
    vision stacks of it (their grid's: 735 with a class token at (0, 0), the portable export;
    1076 under a position table)."""
    check_stream(((1627, ("axial = true",)), (1034, ("axial = true", "qk_norm_after_rope")),
                  (1076, ("axial = true", "grid = 4"))), portable=1627)
    check_stream(((735, ("axial = true", "class_token = true")),), portable=735)


def test_random_relative_2d_biases_match_the_reference() -> None:
    """Stream 59's BEiT biases on layers alone (position_ids [2, B, L] an input: 9 with its
    class token's rows, the portable export; 195 without) and stream 57's vision stacks of
    them (119, the portable export; 393; 881 with a class token and a one-patch window)."""
    check_stream(((9, ("relative_2d(window = 4)",)), (195, ("class_token = false",)),
                  (393, ("relative_2d", "patches")),
                  (881, ("relative_2d(window = 1, class_token = true)",))), portable=9)
    check_stream(((119, ("relative_2d", "patches")),), portable=119)


_LAYER = """attention a {{
    d_model = 16
    heads = 2{extra}
    position = {position}
    mask = {mask}
}}
"""


def _axial(extra: str, rope: str) -> str:
    return _LAYER.format(extra=extra, position=f"rope({rope})", mask="causal")


def _rel(extra: str, args: str) -> str:
    return _LAYER.format(extra=extra, position=f"relative_2d({args})", mask="full")


@pytest.mark.parametrize(("text", "words", "at"), [
    (_axial(extra="", rope="axial = true, mrope = [1, 1, 2]"), "takes no mrope", "true"),
    (_axial(extra="", rope="axial = true, scaling = linear(factor = 2)"),
     "takes no scaling", "true"),
    (_axial(extra="\n    kind = cross", rope="axial = true"), "needs self attention",
     "true"),
    (_axial(extra="", rope="dim = 6, axial = true"), "4 divides", "true"),
])
def test_what_axial_rope_cannot_take_is_refused_where_it_is(text, words, at) -> None:
    refused_where(text, words, at)


def test_axial_rope_does_not_decode() -> None:
    from attndsl.errors import SpecError

    layer = attndsl.loads(_axial(extra="", rope="axial = true"), "t.attn")["a"]
    with pytest.raises(SpecError, match="row and column"):
        layer.decoder_model()


@pytest.mark.parametrize(("kind", "absolute"), [("Beit", False), ("Beit", True),
                                               ("Data2VecVision", False)])
def test_beit_is_its_2d_relative_bias_over_the_images_grid(tmp_path, kind, absolute) -> None:
    """BEiT (`relative_2d`: a table of 2-D offsets per layer, resized bilinearly to the
    image's grid; the class token's three rows; layer scale; no final norm under mean
    pooling) imported from its checkpoint, exact against transformers' BeitModel at B = 2:
    the training grid, a wider and a taller image (with a position table too: `absolute`);
    data2vec's vision model is BEiT's."""
    cfg = getattr(tf, f"{kind}Config")(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
        image_size=24, patch_size=4, use_relative_position_bias=True,
        use_absolute_position_embeddings=absolute, use_mean_pooling=not absolute)
    hf = getattr(tf, f"{kind}Model")(cfg).eval()
    layer = _imported(hf, 5, tmp_path)
    assert layer.spec.attention.position.window == 6
    session = ort.InferenceSession(layer.onnx_bytes(weights=tmp_path),
                                   providers=["CPUExecutionProvider"])
    module = layer.to_torch(weights=tmp_path)
    for height, width in ((24, 24), (21, 38), (43, 17)):
        pixels = torch.randn(2, 3, height, width)
        with torch.no_grad():
            want = hf(pixel_values=pixels, interpolate_pos_encoding=True).last_hidden_state
            from_torch = module(pixel_values=pixels).numpy()
        got = session.run(None, {"pixel_values": pixels.numpy()})[0]
        bound = 1e-5 * max(1.0, float(want.abs().max()))
        for ours in (got, from_torch):
            assert ours.shape == tuple(want.shape)
            assert float(np.abs(ours - want.numpy()).max()) <= bound, (height, width)


@pytest.mark.parametrize(("text", "words", "at"), [
    (_rel(extra="\n    kind = cross", args="window = 3"), "cross attention's keys",
     "relative_2d"),
    (_rel(extra="", args="window = 2000"), "window must be in [1, 1024]", "2000"),
    (_rel(extra="\n    temperature = log(floor = 8, scale = 0.1)", args="window = 3"),
     "`temperature` reads one position per token", "log("),
    (_stack().replace("attention a {\n    d_model = 16\n    heads = 2\n",
                      "attention a {\n    d_model = 16\n    heads = 2\n"
                      "    position = relative_2d(window = 3, class_token = false)\n"),
     "disagree on a class token", "relative_2d"),
    (_stack().replace("attention a {\n    d_model = 16\n    heads = 2\n",
                      "attention a {\n    d_model = 16\n    heads = 2\n"
                      "    position = relative_2d(window = 3, class_token = true)\n").replace(
        "grid = 3", "registers = 2"), "not for registers", "relative_2d"),
])
def test_what_relative_2d_cannot_take_is_refused_where_it_is(text, words, at) -> None:
    refused_where(text, words, at)


def test_relative_2d_does_not_decode() -> None:
    from attndsl.errors import SpecError

    text = _rel(extra="", args="window = 3").replace("mask = full", "mask = causal")
    with pytest.raises(SpecError, match="row and column"):
        attndsl.loads(text, "t.attn")["a"].decoder_model()


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_a_whole_clip_or_siglip_checkpoint_imports_its_vision_tower(tmp_path, kind) -> None:
    """A CLIPModel's or SiglipModel's folder (model type clip, siglip) imports as its vision
    tower (vision_config, the `vision_model.` tensors; the text tower and the projections
    left out), exact against the model's own vision_model."""
    config, model = {"clip": ("CLIPConfig", "CLIPModel"),
                     "siglip": ("SiglipConfig", "SiglipModel")}[kind]
    cfg = getattr(tf, config)(vision_config={**SMALL, "intermediate_size": 37},
                              text_config={"hidden_size": 32, "num_hidden_layers": 1,
                                           "num_attention_heads": 4, "intermediate_size": 37,
                                           "vocab_size": 99})
    hf = getattr(tf, model)(cfg).eval()
    torch.manual_seed(9)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            p.copy_(torch.randn_like(p) * 0.3 + (1.0 if "norm" in name and
                                                 name.endswith("weight") else 0.0))
    hf.save_pretrained(tmp_path)
    program = attndsl.load(tmp_path)
    layer = program[list(program)[-1]]
    assert layer.name == f"{kind}_vision_model"
    pixels = torch.randn(2, 3, 25, 43)
    with torch.no_grad():
        want = hf.vision_model(pixel_values=pixels,
                               interpolate_pos_encoding=True).last_hidden_state.numpy()
    got = ort.InferenceSession(layer.onnx_bytes(weights=tmp_path),
                               providers=["CPUExecutionProvider"]).run(
        None, {"pixel_values": pixels.numpy()})[0]
    assert np.abs(got - want).max() <= 1e-5 * max(1.0, float(np.abs(want).max()))


def test_layer_scale_without_a_feed_forward_and_an_image_below_one_patch() -> None:
    """A block without a feed-forward has no `ffn_scale` (and the stack matches the
    reference); an image smaller than one patch is a usage error, not a failed convolution."""
    from attndsl.errors import UsageError

    layer = attndsl.loads(_stack("\n    layer_scale = true").replace("quick_gelu(24)", "none"),
                          "t.attn")["t"]
    names = {w.name for w in weight_table(layer.spec)}
    assert "layers.1.attn_scale" in names and "layers.1.ffn_scale" not in names
    assert layer.verify(lengths=(1, 6), batches=(2,), targets=("ort-cpu",)).passed
    with pytest.raises(UsageError, match="at least one patch"):
        layer.to_torch()(pixel_values=torch.zeros(1, 3, 3, 8))
