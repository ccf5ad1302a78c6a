"""A catalogue's YAML as plain data, with the line of every key and where merged values came from.

YAML as teams write it: anchors, aliases and merge keys (``<<: *api``, ``<<: [*a, *b]``, keys
written beside a merge override it). What a catalogue cannot hold is refused with its line and
what to write instead (``YamlRefused``): a key that is a mapping or a list, a key that is not
text (``1:``, ``on:``), a tag other than YAML's plain ones (``!weird``, ``!!binary``), several
documents in one file, a key given twice. Pure: no files, no environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

__all__ = ["Path_", "Tree", "YamlRefused", "read_yaml"]

Path_ = tuple[Any, ...]
_YAML = "tag:yaml.org,2002:"
MERGE = _YAML + "merge"
# the tags plain YAML resolves by itself; an explicit one of these (!!str, !!int) is fine too
_PLAIN = frozenset(_YAML + t for t in ("str", "int", "float", "bool", "null", "timestamp"))
_NODES = 200_000  # values built at most: aliases of aliases must not blow up (billion laughs)


class YamlRefused(Exception):
    """Something the catalogue's YAML may not hold: its line and what to write instead."""

    def __init__(self, message: str, line: int | None, at: Path_ = (), label: Any = None) -> None:
        super().__init__(message)
        self.message, self.line, self.at, self.label = message, line, at, label


@dataclass
class Tree:
    """Plain data, the line of every key and item, and where a merged value came from."""

    data: Any
    lines: dict[Path_, int] = field(default_factory=dict)
    # a value that is not written where it is used: what it came from ("merged from line 3")
    sources: dict[Path_, str] = field(default_factory=dict)


def read_yaml(text: str) -> Tree:
    """The first and only document of ``text``; YAMLError for YAML that does not parse."""
    nodes = yaml.compose_all(text, Loader=yaml.SafeLoader)
    node = next(nodes, None)
    extra = next(nodes, None)
    if extra is not None:
        line = extra.start_mark.line + 1
        raise YamlRefused(
            "a second document (after `---`): one catalogue per file, or one document", line
        )
    tree = Tree(None)
    if node is not None:
        tree.data = _Builder(tree).build(node, ())
    return tree


Lines = dict[Path_, int]
Sources = dict[Path_, str]


