"""Every layer of every example: the NumPy reference vs the torch module vs ONNX Runtime (CPU),
from one exported file per target, at the lengths verify chooses for it (1, primes past every
extent the spec names) and 64; S differs from L for cross attention. B = 1 and 3 at the lengths
up to 64 (a batch's rows of other lengths, so rows with no visible key, L = 1), B = 1 past it
(conftest.verified; `--deep` runs B = 3 there too).

The planned targets (ort-cpu, ort-cuda) run for every layer. The portable target is the torch
module as torch.onnx.export traces it (seconds per layer, most of this sweep's time), so it runs
for the layers whose portable graphs together exercise every op, strategy, mask primitive and
attribute kind that any layer's does (conftest.plan_cover): the torch module it traces is
checked on every layer here, and its export on random specs too (test_random_specs)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import attndsl
from attndsl.ir import parameter_count
from attndsl.mechanisms.lsh import LshKernel
from attndsl.spec import attentions_of
from attndsl.verify import default_lengths

from .conftest import BATCHED_UP_TO, EXAMPLES, plan_cover, verified

LAYERS = [(path, name) for path in EXAMPLES for name in attndsl.load(path)]
# each layer's tests on one worker (pytest-xdist), where its exports are built once (conftest)
PARAMS = [pytest.param(p, n, id=f"{p.stem}:{n}", marks=pytest.mark.xdist_group(f"{p.stem}:{n}"))
          for p, n in LAYERS]
pytestmark = pytest.mark.usefixtures("shared_exports")
PORTABLE = set(plan_cover(LAYERS, ("portable",)))


@pytest.mark.parametrize(("path", "name"), PARAMS)
def test_backends_match_the_reference(path, name) -> None:
    """At the lengths verify chooses for the layer (past its windows, chunks and blocks; a
    by_length example's thresholds past 600 are test_by_length's), and 64, a multiple of every
    block size."""
    layer = attndsl.load(path)[name]
    lengths = {n: why for n, why in default_lengths(layer.spec).items() if n <= 600}
    lengths[64] = "a multiple of every block"
    portable = (path, name) in PORTABLE
    comparisons = verified(layer, lengths, seed=1,
                           targets=None if portable else ("ort-cpu", "ort-cuda"))
    assert {c.backend for c in comparisons} == {
        "torch", "ort-cpu on cpu", "ort-cuda on cpu"} | ({"portable on cpu"} if portable else set())
    assert {c.length for c in comparisons} == set(lengths)
    assert {(c.batch, c.length) for c in comparisons} >= {
        (3, n) for n in lengths if n <= BATCHED_UP_TO}
    if layer.spec.__class__.__name__ == "Attention" and layer.spec.kind == "cross":
        assert any(c.memory_length != c.length for c in comparisons)


@pytest.mark.parametrize("target", ["portable", "ort-cpu"])
@pytest.mark.parametrize(("path", "name"), PARAMS)
def test_no_length_sized_constant_is_stored(path, name, target: str) -> None:
    """Masks and position tables are computed in the graph: the file holds the weights and only
    small constants besides, so one file serves every length."""
    if target == "portable" and (path, name) not in PORTABLE:
        pytest.skip("the portable export of the layers in the portable sweep (above)")
    layer = attndsl.load(path)[name]
    model = onnx.load_from_string(layer.onnx_bytes(target=target, seed=1))  # verify's above
    params = parameter_count(layer.spec)  # (an encoder-decoder's encoder: a file of its own)
    params -= parameter_count(layer.spec.encoder) if getattr(layer.spec, "encoder", None) else 0
    stored = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    # an LSH kernel's rotations [heads, head_dim, rounds * buckets / 2] are constants of the
    # model, whatever the length
    rotations = [a.heads * a.head_dim * a.kernel.rounds * a.kernel.buckets // 2
                 for a in attentions_of(layer.spec) if isinstance(a.kernel, LshKernel)]
    allowed = max([4096, *rotations])
    layers = getattr(layer.spec, "layers", 1)
    assert params <= stored <= params + 4096 + sum(rotations) * layers
    for node in model.graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                assert int(np.prod(attr.t.dims)) <= allowed, node.op_type
