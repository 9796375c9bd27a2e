"""The protocols an agent can run, and their default ports.

Generated from manifests/protocols.yaml by `make manifests` (hack/protocols.py): do not edit.
"""

PROTOCOLS = ('builtin', 'xrootd-https', 'xrootd-root', 'gridftp', 'iperf3')
DEFAULT_PORTS = {'builtin': 9080, 'xrootd-https': 8444, 'xrootd-root': 1094, 'gridftp': 2811, 'iperf3': 5201}
