"""A model exported the way users do it: torch.onnx.export of a small CNN (skipped without
torch, or when the exporter lacks an optional package)."""

from __future__ import annotations

import inspect
import io

import pytest

pytest.importorskip("onnx")
torch = pytest.importorskip("torch")

from convsel.onnx import plan

nn = torch.nn
# The TorchScript exporter is deprecated in favour of the dynamo one, which needs onnxscript.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False),
                                  nn.BatchNorm2d(16), nn.ReLU())
        self.dw = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.ReLU6())
        self.pw = nn.Conv2d(16, 32, 1)
        self.dilated = nn.Conv2d(32, 32, 3, padding=2, dilation=2)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        x = self.pw(self.dw(self.stem(x)))
        x = torch.relu(self.dilated(x))
        return self.head(x.mean(dim=(2, 3)))


def export(model, x, **kwargs) -> bytes:
    buf = io.BytesIO()
    options = {"opset_version": 17, **kwargs}
    if "dynamo" in inspect.signature(torch.onnx.export).parameters:
        options["dynamo"] = False       # the TorchScript exporter needs no onnxscript
    try:
        torch.onnx.export(model, (x,), buf, input_names=["image"], **options)
    except ImportError as exc:          # an optional exporter dependency is missing
        pytest.skip(f"torch.onnx.export needs a missing package: {exc}")
    return buf.getvalue()


@pytest.fixture(scope="module")
def exported():
    torch.manual_seed(0)
    return export(SmallCNN().eval(), torch.randn(1, 3, 64, 64))


def test_plan_of_a_torch_export(exported):
    result = plan(exported, "G77")
    problems = [n.problem for n in result.nodes]
    assert len(problems) == 4
    stem, dw, pw, dilated = problems
    assert (stem.c, stem.k, stem.h, stem.stride, stem.pad) == (3, 16, 64, (2, 2), (1, 1, 1, 1))
    assert str(stem.activation) == "relu"            # BatchNorm is folded into the Conv
    assert dw.is_depthwise and str(dw.activation) == "bounded_relu(6)"   # ReLU6 -> Clip
    assert (pw.kh, pw.kw, pw.k, pw.activation) == (1, 1, 32, None)
    assert dilated.dilation == (2, 2) and str(dilated.activation) == "relu"
    assert all(p.layout == "NCHW" and p.dtype == "F32" for p in problems)
    assert result.summary["convolutions"] == 4 and result.summary["unrunnable"] == []
    assert result.nodes[3].selection.rule == "gpu.dilation"


def test_dynamic_batch_needs_an_input_shape():
    torch.manual_seed(0)
    data = export(SmallCNN().eval(), torch.randn(1, 3, 64, 64),
                  dynamic_axes={"image": {0: "batch"}})
    with pytest.raises(ValueError, match="image=1,3,224,224"):
        plan(data, "cpu")
    assert plan(data, "cpu", input_shapes={"image": (8, 3, 64, 64)}).nodes[0].problem.n == 8


class Bottleneck(nn.Module):
    """torchvision's ResNet v1.5 block: the stride on the 3x3 conv."""

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        out = 4 * width
        self.body = nn.Sequential(
            nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out))
        self.down = (nn.Sequential(nn.Conv2d(cin, out, 1, stride=stride, bias=False),
                                   nn.BatchNorm2d(out))
                     if stride != 1 or cin != out else nn.Identity())

    def forward(self, x):
        return torch.relu(self.body(x) + self.down(x))


def resnet50() -> nn.Module:
    layers: list[nn.Module] = [nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False),
                               nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            layers.append(Bottleneck(cin, width, stride if b == 0 else 1))
            cin = 4 * width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 1000))


def geometry(p):
    return (p.n, p.h, p.w, p.c, p.k, p.kh, p.kw, p.stride, p.pad, p.dilation, p.groups)


def test_a_real_resnet50_export_plans_to_the_shipped_resnet50_layers():
    from convsel.tuning.layers import load_layers

    torch.manual_seed(0)
    result = plan(export(resnet50().eval(), torch.randn(1, 3, 224, 224)), "cpu")
    assert result.summary["convolutions"] == 53 and result.summary["unrunnable"] == []
    shipped, _ = load_layers(nets=["resnet50"])
    assert sorted({geometry(n.problem) for n in result.nodes}) == sorted(
        {geometry(layer.problem) for layer in shipped})
