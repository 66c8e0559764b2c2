"""RunnerSettings: the server URL is checked at once; the data directory's two names."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from quorumbench.settings import RunnerSettings, check_server_url


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("127.0.0.1:18800", "write it as http://127.0.0.1:18800"),
        ("localhost", "write it as http://localhost"),
        ("ftp://host", "not an http:// or https:// URL"),
        ("http://", "has no host name"),
        (
            "http://127.0.0.1:18800/v0",
            "drop /v0: the server URL is its root (http://127.0.0.1:18800)",
        ),
        ("https://qb.example.org/qb/v0/", "its root (https://qb.example.org/qb)"),
    ],
)
def test_a_bad_server_url_is_refused_with_what_to_write(url, message):
    with pytest.raises(ValueError, match=None) as refused:
        check_server_url(url)
    assert message in str(refused.value)
    with pytest.raises(ValidationError):
        RunnerSettings(_env_file=None, server_url=url)


def test_good_server_urls_lose_their_trailing_slash():
    assert check_server_url("https://qb.example.org/") == "https://qb.example.org"
    assert check_server_url("HTTP://127.0.0.1:8000") == "HTTP://127.0.0.1:8000"
    assert (
        RunnerSettings(_env_file=None, server_url="http://h:1/sub/").server_url == "http://h:1/sub"
    )


def test_datasets_dir_reads_both_variables_and_the_runners_wins(monkeypatch):
    for var in ("QB_RUNNER_DATASETS_DIR", "QB_DATASETS_DIR"):
        monkeypatch.delenv(var, raising=False)
    assert RunnerSettings(_env_file=None).datasets_dir is None
    monkeypatch.setenv("QB_DATASETS_DIR", "/shared")
    assert RunnerSettings(_env_file=None).datasets_dir == Path("/shared")
    monkeypatch.setenv("QB_RUNNER_DATASETS_DIR", "/runner")
    assert RunnerSettings(_env_file=None).datasets_dir == Path("/runner")
    assert RunnerSettings(_env_file=None, datasets_dir="/flag").datasets_dir == Path("/flag")


def test_private_endpoints_are_refused_by_default(monkeypatch):
    monkeypatch.delenv("QB_RUNNER_ALLOW_PRIVATE_ENDPOINTS", raising=False)
    assert RunnerSettings(_env_file=None).allow_private_endpoints is False
    monkeypatch.setenv("QB_RUNNER_ALLOW_PRIVATE_ENDPOINTS", "true")
    assert RunnerSettings(_env_file=None).allow_private_endpoints is True


def test_the_carbon_intensity_has_two_names_and_is_checked(monkeypatch):
    monkeypatch.delenv("QB_RUNNER_CARBON_INTENSITY", raising=False)
    monkeypatch.delenv("QB_CARBON_INTENSITY", raising=False)
    assert RunnerSettings(_env_file=None).carbon_intensity is None
    monkeypatch.setenv("QB_CARBON_INTENSITY", "SE")
    assert RunnerSettings(_env_file=None).carbon_intensity == "SE"
    monkeypatch.setenv("QB_RUNNER_CARBON_INTENSITY", " 350g ")
    assert RunnerSettings(_env_file=None).carbon_intensity == "350g"  # the runner's own wins
    monkeypatch.setenv("QB_RUNNER_CARBON_INTENSITY", "5000")
    with pytest.raises(ValidationError, match="above 2000"):
        RunnerSettings(_env_file=None)
