"""Every config field of every imported family is read, known not to change the computation
(with why), or refused: walked over transformers' own config classes, so a field a new release
adds is caught here rather than dropped silently."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import transformers as tf

import attndsl
from attndsl.cli import main
from attndsl.families import FAMILIES
from attndsl.hf_fields import REFUSED, inert_fields
from attndsl.hf_import import import_config
from attndsl.masks import render

from .test_hf_families import CASES

CLASSES = {"llama": tf.LlamaConfig, "mistral": tf.MistralConfig, "qwen2": tf.Qwen2Config,
           "qwen3": tf.Qwen3Config, "gemma2": tf.Gemma2Config, "gemma3": tf.Gemma3TextConfig,
           "gemma3_text": tf.Gemma3TextConfig, "phi3": tf.Phi3Config,
           "smollm3": tf.SmolLM3Config, "granite": tf.GraniteConfig,
           "granite_swa": tf.GraniteSWAConfig, "flint": tf.FlintConfig, "jais2": tf.Jais2Config,
           "mimo_v2_flash": tf.MiMoV2FlashConfig, "afmoe": tf.AfmoeConfig,
           "beam": tf.BeamConfig, "inkling_text": tf.InklingTextConfig,
           "kimi_linear": tf.KimiLinearConfig, "bailing_hybrid": tf.BailingHybridConfig,
           "minimax": tf.MiniMaxConfig, "bamba": tf.BambaConfig,
           "granitemoehybrid": tf.GraniteMoeHybridConfig, "nemotron_h": tf.NemotronHConfig,
           "mamba2": tf.Mamba2Config, "olmo_hybrid": tf.OlmoHybridConfig,
           "falcon_h1": tf.FalconH1Config, "zamba2": tf.Zamba2Config,
           "cohere_compass_text": tf.CohereCompassTextConfig,
           "gpt2": tf.GPT2Config, "phi": tf.PhiConfig, "starcoder2": tf.Starcoder2Config,
           "olmo2": tf.Olmo2Config, "olmo3": tf.Olmo3Config, "exaone4": tf.Exaone4Config,
           "cohere2": tf.Cohere2Config,
           "diffllama": tf.DiffLlamaConfig, "mixtral": tf.MixtralConfig,
           "phimoe": tf.PhimoeConfig,
           "qwen3_moe": tf.Qwen3MoeConfig, "gpt_oss": tf.GptOssConfig,
           "llama4_text": tf.Llama4TextConfig, "qwen2_moe": tf.Qwen2MoeConfig,
           "deepseek_v3": tf.DeepseekV3Config, "deepseek_v32": tf.DeepseekV32Config,
           "glm_moe_dsa": tf.GlmMoeDsaConfig,
           "mamba": tf.MambaConfig, "falcon_mamba": tf.FalconMambaConfig,
           "jamba": tf.JambaConfig,
           "deepseek_v2": tf.DeepseekV2Config,
           "qwen3_next": tf.Qwen3NextConfig, "hunyuan_v1_dense": tf.HunYuanDenseV1Config,
           "helium": tf.HeliumConfig, "ministral": tf.MinistralConfig,
           "ministral3": tf.Ministral3Config, "seed_oss": tf.SeedOssConfig,
           "cwm": tf.CwmConfig, "arcee": tf.ArceeConfig, "apertus": tf.ApertusConfig,
           "bitnet": tf.BitNetConfig, "internlm3": tf.InternLM3Config,
           "olmoe": tf.OlmoeConfig, "flex_olmo": tf.FlexOlmoConfig,
           "granitemoe": tf.GraniteMoeConfig, "granitemoeshared": tf.GraniteMoeSharedConfig,
           "jetmoe": tf.JetMoeConfig, "longcat_flash": tf.LongcatFlashConfig,
           "granitemoe_swa": tf.GraniteMoeSWAConfig,
           "hunyuan_v1_moe": tf.HunYuanMoEV1Config, "cohere2_moe": tf.Cohere2MoeConfig,
           "solar_open": tf.SolarOpenConfig, "exaone_moe": tf.ExaoneMoeConfig,
           "dots1": tf.Dots1Config, "lfm2": tf.Lfm2Config, "lfm2_moe": tf.Lfm2MoeConfig,
           "lfm3": tf.Lfm3Config,
           "gpt_neox": tf.GPTNeoXConfig, "gptj": tf.GPTJConfig, "falcon": tf.FalconConfig,
           "bloom": tf.BloomConfig, "bert": tf.BertConfig, "t5": tf.T5Config,
           "bart": tf.BartConfig, "mbart": tf.MBartConfig, "marian": tf.MarianConfig,
           "pegasus": tf.PegasusConfig, "blenderbot": tf.BlenderbotConfig,
           "m2m_100": tf.M2M100Config, "whisper": tf.WhisperConfig, "vit": tf.ViTConfig,
           "dinov2": tf.Dinov2Config, "siglip_vision_model": tf.SiglipVisionConfig,
           "dinov2_with_registers": tf.Dinov2WithRegistersConfig,
           "vit_msn": tf.ViTMSNConfig, "deit": tf.DeiTConfig, "ijepa": tf.IJepaConfig,
           "clip_text_model": tf.CLIPTextConfig, "siglip_text_model": tf.SiglipTextConfig,
           "data2vec-vision": tf.Data2VecVisionConfig,
           "clip_vision_model": tf.CLIPVisionConfig, "pixtral": tf.PixtralVisionConfig,
           "beit": tf.BeitConfig,
           "gpt_bigcode": tf.GPTBigCodeConfig, "gpt_neo": tf.GPTNeoConfig,
           "codegen": tf.CodeGenConfig, "opt": tf.OPTConfig,
           "biogpt": tf.BioGptConfig, "xglm": tf.XGLMConfig,
           "mpt": tf.MptConfig, "ctrl": tf.CTRLConfig,
           "ernie4_5": tf.Ernie4_5Config, "glm": tf.GlmConfig, "glm4": tf.Glm4Config,
           "gemma": tf.GemmaConfig, "vaultgemma": tf.VaultGemmaConfig, "olmo": tf.OlmoConfig,
           "iquestcoder": tf.IQuestCoderConfig, "youtu": tf.YoutuConfig,
           "cohere": tf.CohereConfig, "glm4_moe": tf.Glm4MoeConfig,
           "ernie4_5_moe": tf.Ernie4_5_MoeConfig, "minimax_m2": tf.MiniMaxM2Config,
           "glm4_moe_lite": tf.Glm4MoeLiteConfig, "hyperclovax": tf.HyperCLOVAXConfig,
            "mellum": tf.MellumConfig, "qwen3_5_text": tf.Qwen3_5TextConfig,
            "qwen3_5_moe_text": tf.Qwen3_5MoeTextConfig, "nemotron": tf.NemotronConfig,
            "persimmon": tf.PersimmonConfig, "stablelm": tf.StableLmConfig,
            "openai-gpt": tf.OpenAIGPTConfig, "gpt_neox_japanese": tf.GPTNeoXJapaneseConfig,
            "minicpm3": tf.MiniCPM3Config, "hy_v3": tf.HYV3Config,
            "nanochat": tf.NanoChatConfig, "axk1": tf.AXK1Config,
            "kolibri1": tf.Kolibri1Config,
            "modernbert-decoder": tf.ModernBertDecoderConfig,
            "aria_text": tf.AriaTextConfig, "dbrx": tf.DbrxConfig,
            "laguna": tf.LagunaConfig, "gemma4_text": tf.Gemma4TextConfig,
            "gemma4_unified_text": tf.Gemma4UnifiedTextConfig}


def test_every_family_has_its_config_class() -> None:
    assert set(CLASSES) == set(FAMILIES)


def _configs():
    """Each family's defaults, and every configuration the family tests build."""
    for family, make in CLASSES.items():
        yield family, f"{family}-defaults", make
    for name, (make, *_) in CASES.items():
        yield make().model_type, name, make


