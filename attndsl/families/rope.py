"""RoPE as a Hugging Face config states it (transformers 5's `rope_parameters`, or the older
`rope_theta` + `rope_scaling`), written as the language's `rope(...)`: one part of `attndsl
import`."""

from __future__ import annotations

__all__ = ["default_partial", "default_theta", "interleaved_mrope", "num", "rope"]

# the keys transformers requires of each rope_type (RotaryEmbeddingConfigMixin's validation)
_REQUIRED = {
    "linear": ("factor",), "dynamic": ("factor",),
    "yarn": ("factor", "original_max_position_embeddings"),
    "llama3": ("factor", "original_max_position_embeddings", "low_freq_factor",
               "high_freq_factor"),
    "longrope": ("short_factor", "long_factor", "original_max_position_embeddings"),
}


def num(value: float) -> str:
    """A number as the language reads it back exactly (repr round-trips a double)."""
    if isinstance(value, bool):
        raise TypeError(value)
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


def default_theta(s, theta: float) -> None:
    """A config class's own `default_theta` (transformers' default base where config.json
    gives neither `rope_theta` nor `rope_parameters`), in place of 10000."""
    if s.cfg.get("rope_parameters") is None and s.cfg.get("rope_theta") is None:
        s.cfg["rope_theta"] = theta


def default_partial(s, factor: float) -> None:
    """A config class's own default `partial_rotary_factor` (its __post_init__'s, which puts
    config.json's top-level one, else this, into `rope_parameters`), in place of 1."""
    given = s.cfg.get("partial_rotary_factor", factor)
    params = s.cfg.get("rope_parameters")
    if isinstance(params, dict) and "partial_rotary_factor" not in params:
        s.cfg["rope_parameters"] = {**params, "partial_rotary_factor": given}
    elif params is None:
        s.cfg["partial_rotary_factor"] = given


def rope(s, params: dict | None, head_dim: int, interleaved: bool = False,
         dim: int | None = None) -> str:
    """rope(...) from rope_parameters (transformers 5) or rope_theta + rope_scaling; `s` is the
    import's spec under construction (its `cfg`, and `problems` to add to)."""
    cfg = s.cfg
    if params is None:
        params = dict(cfg.get("rope_scaling") or {})
        params.setdefault("rope_theta", cfg.get("rope_theta", cfg.get("rotary_emb_base",
                                                                       10000.0)))
        if "type" in params and "rope_type" not in params:
            params["rope_type"] = params["type"]
        if params.get("rope_type") == "su":  # Phi-3's first name for longrope
            params["rope_type"] = "longrope"
        if cfg.get("partial_rotary_factor") is not None:
            params.setdefault("partial_rotary_factor", cfg["partial_rotary_factor"])
    theta = params.get("rope_theta", 10000.0)
    if dim is None:
        dim = int(head_dim * params.get("partial_rotary_factor", 1.0))
    kind = params.get("rope_type", "default")
    if kind == "proportional":  # frequencies over the whole head; pairs past the factor unturned
        dim = head_dim
    if dim % 2 and kind == "default" and dim < head_dim:
        # an odd rotary dim n (GLM-4.5's head_dim 42 at factor 0.5): transformers rotates n + 1
        # features at frequencies theta^(-2i/n), which are (theta^((n + 1)/n))^(-2i/(n + 1))
        theta, dim = theta ** ((dim + 1) / dim), dim + 1
    elif dim % 2:
        s.problems.append(f"the rotary dim {dim} (head_dim x partial_rotary_factor) is odd: "
                          f"attndsl reads it for rope_type \"default\" alone, not \"{kind}\"")
    args = [f"theta = {num(theta)}"]
    if dim != head_dim:
        args.append(f"dim = {dim}")
    if interleaved:
        args.append("interleaved = true")
    # as transformers' standardize_rope_params: the pretraining length of llama3, yarn and
    # longrope is the config's own original_max_position_embeddings (Phi-3 keeps it there),
    # else the rope parameters', else max_position_embeddings
    orig = cfg.get("original_max_position_embeddings") or params.get(
        "original_max_position_embeddings") or cfg.get("max_position_embeddings")
    missing = [key for key in _REQUIRED.get(kind, ()) if key not in params
               and not (key == "original_max_position_embeddings" and orig is not None)]
    if missing:
        s.problems.append(f"`rope_parameters` with rope_type \"{kind}\" lacks "
                          f"{', '.join(f'`{k}`' for k in missing)} (transformers refuses such a "
                          "config too)")
        return f"rope({', '.join(args)})"
    factor = params.get("factor")
    if (kind == "dynamic" or (kind in ("yarn", "longrope") and factor is None)) and \
            cfg.get("max_position_embeddings") is None:
        s.problems.append(f"`max_position_embeddings` is missing: rope_type \"{kind}\" "
                          "needs it (its factor, or where its scaling begins)")
        return f"rope({', '.join(args)})"
    if kind == "linear":
        args.append(f"scaling = linear({num(factor)})")
    elif kind == "dynamic":
        args.append(f"scaling = dynamic(factor = {num(factor)}, original_max_position = "
                    f"{cfg.get('max_position_embeddings')})")
    elif kind == "llama3":
        args.append(f"scaling = llama3(factor = {num(factor)}, low_freq_factor = "
                    f"{num(params['low_freq_factor'])}, high_freq_factor = "
                    f"{num(params['high_freq_factor'])}, original_max_position = {orig})")
    elif kind == "yarn":
        if factor is None:
            factor = cfg["max_position_embeddings"] / orig
        extra = "".join(f", {key} = {num(params[key])}" for key in (
            "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor")
            if params.get(key) is not None)
        if params.get("truncate") is False:
            extra += ", truncate = false"
        args.append(f"scaling = yarn(factor = {num(factor)}, original_max_position = {orig}"
                    f"{extra})")
    elif kind == "longrope":
        short = ", ".join(num(v) for v in params["short_factor"])
        long = ", ".join(num(v) for v in params["long_factor"])
        tail = (f"attention_factor = {num(params['attention_factor'])}"
                if params.get("attention_factor") is not None else
                f"factor = {num(factor)}" if factor is not None else
                f"factor = {cfg['max_position_embeddings']} / {orig}")
        args.append(f"scaling = longrope(short_factor = [{short}], long_factor = [{long}], "
                    f"original_max_position = {orig}, {tail})")
    elif kind == "proportional":
        rotated = int(params.get("partial_rotary_factor", 1.0) * head_dim // 2)
        args.append(f"scaling = proportional(rotated = {rotated}"
                    + (f", factor = {num(factor)})" if factor not in (None, 1, 1.0) else ")"))
    elif kind != "default":
        s.problems.append(f"`rope_type` = \"{kind}\": no such RoPE scaling in attndsl "
                          "(linear, dynamic, llama3, yarn, longrope, proportional)")
    return f"rope({', '.join(args)})"


def interleaved_mrope(s, position: str, sections) -> str | None:
    """`position` (a `rope(...)` entry) reading three position streams interleaved by
    `sections` (Qwen3-VL's layout: `mrope = [t, h, w], mrope_interleaved = true`); None, with
    the refusal, where they are not three integers >= 0."""
    if not (isinstance(sections, list | tuple) and len(sections) == 3 and all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in sections)):
        s.refuse("rope_parameters", "`mrope_section` must be three integers >= 0 (the time, "
                                    "height and width sections)")
        return None
    t, h, w = sections
    return f"{position[:-1]}, mrope = [{t}, {h}, {w}], mrope_interleaved = true)"
