"""The torch module's masks: query and key indices from the graph's inputs, and each mask's
visibility through `attndsl.masks` (at token positions when decoding)."""

from __future__ import annotations

import torch
from torch import Tensor

from .. import masks
from . import formulas
from .cache_slots import decoding_visible
from .torch_arrays import TorchArrays

__all__ = ["kept_keys", "lengths", "mask_context", "memory_visible", "visible"]

Env = dict[str, Tensor]


def lengths(env: Env, keys: int | None = None) -> tuple[Tensor, Tensor]:
    """Query and key indices, (L, 1) and (1, S), from the graph's inputs. When decoding, the L
    new queries come after the P cached keys: queries P .. P+L-1 of keys 0 .. P+L-1, or of
    the last `keys` of them (a bounded cache)."""
    x = env["x"]
    L = x.shape[1]
    if "attention_mask" in env:
        S = env["attention_mask"].shape[1]
        qi = torch.arange(S - L, S, device=x.device).unsqueeze(1)
        first = S if keys is None else keys
        return qi, torch.arange(S - first, S, device=x.device).unsqueeze(0)
    S = env["memory"].shape[1] if env.get("memory") is not None else L
    qi = torch.arange(L, device=x.device).unsqueeze(1)
    ki = torch.arange(S, device=x.device).unsqueeze(0)
    return qi, ki


def memory_visible(expr: masks.Mask, env: Env, keys: int) -> Tensor:
    """(L, S) or (B, L, S): a cross attention's decoding mask over its `keys` cached memory
    rows, which reads the key's index alone (decoding.check_decodable)."""
    device = env["x"].device
    ki = torch.arange(keys, device=device).unsqueeze(0)
    qi = torch.zeros((env["x"].shape[1], 1), dtype=torch.int64, device=device)
    return masks.evaluate(expr, qi, ki, masks.MaskContext(qi.shape[0], keys,
                                                          key_lengths=env.get("key_lengths")))


def visible(expr: masks.Mask, env: Env, keys: int | None = None) -> Tensor:
    """(L, S), or (B, L, S) with runtime inputs. When decoding, keys where attention_mask is 0
    (padding) are hidden too, and `keys` are the cache's (`cache_slots` says which)."""
    if "attention_mask" in env:  # masks read token positions
        return decoding_visible(TorchArrays(env["x"].device), expr, env["attention_mask"],
                                env["x"], keys)
    qi, ki = lengths(env)
    # lengths as 0-d tensors (the last index + 1): torch.onnx.export cannot lower arithmetic
    # between a tensor and a symbolic size such as `h % ceil(S / n)`
    return masks.evaluate(expr, qi, ki, mask_context(env, qi[-1, 0] + 1, ki[0, -1] + 1,
                                                     masks.reads_documents(expr)))


def mask_context(env: Env, L, S, documents: bool = True) -> masks.MaskContext:
    """The mask context at sizes L, S with the module's runtime mask inputs."""
    segments = env.get("segment_ids")
    docs = formulas.document_positions(TorchArrays(segments.device), segments) \
        if segments is not None and documents else None
    return masks.MaskContext(L, S, key_lengths=env.get("key_lengths"), segment_ids=segments,
                             document_positions=docs,
                             memory_segment_ids=env.get("memory_segment_ids"))


def kept_keys(expr: masks.Mask, n: int, env: Env, device: torch.device) -> Tensor:
    """(B|1, 1, n): the keys a mask of keys alone (`padding`, `full`) shows."""
    ki = torch.arange(n, device=device).unsqueeze(0)
    return masks.evaluate(expr, torch.zeros((1, 1), dtype=torch.int64, device=device), ki,
                          masks.MaskContext(1, ki[0, -1] + 1, key_lengths=env.get("key_lengths")))
