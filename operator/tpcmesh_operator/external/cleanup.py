"""When a TransferBenchmark with external source endpoints is deleted: remove what the operator uploaded there
(`<path>/<namespace>.<name>/`), and say so when it cannot (an Event per endpoint, a status condition while it
retries, the log), never silently. main.py registers it for the benchmarks that have such endpoints
(`needs_cleanup`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from ..plan.spec import SpecError, parse_spec
from .access import CredentialSource, ExternalError, access, remove_uploads
from .copies import bench_dir

log = logging.getLogger(__name__)

ATTEMPTS = 3  # then the benchmark goes, and the Event and the log say what is left where


def needs_cleanup(spec: Mapping[str, Any] | None) -> bool:
    """A benchmark whose deletion has something to remove: an external endpoint it may have uploaded to."""
    return any(isinstance(e, Mapping) and e.get("role", "both") in ("source", "both")
               for e in (spec or {}).get("externalEndpoints") or [])


async def clean_up(spec: Mapping[str, Any], namespace: str, name: str, credentials: CredentialSource,
                   event: Callable[[str, str, str], None], ca_file: str | None = None) -> list[str]:
    """Remove the benchmark's directory from each source endpoint; the problems (empty: all removed)."""
    try:
        parsed = parse_spec(spec)
    except SpecError as e:  # an invalid spec never ran, so it uploaded nothing
        log.info("TransferBenchmark %s/%s had an invalid spec (%s): nothing to remove", namespace, name, e)
        return []
    problems: list[str] = []
    for ep in parsed.external_endpoints:
        if not ep.is_source:
            continue
        where = ep.path_of(bench_dir(namespace, name))
        try:
            left = await remove_uploads(await access(ep, credentials), bench_dir(namespace, name), ca_file)
        except ExternalError as e:
            left = [str(e)]
        if left:
            message = (f"Could not remove the test files of TransferBenchmark {namespace}/{name} from {where} on "
                       f"external endpoint {ep.name}: " + "; ".join(left))[:1000]
            log.warning("%s", message)
            event("Warning", "ExternalCleanupFailed", message)
            problems += left
        else:
            log.info("Removed %s from external endpoint %s (TransferBenchmark %s/%s deleted)", where, ep.name,
                     namespace, name)
            event("Normal", "ExternalCleanedUp", f"Removed {where} from external endpoint {ep.name}")
    return problems
