"""``opencl::ClConv2d::get_convolution_method`` (ACL v52.3.0, spec §4), rule by rule."""

from __future__ import annotations

from collections.abc import Callable

from ..problem import ConvProblem
from ..rules import Rules
from ..targets import Target
from ..verdict import Decision, Trace, Verdict, failed
from . import tables
from . import validate_gpu as v


def get_convolution_method(p: ConvProblem, target: Target, rules: Rules,
                           verdicts: dict[str, Verdict], trace: Trace) -> Decision:
    """Apply the rules in ACL's order; ``verdicts`` are :func:`candidates`' answers."""
    cfg = rules.gpu
    row = tables.find(p, cfg.known_networks)
    reason = (f"matches known-network {tables.describe(row)}" if row else
              "no known-network row matches" + "".join(
                  "; " + n for n in tables.near_misses(p, cfg.known_networks,
                                                      rules.convsel.near_miss)))
    if trace.rule("gpu.known_network", row is not None, reason):
        assert row is not None and row.method is not None
        return Decision(row.method, "gpu.known_network")
    dilated = p.dilation != (1, 1)
    if trace.rule("gpu.dilation", dilated, f"dilation {p.dilation[0]}x{p.dilation[1]}"
                  + (" != 1x1 -> GEMM" if dilated else " is 1x1")):
        return Decision("GEMM", "gpu.dilation")
    if p.layout == "NCHW":
        return _nchw(p, rules, verdicts, trace)
    return _nhwc(p, target, rules, verdicts, trace)


_YN = ("no", "yes")   # select() is hot: plain f-strings, no dicts or joins, for the trace


def _srgan(p: ConvProblem, rules: Rules, direct: Verdict, trace: Trace, rule_id: str) -> bool:
    s = rules.gpu.srgan
    shape = (p.h > s.height_above and p.out_h > s.height_above and p.kh == s.kernel_height
             and p.pad[0] < s.pad_top_below)
    why = (f"SRGAN shape: src H={p.h}>{s.height_above}={_YN[p.h > s.height_above]}, "
           f"dst H={p.out_h}>{s.height_above}={_YN[p.out_h > s.height_above]}, "
           f"KH={p.kh}=={s.kernel_height}={_YN[p.kh == s.kernel_height]}, "
           f"pad_top={p.pad[0]}<{s.pad_top_below}={_YN[p.pad[0] < s.pad_top_below]}")
    if shape:
        why += f"; ClDirectConv2d::validate: {direct.reason}"
    return trace.rule(rule_id, shape and direct.ok, why + (" -> DIRECT" if shape and direct.ok
                                                           else ""))


def _nchw(p: ConvProblem, rules: Rules, verdicts: dict[str, Verdict], trace: Trace) -> Decision:
    cfg = rules.gpu
    if _srgan(p, rules, verdicts["DIRECT"], trace, "gpu.nchw.srgan"):
        return Decision("DIRECT", "gpu.nchw.srgan")
    shape = p.kh > cfg.fft_kernel_height_above and p.c > p.k
    why = (f"KH={p.kh} (> {cfg.fft_kernel_height_above}?), src C={p.c} > dst C={p.k}? "
           f"{'yes' if p.c > p.k else 'no'}")
    fft = verdicts["FFT"] if shape else None
    if fft is not None:
        why += f"; CLFFTConvolutionLayer::validate: {fft.reason}"
    if trace.rule("gpu.nchw.fft", bool(fft), why + (" -> FFT" if fft else "")):
        return Decision("FFT", "gpu.nchw.fft")
    small = p.c < cfg.nchw_small_ifm_below
    if trace.rule("gpu.nchw.small_ifm", small, f"C={p.c} {'<' if small else '>='} "
                  f"{cfg.nchw_small_ifm_below}" + (" -> GEMM" if small else "")):
        return Decision("GEMM", "gpu.nchw.small_ifm")
    wino = verdicts["WINOGRAD"]
    if trace.rule("gpu.nchw.winograd", wino.ok, "ClWinogradConv2d::validate: " + wino.reason):
        return Decision("WINOGRAD", "gpu.nchw.winograd", wino.params)
    trace.rule("gpu.nchw.default", True, "Winograd not valid -> GEMM")
    return Decision("GEMM", "gpu.nchw.default")


def _in(target: Target, names: tuple[str, ...], archs: tuple[str, ...] = ()) -> bool:
    return target.name in names or target.arch in archs


def _nhwc(p: ConvProblem, target: Target, rules: Rules, verdicts: dict[str, Verdict],
          trace: Trace) -> Decision:
    cfg = rules.gpu
    direct = verdicts["DIRECT"]
    if _srgan(p, rules, direct, trace, "gpu.nhwc.srgan"):
        return Decision("DIRECT", "gpu.nhwc.srgan")
    if trace.rule("gpu.nhwc.quantized", not p.is_float,
                  f"dtype {p.dtype}" + (" is not F16/F32 -> GEMM" if not p.is_float
                                        else " is float")):
        return Decision("GEMM", "gpu.nhwc.quantized")
    old = _in(target, cfg.old_gpu.targets, cfg.old_gpu.archs)
    ofm_le_8 = p.k <= cfg.last_layer_max_ofm
    wino = verdicts["WINOGRAD"]
    ifm_ge_8 = p.c >= cfg.winograd_min_ifm
    why = f"ClWinogradConv2d::validate: {wino.reason}; C={p.c} >= {cfg.winograd_min_ifm}? " + (
        "yes" if ifm_ge_8 else "no")
    take = wino.ok and ifm_ge_8 and (not ofm_le_8 or old)
    if wino.ok and ifm_ge_8 and ofm_le_8:
        why += (f"; OFM={p.k} <= {cfg.last_layer_max_ofm}: "
                + ("old GPU keeps Winograd" if old else f"{target.name} skips Winograd"))
    if trace.rule("gpu.nhwc.winograd", take, why + (" -> WINOGRAD" if take else "")):
        return Decision("WINOGRAD", "gpu.nhwc.winograd", wino.params)
    if direct.ok:
        decision = _direct_family(p, target, rules, verdicts["INDIRECT"], trace, old)
        if decision:
            return decision
    else:
        trace.rule("gpu.nhwc.direct", False, "ClDirectConv2d::validate: " + direct.reason)
    trace.rule("gpu.nhwc.default", True, "no earlier rule fired -> GEMM")
    return Decision("GEMM", "gpu.nhwc.default")


