"""The IR text read back: `parse(graph.text()) == graph` for every graph attndsl builds or
plans (the golden IR files are this text; a test holds the round trip on every example and on
random specs).

    attention NAME: SUMMARY
      %out = op %arg, ... key=value ... : type      (a node; a switch's branches indented)
      output NAME = %value                          (the output, then each present)
      weight NAME : [dims] init fan_in=N            (the weight table, in draw order)
"""

from __future__ import annotations

import re

from ..shapes import TensorType
from ..weight_table import Weight
from .graph import Graph, Node, Op
from .literals import Reader

__all__ = ["parse"]

_OPS = {op.value: op for op in Op}
_HEAD = re.compile(r"%(?P<out>[\w.]+) = (?P<op>\w+)")
_ARG = re.compile(r"\s*%(?P<name>[\w.]+)(?P<comma>,?)")
_TYPE = re.compile(r"\s*: (?P<dtype>\w*)\[(?P<dims>.*)\]$")
_BOUND = re.compile(r"(?:L <= \d+|otherwise): %(?P<out>[\w.]+)$")
_WEIGHT = re.compile(r"weight (?P<name>\S+) : \[(?P<shape>[\d, ]*)\] (?P<init>\w+)"
                     r"(?: fan_in=(?P<fan_in>\d+))?$")


def parse(text: str) -> Graph:
    """The graph a `Graph.text()` describes; ValueError naming the line it cannot read."""
    lines = text.splitlines()
    if not lines:
        raise ValueError("empty IR text")
    kind, _, rest = lines[0].partition(" ")
    name, sep, summary = rest.partition(": ")
    if not sep:
        raise ValueError(f"line 1: expected `KIND NAME: SUMMARY`, found {lines[0]!r}")
    body = [(i + 2, line) for i, line in enumerate(lines[1:])]
    nodes, rest_lines = _nodes(body, indent=2)
    outputs: list[tuple[str, str]] = []
    weights: list[Weight] = []
    for number, line in rest_lines:
        stripped = line.strip()
        if stripped.startswith("output "):
            label, _, value = stripped.removeprefix("output ").partition(" = %")
            outputs.append((label, value))
        elif m := _WEIGHT.fullmatch(stripped):
            shape = tuple(int(d) for d in m["shape"].split(", ") if d)
            weights.append(Weight(m["name"], shape, m["init"], int(m["fan_in"] or 0)))
        else:
            raise ValueError(f"line {number}: expected an output or a weight: {line!r}")
    if not outputs:
        raise ValueError("no `output` line")
    (output_name, output), presents = outputs[0], outputs[1:]
    if any(label != value for label, value in presents):
        raise ValueError("a present's output must name its own value")
    return Graph(name, kind, summary, tuple(nodes), output, tuple(weights), output_name,
                 tuple(label for label, _ in presents))


def _nodes(lines: list[tuple[int, str]], indent: int) -> tuple[list[Node], list[tuple[int, str]]]:
    """The nodes written at `indent` (with their switches' branches), and the lines after
    them."""
    nodes: list[Node] = []
    while lines:
        number, line = lines[0]
        if _indent(line) != indent or not line.strip().startswith("%"):
            break
        node = _node(line.strip(), number)
        lines = lines[1:]
        if node.op is Op.SWITCH:
            branches, outs = [], []
            while lines and _indent(lines[0][1]) == indent + 4:
                m = _BOUND.fullmatch(lines[0][1].strip())
                if not m:
                    raise ValueError(f"line {lines[0][0]}: expected a branch's bound: "
                                     f"{lines[0][1]!r}")
                branch, lines = _nodes(lines[1:], indent + 6)
                branches.append(tuple(branch))
                outs.append(m["out"])
            node = Node(node.op, node.out, node.args,
                        (*node.attrs, ("branches", tuple(branches)), ("outputs", tuple(outs))),
                        node.shape)
        nodes.append(node)
    return nodes, lines


def _node(line: str, number: int) -> Node:
    try:
        head = _HEAD.match(line)
        if not head or head["op"] not in _OPS:
            raise ValueError("expected `%name = op`")
        pos, args = head.end(), []
        while m := _ARG.match(line, pos):
            args.append(m["name"])
            pos = m.end()
            if not m["comma"]:
                break
        attrs = []
        reader = Reader(line, pos)
        while reader.peek() and reader.peek()[0] == "name":
            _, key = reader.take()
            reader.expect("=")
            attrs.append((key, reader.value()))
        shape = _TYPE.fullmatch(line, reader.pos)
        if not shape:
            raise ValueError("expected `: type` at the end")
        dims = tuple(int(d) if d.isdigit() else d for d in shape["dims"].split(", ") if d)
        return Node(_OPS[head["op"]], head["out"], tuple(args), tuple(attrs),
                    TensorType(dims, shape["dtype"] or None))
    except ValueError as e:
        raise ValueError(f"line {number}: {e}: {line!r}") from None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))
