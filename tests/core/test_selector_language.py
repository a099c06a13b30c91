"""The resource-expression language (``core/selectors.py``): what is refused, where, and
what an accepted expression answers for a node and a device."""

from __future__ import annotations

import pytest

from trainyard.core.selectors import GpuFacts, NodeFacts, SelectorError, compile_selector

NODE = NodeFacts("n1", {"ib": "true", "rack": "r1"}, 32000, 262144, 8)
A100 = GpuFacts(3, "A100", 81920)
V100 = GpuFacts(0, "V100", 32768)


def refusal(source: str, *, gpus: bool = True) -> SelectorError:
    with pytest.raises(SelectorError) as caught:
        compile_selector(source, gpus=gpus)
    return caught.value


def test_the_example_from_the_issue_is_true_on_a_matching_device_and_false_elsewhere() -> None:
    selector = compile_selector('gpu.memoryMB >= 40000 && gpu.model in ["A100", "H100"] && node.labels["ib"] == "true"',
                                gpus=True)
    assert selector.allows(NODE, A100)
    assert not selector.allows(NODE, V100)
    assert not selector.allows(NodeFacts("n2", {}, 32000, 262144, 8), A100)  # no such label: false, not an error
    assert [c.text for c in selector.clauses] == [
        "gpu.memoryMB >= 40000", 'gpu.model in ["A100", "H100"]', 'node.labels["ib"] == "true"']


def test_every_attribute_can_be_read() -> None:
    selector = compile_selector(
        'node.name == "n1" && node.cpu == 32.0 && node.memoryMB == 262144 && node.gpus == 8 && '
        'node.labels.rack.startsWith("r") && gpu.index == 3 && gpu.model.size() == 4', gpus=True)
    assert selector.allows(NODE, A100)
    assert selector.uses_name and selector.uses_labels and selector.uses_gpu


def test_a_syntax_error_gives_its_line_and_column_with_a_caret() -> None:
    error = refusal("gpu.memoryMB >= && 3")
    assert (error.line, error.column) == (1, 17)
    assert error.message == ("syntax error: unexpected '&&' at line 1, column 17\n"
                             "  gpu.memoryMB >= && 3\n"
                             "                  ^")
    error = refusal('gpu.memoryMB >= 1 &&\n  gpu.model in ["A100"')
    assert (error.line, error.column) == (2, 23)
    assert "unexpected end of the expression" in error.message


def test_an_unknown_attribute_is_refused_with_a_suggestion() -> None:
    error = refusal("gpu.memroyMB >= 40000")
    assert (error.line, error.column) == (1, 5)
    assert "unknown attribute gpu.memroyMB (did you mean gpu.memoryMB?" in error.message
    assert "unknown attribute node.zone" in refusal('node.zone == "a"').message
    assert "unknown name gpus (did you mean gpu?" in refusal("gpus.model == 'A100'").message


def test_a_role_without_gpus_sees_only_the_node() -> None:
    assert "sees only node, not gpu" in refusal('gpu.model == "A100"', gpus=False).message
    assert compile_selector("node.cpu >= 4.0", gpus=False).allows(NODE)


@pytest.mark.parametrize("source", ['gpu.memoryMB >= "40000"', 'node.labels["ib"] > 3', "node.name + 1 == 2"])
def test_wrong_types_are_refused_at_submit(source: str) -> None:
    assert "wrong types in" in refusal(source).message


def test_an_expression_must_give_a_boolean() -> None:
    assert refusal("gpu.memoryMB + 1").message == "must be true or false; it gives a number"


def test_macros_bind_their_own_variables() -> None:
    selector = compile_selector('node.labels.exists(k, k == "ib") && ["A100", "H100"].exists(m, m == gpu.model)',
                                gpus=True)
    assert selector.allows(NODE, A100)
    assert not selector.allows(NODE, V100)


def test_splitting_into_clauses_keeps_the_meaning() -> None:
    # `||` binds looser than `&&`: splitting would change the meaning, so it is one clause
    assert len(compile_selector("node.gpus > 1 || node.cpu > 1.0 && gpu.index == 0", gpus=True).clauses) == 1
    assert len(compile_selector('(node.gpus > 1 && gpu.index == 0) && node.name != "a&&b"', gpus=True).clauses) == 2


def test_empty_and_oversized_expressions_are_refused() -> None:
    assert "must not be empty" in refusal("   ").message
    assert "at most 2000 characters" in refusal("node.gpus > 0 && " * 200 + "true").message


def test_a_comprehension_inside_another_is_refused_for_its_cost() -> None:
    error = refusal("[1, 2, 3].all(x, [1, 2, 3].exists(y, x == y))")
    assert "exists() inside all(): a comprehension may not hold another" in error.message
    assert (error.line, error.column) == (1, 28)