def _threshold(target: Target, rules: Rules) -> int:
    kt = rules.gpu.kernel_threshold
    return kt.targets.get(target.name, kt.default)


def _direct_family(p: ConvProblem, target: Target, rules: Rules, indirect: Verdict,
                   trace: Trace, old: bool) -> Decision | None:
    cfg = rules.gpu
    thr = _threshold(target, rules)
    large_k = p.kw >= thr and p.kh >= thr
    ifm_ge_16 = p.c >= cfg.direct_min_ifm
    ofm_le_8 = p.k <= cfg.last_layer_max_ofm
    area = p.k * p.out_w * p.out_h
    workload = area >= cfg.workload_min
    terms = (f"large_k(>={thr})={_YN[large_k]}, C>={cfg.direct_min_ifm}={_YN[ifm_ge_16]}, "
             f"workload(OFM*Wout*Hout={area}>={cfg.workload_min})={_YN[workload]}")
    if old:
        fire = large_k and ifm_ge_16 and p.c > p.k
        trace.rule("gpu.nhwc.direct.old_gpu", fire, f"old GPU {target.name}: large_k and C>=16 "
                   f"and C>OFM; {terms}, C>OFM={_YN[p.c > p.k]}" + (" -> DIRECT" if fire else ""))
        return Decision("DIRECT", "gpu.nhwc.direct.old_gpu") if fire else None
    if target.name in cfg.g76_rule_targets:
        fire = (large_k and workload and ifm_ge_16) or (ofm_le_8 and ifm_ge_16)
        trace.rule("gpu.nhwc.direct.g76", fire, f"{target.name}: (large_k and workload and "
                   f"C>=16) or (OFM<=8 and C>=16); {terms}, "
                   f"OFM<={cfg.last_layer_max_ofm}={_YN[ofm_le_8]}" + (" -> DIRECT" if fire
                                                                      else ""))
        return Decision("DIRECT", "gpu.nhwc.direct.g76") if fire else None
    unit = p.stride == (1, 1)
    m_one = p.out_w * p.out_h == 1
    small_ofm = p.k < cfg.first_layer_ofm_below
    rules_in_order: tuple[tuple[str, bool, Callable[[], str]], ...] = (
        ("gpu.nhwc.direct.first_layer", workload and not ifm_ge_16 and not unit and small_ofm,
         lambda: f"first layer: all of workload={_YN[workload]}, C<{cfg.direct_min_ifm}="
                 f"{_YN[not ifm_ge_16]}, non-unit stride={_YN[not unit]}, "
                 f"OFM<{cfg.first_layer_ofm_below}={_YN[small_ofm]}"),
        ("gpu.nhwc.direct.large_kernel", (large_k or m_one) and workload and ifm_ge_16,
         lambda: f"(large_k or 1x1 output) and workload and C>=16: {terms}, "
                 f"1x1 output={_YN[m_one]}"),
        ("gpu.nhwc.direct.last_layer", ofm_le_8,
         lambda: f"last layer: OFM={p.k} <= {cfg.last_layer_max_ofm}? {_YN[ofm_le_8]}"),
    )
    for rule_id, fire, what in rules_in_order:
        if fire:
            preferred, why = _preferred(p, target, rules, indirect)
            trace.rule(rule_id, True, f"{what()} -> {preferred} ({why})")
            return Decision(preferred, rule_id)
        trace.rule(rule_id, False, what())
    return None


def _preferred(p: ConvProblem, target: Target, rules: Rules,
               verdict: Verdict) -> tuple[str, str]:
    ind = rules.gpu.indirect
    if target.name not in ind.targets:
        return "DIRECT", f"{target.name} prefers DIRECT"
    ksz = p.kh * p.kw
    shape_ok = (ind.min_kernel_area_exclusive < ksz <= ind.max_kernel_area
                and (ksz % 2 == 1 or not ind.odd_only))
    if shape_ok and verdict.ok:
        return "INDIRECT", (f"{target.name} prefers INDIRECT for odd ksz={ksz} in "
                            f"({ind.min_kernel_area_exclusive}, {ind.max_kernel_area}]")
    why = verdict.reason if not verdict.ok else (
        f"ksz={ksz} is not odd in ({ind.min_kernel_area_exclusive}, {ind.max_kernel_area}]")
    return "DIRECT", f"{target.name} keeps DIRECT ({why})"


def candidates(p: ConvProblem, target: Target, rules: Rules) -> dict[str, Verdict]:
    """Every ACL method with its validate() verdict on this GPU target."""
    return {
        "GEMM": v.gemm(p),
        "GEMM_CONV2D": failed("GEMM_CONV2D is a CPU method; the GPU's is INDIRECT"),
        "DIRECT": v.direct(p, target, rules),
        "INDIRECT": v.indirect(p, target),
        "WINOGRAD": v.winograd(p, target, rules),
        "FFT": v.fft(p, target),
    }
