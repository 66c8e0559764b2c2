"""Which registered models an adapter was made on, and which adapters a model has.

Refs are compared parsed (``evaluation/refs.py``), never as strings cut at a
character: two refs name *the same weights at another revision* when their scheme,
location (Hub repo, local path, bundled name) and GGUF file name are equal and only
the pinned revision differs. The database narrows the candidates by the canonical
prefix ``<ref without revision>@``; each candidate is then parsed and compared, so
a path that itself holds an ``@`` never matches a shorter one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import InstrumentedAttribute, Session

from quorumbench.db.models import Model
from quorumbench.errors import InvalidRefError
from quorumbench.evaluation.refs import ModelRef, parse_ref


@dataclass(frozen=True)
class ModelLink:
    id: int | None
    """None when the ref is not registered here."""
    name: str
    ref: str
    exact: bool = True
    """False for lineage matched by repository at another revision than the one named."""


def unpinned(ref: str) -> ModelRef | None:
    """``ref`` parsed, without its revision; None for a ref that does not parse."""
    try:
        return replace(parse_ref(ref), revision=None)
    except InvalidRefError:
        return None


def revision_url(ref: str, revision: str) -> str | None:
    """A link to the exact revision of a Hub model (or a Hub GGUF file's repo)."""
    if not revision:
        return None
    try:
        parsed = parse_ref(ref)
    except InvalidRefError:
        return None
    if parsed.scheme in ("hf", "gguf") and not parsed.is_local:
        return f"https://huggingface.co/{parsed.location}/tree/{revision}"
    return None


def _other_revisions(
    column: InstrumentedAttribute[str | None], of: ModelRef
) -> ColumnElement[bool]:
    """``column`` holds a ref that may be ``of`` at some revision (checked after)."""
    return column.startswith(of.canonical() + "@", autoescape=True)


def lineage(session: Session, model: Model) -> tuple[ModelLink | None, list[ModelLink]]:
    """An adapter's base model and a model's adapters, registered here.

    By the exact pinned ref first; then, for an adapter made on our conversion of a GGUF
    file (``details["base_gguf_sha256"]``, set at registration), by that file's hash;
    else by the same weights at another revision (an adapter pins its base at the
    revision current when it was registered, which need not be the one registered
    here), the newest registered, marked ``exact=False``.
    """
    return _base(session, model), _adapters(session, model)


def _base(session: Session, model: Model) -> ModelLink | None:
    if not model.base_ref:
        return None
    found = session.scalars(select(Model).where(Model.ref == model.base_ref)).first()
    converted = (model.details or {}).get("base_gguf_sha256")
    if found is None and converted:  # made on our conversion of a registered GGUF
        found = session.scalars(select(Model).where(Model.weights_sha256 == converted)).first()
    exact = found is not None
    base = unpinned(model.base_ref)
    if found is None and base is not None:
        candidates = session.scalars(
            select(Model).where(_other_revisions(Model.ref, base)).order_by(Model.id.desc())
        )
        found = next((m for m in candidates if unpinned(m.ref) == base), None)
    if found is None:
        return ModelLink(None, "", model.base_ref)
    return ModelLink(found.id, found.name, found.ref, exact)


def _adapters(session: Session, model: Model) -> list[ModelLink]:
    own = unpinned(model.ref)
    same = Model.base_ref == model.ref
    if own is not None:
        same |= _other_revisions(Model.base_ref, own)
    gguf = model.weights_sha256 if own is not None and own.scheme in ("gguf", "bundled") else None
    if gguf:
        same |= Model.details["base_gguf_sha256"].as_string() == gguf
    links = []
    for m in session.scalars(select(Model).where(same).order_by(Model.id)):
        exact = m.base_ref == model.ref or (
            gguf is not None and (m.details or {}).get("base_gguf_sha256") == gguf
        )
        if exact or (m.base_ref is not None and unpinned(m.base_ref) == own):
            links.append(ModelLink(m.id, m.name, m.ref, exact))
    return links
