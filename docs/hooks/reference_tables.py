"""Reference tables generated from the code: the nodes' ROS parameters and the config schemas.

The docs build (``site_hooks.py``) puts these tables into the pages, so the parameter and
configuration references are read from the same objects the nodes and the loaders use: a
``Spec`` tuple of a node module, a pydantic model. A description comes from the field's
``description``, else from the comment lines right above the field in its class.
"""

from __future__ import annotations

import importlib
import inspect
import re
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

#: a key under which options only experiments use are kept; the reference marks them
EXPERIMENTAL_KEY = "experimental"


@dataclass(frozen=True)
class NodeSection:
    """A group of parameters a node declares: where the ``Spec`` tuples live, and for whom."""

    title: str
    text: str
    specs: tuple[tuple[str, str], ...]  # (module, attribute) of each Spec tuple


NODES = "embodied_r_ros.nodes"
NODE_SECTIONS = (
    NodeSection("frame_buffer", "Executable `frame_buffer`; one per camera.",
                ((f"{NODES}.frame_buffer", "SPECS"), (f"{NODES}.params", "CONFIG_SPECS"))),
    NodeSection("perception and reasoning", "Executables `perception_node` and "
                "`reasoning_node`: managed nodes that load their model on `configure`.",
                ((f"{NODES}.model_node", "SPECS"),)),
    NodeSection("perception", "The perception node also declares:",
                ((f"{NODES}.perception_node", "SPECS"),)),
    NodeSection("query_server", "Executable `query_server`.",
                ((f"{NODES}.query_server", "SPECS"),)),
    NodeSection("query_server, stand-alone", "A stand-alone query server reaches its peers "
                "over ROS and also declares:", ((f"{NODES}.query_server", "REMOTE_SPECS"),)),
    NodeSection("query_server, all-in-one", "In the all-in-one process (`embodied_r`) the "
                "query server reads the pipeline configuration for every node:",
                ((f"{NODES}.params", "CONFIG_SPECS"),)),
)


def _cell(text: str) -> str:
    """Docstring text as markdown, safe inside a table cell (reST roles and ``literals`` become
    code spans)."""
    text = re.sub(r":\w+:`~?", "`", " ".join(str(text).split()))
    parts = re.sub(r"``([^`]+)``", r"`\1`", text).split("`")
    parts[::2] = [p.replace("<", "&lt;").replace(">", "&gt;") for p in parts[::2]]
    return "`".join(parts).replace("|", "\\|")


def _ros_value(value: Any) -> str:
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, str):
        return f"`{value}`" if value else "(empty)"
    if isinstance(value, list | tuple):
        return "`[" + ", ".join(str(v) for v in value) + "]`"
    return f"`{value}`"


def _spec_range(spec: Any) -> str:
    if spec.choices:
        return " \\| ".join(f"`{c}`" for c in spec.choices)
    if spec.lo is not None and spec.hi is not None:
        return f"{spec.lo:g} .. {spec.hi:g}"
    return ""


def _specs(module: str, attribute: str) -> tuple[Any, ...]:
    return tuple(getattr(importlib.import_module(module), attribute))


def node_parameter_tables() -> str:
    """Every node's parameters: name, default, range or choices, settable, description."""
    out: list[str] = []
    for section in NODE_SECTIONS:
        specs = [s for module, attr in section.specs for s in _specs(module, attr)]
        out += [f"### {section.title}", "", section.text, "",
                "| parameter | default | range | settable | description |",
                "|---|---|---|---|---|"]
        out += [f"| `{s.name}` | {_ros_value(s.default)} | {_spec_range(s)} | "
                f"{'' if s.read_only else 'yes'} | {_cell(s.description)} |" for s in specs]
        out.append("")
    return "\n".join(out)


# -- configuration schemas ------------------------------------------------------------------


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    """The pydantic models an annotation holds (``X``, ``X | None``, ``list[X]``)."""
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in get_args(annotation):
        yield from _models_in(arg)


def field_comments(cls: type) -> dict[str, str]:
    """The comment lines right above each field of ``cls``'s body, joined, by field name."""
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    out: dict[str, str] = {}
    comment: list[str] = []
    for line in lines[1:]:
        stripped = line.strip()
        if line.startswith("    #") and not line.startswith("     "):
            comment.append(stripped.lstrip("#:").strip())
            continue
        match = re.match(r"^    (\w+)\s*:", line)
        if match and comment:
            out[match[1]] = " ".join(comment)
        comment = []
    return out


