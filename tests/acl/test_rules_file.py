"""Loading heuristics files: the packaged file, another path, $CONVSEL_HEURISTICS, and bad files
that name the entry at fault."""

import shutil

import pytest
import yaml
from repo import ROOT

from convsel import ConvProblem, RuleFileError, load_rules, select
from convsel.rules import default_rules_path


def test_packaged_file_loads_with_digest():
    rules = load_rules()
    assert rules.version == "acl-v52.3.0" and len(rules.digest) == 16
    assert default_rules_path().is_file()


def write_variant(tmp_path, change):
    data = yaml.safe_load(default_rules_path().read_text())
    change(data)
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_other_file_changes_the_answer(tmp_path, monkeypatch):
    p = ConvProblem(1, 56, 56, 12, 64, 3, 3, pad=1)
    assert select(p, "cpu").method == "GEMM"                       # C=12 < 16

    def lower_threshold(d):
        d["cpu"]["small_ifm_below"] = 8
    path = write_variant(tmp_path, lower_threshold)
    assert select(p, "cpu", rules=str(path)).method == "WINOGRAD"
    assert select(p, "cpu", rules=load_rules(path)).rules_digest != select(p, "cpu").rules_digest
    monkeypatch.setenv("CONVSEL_HEURISTICS", str(path))
    assert load_rules().cpu.small_ifm_below == 8


@pytest.mark.parametrize("change,words", [
    (lambda d: d["cpu"].pop("small_ifm_below"), "entry cpu.small_ifm_below: Field required"),
    (lambda d: d["cpu"].update(small_ifm=3), "entry cpu.small_ifm: Extra inputs"),
    (lambda d: d["gpu"]["kernel_threshold"]["targets"].update(G99=7),
     "unknown gpu target 'G99'"),
    (lambda d: d["cpu"]["known_networks"][0].update(method="FAST"),
     "entry cpu.known_networks.0.method"),
    (lambda d: d["gpu"].update(workload_min="lots"),
     "entry gpu.workload_min"),
    (lambda d: d["targets"]["gpu"].update(G999=0x900), "arch 0x900 is not in gpu_families"),
    (lambda d: d.update(schema=2), "entry schema"),
])
def test_bad_file_names_entry(tmp_path, change, words):
    with pytest.raises(RuleFileError, match=words.replace("(", r"\(").replace(")", r"\)")):
        load_rules(write_variant(tmp_path, change))


def test_unreadable_and_not_yaml(tmp_path):
    with pytest.raises(RuleFileError, match="cannot read"):
        load_rules(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("cpu: [unclosed")
    with pytest.raises(RuleFileError, match="not valid YAML"):
        load_rules(bad)
    bad.write_text("- a list\n")
    with pytest.raises(RuleFileError, match="mapping"):
        load_rules(bad)


def test_top_level_copy_is_the_packaged_file(tmp_path):

    top = ROOT / "heuristics.yaml"
    assert top.read_bytes() == default_rules_path().read_bytes()
    copy = tmp_path / "h.yaml"
    shutil.copy(top, copy)
    assert load_rules(copy).digest == load_rules().digest
