"""Bad and odd catalogues (issue 30): whatever the file holds, the loader raises CatalogueError or
returns a catalogue, and ``nightshift validate`` exits 0 or 4 with one problem a line.

Hypothesis mutates a valid catalogue (anchors, merge keys, an ``apis:`` declaration, ``${NAME}``
values) line by line and as a whole: keys dropped or given twice, values of the wrong type,
tags, aliases, merges of scalars and lists, complex and non-text keys, second documents, odd
``${...}``, deep nesting, long strings, BOMs, tabs, text that is not UTF-8, random text. A small
hand corpus holds the nasty ones (alias and merge bombs must be refused within seconds).
Derandomized: CI runs the same inputs every time.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from nightshift.cli.main import main
from nightshift.config.loader import parse_catalogue
from nightshift.errors import CatalogueError

# generated inputs: in the full run (the README's test command), not in the fast `-m unit` loop
pytestmark = pytest.mark.fuzz

BASE = """\
name: fuzz-night
defaults:
  retries: 1
  poll: {initial: 1s, factor: 2, max: 30s}
  deadline: 8h
limits:
  http: 4
  cli: {concurrency: 2, rate: 2/s}
x-timers: &timers
  timeout: 2h
  queued_timeout: 30m
apis:
  jobs-api:
    backend: http
    base_url: "http://jobs.internal:8000"
    submit:
      url: /jobs
      body: {task: "{label}", key: "{key}"}
      headers: {X-Team: data}
    auth: {env: JOBS_API_TOKEN}
    id_path: job_id
    status_url: "/jobs/{id}"
    state_path: status
    states:
      succeeded: [finished]
      failed: [failed]
jobs:
  - label: etl:orders
    api: jobs-api
    <<: *timers
  - label: etl:refunds
    api: jobs-api
    submit: {url: /refunds}
    timeout: 1h
  - label: build
    backend: command
    argv: [python, -c, "print('${GREETING:-hi}')"]
    env: {MODE: "$${LITERAL}"}
  - label: report
    backend: cli
    task: "report for ${TEAM:-data}"
    depends_on: [build, etl:orders]
