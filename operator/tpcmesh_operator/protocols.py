"""The protocols a TransferBenchmark may ask for, and what the operator needs to know of them.

Generated from manifests/protocols.yaml by `make manifests` (hack/protocols.py): do not edit.
"""

PROTOCOLS = ('builtin', 'xrootd-https', 'xrootd-root', 'gridftp', 'iperf3')
TPC_PROTOCOLS = ('builtin', 'xrootd-https', 'xrootd-root', 'gridftp')
TOKEN_PROTOCOLS = ('builtin', 'xrootd-https')
SCHEME_PROTOCOLS = {'davs': 'xrootd-https', 'https': 'xrootd-https', 'root': 'xrootd-root', 'gsiftp': 'gridftp'}
DEFAULT_PORTS = {'builtin': 9080, 'xrootd-https': 8444, 'xrootd-root': 1094, 'gridftp': 2811, 'iperf3': 5201}
