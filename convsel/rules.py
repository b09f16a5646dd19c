"""Load and validate a heuristics file into typed, frozen rule data.

The schema is pydantic models with ``extra='forbid'``, so a misspelt key, a wrong type or a
bad value is reported with its path in the file (``gpu.kernel_threshold.targets.G99``) instead
of silently falling back to a default.
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from . import config
from .errors import RuleFileError
from .winograd_transforms import MAX_TILE_INPUT

Method = Literal["GEMM", "GEMM_CONV2D", "DIRECT", "INDIRECT", "WINOGRAD", "FFT"]
METHODS: tuple[str, ...] = ("GEMM", "GEMM_CONV2D", "DIRECT", "INDIRECT", "WINOGRAD", "FFT")
Pair = tuple[int, int]
ENV_VAR = config.variable("heuristics")


def _transformable(tile: tuple[int, int], kernel: tuple[int, int]) -> None:
    """A tile the rules may offer must run on every Winograd backend: the generated
    transforms serve input tiles of 1..MAX_TILE_INPUT values per axis."""
    for m, r in zip(tile, kernel):
        if m < 1 or r < 1 or m + r - 1 > MAX_TILE_INPUT:
            raise ValueError(f"tile {list(tile)} with kernel {list(kernel)}: F({m}, {r}) needs "
                             f"{m + r - 1} interpolation values per axis; convsel's transforms "
                             f"serve 1..{MAX_TILE_INPUT}")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TableRow(_Model):
    """One exact-match row: a known network layer or a blacklisted shape."""

    id: str
    h: int
    w: int
    kernel: Pair
    c: int
    k: int
    stride: Pair
    pad: tuple[int, int, int, int]
    layout: Literal["NHWC", "NCHW"] | None = None
    method: Method | None = None


class WinogradTile(_Model):
    kernel: Pair
    tile: Pair
    min_input: Pair | None = None      # input (h, w) must be at least this for the tile

    @model_validator(mode="after")
    def _runs(self) -> WinogradTile:
        _transformable(self.tile, self.kernel)
        return self


class CpuRules(_Model):
    large_input_bytes_above: int
    kernel_height_above: int
    small_ifm_below: int
    known_networks: tuple[TableRow, ...]
    f16_winograd_blacklist: tuple[TableRow, ...]
    winograd: dict[Literal["F32", "F16"], tuple[WinogradTile, ...]]


class Srgan(_Model):
    height_above: int
    kernel_height: int
    pad_top_below: int


class KernelThreshold(_Model):
    default: int
    targets: dict[str, int]


class TargetSet(_Model):
    targets: tuple[str, ...] = ()
    archs: tuple[str, ...] = ()


class IndirectRule(_Model):
    targets: tuple[str, ...]
    min_kernel_area_exclusive: int
    max_kernel_area: int
    odd_only: bool


class TileKernel(_Model):
    tile: Pair
    kernel: Pair

    @model_validator(mode="after")
    def _runs(self) -> TileKernel:
        _transformable(self.tile, self.kernel)
        return self


class NchwSmallInput(_Model):
    max_h: int
    max_w: int
    tile_by_kernel_extent: dict[int, int]


class GpuWinograd(_Model):
    tile_by_kernel_extent: dict[int, int]
    nchw_small_input: NchwSmallInput
    pairs: dict[Literal["NHWC", "NCHW"], tuple[TileKernel, ...]]
    fast_math_pairs: tuple[TileKernel, ...]


class DirectNchw(_Model):
    float_kernels: tuple[int, ...]
    quantized_kernels: tuple[int, ...]
    max_stride_x: dict[int | Literal["default"], int]


class GpuRules(_Model):
    known_networks: tuple[TableRow, ...]
    srgan: Srgan
    fft_kernel_height_above: int
    nchw_small_ifm_below: int
    winograd_min_ifm: int
    direct_min_ifm: int
    last_layer_max_ofm: int
    first_layer_ofm_below: int
    workload_min: int
    kernel_threshold: KernelThreshold
    old_gpu: TargetSet
    g76_rule_targets: tuple[str, ...]
    indirect: IndirectRule
    winograd: GpuWinograd
    direct_nchw: DirectNchw


class GroupedChoice(_Model):
    method: Method


class Grouped(_Model):
    depthwise: GroupedChoice
    other: GroupedChoice


class NearMiss(_Model):
    enabled: bool
    max_relative_difference: float


class ConvselRules(_Model):
    grouped: Grouped
    near_miss: NearMiss


class CpuTargetInfo(_Model):
    kind: Literal["cpu"]
    fp16: bool
    description: str


class DeviceNames(_Model):
    pattern: str
    unknown_by_prefix: dict[str, str]
    no_match: str


class Targets(_Model):
    cpu: CpuTargetInfo
    cpu_nofp16: CpuTargetInfo
    gpu_families: dict[int, str]
    gpu: dict[str, int]
    gpu_fp16: bool
    device_names: DeviceNames

    @model_validator(mode="before")
    @classmethod
    def _dash_names(cls, data: Any) -> Any:
        if isinstance(data, dict) and "cpu-nofp16" in data:
            data = {("cpu_nofp16" if k == "cpu-nofp16" else k): v for k, v in data.items()}
        return data

    @model_validator(mode="after")
    def _names_resolve(self) -> Targets:
        for name, value in self.gpu.items():
            if name != name.upper():
                raise ValueError(f"gpu target {name!r} must be upper case")
            if (value & 0xF00) not in self.gpu_families:
                raise ValueError(f"gpu target {name!r}: arch 0x{value & 0xF00:x} is not in "
                                 "gpu_families")
        for where, name in [("device_names.no_match", self.device_names.no_match),
                            *(("device_names.unknown_by_prefix", n)
                              for n in self.device_names.unknown_by_prefix.values())]:
            if name not in self.gpu:
                raise ValueError(f"{where}: {name!r} is not a gpu target")
        return self


class Rules(_Model):
    """The whole heuristics file. ``digest`` identifies the exact bytes it was loaded from."""

    schema_: Literal[1]
    version: str
    cpu: CpuRules
    gpu: GpuRules
    convsel: ConvselRules
    targets: Targets
    digest: str = ""
    source: str = ""

    def __hash__(self) -> int:
        # The digest names the file's exact bytes, so it identifies the rules for caching.
        return hash((self.digest, self.source))

    @model_validator(mode="before")
    @classmethod
    def _schema_key(cls, data: Any) -> Any:
        if isinstance(data, dict) and "schema" in data:
            data = dict(data)
            data["schema_"] = data.pop("schema")
        return data

    @model_validator(mode="after")
    def _target_names_known(self) -> Rules:
        gpu = self.targets.gpu
        families = set(self.targets.gpu_families.values())
        named = [("gpu.kernel_threshold.targets", n) for n in self.gpu.kernel_threshold.targets]
        named += [("gpu.old_gpu.targets", n) for n in self.gpu.old_gpu.targets]
        named += [("gpu.g76_rule_targets", n) for n in self.gpu.g76_rule_targets]
        named += [("gpu.indirect.targets", n) for n in self.gpu.indirect.targets]
        for where, name in named:
            if name not in gpu:
                raise ValueError(f"{where}: unknown gpu target {name!r}")
        for arch in self.gpu.old_gpu.archs:
            if arch not in families:
                raise ValueError(f"gpu.old_gpu.archs: unknown family {arch!r}")
        return self


def default_rules_path() -> Path:
    """The heuristics file shipped inside the package."""
    return Path(str(resources.files("convsel").joinpath("heuristics.yaml")))


def load_rules(path: str | os.PathLike[str] | None = None) -> Rules:
    """Load rules from ``path``, else ``$CONVSEL_HEURISTICS``, else the packaged file.

    Raises :class:`RuleFileError` naming the entry and the problem when the file is unreadable,
    not YAML, or fails the schema.
    """
    chosen = Path(path) if path is not None else Path(config.current().heuristics or
                                                      default_rules_path())
    try:
        raw = chosen.read_bytes()
    except OSError as exc:
        raise RuleFileError(f"heuristics file {chosen}: cannot read ({exc.strerror})") from None
    return _parse(raw, str(chosen))


@lru_cache(maxsize=8)
def _parse(raw: bytes, source: str) -> Rules:
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise RuleFileError(f"heuristics file {source}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise RuleFileError(f"heuristics file {source}: expected a mapping at the top level")
    data = {**data, "digest": hashlib.sha256(raw).hexdigest()[:16], "source": source}
    try:
        return Rules.model_validate(data)
    except ValidationError as exc:
        raise RuleFileError(f"heuristics file {source}: {_describe(exc)}") from None


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"]).replace("schema_", "schema") or "(top level)"
        parts.append(f"entry {loc}: {err['msg']}")
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


@lru_cache(maxsize=1)
def default_rules() -> Rules:
    """The rules used when no path is given (loaded once per process)."""
    return load_rules()


def as_rules(rules: Rules | str | os.PathLike[str] | None) -> Rules:
    """``rules`` itself, the file at that path, or the default rules."""
    if rules is None:
        return default_rules()
    if isinstance(rules, Rules):
        return rules
    return load_rules(rules)
