"""The IR as a contract: its text parses back to an equal graph (every example, built,
decoding and planned for every target; random specs), and the verifier refuses graphs that
break an op's definition, naming the pass, the node, the operand and the rule."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import attndsl
from attndsl import ir, masks
from attndsl.decoding import check_decodable
from attndsl.errors import SpecError
from attndsl.ir import Op
from attndsl.ir.decompose import decomposed
from attndsl.ir.ops import OPS
from attndsl.ir.text import parse
from attndsl.ir.verify import IRError, verify
from attndsl.mechanisms import SOFTMAX_ATTRS
from attndsl.planner import plan
from attndsl.targets import TARGETS

from .conftest import EXAMPLES
from .specgen import random_spec


def _graphs(spec):
    """The layer's graph, its decoding graph where it decodes, and each planned for every
    target."""
    built = [ir.build(spec)]
    try:
        check_decodable(spec)
        built.append(ir.build(spec, decode=True))
    except SpecError:
        pass
    for graph in built:
        yield graph
        for target in TARGETS:
            yield plan(graph, target)[0]


def _round_trip(spec) -> int:
    count = 0
    for graph in _graphs(spec):
        text = graph.text()
        back = parse(text)
        assert back == graph, f"{spec.name}: the text does not read back to the same graph"
        assert back.text() == text
        count += 1
    return count


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_text_reads_back_to_the_same_graph(path: Path) -> None:
    program = attndsl.load(path)
    assert sum(_round_trip(program[name].spec) for name in program) >= 2 * len(program)


@pytest.mark.parametrize("seed", range(0, 40, 3))
def test_random_specs_read_back(seed: int) -> None:
    program = attndsl.loads(random_spec(seed), f"random-{seed}.attn")
    for name in program:
        _round_trip(program[name].spec)


def test_every_op_has_one_definition() -> None:
    assert set(OPS) == set(Op)
    assert all(d.operands[0] <= d.operands[1] for d in OPS.values())


LAYER = """
attention a {
    d_model = 32
    heads = 4
    kv_heads = 2
    position = rope(theta = 10000)
    mask = causal & window(left = 3, right = 0)
}
"""


def _graph():
    return ir.build(attndsl.loads(LAYER)["a"].spec)


def _primitive():
    """The layer's graph with its core in primitive ops (`ir.decompose`)."""
    graph = _graph()
    return replace(graph, nodes=tuple(decomposed(graph.nodes)))


def _broken(graph, name: str, **changes):
    nodes = tuple(replace(n, **changes) if n.out == name else n for n in graph.nodes)
    return replace(graph, nodes=nodes)


@pytest.mark.parametrize(("name", "changes", "words"), [
    ("scores", {"args": ("q_rope", "nowhere")}, "operand 1 %nowhere is not defined"),
    ("scores", {"args": ("q_rope",)}, "takes 2 to 2 operands, has 1"),
    ("q_heads", {"attrs": (("heads", 4),)}, "attribute dim is missing"),
    ("k_rep", {"attrs": (("groups", 2), ("colour", 1))}, "attribute colour is not one of"),
    ("q", {"attrs": (("weight", "q_proj.weight"), ("bias", object()))}, "holds a live object"),
    ("q", {"attrs": (("weight", "w_proj.weight"), ("bias", None))},
     "names w_proj.weight, not in the weight table"),
    ("k_rep", {"attrs": (("groups", 3),)}, "(B, Hkv, S, d) must become (B, Hkv * groups"),
    ("mask", {"shape": ir.graph.TensorType(("L", "L"), None)}, "a mask is bool"),
    ("probs", {"args": ("scores", "scores")}, "operand 1 (the mask) must be bool"),
    # the `softmax` hook's attribute (from its mechanism) names a weight-table tensor
    ("probs", {"attrs": (("dropout", 0.0), (SOFTMAX_ATTRS[0], "nowhere"))},
     "names nowhere, not in the weight table"),
    ("probs", {"attrs": (("dropout", 0.0), ("colour", 1))}, "attribute colour is not one of"),
    # each attribute's value is of the kind its op declares
    ("q_heads", {"attrs": (("heads", "4"), ("dim", 8))}, "attribute heads holds str '4', not int"),
    ("q", {"attrs": (("weight", "q_proj.weight"), ("bias", 1.5))},
     "attribute bias holds float 1.5, not None or str"),
    ("k_rep", {"attrs": (("groups", True),)}, "attribute groups holds bool True, not int"),
    ("mask", {"attrs": (("expr", "causal"), ("sparsity", None), ("memory", None))},
     "attribute expr holds str 'causal', not mask"),
])
def test_the_verifier_names_the_node_and_the_rule(name: str, changes: dict, words: str) -> None:
    graph = _primitive()
    verify(graph, "build")  # the unbroken graph holds
    with pytest.raises(IRError) as e:
        verify(_broken(graph, name, **changes), "a test")
    assert f"IR after a test: %{name} = " in str(e.value)
    assert words in str(e.value)


