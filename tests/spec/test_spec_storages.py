"""The job file's storages: Trainyard's ``storages`` field and OpenPAI's declarations in
``extras``, each problem at its field path, and what each task role mounts."""

from __future__ import annotations

import pytest

from trainyard.spec.errors import SpecError
from trainyard.spec.loading import parse_job
from trainyard.spec.storages import StorageUse, storage_uses, storage_variable

ROLE = "taskRoles:\n  w:\n    commands: [run]\n"


def errors_of(text: str) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as caught:
        parse_job(text)
    return [(e.path, e.message) for e in caught.value.errors]


@pytest.mark.parametrize(("storages", "path", "message"), [
    ("[{name: data, mountPath: data}]", "storages[0].mountPath", "must be an absolute path (got 'data')"),
    ("[{name: data, mountPath: /a/../etc}]", "storages[0].mountPath", "must not contain '..' (got '/a/../etc')"),
    ("[{name: data, mountPath: /}]", "storages[0].mountPath", "cannot be / itself"),
    ("[{name: data, subPath: ../x}]", "storages[0].subPath", "must stay inside the storage: no '..' (got '../x')"),
    ("[{name: data, subPath: /x}]", "storages[0].subPath", "must be a path relative to the storage (got '/x')"),
    ("[{name: Data}]", "storages[0].name", "must be a storage's name: lowercase letters, digits, '_' and '-', "
                                           "starting with a letter (or @group for a group's storage) (got 'Data')"),
    ("[{name: data, readOnly: 1}]", "storages[0].readOnly", None),
    ("[{name: data, size: 1}]", "storages[0].size", None),
    ("[{name: data}, {name: data}]", "storages[1].name", "storage 'data' is listed twice"),
    # A container engine's --volume reads ':' as options: "/mnt/x:U" chowned a whole storage.
    ("[{name: data, mountPath: '/mnt/x:U'}]", "storages[0].mountPath",
     "must not contain ':' or ',' (a container engine reads them as options; got '/mnt/x:U')"),
    ("[{name: data, subPath: 'a,b'}]", "storages[0].subPath",
     "must not contain ':' or ',' (a container engine reads them as options; got 'a,b')"),
])
def test_each_bad_storage_declaration_is_reported_at_its_path(storages: str, path: str, message: str | None) -> None:
    found = errors_of(f"name: j\nstorages: {storages}\n{ROLE}")
    assert found[0][0] == path
    if message is not None:
        assert found[0][1] == message


@pytest.mark.parametrize(("extras", "path"), [
    ("{com.microsoft.pai.runtimeplugin: [{plugin: teamwise_storage, parameters: {}}]}",
     "extras.com.microsoft.pai.runtimeplugin[0].parameters.storageConfigNames"),
    ("{com.microsoft.pai.runtimeplugin: [{plugin: teamwise_storage, parameters: {storageConfigNames: [1]}}]}",
     "extras.com.microsoft.pai.runtimeplugin[0].parameters.storageConfigNames[0]"),
    ("{storages: {name: data}}", "extras.storages"),
    ("{storages: [data]}", "extras.storages[0]"),
    ("{storages: [{name: data, mountPath: rel}]}", "extras.storages[0].mountPath"),
    ("{storages: [{mountPath: /x}]}", "extras.storages[0].name"),
])
def test_openpai_storage_declarations_are_checked_at_their_paths(extras: str, path: str) -> None:
    assert errors_of(f"name: j\nextras: {extras}\n{ROLE}")[0][0] == path


def test_each_role_mounts_openpai_s_then_the_job_s_then_its_own_storages() -> None:
    spec = parse_job(
        "name: j\nextras:\n  com.microsoft.pai.runtimeplugin: [{plugin: teamwise_storage, parameters: "
        "{storageConfigNames: [nfs, data]}}]\n  storages: [{name: blob}]\n"
        "storages: [{name: data, mountPath: /data/./, readOnly: true}]\n"
        "taskRoles:\n  a:\n    commands: [run]\n    storages: [{name: scratch, subPath: a/./b}, {name: '@cv'}]\n"
        "  b:\n    commands: [run]\n"
    )
    assert storage_uses(spec, "a") == [
        StorageUse("nfs", "extras.com.microsoft.pai.runtimeplugin[0].parameters.storageConfigNames[0]", "/mnt/nfs"),
        StorageUse("data", "storages[0]", "/data", True),
        StorageUse("blob", "extras.storages[0]", "/mnt/blob"),
        StorageUse("scratch", "taskRoles.a.storages[0]", None, None, "a/b"),
        StorageUse("@cv", "taskRoles.a.storages[1]"),
    ]
    assert [u.name for u in storage_uses(spec, "b")] == ["nfs", "data", "blob"]


def test_storage_variables_are_valid_names() -> None:
    assert storage_variable("data") == "TRAINYARD_STORAGE_DATA"
    assert storage_variable("my-data") == "TRAINYARD_STORAGE_MY_DATA"
    assert storage_variable("@cv") == "TRAINYARD_STORAGE_GROUP_CV"
