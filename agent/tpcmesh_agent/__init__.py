"""tpcmesh agent: runs protocol servers and pulls test files from peers as the TPC destination."""

__version__ = "0.1.0"
