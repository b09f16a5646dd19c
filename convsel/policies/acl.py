"""The "acl" policy: ACL's own get_convolution_method(), nothing else."""

from __future__ import annotations

from dataclasses import dataclass

from ..problem import ConvProblem
from ..rules import Rules
from ..selection import Selection, select
from ..targets import Target


@dataclass(frozen=True)
class AclPolicy:
    name: str = "acl"

    def choose(self, problem: ConvProblem, target: Target, rules: Rules) -> Selection:
        return select(problem, target, rules=rules)
