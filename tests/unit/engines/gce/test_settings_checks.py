"""The GCE settings' checks (engines/gce/settings_checks.py): a package index URL that holds
credentials is refused before the startup script (instance metadata) or doctor's output could
hold them."""

from __future__ import annotations

import pytest

from expo_executor.core.errors import ExpoError
from expo_executor.engines.gce.launch import doctor_plan
from expo_executor.engines.gce.settings import GceSettings
from expo_executor.engines.gce.settings_checks import check_run, pip_index_url

SECRET = "s3cr3t-token"


def _settings(url: str | None) -> GceSettings:
    return GceSettings(gce_project="p", gce_zones="us-central1-a", max_workers=2,
                       heartbeat_grace=600.0, gce_service_account="default",
                       gce_pip_index_url=url)


@pytest.mark.parametrize("url", [f"https://user:{SECRET}@pypi.example/simple/",
                                 f"https://{SECRET}@pypi.example/simple/",
                                 f"https://oauth2accesstoken:{SECRET}@us-python.pkg.dev/p/r/"])
def test_an_index_url_with_credentials_is_refused_in_one_line_without_them(url: str) -> None:
    for check in (check_run, pip_index_url,
                  lambda settings: doctor_plan(settings, [], "gs://bucket/run")):
        with pytest.raises(ExpoError) as caught:
            check(_settings(url))
        message = str(caught.value)
        assert message.startswith("--expocloud-gce-pip-index-url: the URL holds credentials")
        assert "\n" not in message and SECRET not in message and "fix:" in message


def test_an_index_url_without_credentials_reaches_the_plan() -> None:
    url = "https://us-python.pkg.dev/p/r/simple/"
    assert doctor_plan(_settings(url), [], "gs://bucket/run").pip_index_url == url
    assert pip_index_url(_settings(None)) is None


@pytest.mark.parametrize("labels, words", [
    ("Team=ml", "label key 'Team' does not start with a lowercase letter"),
    ("team=a.b", "holds '.'"),
    ("expocloud-run=x", "is reserved"),
    (",".join(f"k{i}=v" for i in range(58)), "58 labels, more than the 57"),
])
def test_bad_labels_are_one_line_naming_the_setting_before_any_vm(labels: str,
                                                                  words: str) -> None:
    settings = _settings(None)
    settings.gce_labels = labels
    with pytest.raises(ExpoError) as refused:
        check_run(settings)
    assert str(refused.value).startswith("--expocloud-gce-labels: ")
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_international_labels_pass() -> None:
    settings = _settings(None)
    settings.gce_labels = "équipe=données,team=ml"
    check_run(settings)
