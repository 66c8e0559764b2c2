"""A small generic registry with lazy targets and entry-point discovery.

Built-ins are listed as ``"module:attribute"`` strings and imported on first use,
so asking for one benchmark never imports the heavy dependencies of another.
Third-party plugins come from an entry-point group, read once per registry; one that
fails to load stays listed with its error instead of disappearing. A name is never
shadowed silently either: an entry point named like a built-in is listed with an
error (the built-in is used), and a name that several plugins register is used by
none of them until one is uninstalled (each is listed with the conflict).
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Generic, TypeVar, cast

from quorumbench.errors import ConfigError

T = TypeVar("T")


@dataclass(frozen=True)
class PluginStatus:
    """One registered name: where it comes from and whether it loads."""

    name: str
    target: str
    origin: str
    error: str | None = None


@dataclass(frozen=True)
class _Entry:
    name: str
    target: str
    origin: str


def _origin(ep: EntryPoint) -> str:
    dist = ep.dist
    return f"entry point {ep.group}" if dist is None else f"plugin {dist.name} {dist.version}"


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
        self._builtins = {
            name: _Entry(name, target, "builtin") for name, target in builtins.items()
        }
        self._entries = list(self._builtins.values())
        self._usable = dict(self._builtins)
        """Each name's entry that lookups use."""
        self._loaded: dict[_Entry, T] = {}
        self._errors: dict[_Entry, str] = {}
        self._conflicts: dict[str, str] = {}
        self._group = entry_point_group
        self._discovered = False
        self._lock = threading.RLock()  # a plugin's import may look another name up
        self._not_found = not_found

    def _discover(self) -> None:
        if self._discovered:
            return
        found: dict[str, list[_Entry]] = {}
        for ep in entry_points(group=self._group):
            entry = _Entry(ep.name, ep.value, _origin(ep))
            self._entries.append(entry)
            found.setdefault(ep.name, []).append(entry)
        for name, entries in found.items():
            if name in self._builtins:
                for entry in entries:
                    self._errors[entry] = (
                        f"{name!r} is the name of a built-in {self._kind}; this entry point "
                        "is not used"
                    )
            elif len(entries) > 1:
                origins = ", ".join(entry.origin for entry in entries)
                conflict = (
                    f"{len(entries)} plugins register the {self._kind} {name!r} ({origins}); "
                    "none of them is used until all but one are uninstalled"
                )
                self._conflicts[name] = conflict
                for entry in entries:
                    self._errors[entry] = conflict
            else:
                self._usable[name] = entries[0]
        self._discovered = True

    def names(self) -> list[str]:
        """The names that can be looked up: built-ins and unambiguous plugins."""
        with self._lock:
            self._discover()
            return sorted(self._usable)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names()

    def is_builtin(self, name: str) -> bool:
        """Whether ``name`` is one of the built-ins this registry was made with."""
        return name in self._builtins

    def get(self, name: str) -> T:
        """The object registered as ``name``, imported on first use."""
        with self._lock:
            self._discover()
            if name in self._conflicts:
                raise ConfigError(self._conflicts[name])
            if name not in self._usable:
                raise self._not_found(name, sorted(self._usable))
            entry = self._usable[name]
            if entry in self._loaded:
                return self._loaded[entry]
            module_name, _, attribute = entry.target.partition(":")
            try:
                obj = getattr(importlib.import_module(module_name), attribute)
            except Exception as exc:
                self._errors[entry] = f"{type(exc).__name__}: {exc}"
                raise
            self._loaded[entry] = cast(T, obj)
            return self._loaded[entry]

    def status(self) -> list[PluginStatus]:
        """Every registered entry with its origin, trying to load each to report errors.

        Sorted by name, a built-in before the entry points that reuse its name.
        """
        with self._lock:
            self._discover()
            entries = sorted(self._entries, key=lambda e: (e.name, e.origin != "builtin"))
        rows = []
        for entry in entries:
            if self._usable.get(entry.name) == entry:
                with contextlib.suppress(Exception):  # recorded in _errors, shown below
                    self.get(entry.name)
            error = self._errors.get(entry)
            rows.append(PluginStatus(entry.name, entry.target, entry.origin, error))
        return rows
