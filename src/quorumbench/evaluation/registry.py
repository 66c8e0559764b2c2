"""A small generic registry with lazy targets and entry-point discovery.

Built-ins are listed as ``"module:attribute"`` strings and imported on first use,
so asking for one benchmark never imports the heavy dependencies of another.
Third-party plugins come from an entry-point group; one that fails to load stays
listed with its error instead of disappearing.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Generic, TypeVar, cast

T = TypeVar("T")


@dataclass(frozen=True)
class PluginStatus:
    """One registered name: where it comes from and whether it loads."""

    name: str
    target: str
    origin: str
    error: str | None = None


class Registry(Generic[T]):
    """Names to lazily imported objects of type ``T``."""

    def __init__(
        self,
        kind: str,
        builtins: dict[str, str],
        entry_point_group: str,
        not_found: Callable[[str, list[str]], Exception],
    ) -> None:
        self._kind = kind
        self._targets: dict[str, tuple[str, str]] = {k: (v, "builtin") for k, v in builtins.items()}
        self._loaded: dict[str, T] = {}
        self._errors: dict[str, str] = {}
        self._group = entry_point_group
        self._discovered = False
        self._lock = threading.Lock()
        self._not_found = not_found

    def _discover(self) -> None:
        if self._discovered:
            return
        for ep in entry_points(group=self._group):
            if ep.name not in self._targets:
                self._targets[ep.name] = (ep.value, f"entry point {ep.group}")
        self._discovered = True

    def names(self) -> list[str]:
        with self._lock:
            self._discover()
            return sorted(self._targets)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names()

    def get(self, name: str) -> T:
        """The object registered as ``name``, imported on first use."""
        with self._lock:
            self._discover()
            if name in self._loaded:
                return self._loaded[name]
            if name not in self._targets:
                raise self._not_found(name, sorted(self._targets))
            target, _ = self._targets[name]
            module_name, _, attribute = target.partition(":")
            try:
                obj = getattr(importlib.import_module(module_name), attribute)
            except Exception as exc:
                self._errors[name] = f"{type(exc).__name__}: {exc}"
                raise
            self._loaded[name] = cast(T, obj)
            return self._loaded[name]

    def status(self) -> list[PluginStatus]:
        """Every name with its origin, trying to load each to report errors."""
        rows = []
        for name in self.names():
            with contextlib.suppress(Exception):  # recorded in _errors, shown below
                self.get(name)
            target, origin = self._targets[name]
            rows.append(PluginStatus(name, target, origin, self._errors.get(name)))
        return rows
