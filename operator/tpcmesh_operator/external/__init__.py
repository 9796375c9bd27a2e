"""External endpoints (spec.externalEndpoints): storage outside the mesh, reached by URL with its site's credentials.

- ``endpoints``: parsing and validating them (pure);
- ``copies``: the tests against them in a run, what the agents are asked to do;
- ``access``: the operator's own I/O with them per protocol (HTTPS, xrdfs, gfal2 through ``gfal_ops``, run by
  Debian's python3), staging the file set, size and checksum checks;
- ``cleanup``: removing what a deleted benchmark put there.
"""
