"""User documents (YAML or JSON) read safely: the one loader of every file and request body a
user hands gpuledger (`check`, `submit`, `apply`, scenarios, the gateway's bodies).

`load_document(text)` is `yaml.safe_load` (plain data only: no tags that build objects) with
two bounds, so no input gives a traceback or exhausts memory before validation starts:

- nesting: at most `MAX_DEPTH` levels of mappings and lists (a deeper document, or one deep
  enough to overflow the parser's recursion, is `DocumentError`);
- size after aliases: YAML anchors are allowed in files (`&defaults` / `*defaults`) but the
  document they expand to may hold at most `MAX_VALUES` values (a "billion laughs" file is
  refused, not expanded); request bodies refuse aliases altogether (`aliases=False`).

JSON is YAML, but is parsed by `json` when the text starts with `{` or `[` (faster, exact
numbers). Errors are one line (`DocumentError`, a ValueError) for the caller to prefix with
the file name.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import yaml

MAX_DEPTH = 64
"""Deepest nesting of mappings and lists accepted in a user document."""
MAX_VALUES = 1_000_000
"""Most values (scalars, mappings, lists) a document may hold once its aliases are expanded."""


class DocumentError(ValueError):
    """A document that cannot be read (one line, without the file name)."""


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader without anchors/aliases: a request body cannot expand into a huge document."""

    def compose_node(self, parent, index):  # type: ignore[override]  # PyYAML's stubs type it narrower than it is called
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "aliases are not allowed here", event.start_mark
            )
        return super().compose_node(parent, index)


def load_document(text: str, *, aliases: bool = True) -> Any:
    """The data in `text` (YAML or JSON); DocumentError for anything that is not a bounded
    document (see the module doc)."""
    try:
        if text.lstrip().startswith(("{", "[")):
            try:
                doc = json.loads(text)
            except ValueError:
                doc = yaml.load(text, yaml.SafeLoader if aliases else _NoAliasLoader)
        else:
            doc = yaml.load(text, yaml.SafeLoader if aliases else _NoAliasLoader)
    except RecursionError:
        raise DocumentError(f"not YAML/JSON: nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:  # an integer longer than Python converts (4,300 digits)
        if "integer string conversion" not in str(exc):
            raise
        raise DocumentError(
            f"not YAML/JSON: a number of more than {sys.get_int_max_str_digits():,} digits"
        ) from None
    except yaml.YAMLError as exc:
        raise DocumentError(" ".join(f"not YAML/JSON: {exc}".split())[:500]) from None
    check_bounds(doc)
    return doc


def check_bounds(doc: Any) -> None:
    """DocumentError if `doc` nests deeper than `MAX_DEPTH` or expands (aliases: an object
    met again counts again) to more than `MAX_VALUES` values. Linear in the distinct objects."""
    sizes: dict[int, int] = {}
    stack: list[tuple[Any, int, bool]] = [(doc, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        if not isinstance(node, dict | list):
            continue
        if done:
            children = node.values() if isinstance(node, dict) else node
            total = 1 + sum(sizes.get(id(c), 1) for c in children)
            if isinstance(node, dict):
                total += len(node)  # the keys
            if total > MAX_VALUES:
                raise DocumentError(
                    f"not YAML/JSON: expands to more than {MAX_VALUES:,} values (aliases?)"
                )
            sizes[id(node)] = total
            continue
        if depth > MAX_DEPTH:
            raise DocumentError(f"not YAML/JSON: nested more than {MAX_DEPTH} levels deep")
        if id(node) in sizes:
            continue
        sizes[id(node)] = 1  # met again below itself: a cycle through an alias
        stack.append((node, depth, True))
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1, False) for c in children)
