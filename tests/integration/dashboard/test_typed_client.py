"""The README's typed client: generated from the dashboard's OpenAPI schema by openapi-python-client, imported,
and used against the live dashboard for one ingest and one grid read."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.dashboard import batch, measurement

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def tpcmesh_client(live_dashboard, tmp_path_factory):
    """The package `tpcmesh_client`, generated as the README shows, importable for this module."""
    work = tmp_path_factory.mktemp("typed-client")
    schema = work / "schema.yaml"
    schema.write_bytes(httpx.get(f"{live_dashboard.url}/api/schema/", timeout=30).raise_for_status().content)
    generated = subprocess.run(
        [str(BIN / "openapi-python-client"), "generate", "--path", str(schema), "--meta", "none",
         "--output-path", str(work / "tpcmesh_client")], cwd=work, capture_output=True, text=True, timeout=240)
    assert generated.returncode == 0, generated.stdout + generated.stderr
    sys.path.insert(0, str(work))
    try:
        yield importlib.import_module("tpcmesh_client")
    finally:
        sys.path.remove(str(work))
        for name in [m for m in sys.modules if m == "tpcmesh_client" or m.startswith("tpcmesh_client.")]:
            del sys.modules[name]


def test_generated_client_ingests_and_reads_the_grid(tpcmesh_client, live_dashboard):
    ingest = importlib.import_module("tpcmesh_client.api.v1.v1_ingest_create")
    grid = importlib.import_module("tpcmesh_client.api.v1.v1_grid_retrieve")
    models = importlib.import_module("tpcmesh_client.models")
    client = tpcmesh_client.AuthenticatedClient(base_url=live_dashboard.url, token=live_dashboard.token,
                                                prefix="Token")

    body = batch([measurement("node-a", "node-b", protocol="builtin", gbps=42.5)], namespace="typed", name="client")
    stored = ingest.sync(client=client, body=models.V1IngestCreateBody.from_dict(body))
    assert isinstance(stored, models.IngestResultOut), stored
    assert stored.created == 1 and [str(i) for i in stored.ids] == [body["measurements"][0]["id"]]

    answer = grid.sync(client=client, benchmark="typed/client", protocol=models.V1GridRetrieveProtocol.BUILTIN)
    assert isinstance(answer, models.Grid), answer
    cells = [(c.source, c.destination, c.value) for c in answer.cells]
    assert cells == [("node-a", "node-b", 42.5)], cells

    refused = grid.sync(client=client, benchmark="typed/none", protocol=models.V1GridRetrieveProtocol.BUILTIN)
    assert isinstance(refused, models.Error) and "not found" in refused.detail, refused