@pytest.mark.parametrize(("family", "make"), [(f, m) for f, _, m in _configs()],
                         ids=[n for _, n, _ in _configs()])
def test_every_field_is_read_inert_or_refused(tmp_path: Path, family: str, make) -> None:
    config = make()
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    if family == "gemma3":
        saved["model_type"] = "gemma3"  # the multimodal wrapper's name for the text config
    if family == "deepseek_v2" and saved.get("num_experts_per_tok") is None:
        saved["num_experts_per_tok"] = 6  # DeepseekV2Config leaves it None: no router runs so
    if family == "cohere_compass_text" and not saved.get("rope_parameters"):
        # CohereCompassTextConfig leaves it empty: transformers builds no model so (its
        # checkpoints' RoPE on the sliding layers, none on the full ones)
        saved["rope_parameters"] = {"sliding_attention": {"rope_type": "default",
                                                          "rope_theta": 50000.0},
                                    "full_attention": None}
    if family == "dots1" and saved.get("n_routed_experts") is None:
        # Dots1Config leaves these None: transformers builds no model so (dots.llm1's own)
        saved |= {"n_routed_experts": 128, "num_experts_per_tok": 6, "n_shared_experts": 2}
    (tmp_path / "config.json").write_text(json.dumps(saved))
    notes: list[str] = []
    text = import_config(tmp_path, notes=notes)
    if family in ("deepseek_v3", "deepseek_v32", "glm_moe_dsa", "mimo_v2_flash", "hy_v3",
                  "axk1", "dots1", "longcat_flash", "beam", "inkling_text"):
        # 671 B, 671 B, 744 B, 309 B, 295 B, 519 B, 143 B, 560 B, 501 B and 975 B weights,
        # past the size attndsl compiles: 4 layers
        text = re.sub(r"layers(\s*)= (61|48|80|62|56|52|66|78)\n", r"layers\1= 4\n", text)
    attndsl.loads(text)  # it imports, and the spec checks
    assert notes == [], notes
    inert = inert_fields(FAMILIES[family])
    for key in saved:
        assert key not in inert or inert[key], key  # each inert field says why