"""

UNSET = "NIGHTSHIFT_FUZZ_NEVER_SET"  # a `${NAME}` no environment has
SLOW_S = 5.0  # one input, loaded and validated: far more than any input needs

# values written after `key: `, one line each
# fmt: off
ODD_VALUES = [
    "~", "''", '""', "[]", "{}", "true", "no", "on", "0", "-1", "1.5", "1e3", ".inf", "-.inf",
    ".nan", "0x1F", "0o17", "1_000", "1:30", "=", "2001-02-03", "2001-02-30", "12:30:00",
    "[a, b]", "{a: 1}", "[[[]]]", "{a: {b: {c: [1, {d: ~}]}}}", "- x", "x: y", "'", '"', "[", "{",
    "}", "]", "*", "&", "!", "|", ">", "%", "@", "`", "#", ": :", "- - -", "? x",
    "!weird x", "!weird {a: 1}", "!!binary aGVsbG8=", "!!python/object:os.system {}",
    "!!python/name:os.system", "!!python/tuple [1, 2]", "!!set {a, b}", "!!omap [a: 1]",
    "!!pairs [a: 1]", "!!str 5", "!!int 7", "!!int abc", "!!float x", "!!bool maybe",
    "!!null x", "!!timestamp nope", "!!map {a: 1}", "!!seq [1]", "!!str {a: 1}",
    "!<tag:yaml.org,2002:str> x", "!<!> x", "!local [1]",
    "*timers", "*nowhere", "&a x", "&a [*a]", "&b {b: *b}", "&c {<<: *c}",
    "{<<: *timers}", "{<<: 1}", "{<<: [1, 2]}", "{<<: ~}", "{<<: [*timers, {a: 1}]}",
    "{<<: {<<: *timers}}", "{<<: [[*timers]]}", "{<<: *timers, timeout: 1s}",
    '"${' + UNSET + '}"', '"${}"', '"${1X}"', '"$${X}"', '"${X:-}"', '"${X:-a:-b}"',
    '"${ X }"', '"${X"', '"$X"', '"${a\\nb}"', '"${X}${Y:-1}"', '"${${X}}"', '"${X:-${Y}}"',
    '"${' + UNSET + ':-.inf}"', '"\\0"', '"\\x07"', '"\\ud800"', '"\\t"', '"a\\nb"',
    '"\\u202e"', "\ufeff", "\u00e9t\u00e9", "\U0001f600", "\t", "x\ty", "x # y", "x #y",
    "1" * 400, "9" * 5000, "x" * 100_000, "jobs-api", "nope",
]
# keys written instead of a line's own
ODD_KEYS = [
    "on", "yes", "no", "1", "1.5", "~", "null", "2001-01-01", "[a, b]", "{a: 1}", "<<", "&k key",
    "!weird key", "!!binary aGk=", "!!int abc", "!!str 1", '""', "x-extra", "definitions",
    "apis", "jobs", "label", "api", "backend", '"a\\nb"', "*timers ", "? [a, b]\n:", "? x\n:",
    "label\t", "'label '", "\ufefflabel", "\u00e9",
]
# lines inserted at a line's indentation ("\n" starts a line at that indentation too)
SNIPPETS = [
    "x-more: &more {timeout: 1h}", "<<: *timers", "<<: [*timers, *timers]", "<<: *nowhere",
    "<<: [*timers, 1]", "<<: {a: 1}", "api: jobs-api", "api: nope", "api: [jobs-api]",
    "api: ~", "apis: ~", "apis: [a]", "apis: {other: 1}", "definitions: [&d {a: 1}]",
    "? [a, b]\n: c", "? {a: 1}\n: c", "~: x", "1: x", "on: x", "- x", "- {label: x}",
    "label: dup", "env: {X: '${" + UNSET + "}'}", "auth: {env: '${X}'}",
    "token: '${X:-1}'", "headers: {Authorization: x}", "depends_on: [nowhere, build]",
    "---", "...", "%YAML 1.1", "# a comment", "", "\t", "&a", "*timers",
]
# fmt: on


def _nest(depth: int, open_: str, close: str) -> str:
    return open_ * depth + close * depth


def _alias_bomb(levels: int) -> str:
    out = ["x-l0: &l0 [a, b, c, d, e, f, g, h, i, j]"]
    out += [f"x-l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels + 1)]
    return "\n".join(out) + f"\njobs: *l{levels}\n"


def _merge_bomb(levels: int) -> str:
    """Merges of merges of empty mappings: 10**levels merges from a few hundred bytes."""
    out = ["x-m0: &m0 {}"]
    out += [f"x-m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 10)}]}}" for i in range(1, levels)]
    job = f"{{label: a, backend: cli, task: t, <<: *m{levels - 1}}}"
    return "\n".join(out) + f"\njobs: [{job}]\n"


def _apis_bomb(jobs: int) -> str:
    """One declaration of ~110,000 values (under the alias cap), copied into every job: 30 jobs
    took 15 s and 2 GB before the alarm was in place (issue 30's fuzzing)."""
    chain = ["&l0 [a, b, c, d, e, f, g, h, i, j]"]
    chain += [f"&l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 5)]
    return (
        f"apis: {{big: {{backend: cli, env: {{X: [{', '.join(chain)}]}}}}}}\n"
        "x-job: &job {label: a, task: t, api: big}\n"
        f"jobs: [{', '.join(['*job'] * jobs)}]\n"
    )


def _indent(line: str) -> str:
    stripped = line.lstrip(" \t-")
    return " " * (len(line) - len(stripped))


def _split(line: str) -> tuple[str, str, str] | None:
    """``(indentation and "- ", key, value)`` of a ``key: value`` line, else None."""
    body = line.lstrip(" -")
    head = line[: len(line) - len(body)]
    key, sep, value = body.partition(":")
    if not sep or not key or key.startswith(("[", "{", '"', "'", "#")):
        return None
    return head, key, value.strip()


Draw = Callable[[st.SearchStrategy[Any]], Any]
# odd data of every YAML type, dumped into the catalogue as a value or at the top level
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=30),
    st.dates(),
)
_KEYS = st.one_of(st.text(max_size=12), st.integers(-5, 5), st.none(), st.booleans())
_DATA = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=20,
)