def _core_attrs(change):
    node = next(n for n in _graph().nodes if n.op is Op.ATTENTION)
    return {"attrs": change(node.attrs)}


@pytest.mark.parametrize(("changes", "words"), [
    (_core_attrs(lambda a: tuple(kv for kv in a if kv[0] != "dropout")), "must be ["),
    (_core_attrs(lambda a: (*a, ("colour", 1))), "must be ["),
    (_core_attrs(lambda a: (*a[:1], a[2], a[1], *a[3:])), "must be ["),  # out of order
    (_core_attrs(lambda a: tuple((k, "hat" if k == "bias" else v) for k, v in a)),
     "no score bias 'hat'"),
    (_core_attrs(lambda a: (*((k, "sdpa" if k == "strategy" else v) for k, v in a),
                            ("colour", 1))), None),  # planned: its parameters ride along
])
def test_the_verifier_holds_the_core_to_its_attributes(changes: dict, words: str | None) -> None:
    """An unplanned core's attributes are exactly `ops.core_attributes` of its bias, in order;
    a planned one's are followed by its strategy's parameters."""
    graph = _broken(_graph(), "merged", **changes)
    if words is None:
        verify(graph, "a test")
        return
    with pytest.raises(IRError) as e:
        verify(graph, "a test")
    assert "IR after a test: %merged = attention: " in str(e.value)
    assert words in str(e.value)


def test_the_verifier_refuses_a_value_defined_twice_and_an_undefined_output() -> None:
    graph = _graph()
    twice = replace(graph, nodes=(*graph.nodes, graph.nodes[-1]))
    with pytest.raises(IRError, match="defined twice"):
        verify(twice, "a test")
    with pytest.raises(IRError, match="output %gone is not defined"):
        verify(replace(graph, output="gone"), "a test")


def test_masks_and_scalings_read_back_exactly() -> None:
    expr = masks.Or(masks.Not(masks.Global(first=2, tokens=(5, 9))),
                    masks.Window(left=3, right=1, align="bottom_right"))
    graph = _graph()
    node = next(n for n in graph.nodes if n.op is Op.ATTENTION)
    changed = _broken(graph, node.out, attrs=tuple((k, expr if k == "expr" else v)
                                                   for k, v in node.attrs))
    assert parse(changed.text()) == changed


def test_unreadable_text_names_its_line() -> None:
    text = _graph().text().replace("split_heads", "split_heads_", 1)
    with pytest.raises(ValueError, match=r"line \d+: expected `%name = op`"):
        parse(text)


def test_every_node_reads_into_its_ops_frozen_attribute_record() -> None:
    """Each op's attributes are a frozen dataclass of its declared fields (`OpDef.record`): a
    node of every op in the graph reads into it with its values, undeclared ones of an open
    op in `more`, and the record cannot be changed."""
    import dataclasses

    from attndsl.ir.ops import OPS

    graph = _primitive()
    for node in (*graph.nodes, *_graph().nodes):
        d = OPS[node.op]
        rec = d.attributes(node)
        assert dataclasses.is_dataclass(rec) and type(rec).__name__.endswith("Attributes")
        declared = {f.name for f in dataclasses.fields(rec)} - {"more"}
        for key, value in node.attrs:
            if key in declared:
                assert getattr(rec, key) == value
            else:
                assert d.open and (key, value) in rec.more
        if dataclasses.fields(rec):
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(rec, dataclasses.fields(rec)[0].name, None)