def test_an_unknown_field_is_reported_not_dropped(tmp_path: Path, capsys) -> None:
    config = tf.LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                            num_attention_heads=4)
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    saved["attention_temperature"] = 0.5
    (tmp_path / "config.json").write_text(json.dumps(saved))
    spec = tmp_path / "llama.attn"
    assert main(["import", str(tmp_path), "-o", str(spec)]) == 0
    assert "not read: attention_temperature" in capsys.readouterr().err
    assert "# Not read (unknown to attndsl): attention_temperature." in spec.read_text()


@pytest.mark.parametrize(("family", "field", "value"), [
    ("llama", "quantization_config", {"quant_method": "gptq", "bits": 4}),
    ("bert", "add_cross_attention", True),
    ("gemma2", "use_bidirectional_attention", True),
    ("bloom", "apply_residual_connection_post_layernorm", True),
    ("bert", "position_embedding_type", "relative_key"),
    ("gpt_neo", "attention_types", [[["global", "sparse"], 12]]),
    ("codegen", "n_head", 6),
    ("opt", "word_embed_proj_dim", 512),
    ("opt", "layer_norm_elementwise_affine", False),
    ("mpt", "no_bias", False),
    ("mpt", "expansion_ratio", 2),
    ("ctrl", "layer_norm_epsilon", 1e-05),
    ("olmoe", "clip_qkv", 8.0),
    ("cohere", "use_qk_norm", True),
    ("ernie4_5_moe", "moe_norm_min", 0.5),
    ("openai-gpt", "afn", "gelu_new"),  # GPT-1's ACT_FNS has no such key
    ("laguna", "moe_router_logit_softcapping", 30.0),
    ("laguna", "moe_apply_router_weight_on_input", True),
    ("laguna", "num_attention_heads_per_layer", [48, 48]),  # not one per layer
])
def test_a_field_attndsl_cannot_express_is_refused_by_name(tmp_path: Path, capsys, family: str,
                                                           field: str, value) -> None:
    config = CLASSES[family]()
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    saved[field] = value
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert main(["import", str(tmp_path)]) == 2
    assert f"`{field}` = {json.dumps(value)}" in capsys.readouterr().err
    refused = {**REFUSED, **FAMILIES[family].refused}
    assert field not in refused or refused[field][1]


