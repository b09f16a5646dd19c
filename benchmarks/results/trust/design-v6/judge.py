"""`convsel ...` with nested.py's VARIANTS patched in (this process only): the seed-6 judge
of a variant that was NOT adopted, shown for information (NOTES, "v6").

    python judge.py VARIANT[+VARIANT] report --backend opencl ... --cv --out DIR
"""

from __future__ import annotations

import sys

from nested import use

from convsel.cli import main

if __name__ == "__main__":
    use(sys.argv[1])
    sys.argv = ["convsel", *sys.argv[2:]]
    sys.exit(main())
