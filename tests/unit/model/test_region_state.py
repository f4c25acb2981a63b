"""The region file (`.tether/region.json`): its model, read back as written, and bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.region import region_file_fields, write_region_file
from tether.model import REGION_FILE_NAME, RegionStateError, read_region_state


def test_what_is_written_reads_back_the_same(tmp_path: Path) -> None:
    written = write_region_file(tmp_path, dead=["health"], restarts={"frontend": 0, "health": 3})
    assert read_region_state(tmp_path / REGION_FILE_NAME) == written
    assert written.admin_token_file == tmp_path / "admin.token"
    assert written.started_at.utcoffset() is not None
    assert [p.name for p in tmp_path.iterdir()] == [REGION_FILE_NAME]  # no temporary file left


def test_the_field_names_are_the_ones_tether_up_has_always_written(tmp_path: Path) -> None:
    # People and scripts read the file (`jq .metrics .tether/region.json`): same names.
    write_region_file(tmp_path)
    on_disk = json.loads((tmp_path / REGION_FILE_NAME).read_text())
    assert set(on_disk) == set(region_file_fields(tmp_path))


def test_a_file_written_before_the_model_and_one_with_more_fields_are_read(
    tmp_path: Path,
) -> None:
    path = tmp_path / REGION_FILE_NAME
    path.write_text(json.dumps(region_file_fields(tmp_path), indent=2) + "\n")
    state = read_region_state(path)
    assert state is not None
    assert state.url == "http://127.0.0.1:18080"
    # A newer `tether up` may record more; an older CLI still finds what it needs.
    path.write_text(json.dumps(region_file_fields(tmp_path) | {"new_field": {"a": 1}}))
    assert read_region_state(path) == state


def test_no_file_means_no_local_region(tmp_path: Path) -> None:
    assert read_region_state(tmp_path / REGION_FILE_NAME) is None


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "file: Invalid JSON"),
        ('["a list"]', "file: Input should be an object"),
        ("", "file: Invalid JSON: EOF"),
    ],
)
def test_a_file_that_is_not_json_of_an_object_is_named(
    tmp_path: Path, content: str, problem: str
) -> None:
    path = tmp_path / REGION_FILE_NAME
    path.write_text(content)
    with pytest.raises(RegionStateError) as raised:
        read_region_state(path)
    assert str(raised.value).startswith(f"{path} is not a region file written by `tether up`: ")
    assert problem in str(raised.value)


def test_missing_and_wrong_fields_are_named(tmp_path: Path) -> None:
    path = tmp_path / REGION_FILE_NAME
    fields = region_file_fields(tmp_path)
    del fields["url"]
    path.write_text(json.dumps(fields | {"pid": "not a pid", "restarts": {"health": -1}}))
    with pytest.raises(RegionStateError) as raised:
        read_region_state(path)
    message = str(raised.value)
    assert "pid: Input should be a valid integer" in message
    assert "url: Field required" in message
    assert "restarts.health: Input should be greater than or equal to 0" in message


def test_more_than_three_problems_are_counted_not_listed(tmp_path: Path) -> None:
    path = tmp_path / REGION_FILE_NAME
    path.write_text("{}")
    with pytest.raises(RegionStateError, match=r"\(and 12 more\)$"):
        read_region_state(path)


def test_a_file_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    path = tmp_path / REGION_FILE_NAME
    path.mkdir()
    with pytest.raises(RegionStateError, match=f"^cannot read {path}: Is a directory$"):
        read_region_state(path)
