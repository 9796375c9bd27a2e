"""The real cluster, and the chart installed on it, live as long as this package's tests: the cluster's network
namespaces must be gone before other packages' WAN-lab tests count theirs."""

from tests.support.realcluster import real_cluster  # noqa: F401 - the fixture, package-scoped here
from tests.support.realrelease import database, disks, installed  # noqa: F401 - the chart on it, package-scoped


def pytest_collection_finish(session):
    """The upgrade test's earlier release: its images start building now if the test is selected."""
    if any(item.path.name == "test_real_cluster_upgrade.py" for item in session.items):
        from tests.cluster.test_real_cluster_upgrade import OLD
        from tests.support import oldrelease

        oldrelease.start_building(OLD)
