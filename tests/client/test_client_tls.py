"""When the SDK skips loading the CA bundle: only for a plain-http server reached without a
proxy, whatever the spelling of the proxy variables (httpx finds them in any case)."""

from __future__ import annotations

import pytest

from trainyard.client_http import needs_tls as _needs_tls


@pytest.fixture
def no_proxies(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    import os

    for name in [n for n in os.environ if n.lower().endswith("_proxy")]:
        monkeypatch.delenv(name)
    return monkeypatch


def test_plain_http_without_a_proxy_needs_no_tls_and_https_always_does(no_proxies: pytest.MonkeyPatch) -> None:
    assert not _needs_tls("http://127.0.0.1:8000")
    assert _needs_tls("https://yard.example.org") and _needs_tls("HTTPS://yard.example.org")


@pytest.mark.parametrize("name", ["HTTP_PROXY", "http_proxy", "Http_Proxy", "ALL_PROXY", "all_proxy"])
def test_a_proxy_for_plain_http_in_any_spelling_keeps_verification(no_proxies: pytest.MonkeyPatch, name: str) -> None:
    no_proxies.setenv(name, "https://proxy.example.org:3128")
    assert _needs_tls("http://127.0.0.1:8000")
