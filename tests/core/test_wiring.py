from __future__ import annotations

from trainyard.core.wiring import JobWiring, PlacedTask, task_env


def wiring() -> JobWiring:
    return JobWiring(
        job_id=7,
        job_name="tf",
        user="alice",
        attempt=1,
        roles=["ps", "worker"],
        tasks=[
            PlacedTask("worker", 1, "n2", "10.0.0.2", (0,), {"ssh": [2201]}),
            PlacedTask("worker", 0, "n1", "10.0.0.1", (1,), {"ssh": [2200]}),
            PlacedTask("ps", 0, "n1", "10.0.0.1", (), {}),
        ],
        master_port=29500,
        resources={"worker": "1,4,8192,0"},
    )


def test_ranks_follow_role_declaration_order_then_index() -> None:
    ranks = {(r, i): task_env(wiring(), r, i)["RANK"] for r, i in [("ps", 0), ("worker", 0), ("worker", 1)]}
    assert ranks == {("ps", 0): "0", ("worker", 0): "1", ("worker", 1): "2"}


def test_master_is_the_first_task_and_every_task_agrees() -> None:
    envs = [task_env(wiring(), r, i) for r, i in [("ps", 0), ("worker", 0), ("worker", 1)]]
    assert {(e["MASTER_ADDR"], e["MASTER_PORT"], e["WORLD_SIZE"]) for e in envs} == {("10.0.0.1", "29500", "3")}


def test_local_rank_counts_tasks_on_the_same_node() -> None:
    assert task_env(wiring(), "ps", 0)["LOCAL_RANK"] == "0"
    assert task_env(wiring(), "worker", 0)["LOCAL_RANK"] == "1"
    assert task_env(wiring(), "worker", 1)["LOCAL_RANK"] == "0"
    assert task_env(wiring(), "worker", 1)["NODE_RANK"] == "1"


def test_openpai_variables_describe_every_role_and_port() -> None:
    env = task_env(wiring(), "worker", 1)
    assert env["PAI_JOB_NAME"] == "tf" and env["PAI_USER_NAME"] == "alice"
    assert env["PAI_TASK_ROLE_LIST"] == "ps,worker"
    assert env["PAI_CURRENT_TASK_ROLE_NAME"] == "worker"
    assert env["PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"] == "1"
    assert env["PAI_TASK_ROLE_worker_HOST_LIST"] == "10.0.0.1,10.0.0.2"
    assert env["PAI_TASK_ROLE_TASK_COUNT_worker"] == "2"
    assert env["PAI_PORT_LIST_worker_0_ssh"] == "2200"
    assert env["PAI_PORT_LIST_worker_1_ssh"] == "2201"
    assert env["PAI_RESOURCE_worker"] == "1,4,8192,0"
    assert (env["TRAINYARD_JOB_ID"], env["TRAINYARD_ATTEMPT"]) == ("7", "1")
