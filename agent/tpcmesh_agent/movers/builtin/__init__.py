"""The built-in reference mover: a zero-copy HTTP data server plus a pull-mode HTTP-TPC client.

Server (the builtin port, plain HTTP by default, TLS optional):
- ``GET|HEAD /files/<set>/<file>`` (and ``/files/incoming/<file>``, with the agent's bearer token): standard
  HTTP/1.1, ``Range: bytes=a-b`` gives 206, body sent with ``os.sendfile`` (plain TCP) so Python never touches the
  bytes. A connection idle for ``idle_timeout`` seconds is closed.
- ``COPY /files/incoming/<name>`` with ``Source: <http(s) url>``, ``X-Number-Of-Streams``, ``Credential: none`` and
  the agent's bearer token: the WLCG HTTP-TPC pull. Answers ``202`` with a ``text/perf-marker-stream`` body of
  ``Perf Marker`` ... ``End`` blocks every ``marker_interval`` seconds and a final ``success: Created`` or
  ``failure: <reason>`` line.
- ``DELETE /files/incoming/<name>`` (token) removes a pulled file.
- ``Want-Digest: adler32`` is answered (``Digest: adler32=<hex>``, RFC 3230) for the sets (their manifests) and for
  received files (recorded once when the COPY landed them, landed.py).
- Token mode (settings.xrootd_token_issuer): GET/HEAD of a set's file needs a bearer token granting read on
  ``/sets/<set>/<file>``, a COPY one granting create on ``/incoming/<name>`` (instead of the agent's API token);
  ``TransferHeaderAuthorization`` goes to the source as ``Authorization`` (token_check.py validates).

Client (``BuiltinMover.run`` and the COPY handler): raw sockets; socket -> pipe -> file with ``os.splice`` (store)
or socket -> pipe -> /dev/null (sink); over TLS, ``recv_into`` a reused buffer. ``streams`` > 1 means that many
parallel Range requests per file. Blocking data paths run in threads; cancellation shuts the sockets down.

Modules: client.py (pull), mover.py (BuiltinMover), handler.py (GET/HEAD/DELETE), copy.py (COPY), server.py
(DataServer), landed.py (received files' checksums).
"""

from .client import PullError, digest_checksum, pull, split_ranges
from .dataserver import DataServer
from .mover import BuiltinMover

__all__ = ["BuiltinMover", "DataServer", "PullError", "digest_checksum", "pull", "split_ranges"]
