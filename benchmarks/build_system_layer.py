"""Build convsel's shipped system layer (convsel/data/system/layer.json.gz) from `convsel db
export` runs measured on the device machine.

    python benchmarks/build_system_layer.py                      # the committed v6 runs
    python benchmarks/build_system_layer.py --run DIR [--run DIR ...] [--out FILE]

Each run directory holds ``train.json.gz`` (sampled shapes and the shipped nets) and may hold
``fresh.json.gz`` (the nets timed again, separately), as benchmarks/learn.sh writes them. Both
are uploaded into a scratch store through the fleet's own path (convsel.tuning.fleet.receive:
checked, merged into robust statistics, contradictions flagged and left out), then each device
class's cost model is fitted on the merged entries (convsel.tuning.fleet.fit_class, the same
as POST /v1/fit/jobs), and the entries and models of this convsel's versions are written,
compact and gzipped, with where they came from.

Fitting is done here, not on the device machine: the timings are the device machine's, and a
fit is deterministic given them (LightGBM with a fixed seed). The layer is keyed by convsel's
and the implementations' versions: after a change of either (or of the cost model's
features), run this again, and commit the result with the runs it came from.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from convsel import __version__
from convsel.learn.features import FEATURES_VERSION
from convsel.tuning import IMPLEMENTATIONS_VERSION, TuningDB
from convsel.tuning.fleet import fit_class, receive
from convsel.tuning.system import FORMAT

ROOT = Path(__file__).resolve().parents[1]
RUNS = [ROOT / "benchmarks/results/learn/h100-v6",
        ROOT / "benchmarks/results/learn/cpu2-quiet-v6"]
OUT = ROOT / "convsel/data/system/layer.json.gz"
LIMIT_BYTES = 2 * 1024 * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="append", type=Path, help="a run directory "
                        "(repeatable; default: the committed h100-v6 and cpu2-quiet-v6)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    runs = args.run or RUNS
    with tempfile.TemporaryDirectory() as scratch:
        db = TuningDB(Path(scratch) / "layer.sqlite")
        sources = [upload(db, run) for run in runs]
        classes = sorted({(e.backend, tuple(sorted(e.device.items())))
                          for e in db.entries() if e.is_current})
        models = []
        for backend, device in classes:
            started = time.perf_counter()
            fitted = fit_class(db, backend, dict(device))
            print(f"{backend} / {dict(device)['name']}: {fitted['family']} {fitted['id']} on "
                  f"{fitted['training_problems']} shapes, {fitted['why']} "
                  f"({time.perf_counter() - started:.1f} s)", file=sys.stderr)
            models.append(fitted)
        document = {
            "format": FORMAT, "convsel_version": __version__,
            "implementations_version": IMPLEMENTATIONS_VERSION,
            "features_version": FEATURES_VERSION, "built": time.time(),
            "how": "python benchmarks/build_system_layer.py " + " ".join(
                f"--run {r.relative_to(ROOT) if r.is_relative_to(ROOT) else r}" for r in runs),
            "sources": sources,
            "entries": [e.to_dict() for e in db.entries() if e.is_current],
            "models": [_model_row(db, m) for m in db.models() if _current(m)],
        }
    data = gzip.compress(json.dumps(document, separators=(",", ":"),
                                    sort_keys=True).encode(), 9, mtime=0)
    if len(data) > LIMIT_BYTES:
        print(f"error: the layer is {len(data)} bytes, over the {LIMIT_BYTES} bytes the "
              "package may carry", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(data)
    print(f"wrote {args.out} ({len(data)} bytes): {len(document['entries'])} entries, "
          f"{len(document['models'])} models", file=sys.stderr)
    return 0


def upload(db: TuningDB, run: Path) -> dict[str, Any]:
    """Upload a run's exports into ``db``; what they were and what became of them."""
    found: dict[str, Any] = {"run": str(run.relative_to(ROOT)) if run.is_relative_to(ROOT)
                             else str(run)}
    for name in ("train", "fresh"):
        path = run / f"{name}.json.gz"
        if not path.exists():
            continue
        raw = path.read_bytes()
        document = json.loads(gzip.decompress(raw))
        report = receive(db, document, uploader=f"device machine: {found['run']}/{name}",
                         limits=_limits(len(document["entries"])))
        found[name] = {"sha256": hashlib.sha256(raw).hexdigest(), **report.counts}
        print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: "
              f"{report.counts}", file=sys.stderr)
    return found


def _limits(count: int) -> Any:
    from convsel.tuning.fleet import Limits

    return Limits(entries=max(count, 1))


def _current(model: dict[str, Any]) -> bool:
    return (model["convsel_version"], model["implementations_version"]) == (
        __version__, IMPLEMENTATIONS_VERSION)


def _model_row(db: TuningDB, model: dict[str, Any]) -> dict[str, Any]:
    key = {k: model[k] for k in ("backend", "vendor", "device", "driver")}
    record = db.load_model(key)
    assert record is not None
    return {**key, "convsel_version": model["convsel_version"],
            "implementations_version": model["implementations_version"],
            "family": record["family"], "model": record["model"], "meta": record["meta"],
            "created": record["created"]}


if __name__ == "__main__":
    sys.exit(main())
