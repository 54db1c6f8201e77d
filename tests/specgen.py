"""A generator of random valid specs over the whole language, for the property test.

`random_spec(seed)` returns spec text (with `decoding=True`, specs whose every layer can
decode): every mask primitive (self and cross), `& | !` combinations, every position
encoding, GQA/MQA, value_dim != head_dim, softcap, scale, qk_norm (l2norm too), learned
sinks, output gates, query temperatures, linear and Linformer kernels, every sparsity
setting, out_proj, bias, memory_dim, by_length variants, and transformer stacks.
Parameters are drawn small enough that masks meet the lengths the test runs (1 to ~150), so
blocks, bands and global rows really cut through the shapes, and never at multiples of any
block size by construction of those lengths (see test_random_specs)."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

MAX_TEST_LENGTH = 150  # the longest L or S the property test uses


HUGE = (10**7, 2**40, 2**62)  # parameters far beyond any length: must mean what they say


# what a decoding form can take (docs/LANGUAGE.md, Decoding): self attention's masks are drawn
# under `causal &`, without the primitives a cache cannot follow; cross attention's read the key
_DECODING_SELF = ("full", "causal", "window", "window1", "dilated", "chunked", "strided",
                  "global_first", "global_tokens", "prefix", "padding", "padding_left", "index")
_DECODING_CROSS = ("full", "prefix", "padding", "padding_left")


def _primitive(r: random.Random, cross: bool, decoding: bool = False) -> str:
    if decoding:
        return _PRIMITIVES[r.choice(_DECODING_CROSS if cross else _DECODING_SELF)](r)
    if r.random() < 0.05:
        big = r.choice(HUGE)
        return r.choice([f"window(left = {big}, right = {r.randint(0, 5)})", f"prefix({big})",
                         f"chunked({big})", f"global(first = {big})", f"strided({big})",
                         f"random(blocks = 2, block = {big}, seed = {big})",
                         f"dilated(left = {big}, right = {big}, dilation = 3)"])
    kinds = dict(_PRIMITIVES)
    if cross:
        del kinds["document"]  # self attention only
    return r.choice(list(kinds.values()))(r)


# each primitive with parameters drawn small enough to cut through the test's lengths
_PRIMITIVES: dict[str, Callable[[random.Random], str]] = {
    "full": lambda r: "full",
    "causal": lambda r: "causal",
    "causal_br": lambda r: "causal(align = bottom_right)",
    "window": lambda r: f"window(left = {r.randint(0, 40)}, right = {r.randint(0, 40)})",
    "window1": lambda r: f"window({r.randint(0, 30)})",
    "window_br": lambda r: (f"window(left = {r.randint(0, 40)}, right = {r.randint(0, 3)}, "
                            "align = bottom_right)"),
    "dilated": lambda r: (f"dilated(left = {r.randint(0, 40)}, right = {r.randint(0, 40)}, "
                          f"dilation = {r.randint(1, 5)})"),
    "chunked": lambda r: f"chunked({r.randint(1, 40)})",
    "strided": lambda r: f"strided({r.randint(1, 7)})",
    "global_first": lambda r: f"global(first = {r.randint(1, 5)})",
    "global_tokens": lambda r: "global(tokens = [{}])".format(", ".join(
        map(str, sorted(r.sample(range(MAX_TEST_LENGTH + 10), r.randint(1, 4)))))),
    "prefix": lambda r: f"prefix({r.randint(0, 50)})",
    "random": lambda r: (f"random(blocks = {r.randint(1, 3)}, block = {r.randint(3, 40)}, "
                         f"seed = {r.randint(0, 10**6)})"),
    "index": lambda r: r.choice([  # integer arithmetic on q and k
        f"abs(q // {r.randint(1, 12)} - k // {r.randint(1, 12)}) <= {r.randint(0, 3)}",
        f"q % {r.randint(1, 9)} == k % {r.randint(1, 9)}",
        f"min(q, k) >= {r.randint(0, 30)}",
        f"q - k > {r.randint(-20, 20)}",
        f"max(q, 2 * k - {r.randint(0, 9)}) % {r.randint(2, 7)} != {r.randint(0, 3)}",
        f"-(k // {r.randint(1, 5)}) * 3 < q % {r.randint(1, 50)} - {r.randint(0, 9)}"]),
    "padding": lambda r: "padding",
    "padding_left": lambda r: "padding(side = left)",
    "document": lambda r: "document",
}


def _mask(r: random.Random, cross: bool, depth: int = 0, decoding: bool = False) -> str:
    roll = r.random()
    if depth >= 3 or roll < 0.4:
        return _primitive(r, cross, decoding)
    if roll < 0.5:
        return f"!{_wrap(_mask(r, cross, depth + 1, decoding))}"
    op = r.choice(["&", "|"])
    return (f"{_wrap(_mask(r, cross, depth + 1, decoding))} {op} "
            f"{_wrap(_mask(r, cross, depth + 1, decoding))}")


def _decoding_mask(r: random.Random, cross: bool) -> str:
    mask = _mask(r, cross, decoding=True)
    return mask if cross else f"causal & ({mask})"


def _wrap(text: str) -> str:
    return f"({text})" if " " in text and not text.startswith("(") else text


def _rope_scaling(r: random.Random, dim: int, decoding: bool = False) -> str:
    """A RoPE scaling whose length-dependent forms switch within the tested lengths (for a
    decoding spec, beyond them: a cache keeps keys rotated before a switch, docs/LANGUAGE.md)."""
    orig = r.choice([4, 16, 40])
    pairs = dim // 2
    choice = r.choice(["", "", "linear", "dynamic", "llama3", "yarn", "longrope"])
    if choice == "linear":
        return f", scaling = linear({r.choice([0.5, 2, 8.0])})"
    if choice == "dynamic" and dim > 2:
        return (f", scaling = dynamic(factor = {r.choice([2, 4.5])}, original_max_position = "
                f"{orig if not decoding else 1000})")
    if choice == "llama3":
        return (f", scaling = llama3(factor = 8, low_freq_factor = 1, high_freq_factor = 4, "
                f"original_max_position = {orig})")
    if choice == "yarn":
        return (f", scaling = yarn(factor = {r.choice([2, 16])}, original_max_position = {orig}, "
                f"beta_fast = {r.choice([32, 4])}, truncate = {r.choice(['true', 'false'])})")
    if choice == "longrope":
        short = ", ".join(f"{r.uniform(1, 3):.3f}" for _ in range(pairs))
        long = ", ".join(f"{r.uniform(1, 40):.3f}" for _ in range(pairs))
        return (f", scaling = longrope(short_factor = [{short}], long_factor = [{long}], "
                f"original_max_position = {orig if not decoding else 1000}, "
                f"factor = {r.choice([4, 32])})")
    return ""


_LSH_MASKS = ("full", "causal", "padding", "causal & padding(side = left)")


def _lsh(r: random.Random, entries: dict[str, object], heads: int, head_dim: int,
         excluded: bool) -> bool:
    """Turn a tenth of the self-attention specs into Reformer LSH layers (in place): shared
    query/key heads, so no kv groups, k bias, qk norm, relative positions, softcap or dropout;
    buckets, rounds and chunks small enough that test lengths span several chunks. Drawn
    from its own stream, so the other specs stay what they were."""
    if excluded or r.random() >= 0.1:
        return False
    entries["kv_heads"] = heads
    entries["bias"] = r.choice(["false", "[q, v]", "[o]", "[v, o]"] if "out_proj" not in entries
                               else ["false", "[q, v]"])
    for key in ("qk_norm", "softcap", "dropout", "sparsity"):
        entries.pop(key, None)
    if not str(entries.get("position", "")).startswith("sinusoidal") and \
            not str(entries.get("position", "")).startswith("learned"):
        entries.pop("position", None)
    entries["kernel"] = (f"lsh(buckets = {r.choice([2, 4, 6, 16])}, rounds = {r.randint(1, 3)}, "
                         f"chunk = {r.choice([1, 3, 8, 16, 64])}, seed = {r.randint(0, 10**6)})")
    entries["mask"] = r.choice(_LSH_MASKS)
    return True


def _documents(r: random.Random, entries: dict[str, object], cross: bool) -> None:
    """Give a tenth of the specs document structure (in place): positions within documents
    (`qd`, `kd`) in self attention, the memory rows' own ids in cross attention. Drawn from its
    own stream, so the other specs stay what they were."""
    if r.random() >= 0.1:
        return
    if cross:  # Flamingo: each text token sees the rows of its image
        entries["mask"] = f"document & ({entries['mask']})"
        return
    rule = r.choice([f"qd - kd <= {r.randint(0, 20)}", f"qd // {r.randint(1, 9)} == kd // "
                     f"{r.randint(1, 9)}", f"(kd < {r.randint(1, 8)} | kd <= qd)",
                     f"abs(qd - kd) <= {r.randint(0, 6)} | k < {r.randint(0, 5)}"])
    entries["mask"] = f"document & ({entries['mask']}) & {rule}"


def random_spec(seed: int, decoding: bool = False) -> str:
    """A random valid spec; `decoding`: one whose layers all have a decoding form."""
    r = random.Random(seed)
    cross = r.random() < 0.25
    stack = not cross and r.random() < 0.25
    heads = r.choice([1, 2, 3, 4, 6, 8])
    kv_heads = r.choice([d for d in range(1, heads + 1) if heads % d == 0])
    head_dim = r.choice([4, 6, 8, 12, 16])
    value_dim = head_dim if r.random() < 0.8 else r.choice([4, 8, 12])
    out_proj = r.random() < 0.85
    d_model = heads * value_dim if not out_proj else r.choice(
        [heads * head_dim, 2 * r.randint(4, 24)])
    linear = r.random() < 0.12 and not (decoding and cross)
    linformer = not linear and not decoding and r.random() < 0.1  # keys to k rows
    entries = {"d_model": d_model, "heads": heads, "kv_heads": kv_heads, "head_dim": head_dim}
    if value_dim != head_dim or r.random() < 0.2:
        entries["value_dim"] = value_dim
    if not out_proj:
        entries["out_proj"] = "false"
    if cross:
        entries["kind"] = "cross"
        if r.random() < 0.5:
            entries["memory_dim"] = r.choice([8, 20, 36])
    entries["bias"] = r.choice(["true", "false", "[q, k, v]", "[k]"]
                               + (["[v, o]", "[o, q]"] if out_proj else []))
    if r.random() < 0.3:
        entries["qk_norm"] = r.choice(["rmsnorm", "layernorm", "layernorm(eps = 1e-12)",
                                       "rmsnorm(eps = 0.25 ** 2, unit_offset = true)"])
        if random.Random(seed * 7919 + 6).random() < 0.3:  # its own stream, as below
            entries["qk_norm"] = "l2norm(eps = 1e-6)"
        whole = random.Random(seed * 7919 + 10)  # OLMo 2's, over every head: own stream
        if whole.random() < 0.3:
            entries["qk_norm"] = whole.choice(["rmsnorm(eps = 1e-6, across_heads = true)",
                                               "l2norm(across_heads = true)",
                                               "layernorm(across_heads = true)"])
        norm = entries["qk_norm"]  # Persimmon's q/k LayerNorms with their bias: own stream
        if norm.startswith("layernorm") and random.Random(seed * 7919 + 21).random() < 0.5:
            args = norm.removeprefix("layernorm").strip("()")
            entries["qk_norm"] = f"layernorm({args + ', ' if args else ''}bias = true)"
        own = random.Random(seed * 7919 + 22)  # StableLM 2's weight per head: own stream
        if entries["qk_norm"] in ("layernorm", "layernorm(eps = 1e-12)") and own.random() < 0.5:
            entries["qk_norm"] = own.choice(["layernorm(head_weights = true)",
                                             "layernorm(head_weights = true, bias = true)"])
    positions = ["none", "rope", "learned", "sinusoidal"]
    if not linear and not linformer:
        positions += ["alibi", "relative_bias"]
    if decoding and cross:  # no positions between queries and memory rows
        positions = ["none", "learned", "sinusoidal"]
    position = r.choice(positions)
    if position == "rope":
        dim = r.choice([d for d in range(2, head_dim + 1, 2)])
        entries["position"] = (f"rope(theta = {r.choice([10000, 500000, 1000000.0, 1.5])}, "
                               f"dim = {dim}, interleaved = {r.choice(['true', 'false'])}"
                               f"{_rope_scaling(r, dim, decoding)})")
        turned = random.Random(seed * 7919 + 25)  # proportional RoPE (Gemma 4, LFM3): own stream
        if "scaling" not in entries["position"] and turned.random() < 0.25:
            entries["position"] = entries["position"][:-1] + (
                f", scaling = proportional(rotated = {turned.randint(1, dim // 2)}"
                f"{turned.choice(['', ', factor = 2'])}))")
    elif position == "learned":
        entries["position"] = f"learned({MAX_TEST_LENGTH + r.randint(0, 20)})"
    elif position == "sinusoidal" and d_model % 2 == 0:
        entries["position"] = "sinusoidal"
        variant = random.Random(seed * 7919 + 19)  # CTRL's and XGLM's tables: own stream
        if variant.random() < 0.4 and d_model >= 4:
            layout = variant.choice(["halves", "interleaved"])
            entries["position"] = (f"sinusoidal(layout = {layout}"
                                   f", offset = {variant.choice([0, 2, 7])}, frequencies = "
                                   f"{variant.choice(['vaswani', 'tensor2tensor'])})")
    elif position == "relative_bias":
        buckets = r.choice([4, 8, 16, 32])
        bidirectional = r.choice(["true", "false"])
        exact = (buckets // 2 if bidirectional == "true" else buckets) // 2
        entries["position"] = (f"relative_bias(buckets = {buckets}, max_distance = "
                               f"{exact + r.randint(1, 100)}, bidirectional = {bidirectional})")
    elif position == "alibi":
        args = r.choice([[], ["slopes = geometric"], ["scaled = true", "max_bias = 4"]])
        if random.Random(seed * 7919 + 3).random() < 0.5 and not decoding:  # its own
            args = [*args, "rounding = bfloat16"]  # stream: the other specs are unchanged
        entries["position"] = f"alibi({', '.join(args)})" if args else "alibi"
    if linear:
        entries["kernel"] = f"linear(feature = {r.choice(['elu', 'relu', 'softmax'])})"
        entries["mask"] = "causal" if decoding else r.choice(["full", "causal"])
    elif linformer:  # max_len covers the test's longest keys (283)
        entries["kernel"] = (f"linformer(k = {r.randint(1, 40)}, max_len = "
                             f"{300 + r.randint(0, 50)}, share = "
                             f"{r.choice(['none', 'headwise', 'kv', 'layerwise'])})")
        entries["mask"] = r.choice(["full", "padding", "padding(side = left)",
                                    "padding & full"])
        if r.random() < 0.3:
            entries["softcap"] = f"{r.uniform(0.5, 50):.3f}"
    elif r.random() < 0.3:  # the masks fused kernels serve (GroupQueryAttention, MHA)
        entries["mask"] = r.choice(["causal", "full", "padding", "padding & full",
                                    "causal & padding(side = left)",
                                    f"causal & window(left = {r.randint(0, 40)}, right = 0)"])
        if decoding and cross:
            entries["mask"] = r.choice(["full", "padding", "padding & full"])
        elif decoding and not entries["mask"].startswith("causal"):
            entries["mask"] = f"causal & ({entries['mask']})"
    else:
        entries["mask"] = _decoding_mask(r, cross) if decoding else _mask(r, cross)
        if r.random() < 0.3:
            entries["scale"] = f"{r.uniform(0.05, 1.5):.4f}"
        if r.random() < 0.3:
            entries["softcap"] = f"{r.uniform(0.5, 50):.3f}"
        if r.random() < 0.1:
            entries["dropout"] = "0.1"
    entries["sparsity"] = r.choice(["auto", "auto", "dense", f"block({r.choice([5, 16, 32])})"])
    if not (decoding or linear or linformer) and r.random() < 0.12:  # the core by length
        bounds = sorted(r.sample(range(1, MAX_TEST_LENGTH), r.randint(1, 2)))
        variants = [f"up_to({n}, mask = {_mask(r, cross)})" for n in bounds]
        entries["by_length"] = "[" + ", ".join(
            [*variants, f"otherwise(mask = {_mask(r, cross)}, sparsity = auto)"]) + "]"
    if "side = left" in entries.get("mask", "") + entries.get("by_length", "") and \
            "position" in entries:  # bfloat16 ALiBi
        entries["position"] = entries["position"].replace(  # rounds indices: no left padding
            ", rounding = bfloat16", "").replace("alibi(rounding = bfloat16)", "alibi")
    lsh = _lsh(random.Random(seed * 7919 + 1), entries, heads, head_dim, cross or decoding or
               linear or linformer or "by_length" in entries)
    if not (decoding or linear or linformer or lsh or "by_length" in entries):
        _documents(random.Random(seed * 7919 + 2), entries, cross)
    if not (linear or linformer or lsh) and random.Random(seed * 7919 + 4).random() < 0.25:
        entries["sinks"] = "learned"  # its own stream: the other specs are unchanged
    if random.Random(seed * 7919 + 5).random() < 0.2:
        form = random.Random(seed * 7919 + 24)  # its form (LFM3's, Laguna's): its own stream
        entries["output_gate"] = form.choice(["sigmoid", "sigmoid", "softplus",
                                              "sigmoid(per_head = true)",
                                              "softplus(per_head = true)"])
    temperature = random.Random(seed * 7919 + 7)
    if not lsh and temperature.random() < 0.2:
        offset = random.Random(seed * 7919 + 18).choice(["", ", offset = 0", ", offset = 3"])
        entries["temperature"] = (f"log(floor = {temperature.randint(1, 40)}, scale = "
                                  f"{temperature.uniform(0, 0.5):.3f}{offset})")
    multi = random.Random(seed * 7919 + 28)  # multimodal RoPE (Qwen-VL, Qwen3.5): own stream
    rope = re.search(r"^rope\(.*dim = (\d+)", entries.get("position", ""))
    if rope and not cross and "temperature" not in entries and multi.random() < 0.25:
        half = int(rope.group(1)) // 2
        if multi.random() < 0.5:  # sectioned: t + h + w = dim / 2
            t = multi.randint(0, half)
            h = multi.randint(0, half - t)
            layout = f"mrope = [{t}, {h}, {half - t - h}]"
        else:  # interleaved: any sections, cut by dim / 2
            layout = (f"mrope = [{multi.randint(0, 12)}, {multi.randint(0, 12)}, "
                      f"{multi.randint(0, 12)}], mrope_interleaved = true")
        entries["position"] = f"{entries['position'][:-1]}, {layout})"
    axial = random.Random(seed * 7919 + 58)  # axial 2-D RoPE (Pixtral's): its own stream
    rope = re.search(r"^rope\(theta = ([^,)]+)", entries.get("position", ""))
    dim = re.search(r"dim = (\d+)", entries.get("position", ""))
    dim = int(dim.group(1)) if dim else int(entries["head_dim"])
    if rope and dim % 4 == 0 and not cross and not decoding and not any(
            w in entries for w in ("temperature", "latent", "indexer")) and \
            "mrope" not in entries["position"] and "scaling" not in entries["position"] and \
            axial.random() < 0.6:
        entries["position"] = f"rope(theta = {rope.group(1)}, dim = {dim}, " \
            f"{'interleaved = true, ' if 'interleaved = true' in entries['position'] else ''}" \
            "axial = true)"
    beit = random.Random(seed * 7919 + 59)  # BEiT's 2-D relative bias: its own stream
    if not cross and not decoding and not any(w in entries for w in (
            "temperature", "latent", "indexer", "kernel", "differential", "head_experts",
            "by_length", "qk_norm_after_rope")) and beit.random() < 0.08:
        entries["position"] = (f"relative_2d(window = {beit.randint(1, 6)}"
                               f"{beit.choice(['', ', class_token = false'])})")
    late = random.Random(seed * 7919 + 17)  # qk-norm after RoPE (Hunyuan): its own stream
    if not lsh and entries.get("position", "").startswith("rope") and late.random() < 0.2:
        entries.pop("qk_norm", None)
        entries["qk_norm_after_rope"] = late.choice(["rmsnorm(eps = 1e-5)", "l2norm",
                                                     "layernorm(eps = 1e-12)",
                                                     "rmsnorm(unit_offset = true)"])
    diff, kv = random.Random(seed * 7919 + 12), int(entries.get("kv_heads", heads))
    if not (linear or linformer or lsh or "output_gate" in entries) and heads % 2 == 0 and \
            kv % 2 == 0 and diff.random() < 0.25:  # differential attention: own stream
        entries["differential"] = diff.choice(["lambda", "lambda(init = 0.3, eps = 1e-6)",
                                               "lambda(init = depth, eps = 0.01)"])
    _latent(random.Random(seed * 7919 + 15), entries, cross or linear or linformer or lsh)
    _indexer(random.Random(seed * 7919 + 53), entries)
    _delta(random.Random(seed * 7919 + 16), entries, cross or linear or linformer or lsh)
    if entries.get("kernel", "").startswith("delta_rule(") and \
            random.Random(seed * 7919 + 48).random() < 0.5:  # OLMo Hybrid's: own stream
        entries["kernel"] = entries["kernel"][:-1] + ", negative_eigenvalues = true)"
    _short_conv(random.Random(seed * 7919 + 18), entries, cross or linear or linformer or lsh
                or "kernel" in entries)
    sub = random.Random(seed * 7919 + 22)  # BitNet's sub-norm of the merged heads: own stream
    if "latent" not in entries and not entries.get("kernel", "").startswith(
            ("delta_rule", "kda", "short_conv")) and sub.random() < 0.15:
        entries["sub_norm"] = sub.choice(["rmsnorm(eps = 1e-5)", "layernorm",
                                          "rmsnorm(unit_offset = true)"])
    clip = random.Random(seed * 7919 + 21)  # clamped projections (DBRX, OLMo): own stream
    own = entries.get("kernel", "").startswith(("delta_rule", "kda", "lightning", "short_conv"))
    if not (lsh or own or "latent" in entries) and clip.random() < 0.2:
        entries["clip_qkv"] = clip.choice(["0.5", "2", "8.0"])
    gemma = random.Random(seed * 7919 + 29)  # Gemma 4's value norm, values = keys: own stream
    plain = not (lsh or linear or linformer or "latent" in entries or "kernel" in entries)
    if plain and gemma.random() < 0.2:
        entries["v_norm"] = gemma.choice(["rmsnorm(eps = 1e-6, affine = false)",
                                          "rmsnorm(eps = 1e-5)", "layernorm(affine = false)"])
    if plain and "value_dim" not in entries and "v" not in entries.get("bias", "").strip(
            "truefals") and gemma.random() < 0.2:
        entries["values"] = "keys"
    _head_experts(random.Random(seed * 7919 + 32), entries, not plain or cross or "by_length"
                  in entries or entries.get("out_proj") == "false")
    power = random.Random(seed * 7919 + 37)  # Beam's scalable softmax: its own stream
    if not (lsh or own or "temperature" in entries or "latent" in entries or "head_experts"
            in entries or "mrope" in entries.get("position", "")) and power.random() < 0.15:
        kept = entries.pop("mask")  # (the mask stays last)
        entries["temperature"] = (f"power(base = {power.choice([4, 64, 2048])}, exponent = "
                                  f"{power.choice([0.1, 0.5])}" + power.choice(
                                      ["", ", offset = 0"]) + ")")
        entries["mask"] = kept
    inkling = random.Random(seed * 7919 + 39)  # Inkling's relative logits: their own stream
    streams = ("mrope", "proportional", "bfloat16", "layout", "relative_bias")  # (theirs)
    if not (lsh or own or cross or linear or linformer or "latent" in entries or "head_experts"
            in entries or "differential" in entries or "qk_norm_after_rope" in entries or
            any(w in entries.get("position", "") for w in streams)) and inkling.random() < 0.12:
        kept = entries.pop("mask")  # (the mask stays last)
        entries["position"] = (f"relative_logits(d_rel = {inkling.choice([1, 3, 8])}, extent = "
                               f"{inkling.choice([1, 5, 40, 300])})")
        if "temperature" not in entries and inkling.random() < 0.5:
            entries["temperature"] = (f"log_ratio(floor = {inkling.choice([1, 4, 30])}, "
                                      f"scale = {inkling.choice([0.1, 0.7])})")
        entries["mask"] = kept
    sconv = random.Random(seed * 7919 + 40)  # Inkling's residual convolutions: own stream
    if not (lsh or own or cross or linear or linformer or "latent" in entries or "kernel" in
            entries or "head_experts" in entries) and sconv.random() < 0.12:
        parts = [p for p in ("k", "v", "out") if sconv.random() < 0.7] or ["out"]
        if entries.get("values") == "keys":
            parts = ["out"]
        kept = entries.pop("mask")  # (the mask stays last)
        entries["residual_conv"] = (f"conv(width = {sconv.choice([2, 3, 4])}, on = "
                                    f"[{', '.join(parts)}])")
        entries["mask"] = kept
    _kda(random.Random(seed * 7919 + 43), entries, cross or linear or linformer or lsh)
    _lightning(random.Random(seed * 7919 + 44), entries, cross or linear or linformer or lsh)
    _mamba2(random.Random(seed * 7919 + 46), entries, cross or linear or linformer or lsh)
    if entries.get("kernel", "").startswith("mamba2(") and \
            random.Random(seed * 7919 + 50).random() < 0.5:  # Falcon-H1's norms: own stream
        entries["kernel"] = entries["kernel"][:-1] + ", norm = " + random.Random(
            seed * 7919 + 51).choice(["before_gate", "none"]) + ")"
    _mamba(random.Random(seed * 7919 + 54), entries, cross or linear or linformer or lsh)
    body = "\n".join(f"    {k} = {v}" for k, v in entries.items())
    text = f"# random spec, seed {seed}\nattention a {{\n{body}\n}}\n"
    if stack:
        ffn = f"{r.choice(['relu', 'gelu', 'gelu_tanh', 'swiglu', 'geglu'])}({r.choice([8, 24])}"
        ffn += r.choice(["", ", bias = true", ", bias = false"]) + ")"
        if ffn.startswith("relu(") and random.Random(seed * 7919 + 19).random() < 0.5:
            ffn = "relu2" + ffn[4:]  # squared ReLU (Arcee): its own stream
        if ffn.startswith("geglu(") and random.Random(seed * 7919 + 27).random() < 0.5:
            ffn = "gelu_glu" + ffn[5:]  # ModernBERT's exact-GELU gate: its own stream
        kind = r.choice(["layernorm", "rmsnorm"])
        placement = r.choice(["pre", "post", "sandwich"])
        block = random.Random(seed * 7919 + 11)  # OLMo 2's and Cohere's norms: own stream
        drawn = placement  # (the main stream's draws below stay those of the drawn placement)
        if block.random() < 0.2:
            placement = "output"
        norm = f"{kind}({placement}"
        norm += r.choice(["", ", eps = 1e-12", ", eps = 10 ** -2"])
        if kind == "layernorm" and block.random() < 0.3:
            norm += ", bias = false"
        if kind == "rmsnorm" and r.random() < 0.4:
            norm += ", unit_offset = true"
        if kind == "layernorm" and random.Random(seed * 7919 + 20).random() < 0.3:
            norm += ", unit_offset = true"  # Nemotron's LayerNorm1P: own stream
        weightless = random.Random(seed * 7919 + 24)  # OLMo's, NanoChat's norms: own stream
        if "unit_offset" not in norm and "bias" not in norm and weightless.random() < 0.15:
            norm += ", affine = false"
        pattern = "a"
        if r.random() < 0.4:  # a layer pattern: a second attention, another mask
            mask = _decoding_mask(r, cross) if decoding else _mask(r, cross)
            other = dict(entries, mask=mask if not (linear or linformer or lsh) else
                         _LSH_MASKS[1] if lsh else entries["mask"])
            if "side = left" in other["mask"] and "position" in other:  # bfloat16 ALiBi rounds
                other["position"] = other["position"].replace(  # indices: no left padding
                    ", rounding = bfloat16", "").replace("alibi(rounding = bfloat16)", "alibi")
            if entries.get("kernel", "").startswith(("delta_rule", "kda", "lightning",
                                                     "mamba2", "mamba(", "short_conv")):
                # a hybrid stack, as Qwen3-Next's, Kimi Linear's and LFM2's
                other = {k: v for k, v in other.items() if k != "kernel"}
            text += "attention b {\n" + "\n".join(f"    {k} = {v}"
                                                   for k, v in other.items()) + "\n}\n"
            pattern = r.choice(["[a, b]", "[b, a, a]"])
        extra = ""
        if drawn == "pre" and r.random() < 0.4 and placement == "pre":
            extra += "\n    residual = " + r.choice(["parallel", "parallel(shared_norm = true)"])
        modern = random.Random(seed * 7919 + 26)  # ModernBERT's unnormed layer 0: own stream
        if placement == "pre" and "residual" not in extra and modern.random() < 0.5:
            extra += "\n    first_attn_norm = false"
        if "relative_bias" in entries.get("position", "") and r.random() < 0.5:
            extra += "\n    relative_bias = shared"
        if r.random() < 0.4:  # a language model: token ids in, logits out
            extra += f"\n    vocab = {r.choice([5, 37])}"
            if r.random() < 0.5:
                extra += "\n    tie_embeddings = true"
            if r.random() < 0.5:
                extra += "\n    embedding_scale = " + r.choice(["sqrt(16)", "0.5"])
            if r.random() < 0.5:
                extra += "\n    logit_softcap = " + r.choice(["30.0", "2.5"])
            if random.Random(seed * 7919 + 31).random() < 0.2:  # Gemma 4's: own stream
                extra += "\n    per_layer_inputs = ple(width = 3, activation = gelu_tanh)"
            transform = random.Random(seed * 7919 + 34)  # BERT's prediction head: own stream
            if transform.random() < 0.2:
                extra += "\n    head_transform = dense(norm = " + transform.choice(
                    ["layernorm(eps = 1e-12)", "layernorm(eps = 1e-5, bias = false)",
                     "rmsnorm(eps = 1e-6)"]) + ", activation = " + transform.choice(
                    ["gelu", "gelu_tanh", "relu", "silu"]) + transform.choice(
                    ["", ", bias = false"]) + ")"
            head = random.Random(seed * 7919 + 8)  # its own stream, as above
            if head.random() < 0.3:
                extra += "\n    logit_scale = " + head.choice(["1 / 8", "2.5"])
            if head.random() < 0.3:
                extra += "\n    head_bias = true"
            norms = random.Random(seed * 7919 + 18)  # BLOOM's embedding norm: own stream
            if norms.random() < 0.25:
                chosen = norms.choice(
                    ["layernorm(eps = 1e-5)", "layernorm(bias = false)", "rmsnorm(eps = 1e-6)",
                     "rmsnorm(unit_offset = true)"])
                if chosen == "rmsnorm(eps = 1e-6)" and weightless.random() < 0.5:
                    chosen = "rmsnorm(eps = 1e-6, affine = false)"  # NanoChat's
                extra += "\n    embedding_norm = " + chosen
        if random.Random(seed * 7919 + 9).random() < 0.2:  # Granite's residual multiplier
            extra += "\n    residual_scale = 0.25"
        elif "residual" not in extra and random.Random(seed * 7919 + 38).random() < 0.15:
            extra += "\n    residual_scale = depth"  # Beam's: its own stream
        layers = r.randint(1, 3)
        cut = random.Random(seed * 7919 + 36)  # LongCat-Flash's shortcut: its own stream
        if placement == "pre" and "residual" not in extra and "per_layer_inputs" not in extra \
                and cut.random() < 0.5:
            layers = 2  # (one pair)
            extra += "\n    shortcut = " + cut.choice(
                ["swiglu(8)", "gelu(4, bias = true)",
                 "moe(experts = 3, top_k = 2, expert = swiglu(8), normalize = false, "
                 "selection_bias = true, routed_scale = 2.0, zero_experts = 2)"])
        shares = random.Random(seed * 7919 + 30)  # Gemma 4's shared keys, scalars: own stream
        if layers > 1 and pattern == "a" and plain and "kernel" not in entries and not cross \
                and "by_length" not in entries and "head_experts" not in entries and \
                shares.random() < 0.3:
            extra += f"\n    kv_shared_layers = {shares.randint(1, layers - 1)}"
        if shares.random() < 0.2 and "shortcut" not in extra:  # (which it would change)
            extra += "\n    layer_scalar = true"
        if random.Random(seed * 7919 + 41).random() < 0.12:  # Inkling's: its own stream
            extra += "\n    ffn_conv = conv(width = " + random.Random(seed).choice(
                ["2", "3", "4"]) + ")"
        experts = random.Random(seed * 7919 + 13)  # a mixture of experts: own stream
        if experts.random() < 0.2:  # gpt-oss's clamped unit, tight enough to clamp
            ffn = f"clamped_swiglu({r.choice([8, 24])}, bias = true, limit = 0.75)"
        if experts.random() < 0.2:
            n = experts.choice([3, 8])
            top_k, normalize = experts.randint(1, n), experts.choice(["true", "false"])
            bias = experts.choice(["true", "false"])
            shared = experts.choice(["none", "swiglu(8)", "gelu(4, bias = true)"])
            routing = _routing(seed, layers, shared != "none", n, top_k)
            expert, ffn = ffn, (f"moe(experts = {n}, top_k = {top_k}, expert = {ffn}, normalize = "
                   f"{normalize}, router_bias = {bias}, shared = {shared}, routed_scale = "
                   f"{experts.choice([1, 2.5])}{routing})")
            mixer = random.Random(seed * 7919 + 20)  # PhiMoE's sparse mixer: own stream
            if n > 2 and mixer.random() < 0.3:  # a threshold keeping some, or every expert
                ffn = (f"moe(experts = {n}, top_k = 2, expert = {expert}, router = sparsemixer, "
                       f"threshold = {mixer.choice([0.02, 0.3, 1e9])}, shared = {shared})")
        xielu = random.Random(seed * 7919 + 21)  # Apertus's xIELU MLP: its own stream
        if not ffn.startswith(("moe(", "relu2(")) and xielu.random() < 0.15:
            ffn = f"xielu({xielu.choice([8, 24])}" + xielu.choice(
                ["", ", bias = true", ", beta = 0.25, eps = -0.5"]) + ")"
        sub = random.Random(seed * 7919 + 23)  # BitNet's MLP sub-norm: its own stream
        if not ffn.startswith(("moe(", "xielu(")) and sub.random() < 0.15:
            inner = sub.choice([ffn, f"relu2_glu({sub.choice([8, 24])})"])
            ffn = f"sub_norm({inner}" + sub.choice(
                ["", ", rmsnorm(eps = 1e-5)", ", norm = layernorm(eps = 1e-5)"]) + ")"
        normed = random.Random(seed * 7919 + 45)  # MiniMax's normed residual: own stream
        if placement == "pre" and not any(w in extra for w in ("residual", "first_attn_norm",
                                                                "shortcut")) and \
                normed.random() < 0.5:
            extra += f"\n    residual = normed(alpha = {normed.choice([0.5, 1, 3.5566])})"
        placed = random.Random(seed * 7919 + 49)  # OLMo Hybrid's placements: own stream
        if placement in ("pre", "sandwich", "output") and not any(w in extra for w in (
                "residual =", "shortcut", "first_attn_norm")) and placed.random() < 0.3:
            extra += "\n    placements = [" + ", ".join(placed.choice(
                ["pre", "sandwich", "output"]) for _ in range(placed.randint(1, 3))) + "]"
        beside = random.Random(seed * 7919 + 52)  # Falcon-H1's parallel mixer: own stream
        if placement == "pre" and not any(w in extra for w in (
                "residual =", "placements")) and "kernel" not in entries and \
                beside.random() < 0.25:
            d = int(entries["d_model"])
            heads = beside.choice([h for h in (1, 2, 4) if d % h == 0])
            state = beside.choice([4, 8])
            kernel = beside.choice([
                f"mamba2(groups = 1, conv = {beside.choice([2, 4])}, chunk = "
                f"{beside.choice([1, 5, 64])}, norm = "
                f"{beside.choice(['after_gate', 'before_gate', 'none'])})",
                f"delta_rule(conv = {beside.choice([1, 4])}, chunk = {beside.choice([3, 64])})"])
            mask = entries["mask"]  # (its padding slots skipped as the pattern's are)
            mask = "causal & padding(side = left)" if "padding(side = left)" in mask else \
                "causal & padding" if "padding" in mask else "causal"
            text += (f"attention p {{\n    d_model = {d}\n    heads = {heads}\n    head_dim = "
                     f"{state}\n    value_dim = {d // heads}\n    bias = false\n    kernel = "
                     f"{kernel}\n    mask = {mask}\n}}\n")
            extra += "\n    parallel = p"
        alone = random.Random(seed * 7919 + 47)  # Mamba2's, Nemotron-H's blocks: own stream
        if placement == "pre" and not any(w in extra for w in (
                "residual =", "shortcut", "ffn_conv", "depth", "placements")) and \
                alone.random() < 0.7:
            if layers == 1 or alone.random() < 0.3:
                ffn = "none"  # (no block has a feed-forward)
            else:  # (some blocks without theirs)
                blocks = sorted(alone.sample(range(layers), alone.randint(1, layers - 1)))
                extra += f"\n    attention_only = [{', '.join(map(str, blocks))}]"
        aside = random.Random(seed * 7919 + 55)  # Zamba2's side block: its own stream
        if placement == "pre" and not any(w in extra for w in (
                "residual =", "placements", "kv_shared_layers", "parallel")) and \
                aside.random() < 0.3:
            text += _side(aside, int(entries["d_model"]), entries["mask"])
            blocks = sorted(aside.sample(range(layers), aside.randint(1, layers)))
            extra += (f"\n    side = side(attention = s, ffn = "
                      f"{aside.choice(['gelu_glu(8)', 'swiglu(12)', 'gelu(6)'])}, layers = "
                      f"[{', '.join(map(str, blocks))}])")
        memory = random.Random(seed * 7919 + 56)  # a decoder's cross attention: own stream
        if placement in ("pre", "post") and not any(w in extra for w in (
                "residual = ", "depth", "placements", "kv_shared_layers", "parallel =",
                "side =", "shortcut", "attention_only", "per_layer_inputs", "ffn_conv",
                "first_attn_norm")) and memory.random() < 0.7:
            d = int(entries["d_model"])
            width = memory.choice([d, 24])
            model = "vocab" in extra and memory.random() < 0.8  # an encoder-decoder model
            decoder_cross = _cross(memory, d, d if model else width)  # (one embedding: d wide)
            if model:  # (generation pads the sources on the right)
                decoder_cross = decoder_cross.replace("padding(side = left)", "padding")
            text += decoder_cross
            extra += "\n    cross = c"
            if model:
                text += _encoder(memory, d)
                extra += f"\n    encoder = e\n    decoder_start = {memory.choice([0, 2])}"
        sight = random.Random(seed * 7919 + 57)  # a vision stack's patches: own stream
        if not any(w in text + extra for w in (
                "vocab", "cross =", "padding", "document", "mrope", "learned(", "linformer",
                "prefix", "kind = cross")) and not decoding and sight.random() < 0.5:
            extra += "\n    " + _patches(sight, placement, extra)
            d = int(entries["d_model"])
            if not any(w in extra for w in ("relative_bias", "kv_shared", "side =", "parallel",
                                            "shortcut")) and sight.random() < 0.4:
                heads = sight.choice([h for h in (1, 2, 4) if d % h == 0 and d // h % 4 == 0]
                                     or [1])
                if d // heads % 4 == 0:  # Pixtral's (rows and columns turn the pairs), BEiT's
                    position = sight.choice([
                        f"rope(theta = {sight.choice([100, 10000])}, axial = true)",
                        f"relative_2d(window = {sight.randint(1, 5)}, class_token = "
                        f"{'true' if 'class_token = true' in extra else 'false'})"])
                    text += (f"\nattention v {{\n    d_model = {d}\n    heads = {heads}\n"
                             f"    position = {position}\n    mask = full\n}}\n")
                    pattern = "v"
            extra = _registers(random.Random(seed * 7919 + 60), extra, text)
        if "vocab" in extra and not decoding and "cross =" not in extra and \
                random.Random(seed * 7919 + 61).random() < 0.25:  # CLIP's text tower
            extra = re.sub(r"\n    (tie_embeddings|logit_softcap|logit_scale|head_bias|"
                           r"head_transform) = [^\n]*", "", extra) + "\n    lm_head = false"
        text += (f"\ntransformer t {{\n    attention = {pattern}\n    layers = "
                 f"{layers}\n    ffn = {ffn}\n    norm = {norm}){extra}\n}}\n")
    return text


def _patches(r: random.Random, placement: str, extra: str) -> str:
    """A vision stack's input (ViT's, SigLIP's, CLIP's): patches of 1 to 4 pixels a side over
    1 to 4 channels, with or without a bias, a class token, a learned table of 2 x 2 to 5 x 5
    positions; DINOv2's layer scale and CLIP's missing final norm where the blocks allow."""
    args = [f"size = {r.randint(1, 4)}", f"channels = {r.randint(1, 4)}"]
    args += r.sample(["bias = false", "class_token = true", f"grid = {r.randint(2, 5)}"],
                     r.randint(0, 3))
    out = f"patches = patches({', '.join(args)})"
    plain = placement == "pre" and "residual =" not in extra and "placements" not in extra
    if plain and r.random() < 0.4:
        out += "\n    layer_scale = true"
    if placement != "post" and r.random() < 0.3:
        out += "\n    final_norm = false"
    return out


def _registers(r: random.Random, extra: str, text: str) -> str:
    """DINOv2's register rows after the class token (not under relative_2d), the antialiased
    resize of a position table and DeiT's distillation token (their own stream: 60)."""
    head, sep, rest = extra.partition("patches = patches(")
    args, close, tail = rest.partition(")")
    if "relative_2d" not in text and r.random() < 0.3:
        args += f", registers = {r.randint(1, 3)}"
    if "grid =" in args and r.random() < 0.4:
        args += ", antialias = true"
    if "class_token = true" in args and "relative_2d" not in text and r.random() < 0.3:
        args += ", distillation_token = true"
    return head + sep + args + close + tail