def _value(draw: Draw) -> str:
    kind = draw(st.sampled_from(["odd", "odd", "text", "data"]))
    if kind == "odd":
        return str(draw(st.sampled_from(ODD_VALUES)))
    if kind == "text":
        return str(draw(st.text(max_size=20)))
    dumped = yaml.safe_dump(draw(_DATA), default_flow_style=True, width=10**9, allow_unicode=True)
    return dumped.removesuffix("\n...\n").strip().replace("\n", " ")


def _line_op(draw: Draw, lines: list[str]) -> list[str]:
    op = draw(
        st.sampled_from(
            ["value"] * 4 + ["key"] * 2 + ["drop", "twice", "insert"] * 2 + ["indent", "splice"]
        )
    )
    keyed = [n for n, row in enumerate(lines) if _split(row)]
    if op in ("value", "key") and keyed:
        i = draw(st.sampled_from(keyed))
    else:
        i = draw(st.integers(0, len(lines) - 1))
    line, ind = lines[i], _indent(lines[i])
    parts = _split(line)
    if op == "drop":
        del lines[i]
    elif op == "twice":
        lines.insert(i, line)
    elif op == "value" and parts:
        lines[i] = f"{parts[0]}{parts[1]}: {_value(draw)}"
    elif op == "key" and parts:
        key = str(draw(st.sampled_from(ODD_KEYS))).replace("\n", "\n" + ind)
        lines[i] = f"{parts[0]}{key}: {parts[2]}".rstrip()
    elif op == "insert":
        snippet = str(draw(st.sampled_from(SNIPPETS)))
        lines.insert(i, ind + snippet.replace("\n", "\n" + ind))
    elif op == "indent":
        how = draw(st.sampled_from(["tab", "more", "less", "none"]))
        body = line.lstrip(" ")
        spaces = len(line) - len(body)
        new = {"tab": "\t", "more": " " * (spaces + 1), "less": " " * max(0, spaces - 1)}
        lines[i] = new.get(how, "") + body
    else:  # splice random text into the line
        at = draw(st.integers(0, len(line)))
        lines[i] = line[:at] + draw(st.text(min_size=1, max_size=10)) + line[at:]
    return lines


def _whole_op(draw: Draw, text: str) -> str:
    whole = "as-is bom directive second end crlf cr tabs deep bomb long graft random nul empty"
    op = draw(st.sampled_from(whole.split()))
    if op == "bom":
        return "\ufeff" + text
    if op == "directive":
        return (
            draw(st.sampled_from(["%YAML 1.1\n---\n", "%TAG ! tag:x,2000:\n---\n", "---\n"])) + text
        )
    if op == "second":
        return text + draw(
            st.sampled_from(["---\njobs: []\n", "---\n", "--- ~\n", "...\n---\nx\n"])
        )
    if op == "end":
        return text + "...\n" + draw(st.text(max_size=10))
    if op == "crlf":
        return text.replace("\n", "\r\n")
    if op == "cr":
        return text.replace("\n", "\r")
    if op == "tabs":
        return text.replace("  ", "\t")
    if op == "deep":
        depth = draw(st.integers(1, 1200))
        open_, close = draw(st.sampled_from([("[", "]"), ("{a: ", "}")]))
        return text + f"x-deep: {_nest(depth, open_, close)}\n"
    if op == "bomb":
        return _alias_bomb(draw(st.integers(1, 7)))
    if op == "long":
        return text + f"name: {'n' * draw(st.integers(1000, 200_000))}\n"
    if op == "graft":
        data = draw(_DATA)
        block = yaml.safe_dump(data, default_flow_style=draw(st.booleans()), allow_unicode=True)
        key = draw(st.sampled_from(["x-graft", "jobs", "defaults", "apis", "limits", "notify"]))
        return text + f"{key}:\n" + "".join(f"  {row}\n" for row in block.splitlines())
    if op == "random":
        return str(draw(st.text(max_size=200)))
    if op == "nul":
        return text + draw(st.sampled_from(["\x00", "\x07", "\ud800", "\udcff", "\x85", "\u2028"]))
    if op == "empty":
        return str(draw(st.sampled_from(["", "\n", "---\n", "~\n", "[]\n", "x\n", "# only\n"])))
    return text


