"""Properties of select() over random valid problems and every target."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convsel import ConvProblem, InvalidProblemError, select
from convsel.algorithms import supports
from convsel.rules import default_rules
from convsel.targets import target_names

RULES = default_rules()
TARGETS = target_names(RULES)
NEEDS_VALID = {"WINOGRAD", "GEMM_CONV2D", "INDIRECT", "FFT"}   # chosen only through validate()


@st.composite
def problems(draw):
    kh, kw = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    dy, dx = draw(st.sampled_from([1, 1, 1, 2])), draw(st.sampled_from([1, 1, 1, 2]))
    ext_h, ext_w = dy * (kh - 1) + 1, dx * (kw - 1) + 1
    pad = tuple(draw(st.integers(0, e - 1)) for e in (ext_h, ext_h, ext_w, ext_w))
    h = draw(st.integers(max(1, ext_h - pad[0] - pad[1]), 80))
    w = draw(st.integers(max(1, ext_w - pad[2] - pad[3]), 80))
    groups = draw(st.sampled_from([1, 1, 1, 2, 4]))
    c = groups * draw(st.integers(1, 40))
    k = groups * draw(st.integers(1, 40))
    return ConvProblem(n=draw(st.integers(1, 3)), h=h, w=w, c=c, k=k, kh=kh, kw=kw,
                       stride=(draw(st.integers(1, 3)), draw(st.integers(1, 3))), pad=pad,
                       dilation=(dy, dx), groups=groups,
                       dtype=draw(st.sampled_from(["F32", "F16", "QASYMM8", "QASYMM8_SIGNED"])),
                       layout=draw(st.sampled_from(["NHWC", "NCHW"])),
                       fast_math=draw(st.booleans()),
                       activation=draw(st.sampled_from([None, "relu", "bounded_relu(6)"])))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.sampled_from(TARGETS))
def test_select_always_answers_and_explains(problem, target):
    sel = select(problem, target)
    fired = [step for step in sel.trace if step.fired]
    assert len(fired) == 1 and fired[0].id == sel.rule == sel.trace[-1].id
    assert sel.reason == fired[0].reason
    verdicts = {c.method: c for c in sel.candidates}
    assert set(verdicts) == {"GEMM", "GEMM_CONV2D", "DIRECT", "INDIRECT", "WINOGRAD", "FFT"}
    if sel.method in NEEDS_VALID:
        assert verdicts[sel.method].valid, sel.explain()
    if sel.fallback is None:
        assert supports(sel.algorithm, problem, RULES, dict(sel.params)).ok, sel.explain()
    else:
        assert sel.algorithm == "im2col_gemm"
        assert supports("im2col_gemm", problem, RULES).ok
    if problem.groups > 1:
        assert sel.rule == "convsel.grouped"
        assert supports(sel.algorithm, problem, RULES).ok


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["n", "h", "w", "c", "k", "kh", "kw", "stride", "pad",
                                        "dilation", "groups", "dtype", "layout"]),
                       st.one_of(st.integers(-3, 300), st.text(max_size=4), st.none(),
                                 st.lists(st.integers(-2, 5), max_size=5)), max_size=13))
def test_bad_input_never_crashes_with_a_bare_error(data):
    try:
        ConvProblem.from_dict(data)
    except InvalidProblemError as exc:
        assert exc.field and exc.rule
    except TypeError:       # pragma: no cover - would be a bug
        raise AssertionError(f"TypeError for {data}")
