"""Credentials in URLs: found, removed and redacted; refused where a user passes them (exit 2)."""

from __future__ import annotations

import pytest

from benchgate.config import parse_config
from benchgate.errors import ConfigError
from benchgate.kit.credentials import has_credentials, redacted, without_credentials
from benchgate.measure.source import validate_repository

CASES = [
    # url, carries credentials, without them, as shown
    ("https://github.com/org/repo.git", False, "https://github.com/org/repo.git", None),
    ("git@github.com:org/repo.git", False, "git@github.com:org/repo.git", None),
    ("ssh://git@host:2222/org/repo.git", False, "ssh://git@host:2222/org/repo.git", None),
    ("https://org@dev.azure.com/org/p/_git/r", False, "https://org@dev.azure.com/org/p/_git/r", None),
    (
        "https://gitlab-ci-token:glcbt-64_s3cr3t@gitlab.com/team/model.git",
        True,
        "https://gitlab-ci-token@gitlab.com/team/model.git",
        "https://gitlab-ci-token:***@gitlab.com/team/model.git",
    ),
    (
        "https://x-access-token:ghs_abc123@github.com/org/repo.git",
        True,
        "https://x-access-token@github.com/org/repo.git",
        "https://x-access-token:***@github.com/org/repo.git",
    ),
    ("https://ghp_abcdef123456@github.com/org/repo", True, "https://github.com/org/repo", "https://***@github.com/org/repo"),
    ("https://user:pw@mlflow.example.com:5000", True, "https://user@mlflow.example.com:5000", "https://user:***@mlflow.example.com:5000"),
    ("http://127.0.0.1:5000", False, "http://127.0.0.1:5000", None),
    ("sqlite:///tmp/mlflow.db", False, "sqlite:///tmp/mlflow.db", None),
    ("https://host/path@with-at", False, "https://host/path@with-at", None),
]  # fmt: skip


@pytest.mark.parametrize(("url", "carries", "without", "shown"), CASES)
def test_credentials_are_found_removed_and_redacted(
    url: str, carries: bool, without: str, shown: str | None
) -> None:
    assert has_credentials(url) is carries
    assert without_credentials(url) == without
    assert redacted(url) == (shown or url)
    assert not has_credentials(without_credentials(url))


def test_a_repository_with_a_token_is_refused_without_echoing_it() -> None:
    with pytest.raises(ConfigError) as info:
        validate_repository("https://oauth2:glpat-SECRET99@gitlab.com/team/model.git", "--repository")
    message = str(info.value)
    assert message.startswith(
        "--repository: got 'https://oauth2:***@gitlab.com/team/model.git', which carries"
    )
    assert "credential helper" in message and "SECRET99" not in message
    assert info.value.exit_code == 2


def test_a_malformed_repository_is_not_echoed_with_its_password() -> None:
    with pytest.raises(ConfigError) as info:
        validate_repository("http://u:SECRET99@host/repo.git")  # http: not an allowed scheme
    assert "SECRET99" not in str(info.value) and "u:***@host" in str(info.value)


def test_a_tracking_uri_with_credentials_is_refused_naming_the_variables_to_use() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"tracking": {"uri": "https://bot:SECRET99@mlflow.example.com"}})
    message = str(info.value)
    assert message.startswith("tracking.uri: got 'https://bot:***@mlflow.example.com'")
    assert "MLFLOW_TRACKING_USERNAME" in message and "SECRET99" not in message
