"""The tie rule: a tie is judged on the winner's own spread too, and never admits a pruned
candidate (the regression: FFT at 12.8 ms "tied" with Winograd at 0.133 ms)."""

from __future__ import annotations

from convsel.tuning.measure import decide


def _t(median_ms: float, iqr_ms: float, runs: int, pruned: bool = False) -> dict:
    return {"algorithm": "x", "params": {}, "median_s": median_ms / 1e3,
            "iqr_s": iqr_ms / 1e3, "runs": runs, "min_s": median_ms / 1e3, "pruned": pruned}


def test_the_reported_case_is_a_win_not_a_tie():
    """`convsel tune --h 14 --w 14 --c 64 --k 64 --kernel 3 --pad 1` recorded `tie
    winograd:2x2/fft` with FFT's few noisy runs (pruned) at 12.8 ms."""
    timings = {"winograd:2x2": _t(0.133, 0.004, 96), "winograd:4x4": _t(0.19, 0.01, 96),
               "fft": _t(12.8, 30.0, 2, pruned=True)}
    assert decide(timings) == ("winograd:2x2", ())


def test_a_pruned_candidate_never_ties_even_when_close():
    timings = {"a": _t(1.0, 0.0, 8), "b": _t(1.01, 0.0, 2, pruned=True)}
    assert decide(timings) == ("a", ())


def test_a_wide_spread_of_the_slow_one_does_not_stretch_the_winners_band():
    # not pruned, but two runs scattered over 100 ms: the pair's noise is huge, the
    # winner's own band (0.133 ms, tight) is not
    timings = {"a": _t(0.133, 0.004, 96), "b": _t(12.8, 100.0, 2)}
    assert decide(timings) == ("a", ())


def test_a_close_precise_candidate_still_ties():
    timings = {"a": _t(1.0, 0.2, 5), "b": _t(1.1, 0.01, 5)}
    assert decide(timings) == (None, ("a", "b"))
    under_floor = {"a": _t(1.0, 0.0, 5), "b": _t(1.02, 0.0, 5)}
    assert decide(under_floor) == (None, ("a", "b"))
