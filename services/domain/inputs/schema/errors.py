"""The error lines of input files: `InputError`, key paths, `did you mean` suggestions, and
`collect`, which gathers every problem of a document instead of stopping at the first."""

import difflib
import functools
import re
import typing
from collections.abc import Callable, Iterable
from types import UnionType
from typing import Annotated, Any

import msgspec

from gpuledger.events import InvalidId
from gpuledger.services.domain.inputs.schema.units import _HINTS

# ------------------------------------------------------------------ errors


class InputError(ValueError):
    """Problems in a user's document, one line each (`key.path: what is wrong`).

    `str()` joins them with newlines; `lines(file)` gives the `error: FILE: ...` lines."""

    def __init__(self, problems: list[str] | str, file: str | None = None) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.file = file
        super().__init__("\n".join(self.problems))

    def lines(self, file: str | None = None) -> list[str]:
        where = file or self.file
        return [f"error: {where}: {p}" if where else f"error: {p}" for p in self.problems]


_AT = re.compile(r"^(?P<msg>.*) - at `\$(?P<path>[^`]*)`$", re.S)
_TOKEN = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def _suggest(word: str, known: Iterable[object]) -> str:
    close = difflib.get_close_matches(str(word), [str(k) for k in known], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _tokens(path: str) -> list[str | int]:
    return [
        m.group(1) if m.group(1) is not None else int(m.group(2)) for m in _TOKEN.finditer(path)
    ]


def _join(base: str, tokens: list[str | int]) -> str:
    out = base
    for t in tokens:
        out += f"[{t}]" if isinstance(t, int) else (f".{t}" if out else str(t))
    return out


def _flat(t: Any) -> list[Any]:
    """A msgspec.inspect type with Metadata and unions opened up, as a list."""
    mi = msgspec.inspect
    if isinstance(t, mi.Metadata):
        return _flat(t.type)
    if isinstance(t, mi.UnionType):
        return [x for u in t.types for x in _flat(u)]
    return [t]


def _type_at(typ: Any, tokens: list[str | int]) -> list[Any]:
    mi = msgspec.inspect
    cur = [mi.type_info(typ)]
    for tok in tokens:
        nxt: list[Any] = []
        for t in (x for c in cur for x in _flat(c)):
            if isinstance(tok, int) and isinstance(t, (mi.ListType, mi.VarTupleType)):
                nxt.append(t.item_type)
            elif isinstance(tok, str) and isinstance(t, mi.StructType):
                nxt += [f.type for f in t.fields if f.encode_name == tok]
            elif isinstance(tok, str) and isinstance(t, mi.DictType):
                nxt.append(t.value_type)
        cur = nxt
    return [x for c in cur for x in _flat(c)]


def _value_at(raw: Any, tokens: list[str | int]) -> Any:
    for tok in tokens:
        try:
            raw = raw[tok]
        except (KeyError, IndexError, TypeError):
            return None
    return raw


def _problem(exc: msgspec.ValidationError, raw: Any, typ: Any, base: str) -> str:
    """One error line (without the file) for a msgspec validation error."""
    m = _AT.match(str(exc))
    msg, tokens = (m.group("msg"), _tokens(m.group("path"))) if m else (str(exc), [])
    here = _type_at(typ, tokens)
    found = _key_problem(msg, here, base, tokens)
    if found is not None:
        return found
    where = _join(base, tokens) or "(top level)"
    value = _value_at(raw, tokens)
    found = _value_problem(msg, here, value)
    if found is not None:
        return f"{where}: {found}"
    return f"{where}: {msg[0].lower() + msg[1:]}" + (
        f" (got {value!r})" if value is not None else ""
    )


def _key_problem(msg: str, here: list[Any], base: str, tokens: list[str | int]) -> str | None:
    """The line for an unknown key (with the nearest known one, or all of them) or a
    missing required key; None for another error."""
    unknown = re.match(r"Object contains unknown field `(.*)`", msg)
    if unknown:
        key = unknown.group(1)
        known = [
            f.encode_name
            for t in here
            if isinstance(t, msgspec.inspect.StructType)
            for f in t.fields
        ]
        hint = _suggest(key, known) or (f" (known keys: {', '.join(known)})" if known else "")
        return f"{_join(base, tokens + [key])}: unknown key{hint}"
    missing = re.match(r"Object missing required field `(.*)`", msg)
    if missing:
        return f"{_join(base, tokens) or '(top level)'}: missing required key {missing.group(1)!r}"
    return None


def _value_problem(msg: str, here: list[Any], value: Any) -> str | None:
    """What is wrong with `value` when it is not one of the allowed values, out of bounds,
    or not of a known form; None for another error."""
    mi = msgspec.inspect
    if msg.startswith("Invalid enum value"):
        allowed = [v for t in here if isinstance(t, mi.LiteralType) for v in t.values]
        return f"{value!r} is not one of {', '.join(map(str, allowed))}{_suggest(value, allowed)}"
    bound = re.match(r"Expected `(int|float)` (>=|<=) (\S+)", msg)
    if bound:
        return f"must be {bound.group(2)} {bound.group(3)} (got {value!r})"
    if "matching regex" in msg:
        patterns = [t.pattern for t in here if isinstance(t, mi.StrType) and t.pattern]
        hint = next((_HINTS[p] for p in patterns if p in _HINTS), "not a known form")
        return f"cannot read {value!r}: {hint}"
    return None


def convert(raw: Any, typ: Any, base: str, problems: list[str]) -> Any:
    """`msgspec.convert(raw, typ)`, or None with the problem appended."""
    try:
        return msgspec.convert(raw, typ)
    except msgspec.ValidationError as exc:
        problems.append(_problem(exc, raw, typ, base))
        return None


def _union_args(typ: Any) -> tuple[Any, ...]:
    """The members of a union (`X | None`); () for anything else (`dict[K, V]`'s arguments
    are not alternatives to it)."""
    return typing.get_args(typ) if typing.get_origin(typ) in (typing.Union, UnionType) else ()


def _struct_of(typ: Any) -> type[msgspec.Struct] | None:
    """The Struct type in `typ` (`X` or `X | None`), else None."""
    for t in (typ, *_union_args(typ)):
        if isinstance(t, type) and issubclass(t, msgspec.Struct):
            return t
    return None


def _item_of(typ: Any) -> Any:
    """The item type of `list[X]` (or `list[X] | None`), else None."""
    for t in (typ, *getattr(typ, "__args__", ())):
        if getattr(t, "__origin__", None) is list:
            return t.__args__[0]
    return None


def _dict_of(typ: Any) -> Any:
    """`dict[K, V]` in `typ` (`dict[K, V]`, `dict[K, V] | None`, either `Annotated`), else
    None."""
    for t in (typ, *getattr(typ, "__args__", ())):
        while typing.get_origin(t) is Annotated:
            t = typing.get_args(t)[0]
        if typing.get_origin(t) is dict:
            return t
    return None


@functools.cache
def _fields(struct: type[msgspec.Struct]) -> dict[str, Any]:
    return {f.encode_name: f for f in msgspec.structs.fields(struct)}


def collect(raw: Any, typ: Any, base: str, problems: list[str]) -> Any:
    """`msgspec.convert(raw, typ)`; when that fails, mappings are walked key by key and lists
    item by item, so a document reports every bad key and entry, not only the first."""
    try:
        return msgspec.convert(raw, typ)
    except msgspec.ValidationError:
        pass
    struct, item = _struct_of(typ), _item_of(typ)
    before = len(problems)
    if struct is not None and isinstance(raw, dict):
        _collect_struct(raw, struct, base, problems)
    elif item is not None and isinstance(raw, list):
        for i, v in enumerate(raw):
            collect(v, item, f"{base}[{i}]", problems)
    elif (mapping := _dict_of(typ)) is not None and isinstance(raw, dict):
        _collect_mapping(raw, mapping, base, problems)
    if len(problems) > before:
        return None
    return convert(raw, typ, base, problems)


def _collect_struct(
    raw: dict[Any, Any], struct: type[msgspec.Struct], base: str, problems: list[str]
) -> None:
    """Every unknown key of a record, the problems of each known one, then every missing
    required key."""
    fields = _fields(struct)
    for key, value in raw.items():
        f = fields.get(key)
        if f is None:
            hint = _suggest(key, fields) or f" (known keys: {', '.join(fields)})"
            problems.append(f"{_p(base, str(key))}: unknown key{hint}")
        else:
            collect(value, f.type, _p(base, key), problems)
    for name, f in fields.items():
        if f.required and name not in raw:
            problems.append(f"{base or '(top level)'}: missing required key {name!r}")


def _collect_mapping(raw: dict[Any, Any], mapping: Any, base: str, problems: list[str]) -> None:
    """The problems of each key, then of its value, of a `dict[K, V]`."""
    key_type, value_type = typing.get_args(mapping)
    for k, v in raw.items():
        bad_key: list[str] = []
        convert(k, key_type, "", bad_key)
        problems += [f"{base or '(top level)'}: key {k!r}: {p.split(': ', 1)[1]}" for p in bad_key]
        collect(v, value_type, _p(base, str(k)), problems)


def _p(base: str, key: str) -> str:
    return f"{base}.{key}" if base else key


def _valid_id(path: str, check: Callable[[], object], problems: list[str]) -> None:
    try:
        check()
    except InvalidId as exc:
        problems.append(f"{path}: {exc}")


def _dups(names: list[tuple[str, str]], what: str, problems: list[str]) -> None:
    seen: dict[str, str] = {}
    for path, name in names:
        if name in seen:
            problems.append(f"{path}: duplicate {what} {name!r} (first at {seen[name]})")
        else:
            seen[name] = path
