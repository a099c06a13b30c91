"""A job file's ``sweep`` section: grid points in nested-loop order, list points as given,
each member's document (parameters overridden, name, the sweep's variables), and every
problem at its field."""

from __future__ import annotations

import json

import pytest

from trainyard.spec import sweeps
from trainyard.spec.errors import SpecError


def paths(section: object) -> list[str]:
    with pytest.raises(SpecError) as error:
        sweeps.parse(section)
    return [e.path for e in error.value.errors]


def test_a_grid_is_every_combination_the_last_key_fastest_and_a_list_is_its_points() -> None:
    grid = sweeps.parse({"grid": {"a": [1, 2], "b": ["x", "y", "z"]}, "parallel": 2, "metric": {"name": "loss"}})
    assert grid.points == ({"a": 1, "b": "x"}, {"a": 1, "b": "y"}, {"a": 1, "b": "z"},
                           {"a": 2, "b": "x"}, {"a": 2, "b": "y"}, {"a": 2, "b": "z"})
    assert grid.parallel == 2 and grid.metric == sweeps.Metric(name="loss")
    listed = sweeps.parse({"list": [{"a": 1}, {"b": [1, 2]}], "metric": {"pattern": "loss=(\\d+)"}})
    assert listed.points == ({"a": 1}, {"b": [1, 2]}) and listed.metric == sweeps.Metric(pattern="loss=(\\d+)")


def test_a_members_document_has_its_point_its_index_and_the_sweeps_variables() -> None:
    document = {"name": "n", "parameters": {"a": 0, "keep": 1},
                "taskRoles": {"r": {"commands": ["x"], "env": {"MINE": "1"}}, "s": {"commands": ["y"]}}}
    member = sweeps.member_document(document, {"a": 5}, 3, 7)
    assert member["name"] == "n-3" and member["parameters"] == {"a": 5, "keep": 1}
    assert member["taskRoles"]["r"]["env"]["MINE"] == "1"
    for role in member["taskRoles"].values():
        env = role["env"]
        assert (env["TRAINYARD_SWEEP_ID"], env["TRAINYARD_SWEEP_INDEX"]) == ("7", "3")
        assert json.loads(env["TRAINYARD_SWEEP_PARAMS"]) == {"a": 5}
    assert document["parameters"] == {"a": 0, "keep": 1}  # the file itself is untouched
    assert len(sweeps.member_document({**document, "name": "x" * 255}, {}, 12, 1)["name"]) == 255


def test_every_problem_is_at_its_field() -> None:
    assert paths([1]) == ["sweep"]
    assert paths({}) == ["sweep"]  # neither grid nor list
    assert paths({"grid": {"a": [1]}, "list": [{"a": 1}]}) == ["sweep"]
    assert paths({"grid": {"a": [1]}, "extra": 1}) == ["sweep.extra"]
    assert paths({"grid": {"a": 1, "1b": [2]}}) == ["sweep.grid.1b", "sweep.grid.a"]
    assert paths({"list": [{"a": 1}, "b"]}) == ["sweep.list[1]"]
    assert paths({"grid": {"a": [1]}, "parallel": True}) == ["sweep.parallel"]
    assert paths({"grid": {"a": [1]}, "metric": {"name": "x", "pattern": "y"}}) == ["sweep.metric"]
    assert paths({"grid": {"a": [1]}, "metric": {"pattern": "(["}}) == ["sweep.metric.pattern"]
    too_many = {"grid": {"a": list(range(sweeps.MAX_SWEEP_JOBS)), "b": [1, 2]}}
    assert paths(too_many) == ["sweep.grid"]
    assert paths({"list": [{}] * (sweeps.MAX_SWEEP_JOBS + 1)}) == ["sweep.list"]


def test_a_sweep_name_close_to_a_parameter_the_file_declares_or_uses_is_refused_as_misspelt() -> None:
    from trainyard.spec.errors import SpecError
    from trainyard.spec.sweeps import split

    with pytest.raises(SpecError) as refused:
        split({"parameters": {"lr": 0.1, "epochs": 3}, "sweep": {"grid": {"lrr": [0.1, 0.2], "batch": [8]}}})
    assert [(e.path, e.message) for e in refused.value.errors] == [
        ("sweep.grid.lrr", "not a parameter of the job file; did you mean 'lr'? (its parameters: epochs, lr)")]
    used = {"taskRoles": {"m": {"commands": ["train --seed <% $parameters.seed %>"]}}}
    with pytest.raises(SpecError, match="did you mean 'seed'"):
        split({**used, "sweep": {"list": [{"sed": 1}]}})
    sweep, _ = split({**used, "sweep": {"list": [{"batch": 1}]}})  # a new name: read from TRAINYARD_SWEEP_PARAMS
    assert sweep is not None and sweep.points == ({"batch": 1},)


def test_a_sweep_whose_jobs_files_would_add_up_past_the_bound_is_refused() -> None:
    from trainyard.spec.errors import SpecError
    from trainyard.spec.sweeps import split

    big = {"name": "s", "parameters": {"blob": "x" * 200_000, "i": 0},
           "sweep": {"list": [{"i": i} for i in range(1000)]}}
    with pytest.raises(SpecError, match="more than 32 MiB of job files in all"):
        split(big)
