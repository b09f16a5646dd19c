"""convsel: ACL's convolution algorithm selection, explained, executed and measured."""

from ._version import __version__
from .activation import Activation
from .errors import (
    BackendUnavailableError,
    ConvselError,
    InvalidProblemError,
    KernelBuildError,
    RuleFileError,
    TuningDatabaseError,
    UnknownTargetError,
    UnsupportedError,
)
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
    "InvalidProblemError",
    "KernelBuildError",
    "RuleFileError",
    "Rules",
    "Selection",
    "Target",
    "TuningDatabaseError",
    "UnknownTargetError",
    "UnsupportedError",
    "__version__",
    "load_rules",
    "resolve_target",
    "select",
]
