"""The problems page in headless Debian chromium: a user signs in, acknowledges a problem with a note, puts the
node in maintenance (the problem goes, the grid draws the node's cells in the maintenance colour), ends it (the
problem is back). Screenshots go to the artifacts dir."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Permission, User

from tests.browser.test_grid import MAINTENANCE, browser, ingest, page  # noqa: F401 - the fixtures
from tests.support.dashboard import batch, measurement
from tests.support.paths import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.integration]

NODES = ["a1", "a2", "b1", "b2"]


@pytest.fixture
def alice(transactional_db):
    user = User.objects.create_user("alice", password="pw-alice")
    user.user_permissions.add(*Permission.objects.filter(
        codename__in=["change_problem", "add_maintenance", "delete_maintenance"]))
    return user


def colour(pg, row: str, col: str) -> str:
    return pg.eval_on_selector(
        f'#grid tr:has(th.rh[data-n="{row}"]) td:nth-child({NODES.index(col) + 2})',
        "td => getComputedStyle(td).getPropertyValue('--a').trim()")


def test_acknowledge_and_maintenance_from_the_page(page, live_server, alice):  # noqa: F811
    now = datetime.now(UTC) - timedelta(minutes=10)
    ingest(batch([measurement(s, d, protocol="builtin", streams=8, finished=now, gbps=0.3 if s == "b1" else 20.0)
                  for s in NODES for d in NODES if s != d], nodes=[{"name": n, "site": n[0]} for n in NODES]))
    url = f"{live_server.url}/problems/mesh/nightly/"

    page.goto(url)
    assert "Sign in" in page.inner_text("main, body")
    assert page.locator("#problems tr[data-key='node:b1']").count() == 1
    assert page.locator("form.ack").count() == 0  # nobody signed in: nothing to click

    page.goto(f"{live_server.url}/accounts/login/?next=/problems/mesh/nightly/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "pw-alice")
    page.click("form button, form input[type=submit]")
    page.wait_for_url(url)
    row = page.locator("#problems tr[data-key='node:b1']")
    assert "every test from b1" in row.inner_text()
    row.locator("input[name=note]").fill("ticket NET-42, Bob is on it")
    row.locator("button").click()
    page.wait_for_load_state()
    row = page.locator("#problems tr[data-key='node:b1']")
    assert "acked" in (row.get_attribute("class") or "")
    assert "by alice" in row.inner_text() and "NET-42" in row.inner_text()
    page.screenshot(path=str(ARTIFACTS / "problems-acknowledged.png"), full_page=True)

    page.select_option("#maintain select[name=node]", "b1")
    page.fill("#maintain input[name=reason]", "NIC swap")
    page.click("#maintain button")
    page.wait_for_load_state()
    assert "No open problem." in page.inner_text("body")
    assert "NIC swap" in page.inner_text("#maintenance")
    page.goto(f"{live_server.url}/grid/mesh/nightly/?protocol=builtin")
    assert colour(page, "b1", "a1") == MAINTENANCE and colour(page, "a1", "b1") == MAINTENANCE
    assert colour(page, "a1", "a2") != MAINTENANCE
    assert "maintenance" in page.inner_text("#legend")
    page.screenshot(path=str(ARTIFACTS / "grid-maintenance.png"), full_page=True)

    page.goto(url)
    page.click("#maintenance button")
    page.wait_for_load_state()
    row = page.locator("#problems tr[data-key='node:b1']")
    assert row.count() == 1 and "acked" not in (row.get_attribute("class") or "")  # a new sighting


def test_a_user_without_the_permission_gets_no_forms(page, live_server, transactional_db):  # noqa: F811
    User.objects.create_user("bob", password="pw-bob")
    ingest(batch([measurement("a1", "a2", protocol="builtin", streams=8, gbps=20.0)]))
    page.goto(f"{live_server.url}/accounts/login/?next=/problems/mesh/nightly/")
    page.fill("input[name=username]", "bob")
    page.fill("input[name=password]", "pw-bob")
    page.click("form button, form input[type=submit]")
    page.wait_for_url(f"{live_server.url}/problems/mesh/nightly/")
    assert page.locator("#maintain").count() == 0 and "Sign in" not in page.inner_text("body")
