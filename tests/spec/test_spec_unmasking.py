"""A job shown masked and submitted again: masked values are filled from the stored original,
and a mask nothing can fill is refused at its path rather than run as the secret."""

from __future__ import annotations

import copy

import pytest

from trainyard.spec.errors import SpecError
from trainyard.spec.loading import validate_job
from trainyard.spec.templating import MASK, masked_secret_paths, masked_spec, normalized_spec, unmasked

ORIGINAL = validate_job(
    {
        "name": "train",
        "secrets": {"wandb": "wb-key-123", "db": {"password": "hunter2", "port": 5432}},
        "taskRoles": {"main": {"commands": ["login wb-key-123 && train", "echo <% $secrets.db.password %>"]}},
    }
)


def test_the_job_as_shown_comes_back_whole_with_its_secrets() -> None:
    shown = masked_spec(ORIGINAL)
    assert shown["secrets"]["wandb"] == MASK and MASK in shown["taskRoles"]["main"]["commands"][0]
    assert unmasked(shown, ORIGINAL) == normalized_spec(ORIGINAL)


def test_an_edit_keeps_the_masked_secrets_and_the_change() -> None:
    shown = masked_spec(ORIGINAL)
    shown["taskRoles"]["main"]["commands"][1] = "echo changed"
    shown["name"] = "train-2"
    filled = unmasked(shown, ORIGINAL)
    assert filled["secrets"] == {"wandb": "wb-key-123", "db": {"password": "hunter2", "port": 5432}}
    assert filled["taskRoles"]["main"]["commands"] == ["login wb-key-123 && train", "echo changed"]
    assert filled["name"] == "train-2"


def test_a_secret_written_out_replaces_the_original() -> None:
    shown = masked_spec(ORIGINAL)
    shown["secrets"]["wandb"] = "new-key"
    assert unmasked(shown, ORIGINAL)["secrets"]["wandb"] == "new-key"


def test_a_masked_secret_the_original_does_not_have_is_refused_at_its_path() -> None:
    shown = masked_spec(ORIGINAL)
    shown["secrets"]["other"] = MASK
    with pytest.raises(SpecError) as refused:
        unmasked(shown, ORIGINAL)
    assert [e.path for e in refused.value.errors] == ["secrets.other"]
    assert "write the secret's value" in refused.value.errors[0].message


def test_a_text_that_hid_a_secret_and_was_edited_around_the_mask_is_refused() -> None:
    shown = masked_spec(ORIGINAL)
    shown["taskRoles"]["main"]["commands"][0] += " --fast"
    with pytest.raises(SpecError) as refused:
        unmasked(shown, ORIGINAL)
    assert [e.path for e in refused.value.errors] == ["taskRoles.main.commands[0]"]


def test_a_mask_written_where_no_secret_was_is_left_as_written() -> None:
    shown = masked_spec(ORIGINAL)
    shown["taskRoles"]["main"]["commands"].append(f"echo '{MASK}'")
    assert unmasked(shown, ORIGINAL)["taskRoles"]["main"]["commands"][-1] == f"echo '{MASK}'"


def test_unmasking_does_not_change_the_document_it_was_given() -> None:
    shown = masked_spec(ORIGINAL)
    before = copy.deepcopy(shown)
    unmasked(shown, ORIGINAL)
    assert shown == before


def test_secrets_that_are_the_mask_itself_are_found_by_path() -> None:
    assert masked_secret_paths(ORIGINAL) == []
    copied = validate_job(masked_spec(ORIGINAL))
    assert masked_secret_paths(copied) == ["secrets.wandb", "secrets.db.password", "secrets.db.port"]