def _side(r: random.Random, d: int, mask: str) -> str:
    """A side block's attention (Zamba2's shared block): [x ; e] in (2 d), d out, a causal
    mask skipping the pattern's padding slots, RoPE or none, its scale (head_dim / 2)^-1/2 or
    the default."""
    heads = r.choice([h for h in (1, 2, 4) if 2 * d % h == 0])
    kv = r.choice([k for k in (1, 2, 4) if heads % k == 0])
    head_dim = 2 * d // heads
    mask = "causal & padding(side = left)" if "padding(side = left)" in mask else \
        "causal & padding" if "padding" in mask else "causal"
    position = r.choice(["none", "rope(theta = 10000)"]) if head_dim % 2 == 0 else "none"
    scale = r.choice(["", f"\n    scale = {(head_dim / 2) ** -0.5!r}"])
    return (f"attention s {{\n    d_model = {2 * d}\n    out_dim = {d}\n    heads = {heads}\n"
            f"    kv_heads = {kv}\n    bias = false\n    position = {position}\n    mask = "
            f"{mask}{scale}\n}}\n")


def _encoder(r: random.Random, d: int) -> str:
    """An encoder-decoder's encoder (the original Transformer's, T5's, BART's): a stack of
    `d`-wide hidden states, its source padding hidden or not, sinusoidal positions or none,
    pre- or post-norm, an input norm or not."""
    heads = r.choice([h for h in (1, 2, 4) if d % h == 0])
    mask = r.choice(["padding", "full", "padding & window(left = 3, right = 3)"])
    position = r.choice(["none", "sinusoidal"])
    norm = r.choice(["layernorm(pre)", "layernorm(post)", "rmsnorm(pre, eps = 1e-6)"])
    extra = r.choice(["", "\n    embedding_norm = layernorm(eps = 1e-5)"])
    return (f"attention ea {{\n    d_model = {d}\n    heads = {heads}\n    position = "
            f"{position}\n    mask = {mask}\n}}\ntransformer e {{\n    attention = ea\n"
            f"    layers = {r.randint(1, 2)}\n    ffn = {r.choice(['relu(16)', 'gelu(8)'])}\n"
            f"    norm = {norm}{extra}\n}}\n")


