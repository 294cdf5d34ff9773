"""Read-only views of the folded state: what a decider receives in checking mode.

`read_only(ledger)` wraps the `Ledger` in a view that answers every read as the ledger would
and raises `StateWriteError`, naming the path (`state.jobs['j1'].message`), on any write:
an attribute assignment or deletion, a mutating call on a dict, list or set (`d[k] = v`,
`pop`, `append`, `add`, `|=`, ...), at any depth (job and allocation records, the fleet and
its node records, the time index, the configuration).

How: views are made lazily, on access, so a decide pays for what it reads. A value that cannot
change (None, numbers, strings, enums, tuples, frozensets, frozen msgspec structs without a
mutable field) is returned as it is; a dict, list or set comes back as a view of it; any
other object comes back as an object view whose methods run
with the view as `self` (so the code of `Ledger.nominated_nodes`, `Fleet.place`,
`NodeState.copy`... reads through views too) and whose properties are computed on the view.
`isinstance` sees the wrapped class.

Transparent memos are the one exception, and explicit: a class lists in
`__transparent_memos__` the attributes that only memoise pure functions of its state (see
docs/deciders.md, "Caches"); through a view those attributes are read and assigned on the
object itself. Nothing else is.

The normal (non-checking) path never builds a view: this module costs nothing there.
"""

from __future__ import annotations

import copy
import enum
import types
from typing import Any

import msgspec


class StateWriteError(Exception):
    """A decide wrote to the folded state through its read-only view."""

    def __init__(self, what: str, path: str) -> None:
        self.path = path
        head = path.removeprefix("state.")
        self.field = head.split(".", 1)[0].split("[", 1)[0]
        """The top-level Ledger field written to (`jobs`, `fleet`, ...)."""
        super().__init__(f"{what} {path} (the folded state is read-only inside decide)")


_RAW, _DICT, _LIST, _SET, _STRUCT, _OBJECT = range(6)
_KIND: dict[type, int] = {}
_MEMOS: dict[type, frozenset[str]] = {}
_ATTRS: dict[tuple[type, str], tuple[int, Any]] = {}
_NOTHING = object()
_get = object.__getattribute__


def _is_function(tp: type) -> bool:
    return issubclass(tp, types.FunctionType)


def _classify(tp: type) -> int:
    if issubclass(tp, _View) or _is_function(tp):
        return _RAW
    if issubclass(
        tp,
        (
            str,
            bytes,
            int,
            float,
            complex,
            tuple,
            frozenset,
            range,
            enum.Enum,
            type,
            types.BuiltinFunctionType,
            types.MethodType,
            msgspec.UnsetType,  # the immutable singleton `UNSET` (fields left out of the JSON)
        ),
    ) or tp is type(None):
        return _RAW
    if issubclass(tp, dict):
        return _DICT
    if issubclass(tp, list):
        return _LIST
    if issubclass(tp, set):
        return _SET
    if issubclass(tp, msgspec.Struct) and tp.__struct_config__.frozen:
        return _STRUCT
    return _OBJECT


def _kind(value: Any) -> int:
    tp = type(value)
    k = _KIND.get(tp)
    if k is None:
        k = _KIND[tp] = _classify(tp)
    return k


_SEEN: dict[int, Any] = {}
"""id(object) -> its view, for the current decide (`read_only` starts afresh): one view per
object, so a record read a thousand times is wrapped (and a struct inspected) once. The
entries keep their objects alive, so an id is never reused while it is here."""


def wrap(value: Any, parent: _View | None, key: Any) -> Any:
    """`value` as seen through a view: itself if it cannot change, else a view of it
    (`parent` and `key` name it in errors: `key` is an attribute name or an index)."""
    k = _KIND.get(type(value))
    if k is None:
        k = _KIND[type(value)] = _classify(type(value))
    if k == _RAW:
        return value
    seen = _SEEN.get(id(value))
    if seen is not None:
        return seen
    if k == _DICT:
        view: Any = DictView(value, parent, key)
    elif k == _LIST:
        view = ListView(value, parent, key)
    elif k == _SET:
        view = SetView(value, parent, key)
    elif k == _STRUCT:
        view = value
        for name in type(value).__struct_fields__:
            if _kind(getattr(value, name)) != _RAW:
                view = ObjectView(value, parent, key)
                break
    else:
        view = ObjectView(value, parent, key)
    _SEEN[id(value)] = view
    return view


