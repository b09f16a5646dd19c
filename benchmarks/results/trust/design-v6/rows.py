"""How many training rows a design-v6 variant changes (nested.py's VARIANTS), per algorithm:
zero on a database means the variant's fit there is the shipped fit, row for row.

    python rows.py /tmp/X/train.sqlite VARIANT[+VARIANT]
"""

from __future__ import annotations

import sys
from collections import Counter

import numpy as np
from nested import use

from convsel.learn import fit as learn_fit
from convsel.tuning.db import TuningDB


def main() -> None:
    entries = [e for e in TuningDB(sys.argv[1]).entries() if e.is_current]
    before = learn_fit.dataset(entries)
    use(sys.argv[2])
    after = learn_fit.dataset(entries)
    changed = ~np.all(before.x == after.x, axis=1)
    per = Counter(v.split(":")[0] for v, c in zip(after.variants, changed, strict=True) if c)
    print(f"{sys.argv[2]}: {int(changed.sum())} of {len(changed)} rows changed {dict(per)}")


if __name__ == "__main__":
    main()