def _cross(r: random.Random, d: int, width: int) -> str:
    """A decoder's cross attention (T5's, BART's): the stack's width, memory rows of another
    width, GQA or not, memory padding on either side or none, some rows always seen, no
    positions."""
    heads = r.choice([h for h in (1, 2, 4) if d % h == 0])
    kv = r.choice([k for k in (1, 2, 4) if heads % k == 0])
    mask = r.choice(["full", "padding", "padding(side = left)", "padding(side = right) | "
                     "prefix(2)"])
    bias = r.choice(["false", "[q, v, o]", "true"])
    return (f"attention c {{\n    d_model = {d}\n    heads = {heads}\n    kv_heads = {kv}\n"
            f"    kind = cross\n    memory_dim = {width}\n    bias = {bias}\n"
            f"    mask = {mask}\n}}\n")


def _routing(seed: int, layers: int, shared: bool, experts: int, top_k: int) -> str:
    """Llama 4's, Qwen2-MoE's and DeepSeek's routing (a sigmoid router, the gate on the
    expert's input, a gated shared expert, a selection bias, group-limited choice), Kolibri's
    choice by the logits, A.X-K1's output norm, JetMoE's bias on the routed sum, LongCat's
    identity experts, Inkling's sink experts and dense layers among the mixtures: their own
    streams."""
    r = random.Random(seed * 7919 + 14)
    out = ""
    if r.random() < 0.5:
        out += ", router = sigmoid"
    if r.random() < 0.4:
        out += ", gate = input"
    if r.random() < 0.3 and shared:
        out += ", shared_gate = true"
    if layers > 1 and r.random() < 0.4:
        dense = sorted(r.sample(range(layers), r.randint(1, layers - 1)))
        out += f", dense = {r.choice(['swiglu(12)', 'relu(6)'])}, dense_layers = {dense}"
    if r.random() < 0.3:  # DeepSeek's choice: a selection bias, groups of experts
        out += ", selection_bias = true"
    if experts == 8 and top_k <= 4 and r.random() < 0.4:  # 4 groups of 2, 2 kept
        out += f", groups = 4, top_groups = 2, group_score = {r.choice(['top2', 'max'])}"
    more = random.Random(seed * 7919 + 25)  # Kolibri's choice, A.X-K1's norm: own stream
    if more.random() < 0.3:  # by the logits (plus the selection bias, where there is one)
        out += ", select_by = logits"
    if more.random() < 0.3:
        out += ", output_norm = " + more.choice(["rmsnorm(eps = 1e-5)", "layernorm(eps = 1e-5)",
                                                 "rmsnorm(affine = false)"])
    if random.Random(seed * 7919 + 33).random() < 0.3:  # JetMoE's bias on the sum: own stream
        out += ", output_bias = true"
    zero = random.Random(seed * 7919 + 35)  # LongCat's identity experts: own stream
    if "groups" not in out and zero.random() < 0.3:
        out += f", zero_experts = {zero.randint(1, 3)}"
    sink = random.Random(seed * 7919 + 42)  # Inkling's shared experts as sinks: own stream
    if "groups" not in out and "zero_experts" not in out and sink.random() < 0.3:
        out += f", sink_experts = {sink.randint(1, 2)}"
    return out