def read_only(state: Any, name: str = "state") -> Any:
    """A read-only view of `state` (errors name paths from `name`), for one decide."""
    _SEEN.clear()
    return wrap(state, None, name)


def forget() -> None:
    """Drop the views of the last decide (they stay usable, just no longer shared)."""
    _SEEN.clear()


def unwrap(value: Any) -> Any:
    """The object behind a view (anything else as it is)."""
    return _get(value, "_t") if isinstance(value, _View) else value


def is_view(value: Any) -> bool:
    return isinstance(value, _View)


def transparent_memos(cls: type) -> frozenset[str]:
    """The attributes `cls` (and its bases) declare as transparent memos."""
    memos = _MEMOS.get(cls)
    if memos is None:
        names: set[str] = set()
        for base in cls.__mro__:
            names.update(base.__dict__.get("__transparent_memos__", ()))
        memos = _MEMOS[cls] = frozenset(names)
    return memos


_MEMO, _METHOD, _PROPERTY, _PLAIN, _FIELD, _CLASS, _DICTATTR = range(7)


def _plan(cls: type, name: str) -> tuple[int, Any]:
    """How a view of a `cls` answers attribute `name` (computed once per class and name)."""
    if name == "__class__":
        return _CLASS, None
    if name in transparent_memos(cls):
        return _MEMO, None
    for base in cls.__mro__:
        if name in base.__dict__:
            attr = base.__dict__[name]
            if _is_function(type(attr)):
                return _METHOD, attr
            if isinstance(attr, property):
                return _PROPERTY, attr.fget
            if isinstance(attr, (staticmethod, classmethod)):
                return _PLAIN, None
            break
    if name == "__dict__":
        return _DICTATTR, None
    return _FIELD, None


class _View:
    """Base of the views: the wrapped object, and where it sits (for error messages)."""

    __slots__ = ("_t", "_parent", "_key")

    def __init__(self, target: Any, parent: _View | None, key: Any) -> None:
        object.__setattr__(self, "_t", target)
        object.__setattr__(self, "_parent", parent)
        object.__setattr__(self, "_key", key)

    def _path(self) -> str:
        parent = _get(self, "_parent")
        key = _get(self, "_key")
        if parent is None:
            return str(key)
        head = _View._path(parent)
        return (
            f"{head}.{key}"
            if isinstance(key, str) and isinstance(parent, ObjectView)
            else f"{head}[{key!r}]"
        )

    def _refuse(self, what: str, key: Any = _NOTHING) -> StateWriteError:
        path = _View._path(self)
        if key is not _NOTHING:
            path += f".{key}" if isinstance(self, ObjectView) else f"[{key!r}]"
        return StateWriteError(what, path)

    def __repr__(self) -> str:
        return f"<read-only {_get(self, '_t')!r}>"

    def __eq__(self, other: object) -> bool:
        return _get(self, "_t") == unwrap(other)

    def __ne__(self, other: object) -> bool:
        return _get(self, "_t") != unwrap(other)

    def __lt__(self, other: object) -> bool:
        return _get(self, "_t") < unwrap(other)

    def __le__(self, other: object) -> bool:
        return _get(self, "_t") <= unwrap(other)

    def __gt__(self, other: object) -> bool:
        return _get(self, "_t") > unwrap(other)

    def __ge__(self, other: object) -> bool:
        return _get(self, "_t") >= unwrap(other)

    def __hash__(self) -> int:
        return hash(_get(self, "_t"))

    def __bool__(self) -> bool:
        return bool(_get(self, "_t"))

    def __len__(self) -> int:
        return len(_get(self, "_t"))

    def __contains__(self, item: object) -> bool:
        return unwrap(item) in _get(self, "_t")

    def __deepcopy__(self, memo: dict) -> Any:
        """A private deep copy of the object behind the view (yours to change)."""
        return copy.deepcopy(_get(self, "_t"), memo)

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(
            f"a read-only view of {_View._path(self)} cannot be pickled: copy what you need"
        )


