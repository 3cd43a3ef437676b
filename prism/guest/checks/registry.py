"""The checks' registry: @check("name") on a function of an area's
module (prism/guest/checks/<area>.py) registers it under that name, in
the area its module names. The order a boot runs them in is not theirs to
say: prism/guest/checks/__init__.py lists it, suite by suite."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

# A check: fn(ctx) -> dict; some take more, with defaults (the device).
F = TypeVar("F", bound=Callable[..., dict])


@dataclass(frozen=True)
class Check:
    name: str                       # what --only, --skip and results.json call it
    area: str                       # its module: lifecycle, flows, ...
    fn: Callable[[dict], dict]      # fn(ctx) -> {"ok": bool, ...details}

    @property
    def summary(self) -> str:
        """The docstring's first line: what the check protects against."""
        return (self.fn.__doc__ or "").strip().split("\n")[0]


REGISTRY: dict[str, Check] = {}


def check(name: str) -> Callable[[F], F]:
    """Register the decorated function as check @name; the function itself
    is returned unchanged (other checks and helpers may call it)."""
    def register(fn: F) -> F:
        if name in REGISTRY:
            raise ValueError(f"check {name!r} registered twice")
        REGISTRY[name] = Check(name, fn.__module__.rsplit(".", 1)[-1], fn)
        return fn
    return register
