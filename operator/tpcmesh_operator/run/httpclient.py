"""What the operator's HTTP clients (the agents', the dashboard's) share: each owns one httpx.AsyncClient, closed
with ``aclose()`` or at the end of ``async with``."""

from __future__ import annotations

from typing import Self

import httpx


class OwnsHttpClient:
    _client: httpx.AsyncClient

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()
