"""What the package declares: ranges for users' environments, exact pins only where tests and
benchmarks are built (tests/constraints.txt, bench/requirements-peers.txt)."""

from __future__ import annotations

import pathlib
import re

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower()


@pytest.fixture(scope="module")
def extras() -> dict[str, list[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["optional-dependencies"]


def test_torch_extra_is_a_range_not_a_pin(extras):
    (torch,) = [r for r in extras["torch"] if _name(r) == "torch"]
    assert "==" not in torch and ">=" in torch, torch
    assert not [r for reqs in extras.values() for r in reqs if "==" in r], "pins belong in tests/constraints.txt"


def test_test_environment_pins_the_torch_the_benchmarks_use():
    def pins(path: pathlib.Path) -> dict[str, str]:
        lines = [line.strip() for line in path.read_text().splitlines()]
        return {_name(line): line for line in lines if line and not line.startswith("#") and "==" in line}

    assert pins(ROOT / "tests" / "constraints.txt")["torch"] == pins(ROOT / "bench" / "requirements-peers.txt")["torch"]


def test_demo_environment_holds_no_training_framework(extras):
    names = {_name(r) for r in extras["demo"]}
    assert names.isdisjoint({"torch", "jax", "jaxlib"}), names
    assert {"s3fs", "moto"} <= names
