import pytest
from rest_framework.test import APIClient
from results import services

from tests.support.live_dashboard import running


@pytest.fixture
def write_key(db):
    return services.create_api_token("operator", write=True)[1]


@pytest.fixture
def read_key(db):
    return services.create_api_token("reader", write=False)[1]


@pytest.fixture
def client():
    return APIClient()


@pytest.fixture(scope="module")
def live_dashboard(postgres_server, tmp_path_factory):
    """The real dashboard (gunicorn, PostgreSQL) for a module's HTTP clients; `.token` can ingest."""
    with running(postgres_server, tmp_path_factory.mktemp("live")) as dashboard:
        yield dashboard