def _delta(r: random.Random, entries: dict, excluded: bool) -> None:
    """The gated delta rule (Qwen3-Next's linear layers) in place of the softmax core (its
    own stream): key heads dividing the heads, a convolution of 1 to 4 taps, chunks from 1
    to beyond the test's lengths."""
    if excluded or "by_length" in entries or "latent" in entries or r.random() >= 0.12:
        return
    for key in ("kv_heads", "qk_norm", "position", "softcap", "sparsity", "output_gate",
                "temperature", "sinks", "differential", "dropout", "documents",
                "qk_norm_after_rope"):
        entries.pop(key, None)
    heads = int(entries["heads"])
    key_heads = r.choice([d for d in range(1, heads + 1) if heads % d == 0])
    entries["kernel"] = (f"delta_rule(key_heads = {key_heads}, conv = {r.choice([1, 2, 4])}, "
                         f"chunk = {r.choice([1, 5, 16, 64])}, "
                         f"eps = {r.choice(['1e-6', '0.01'])})")
    entries["mask"] = r.choice(_RECURRENT_MASKS)


# the masks a recurrent kernel's streams draw (causal twice: half of them without padding)
_RECURRENT_MASKS = ("causal", "causal", "causal & padding(side = left)", "padding & causal")
# an attention's keys with no stream of their own (the main stream's)
_PLAIN = {"d_model", "heads", "kv_heads", "head_dim", "value_dim", "bias", "mask", "position",
          "scale", "qk_norm", "dropout", "out_proj", "sparsity", "kernel"}


