"""512-bit vectors for the fused kernels: an opt-in (``CONVSEL_WIDE_VECTORS``), off by default.

numba compiles for the host CPU, but LLVM's tuning for Intel server cores (Skylake-X to
Emerald Rapids) carries ``prefer-256-bit``: its loops use ymm registers even where AVX-512
is there (AMD's Zen 4 gets zmm). Adding ``-prefer-256-bit`` to numba's CPU features lets
them use zmm. numba has one set of CPU features per process, fixed when it first compiles
anything, so this changes every numba kernel of the process, not only convsel's: hence
opt-in. It is applied when this package is first imported (the first fused kernel
prepared); if numba compiled something before that, the process keeps what numba chose and
:func:`state` says so. Measured on the quiet host in benchmarks/NOTES-cpu.md ("512-bit
vectors, decided").
"""

from __future__ import annotations

import warnings

from .... import config
from ....errors import InvalidProblemError

FIELD = "wide_vectors"
NO_256_BIT = "-prefer-256-bit"
_ON = frozenset({"1", "true", "yes", "on"})
_OFF = frozenset({"0", "false", "no", "off"})


def wanted() -> bool:
    """Whether ``CONVSEL_WIDE_VECTORS`` asks for 512-bit vectors (unset: no)."""
    raw = config.current().wide_vectors
    if raw is None or not raw.strip():
        return False
    word = raw.strip().lower()
    if word not in _ON | _OFF:
        raise InvalidProblemError(config.variable(FIELD), raw,
                                  "must be one of 1, true, yes, on, 0, false, no, off")
    return word in _ON


def _numba_has_compiled() -> bool:
    """numba builds its CPU target (and fixes the features) lazily, at the first compile."""
    from numba.core.registry import cpu_target

    return "_toplevel_target_context" in vars(cpu_target)


def apply() -> None:
    """Put ``-prefer-256-bit`` into numba's CPU features if asked for and still possible.
    Without the setting nothing of numba's is touched."""
    if not wanted():
        return
    from numba.core import config as numba_config
    from numba.core.codegen import get_host_cpu_features

    if _numba_has_compiled():
        warnings.warn(f"{config.variable(FIELD)} is set but numba compiled code before "
                      "convsel's fused kernels loaded: its CPU features are fixed for this "
                      "process, the fused kernels keep them", RuntimeWarning, stacklevel=2)
        return
    from numba.core.registry import cpu_target

    # what numba itself would use (the host's features, NUMBA_ENABLE_AVX respected)
    features = numba_config.CPU_FEATURES or get_host_cpu_features()
    if NO_256_BIT not in features.split(","):
        numba_config.CPU_FEATURES = f"{features},{NO_256_BIT}" if features else NO_256_BIT
    # Build numba's code generator now, with these features: numba re-reads its NUMBA_*
    # variables before each compile and would drop the value if one of them changed.
    cpu_target.target_context.codegen()


def in_force() -> bool:
    """Whether numba's code generator (created now if need be) runs without the 256-bit
    preference: what the fused kernels actually get."""
    from numba.core.registry import cpu_target

    features = cpu_target.target_context.codegen().magic_tuple()[2]
    return NO_256_BIT in str(features).split(",")
