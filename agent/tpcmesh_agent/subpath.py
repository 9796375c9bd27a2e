"""A derived path attribute: ``log = Subpath("runtime_dir", "xrootd.log")`` on a class reads as
``self.runtime_dir / "xrootd.log"`` (the settings' directories and a server's files, one line each)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, overload


class Subpath:
    def __init__(self, base: str, name: str) -> None:
        self.base = base  # the attribute holding the directory
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> Subpath: ...

    @overload
    def __get__(self, obj: object, owner: type) -> Path: ...

    def __get__(self, obj: object | None, owner: type) -> Path | Subpath:
        if obj is None:
            return self
        return Path(getattr(obj, self.base)) / self.name

    def __set__(self, obj: Any, value: Any) -> None:
        # read-only like the properties it stands for: it follows its base, which is what one changes
        raise AttributeError(f"{self.name} follows {self.base}: set {self.base} instead")
