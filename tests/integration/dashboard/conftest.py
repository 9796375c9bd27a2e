import pytest
from rest_framework.test import APIClient
from results import services


@pytest.fixture
def write_key(db):
    return services.create_api_token("operator", write=True)[1]


@pytest.fixture
def read_key(db):
    return services.create_api_token("reader", write=False)[1]


@pytest.fixture
def client():
    return APIClient()
