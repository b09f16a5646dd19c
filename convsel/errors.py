"""convsel's exceptions.

Two families, as NNPACK and XNNPACK split them: *invalid* means the caller is wrong,
*unsupported* means a capability gap that a fallback may cover.

    ConvselError
    ├── InvalidProblemError (ValueError)   a field of the problem or an argument is wrong
    │   └── UnknownTargetError             a target name that resolves to nothing
    ├── UnsupportedError                   valid input, but this algorithm/backend cannot run it
    │   ├── BackendUnavailableError        the backend is missing on this machine (no OpenCL)
    │   └── WorkspaceLimitError            nothing that would run fits max_workspace_bytes
    ├── RuleFileError (ValueError)         a heuristics file that does not load or validate
    ├── KernelBuildError                   an OpenCL program failed to build (carries the log)
    └── TuningDatabaseError                the tuning database is corrupt, foreign or unwritable
"""

from __future__ import annotations

from typing import Any


class ConvselError(Exception):
    """Base class of every error convsel raises on purpose."""


class InvalidProblemError(ConvselError, ValueError):
    """The caller passed something that is not a valid convolution problem or argument.

    ``field``, ``value`` and ``rule`` say which input broke which rule, so that a service can
    answer with a structured 422 and a CLI with one readable line.
    """

    def __init__(self, field: str, value: Any, rule: str) -> None:
        self.field = field
        self.value = value
        self.rule = rule
        super().__init__(f"{field}={value!r}: {rule}")


class UnknownTargetError(InvalidProblemError):
    """A target name that is neither a known target nor a resolvable device name."""


class UnsupportedError(ConvselError):
    """A valid problem that this algorithm or backend cannot run; ``reason`` says why."""

    def __init__(self, message: str, *, algorithm: str | None = None,
                 backend: str | None = None) -> None:
        self.algorithm = algorithm
        self.backend = backend
        super().__init__(message)


class BackendUnavailableError(UnsupportedError):
    """The backend cannot be used on this machine at all (missing package or device)."""


class WorkspaceLimitError(UnsupportedError):
    """What would run needs more workspace than ``max_workspace_bytes`` allows (checked before
    anything is built). ``limit`` is that limit; ``needed`` the bytes the refused algorithm
    needs (None: no estimate, or several candidates refused)."""

    def __init__(self, message: str, *, limit: int, needed: int | None = None,
                 algorithm: str | None = None, backend: str | None = None) -> None:
        self.limit = limit
        self.needed = needed
        super().__init__(message, algorithm=algorithm, backend=backend)


class RuleFileError(ConvselError, ValueError):
    """A heuristics file that cannot be read or fails validation; names the entry at fault."""


class KernelBuildError(ConvselError):
    """An OpenCL program failed to build. ``log`` holds the compiler's build log."""

    def __init__(self, message: str, *, log: str = "", options: tuple[str, ...] = ()) -> None:
        self.log = log
        self.options = options
        super().__init__(f"{message}\n--- build log ---\n{log}" if log else message)


class TuningDatabaseError(ConvselError):
    """The tuning database cannot be used: corrupt, foreign, or on a path we cannot write."""


class FallbackWarning(UserWarning):
    """convsel ran something other than what was asked (another backend), and says why."""


class ConversionWarning(UserWarning):
    """convsel converted an argument or its result (another library's array read as numpy,
    float64 computed as float32), and says what."""
