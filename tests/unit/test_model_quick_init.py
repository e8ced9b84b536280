"""bgpd.model.quick_init: the frozen types the API's objects are converted into get a
faster ``__init__`` (issue 18's cold start), which must be the dataclass's in all but
speed: the same signature (names, order, defaults, factories), the same instance for any
arguments, still frozen; and types it cannot serve exactly are refused at import."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bgpd import model
from bgpd.model import EMPTY_LABELS, quick_init

QUICK = [model.ServicePort, model.Service, model.Endpoint, model.EndpointSlice, model.Node]
QUICK += [model.Namespace]


def _twin(cls: type[Any]) -> type[Any]:
    """The same fields as a plain frozen, slotted dataclass: the reference constructor."""
    return dataclasses.make_dataclass(
        f"Twin{cls.__name__}",
        [(f.name, f.type, f) for f in dataclasses.fields(cls)],
        frozen=True,
        slots=True,
    )


def _values(obj: Any) -> tuple[Any, ...]:
    return tuple(getattr(obj, f.name) for f in dataclasses.fields(obj))


@pytest.mark.parametrize("cls", QUICK, ids=lambda c: c.__name__)
def test_the_edge_types_are_built_by_quick_init_with_the_dataclass_signature(
    cls: type[Any],
) -> None:
    assert cls.__init__.__qualname__ == f"{cls.__name__}.__init__"
    assert "_set_" in " ".join(cls.__init__.__code__.co_names)
    assert str(inspect.signature(cls)) == str(inspect.signature(_twin(cls)))


#: Any value: quick_init stores what it is given, as the dataclass does.
value = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=3), st.just(()))


@settings(max_examples=300, deadline=None)
@given(data=st.data(), cls=st.sampled_from(QUICK))
def test_any_arguments_build_the_instance_the_dataclass_would(
    data: st.DataObject, cls: type[Any]
) -> None:
    fields = dataclasses.fields(cls)
    required = [f for f in fields if f.default is f.default_factory is dataclasses.MISSING]
    optional = [f for f in fields if f not in required]
    args = [data.draw(value) for _ in required]
    given_optional = data.draw(st.lists(st.sampled_from(optional), unique=True))
    kwargs = {f.name: data.draw(value) for f in given_optional}
    quick, reference = cls(*args, **kwargs), _twin(cls)(*args, **kwargs)
    assert _values(quick) == _values(reference)
    for f in optional:
        if f.name not in kwargs:
            assert getattr(quick, f.name) is getattr(reference, f.name)


def test_an_instance_stays_frozen() -> None:
    service = model.Service("shop", "web")
    assert service.labels is EMPTY_LABELS
    with pytest.raises(dataclasses.FrozenInstanceError):
        service.name = "other"  # type: ignore[misc]


def test_positional_and_keyword_arguments_are_the_dataclass_ones() -> None:
    port = model.ServicePort(443, name="https")
    assert (port.port, port.protocol, port.name) == (443, "TCP", "https")
    with pytest.raises(TypeError):
        model.ServicePort()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        model.ServicePort(80, nope=1)  # type: ignore[call-arg]


@dataclasses.dataclass(slots=True)
class Mutable:
    a: int


@dataclasses.dataclass(frozen=True)
class Unslotted:
    a: int


@dataclasses.dataclass(frozen=True, slots=True)
class PostInit:
    a: int

    def __post_init__(self) -> None:
        pass


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class KeywordOnly:
    a: int


@dataclasses.dataclass(frozen=True, slots=True)
class NotInInit:
    a: int = dataclasses.field(default=0, init=False)


@pytest.mark.parametrize("cls", [Mutable, Unslotted, PostInit, KeywordOnly, NotInInit, int])
def test_what_it_cannot_build_exactly_is_refused(cls: type[Any]) -> None:
    with pytest.raises(TypeError, match="quick_init"):
        quick_init(cls)