def _kda(r: random.Random, entries: dict, excluded: bool) -> None:
    """Kimi delta attention (Kimi Linear's and Ling 3's linear layers) in place of the softmax
    core (its own stream): a convolution of 1 to 4 taps, chunks from 1 to beyond the test's
    lengths, full or low-rank gates, the bounded forget gate or none; drawn last, in a plain
    softmax attention alone (so the other streams' specs stay as they were)."""
    if excluded or set(entries) - _PLAIN or entries.get("kernel", "softmax") != "softmax" or \
            r.random() >= 0.25:
        return
    for key in ("kv_heads", "qk_norm", "position", "sparsity", "dropout"):
        entries.pop(key, None)
    entries["kernel"] = (f"kda(conv = {r.choice([1, 2, 4])}, chunk = {r.choice([1, 5, 16, 64])}"
                         f", eps = {r.choice(['1e-6', '0.01'])}, forget_rank = "
                         f"{r.choice(['none', '3'])}, gate_rank = {r.choice(['none', '5'])}, "
                         f"lower_bound = {r.choice(['none', '-5', '-0.5'])})")
    entries["mask"] = r.choice(_RECURRENT_MASKS)


def _lightning(r: random.Random, entries: dict, excluded: bool) -> None:
    """Lightning attention (MiniMax-Text-01's linear layers) in place of the softmax core (its
    own stream): the depth's rate factor or none, chunks from 1 to beyond the test's lengths;
    drawn last, in a plain softmax attention alone, as Kimi delta attention's."""
    if excluded or set(entries) - _PLAIN or entries.get("kernel", "softmax") != "softmax" or \
            "mrope" in entries.get("position", "") or r.random() >= 0.5:
        return
    for key in ("kv_heads", "qk_norm", "position", "sparsity", "dropout", "scale"):
        entries.pop(key, None)
    entries["kernel"] = (f"lightning(layers = {r.choice(['none', '3', '4'])}, chunk = "
                         f"{r.choice([1, 5, 16, 64])}, eps = {r.choice(['1e-6', '0.01'])})")
    entries["mask"] = r.choice(_RECURRENT_MASKS)


