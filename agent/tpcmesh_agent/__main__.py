"""`tpcmesh-agent`: start the agent (see --help; every flag is also TPCMESH_AGENT_<NAME>)."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence

from .config import SettingsError, load_settings


def main(argv: Sequence[str] | None = None) -> int:
    try:
        settings = load_settings(argv)
    except SettingsError as e:
        print(f"tpcmesh-agent: invalid setting: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from .controlapi import serve

    try:
        asyncio.run(serve(settings))
    except OSError as e:
        logging.getLogger("tpcmesh_agent").error("Agent failed to start: %s", e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
