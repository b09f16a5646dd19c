"""convsel: ACL's convolution algorithm selection, explained, executed and measured."""

from ._version import __version__
from .activation import Activation
from .errors import (
    BackendUnavailableError,
    ConvselError,
    FallbackWarning,
    InvalidProblemError,
    KernelBuildError,
    RuleFileError,
    TuningDatabaseError,
    UnknownTargetError,
    UnsupportedError,
)
from .ops import PreparedConv, conv2d, prepare
from .problem import ConvProblem
from .rules import Rules, load_rules
from .selection import Candidate, Selection, select
from .targets import Target, resolve_target

__all__ = [
    "Activation",
    "BackendUnavailableError",
    "Candidate",
    "ConvProblem",
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
    "__version__",
    "conv2d",
    "load_rules",
    "plan",
    "prepare",
    "resolve_target",
    "select",
]


def __getattr__(name: str):
    # plan() needs onnx (an optional extra) and is imported on first use only.
    if name == "plan":
        from .onnx import plan

        return plan
    raise AttributeError(f"module 'convsel' has no attribute {name!r}")