def _mamba2(r: random.Random, entries: dict, excluded: bool) -> None:
    """Mamba2's state-space layer (Bamba's, Granite 4's, Nemotron-H's mixers) in place of the
    softmax core (its own stream): B and C in one group or one per head, convolutions of 1 to
    4 taps with a bias or none, chunks from 1 to beyond the test's lengths, the step clamped or
    not; drawn last, in a plain softmax attention alone, as lightning attention's."""
    if excluded or set(entries) - _PLAIN or entries.get("kernel", "softmax") != "softmax" or \
            "mrope" in entries.get("position", "") or r.random() >= 0.5:
        return
    for key in ("kv_heads", "qk_norm", "position", "sparsity", "dropout", "scale"):
        entries.pop(key, None)
    heads = int(entries["heads"])
    clamp = r.choice(["", ", dt_min = 0.01", ", dt_min = 0.001, dt_max = 2"])
    bias = r.choice(["false", "[o]"])
    entries["bias"] = "false" if entries.get("out_proj") == "false" else bias
    entries["kernel"] = (f"mamba2(groups = {r.choice([1, heads])}, conv = "
                         f"{r.choice([1, 2, 4])}, chunk = {r.choice([1, 5, 16, 64])}, eps = "
                         f"{r.choice(['1e-5', '0.01'])}, conv_bias = "
                         f"{r.choice(['true', 'false'])}{clamp})")
    entries["mask"] = r.choice(_RECURRENT_MASKS)


