"""``cpu::CpuConv2d::get_convolution_method`` (ACL v52.3.0, spec §2), rule by rule."""

from __future__ import annotations

from ..problem import ConvProblem
from ..rules import Rules, TableRow
from ..targets import Target
from ..verdict import Decision, Trace, Verdict, failed
from . import tables
from . import validate_cpu as v


def get_convolution_method(p: ConvProblem, target: Target, rules: Rules,
                           verdicts: dict[str, Verdict], trace: Trace) -> Decision:
    """Apply the rules in ACL's order; ``verdicts`` are :func:`candidates`' answers."""
    cfg = rules.cpu
    row = tables.find(p, cfg.known_networks)
    if trace.rule("cpu.known_network", row is not None, _table_reason(p, row, cfg.known_networks,
                                                                        rules)):
        assert row is not None and row.method is not None
        return Decision(row.method, "cpu.known_network")
    if trace.rule("cpu.dilation", p.dilation != (1, 1),
                  f"dilation {p.dilation[0]}x{p.dilation[1]}"
                  + (" != 1x1 -> GEMM" if p.dilation != (1, 1) else " is 1x1")):
        return Decision("GEMM", "cpu.dilation")
    gd = verdicts["GEMM_CONV2D"]
    decision = _large_input_rule(p, verdicts, rules, trace)
    if decision:
        return decision
    if trace.rule("cpu.small_ifm", p.c < cfg.small_ifm_below,
                  f"C={p.c} {'<' if p.c < cfg.small_ifm_below else '>='} "
                  f"{cfg.small_ifm_below}" + (" -> GEMM" if p.c < cfg.small_ifm_below else "")):
        return Decision("GEMM", "cpu.small_ifm")
    if _f16_blacklisted(p, target, rules, trace):
        return Decision("GEMM", "cpu.f16_winograd_blacklist")
    one = p.kh == 1 and p.kw == 1
    if trace.rule("cpu.kernel_1x1", one, f"kernel {p.kh}x{p.kw}" + (" is 1x1 -> GEMM" if one
                                                                    else " is not 1x1")):
        return Decision("GEMM", "cpu.kernel_1x1")
    wino = verdicts["WINOGRAD"]
    if trace.rule("cpu.winograd", wino.ok, "CpuWinogradConv2d::validate: " + wino.reason):
        return Decision("WINOGRAD", "cpu.winograd", wino.params)
    if trace.rule("cpu.gemm_conv2d", gd.ok, "CpuGemmDirectConv2d::validate: " + gd.reason):
        return Decision("GEMM_CONV2D", "cpu.gemm_conv2d")
    trace.rule("cpu.default", True, "no earlier rule fired -> GEMM")
    return Decision("GEMM", "cpu.default")


def _table_reason(p: ConvProblem, row: object, rows: tuple[TableRow, ...], rules: Rules,
                  ) -> str:
    if row is not None:
        return f"matches known-network {tables.describe(row)}"  # type: ignore[arg-type]
    notes = tables.near_misses(p, rows, rules.convsel.near_miss)
    return "no known-network row matches" + ("; " + "; ".join(notes) if notes else "")


def _large_input_rule(p: ConvProblem, verdicts: dict[str, Verdict], rules: Rules,
                      trace: Trace) -> Decision | None:
    cfg, gd = rules.cpu, verdicts["GEMM_CONV2D"]
    big = p.input_bytes > cfg.large_input_bytes_above
    tall = p.kh > cfg.kernel_height_above
    facts = (f"src {p.input_bytes} bytes {'>' if big else '<='} {cfg.large_input_bytes_above}, "
             f"KH={p.kh} {'>' if tall else '<='} {cfg.kernel_height_above}")
    if not (big and tall):
        trace.rule("cpu.large_input", False, facts)
        return None
    if trace.rule("cpu.large_input", gd.ok, f"{facts}; CpuGemmDirectConv2d::validate: "
                  f"{gd.reason}" + (" -> GEMM_CONV2D" if gd.ok else "")):
        return Decision("GEMM_CONV2D", "cpu.large_input")
    direct = verdicts["DIRECT"]
    if trace.rule("cpu.large_input.direct", direct.ok,
                  f"CpuDirectConv2d::validate: {direct.reason}" + (" -> DIRECT" if direct.ok
                                                                  else "; falls through")):
        return Decision("DIRECT", "cpu.large_input.direct")
    return None


def _f16_blacklisted(p: ConvProblem, target: Target, rules: Rules, trace: Trace) -> bool:
    rows = rules.cpu.f16_winograd_blacklist
    if not (p.dtype == "F16" and p.fast_math and target.fp16):
        why = ("applies only to F16 with fast-math on a CPU with FP16 "
               f"(here {p.dtype}, fast-math {'on' if p.fast_math else 'off'}, "
               f"FP16 {'yes' if target.fp16 else 'no'})")
        return trace.rule("cpu.f16_winograd_blacklist", False, why)
    row = tables.find(p, rows)
    if row is not None:
        return trace.rule("cpu.f16_winograd_blacklist", True,
                          f"F16 fast-math Winograd is known bad for {tables.describe(row)} -> GEMM")
    notes = tables.near_misses(p, rows, rules.convsel.near_miss)
    return trace.rule("cpu.f16_winograd_blacklist", False,
                      "no blacklist row matches" + ("; " + "; ".join(notes) if notes else ""))


def candidates(p: ConvProblem, target: Target, rules: Rules) -> dict[str, Verdict]:
    """Every ACL method with its validate() verdict on this CPU target."""
    return {
        "GEMM": v.gemm(p, target),
        "GEMM_CONV2D": v.gemm_direct(p, target),
        "DIRECT": v.direct(p, target),
        "INDIRECT": failed("INDIRECT is a GPU method; the CPU's indirect GEMM is GEMM_CONV2D"),
        "WINOGRAD": v.winograd(p, target, rules),
        "FFT": failed("the CPU heuristic has not returned FFT since ACL v23.08"),
    }
