"""A local-work-size tuner modelled on ACL's CLTuner (spec §10), with ACL's tuning file.

Modes enumerate candidates exactly as ACL v52.3.0 does (``candidates``); each candidate is
timed with profiling events and kept only if strictly faster than the best so far, starting
from the driver's default (stored as ``0;0;0``). Results are keyed by the kernel's
configuration id and the device tag (name and compute units), loaded from the tuning file
at start and saved whenever a new entry appears.

Off by default. ``$CONVSEL_CL_TUNER`` = rapid|normal|exhaustive turns tuning on (file:
``$CONVSEL_CL_TUNER_FILE``, else ``cl_tuner.lws`` in the user cache directory); the file
alone, without a mode, applies known entries and tunes nothing new (ACL's
``tune_new_kernels = false``). The work-group batch size modifier (wbsm) is Mali-only and
not tuned; a ``lws wbsm`` file is read and its wbsm column ignored.
"""

from __future__ import annotations

import os
import tempfile
import threading
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

import pyopencl as cl

from ... import config
from ...errors import InvalidProblemError

MODES = ("exhaustive", "normal", "rapid")
MODE_ENV = config.variable("cl_tuner")
FILE_ENV = config.variable("cl_tuner_file")
CAPS = (64, 32, 32)          # ACL's per-axis caps on x, y, z
Lws = tuple[int, int, int]
NO_LWS: Lws = (0, 0, 0)      # the driver's default (NullRange)
REPEATS = 2                  # timings per candidate; the minimum is kept


class RuntimeView(Protocol):
    """What the tuner needs of the runtime it is handed: the device tag of its keys, the
    limits of its candidates and a way to launch. The tuner never imports the runtime (the
    runtime imports the tuner), so this protocol, not the class, is its type."""

    tag: str
    max_work_items: tuple[int, ...]

    def launch(self, kernel: cl.Kernel, gws: Lws, lws: Lws | None) -> cl.Event: ...

    def kernel_max_work_group(self, kernel: cl.Kernel) -> int: ...


class TuningFileWarning(UserWarning):
    """A tuning file that cannot be read; it is ignored (and replaced on the next save)."""


def parse_mode(value: str | None, field: str = "tuner mode") -> str | None:
    """A mode from its name, case-insensitive; None or "" or "off" means no tuning."""
    if value is None or value.strip().lower() in ("", "off", "none"):
        return None
    mode = value.strip().lower()
    if mode not in MODES:
        raise InvalidProblemError(field, value, f"expected one of {', '.join(MODES)}")
    return mode


def _normal_axis(gws: int, cap: int, relaxed: bool) -> list[int]:
    limit = min(gws, cap)
    values = [1]
    for i in range(2, limit + 1):
        power_of_two = i & (i - 1) == 0
        divides = gws % i <= 1 if relaxed else gws % i == 0
        if power_of_two or divides:
            values.append(i)
    return values


def _rapid_axis(gws: int, first: tuple[int, ...], cap: int) -> list[int]:
    return [v for v in first if v <= min(gws, cap)]


def axis_values(mode: str, gws: Lws) -> tuple[list[int], list[int], list[int]]:
    """Per-axis candidate values of ``mode`` for a global size ``gws`` (spec §10)."""
    gx, gy, gz = gws
    if mode == "exhaustive":
        return tuple(list(range(1, min(g, c) + 1)) for g, c in zip(gws, CAPS))  # type: ignore
    if mode == "normal":
        relaxed = gz > 16
        return (_normal_axis(gx, CAPS[0], relaxed), _normal_axis(gy, CAPS[1], relaxed),
                _normal_axis(gz, CAPS[2], False))
    if mode == "rapid":
        return (_rapid_axis(gx, (1, 2, 8), 8), _rapid_axis(gy, (1, 2), 4),
                _rapid_axis(gz, (1, 2), 4))
    raise InvalidProblemError("tuner mode", mode, f"expected one of {', '.join(MODES)}")


def candidates(mode: str, gws: Lws, max_work_group: int,
               max_items: Iterable[int] = (2**31,) * 3) -> list[Lws]:
    """Local sizes to try, x fastest, then y, then z; without (1,1,1), without any over the
    kernel's max work-group size or over the device's per-axis item limits."""
    xs, ys, zs = axis_values(mode, gws)
    limits = tuple(max_items)
    out: list[Lws] = []
    for z in zs:
        for y in ys:
            for x in xs:
                if (x, y, z) == (1, 1, 1) or x * y * z > max_work_group:
                    continue
                if x > limits[0] or y > limits[1] or z > limits[2]:
                    continue
                out.append((x, y, z))
    return out


# -- the tuning file -----------------------------------------------------------------------
def parse_tuning_file(text: str) -> dict[str, Lws]:
    """Read ACL's format: optional header ``lws`` (or ``lws wbsm``), then ``key;x;y;z``
    lines (``;wbsm`` appended under a wbsm header). Raises ValueError naming the line."""
    table: dict[str, Lws] = {}
    lines = text.splitlines()
    wbsm = False
    if lines and ("lws" in lines[0] or "wbsm" in lines[0]):
        wbsm = "wbsm" in lines[0]
        lines = lines[1:]
        start = 2
    else:
        start = 1
    for number, line in enumerate(lines, start=start):
        if not line.strip():
            continue
        parts = line.strip().split(";")
        want = 5 if wbsm else 4
        if len(parts) < want or not parts[0]:
            raise ValueError(f"line {number}: expected 'key;x;y;z{';wbsm' if wbsm else ''}', "
                             f"got {line!r}")
        try:
            values = tuple(int(v) for v in parts[1:want])
        except ValueError:
            raise ValueError(f"line {number}: local sizes must be integers, got {line!r}") from None
        if any(v < 0 for v in values[:3]):
            raise ValueError(f"line {number}: local sizes must be >= 0, got {line!r}")
        table[parts[0]] = values[:3]  # type: ignore[assignment]
    return table


