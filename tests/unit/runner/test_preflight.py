"""The runner's pre-flight with a fake server: scopes, key paths, registration, adoption."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from quorumbench.errors import AuthenticationError, ConfigError, NotFoundError
from quorumbench.runner.client import Identity
from quorumbench.runner.keys import create_key, key_file_for, legacy_key_file, server_dir_name
from quorumbench.runner.preflight import preflight
from quorumbench.settings import RunnerSettings

URL = "http://127.0.0.1:8000"
BOTH = frozenset({"task:pull", "task:submit"})


class Server:
    """``GET /v0/me`` and ``GET /v0/runners/{name}/keys`` for one account."""

    def __init__(self, account="alice", scopes=BOTH, keys=None, revoked=()):
        self.identity = Identity(1, account, False, frozenset(scopes))
        self.keys = keys  # None: the account never used this runner name
        self.revoked = set(revoked)

    def me(self):
        if self.identity is None:
            raise AuthenticationError("unknown API token")
        return self.identity

    def runner_keys(self):
        if self.keys is None:
            raise NotFoundError("this account has no runner 'box'")
        return [{"key_id": k, "revoked_at": "x" if k in self.revoked else None} for k in self.keys]


@pytest.fixture(autouse=True)
def config_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config"


def settings(**overrides):
    base = {"server_url": URL, "token": SecretStr("qb_x"), "name": "box"}
    return RunnerSettings(_env_file=None, **{**base, **overrides})


def test_key_files_are_per_server_account_and_runner(config_home):
    root = config_home / "quorumbench" / "runner-keys"
    assert key_file_for(URL, "alice", "box") == root / "127.0.0.1_8000" / "alice" / "box.key"
    assert key_file_for(URL, "bob", "box") != key_file_for(URL, "alice", "box")
    assert server_dir_name("https://qb.example.org/") == "qb.example.org_443"
    assert server_dir_name("https://qb.example.org:443/sub/qb") == "qb.example.org_443_sub_qb"
    assert server_dir_name("http://[::1]:80") == "__1_80"
    assert key_file_for(URL, "../../etc", "box").is_relative_to(root)


def test_a_registered_key_at_the_default_path_passes():
    key = create_key(key_file_for(URL, "alice", "box"))
    ready = preflight(Server(keys=[key.key_id]), settings())
    assert ready.key.key_id == key.key_id and ready.identity.account == "alice"


@pytest.mark.parametrize(
    ("scopes", "missing"),
    [({"task:pull"}, "lacks task:submit"), ({"task:submit"}, "lacks task:pull"), (set(), "and")],
)
def test_a_token_without_pull_and_submit_is_refused(scopes, missing):
    with pytest.raises(ConfigError, match=missing) as refused:
        preflight(Server(scopes=scopes), settings())
    assert "--scope task:pull --scope task:submit" in refused.value.message


def test_an_admin_token_carries_every_scope():
    key = create_key(key_file_for(URL, "root", "box"))
    assert preflight(Server("root", {"admin"}, [key.key_id]), settings()).key == key


def test_no_key_says_which_init_to_run():
    with pytest.raises(ConfigError) as refused:
        preflight(Server(keys=None), settings())
    message = refused.value.message
    assert "no signing key for runner 'box' of account 'alice'" in message
    assert "`quorumbench runner init --server http://127.0.0.1:8000 --name box`" in message


def test_another_accounts_key_is_refused(tmp_path):
    """The reported bug: a key file shared by runner name, registered by someone else."""
    theirs = create_key(tmp_path / "bob-box.key")
    with pytest.raises(ConfigError, match="is not a key of runner 'box' of account 'alice'") as e:
        preflight(Server(keys=["0" * 64]), settings(key_file=theirs.path))
    assert "without --key-file" in e.value.message
    with pytest.raises(ConfigError, match="has no registered key"):
        preflight(Server(keys=None), settings(key_file=theirs.path))


def test_a_revoked_key_is_refused_with_rotate():
    key = create_key(key_file_for(URL, "alice", "box"))
    with pytest.raises(ConfigError, match="was revoked") as refused:
        preflight(Server(keys=[key.key_id], revoked=[key.key_id]), settings())
    assert refused.value.message.endswith("--name box --rotate`")


def test_a_legacy_key_is_adopted_only_when_registered_to_this_runner():
    legacy = create_key(legacy_key_file("box"))
    new_path = key_file_for(URL, "alice", "box")
    # someone else's (or never registered): ignored, and the user is told
    with pytest.raises(ConfigError, match="was not used") as refused:
        preflight(Server(keys=["f" * 64]), settings())
    assert "runner init" in refused.value.message
    assert not new_path.exists()
    # revoked for this runner: ignored too
    with pytest.raises(ConfigError, match="was not used"):
        preflight(Server(keys=[legacy.key_id], revoked=[legacy.key_id]), settings())
    assert not new_path.exists()
    # registered and active for this account's runner: copied to the new path
    ready = preflight(Server(keys=[legacy.key_id]), settings())
    assert ready.key.path == new_path and ready.key.key_id == legacy.key_id
    assert new_path.stat().st_mode & 0o777 == 0o600
    assert legacy.path.exists()  # left for other servers that may know it


def test_a_wrong_token_says_which_variable():
    server = Server()
    server.identity = None
    with pytest.raises(AuthenticationError, match="QB_RUNNER_TOKEN"):
        preflight(server, settings())


def test_a_server_without_v0_me_is_not_a_quorumbench_root():
    server = Server()
    server.me = lambda: (_ for _ in ()).throw(NotFoundError("Not Found"))
    with pytest.raises(ConfigError, match="not the root URL of a QuorumBench server"):
        preflight(server, settings())
