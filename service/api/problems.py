"""Validation errors in plain words: what was wrong, and what is accepted.

FastAPI reports a body it cannot accept as pydantic's errors, whose locations name internals
(``features.list[any]``: one member of a union) and whose messages speak of validation. Here
each error becomes a sentence that names the field as the client wrote it, says what was wrong
with it, and says what the field takes: the description of the request schema's field
(``service.api.schemas.model_schemas``), so that the documented API and its errors say the same.
A query parameter's error names the parameter, its value as sent, and what it takes (its
description).
"""

from __future__ import annotations

import difflib
import json
import types
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

Error = Mapping[str, Any]
Path = tuple[str | int, ...]
_FIRST = {"extra_forbidden": 0, "missing": 1}  # unknown fields first: they explain the missing
# Where a request's parameters are, as pydantic's locations name them, and in words
_PLACES = {"query": "query parameter", "path": "path parameter", "header": "header"}


def explain(
    errors: Sequence[Error],
    body: type[BaseModel] | None,
    content_type: str,
    parameters: Mapping[str, str] | None = None,
) -> str:
    """One message for all of a request's validation errors: the parameters' first (query
    string, path, headers; ``parameters``: what each query parameter takes), then the body's."""
    asked: dict[tuple[str, str], list[Error]] = {}
    problems: dict[Path, list[Error]] = {}
    parents: dict[Path, type[BaseModel] | None] = {}  # the schema holding each path's last
    for error in sorted(errors, key=lambda e: _FIRST.get(e.get("type", ""), 2)):
        loc = error.get("loc", ())
        if len(loc) > 1 and loc[0] in _PLACES:
            asked.setdefault((str(loc[0]), str(loc[1])), []).append(error)
            continue
        path, parent = _walk(body, loc[1:], error.get("type") == "extra_forbidden")
        problems.setdefault(path, []).append(error)
        parents.setdefault(path, parent)
    takes = parameters or {}
    sentences = [
        _parameter_sentence(place, name, errs[0], takes.get(name, ""))
        for (place, name), errs in asked.items()
    ]
    sentences += [
        _sentence(path, errs, parents[path], body, content_type) for path, errs in problems.items()
    ]
    if len(sentences) == 1:
        return sentences[0]
    return f"{len(sentences)} problems: " + " ".join(sentences)


def parameters(route: Any) -> dict[str, str]:
    """What each query parameter of a route (``request.scope["route"]``) takes: its
    description, as the end of a sentence."""
    dependant = getattr(route, "dependant", None)
    fields = getattr(dependant, "query_params", None) or []
    return {f.alias: _lower(f.field_info.description or "") for f in fields}


def not_json(error: Error, body: type[BaseModel] | None) -> str:
    """The message of a body that is not JSON at all (pydantic's ``json_invalid``)."""
    reason = str(error.get("ctx", {}).get("error", "")).lower()
    at = error.get("loc", ())[-1]
    where = f" ({reason} at character {at})" if reason and isinstance(at, int) else ""
    fields = f"; the fields are {_list(list(body.model_fields))}" if body else ""
    return f"The request body is not valid JSON{where}: send a JSON object{fields}."


def body_schema(route: Any) -> type[BaseModel] | None:
    """The request schema of a route's JSON body (``request.scope["route"]``), if any."""
    field = getattr(route, "body_field", None)
    return _model_in(field.field_info.annotation) if field is not None else None


