"""Memory is bounded by design: the worst bodies of the hardening report, sent to a real
`convsel serve`, move the server's peak RSS (VmHWM, /proc) by less than a stated bound.

Bounds (on top of the idle server's peak after a warm-up): bodies refused for size, or small
routes at their limit: 32 MiB (the 31 MB select of 15.7 M integers once took the server from
296 MB to 1,254 MB); a /v1/conv2d at its largest accepted tensors (x of 16 MiB): 224 MiB;
a ResNet-50-sized ONNX model (104 MB) planned: 3x the model's size.
"""

from __future__ import annotations

import base64
import json

import httpx
import numpy as np
import pytest
from service_support import PROBLEM, npy_bytes, peak_rss_mb, served

MiB = 1 << 20
SMALL_BODIES_MIB = 32
CONV_MIB = 224
MODEL_FACTOR = 3
JSON_HEADERS = {"content-type": "application/json"}


def _chunks(data: bytes, size: int = 1 << 16):
    for i in range(0, len(data), size):
        yield data[i:i + size]


def _worst_small_bodies() -> list[tuple[str, str, bytes, int]]:
    problem = json.dumps(PROBLEM).encode()
    many_ints = b",".join([b"1"] * 15_700_000)
    truncated_npy = base64.b64encode(b"\x93NUMPY\x01\x00" + b"v\x00{'descr': '<f4', "
                                     b"'fortran_order': False, 'shape': (").decode()
    return [
        ("select, target = 15.7 M integers (31 MB)", "/v1/select",
         b'{"problem": ' + problem + b', "target": [' + many_ints + b"]}", 413),
        ("batch of 400 k problems (28 MB)", "/v1/select/batch",
         b'{"problems": [' + b",".join([problem] * 400_000) + b"]}", 413),
        ("batch of 260 k integers (512 KiB)", "/v1/select/batch",
         b'{"problems": [' + b",".join([b"1"] * 260_000) + b"]}", 413),
        ("batch item with 40 k unknown keys", "/v1/select/batch",
         b'{"problems": [{' + b",".join(b'"k%d": 1' % i for i in range(40_000)) + b"}]}", 422),
        ("batch of 1024 malformed items", "/v1/select/batch",
         b'{"problems": [' + b",".join([problem.replace(b'"n": 1', b'"n": true')] * 1024)
         + b"]}", 422),
        ("select, stride of 1 M items", "/v1/select",
         b'{"problem": {"n": 1, "h": 8, "w": 8, "c": 4, "k": 8, "kh": 3, "kw": 3, "stride": ['
         + b",".join([b"1"] * 1_000_000) + b"]}}", 413),
        ("conv2d, .npy header cut inside the shape", "/v1/conv2d",
         json.dumps({"problem": PROBLEM, "x": truncated_npy, "w": truncated_npy}).encode(),
         422),
    ]


def _model_like_resnet50() -> bytes:
    onnx_models = pytest.importorskip("onnx_models")
    chain = onnx_models.Chain((1, 512, 7, 7))
    for _ in range(11):   # 11 x 512x512x3x3 float32 weights: 104 MB, ResNet-50's 102 MB
        chain.conv(512, 3, pads=[1, 1, 1, 1]).relu()
    return chain.model().SerializeToString()


def test_worst_bodies_keep_the_servers_peak_rss_bounded(tmp_path):
    with served({"CONVSEL_TUNING_DB": str(tmp_path / "t.sqlite")}) as (url, proc), \
            httpx.Client(base_url=url, timeout=120) as client:
        x = np.ones((1, 8, 8, 4), np.float32)
        w = np.ones((8, 3, 3, 4), np.float32)
        warm = {"problem": PROBLEM, "x": base64.b64encode(npy_bytes(x)).decode(),
                "w": base64.b64encode(npy_bytes(w)).decode()}
        assert client.post("/v1/conv2d", json=warm).status_code == 200
        assert client.post("/v1/select/batch", json={"problems": [PROBLEM] * 8}).is_success
        baseline = peak_rss_mb(proc.pid)

        for what, path, body, status in _worst_small_bodies():
            for content in (body, _chunks(body)):   # declared length, then chunked
                r = client.post(path, content=content, headers=JSON_HEADERS)
                assert r.status_code == status, (what, r.text[:300])
                assert len(r.content) < 8192, what   # nothing of the body echoed
        grown = peak_rss_mb(proc.pid) - baseline
        assert grown < SMALL_BODIES_MIB, f"worst small bodies: +{grown:.0f} MiB"

        big = {"n": 1, "h": 1024, "w": 1024, "c": 4, "k": 4, "kh": 1, "kw": 1}
        x = np.ones((1, 1024, 1024, 4), np.float32)                  # 16 MiB, the limit
        w = np.ones((4, 1, 1, 4), np.float32)
        body = json.dumps({"problem": big, "x": base64.b64encode(npy_bytes(x)).decode(),
                           "w": base64.b64encode(npy_bytes(w)).decode()}).encode()
        assert client.post("/v1/conv2d", content=body, headers=JSON_HEADERS).is_success
        files = {"x": ("x.npy", npy_bytes(x)), "w": ("w.npy", npy_bytes(w))}
        r = client.post("/v1/conv2d", files=files, data={"problem": json.dumps(big)},
                        headers={"accept": "application/x-npy"})
        assert r.status_code == 200 and len(r.content) > 16 * MiB
        grown = peak_rss_mb(proc.pid) - baseline
        assert grown < CONV_MIB, f"largest convolutions: +{grown:.0f} MiB"

        model = _model_like_resnet50()
        r = client.post("/v1/plan", files={"model": ("resnet50.onnx", model)},
                        data={"target": "G77"})
        assert r.status_code == 200, r.text[:300]
        assert r.json()["summary"]["convolutions"] == 11
        grown = peak_rss_mb(proc.pid) - baseline
        size = len(model) / MiB
        assert grown < MODEL_FACTOR * size, f"plan of a {size:.0f} MiB model: +{grown:.0f} MiB"
