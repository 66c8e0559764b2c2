"""Which backend loads a ref: the scheme table, built once from every declaration.

The table is made on the first lookup, from the built-in declarations and every
plugin's (importing each plugin's entry-point module, not its heavy packages), and
then kept. It is the same whichever scheme is asked for first, and nothing in it
shadows anything silently:

* a plugin that fails to import, or whose target is not a valid
  :class:`~quorumbench.backends.BackendPlugin`, is listed with its error;
* a plugin that claims a built-in scheme (``hf``, ``gguf``, ``bundled``, ``openai``,
  ``mock``) is not used at all, and is listed with that error (the built-in keeps it);
* a scheme that two plugins claim is used by neither (nor are their other schemes):
  each is listed with the conflict, and a ref of that scheme fails with it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

from quorumbench.backends._builtins import BUILTINS
from quorumbench.backends._plugin import BackendPlugin
from quorumbench.errors import ConfigError, UnknownBackendError
from quorumbench.evaluation.refs import SCHEME
from quorumbench.evaluation.registry import PluginStatus, Registry

GROUP = "quorumbench.backends"
"""The entry-point group of backend plugins."""


@dataclass(frozen=True)
class BackendStatus(PluginStatus):
    """A backend's row in ``quorumbench plugins list``: its schemes too."""

    schemes: tuple[str, ...] = ()
    remote: bool = False


@dataclass(frozen=True)
class _Table:
    declared: dict[str, BackendPlugin]
    """Backend name → its declaration, for every backend in use."""
    owners: dict[str, str]
    """Scheme → the name of the backend that loads it."""
    refused: dict[str, str]
    """Scheme → why no backend loads it (a conflict, or its plugin is not used)."""
    problems: dict[str, str]
    """Backend name → why it is not used (its declaration, a scheme conflict)."""
    declarations: dict[str, BackendPlugin]
    """Backend name → its declaration, used or not (what the list shows)."""


def _not_found(name: str, known: list[str]) -> Exception:
    return UnknownBackendError(f"unknown backend {name!r}; known: {', '.join(known)}")


def _declaration_problem(target: str, obj: object) -> str | None:
    if not isinstance(obj, BackendPlugin):
        return (
            f"{target} is a {type(obj).__name__}, not a BackendPlugin (declare "
            "BackendPlugin(schemes=(...), load=factory))"
        )
    if not obj.schemes or isinstance(obj.schemes, str):
        return "it declares no schemes (schemes is a tuple of names, e.g. ('vllm',))"
    bad = [s for s in obj.schemes if not isinstance(s, str) or not SCHEME.match(s)]
    if bad:
        return (
            f"invalid scheme {bad[0]!r}: a scheme is at most 32 lowercase letters, digits "
            "and '-', starting with a letter"
        )
    if not callable(obj.load):
        return "its load is not callable"
    return None


class BackendRegistry:
    """Backends by name, and the ref schemes each loads (see the module docstring)."""

    def __init__(self, builtins: dict[str, str] | None = None, group: str = GROUP) -> None:
        self._backends: Registry[object] = Registry(
            "backend", BUILTINS if builtins is None else builtins, group, _not_found
        )
        self._lock = threading.RLock()  # a plugin's import may look a backend up
        self._table: _Table | None = None

    def names(self) -> list[str]:
        return self._backends.names()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __contains__(self, name: object) -> bool:
        return name in self._backends

    def _scheme_table(self) -> _Table:
        with self._lock:
            if self._table is None:
                self._table = self._build()
            return self._table

    def _build(self) -> _Table:
        declarations: dict[str, BackendPlugin] = {}
        problems: dict[str, str] = {}
        for status in self._backends.status():  # imports each declaration once
            if status.error is not None or status.name in declarations:
                continue
            obj = self._backends.get(status.name)
            problem = _declaration_problem(status.target, obj)
            if problem is not None:
                problems[status.name] = problem
            elif isinstance(obj, BackendPlugin):
                declarations[status.name] = obj
        owners: dict[str, str] = {}
        claims: dict[str, list[str]] = {}
        for name, plugin in declarations.items():
            for scheme in dict.fromkeys(plugin.schemes):  # a scheme named twice counts once
                if self._backends.is_builtin(name):
                    owners[scheme] = name
                else:
                    claims.setdefault(scheme, []).append(name)
        refused: dict[str, str] = {}
        for scheme, names in sorted(claims.items()):
            if scheme in owners:
                taken = f"it claims {scheme}:, which the built-in backend {owners[scheme]!r} owns"
                for name in names:
                    problems.setdefault(name, taken)
            elif len(names) > 1:
                conflict = (
                    f"the scheme {scheme}: is claimed by {' and '.join(map(repr, names))}; "
                    "none of them is used until all but one are uninstalled"
                )
                refused[scheme] = conflict
                for name in names:
                    problems.setdefault(name, conflict)
        for scheme, names in claims.items():
            for name in names:
                if name not in problems:
                    owners[scheme] = name
                elif scheme not in owners and scheme not in refused:
                    refused[scheme] = f"the plugin {name!r} is not used: {problems[name]}"
        declared = {n: p for n, p in declarations.items() if n not in problems}
        return _Table(declared, owners, refused, problems, declarations)

    def get(self, name: str) -> BackendPlugin:
        """The backend registered as ``name``; a QuorumError when it cannot be used."""
        table = self._scheme_table()
        if name in table.declared:
            return table.declared[name]
        if name in table.problems:
            raise ConfigError(f"the backend {name!r} is not used: {table.problems[name]}")
        self._backends.get(name)  # raises why it did not load (unknown, import error…)
        raise _not_found(name, self.names())  # not reached: what loads is in the table

    def owner(self, scheme: str) -> tuple[str, BackendPlugin]:
        """The name and declaration of the backend that loads ``scheme:`` refs."""
        table = self._scheme_table()
        if scheme in table.owners:
            name = table.owners[scheme]
            return name, table.declared[name]
        if scheme in table.refused:
            raise ConfigError(f"no backend loads {scheme}: refs: {table.refused[scheme]}")
        message = f"no backend loads {scheme}: refs; known schemes: " + ", ".join(
            f"{s}:" for s in sorted(table.owners)
        )
        unused = [s for s in self._backends.status() if s.error and s.origin != "builtin"]
        if unused:  # one of them may be the plugin meant
            message += "; plugins not in use: " + "; ".join(f"{s.name} ({s.error})" for s in unused)
        raise UnknownBackendError(message)

    def status(self) -> list[BackendStatus]:
        """Every backend with its schemes, origin and error (trying to load each)."""
        table = self._scheme_table()
        rows = []
        for s in self._backends.status():
            plugin = table.declarations.get(s.name) if s.error is None else None
            error = s.error or table.problems.get(s.name)
            schemes = () if plugin is None else plugin.schemes
            remote = plugin is not None and plugin.remote
            rows.append(BackendStatus(s.name, s.target, s.origin, error, schemes, remote))
        return rows