def _mamba(r: random.Random, entries: dict, excluded: bool) -> None:
    """Mamba's selective state-space layer (Mamba, Falcon-Mamba, Jamba's mixers) in place of
    the softmax core (its own stream): each channel a head of value_dim 1, dt features of rank
    1 to 3, convolutions of 1 to 4 taps with a bias or none, chunks from 1 to beyond the
    test's lengths, its dt, B and C norms none, weightless or weighted; drawn last, in a
    plain softmax attention alone, as Mamba2's."""
    if excluded or set(entries) - _PLAIN or entries.get("kernel", "softmax") != "softmax" or \
            "mrope" in entries.get("position", "") or r.random() >= 0.8 or \
            entries.get("out_proj") == "false":  # (value_dim 1: heads x 1 is not d_model)
        return
    for key in ("kv_heads", "qk_norm", "position", "sparsity", "dropout", "scale"):
        entries.pop(key, None)
    entries["value_dim"] = "1"
    entries["bias"] = r.choice(["false", "[o]"])
    entries["kernel"] = (f"mamba(rank = {r.choice([1, 3])}, conv = {r.choice([1, 2, 4])}, "
                         f"chunk = {r.choice([1, 5, 16])}, conv_bias = "
                         f"{r.choice(['true', 'false'])}, norm = "
                         f"{r.choice(['none', 'weightless', 'weighted'])})")
    entries["mask"] = r.choice(_RECURRENT_MASKS)


