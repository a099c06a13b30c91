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


def test_tf_config_names_every_task_by_role_with_its_tf_port_else_its_first_else_master_port_plus_rank() -> None:
    import json

    from trainyard.core.wiring import tf_config

    config = json.loads(tf_config(wiring(), "worker", 1))
    # ps (rank 0) declares no port: MASTER_PORT; the workers their first (ssh) port.
    assert config == {"cluster": {"ps": ["10.0.0.1:29500"], "worker": ["10.0.0.1:2200", "10.0.0.2:2201"]},
                      "task": {"type": "worker", "index": 1}}
    bare = JobWiring(**{**wiring().__dict__, "tasks": [PlacedTask(t.role, t.index, t.node, t.address)
                                                       for t in wiring().tasks]})
    assert json.loads(tf_config(bare, "ps", 0))["cluster"]["worker"] == ["10.0.0.1:29501", "10.0.0.2:29502"]
    tf_port = PlacedTask("worker", 1, "n2", "10.0.0.2", (0,), {"ssh": [2201], "tf": [2300]})
    labelled = JobWiring(**{**wiring().__dict__, "tasks": [*wiring().tasks[1:], tf_port]})
    assert json.loads(tf_config(labelled, "ps", 0))["cluster"]["worker"][1] == "10.0.0.2:2300"


def test_tf_roles_take_tensorflows_names_where_they_map_and_unique_else_their_own() -> None:
    from trainyard.core.wiring import tf_roles

    assert tf_roles(["Master", "workers", "parameter_server", "eval"]) == {
        "Master": "chief", "workers": "worker", "parameter_server": "ps", "eval": "evaluator"}
    assert tf_roles(["trainer", "gen"]) == {"trainer": "worker", "gen": "gen"}
    assert tf_roles(["worker", "workers"]) == {"worker": "worker", "workers": "workers"}  # no two as one


def test_mpi_hosts_count_the_jobs_tasks_per_node_and_one_task_jobs_get_no_tf_nor_mpi() -> None:
    env = task_env(wiring(), "ps", 0)
    assert env["TRAINYARD_MPI_HOSTS"] == "10.0.0.1:2,10.0.0.2:1"
    alone = JobWiring(**{**wiring().__dict__, "roles": ["ps"], "tasks": [wiring().tasks[2]]})
    assert "TF_CONFIG" not in task_env(alone, "ps", 0) and "TRAINYARD_MPI_HOSTS" not in task_env(alone, "ps", 0)


def test_horovod_ranks_match_torchruns_and_cross_ranks_count_nodes_per_local_rank() -> None:
    # ps/0 and worker/0 on n1 (local ranks 0 and 1), worker/1 on n2 (local rank 0).
    envs = {(r, i): task_env(wiring(), r, i) for r, i in [("ps", 0), ("worker", 0), ("worker", 1)]}
    seen = {key: tuple(env[f"HOROVOD_{v}"] for v in ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK",
                                                      "CROSS_SIZE"))
            for key, env in envs.items()}
    assert seen == {("ps", 0): ("0", "3", "0", "2", "0", "2"), ("worker", 0): ("1", "3", "1", "2", "0", "1"),
                    ("worker", 1): ("2", "3", "0", "1", "1", "2")}
    assert all(env["HOROVOD_RANK"] == env["RANK"] and env["HOROVOD_HOSTNAME"] == env["PAI_CONTAINER_HOST_IP"]
               for env in envs.values())


