"""Throughput profiles in Gavel's format: read, looked up, and refused with the place named."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tether.model.accelerator import ProfileError, ThroughputProfile

DATA = {
    "v100": {"ResNet-50": {"1": 4.39, "2": 8.1}, "A3C": {"1": 3.9}},
    "k80": {"ResNet-50": {"1": 0.62}},
}


def test_a_profile_gives_each_gangs_throughput_per_accelerator_type(tmp_path: Path) -> None:
    path = tmp_path / "throughputs.json"
    path.write_text(json.dumps(DATA))
    profile = ThroughputProfile.load(path)
    assert profile.throughputs("ResNet-50", 1) == {"v100": 4.39, "k80": 0.62}
    assert profile.throughputs("ResNet-50", 2) == {"v100": 8.1}
    assert profile.job_types == ["A3C", "ResNet-50"]
    with pytest.raises(ProfileError, match="no throughput for 'A3C' at scale factor 4"):
        profile.throughputs("A3C", 4)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1], "profile: expected an object, found list"),
        ({"v100": {"A3C": {"0": 1.0}}}, "v100 / A3C: scale factor '0' is not 1 or more"),
        ({"v100": {"A3C": {"1": -2}}}, "v100 / A3C / 1: -2 is not a number of steps"),
        ({"v100": {"A3C": {"1": "fast"}}}, "v100 / A3C / 1: 'fast' is not a number"),
        ({"v100": {"A3C": 3}}, "v100 / A3C: expected an object, found int"),
    ],
)
def test_a_bad_profile_is_refused_naming_where(data: object, message: str) -> None:
    with pytest.raises(ProfileError, match=re.escape(message)):
        ThroughputProfile.parse(data)


def test_an_unreadable_file_names_itself(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("{")
    with pytest.raises(ProfileError, match=r"broken\.json"):
        ThroughputProfile.load(path)
