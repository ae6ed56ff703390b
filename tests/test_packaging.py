"""The wheel: what a non-editable `pip install .` gets is enough to build, render the card and publish.

Built from a copy of the tree (so nothing is written into the checkout) with the environment's own
setuptools (`--no-build-isolation`: no network), then installed into a folder and imported from
there, away from the checkout.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILDER_PACKAGE = "eagle3_synth_builders"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tree = tmp_path_factory.mktemp("tree")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    for name in ("eagle3_synth", "builders"):
        shutil.copytree(ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("wheels")
    subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out)], cwd=tree, check=True, capture_output=True)
    [built] = out.glob("eagle3_synth-*.whl")
    return built


def test_the_wheel_holds_the_data_files_and_the_builder_under_the_packages_name(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "eagle3_synth/dataset/dataset_card.md" in names
    assert "eagle3_synth/contract/profiles.yaml" in names
    samples = {p.name for p in (ROOT / "eagle3_synth" / "prompts" / "samples").glob("*.jsonl")}
    assert len(samples) == 8 and {f"eagle3_synth/prompts/samples/{s}" for s in samples} <= names
    assert {f"{BUILDER_PACKAGE}/__init__.py", f"{BUILDER_PACKAGE}/eagle3_synth_builder.py"} <= names
    assert not [n for n in names if n.startswith("builders/")], "a generic top-level `builders` package"
    # pyproject lists the packages (find cannot map builders/): none of the tree may be missing.
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "eagle3_synth").rglob("*.py")}
    assert modules <= names, sorted(modules - names)


def test_the_installed_wheel_renders_the_card_away_from_the_checkout(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(target),
                    str(wheel)], check=True, capture_output=True)
    code = ("import eagle3_synth, eagle3_synth_builders\n"
            "from eagle3_synth.dataset.card import CARD_TEMPLATE\n"
            "from eagle3_synth.prompts.configs import sample_prompts_path\n"
            "assert '{{ configs_table }}' in CARD_TEMPLATE.read_text(encoding='utf-8')\n"
            "print(eagle3_synth.__file__, eagle3_synth_builders.Eagle3Synth.__module__,\n"
            "      sample_prompts_path('B1_glaive'))")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(target), "PATH": ""},
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    package, builder_module, samples = result.stdout.split()
    assert package.startswith(str(target)) and samples.startswith(str(target))
    assert builder_module == f"{BUILDER_PACKAGE}.eagle3_synth_builder"
