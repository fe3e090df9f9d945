"""Rules, rulesets, generators and schedules: the values a `Session` runs.

A `Rule` is one law: its name, the law in one line, and the egglog command(s) stating it.
Rule text may use list sugar for the inputs of variadic ops: `(Concat ax [a b])` is
`(Concat ax (TCons a (TCons b (TNil))))`. An op with attributes is written with the pattern
builder (`einsat.egraph.patterns.pat`), which binds them by name, never by position.

    Rule("add-comm", "a + b = b + a", rewrite("(Add a b)", "(Add b a)"))

A `Ruleset` groups the rules of one theory with how they run: explosive rules (associativity,
commutativity) under a back-off scheduler, multi-pattern rules only in the first
steps (Tensat's budget). A `Generator` is a rule written in Python: it reads the exported
e-graph and unions new terms in (PET's mutants with their corrections, EinNet's derivations,
constant folding). A `Schedule` is one step: its phases run in order, and the session repeats
steps until saturation or a limit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from einsat.egraph.data import EGraphData


class GeneratorSession(Protocol):
    """What a generator may do to the session running it (`egraph.session.Session`, which
    imports this module): add terms, union them, add weights."""

    def add(self, term) -> Any: ...
    def union(self, a, b) -> None: ...
    def add_weight(self, array, hint: str = "w") -> Any: ...


@dataclass(frozen=True)
class Rule:
    name: str
    law: str
    egglog: str

    def commands(self, ruleset: str, varying: bool = False) -> list[str]:
        """The egglog commands, each tagged with the ruleset and a name (`name`, `name#2`, ...).
        With `varying`, rewrites fire only on terms that depend on a program input."""
        cmds = split_commands(expand_lists(self.egglog))
        out = []
        for k, c in enumerate(cmds):
            tag = self.name if k == 0 else f"{self.name}#{k + 1}"
            if varying and c.startswith("(rewrite"):
                c = guard_varying(c)
            out.append(f'{c[:-1]} :ruleset {ruleset} :name "{tag}")')
        return out


@dataclass(frozen=True)
class BackOff:
    """Back-off for explosive rules (associativity, commutativity): in step k a rule matching
    more than `match_limit * 2**k` times applies none of its matches, so they grow the e-graph
    smoothly (the session also caps every phase by the node budget)."""

    match_limit: int = 1000


@dataclass(frozen=True)
class Ruleset:
    name: str
    rules: tuple[Rule, ...]
    backoff: BackOff | None = None
    first_steps: int | None = None  # run only in the first k steps (multi-pattern rules)
    varying: bool = False  # rewrites only of terms that depend on a program input (`varying`)


@dataclass(frozen=True)
class Generator:
    """`fn(session, data) -> number of unions`: reads the export `data`, unions new terms in
    with `session.union(class_id, term)`. Runs in steps `every - 1`, `2 * every - 1`, ... (and
    only before step `first_steps`, if given)."""

    name: str
    law: str
    fn: Callable[[GeneratorSession, EGraphData], int]
    every: int = 1
    first_steps: int | None = None


@dataclass(frozen=True)
class Schedule:
    """One step of saturation: phases (rulesets and generators) in order."""

    phases: tuple[Ruleset | Generator, ...]

    def __add__(self, other: "Schedule") -> "Schedule":
        return Schedule(self.phases + other.phases)

    @property
    def rules(self) -> list[Rule]:
        return [r for p in self.phases if isinstance(p, Ruleset) for r in p.rules]


def rewrite(lhs: str, rhs: str, *when: str, subsume: bool = False) -> str:
    cond = f" :when ({' '.join(when)})" if when else ""
    return f"(rewrite {lhs} {rhs}{cond}{' :subsume' if subsume else ''})"


def birewrite(lhs: str, rhs: str, *when: str) -> str:
    """Both directions (two rewrites, so each may carry its own guard)."""
    return rewrite(lhs, rhs, *when) + "\n" + rewrite(rhs, lhs, *when)


def rule(facts: list[str] | tuple[str, ...], actions: list[str] | tuple[str, ...]) -> str:
    return f"(rule ({' '.join(facts)}) ({' '.join(actions)}))"


_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[()\[\]]|[^\s()\[\]"]+')


def expand_lists(text: str) -> str:
    """`[a (F b) c]` -> `(TCons a (TCons (F b) (TCons c (TNil))))`, nested brackets allowed."""
    if "[" not in text:
        return text
    tokens = _TOKEN.findall(re.sub(r";[^\n]*", "", text))
    pos = 0

    def expr() -> str:
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        if tok == "(":
            items = []
            while tokens[pos] != ")":
                items.append(expr())
            pos += 1
            return "(" + " ".join(items) + ")"
        if tok == "[":
            items = []
            while tokens[pos] != "]":
                items.append(expr())
            pos += 1
            out = "(TNil)"
            for item in reversed(items):
                out = f"(TCons {item} {out})"
            return out
        return tok

    out = []
    while pos < len(tokens):
        out.append(expr())
    return "\n".join(out)


def split_commands(text: str) -> list[str]:
    """The top-level s-expressions of `text` (comments dropped)."""
    text = re.sub(r";[^\n]*", "", text)
    cmds, depth, start = [], 0, 0
    for m in _TOKEN.finditer(text):
        tok = m.group(0)
        if tok == "(":
            if depth == 0:
                start = m.start()
            depth += 1
        elif tok == ")":
            depth -= 1
            if depth == 0:
                cmds.append(text[start:m.end()])
    return cmds


def parse(text: str):
    """One s-expression as nested lists of atoms."""
    tokens = _TOKEN.findall(re.sub(r";[^\n]*", "", text))
    pos = 0

    def expr():
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        if tok != "(":
            return tok
        items = []
        while tokens[pos] != ")":
            items.append(expr())
        pos += 1
        return items

    return expr()


def unparse(e) -> str:
    return e if isinstance(e, str) else "(" + " ".join(unparse(x) for x in e) + ")"


def guard_varying(command: str) -> str:
    """`(rewrite L R :when (f..) [:subsume])` as a rule that also requires `(varying L)`."""
    items = parse(command)
    lhs, rhs, opts = items[1], items[2], items[3:]
    when = opts[opts.index(":when") + 1] if ":when" in opts else []
    facts = [["=", "__t", lhs], ["varying", "__t"], *when]
    actions = [["union", "__t", rhs]] + ([["subsume", lhs]] if ":subsume" in opts else [])
    return unparse(["rule", facts, actions])


def fanout(command, constructors: set[str]) -> int:
    """An upper bound on the e-nodes one application of `command` creates: the constructor
    applications in what it builds (a rewrite's right side, a rule's actions, a let, a union).
    `command` is egglog text or an egglog-bindings command (a generator's queued union)."""
    if isinstance(command, str):
        items = parse(command)
        head = items[0] if items else ""
        if head == "rewrite":
            built = [items[2]]
        elif head == "birewrite":
            built = [items[1], items[2]]
        elif head == "rule":
            built = items[2]
        else:
            built = items
        return _count_text(built, constructors)
    return _count_bindings(command, constructors)


def _count_text(e, constructors: set[str]) -> int:
    if not isinstance(e, list) or not e:
        return 0
    own = 1 if isinstance(e[0], str) and e[0] in constructors else 0
    return own + sum(_count_text(x, constructors) for x in e)


def _count_bindings(obj, constructors: set[str]) -> int:
    from egglog import bindings

    if isinstance(obj, bindings.Call):
        return (obj.name in constructors) + sum(_count_bindings(a, constructors) for a in obj.args)
    if isinstance(obj, bindings.ActionCommand):
        return _count_bindings(obj.action, constructors)
    if isinstance(obj, bindings.Let):
        return _count_bindings(obj.rhs, constructors)
    if isinstance(obj, bindings.Union):
        return _count_bindings(obj.lhs, constructors) + _count_bindings(obj.rhs, constructors)
    if isinstance(obj, bindings.Set):
        return sum(_count_bindings(a, constructors) for a in (*obj.args, obj.rhs))
    return 0