@st.composite
def catalogues(draw: Draw) -> tuple[str, str]:
    """An odd catalogue's text, and the encoding its file is written in."""
    lines = BASE.splitlines()
    for _ in range(draw(st.integers(0, 4))):
        lines = _line_op(draw, lines)
    text = _whole_op(draw, "\n".join(lines) + "\n")
    encoding = draw(st.sampled_from(["utf-8"] * 6 + ["utf-8-sig", "utf-16", "latin-1"]))
    return text, encoding


class TooSlow(AssertionError):
    """One input took more than SLOW_S seconds."""


@contextlib.contextmanager
def within(seconds: float, what: str) -> Iterator[None]:
    """Fail (TooSlow) when the block runs longer than ``seconds`` (main thread only): raised
    again every half second, in case code on the way swallows one; pytest-timeout's own alarm
    (the same signal) is put back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def late(*_: Any) -> None:
        raise TooSlow(f"{what}: still running after {seconds:g} s")

    started = time.monotonic()
    previous = signal.signal(signal.SIGALRM, late)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds, 0.5)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(0.01, outer - (time.monotonic() - started)))


@dataclass
class Outcome:
    loaded: bool  # parse_catalogue returned a catalogue
    code: int  # nightshift validate's exit code


def _encode(text: str, encoding: str) -> bytes:
    errors = "surrogatepass" if encoding.startswith("utf-8") else "replace"
    return text.encode(encoding, errors)


def check(text: str, encoding: str, folder: Path, capsys: pytest.CaptureFixture[str]) -> Outcome:
    """Load ``text`` and validate it as a file: CatalogueError or a catalogue; exit 0 or 4,
    each problem on a line of its own naming the file. Any other exception propagates."""
    loaded = True
    with within(SLOW_S, "parse_catalogue"):
        try:
            parse_catalogue(text, "f.yaml", environ={})
        except CatalogueError as exc:
            loaded = False
            assert exc.problems, "a CatalogueError with no problem"
            for problem in exc.problems:
                shown = problem.render("f.yaml")
                assert shown.startswith("f.yaml"), shown
                assert "\n" not in shown and "\r" not in shown, f"a problem on two lines: {shown!r}"
    path = folder / "f.yaml"
    path.write_bytes(_encode(text, encoding))
    capsys.readouterr()
    with within(SLOW_S, "nightshift validate"):
        code = main(["validate", "--catalogue", str(path)])
    out, err = capsys.readouterr()
    assert code in (0, 4), (code, out, err)
    assert "Traceback" not in out + err
    rows = err.splitlines()
    if code == 0:
        assert out.splitlines()[-1:] and out.splitlines()[-1].startswith(f"{path}: ok, "), out
    elif "invalid catalogue:" in rows:
        after = rows[rows.index("invalid catalogue:") + 1 :]
        assert after, err
        for row in after:
            assert row.startswith(f"  {path}"), f"not one problem naming the file: {row!r}"
    else:
        assert "invalid batch input:" in rows, err
        for row in rows[rows.index("invalid batch input:") + 1 :]:
            assert row.startswith("  /") and ": job '" in row, f"not one bad input line: {row!r}"
    return Outcome(loaded, code)


EXAMPLES = 150  # ~2 s when every one passes


def test_odd_catalogues_are_refused_or_loaded_never_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outcomes: list[Outcome] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        # no shrinking: a failing input is shown as drawn (BASE and its few mutations), and a
        # run that finds one stays as short as one that does not
        phases=[Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example],
    )
    @given(catalogues())
    def one(case: tuple[str, str]) -> None:
        outcomes.append(check(*case, tmp_path, capsys))

    one()
    assert len(outcomes) >= 60
    assert sum(o.code == 4 for o in outcomes) >= 50  # mostly bad ones
    assert any(o.code == 0 for o in outcomes)  # and some that still load


def test_the_base_catalogue_loads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check(BASE, "utf-8", tmp_path, capsys) == Outcome(True, 0)


# lines of BASE each odd value, key and snippet is written in (a value's key is kept)
VALUE_PLACES = [
    "name: fuzz-night",
    "  deadline: 8h",
    "  http: 4",
    "  timeout: 2h",
    "      url: /jobs",
    "    api: jobs-api",
    "    timeout: 1h",
    '    task: "report for ${TEAM:-data}"',
]
KEY_PLACES = ["name: fuzz-night", "  retries: 1", "    id_path: job_id", "    timeout: 1h"]
SNIPPET_PLACES = ["limits:", "    state_path: status", "    timeout: 1h", "  - label: report"]


def _grid() -> Iterator[tuple[str, str]]:
    """Every odd value, key and snippet in each of its places: (what, catalogue text)."""
    for place in VALUE_PLACES:
        head, key, _ = _split(place) or ("", "", "")
        for value in ODD_VALUES:
            yield (
                f"{place.strip()} -> {key}: {value[:40]!r}",
                BASE.replace(place, f"{head}{key}: {value}", 1),
            )
    for place in KEY_PLACES:
        head, _, value = _split(place) or ("", "", "")
        for key in ODD_KEYS:
            yield (
                f"{place.strip()} -> key {key!r}",
                BASE.replace(place, f"{head}{key.replace(chr(10), chr(10) + head)}: {value}", 1),
            )
    for place in SNIPPET_PLACES:
        ind = _indent(place)
        for snippet in SNIPPETS:
            yield (
                f"before {place.strip()} -> {snippet!r}",
                BASE.replace(place, ind + snippet.replace("\n", "\n" + ind) + "\n" + place, 1),
            )


def test_every_odd_value_key_and_snippet_in_its_places(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The pools in full (Hypothesis draws a few of them): every failure listed at once."""
    failures, checked = [], 0
    for what, text in _grid():
        try:
            check(text, "utf-8", tmp_path, capsys)
        except Exception as exc:  # every one of them is listed below
            failures.append(f"{what}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
        checked += 1
    assert checked >= 1000
    assert not failures, f"{len(failures)} of {checked}:\n" + "\n".join(failures)


# the nasty ones, each (id, text, refused): refused None when either outcome is fine
CORPUS: list[tuple[str, str, bool | None]] = [
    ("billion laughs", _alias_bomb(9), True),
    (
        "aliases of mappings",
        "x-a: &a {k0: x, k1: x, k2: x, k3: x, k4: x, k5: x, k6: x, k7: x}\n"
        + "".join(
            f"x-{n}: &{n} {{{', '.join(f'k{i}: *{p}' for i in range(8))}}}\n"
            for p, n in zip("abcdefg", "bcdefgh", strict=True)
        )
        + "jobs: [*h]\n",
        True,
    ),
    ("merge bomb of empty mappings", _merge_bomb(8), True),
    ("apis declaration copied into many jobs", _apis_bomb(30), True),
    ("recursive list", "x-a: &a [*a]\njobs: [{label: a, backend: cli, task: t}]\n", True),
    ("recursive mapping", "x-a: &a {b: *a}\njobs: [{label: a, backend: cli, task: t}]\n", True),
    ("recursive merge", "x-a: &a {<<: *a}\njobs: [{label: a, backend: cli, task: t}]\n", True),
    (
        "deep lists",
        f"x-deep: {_nest(1000, '[', ']')}\njobs: [{{label: a, backend: cli, task: t}}]\n",
        None,
    ),
    (
        "deep mappings",
        f"x-deep: {_nest(1000, '{a: ', '}')}\njobs: [{{label: a, backend: cli, task: t}}]\n",
        None,
    ),
    ("a control character", 'jobs:\n  - {label: a, backend: cli, task: "t\x07"}\n', True),
    ("a NUL", "jobs:\n  - {label: a, backend: cli, task: t}\n\x00", True),
    ("a lone surrogate", "jobs:\n  - {label: a, backend: cli, task: \ud800}\n", True),
    ("a date that is none", "name: 2001-02-30\njobs: [{label: a, backend: cli, task: t}]\n", True),
    ("a key that is no date", "2001-02-30: x\njobs: [{label: a, backend: cli, task: t}]\n", True),
    ("!!int that is not", "name: !!int abc\njobs: [{label: a, backend: cli, task: t}]\n", True),
    ("!!bool that is not", "name: !!bool maybe\njobs: [{label: a, backend: cli, task: t}]\n", True),
    (
        "!!timestamp that is not",
        "name: !!timestamp x\njobs: [{label: a, backend: cli, task: t}]\n",
        True,
    ),
    (
        "an int of 5,000 digits",
        f"defaults: {{retries: {'9' * 5000}}}\njobs: [{{label: a, backend: cli, task: t}}]\n",
        True,
    ),
    (
        "a timeout of 400 digits",
        f"jobs: [{{label: a, backend: cli, task: t, timeout: {'9' * 400}}}]\n",
        True,
    ),
    # the catalogue refuses a timer that never fires (one line naming the field)
    ("an infinite timeout", "jobs: [{label: a, backend: cli, task: t, timeout: .inf}]\n", True),
    (
        "an infinite deadline",
        "defaults: {deadline: .inf}\njobs: [{label: a, backend: cli, task: t}]\n",
        True,
    ),
    (
        "an infinite sla",
        "jobs:\n  - {label: a, backend: cli, task: t}\n"
        "  - {label: b, backend: gemini_batch, model: m, input: i.jsonl, output: o.jsonl,\n"
        "     depends_on: [a], sla: .inf}\n",
        True,
    ),
    ("${...} over two lines", 'jobs: [{label: a, backend: cli, task: "${A\\nB}"}]\n', True),
    (
        "an api name over two lines",
        'apis: {"a\\nb": {backend: cli}}\njobs: [{label: a, task: t, api: c}]\n',
        True,
    ),
    (
        "a batch input with a NUL",
        "jobs: [{label: a, backend: gemini_batch, model: m, "
        'input: "i\\0.jsonl", output: o.jsonl}]\n',
        None,
    ),
    (
        "a batch input over two lines",
        "jobs: [{label: a, backend: gemini_batch, model: m, "
        'input: "i\\n.jsonl", output: o.jsonl}]\n',
        None,  # a valid catalogue whose input is missing: exit 4 on one line
    ),
    ("a second document", BASE + "---\njobs: []\n", True),
    ("a tag on the top level", "!weird\n" + BASE, True),
    ("python object", "jobs: !!python/object/apply:os.system [echo]\n", True),
    ("unset ${NAME}", BASE.replace("${TEAM:-data}", "${" + UNSET + "}"), True),
]


@pytest.mark.parametrize(("text", "refused"), [pytest.param(t, r, id=i) for i, t, r in CORPUS])
def test_nasty_catalogues(
    text: str, refused: bool | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    outcome = check(text, "utf-8", tmp_path, capsys)
    assert time.monotonic() - started < 2 * SLOW_S
    if refused is not None:
        assert (outcome.loaded, outcome.code) == ((False, 4) if refused else (True, 0))
