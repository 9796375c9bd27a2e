"""The real cluster lives as long as this package's tests: its network namespaces must be gone before other
packages' WAN-lab tests count theirs."""

from tests.support.realcluster import real_cluster  # noqa: F401 - the fixture, package-scoped here
