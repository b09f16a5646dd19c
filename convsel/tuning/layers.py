"""Read a layer file (the format of the packaged ``convsel/data/layers.json``) into named
problems.

A layer file is a JSON array of objects with ``net, name, n, h, w, c, k, kh, kw, stride, pad,
dilation, groups`` (and optionally any other :class:`~convsel.problem.ConvProblem` field).
A field that is neither is reported for its layer and ignored; a layer that is not a valid
problem is reported and left out. Neither stops the others.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import InvalidProblemError
from ..problem import ConvProblem

NAME_FIELDS = ("net", "name")
PROBLEM_FIELDS = tuple(f.name for f in dataclasses.fields(ConvProblem))


@dataclass(frozen=True)
class Layer:
    """One conv layer: its net, its name(s) and its problem; ``notes`` are what was ignored."""

    net: str
    name: str
    problem: ConvProblem
    notes: tuple[str, ...] = field(default=())

    @property
    def label(self) -> str:
        return f"{self.net}/{self.name}"


def default_layer_file() -> Path:
    """The nets' layer shapes shipped inside the package (public architecture facts: the conv
    layers of ResNet-50, VGG-16, MobileNetV2, SqueezeNet, Inception-v3, YOLOv3, AlexNet,
    SRGAN/ESRGAN and U-Net)."""
    return Path(str(resources.files("convsel").joinpath("data", "layers.json")))


def load_layers(path: str | Path | None = None, nets: list[str] | None = None,
                ) -> tuple[list[Layer], list[str]]:
    """The layers of ``path`` (of ``nets`` only, if given), and one message per problem.

    Raises
    ------
    InvalidProblemError
        The file cannot be read, is not a JSON array, or holds none of the named nets.
    """
    path = Path(path) if path is not None else default_layer_file()
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise InvalidProblemError("layers", str(path), f"cannot read a JSON layer file: {exc}")
    if not isinstance(raw, list):
        raise InvalidProblemError("layers", str(path), "expected a JSON array of layers")
    if nets:
        known = sorted({str(r.get("net")) for r in raw if isinstance(r, dict)})
        missing = [n for n in nets if n not in known]
        if missing:
            raise InvalidProblemError("net", missing[0], f"not in {path}; known: "
                                      f"{', '.join(known)}")
        raw = [r for r in raw if isinstance(r, dict) and r.get("net") in nets]
    layers, messages = [], []
    for i, record in enumerate(raw):
        layer, message = _layer(i, record)
        if layer is not None:
            layers.append(layer)
        if message:
            messages.append(message)
    return layers, messages


def _layer(index: int, record: Any) -> tuple[Layer | None, str]:
    if not isinstance(record, dict):
        return None, f"layer {index}: expected a JSON object, got {type(record).__name__}; skipped"
    net, name = str(record.get("net", "layers")), str(record.get("name", f"#{index}"))
    where = f"layer {index} ({net}/{name})"
    unknown = sorted(set(record) - set(NAME_FIELDS) - set(PROBLEM_FIELDS))
    notes = tuple(f"unknown field {k!r} ignored" for k in unknown)
    try:
        problem = ConvProblem(**{k: v for k, v in record.items() if k in PROBLEM_FIELDS})
    except (InvalidProblemError, TypeError) as exc:
        return None, f"{where}: not a valid problem ({exc}); skipped"
    message = f"{where}: {'; '.join(notes)}" if notes else ""
    return Layer(net, name, problem, notes), message


def distinct(layers: list[Layer]) -> list[Layer]:
    """The first layer of each distinct problem (a file may repeat a shape)."""
    seen: set[ConvProblem] = set()
    out = []
    for layer in layers:
        if layer.problem not in seen:
            seen.add(layer.problem)
            out.append(layer)
    return out
