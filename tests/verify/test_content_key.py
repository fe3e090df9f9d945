"""`corrector.content_key`: equal contents, equal keys; frozen arrays hashed once; a changed
array never keeps a stale key."""

from __future__ import annotations

import numpy as np

from einsat.ir.graph import _frozen
from einsat.verify import corrector
from einsat.verify.corrector import content_key


def test_keys_follow_dtype_shape_and_values():
    a = np.arange(6, dtype=np.float32)
    assert content_key(a) == content_key(a.copy())
    assert content_key(a) != content_key(a.astype(np.float64))
    assert content_key(a) != content_key(a.reshape(2, 3))
    b = a.copy()
    b[3] += 1
    assert content_key(a) != content_key(b)


def test_a_frozen_array_is_hashed_once_and_a_writeable_one_every_time(monkeypatch):
    calls = []
    real = corrector.hashlib.blake2b
    monkeypatch.setattr(corrector.hashlib, "blake2b", lambda *a, **k: calls.append(1) or real(*a, **k))
    frozen = _frozen(np.arange(12, dtype=np.float32))
    first = content_key(frozen)
    assert content_key(frozen) == first and len(calls) == 1
    live = np.arange(12, dtype=np.float32)
    assert content_key(live) == first
    live[0] = 7.0
    assert content_key(live) != first and len(calls) == 3  # never cached: its values can change
    view = frozen[2:]  # read-only but not owning its memory: hashed each time
    content_key(view), content_key(view)
    assert len(calls) == 5


def test_a_collected_arrays_key_is_forgotten():
    frozen = _frozen(np.full(5, 3.0))
    ident = id(frozen)
    content_key(frozen)
    assert corrector._KEYS[ident][0]() is frozen
    del frozen  # no cycle holds it: freed at once
    assert ident not in corrector._KEYS
    for value in (1.0, 2.0, 3.0):  # new arrays (ids may be reused) get their own keys
        assert content_key(_frozen(np.full(5, value))) == content_key(np.full(5, value))