def test_an_elastic_roles_workers_rendezvous_at_the_first_workers_peer_port_at_the_size_they_run_at() -> None:
    from trainyard.core.wiring import elastic_env

    job = JobWiring(job_id=9, job_name="el", user="alice", attempt=0, roles=["worker"],
                    tasks=[PlacedTask("worker", 3, "n2", "10.0.0.2", (0,), {"peer": [4003]}),
                           PlacedTask("worker", 0, "n1", "10.0.0.1", (0,), {"peer": [4000]})],
                    master_port=29500)
    first, other = elastic_env(job, "worker", 0, 1, 4, 2), elastic_env(job, "worker", 3, 1, 4, 2)
    assert first["TRAINYARD_RDZV_ENDPOINT"] == other["TRAINYARD_RDZV_ENDPOINT"] == "10.0.0.1:4000"
    assert (first["TRAINYARD_RDZV_CONF"], other["TRAINYARD_RDZV_CONF"]) == ("is_host=1", "is_host=0")
    assert first["TRAINYARD_NNODES"] == "2" and first["TRAINYARD_RDZV_ID"] == "trainyard-9-0-2"
    assert (first["TRAINYARD_ELASTIC_MIN"], first["TRAINYARD_ELASTIC_MAX"]) == ("1", "4")
    assert first["TRAINYARD_TORCHRUN"].split() == [
        "--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=10.0.0.1:4000", "--rdzv-id=trainyard-9-0-2",
        "--rdzv-conf=is_host=1", "--local-addr=10.0.0.1"]
    assert other["TRAINYARD_TORCHRUN"].split()[-1] == "--local-addr=10.0.0.2"  # where the other nodes reach it
    # On one node's loopback address (the local backend) each worker names itself apart: in the
    # sandbox every agent is pid 2, and torchrun tells agents apart by (address, pid).
    local = JobWiring(job_id=9, job_name="el", user="alice", attempt=0, roles=["worker"],
                      tasks=[PlacedTask("worker", i, "vm", "127.0.0.1", (i,), {"peer": [4000 + i]}) for i in range(3)],
                      master_port=29500)
    addresses = [elastic_env(local, "worker", i, 1, 3, 0)["TRAINYARD_TORCHRUN"].split()[-1] for i in range(3)]
    assert addresses == ["--local-addr=127.0.0.1", "--local-addr=127.0.0.2", "--local-addr=127.0.0.3"]
    assert {elastic_env(local, "worker", i, 1, 3, 0)["TRAINYARD_RDZV_ENDPOINT"] for i in range(3)} == {"127.0.0.1:4000"}


def test_workers_sharing_a_node_address_get_host_names_of_their_own_that_every_worker_resolves() -> None:
    """For a sandbox with its own process numbering (Slurm with per-user accounts): workers at
    one (non-loopback) address get names; a worker alone at its address keeps it and looks
    the others' names up; other roles and loopback addresses get none."""
    from trainyard.core.wiring import agent_names, elastic_env, named_agent

    job = JobWiring(job_id=9, job_name="el", user="alice", attempt=0, roles=["ps", "my_worker"],
                    tasks=[PlacedTask("ps", 0, "n1", "10.0.0.1"),
                           *(PlacedTask("my_worker", i, node, address, (i,), {"peer": [4000 + i]})
                             for i, node, address in [(0, "n1", "10.0.0.1"), (1, "n2", "10.0.0.2"),
                                                      (2, "n1", "10.0.0.1")])],
                    master_port=29500)

    def env(role: str, index: int) -> dict[str, str]:
        extra = elastic_env(job, role, index, 1, 3, 0) if role == "my_worker" else {}
        return {**task_env(job, role, index), **extra}

    table = {"trainyard-worker-0": "10.0.0.1", "trainyard-worker-2": "10.0.0.1"}
    assert agent_names(env("my_worker", 0)) == ("trainyard-worker-0", table)
    assert agent_names(env("my_worker", 2)) == ("trainyard-worker-2", table)
    assert agent_names(env("my_worker", 1)) == (None, table)  # alone on n2: its address, the others' names
    assert agent_names(env("ps", 0)) == (None, {})  # not elastic
    named = named_agent(env("my_worker", 2), "trainyard-worker-2")
    assert named["TRAINYARD_TORCHRUN"].split()[-1] == "--local-addr=trainyard-worker-2"
    local = JobWiring(job_id=9, job_name="el", user="alice", attempt=0, roles=["w"],
                      tasks=[PlacedTask("w", i, "vm", "127.0.0.1", (i,), {"peer": [4000 + i]}) for i in range(2)],
                      master_port=29500)
    assert agent_names({**task_env(local, "w", 1), **elastic_env(local, "w", 1, 1, 2, 0)}) == (None, {})
