"""The "acl" policy: ACL's own get_convolution_method(), nothing else."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..problem import ConvProblem
from ..rules import Rules
from ..selection import Selection, acl_selection
from ..targets import Target


@dataclass(frozen=True)
class AclPolicy:
    """ACL's rules; no options."""

    name: ClassVar[str] = "acl"

    def choose(self, problem: ConvProblem, target: Target, rules: Rules) -> Selection:
        return acl_selection(problem, target, rules)
