"""Registry: protocol name -> Mover class (constructed as ``MoverClass(settings)``).

Each protocol's module is imported lazily; the class is the module's Mover subclass whose ``protocol`` attribute
equals the protocol name. A module that is missing or fails to import makes its protocol unavailable, with the
reason, and leaves the others working.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from typing import Any

from .base import Mover

log = logging.getLogger(__name__)

MODULES: dict[str, str] = {
    "builtin": "tpcmesh_agent.movers.builtin",
    "xrootd-https": "tpcmesh_agent.movers.xrootd_https",
    "xrootd-root": "tpcmesh_agent.movers.xrootd_root",
    "gridftp": "tpcmesh_agent.movers.gridftp",
    "iperf3": "tpcmesh_agent.movers.iperf3",
}


class UnknownProtocol(KeyError):
    pass


def mover_class(protocol: str) -> type[Mover]:
    """The Mover class of ``protocol``; UnknownProtocol if not a protocol, ImportError/LookupError if not there."""
    if protocol not in MODULES:
        raise UnknownProtocol(protocol)
    module = importlib.import_module(MODULES[protocol])
    for _, obj in inspect.getmembers(module, inspect.isclass):
        if issubclass(obj, Mover) and not inspect.isabstract(obj) and getattr(obj, "protocol", None) == protocol:
            return obj
    raise LookupError(f"{MODULES[protocol]} defines no Mover with protocol = {protocol!r}")


def load_movers(settings: Any) -> tuple[dict[str, Mover], dict[str, str]]:
    """Instantiate the enabled protocols' movers: ({protocol: mover}, {protocol: why unavailable})."""
    movers: dict[str, Mover] = {}
    problems: dict[str, str] = {}
    for protocol in MODULES:
        if protocol not in settings.protocols:
            problems[protocol] = "disabled by the protocols setting"
            continue
        try:
            cls: Any = mover_class(protocol)  # movers take the settings object
            movers[protocol] = cls(settings)
        except ModuleNotFoundError as e:
            problems[protocol] = f"mover module {MODULES[protocol]} is not installed ({e.name})"
        except Exception as e:  # a broken mover must not take the agent down
            log.exception("Mover %s failed to load", protocol)
            problems[protocol] = f"mover failed to load: {e}"
    return movers, problems
