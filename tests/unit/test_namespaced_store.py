"""The EndpointSlice informer's store (k8s_watcher.informer.NamespacedStore) behaves as
the dictionary it replaces, keyed "namespace/name" (or "name"), after any sequence of
writes and deletions: look-ups, get() with and without a default (its own, which raises
no KeyError for an absent key), membership, length and iteration."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from k8s_watcher.informer import NamespacedStore

KEYS = ["a/x", "a/y", "b/x", "x", "y", "c/a/b"]

ops = st.lists(
    st.tuples(st.sampled_from(["set", "del"]), st.sampled_from(KEYS), st.integers(0, 3)),
    max_size=40,
)


def _name(value: tuple[str, int]) -> str:
    return value[0]


@settings(max_examples=200, deadline=None)
@given(ops=ops)
def test_the_store_equals_a_dictionary(ops: list[tuple[str, str, int]]) -> None:
    store: NamespacedStore[tuple[str, int]] = NamespacedStore(_name)
    live: dict[str, tuple[str, int]] = {}
    for op, key, number in ops:
        if op == "set":
            value = (key.rpartition("/")[2], number)
            store[key] = value
            live[key] = value
        else:
            assert store.pop(key, None) == live.pop(key, None)
        assert dict(store.items()) == live
        assert len(store) == len(live)
        for k in KEYS:
            assert (k in store) == (k in live)
            assert store.get(k) == live.get(k)
            assert store.get(k, ("none", -1)) == live.get(k, ("none", -1))
            if k in live:
                assert store[k] == live[k]