def _bounds(field: FieldInfo) -> str:
    names = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "min_length": "length >="}
    parts = []
    for item in field.metadata:
        for attr, sign in names.items():
            value = getattr(item, attr, None)
            if value is not None:
                parts.append(f"{sign} {value:g}" if isinstance(value, float) else
                             f"{sign} {value}")
    return ", ".join(parts)


def _type(annotation: Any, anchors: dict[type, str]) -> str:
    origin = get_origin(annotation)
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in get_args(annotation))
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        text = " or ".join(_type(a, anchors) for a in args)
        return text + (" or null" if len(args) < len(get_args(annotation)) else "")
    if origin in (list, tuple):
        return "list of " + ", ".join(_type(a, anchors) for a in get_args(annotation))
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return f"[{anchors[annotation][1]}](#{anchors[annotation][0]})"
    return getattr(annotation, "__name__", str(annotation))


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        return "(section)"
    if isinstance(value, list) and value and isinstance(value[0], BaseModel):
        value = [v.model_dump() for v in value]
    if value is None:
        return "null"
    if value == "":
        return "(empty)"
    text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    return f"`{text.removesuffix('...').strip()}`"


def _sections(root: type[BaseModel], path: str = "") -> dict[type, list[str]]:
    """Each model reachable from ``root``, in the order met, with every key path it sits at."""
    out: dict[type, list[str]] = {root: [path]}
    for name, field in root.model_fields.items():
        for model in _models_in(field.annotation):
            for sub, paths in _sections(model, f"{path}.{name}" if path else name).items():
                out.setdefault(sub, []).extend(paths)
    return out


def _label(paths: list[str]) -> str:
    return ", ".join(f"`{p}`" for p in paths) if paths[0] else "Top level"


def schema_reference(root: type[BaseModel], prefix: str,
                     documented: dict[type, tuple[str, str]] | None = None) -> str:
    """One table per section of ``root``'s schema: key, type, default, description.

    A model met at several keys (a model config) is one section naming them all. Models in
    ``documented`` (anchor, label) are documented elsewhere on the page and linked, not
    repeated; the ones documented here are added to it.
    """
    documented = {} if documented is None else documented
    sections = {m: p for m, p in _sections(root).items() if m not in documented}
    for model, paths in sections.items():
        documented[model] = (f"{prefix}-{paths[0].replace('.', '-') or 'top'}", _label(paths))
    out: list[str] = []
    for model, paths in sections.items():
        anchor, label = documented[model]
        experimental = any(EXPERIMENTAL_KEY in p.split(".") for p in paths)
        out += [f"### {label} {{#{anchor}}}", ""]
        doc = vars(model).get("__doc__")  # its own, not an inherited one
        if doc:
            out += [_cell(inspect.cleandoc(doc).split("\n\n")[0]), ""]
        if experimental:
            out += ['!!! warning "Experimental"', "    Options under `experimental` serve "
                    "experiments: they may change or go without notice.", ""]
        comments = field_comments(model)
        out += ["| key | type | default | description |", "|---|---|---|---|"]
        for name, field in model.model_fields.items():
            text = field.description or comments.get(name, "")
            bounds = _bounds(field)
            kind = _type(field.annotation, documented) + (f" ({bounds})" if bounds else "")
            flag = "**experimental** " if name == EXPERIMENTAL_KEY else ""
            out.append(f"| `{name}` | {kind} | {_default(field)} | {flag}{_cell(text)} |")
        out.append("")
    return "\n".join(out)


def config_reference() -> str:
    """The pipeline schema (``Config``) and the trainer's (``TrainConfig``), shared sections
    documented once."""
    from embodied_r_ros.core.config import Config
    from embodied_r_training.recipe import TrainConfig

    documented: dict[type, tuple[str, str]] = {}
    return "\n".join([
        "## Pipeline configuration", "",
        "Profiles and `--config` files of `embodied-r`, the nodes' `profile`/`config_file` "
        "parameters and `embodied-r-train build` (`embodied_r_ros/core/config.py`, `Config`).",
        "", schema_reference(Config, "pipeline", documented),
        "## Training configuration", "",
        "`embodied-r-train --config` (`training/embodied_r_training/recipe.py`, "
        "`TrainConfig`).", "",
        schema_reference(TrainConfig, "training", documented),
    ])
