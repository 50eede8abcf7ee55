"""Line formatting shared by the dump writers (MindSpore's IR spelling) and the names the reader expects."""

from __future__ import annotations

from typing import Any

import numpy as np

from graphpar.common.dtype import ms_name
from graphpar.ir.graph import Graph, Node, Value
from graphpar.planner.layout import is_layout_strategy
from graphpar.planner.strategy import MeshInfo, strategy_text
from graphpar.planner.strategy import spec_text as spec_text  # re-exported: the writers print layouts with it

FORMAT_VERSION = 1  # the "# format: graphpar-ir N" header; bump when a line's grammar changes (docs/ir_format.md)
VALUE_PREFIX = {"param": "para", "state": "state", "input": "data", "const": "const"}


def value_ref(value: Value) -> str:
    """``%para0_w``, ``%data2_input0``, ``%const7``, or ``%5`` for an op output."""
    prefix = VALUE_PREFIX.get(value.kind)
    if prefix is None:
        return f"%{value.id}"
    if value.kind == "const":
        return f"%const{value.id}"
    safe = "".join(c if c.isalnum() or c in "._" else "_" for c in value.name)
    return f"%{prefix}{value.id}_{safe}"


def attr_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "None"
    if isinstance(v, (tuple, list)):
        if v and all(isinstance(x, (tuple, list)) for x in v):
            return strategy_text(v)
        return "(" + ", ".join(attr_value(x) for x in v) + ")"
    if isinstance(v, np.dtype) or (isinstance(v, type) and issubclass(v, np.generic)):
        return ms_name(v)
    if isinstance(v, float):
        return repr(v)
    text = str(v)
    return text.replace("\n", " ")


def primitive_attrs(node: Node) -> dict[str, Any]:
    """An op's ``primitive_attrs`` as MindSpore prints them: its attributes, then the strategy its ``shard()`` set
    (``in_layout``/``out_layout`` when written with Layout objects, else ``in_strategy``/``out_strategy``)."""
    attrs = dict(node.attrs)
    if is_layout_strategy(node.hint):
        attrs["in_layout"] = node.hint
        attrs["out_layout"] = node.out_hint
    elif node.hint is not None:
        attrs["in_strategy"] = node.hint
        attrs["out_strategy"] = node.out_hint
    return attrs


def attrs_text(attrs: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {attr_value(v)}" for k, v in attrs.items()) + "}"


def tensor_type(dtype: Any, shape: tuple[int, ...]) -> str:
    return f"<Tensor[{ms_name(dtype)}], {tuple(shape)}>"


def split_text(spec: tuple, mesh: MeshInfo) -> str:
    return "(" + ", ".join(str(mesh.size(axes)) for axes in spec) + ("," if len(spec) == 1 else "") + ")"


def local_shape(shape: tuple[int, ...], spec: tuple, mesh: MeshInfo) -> tuple[int, ...]:
    return tuple(d // mesh.size(axes) for d, axes in zip(shape, spec))


def mesh_text(mesh: MeshInfo) -> str:
    return " ".join(f"{n}={s}" for n, s in zip(mesh.names, mesh.sizes))


def outputs_lhs(graph: Graph, outputs: list[int]) -> str:
    return ",".join(f"%{v}" for v in outputs) + "(out)"
