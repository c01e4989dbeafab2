"""Private tasks pass ``dpcore`` objects past Prefect's parameter walk (``tasks.common.SealedArgsTask``).

Prefect walks every task parameter element by element (``visit_collection``) to find upstream futures and
states; on a spec with a 4,000-value domain that walk cost about a third of a small release. A ``dpcore``
object never holds a future, so a private task's direct call carries it through unwalked, and the task's
function receives the very object it was given.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest
from prefect import flow
from prefect.states import Completed, State

from dpcore.release.spec import ReleaseSpec, load_spec
from tasks.common import _seal, _Sealed, private_task

pytestmark = pytest.mark.usefixtures("prefect_harness")


@dataclass
class Box:
    item: object


class _Plain:
    pass


@private_task(name="sealed-probe")
def _probe(spec, box, plain, number):
    return spec, box, plain, number


def test_a_dpcore_object_reaches_the_task_itself_and_unwalked():
    """The spec arrives as the same object; a State inside a dpcore object is not resolved (no walk); objects of
    other modules are Prefect's as before (a State inside them is resolved to its result)."""
    Box.__module__ = "dpcore.probe"  # a dpcore class (dpcore itself never holds a Prefect state)
    spec = load_spec("specs/demo.yaml")
    box = Box(Completed(data=5))

    @flow(name="sealed-probe-flow")
    def run():
        return _probe(spec, box, [Completed(data=6)], 7)

    got_spec, got_box, got_plain, got_number = run()
    assert got_spec is spec and isinstance(got_spec, ReleaseSpec)
    assert got_box is box and isinstance(got_box.item, State)  # Prefect did not look inside
    assert got_plain == [6]  # a list is walked as before: the state inside is resolved
    assert got_number == 7


def test_only_objects_of_dpcore_classes_are_sealed():
    Box.__module__ = "dpcore.probe"
    assert isinstance(_seal(Box(1)), _Sealed)
    for value in (1, "x", [1], {"a": 1}, _Plain(), Box):  # Box the class itself is not an instance
        assert _seal(value) is value
