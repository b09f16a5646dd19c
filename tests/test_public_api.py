"""The public surface: __all__ is sorted and complete, and the library never imports FastAPI."""

import subprocess
import sys

import convsel


def test_all_sorted_and_importable():
    assert convsel.__all__ == sorted(convsel.__all__)
    for name in convsel.__all__:
        assert hasattr(convsel, name), name


def test_library_does_not_import_fastapi_or_pyopencl():
    code = ("import sys, convsel; from convsel import ConvProblem, select; "
            "select(ConvProblem(1, 8, 8, 8, 8, 3, 3, pad=1), 'G77'); "
            "print(sorted(m for m in ('fastapi', 'pyopencl', 'starlette') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