def _sentence(
    path: Path,
    errors: list[Error],
    parent: type[BaseModel] | None,
    body: type[BaseModel] | None,
    ctype: str,
) -> str:
    first = errors[0]
    kind = first.get("type", "")
    if not path:
        return _body_sentence(first, body, ctype)
    name, field = _name(path), path[-1]
    if kind == "extra_forbidden":
        fields = list(parent.model_fields) if parent else []
        close = difflib.get_close_matches(str(field), fields, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return f"'{name}' is not a field of this request{hint}; the fields are {_list(fields)}."
    takes = _takes(parent, field)
    if kind == "missing":
        problem = "is missing"
    elif all(_wrong_kind(e) for e in errors):
        problem = f"is {_json_kind(first.get('input'))}"
    else:
        problem = _constraint(first)
    if takes:
        return f"'{name}' {problem}: it takes {takes}."
    return f"'{name}' {problem}: {first.get('msg', 'not accepted')}."


def _parameter_sentence(place: str, name: str, error: Error, takes: str) -> str:
    """A parameter's problem (of the query string, the path or a header), its value as sent."""
    if error.get("type") == "missing":
        problem = "is missing"
    else:
        bound = _bound(error)
        problem = f"({name}={str(error.get('input'))[:40]}) is " + (bound or "not accepted")
    end = f": it takes {takes}." if takes else f": {error.get('msg', 'not accepted')}."
    return f"The {_PLACES[place]} '{name}' {problem}{end}"


def _body_sentence(error: Error, body: type[BaseModel] | None, content_type: str) -> str:
    fields = f"; the fields are {_list(list(body.model_fields))}" if body else ""
    kind = error.get("type", "")
    if kind == "missing":
        return (
            "The request has no body: send a JSON object with the header "
            f"'Content-Type: application/json'{fields}."
        )
    if kind == "value_error":  # a check across fields (schemas' model validators)
        reason = str(error.get("ctx", {}).get("error", error.get("msg", "")))
        return reason[:1].upper() + reason[1:].rstrip(".") + "."
    if "json" not in content_type:
        sent = f"as '{content_type}'" if content_type else "with no Content-Type"
        return (
            f"The body was sent {sent}, not as JSON: send a JSON object with the header "
            f"'Content-Type: application/json' (curl: -H 'content-type: application/json')"
            f"{fields}."
        )
    return f"The body is {_json_kind(error.get('input'))}: send a JSON object{fields}."


def _walk(
    model: type[BaseModel] | None, loc: Sequence[Any], keep_last: bool
) -> tuple[Path, type[BaseModel] | None]:
    """The fields and indices of ``loc`` the client wrote (without pydantic's union members),
    and the schema that holds the last of them (``keep_last``: the last is a field it does not
    know, kept as written)."""
    path: list[str | int] = []
    annotation: Any = model
    holder, parent = model, None
    for i, step in enumerate(loc):
        if isinstance(step, int):
            path.append(step)
            annotation, parent = _item(annotation), None
            continue
        holder = _model_in(annotation)
        if holder is not None and step in holder.model_fields:
            path.append(step)
            annotation, parent = holder.model_fields[step].annotation, holder
        elif keep_last and i == len(loc) - 1:
            path.append(step)
            parent = holder
        elif (tagged := _tagged(annotation, step)) is not None:
            annotation = tagged  # (a tagged union's member, named by its tag: not the client's)
        # else: the name of a union's member, e.g. 'list[any]': not the client's
    return tuple(path), parent


def _members(annotation: Any) -> tuple[Any, ...]:
    if get_origin(annotation) is Annotated:
        return _members(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return tuple(m for a in get_args(annotation) for m in _members(a))
    return (annotation,)


def _tagged(annotation: Any, tag: str) -> type[BaseModel] | None:
    """The member of a tagged union whose tag is ``tag`` (a field of its that is that literal)."""
    for member in _members(annotation):
        if isinstance(member, type) and issubclass(member, BaseModel):
            fields = member.model_fields.values()
            if any(
                get_origin(f.annotation) is Literal and get_args(f.annotation) == (tag,)
                for f in fields
            ):
                return member
    return None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    for member in _members(annotation):
        if isinstance(member, type) and issubclass(member, BaseModel):
            return member
    return None


def _item(annotation: Any) -> Any:
    for member in _members(annotation):
        if get_origin(member) is list and get_args(member):
            return get_args(member)[0]
    return None


def _takes(model: type[BaseModel] | None, field: str | int) -> str:
    """What a field takes: its description, as the end of a sentence."""
    if model is None or not isinstance(field, str) or field not in model.model_fields:
        return ""
    return _lower(model.model_fields[field].description or "")


def _lower(text: str) -> str:
    """A description (a sentence) as the end of another."""
    text = text.rstrip(".")
    return text[:1].lower() + text[1:]


def _wrong_kind(error: Error) -> bool:
    """Whether the value is of another kind than the field takes (not just out of range)."""
    kind = str(error.get("type", ""))
    return kind.endswith("_type") or kind in ("literal_error", "model_attributes_type")


def _constraint(error: Error) -> str:
    ctx = error.get("ctx", {})
    kind = error.get("type", "")
    value = error.get("input")
    if kind == "too_short":
        return f"has {_items(ctx.get('actual_length'))}, fewer than {ctx.get('min_length')}"
    if kind == "too_long":
        return f"has {_items(ctx.get('actual_length'))}, more than {ctx.get('max_length')}"
    if kind in ("string_too_short", "string_too_long", "string_pattern_mismatch"):
        return f"is {_json_kind(value)}, not accepted"
    if kind == "finite_number":
        return "is not a finite number"
    bound = _bound(error)
    if bound:
        return f"is {_json_kind(value)}, {bound}"
    return f"is {_json_kind(value)}, not accepted ({error.get('msg', '')})"


# pydantic's error types of a number's bounds: the bound's name, and how a value past it is
_BOUNDS = {
    "greater_than_equal": ("ge", "less than"),
    "greater_than": ("gt", "at most"),
    "less_than_equal": ("le", "more than"),
    "less_than": ("lt", "at least"),
}


def _bound(error: Error) -> str:
    """How a number is past its bound (``less than 1``), or "" for another error."""
    kind = _BOUNDS.get(str(error.get("type", "")))
    if kind is None:
        return ""
    key, words = kind
    return f"{words} {error.get('ctx', {}).get(key)}"


def _json_kind(value: Any) -> str:
    """How a JSON value reads in a sentence: its kind, and short values themselves."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({json.dumps(value)})"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        shown = json.dumps(value if len(value) <= 40 else value[:40] + "...")
        return f"a string ({shown})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "not JSON"


def _items(n: Any) -> str:
    return f"{n} item" if n == 1 else f"{n} items"


def _name(path: Path) -> str:
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else step)
    return out


def _list(names: list[str]) -> str:
    return ", ".join(names) if names else "none"
