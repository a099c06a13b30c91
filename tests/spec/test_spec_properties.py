"""Properties over random valid jobs: secrets never leak into the masked view, and
normalizing is a fixed point."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from trainyard.spec.loading import validate_job
from trainyard.spec.templating import MASK, masked_spec, normalized_spec, render_role

identifiers = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
job_names = st.from_regex(r"[A-Za-z0-9_-]{1,24}", fullmatch=True)
# NUL is refused at load (PostgreSQL cannot store it), so generated text leaves it out.
# Text a job file may hold: no NUL, no lone UTF-16 surrogate (category Cs).
no_nul = st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))
free_text = st.text(no_nul, max_size=15).filter(lambda text: "<%" not in text and "%>" not in text)
# A secret must hold at least one character that is not '*': a secret made of stars
# alone could never be told apart from the mask.
secret_texts = st.text(no_nul, min_size=1, max_size=12).filter(
    lambda text: text.strip("*") != "" and "<%" not in text and "%>" not in text
)
secret_leaves = secret_texts | st.integers(min_value=-(10**6), max_value=10**6)
secret_trees = st.recursive(
    secret_leaves,
    lambda children: (
        st.lists(children, min_size=1, max_size=3)
        | st.dictionaries(identifiers, children, min_size=1, max_size=3)
    ),
    max_leaves=8,
)
parameter_trees = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | free_text,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(identifiers, children, max_size=3)
    ),
    max_leaves=8,
)


def leaf_paths(value: Any, prefix: str = "") -> Iterator[str]:
    """Placeholder paths (``a.b``, ``keys[0]``) to every scalar inside ``value``."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from leaf_paths(item, f"{prefix}.{key}" if prefix else key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from leaf_paths(item, f"{prefix}[{index}]")
    else:
        yield prefix


def secret_values(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for item in value.values():
            yield from secret_values(item)
    elif isinstance(value, list):
        for item in value:
            yield from secret_values(item)
    else:
        yield str(value)


def string_values(value: Any) -> Iterator[str]:
    """Every string value in a dumped spec (map keys are names, not values)."""
    if isinstance(value, dict):
        for item in value.values():
            yield from string_values(item)
    elif isinstance(value, list):
        for item in value:
            yield from string_values(item)
    elif isinstance(value, str):
        yield value


@st.composite
def valid_jobs(draw: st.DrawFn) -> dict[str, Any]:
    parameters = draw(st.dictionaries(identifiers, parameter_trees, max_size=4))
    secrets = draw(st.dictionaries(identifiers, secret_trees, min_size=1, max_size=4))
    references = [f"$parameters.{path}" for path in leaf_paths(parameters)]
    references += [f"$secrets.{path}" for path in leaf_paths(secrets)]
    pasted = list(secret_values(secrets))  # users do paste secrets into commands

    def text_with_placeholders() -> str:
        parts = draw(
            st.lists(
                free_text
                | st.sampled_from(references).map(lambda ref: f"<% {ref} %>")
                | st.sampled_from(pasted),
                max_size=4,
            )
        )
        return "run " + "".join(parts)

    roles: dict[str, Any] = {}
    for name in draw(st.lists(identifiers, min_size=1, max_size=3, unique=True)):
        instances = draw(st.integers(min_value=1, max_value=4))
        roles[name] = {
            "instances": instances,
            "completion": {
                "minFailedInstances": draw(st.sampled_from([-1, None, *range(1, instances + 1)])),
                "minSucceededInstances": draw(st.sampled_from([-1, None, instances])),
            },
            "resourcePerInstance": {
                "gpu": draw(st.sampled_from([0, 0.25, 0.5, 1, 2, 8])),
                "cpu": draw(st.sampled_from([0.5, 1, 4])),
                "memoryMB": draw(st.integers(min_value=1, max_value=65536)),
            },
            "commands": [text_with_placeholders() for _ in range(draw(st.integers(1, 3)))],
            "env": {
                key: text_with_placeholders()
                for key in draw(st.lists(identifiers, max_size=3, unique=True))
            },
        }
    return {
        "name": draw(job_names),
        "description": draw(st.none() | st.sampled_from(pasted)),
        "priority": draw(st.sampled_from(["prod", "normal", "low", "oppo"])),
        "parameters": parameters,
        "secrets": secrets,
        "taskRoles": roles,
        "tags": draw(st.lists(st.sampled_from(pasted).filter(str.strip), max_size=2)),
    }


@settings(max_examples=150, deadline=None)
@given(valid_jobs())
def test_the_masked_spec_never_contains_a_secret_value(document: dict[str, Any]) -> None:
    spec = validate_job(document)
    secrets = set(secret_values(document["secrets"]))

    masked = masked_spec(spec)

    assert set(secret_values(masked["secrets"])) == {MASK}
    for text in string_values(masked):
        for secret in secrets:
            assert secret not in text


@settings(max_examples=100, deadline=None)
@given(valid_jobs())
def test_normalizing_a_normalized_spec_changes_nothing(document: dict[str, Any]) -> None:
    first = normalized_spec(validate_job(document))

    assert normalized_spec(validate_job(first)) == first


@settings(max_examples=100, deadline=None)
@given(valid_jobs())
def test_every_placeholder_of_a_valid_job_renders(document: dict[str, Any]) -> None:
    spec = validate_job(document)

    for role in spec.role_names:
        commands, env = render_role(spec, role)
        assert len(commands) == len(spec.taskRoles[role].commands)
        assert set(env) == set(spec.taskRoles[role].env)
