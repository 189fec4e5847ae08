"""Which fields a vector-store filter names, whatever its form: the sealed stores refuse filters on sealed fields.

:func:`filter_field_names` reads the field names of a store filter (dicts, Qdrant ``models.Filter``,
LlamaIndex ``MetadataFilters``, Weaviate-style ``target`` objects, string expressions such as Milvus'
``metadata["author"] == "Jane"``) without importing any store package; :func:`is_filter_kwarg` tells
which store keywords carry a filter (``filter=``, ``expr=``, ``where=``, ``qdrant_filters=``...). The
rule that uses them is :meth:`textcrafter_rag.sealed.records.RecordSealer.check_store_kwargs`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["TEXT_SEARCH_KWARGS", "filter_field_names", "is_filter_kwarg", "names_field"]

#: How stores address metadata fields by path (``langchain_qdrant``: ``metadata.author``).
METADATA_PREFIX = "metadata."
#: Attributes of typed filter objects holding a field name (Qdrant ``FieldCondition.key``,
#: LlamaIndex ``MetadataFilter.key``, Weaviate ``target``, Weaviate v3 ``path``: a name or a list of names) ...
_FILTER_NAME_ATTRS = ("key", "target", "path")
#: ... and those holding sub-filters (Qdrant ``must``/``should``/``must_not``/``min_should``
#: and ``MinShould.conditions``, nested and is-empty/is-null conditions; LlamaIndex ``filters``).
_FILTER_CHILD_ATTRS = ("must", "should", "must_not", "min_should", "conditions", "filter", "filters", "nested")
_FILTER_CHILD_ATTRS += ("is_empty", "is_null")
_MAX_FILTER_DEPTH = 64
_QUOTED_RE = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""
_QUOTED = re.compile(_QUOTED_RE)
#: A quoted key in a string expression: a subscript right after a name (``metadata["author"]``,
#: ``$meta['author']``) or a JSON-style key (``"author": ...``); a quoted value (``== "author"``) is not one.
_QUOTED_KEY = re.compile(rf"(?<=[\w\])])\[\s*({_QUOTED_RE})\s*\]|({_QUOTED_RE})\s*:")
_IDENTIFIER = re.compile(r"[^\W\d][\w.\[\]]*")
_PATH_SEPARATORS = re.compile(r"[.\[\]]+")
#: Store keyword arguments that carry a filter although "filter" is not in their name (Milvus ``expr``,
#: Chroma ``where``, Weaviate ``where_filter``...): a keyword whose lower-cased name contains one of these.
_FILTER_KWARG_PARTS = ("filter", "expr", "where")
#: Keyword arguments searching the documents' content (Chroma ``where_document``, Cassandra ``body_search``):
#: the texts are always sealed, so they never match and would send their terms to the store in clear.
TEXT_SEARCH_KWARGS = frozenset({"where_document", "body_search"})


def filter_field_names(flt: Any) -> set[str]:
    """Every name a store filter may refer to a field by, whatever its form; imports no store package.

    Dicts (``{"author": ...}``, ``{"$and": [...]}``, Elasticsearch-style nesting, a dict-shaped Qdrant
    filter's ``"key"``): every key and every ``key``/``target``/``path`` value, recursively. Typed
    filters (Qdrant ``models.Filter``, LlamaIndex ``MetadataFilters``, ...): their ``key``/``target``/
    ``path`` attributes, recursively through the sub-filter attributes. A string filter (a Milvus-style
    expression): every identifier outside quotes, and every quoted key (``metadata["author"]``,
    ``$meta['author']``, ``"author": ...``); a quoted value is not read. Every name also counts by
    each part of its path (``doc.author``, ``metadata["author"]`` name ``author``). Over-reading
    names operators, and at worst refuses a plain nested field sharing a sealed field's name;
    under-reading would let a filter send a sealed field's value to the store and match nothing.
    """
    names: set[str] = set()
    if isinstance(flt, str):
        return _expression_names(flt)
    seen: set[int] = set()

    def walk(node: Any, depth: int) -> None:
        if node is None or isinstance(node, (str, bytes, int, float)) or depth > _MAX_FILTER_DEPTH:
            return
        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, Mapping):
            for name, value in node.items():
                if isinstance(name, str):
                    names.update(_path_names(name))
                    if name in _FILTER_NAME_ATTRS:
                        names.update(_name_values(value))
                walk(value, depth + 1)
            return
        if isinstance(node, (list, tuple, set, frozenset)):
            for item in node:
                walk(item, depth + 1)
            return
        for attr in _FILTER_NAME_ATTRS:
            names.update(_name_values(getattr(node, attr, None)))
        for attr in _FILTER_CHILD_ATTRS:
            walk(getattr(node, attr, None), depth + 1)

    walk(flt, 0)
    return names


def _name_values(value: Any) -> list[str]:
    """The field names a ``key``/``target``/``path`` value holds: a name, or a list of names (a path)."""
    if isinstance(value, str):
        return sorted(_path_names(value))
    if isinstance(value, (list, tuple)):
        return [name for v in value if isinstance(v, str) for name in _path_names(v)]
    return []


def _path_names(name: str) -> set[str]:
    """A field name as given, and the parts of it read as a path (``metadata["author"]``, ``doc.author``)."""
    return {name} | _expression_names(name)


def _expression_names(expr: str) -> set[str]:
    """The names a string filter expression may refer to fields by (see :func:`filter_field_names`)."""
    names = {_unquote(quoted) for pair in _QUOTED_KEY.findall(expr) for quoted in pair if quoted}
    for identifier in _IDENTIFIER.findall(_QUOTED.sub(" ", expr)):
        names.add(identifier)
        names.update(part for part in _PATH_SEPARATORS.split(identifier) if part)
    return names


def _unquote(quoted: str) -> str:
    quote = quoted[0]
    return quoted[1:-1].replace("\\" + quote, quote)


def is_filter_kwarg(name: Any) -> bool:
    return isinstance(name, str) and any(part in name.lower() for part in _FILTER_KWARG_PARTS)


def names_field(name: str, field: str) -> bool:
    """Whether a filter's field name refers to ``field``: itself, a sub-path, or under ``metadata.``.

    Stores address metadata by path: ``langchain_qdrant`` filters ``metadata.author``, nested
    values are ``author.city`` or ``author[].city``.
    """
    for candidate in (name, name[len(METADATA_PREFIX) :] if name.startswith(METADATA_PREFIX) else None):
        if candidate is not None and (candidate == field or candidate.startswith((field + ".", field + "["))):
            return True
    return False
