"""attnkit.serve.auth: with --api-key-file, every route but /health needs ``Authorization: Bearer KEY``."""

import pytest

from attnkit.serve.auth import authorized, read_api_keys


def test_keys_are_read_one_per_line(tmp_path):
    path = tmp_path / "keys"
    path.write_text("# the team's keys\n  first-key  \n\nsecond-key\n")
    assert read_api_keys(path) == [b"first-key", b"second-key"]
    path.write_text("# none\n\n")
    with pytest.raises(ValueError, match="holds no key"):
        read_api_keys(path)


def test_only_a_bearer_token_equal_to_a_key_passes():
    keys = [b"k1", b"k2"]
    assert authorized(b"Bearer k2", keys) and authorized(b"bearer k1", keys)
    for header in (None, b"", b"Bearer", b"Bearer k3", b"Basic k1", b"Bearer k1x", b"k1"):
        assert not authorized(header, keys), header


def test_the_server_refuses_requests_without_the_key(classifier_server):
    httpx = pytest.importorskip("httpx")
    from conftest import SERVE_API_KEY

    url, good = classifier_server.url, {"Authorization": f"Bearer {SERVE_API_KEY}"}
    assert httpx.get(f"{url}/health").status_code == 200
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {SERVE_API_KEY}"}):
        for method, path in (("GET", "/v1/models"), ("GET", "/metrics"), ("POST", "/v1/classify")):
            response = httpx.request(method, f"{url}{path}", headers=headers, json={"input": "x"})
            assert response.status_code == 401, (headers, path)
            assert response.headers["www-authenticate"] == "Bearer"
            assert response.json()["error"]["type"] == "authentication_error"
    assert httpx.post(f"{url}/v1/classify", headers=good, json={"input": "x"}).status_code == 200
    assert httpx.get(f"{url}/v1/models", headers=good).status_code == 200
    assert "API key required" in classifier_server.banner