class ObjectView(_View):
    """An object (a record, the fleet, a node record, ...): reads wrap, writes raise."""

    __slots__ = ()

    def __getattribute__(self, name: str) -> Any:
        target = _get(self, "_t")
        cls = type(target)
        plan = _ATTRS.get((cls, name))
        if plan is None:
            plan = _ATTRS[(cls, name)] = _plan(cls, name)
        mode, obj = plan
        if mode == _FIELD:
            value = getattr(target, name)
            if _KIND.get(type(value)) == _RAW:
                return value
            return wrap(value, self, name)
        if mode == _METHOD:
            return types.MethodType(obj, self)
        if mode == _PROPERTY:
            return obj(self)
        if mode == _CLASS:
            return cls
        if mode == _DICTATTR:
            return DictView(target.__dict__, self, "__dict__")
        return getattr(target, name)  # a transparent memo, a static or class method

    def __setattr__(self, name: str, value: Any) -> None:
        target = _get(self, "_t")
        if name in transparent_memos(type(target)):
            setattr(target, name, value)
            return
        raise _View._refuse(self, "assignment to", name)

    def __delattr__(self, name: str) -> None:
        raise _View._refuse(self, "deletion of", name)

    def __iter__(self):
        for i, v in enumerate(_get(self, "_t")):
            yield wrap(v, self, i)

    def __getitem__(self, key: Any) -> Any:
        return wrap(_get(self, "_t")[key], self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        raise _View._refuse(self, "assignment to", key)

    def __delitem__(self, key: Any) -> None:
        raise _View._refuse(self, "deletion of", key)


def _mutator(what: str, keyed: bool = False):
    def refuse(self, *args: Any, **kwargs: Any) -> Any:
        if keyed and args:
            raise _View._refuse(self, what, args[0])
        raise _View._refuse(self, what)

    refuse.__name__ = what
    return refuse


class DictView(_View):
    """A dict, read-only: values come back as views."""

    __slots__ = ()

    @property
    def __class__(self):  # noqa: D105 - isinstance(view, dict)
        return type(_get(self, "_t"))

    def __getitem__(self, key: Any) -> Any:
        return wrap(_get(self, "_t")[key], self, key)

    def get(self, key: Any, default: Any = None) -> Any:
        target = _get(self, "_t")
        value = target.get(key, _NOTHING)
        return default if value is _NOTHING else wrap(value, self, key)

    def keys(self):
        return _get(self, "_t").keys()

    def values(self) -> list[Any]:
        return [wrap(v, self, k) for k, v in _get(self, "_t").items()]

    def items(self) -> list[tuple[Any, Any]]:
        return [(k, wrap(v, self, k)) for k, v in _get(self, "_t").items()]

    def __iter__(self):
        return iter(_get(self, "_t"))

    def __reversed__(self):
        return reversed(_get(self, "_t"))

    def __copy__(self) -> dict:
        return self.copy()

    def copy(self) -> dict:
        """A new dict (yours to change) of the same keys and read-only values."""
        return dict(self.items())

    def __or__(self, other: Any) -> dict:
        return {**self.copy(), **unwrap(other)}

    def __ror__(self, other: Any) -> dict:
        return {**unwrap(other), **self.copy()}

    __setitem__ = _mutator("assignment to", keyed=True)
    __delitem__ = _mutator("deletion of", keyed=True)
    pop = _mutator("pop from", keyed=True)
    setdefault = _mutator("setdefault on", keyed=True)
    popitem = _mutator("popitem on")
    update = _mutator("update of")
    clear = _mutator("clear of")
    __ior__ = _mutator("update (|=) of")


class ListView(_View):
    """A list, read-only: items come back as views."""

    __slots__ = ()

    @property
    def __class__(self):  # noqa: D105
        return type(_get(self, "_t"))

    def __getitem__(self, index: Any) -> Any:
        target = _get(self, "_t")
        if isinstance(index, slice):
            return [
                wrap(v, self, i)
                for i, v in zip(range(*index.indices(len(target))), target[index], strict=True)
            ]
        return wrap(target[index], self, index)

    def __iter__(self):
        for i, v in enumerate(_get(self, "_t")):
            yield wrap(v, self, i)

    def __reversed__(self):
        target = _get(self, "_t")
        for i in range(len(target) - 1, -1, -1):
            yield wrap(target[i], self, i)

    def index(self, *args: Any) -> int:
        return _get(self, "_t").index(*args)

    def count(self, value: Any) -> int:
        return _get(self, "_t").count(unwrap(value))

    def __copy__(self) -> list:
        return self.copy()

    def copy(self) -> list:
        """A new list (yours to change) of the same, read-only items."""
        return list(self)

    def __add__(self, other: Any) -> list:
        return list(self) + list(other)

    def __radd__(self, other: Any) -> list:
        return list(other) + list(self)

    def __mul__(self, n: int) -> list:
        return list(self) * n

    __setitem__ = _mutator("assignment to", keyed=True)
    __delitem__ = _mutator("deletion of", keyed=True)
    append = _mutator("append to")
    extend = _mutator("extend of")
    insert = _mutator("insert into")
    pop = _mutator("pop from")
    remove = _mutator("remove from")
    sort = _mutator("sort of")
    reverse = _mutator("reverse of")
    clear = _mutator("clear of")
    __iadd__ = _mutator("extend (+=) of")
    __imul__ = _mutator("repeat (*=) of")


class SetView(_View):
    """A set, read-only (its items are hashable values); set algebra returns new sets."""

    __slots__ = ()

    @property
    def __class__(self):  # noqa: D105
        return type(_get(self, "_t"))

    def __iter__(self):
        return iter(_get(self, "_t"))

    def __copy__(self) -> set:
        return self.copy()

    def copy(self) -> set:
        return set(_get(self, "_t"))

    def __or__(self, other: Any) -> Any:
        return _get(self, "_t") | unwrap(other)

    def __and__(self, other: Any) -> Any:
        return _get(self, "_t") & unwrap(other)

    def __sub__(self, other: Any) -> Any:
        return _get(self, "_t") - unwrap(other)

    def __xor__(self, other: Any) -> Any:
        return _get(self, "_t") ^ unwrap(other)

    def __ror__(self, other: Any) -> Any:
        return unwrap(other) | _get(self, "_t")

    def __rand__(self, other: Any) -> Any:
        return unwrap(other) & _get(self, "_t")

    def __rsub__(self, other: Any) -> Any:
        return unwrap(other) - _get(self, "_t")

    def __rxor__(self, other: Any) -> Any:
        return unwrap(other) ^ _get(self, "_t")

    def union(self, *others: Any) -> Any:
        return _get(self, "_t").union(*map(unwrap, others))

    def intersection(self, *others: Any) -> Any:
        return _get(self, "_t").intersection(*map(unwrap, others))

    def difference(self, *others: Any) -> Any:
        return _get(self, "_t").difference(*map(unwrap, others))

    def symmetric_difference(self, other: Any) -> Any:
        return _get(self, "_t").symmetric_difference(unwrap(other))

    def issubset(self, other: Any) -> bool:
        return _get(self, "_t").issubset(unwrap(other))

    def issuperset(self, other: Any) -> bool:
        return _get(self, "_t").issuperset(unwrap(other))

    def isdisjoint(self, other: Any) -> bool:
        return _get(self, "_t").isdisjoint(unwrap(other))

    add = _mutator("add to")
    discard = _mutator("discard from")
    remove = _mutator("remove from")
    pop = _mutator("pop from")
    clear = _mutator("clear of")
    update = _mutator("update of")
    intersection_update = _mutator("intersection_update of")
    difference_update = _mutator("difference_update of")
    symmetric_difference_update = _mutator("symmetric_difference_update of")
    __ior__ = _mutator("update (|=) of")
    __iand__ = _mutator("intersection update (&=) of")
    __isub__ = _mutator("difference update (-=) of")
    __ixor__ = _mutator("symmetric update (^=) of")
