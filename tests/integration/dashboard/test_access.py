"""Read access to the pages and the read API: open, or (READ_ACCESS=token) a signed-in user or an API token;
disabled tokens are refused; probes stay open."""

import json

import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from results.models import ApiToken

from tests.support.dashboard import batch, measurement

pytestmark = [pytest.mark.integration, pytest.mark.django_db]
PAGES = ["/", "/grid/mesh/nightly/?protocol=xrootd-https", "/grid/mesh/nightly/?protocol=rtt", "/pair/a/b/",
         "/compare/mesh/nightly/"]
READS = ["/api/v1/measurements/", "/api/v1/grid/?benchmark=mesh/nightly&protocol=xrootd-https",
         "/api/v1/measurements/?format=csv"]


@pytest.fixture
def seeded(client, write_key):
    body = batch([measurement("a", "b", files=2), measurement("a", "b", protocol="rtt", rtt_ms=3)])
    r = client.post("/api/v1/ingest/", json.dumps(body), content_type="application/json",
                    HTTP_AUTHORIZATION=f"Token {write_key}")
    assert r.status_code == 200


def test_open_mode_serves_everyone(client, seeded):
    for url in PAGES + READS:
        assert client.get(url).status_code == 200, url


@override_settings(READ_ACCESS="token")
def test_token_mode_sends_strangers_to_sign_in(client, seeded):
    for url in PAGES:
        r = client.get(url)
        assert r.status_code == 302 and r["Location"].startswith("/accounts/login/?next="), url
    for url in READS:
        assert client.get(url).status_code == 401, url
    assert client.get("/accounts/login/").status_code == 200
    assert client.get("/healthz").status_code == 200 and client.get("/metrics").status_code == 200


@override_settings(READ_ACCESS="token")
def test_token_mode_signed_in_user_reads_pages_and_api(client, seeded):
    User.objects.create_user("viewer", password="s3cret-pass")
    wrong = client.post("/accounts/login/", {"username": "viewer", "password": "nope"})
    assert wrong.status_code == 200 and b"Wrong user name or password" in wrong.content
    r = client.post("/accounts/login/", {"username": "viewer", "password": "s3cret-pass",
                                          "next": "/grid/mesh/nightly/?protocol=rtt"})
    assert r.status_code == 302 and r["Location"] == "/grid/mesh/nightly/?protocol=rtt"
    for url in PAGES + READS:
        assert client.get(url).status_code == 200, url
    assert b"viewer" in client.get("/").content
    # A session reads; it does not write (ingest wants a write token).
    assert client.post("/api/v1/ingest/", "{}", content_type="application/json").status_code == 403
    assert client.post("/accounts/logout/").status_code == 302
    assert client.get(PAGES[1]).status_code == 302


@override_settings(READ_ACCESS="token")
def test_token_mode_api_token_reads_pages(client, seeded, read_key):
    for url in PAGES + READS:
        assert client.get(url, HTTP_AUTHORIZATION=f"Token {read_key}").status_code == 200, url
    r = client.get(PAGES[1], HTTP_AUTHORIZATION="Token wrong")
    assert r.status_code == 401 and r["WWW-Authenticate"] == "Token"


def test_disabled_token_is_refused(client, seeded, read_key, write_key):
    ApiToken.objects.update(enabled=False)
    body = json.dumps(batch([measurement("a", "b")]))
    r = client.post("/api/v1/ingest/", body, content_type="application/json", HTTP_AUTHORIZATION=f"Token {write_key}")
    assert r.status_code == 401 and "disabled" in r.json()["detail"]
    with override_settings(READ_ACCESS="token"):
        assert client.get(READS[0], HTTP_AUTHORIZATION=f"Token {read_key}").status_code == 401
        assert client.get(PAGES[0], HTTP_AUTHORIZATION=f"Token {read_key}").status_code == 401
    ApiToken.objects.filter(name="operator").update(enabled=True)
    r = client.post("/api/v1/ingest/", body, content_type="application/json", HTTP_AUTHORIZATION=f"Token {write_key}")
    assert r.status_code == 200 and r.json()["created"] == 1
