"""Targets: the Arm CPU variants and Mali GPU models the rules can be asked about."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from .errors import UnknownTargetError
from .rules import Rules


@dataclass(frozen=True)
class Target:
    """A resolved target. ``name`` is canonical (``"cpu"``, ``"G78AE"``); ``arch`` is the GPU
    family (``"VALHALL"``) or ``"CPU"``; ``value`` is ACL's GPUTarget enum value (0 for CPUs)."""

    name: str
    kind: str            # "cpu" | "gpu"
    arch: str
    value: int
    fp16: bool
    resolved_from: str   # what the caller passed, for the trace

    @property
    def is_gpu(self) -> bool:
        return self.kind == "gpu"


def resolve_target(name: str | Target, rules: Rules) -> Target:
    """Map a target name, case-insensitively, or a Mali device name to a :class:`Target`.

    Raises :class:`UnknownTargetError` (a ``ValueError``) listing the known names.
    """
    if isinstance(name, Target):
        return name
    if not isinstance(name, str) or not name.strip():
        raise UnknownTargetError("target", name, "expected a target name such as 'cpu' or 'G77'")
    return _resolve(name.strip(), rules)


@lru_cache(maxsize=256)
def _resolve(name: str, rules: Rules) -> Target:
    t = rules.targets
    key = name.lower()
    if key in ("cpu", "cpu-nofp16", "cpu_nofp16"):
        info = t.cpu if key == "cpu" else t.cpu_nofp16
        return Target("cpu" if key == "cpu" else "cpu-nofp16", "cpu", "CPU", 0, info.fp16, name)
    upper = name.upper()
    if upper in t.gpu:
        return _gpu(upper, rules, name)
    if "MALI" in upper:
        return _gpu(_from_device_name(name, rules), rules, name)
    known = ", ".join(["cpu", "cpu-nofp16", *t.gpu])
    raise UnknownTargetError("target", name, f"unknown target; known: {known}, or a Mali "
                             "device name such as 'Mali-G78AE r0p1'")


def _gpu(name: str, rules: Rules, raw: str) -> Target:
    value = rules.targets.gpu[name]
    arch = rules.targets.gpu_families[value & 0xF00]
    return Target(name, "gpu", arch, value, rules.targets.gpu_fp16, raw)


def _from_device_name(device_name: str, rules: Rules) -> str:
    """ACL's ``get_target_from_name`` (v25.01+): full token, then base token, then by prefix."""
    spec = rules.targets.device_names
    match = re.search(spec.pattern, device_name)
    if not match:
        return spec.no_match
    full, base = match.group(1).upper(), match.group(2).upper()
    for token in (full, base):
        if token in rules.targets.gpu:
            return token
    return spec.unknown_by_prefix.get(base[:1], spec.no_match)


def target_names(rules: Rules) -> list[str]:
    """Every canonical target name, CPUs first."""
    return ["cpu", "cpu-nofp16", *rules.targets.gpu]
