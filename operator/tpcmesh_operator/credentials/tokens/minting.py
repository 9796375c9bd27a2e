"""The tokens of one HTTP-TPC pull (pure but for the issuer's signature): a read token for the source's data
endpoint and a create token for the destination's, each with the endpoint as audience, minted just before the
transfer and valid for its timeout plus a margin.

Audiences are the agents' own URLs, as the agents' validators expect them (agent config: xrootd_audience,
builtin_audience): XRootD's HTTPS instance at https://<address>:<xrootd-https port>; the built-in data port at
http://<address>:<builtin port> (the chart and the local mode serve it without TLS: its bytes are test data, and
the token, not the channel, authorizes the copy).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from ...run.agents import Agent
from .claims import CREATE_INCOMING, MAX_LIFETIME, READ_SETS, TokenRequest


class Minter(Protocol):
    """What signs or fetches a token: the built-in TokenIssuer, or an ExternalIssuer (a site's own)."""

    issuer: str

    def issue(self, req: TokenRequest) -> str: ...

READ_INCOMING = "storage.read:/incoming"  # a third-party client (gfal2, FTS) stats and checksums the landing
MARGIN = 300  # seconds a token outlives the transfer's timeout: clocks differ, the last file may be slow


def audience(agent: Agent, protocol: str) -> str:
    host = f"[{agent.address}]" if ":" in agent.address else agent.address
    if protocol == "xrootd-https":
        return f"https://{host}:{agent.port('xrootd-https')}"
    if protocol == "builtin":
        return f"http://{host}:{agent.port('builtin')}"
    raise ValueError(f"protocol {protocol!r} takes no bearer tokens (only xrootd-https and builtin)")


def pull_tokens(issuer: Minter, source: Agent, destination: Agent, protocol: str,
                timeout_seconds: int) -> Mapping[str, str]:
    """{"read": token for the source, "create": token for the destination} of one transfer."""
    lifetime = min(timeout_seconds + MARGIN, MAX_LIFETIME)
    return {
        "read": issuer.issue(TokenRequest(f"tpcmesh:{destination.node}", audience(source, protocol), (READ_SETS,),
                                          lifetime)),
        "create": issuer.issue(TokenRequest(f"tpcmesh:{destination.node}", audience(destination, protocol),
                                            (CREATE_INCOMING, READ_INCOMING), lifetime)),
    }
