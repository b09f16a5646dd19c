"""Helpers shared by the tests of the HTTP service (tests/test_service_*.py)."""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
from fastapi.testclient import TestClient

from service.app import create_app
from service.config import Settings

# A 3x3 convolution that every algorithm runs (Winograd included).
PROBLEM: dict[str, Any] = {"n": 1, "h": 8, "w": 8, "c": 4, "k": 8, "kh": 3, "kw": 3, "pad": 1}


def client_for(**settings: Any) -> TestClient:
    """A TestClient on a fresh app; use it as a context manager so the lifespan runs."""
    return TestClient(create_app(Settings(**settings)))


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def npy_b64(array: np.ndarray) -> str:
    return base64.b64encode(npy_bytes(array)).decode()


def from_b64(text: str) -> np.ndarray:
    return np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False)


def tensors(problem: dict[str, Any] = PROBLEM, seed: int = 0,
            dtype: Any = np.float32) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x (NHWC), w (OHWI) and bias for ``problem`` (groups 1)."""
    rng = np.random.default_rng(seed)
    p = problem
    x = rng.standard_normal((p["n"], p["h"], p["w"], p["c"])).astype(dtype)
    w = rng.standard_normal((p["k"], p["kh"], p["kw"], p["c"])).astype(dtype)
    bias = rng.standard_normal(p["k"]).astype(dtype)
    return x, w, bias


def conv_body(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None,
              problem: dict[str, Any] = PROBLEM, **fields: Any) -> dict[str, Any]:
    body = {"problem": problem, "x": npy_b64(x), "w": npy_b64(w), **fields}
    if bias is not None:
        body["bias"] = npy_b64(bias)
    return body


def assert_error(response: Any, status: int, code: str, field: str | None = None) -> dict:
    """The response is our error body with this status, code and (when given) field."""
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code, body
    assert body["message"]
    if field is not None:
        assert body["field"] == field, body
    return body
