"""The command's own flag for the setting an error's hint names.

The engine's errors name a setting (:class:`~quorumbench.errors.Hint`), never a flag:
the runner calls the engine too. Here a command adds its flag for that setting, found
in the command's own signature, so the flag shown is one the command has:
``… has no Hub source; give a datasets directory that holds a local copy
(--datasets-dir or QB_DATASETS_DIR)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, get_type_hints

from typer.models import OptionInfo

from quorumbench.errors import QuorumError

ALSO = {"datasets_dir": "QB_DATASETS_DIR"}
"""Settings every command with the flag also reads from an environment variable."""


def option_flag(func: Callable[..., Any], name: str) -> str | None:
    """The long flag of ``func``'s option parameter ``name``; None without one."""
    try:
        hints = get_type_hints(func, include_extras=True)
    except (NameError, TypeError):  # an annotation that does not resolve here
        return None
    for info in getattr(hints.get(name), "__metadata__", ()):
        if not isinstance(info, OptionInfo):
            continue
        # In Annotated[..., typer.Option("--flag")], the first name sits in ``default``.
        first = [info.default] if isinstance(info.default, str) else []
        for declared in (*first, *(info.param_decls or ())):
            flag = declared.split("/")[0].strip()
            if flag.startswith("--"):
                return flag
        return "--" + name.replace("_", "-")
    return None


def error_message(exc: QuorumError, func: Callable[..., Any]) -> str:
    """``exc``'s message, with ``func``'s flag for the setting its hint names."""
    if exc.hint is None:
        return exc.message
    flag = option_flag(func, exc.hint.setting)
    if flag is None:
        return exc.message
    also = ALSO.get(exc.hint.setting)
    return f"{exc.message} ({flag} or {also})" if also else f"{exc.message} ({flag})"
