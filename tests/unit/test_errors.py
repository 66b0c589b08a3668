"""The errors module's docstring draws every error class in its place in the hierarchy."""

from __future__ import annotations

import re

import inboxgen.errors as errors


def test_the_drawn_tree_is_the_class_hierarchy() -> None:
    drawn: dict[str, str] = {}
    at_depth: dict[int, str] = {}  # the last class drawn at each depth
    for line in (errors.__doc__ or "").splitlines():
        m = re.search(r"(?:^ {4}|── )([A-Z]\w+)\s{2,}|^ {4}(InboxgenError)$", line)
        name = m and (m.group(1) or m.group(2))
        if not name or not hasattr(errors, name):
            continue
        depth = (line.index(name) - 4) // 4  # each level indents the name four more
        at_depth[depth] = name
        if depth:
            drawn[name] = at_depth[depth - 1]
    actual = {name: cls.__bases__[0].__name__ for name, cls in vars(errors).items()
              if isinstance(cls, type) and issubclass(cls, errors.InboxgenError)
              and cls is not errors.InboxgenError}
    assert drawn == actual
