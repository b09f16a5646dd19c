"""The README's algorithm table is the registry's: rendered from it here and compared, so
an algorithm added, removed or re-described fails this test until the README says so."""

from __future__ import annotations

import re

from repo import ROOT

from convsel import algorithms

BEGIN = ("<!-- algorithm table: from convsel/algorithms/registry.py, checked by "
         "tests/algorithms/test_readme_algorithms.py -->")
END = "<!-- end of algorithm table -->"


def rendered() -> str:
    """The table, one row per algorithm in the registry's timing order."""
    rows = ["| algorithm | what it does | ACL method (CPU / GPU) | backends |",
            "|---|---|---|---|"]
    for name in algorithms.TIMING_ORDER:
        spec = algorithms.spec(name)
        methods = (spec.cpu_method if spec.cpu_method == spec.gpu_method
                   else f"{spec.cpu_method} / {spec.gpu_method}")
        rows.append(f"| `{name}` | {spec.description} | {methods} | "
                    f"{', '.join(spec.backends)} |")
    return "\n".join(rows)


def test_the_readme_table_is_the_registrys():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(re.escape(BEGIN) + r"\n(.*?)\n" + re.escape(END), text, re.S)
    assert found, f"README.md has no block between\n{BEGIN}\nand\n{END}"
    assert found.group(1) == rendered(), (
        "README.md's algorithm table differs from the registry; replace it with:\n"
        + rendered())
