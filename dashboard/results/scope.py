"""Federation: which cluster's records an API token may write. A write token scoped to a cluster (ApiToken.cluster)
writes that cluster's records only; an unscoped write token (every token from before federation) and a signed-in
user with the model permission write any cluster's, as before. A refusal names the token, its cluster, the record
and the record's cluster: the operator of cluster A sent something of cluster B."""

from __future__ import annotations

from results.models import ApiToken


class OtherCluster(Exception):
    """A cluster-scoped token tried to write a record of another cluster (the API answers 403 with this text)."""


def token_cluster(token: object) -> str | None:
    """The cluster a token is scoped to; None for an unscoped token, a user or no token."""
    if isinstance(token, ApiToken) and token.cluster_id is not None:
        return token.cluster.name
    return None


def check(token: object, cluster: str, record: str) -> None:
    """Raise OtherCluster unless `token` may write `record` (described for the message) of `cluster`."""
    own = token_cluster(token)
    if own is not None and own != cluster:
        assert isinstance(token, ApiToken)
        raise OtherCluster(f"API token {token.name!r} is scoped to cluster {own!r}; {record} belongs to cluster "
                           f"{cluster!r}. Each cluster's operator writes its own records only: use cluster "
                           f"{cluster!r}'s token, or an unscoped admin token.")


def batch_cluster(token: object, asked: str | None, default: str) -> str:
    """The cluster of an ingest batch: the one it names, else the token's, else `default`."""
    cluster = asked or token_cluster(token) or default
    check(token, cluster, f"this batch (cluster {cluster!r})")
    return cluster
