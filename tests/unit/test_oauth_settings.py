"""OAuth login providers are configuration: the github preset, overrides, refusals."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from quorumbench.errors import ConfigError
from quorumbench.settings import OAuthProvider, ServerSettings


def test_a_github_entry_needs_only_the_client_id_and_secret(monkeypatch):
    monkeypatch.setenv(
        "QB_OAUTH_PROVIDERS", '[{"name": "github", "client_id": "Ov23li", "client_secret": "s3"}]'
    )
    (github,) = ServerSettings().oauth_providers
    assert github.preset == "github"
    assert github.authorize_url == "https://github.com/login/oauth/authorize"
    assert github.token_url == "https://github.com/login/oauth/access_token"
    assert github.device_code_url == "https://github.com/login/device/code"
    assert github.user_url == "https://api.github.com/user"
    assert (github.subject_field, github.name_field, github.scopes) == ("id", "login", ())
    assert github.client_secret.get_secret_value() == "s3"
    assert "s3" not in repr(github) and "s3" not in repr(ServerSettings())


def test_a_preset_under_another_name_with_its_own_urls():
    enterprise = OAuthProvider(
        name="ghe",
        preset="github",
        client_id="x",
        client_secret="y",
        authorize_url="https://ghe.example/login/oauth/authorize",
    )
    assert enterprise.authorize_url == "https://ghe.example/login/oauth/authorize"
    assert enterprise.user_url == "https://api.github.com/user"


def test_a_provider_without_a_preset_must_say_everything():
    with pytest.raises(ValidationError, match="authorize_url"):
        OAuthProvider(name="custom", client_id="x", client_secret="y")
    with pytest.raises(ValidationError, match="unknown OAuth preset 'gitlab'"):
        OAuthProvider(name="x", preset="gitlab", client_id="x", client_secret="y")
    with pytest.raises(ValidationError, match="name"):
        OAuthProvider(name="Git Hub", preset="github", client_id="x", client_secret="y")


def test_provider_names_are_unique():
    github = {"name": "github", "client_id": "x", "client_secret": "y"}
    with pytest.raises(ConfigError, match="names github twice"):
        ServerSettings(oauth_providers=[github, github])


@pytest.mark.parametrize("path", ["/", "/welcome", "/app/login?done=1"])
def test_the_return_path_is_a_local_path(path):
    assert ServerSettings(login_return_path=path).login_return_path == path


@pytest.mark.parametrize(
    "path", ["//evil.example", "/\\evil.example", "https://evil.example", "welcome", "/a#b"]
)
def test_a_return_path_that_could_leave_the_site_is_refused(path):
    with pytest.raises(ValidationError):
        ServerSettings(login_return_path=path)