class _Builder:
    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.loader = yaml.SafeLoader("")
        self.built = 0
        self.open: set[int] = set()  # the collections being built: an alias into one loops

    def build(
        self, node: yaml.Node, at: Path_, lines: Lines | None = None, sources: Sources | None = None
    ) -> Any:
        """``node`` as plain data; the lines of its keys go to ``lines`` (the tree's by default)."""
        lines = self.tree.lines if lines is None else lines
        sources = self.tree.sources if sources is None else sources
        self.built += 1
        if self.built > _NODES:
            raise YamlRefused(f"more than {_NODES} values once aliases are expanded", _line(node))
        lines[at] = _line(node)
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node, at)
        if id(node) in self.open:
            raise YamlRefused(
                "an alias refers to the value it is in (`&a [*a]`): a catalogue cannot loop",
                _line(node),
                at,
            )
        self.open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                if node.tag != _YAML + "map":
                    raise _tag_refused(node, at)
                return self._mapping(node, at, lines, sources)
            if node.tag != _YAML + "seq":
                raise _tag_refused(node, at)
            return [self.build(item, (*at, i), lines, sources) for i, item in enumerate(node.value)]
        finally:
            self.open.discard(id(node))

    def _scalar(self, node: yaml.Node, at: Path_) -> Any:
        if node.tag not in _PLAIN:
            raise _tag_refused(node, at)
        try:
            return self.loader.construct_object(node)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
            tag = node.tag.replace(_YAML, "!!")
            raise YamlRefused(
                f"{_shown(node.value)} is not a valid {tag}: remove the tag, or quote the value",
                _line(node),
                at,
            ) from None

    def _mapping(
        self, node: yaml.MappingNode, at: Path_, lines: Lines, sources: Sources
    ) -> dict[Any, Any]:
        self.built += 1  # merges of merges build mappings too (a merge bomb of empty ones)
        if self.built > _NODES:
            raise YamlRefused(f"more than {_NODES} values once aliases are expanded", _line(node))
        out: dict[Any, Any] = {}
        merges: list[tuple[yaml.Node, int]] = []
        for key_node, value_node in node.value:
            if key_node.tag == MERGE:
                merges.append((value_node, _line(key_node)))
                continue
            key = self._key(key_node, at)
            if key in out:
                first = lines[(*at, key)]
                where, label = (*at, key), out.get("label")
                raise YamlRefused(
                    f"duplicate key (first on line {first})", _line(key_node), where, label
                )
            lines[(*at, key)] = _line(key_node)
            out[key] = self.build(value_node, (*at, key), lines, sources)
            lines[(*at, key)] = _line(key_node)
        for value_node, line in merges:  # keys written here win, then the first merge's
            for source in _merge_sources(value_node, line, at):
                self._merge(out, source, line, at, lines, sources)
        return out

    def _merge(
        self,
        out: dict[Any, Any],
        source: yaml.MappingNode,
        line: int,
        at: Path_,
        lines: Lines,
        sources: Sources,
    ) -> None:
        """Take the keys ``out`` lacks from ``source``: they read as written on the ``<<`` line,
        merged from where the anchor has them."""
        own_lines: Lines = {}
        own_sources: Sources = {}
        if id(source) in self.open:
            raise YamlRefused(
                "`<<` merges the mapping it is in (`&a {<<: *a}`): a catalogue cannot loop",
                line,
                at,
            )
        self.open.add(id(source))
        try:
            merged = self._mapping(source, at, own_lines, own_sources)
        finally:
            self.open.discard(id(source))
        taken = {key for key in merged if key not in out}
        depth = len(at)
        for path, where in own_lines.items():
            if len(path) > depth and path[depth] in taken:
                lines[path] = line
                sources[path] = own_sources.get(path) or f"merged from line {where}"
        for key in merged:
            if key in taken:
                out[key] = merged[key]

    def _key(self, node: yaml.Node, at: Path_) -> str:
        if not isinstance(node, yaml.ScalarNode):
            raise YamlRefused(
                "a key must be plain text, not a mapping or a list (`? [a, b]`): "
                "write `name: value`",
                _line(node),
                at,
            )
        key = self._scalar(node, at)
        if not isinstance(key, str):
            raise YamlRefused(
                f"key {_shown(node.value)} is read as {type(key).__name__}, not text: quote it "
                f'("{_shown(node.value, quote=False)}": ...)',
                _line(node),
                at,
            )
        return key


def _merge_sources(node: yaml.Node, line: int, at: Path_) -> list[yaml.MappingNode]:
    """What a ``<<`` merges: one mapping (an alias), or a list of them."""
    items = node.value if isinstance(node, yaml.SequenceNode) else [node]
    mappings = [item for item in items if isinstance(item, yaml.MappingNode)]
    if len(mappings) == len(items):
        return mappings
    raise YamlRefused(
        "`<<` merges a mapping or a list of mappings: write `<<: *name` or `<<: [*a, *b]`",
        line,
        at,
    )


def _tag_refused(node: yaml.Node, at: Path_) -> YamlRefused:
    tag = node.tag.replace(_YAML, "!!")
    return YamlRefused(
        f"tag {tag} is not allowed: a catalogue holds plain text, numbers, lists and mappings "
        "(remove the tag, or quote the value)",
        _line(node),
        at,
    )


def _shown(value: str, quote: bool = True, limit: int = 40) -> str:
    """A value as a message shows it: short, on one line."""
    text = value if len(value) <= limit else value[:limit] + "…"
    return repr(text) if quote else text.replace("\n", " ")


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1
