"""Whole-model plans: every Conv of an ONNX model, answered as :func:`convsel.select` does.

The ``onnx`` package is an optional extra, imported only when a model is read.
"""

from .errors import OnnxUnavailableError, PlanError, UnknownShapeError
from .nodes import NodePlan, Skipped
from .planner import ModelPlan, plan
from .reader import load_model
from .shapes import parse_input_shape

__all__ = ["ModelPlan", "NodePlan", "OnnxUnavailableError", "PlanError", "Skipped",
           "UnknownShapeError", "load_model", "parse_input_shape", "plan"]
