"""convsel: ACL's convolution algorithm selection, explained, executed and measured."""

from typing import Any

from ._version import __version__
from .activation import Activation
from .errors import (
    BackendUnavailableError,
    ConversionWarning,
    ConvselError,
    FallbackWarning,
    InvalidProblemError,
    KernelBuildError,
    RuleFileError,
    TuningDatabaseError,
    UnknownTargetError,
    UnsupportedError,
    WorkspaceLimitError,
)
from .policies import choose
from .problem import ConvProblem
from .rules import Rules, load_rules
from .selection import Candidate, Selection, select
from .targets import Target, resolve_target

__all__ = [
    "Activation",
    "BackendUnavailableError",
    "Candidate",
    "ConvProblem",
    "ConversionWarning",
    "ConvselError",
    "FallbackWarning",
    "InvalidProblemError",
    "KernelBuildError",
    "PreparedConv",
    "RuleFileError",
    "Rules",
    "Selection",
    "Target",
    "TuningDatabaseError",
    "UnknownTargetError",
    "UnsupportedError",
    "WorkspaceLimitError",
    "__version__",
    "choose",
    "conv2d",
    "find",
    "load_rules",
    "plan",
    "prepare",
    "resolve_target",
    "select",
]


# Imported on first use: execution pulls in the backends, plan() needs onnx (an extra);
# selecting a method needs neither.
_LAZY = {"PreparedConv": "convsel.api", "conv2d": "convsel.api", "prepare": "convsel.api",
         "plan": "convsel.onnx", "find": "convsel.finder"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'convsel' has no attribute {name!r}")
