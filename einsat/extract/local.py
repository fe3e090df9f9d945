"""Local search on a selection: switch one e-class's e-node while that lowers the DAG cost.

Greedy extractors choose each e-class alone, so they miss sharing *across* e-classes: two
outputs that could both be computed from one common value each keep their own cheapest tree.
One switch at a time, with the exact DAG cost, finds such sharing: switching an e-class to an
e-node whose children are already computed costs only that e-node.

The search keeps a choice for every e-class (the selection's, and the tree-greedy choice for
the others, so that the whole choice graph is acyclic), reference counts of the needed
e-classes and of the paid groups. A switch is costed incrementally (the e-classes it newly
needs or frees, and their groups) and rejected if it closes a cycle: a new cycle must pass
through the switched e-node, so one search below its children decides. Besides single
switches, the outputs of one multi-output op (a merged matmul's split) are tried together:
merging Q, K and V pays off only when all three e-classes switch at once; and with them, one
needed e-class switched to an e-node that uses an output of that op no one needs yet (a merged
convolution whose second output replaces a separate convolution: ResNet-18's shortcut, which
neither switch pays for alone). Each accepted move
lowers the cost, so the search ends; it also stops after `max_evals` moves tried (a count, not
a time: the result is deterministic).
"""

from __future__ import annotations

from einsat.extract.problem import Problem, Selection


class _State:
    def __init__(self, problem: Problem, full: Selection):
        self.p = problem
        self.full = full
        self.kids = [tuple(sorted(set(c.children))) for c in problem.candidates]
        self.rc: dict[int, int] = {}
        self.grc: dict[int, int] = {}
        self.cost = 0.0
        for r in problem.data.roots:
            self._ref(r, +1)

    def _ref(self, cid: int, sign: int) -> None:
        """Add (+1) or drop (-1) one reference to `cid`, needing or freeing its sub-program."""
        stack = [cid]
        while stack:
            c = stack.pop()
            n = self.rc.get(c, 0) + sign
            self.rc[c] = n
            if (sign > 0 and n == 1) or (sign < 0 and n == 0):
                idx = self.full[c]
                self._group(idx, sign)
                stack.extend(self.kids[idx])

    def _group(self, idx: int, sign: int) -> None:
        g = self.p.candidates[idx].group
        n = self.grc.get(g, 0) + sign
        self.grc[g] = n
        if (sign > 0 and n == 1) or (sign < 0 and n == 0):
            self.cost += sign * self.p.group_cost[g]

    def reaches(self, starts, target: int) -> bool:
        seen, stack = set(), list(starts)
        while stack:
            c = stack.pop()
            if c == target:
                return True
            if c not in seen:
                seen.add(c)
                stack.extend(self.kids[self.full[c]])
        return False

    def switch(self, cid: int, idx: int) -> None:
        """Choose `idx` for the needed e-class `cid` (new children first, so shared ones stay)."""
        old = self.full[cid]
        self._group(idx, +1)
        self.full[cid] = idx
        for k in self.kids[idx]:
            self._ref(k, +1)
        for k in self.kids[old]:
            self._ref(k, -1)
        self._group(old, -1)


def improve(problem: Problem, selection: Selection, complete: Selection,
            max_evals: int = 20000) -> Selection:
    """A selection at most as costly as `selection` (see the module docstring).

    `complete` must be acyclic over every e-class (the tree-greedy selection is)."""
    full = dict(complete)
    full.update(selection)
    state = _State(problem, full)
    groups: dict[int, list[int]] = {}
    for c in problem.candidates:
        if problem.group_size[c.group] > 1:
            groups.setdefault(c.group, []).append(c.index)
    users: dict[int, list[int]] = {}  # e-class -> the candidates that use it
    for c in problem.candidates:
        for k in sorted(set(c.children)):
            users.setdefault(k, []).append(c.index)
    budget = [max_evals]
    improved = True
    while improved and budget[0] > 0:
        improved = False
        for cid in problem.order(full):
            if state.rc.get(cid, 0):
                for idx in problem.classes[cid]:
                    improved |= _try(state, [(cid, idx)], budget)
        for g in sorted(groups):  # all outputs of one multi-output op at once (merged matmuls)
            moves = [(problem.candidates[i].cls, i) for i in groups[g]]
            moves = [(c, i) for c, i in moves if state.rc.get(c, 0)]
            if len(moves) > 1:
                improved |= _try(state, moves, budget)
            improved |= _free_outputs(state, groups[g], users, budget)
    return {c: full[c] for c in problem.order(full)}


def _free_outputs(state: _State, group: list[int], users: dict[int, list[int]], budget: list[int]) -> bool:
    """The needed outputs of a multi-output op switched to it together with one needed e-class
    switched to an e-node that uses one of its unneeded outputs (a value paid for with the op)."""
    p = state.p
    outs = [(p.candidates[i].cls, i) for i in group]
    base = [(c, i) for c, i in outs if state.rc.get(c, 0)]
    if not base:
        return False
    mine = {c for c, _ in outs}
    for c, i in outs:
        if state.rc.get(c, 0) or state.reaches(state.kids[i], c):
            continue
        old = state.full[c]
        state.full[c] = i  # unneeded: its choice costs nothing until a move needs it
        for u in users.get(c, ()):
            pc = p.candidates[u].cls
            if pc not in mine and state.rc.get(pc, 0) and state.full[pc] != u:
                if _try(state, base + [(pc, u)], budget):
                    return True
        state.full[c] = old
    return False


def _try(state: _State, moves: list[tuple[int, int]], budget: list[int]) -> bool:
    """Apply the switches; keep them if the cost went down, else undo. One evaluation."""
    moves = [(c, i) for c, i in moves if state.full[c] != i]
    if not moves or budget[0] <= 0:
        return False
    budget[0] -= 1
    before, done = state.cost, []
    for cid, idx in moves:
        if state.reaches(state.kids[idx], cid):
            break
        done.append((cid, state.full[cid]))
        state.switch(cid, idx)
    else:
        if state.cost < before - 1e-9 * max(1.0, before):
            return True
    for cid, old in reversed(done):
        state.switch(cid, old)
    return False
