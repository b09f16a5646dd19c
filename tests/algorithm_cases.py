"""Which algorithms a test runs, and on what: derived from the registry, never listed by
hand, so that a new algorithm is picked up (or fails a test loudly) without editing tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from convsel import algorithms, backends
from convsel.problem import ConvProblem
from convsel.rules import default_rules

RULES = default_rules()


def implemented_on(backend: str) -> list[str]:
    """The algorithms ``backend`` implements, in registry order."""
    return [a for a in algorithms.ALGORITHMS if (a, backend) in backends.IMPLEMENTATIONS]


def accepts(algorithm: str, p: ConvProblem) -> bool:
    """Whether ``algorithm``'s hard constraint (its home's ``supports``) accepts ``p``."""
    return algorithms.supports(algorithm, p, RULES).ok


def first_supported(algorithm: str, pool: Sequence[ConvProblem], start: int = 0) -> ConvProblem:
    """The first problem of ``pool``, from position ``start`` on (wrapping around), that
    ``algorithm`` accepts; an AssertionError, which fails the test, when it accepts none."""
    order = [*pool[start % len(pool):], *pool[:start % len(pool)]]
    for p in order:
        if accepts(algorithm, p):
            return p
    raise AssertionError(f"{algorithm}'s supports() accepts none of "
                         f"{', '.join(str(p) for p in pool)}")


def resolved(algorithm: str, p: ConvProblem, params: dict[str, Any] | None = None,
             ) -> dict[str, Any]:
    """``params`` with what ``algorithm``'s constraint resolves for ``p`` (the Winograd tile),
    as convsel.execute hands them to a backend module."""
    verdict = algorithms.supports(algorithm, p, RULES, params)
    assert verdict.ok, f"{algorithm} refuses {p} {params}: {verdict.reason}"
    return {**(params or {}), **verdict.params}


# Small problems, each with padding or stride, for tests that need one problem an algorithm
# runs: a 3x3 kernel first, a plain 1x1 for the algorithms that need one.
PLAIN = (ConvProblem(2, 7, 9, 5, 6, 3, 3, pad=(1, 0, 1, 1)),
         ConvProblem(2, 7, 9, 5, 6, 1, 1))