def test_mpt_attention_options_transformers_ignores_are_refused(tmp_path: Path, capsys) -> None:
    """transformers' MPT computes ALiBi with max_bias 8 whatever attn_config says: refused by
    its nested name, as a clip_qkv below 0 is (clamping to [-c, c] needs c > 0)."""
    tf.MptConfig(d_model=64, n_heads=4, n_layers=1,
                 attn_config={"alibi_bias_max": 4, "clip_qkv": -6.0}).save_pretrained(tmp_path)
    assert main(["import", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "`attn_config.alibi_bias_max` = 4" in err and "`attn_config.clip_qkv` = -6.0" in err


def test_dbrx_sub_config_values_it_cannot_express_are_refused(tmp_path: Path, capsys) -> None:
    """DBRX's experts' weights divided by their 2-norm (attndsl renormalises by the sum, p = 1,
    alone), an attn_config.rope_theta transformers does not rotate by (it reads
    rope_parameters'), a clip_qkv of 0 and an unknown ffn_config field: each refused by its
    nested name."""
    tf.DbrxConfig(d_model=64, n_heads=4, n_layers=1,
                  attn_config={"kv_n_heads": 2, "rope_theta": 500000.0, "clip_qkv": 0},
                  ffn_config={"moe_normalize_expert_weights": 2.0}).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    saved["ffn_config"]["moe_bias"] = True
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert main(["import", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    for refused in ("`ffn_config.moe_normalize_expert_weights` = 2.0",
                    "`attn_config.rope_theta` = 500000.0", "`attn_config.clip_qkv` = 0",
                    "`ffn_config` has fields attndsl does not know: moe_bias"):
        assert refused in err, (refused, err)


def test_qwen2_without_layer_types_slides_from_max_window_layers(tmp_path: Path) -> None:
    """Older Qwen2 configs give use_sliding_window and max_window_layers alone: layers from
    max_window_layers on slide, as Qwen2Config derives them."""
    config = tf.Qwen2Config(hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                            num_attention_heads=4, num_key_value_heads=2,
                            use_sliding_window=True, sliding_window=5, max_window_layers=2)
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    del saved["layer_types"]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    spec = attndsl.loads(import_config(tmp_path, head="none"))["qwen2"].spec
    slides = ["window" in render(spec.layer_attention(i).mask) for i in range(4)]
    assert slides == [t == "sliding_attention" for t in config.layer_types] == \
        [False, False, True, True]


@pytest.mark.parametrize(("params", "missing"), [
    ({"rope_type": "linear"}, "`factor`"),
    ({"rope_type": "dynamic", "rope_theta": 10000.0}, "`factor`"),
    ({"rope_type": "yarn"}, "`factor`"),
    ({"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0}, "`low_freq_factor`"),
    ({"rope_type": "longrope", "long_factor": [1.0] * 8}, "`short_factor`"),
])
def test_rope_parameters_without_their_keys_are_refused(tmp_path: Path, capsys, params: dict,
                                                        missing: str) -> None:
    """transformers refuses these configs; the import did not, writing plain RoPE."""
    tf.LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                   num_attention_heads=4).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    saved["rope_parameters"] = params
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert main(["import", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "lacks" in err and missing in err and "internal error" not in err


def test_rope_parameters_without_rope_theta_keep_their_scaling(tmp_path: Path) -> None:
    tf.LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                   num_attention_heads=4).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    saved["rope_parameters"] = {"rope_type": "linear", "factor": 4.0}
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert "scaling = linear(4.0)" in import_config(tmp_path)


def test_yarn_without_original_max_position_uses_max_position_embeddings(tmp_path: Path) -> None:
    """As transformers fills it: the import writes a spec that compiles and computes what the
    model computes."""
    import numpy as np
    import torch

    from .test_hf_families import SMALL, _close, _model, _ort, redraw, run_hf

    config = tf.LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2,
                            max_position_embeddings=32, rope_parameters={
                                "rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0},
                            **SMALL)
    model = _model(config).eval()
    redraw(model, 7, unit_offset=False)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    saved["rope_parameters"].pop("original_max_position_embeddings", None)
    (tmp_path / "config.json").write_text(json.dumps(saved))
    text = import_config(tmp_path, head="none")
    assert "original_max_position = 32" in " ".join(text.split())
    stack = attndsl.loads(text)["llama"]
    ids = torch.tensor(np.random.default_rng(1).integers(1, SMALL["vocab_size"], (1, 40)))
    ref = run_hf(model, "layers.0", "layers.0.self_attn", "layers.0.self_attn.o_proj", ids,
                 torch.ones_like(ids))
    ours = _ort(stack.onnx_bytes(weights=tmp_path), {"x": ref["x"]})
    _close(ours, ref["y"], np.ones((1, 40), bool), "llama yarn stack")


@pytest.mark.parametrize("family", [f for f in CLASSES if f != "gemma3"])
def test_defaults_are_transformers_defaults(family: str) -> None:
    """A field missing from config.json means transformers' default for it: the import's
    table of defaults is the config class's, for every field the import reads."""
    import dataclasses

    from attndsl.hf_fields import TYPES

    structural = {"model_type", "layer_types", "rope_parameters", "rope_scaling", "vocab_size",
                  "max_position_embeddings"}
    want = {f.name: f.default for f in dataclasses.fields(CLASSES[family])
            if f.name in TYPES and f.name not in structural
            and f.default is not dataclasses.MISSING and f.default is not None}
    assert FAMILIES[family].defaults == want


def test_exaone4_layer_kinds_and_positions(tmp_path: Path, capsys) -> None:
    """EXAONE 4 without a window: every layer full and rotated (Exaone4Attention rotates the
    full layers only then); a pattern string of L and G with layer_types imports (its
    layer_types are read), and without them is refused, as Exaone4Config cannot derive them."""
    config = tf.Exaone4Config(hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                              num_attention_heads=4, num_key_value_heads=2,
                              sliding_window=None,
                              layer_types=["full_attention"] * 4)
    config.save_pretrained(tmp_path)
    spec = attndsl.loads(import_config(tmp_path, head="none"))["exaone4"].spec
    assert all(spec.layer_attention(i).position is not None for i in range(4))
    assert all("window" not in render(spec.layer_attention(i).mask) for i in range(4))
    saved = json.loads((tmp_path / "config.json").read_text())
    saved.update(sliding_window=5, sliding_window_pattern="LLLG",
                 layer_types=["sliding_attention"] * 3 + ["full_attention"])
    (tmp_path / "config.json").write_text(json.dumps(saved))
    spec = attndsl.loads(import_config(tmp_path, head="none"))["exaone4"].spec
    kinds = [("window" in render(spec.layer_attention(i).mask),
              spec.layer_attention(i).position is not None) for i in range(4)]
    assert kinds == [(True, True)] * 3 + [(False, False)]
    del saved["layer_types"]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert main(["import", str(tmp_path)]) == 2
    assert "`sliding_window_pattern` = \"LLLG\"" in capsys.readouterr().err


def test_internlm3_reads_its_bias_aliases(tmp_path: Path, capsys) -> None:
    """InternLM3's own config names (qkv_bias, bias) are transformers' aliases of
    attention_bias and mlp_bias: read as them, and refused apart as InternLM3Config does."""
    tf.InternLM3Config(hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                       num_attention_heads=4, head_dim=16).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    for key in ("attention_bias", "mlp_bias"):
        del saved[key]
    (tmp_path / "config.json").write_text(json.dumps({**saved, "qkv_bias": True, "bias": True}))
    text = import_config(tmp_path, head="none")
    assert "bias = true" in text and "swiglu(96, bias = true)" in text
    (tmp_path / "config.json").write_text(json.dumps({**saved, "qkv_bias": True}))
    assert main(["import", str(tmp_path)]) == 2
    assert "`attention_bias` = true" in capsys.readouterr().err


@pytest.mark.parametrize("family", sorted(CLASSES))
def test_a_config_without_rope_fields_has_its_classs_rope(tmp_path: Path, family: str) -> None:
    """A config.json with none of rope_parameters, rope_theta and rope_scaling means the config
    class's default RoPE (its default_theta: Mixtral's base 1e6, not 10000): the import's
    RoPE bases are the base transformers reads from it."""
    import re
    import sys

    sys.path.insert(0, str(Path(__file__).parent.parent / "tools"))
    from coverage_configs import tiny_config

    tiny_config(family).save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    cfg = json.loads(path.read_text())
    for key in ("rope_parameters", "rope_theta", "rope_scaling"):
        cfg.pop(key, None)
    path.write_text(json.dumps(cfg))
    params = getattr(tf.AutoConfig.from_pretrained(tmp_path), "rope_parameters", None) or {}
    kinds = params.values() if all(isinstance(v, dict) for v in params.values()) else [params]
    want = {float(p["rope_theta"]) for p in kinds if "rope_theta" in p}
    if not want:
        pytest.skip("its config class has no rope_parameters (GPT-J's rotary_dim and the "
                    "like: base 10000), or RoPE of another form")
    try:
        text = import_config(tmp_path, "right", "none")
    except attndsl.SpecError as refused:  # refused by name (MiMo-V2-Flash's per-kind RoPE)
        assert "`rope_parameters` = null" in str(refused), str(refused)
        return
    got = {float(x) for x in re.findall(r"theta = ([0-9.e+-]+)", text)}
    assert got <= want, (family, got, want)
