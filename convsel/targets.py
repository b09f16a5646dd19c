"""Targets: the Arm CPU variants and Mali GPU models the rules can be asked about."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import lru_cache

from .errors import UnknownTargetError
from .rules import Rules

# Mali models that real devices report but ACL's GPUTarget table does not list. ACL maps them
# by their first letter (the rules' ``device_names.unknown_by_prefix``); convsel does so only for
# models that exist, so that a typo ("Mali-G999") is an error rather than silently FIFTHGEN.
MALI_MODELS_OUTSIDE_ACL = (
    "T604", "T608", "T622", "T624", "T628", "T658", "T678", "T720", "T760", "T820", "T830",
    "T860", "T880", "G625", "G725", "G925", "G1",
)

_SEPARATORS = re.compile(r"[\s_\-]+")
_MALI_PREFIX = re.compile(r"^\s*mali[\s_\-]*", re.IGNORECASE)


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
    """Map a target name or a Mali device name (``"Mali-G78AE r0p1"``) to a :class:`Target`.

    Case and separators (spaces, ``-``, ``_``) do not matter: ``"mali g77"``, ``"MALI-G77"`` and
    ``"G77"`` are one target. A name that resolves to no target raises
    :class:`UnknownTargetError` (a ``ValueError``) listing the close matches.
    """
    if isinstance(name, Target):
        return name
    if not isinstance(name, str) or not name.strip():
        raise UnknownTargetError("target", name, "expected a target name such as 'cpu' or 'G77'")
    return _resolve(name.strip(), rules)


def target_names(rules: Rules) -> list[str]:
    """Every canonical target name, CPUs first."""
    return ["cpu", "cpu-nofp16", *rules.targets.gpu]


def _squash(name: str) -> str:
    return _SEPARATORS.sub("", name).upper()


@lru_cache(maxsize=256)
def _resolve(name: str, rules: Rules) -> Target:
    canonical = {_squash(n): n for n in target_names(rules)}
    key = _squash(name)
    is_device_name = _MALI_PREFIX.match(name) is not None
    for candidate in (key, key[len("MALI"):] if is_device_name else None):
        if candidate in canonical:
            return _target(canonical[candidate], rules, name)
    tokens = _device_model(name, rules) if is_device_name else (key,)
    for token in tokens:
        if token in canonical:
            return _target(canonical[token], rules, name)
    for token in tokens:
        if token in MALI_MODELS_OUTSIDE_ACL:
            fallback = rules.targets.device_names.unknown_by_prefix[token[0]]
            return _target(fallback, rules, name)
    raise UnknownTargetError("target", name, _unknown_rule(tokens[0] if tokens else key, rules))


def _target(name: str, rules: Rules, raw: str) -> Target:
    if name in ("cpu", "cpu-nofp16"):
        info = rules.targets.cpu if name == "cpu" else rules.targets.cpu_nofp16
        return Target(name, "cpu", "CPU", 0, info.fp16, raw)
    value = rules.targets.gpu[name]
    arch = rules.targets.gpu_families[value & 0xF00]
    return Target(name, "gpu", arch, value, rules.targets.gpu_fp16, raw)


def _device_model(device_name: str, rules: Rules) -> tuple[str, ...]:
    """The model tokens of a Mali device name, full then base (``"G78AE"``, ``"G78"``), as ACL's
    ``get_target_from_name`` (v25.01+) reads them; any case or separator after "Mali"."""
    rest = _MALI_PREFIX.sub("", device_name)
    match = re.search(rules.targets.device_names.pattern, "Mali-" + rest)
    if not match:
        return ()
    return tuple(dict.fromkeys((match.group(1).upper(), match.group(2).upper())))


def _unknown_rule(token: str, rules: Rules) -> str:
    known = target_names(rules)
    choices = {_squash(n): n for n in [*known, *MALI_MODELS_OUTSIDE_ACL]}
    close = [choices[m] for m in difflib.get_close_matches(token, list(choices), n=4, cutoff=0.5)]
    rule = (f"unknown target; close matches: {', '.join(close)}" if close
            else f"unknown target; known: {', '.join(known)}")
    fallback = rules.targets.device_names.unknown_by_prefix.get(token[:1])
    if fallback and token[1:2].isdigit():
        rule += (f" (ACL itself assumes {fallback} for a Mali model it does not know: "
                 f"pass '{fallback}' to ask about that)")
    return rule + "; case, spaces, '-' and '_' do not matter"