def _short_conv(r: random.Random, entries: dict, excluded: bool) -> None:
    """LFM2's gated short convolution in place of the whole attention (its own stream): a
    window of 2 to 5 tokens, biases on every projection or none."""
    if excluded or "by_length" in entries or "latent" in entries or r.random() >= 0.1:
        return
    for key in ("kv_heads", "qk_norm", "position", "softcap", "sparsity", "output_gate",
                "temperature", "sinks", "differential", "dropout", "documents",
                "qk_norm_after_rope", "scale"):
        entries.pop(key, None)
    entries["kernel"] = f"short_conv(width = {r.choice([2, 3, 5])})"
    entries["bias"] = r.choice(["true", "false"])
    entries["mask"] = r.choice(["causal", "causal & padding(side = left)", "padding & causal"])


def _latent(r: random.Random, entries: dict, excluded: bool) -> None:
    """DeepSeek's multi-head latent attention, in place of the drawn projections (its own
    stream): a q bottleneck or none, a latent, rope features joined to each head's others."""
    if excluded or "by_length" in entries or r.random() >= 0.15 or \
            entries.get("out_proj") == "false":
        return
    for key in ("kv_heads", "qk_norm", "differential", "output_gate", "temperature",
                "qk_norm_after_rope"):
        entries.pop(key, None)
    rope, nope = r.choice([2, 4, 8]), r.randint(1, 9)
    entries["head_dim"] = str(rope + nope)
    entries["value_dim"] = str(r.choice([3, 8, 16]))
    q_rank = r.choice(["none", "5", "24"])
    entries["latent"] = (f"mla(kv_rank = {r.choice([4, 12, 33])}, rope_dim = {rope}, "
                         f"q_rank = {q_rank}, eps = {r.choice(['1e-6', '0.01'])})")
    entries["position"] = r.choice(["none", "rope(theta = 10000)",
                                    "rope(theta = 500, interleaved = true)"])


def _indexer(r: random.Random, entries: dict) -> None:
    """DeepSeek-V3.2's lightning indexer on latent attention with a query latent (its own
    stream): its heads, their width (rope_dim or more, at least 4: a LayerNorm over 2
    features leaves every key one of two, whose scores tie up to rounding), the keys each
    query keeps."""
    latent = entries.get("latent", "q_rank = none")
    if "q_rank = none" in latent or "softcap" in entries or r.random() >= 0.5:
        return
    rope = int(latent.split("rope_dim = ")[1].split(",")[0])
    heads, width = r.choice([1, 3, 4]), r.choice([max(rope, 4), rope + 4, 10])
    entries["indexer"] = (f"lightning(heads = {heads}, head_dim = {width}, top_k = "
                          f"{r.choice([1, 3, 7])}, rope = {r.choice(['half', 'interleaved'])})")


def _head_experts(r: random.Random, entries: dict, excluded: bool) -> None:
    """JetMoE's mixture of attention heads in place of the query and output projections (its
    own stream): top_k = heads / kv_heads of 1 to 3 more experts, in a spec without the
    mechanisms before the core or after it (the score and softmax ones combine)."""
    if excluded or r.random() >= 0.2 or any(key in entries for key in (
            "qk_norm", "qk_norm_after_rope", "temperature", "differential", "output_gate",
            "sub_norm", "clip_qkv", "v_norm", "values")):
        return
    top_k = int(entries["heads"]) // int(entries.get("kv_heads", entries["heads"]))
    entries["head_experts"] = f"moa(experts = {top_k + r.randint(0, 3)}, top_k = {top_k})"
