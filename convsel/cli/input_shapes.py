"""``--input-shape NAME=D0,D1,...``: the command line's one spelling of the shapes that
``convsel.plan`` takes as ``input_shapes={NAME: dims}``, for ``plan`` and ``tune MODEL.onnx``.
Errors about them name ``--input-shape`` and what was typed, not the library's keyword."""

from __future__ import annotations

import argparse
import ast
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from ..errors import InvalidProblemError

OPTION = "--input-shape"
_LIBRARY = "input_shapes"


def add_input_shape_argument(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument(OPTION, action="append", default=[], metavar="NAME=D0,D1,..",
                        dest="input_shape", help=help_text)


def parse(texts: Sequence[str]) -> dict[str, tuple[int, ...]]:
    from ..onnx.shapes import parse_input_shape

    return dict(parse_input_shape(text, OPTION) for text in texts)


@contextmanager
def named_for_the_command_line(texts: Sequence[str]) -> Iterator[None]:
    """Around a ``plan()``: its errors about ``input_shapes`` become errors about
    ``--input-shape`` (with the text given for that input, where there is one)."""
    from ..onnx import UnknownShapeError

    try:
        yield
    except UnknownShapeError as exc:
        raise exc.naming(OPTION) from None
    except InvalidProblemError as exc:
        if not exc.field.startswith(_LIBRARY):
            raise
        name = exc.value if exc.field == _LIBRARY else ast.literal_eval(
            exc.field[len(_LIBRARY) + 1:-1])
        typed = {text.split("=", 1)[0].strip(): text for text in texts}
        raise InvalidProblemError(OPTION, typed.get(str(name), name), exc.rule) from None