def format_tuning_file(table: dict[str, Lws]) -> str:
    rows = [f"{key};{x};{y};{z}" for key, (x, y, z) in sorted(table.items())]
    return "\n".join(["lws", *rows]) + "\n"


def default_file() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("convsel")) / "cl_tuner.lws"


class CLTuner:
    """Chooses local work sizes: applies known entries, tunes new ones when ``mode`` is set.

    Parameters
    ----------
    mode
        "exhaustive", "normal", "rapid", or None (apply known entries only).
    path
        The tuning file; loaded now (a corrupt one is reported with a
        :class:`TuningFileWarning` and ignored), written when an entry is added.
    """

    def __init__(self, mode: str | None = None, path: str | os.PathLike[str] | None = None,
                 ) -> None:
        self.mode = parse_mode(mode)
        self.path = Path(path) if path else None
        self.table: dict[str, Lws] = {}
        self.tuned = 0
        self._lock = threading.Lock()
        if self.path is not None:
            self.load()

    @property
    def active(self) -> bool:
        return self.mode is not None or bool(self.table)

    def load(self) -> None:
        assert self.path is not None
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        except (OSError, UnicodeDecodeError) as exc:
            warnings.warn(f"tuning file {self.path} cannot be read ({exc}); ignored",
                          TuningFileWarning, stacklevel=3)
            return
        try:
            self.table = parse_tuning_file(text)
        except ValueError as exc:
            warnings.warn(f"tuning file {self.path} is corrupt ({exc}); ignored, and it will "
                          "be replaced when new results are saved", TuningFileWarning,
                          stacklevel=3)

    def save(self) -> None:
        """Write the table atomically (temp file + rename), so a crash never truncates it."""
        if self.path is None or not self.table:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".cl_tuner.")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(format_tuning_file(self.table))
        os.replace(tmp, self.path)

    def key(self, runtime: RuntimeView, config_id: str) -> str:
        return f"{config_id}_{runtime.tag}"

    def local_size(self, runtime: RuntimeView, kernel: cl.Kernel, gws: Lws,
                   config_id: str) -> Lws | None:
        """The local size to launch with; None means the driver's default."""
        if not self.active:
            return None
        key = self.key(runtime, config_id)
        with self._lock:
            known = self.table.get(key)
        if known is None:
            if self.mode is None:
                return None
            known = self.tune(runtime, kernel, gws)
            with self._lock:
                self.table[key] = known
                self.tuned += 1
                self.save()
        return None if known == NO_LWS else known

    def tune(self, runtime: RuntimeView, kernel: cl.Kernel, gws: Lws) -> Lws:
        """The fastest local size for ``kernel`` (arguments already set) over ``gws``."""
        assert self.mode is not None
        best, best_ns = NO_LWS, _time(runtime, kernel, gws, None)
        limit = runtime.kernel_max_work_group(kernel)
        for lws in candidates(self.mode, gws, limit, runtime.max_work_items):
            try:
                ns = _time(runtime, kernel, gws, lws)
            except cl.Error:     # a size the driver refuses (resources): not a candidate
                continue
            if ns < best_ns:
                best, best_ns = lws, ns
        return best

    def describe(self) -> dict[str, object]:
        return {"mode": self.mode, "file": str(self.path) if self.path else None,
                "entries": len(self.table), "tuned": self.tuned}


def _time(runtime: RuntimeView, kernel: cl.Kernel, gws: Lws, lws: Lws | None) -> int:
    """Kernel time in ns by profiling events, the minimum of REPEATS runs (the first run of
    a new local size may include the driver's code generation)."""
    times = []
    for _ in range(REPEATS):
        event = runtime.launch(kernel, gws, lws)
        event.wait()
        times.append(event.profile.end - event.profile.start)
    return int(min(times))


_DEFAULT: CLTuner | None = None
_DEFAULT_LOCK = threading.Lock()


def tuner_from_env() -> CLTuner:
    settings = config.current()
    mode = parse_mode(settings.cl_tuner, MODE_ENV)
    path = settings.cl_tuner_file
    if mode is not None and path is None:
        path = str(default_file())
    return CLTuner(mode, path)


def default_tuner() -> CLTuner:
    """The process-wide tuner, configured from the environment on first use."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = tuner_from_env()
        return _DEFAULT


def configure(mode: str | None, path: str | os.PathLike[str] | None) -> CLTuner:
    """Replace the process-wide tuner: every runtime not handed a tuner of its own, existing
    ones included, uses it from now on (they ask :func:`default_tuner` at each launch).
    Used by ``convsel tune-cl`` and tests."""
    global _DEFAULT
    tuner = CLTuner(mode, path)
    with _DEFAULT_LOCK:
        _DEFAULT = tuner
    return tuner
