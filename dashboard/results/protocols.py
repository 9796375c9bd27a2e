"""The protocols a measurement may name (the probes too).

Generated from manifests/protocols.yaml by `make manifests` (hack/protocols.py): do not edit.
"""

PROTOCOLS = ['builtin', 'xrootd-https', 'xrootd-root', 'gridftp', 'iperf3', 'rtt']
TPC_PROTOCOLS = ['builtin', 'xrootd-https', 'xrootd-root', 'gridftp']
TOKEN_PROTOCOLS = ['builtin', 'xrootd-https']
