"""Client settings: TETHER_URL/TETHER_TOKEN, else the local region's `.tether/region.json`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.region import write_region_file
from tether.sdk import ClientSettings
from tether.sdk.settings import DEFAULT_URL


@pytest.fixture(autouse=True)
def empty_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    names = (
        "TETHER_URL",
        "TETHER_TOKEN",
        "TETHER_CLIENT_URL",
        "TETHER_CLIENT_TOKEN",
        "TETHER_CA_FILE",
        "TETHER_TLS_CA_FILE",
    )
    for name in (*names, "TETHER_REGION_DIR"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_without_a_local_region_the_defaults_apply() -> None:
    settings = ClientSettings()
    assert settings.url == DEFAULT_URL == "http://127.0.0.1:8080"
    assert settings.token is None


def test_the_region_file_names_the_url_and_the_token_file(empty_dir: Path) -> None:
    token_file = empty_dir / "elsewhere" / "admin.token"
    token_file.parent.mkdir()
    token_file.write_text("from-region-file\n")
    write_region_file(
        empty_dir / ".tether", url="http://127.0.0.1:18080", admin_token_file=str(token_file)
    )
    settings = ClientSettings()
    assert settings.url == "http://127.0.0.1:18080"
    assert settings.token is not None
    assert settings.token.get_secret_value() == "from-region-file"


def test_without_a_region_file_the_token_is_read_from_dot_tether(empty_dir: Path) -> None:
    (empty_dir / ".tether").mkdir()
    (empty_dir / ".tether" / "admin.token").write_text("  fallback \n")
    settings = ClientSettings()
    assert settings.token is not None
    assert settings.token.get_secret_value() == "fallback"


def test_environment_beats_the_region_file(
    empty_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_region_file(empty_dir / ".tether")
    (empty_dir / ".tether" / "admin.token").write_text("file-token")
    monkeypatch.setenv("TETHER_URL", "http://env.test")
    monkeypatch.setenv("TETHER_TOKEN", "env-token")
    settings = ClientSettings()
    assert settings.url == "http://env.test"
    assert settings.token is not None
    assert settings.token.get_secret_value() == "env-token"


def test_an_unreadable_region_file_is_ignored(empty_dir: Path) -> None:
    (empty_dir / ".tether").mkdir()
    (empty_dir / ".tether" / "region.json").write_text("{not json")
    assert ClientSettings().url == DEFAULT_URL
    (empty_dir / ".tether" / "region.json").write_text('["a list"]')
    assert ClientSettings().url == DEFAULT_URL
    # A file without every field `tether up` writes is not its file either.
    (empty_dir / ".tether" / "region.json").write_text('{"url": "http://127.0.0.1:18080"}')
    assert ClientSettings().url == DEFAULT_URL
    (empty_dir / ".tether" / "region.json").unlink()
    (empty_dir / ".tether" / "region.json").mkdir()
    assert ClientSettings().url == DEFAULT_URL


def test_tether_region_dir_names_the_region(
    empty_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_region_file(empty_dir / ".tether", url="http://here.test")
    elsewhere = empty_dir / "other"
    write_region_file(elsewhere, url="http://other.test")
    (elsewhere / "admin.token").write_text("other-token")
    monkeypatch.setenv("TETHER_REGION_DIR", str(elsewhere))
    settings = ClientSettings()
    assert settings.region_dir == elsewhere
    assert settings.url == "http://other.test"
    assert settings.token is not None
    assert settings.token.get_secret_value() == "other-token"
    # Without a region file there, its admin.token is still read; the URL is the default.
    (elsewhere / "region.json").unlink()
    settings = ClientSettings()
    assert settings.url == DEFAULT_URL
    assert settings.token is not None
    assert settings.token.get_secret_value() == "other-token"


def test_the_ca_file_comes_from_the_environment_else_the_region_file(
    empty_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert ClientSettings().ca_file is None
    recorded = empty_dir / ".tether" / "tls" / "ca.pem"
    write_region_file(empty_dir / ".tether", url="https://127.0.0.1:18080", ca_file=str(recorded))
    assert ClientSettings().ca_file == recorded
    monkeypatch.setenv("TETHER_TLS_CA_FILE", "/etc/tether/tls/ca.pem")
    assert ClientSettings().ca_file == Path("/etc/tether/tls/ca.pem")
    monkeypatch.setenv("TETHER_CA_FILE", "/srv/ca.pem")
    assert ClientSettings().ca_file == Path("/srv/ca.pem")
