"""Issue 3 live, against a real `yard up`: VCs take their share back, reasons, run-time limits."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from deadlines import scaled

from e2e.server import Server, wait_until
from e2e.shared import shared_server
from trainyard.cli import render
from trainyard.client import Client
from trainyard.schemas.jobs import PendingView

pytestmark = pytest.mark.e2e

GRACE = 3


@pytest.fixture
def eight_gpus(request: pytest.FixtureRequest) -> Iterator[Server]:
    """The module's one 8-GPU `yard up`, idle at each test's start (tests/e2e/shared.py); the
    VCs the tests make stay, and ``two_vcs`` puts their limits back as they were made."""
    yield from shared_server(request, "eight", gpus=8)


def two_vcs(server: Server) -> tuple[Client, Client, Client]:
    """VCs vision (alice) and speech (bob), 4 GPUs each, with no borrowing limit, and no user
    quota for alice (made by the first test to ask); the admin's, alice's and bob's clients
    (alice's token is kept as ``alice.token`` for the CLI)."""
    admin = server.admin()
    tokens = server.add_users("alice", "bob")
    if "vision" not in {vc.name for vc in admin.vcs()}:
        admin.create_vc("vision", gpus=4)
        admin.create_vc("speech", gpus=4)
        admin.grant_vc("vision", "alice")
        admin.grant_vc("speech", "bob")
    admin.set_vc_borrowing("vision", borrow_limit=None)
    admin.set_quota("alice", priority="prod", gpus=None)
    alice = Client(server.url, tokens["alice"])
    alice.token = tokens["alice"]
    bob = Client(server.url, tokens["bob"])
    return admin, alice, bob


def test_a_guaranteed_job_reclaims_its_vc_share_from_an_opportunistic_one(eight_gpus: Server, gates) -> None:
    admin, alice, bob = two_vcs(eight_gpus)
    # Bob's tasks note SIGTERM and keep running, so they last the whole grace period. The trap is
    # set before the task says it started: under load a TERM could otherwise come first.
    bob_job = bob.submit(f"""
name: bob-oppo
priority: oppo
stopGracePeriodSeconds: {GRACE}
defaults: {{virtualCluster: speech}}
taskRoles:
  w:
    instances: 8
    resourcePerInstance: {{gpu: 1, cpu: 0.1, memoryMB: 64}}
    commands:
      - trap 'echo "got TERM" >> {gates}/bob-$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX' TERM
      - echo "start attempt $TRAINYARD_ATTEMPT" >> {gates}/bob-$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX
      - while true; do sleep 600 & wait; done
""").id
    wait_until(lambda: bob.job(bob_job).state == "RUNNING", what="bob's job to take every GPU")
    wait_until(lambda: all((gates / f"bob-{i}").exists() for i in range(8)), what="bob's tasks to start")
    assert sum(g.used for g in admin.nodes()[0].gpus) == 8

    submitted = time.monotonic()
    alice_job = alice.submit("""
name: alice-guaranteed
priority: normal
defaults: {virtualCluster: vision}
taskRoles:
  w:
    instances: 4
    resourcePerInstance: {gpu: 1, cpu: 0.1, memoryMB: 64}
    commands: ['sleep 600']
""").id
    wait_until(lambda: getattr(alice.job(alice_job).pending, "reason", None) == "PREEMPTING",
               what="alice's job to wait for the preemption")
    assert "being preempted" in alice.job(alice_job).pending.message
    wait_until(lambda: alice.job(alice_job).state == "RUNNING", timeout=GRACE + 15,
               what="alice's job to start after the preemption")
    started_after = time.monotonic() - submitted
    # Bob's tasks had their whole grace period (how soon alice starts after it is the
    # controller's tests' to say, on a fake clock: here, load could stretch it).
    assert started_after >= GRACE - 0.5

    bob_view = bob.job(bob_job)
    assert "preempted" in [e.kind for e in bob_view.events]
    assert all("got TERM" in (gates / f"bob-{i}").read_text() for i in range(8))
    assert bob_view.attempts[0].state == "PREEMPTED" and bob_view.retriesUsed == 0

    # Bob's job needs all 8 GPUs: requeued, it waits until alice's job ends, then runs again.
    wait_until(lambda: bob.job(bob_job).state == "WAITING", what="bob's job to be requeued")
    alice.stop(alice_job)
    wait_until(lambda: bob.job(bob_job).state == "RUNNING" and bob.job(bob_job).attempt == 1,
               timeout=30, what="bob's job to run again")
    wait_until(lambda: "start attempt 1" in (gates / "bob-0").read_text(), what="bob's second attempt")
    bob.stop(bob_job)


def test_a_job_over_its_vcs_quota_borrows_idle_gpus_and_is_reclaimed_when_the_lender_needs_them(
        eight_gpus: Server) -> None:
    """Issue 30: a `normal` job over vision's quota runs on speech's idle GPUs as borrowed work;
    a speech job within its quota takes them back (the borrowed job, not suspendable, is
    requeued); once speech's GPUs are idle again the borrowed job runs again."""
    _, alice, bob = two_vcs(eight_gpus)
    job = ("name: {name}\npriority: normal\nstopGracePeriodSeconds: 1\ndefaults: {{virtualCluster: {vc}}}\n"
           "taskRoles:\n  w:\n    instances: 4\n    resourcePerInstance: {{gpu: 1, cpu: 0.1, memoryMB: 64}}\n"
           "    commands: ['sleep 600']\n")
    own = alice.submit(job.format(name="own", vc="vision")).id
    wait_until(lambda: alice.job(own).state == "RUNNING", what="alice's first job to start in vision's quota")
    over = alice.submit(job.format(name="over", vc="vision")).id
    wait_until(lambda: alice.job(over).state == "RUNNING", what="alice's second job to start on borrowed GPUs")
    view = alice.job(over)
    assert view.borrowed and view.attempts[0].borrowed and not alice.job(own).borrowed
    assert any("started on borrowed GPUs: VC vision is over its quota" in e.message for e in view.events)
    assert [j.borrowed for j in alice.jobs().items if j.id == over] == [True]

    lender = bob.submit(job.format(name="lender", vc="speech")).id
    wait_until(lambda: bob.job(lender).state == "RUNNING", timeout=30, what="speech's job to reclaim its GPUs")
    view = alice.job(over)
    assert "preempted" in [e.kind for e in view.events] and view.attempts[0].state == "PREEMPTED"
    wait_until(lambda: alice.job(over).state == "WAITING", what="the borrowed job to be requeued")
    assert not alice.job(over).borrowed

    bob.stop(lender)
    wait_until(lambda: alice.job(over).state == "RUNNING" and alice.job(over).attempt == 1, timeout=30,
               what="the borrowed job to run again once speech's GPUs are idle")
    assert alice.job(over).borrowed
    alice.stop(over)
    alice.stop(own)


def test_waiting_jobs_say_why_in_the_api_and_the_cli(eight_gpus: Server) -> None:
    admin, alice, _ = two_vcs(eight_gpus)
    admin.set_vc_borrowing("vision", borrow_limit=0)  # over its quota, a job waits instead of borrowing
    admin.set_quota("alice", priority="prod", gpus=4)  # a job above the limit itself is refused at submit
    hog = alice.submit("name: hog\npriority: prod\ndefaults: {virtualCluster: vision}\ntaskRoles:\n  w:\n"
                       "    instances: 3\n    resourcePerInstance: {gpu: 1}\n    commands: ['sleep 600']\n").id
    wait_until(lambda: alice.job(hog).state == "RUNNING", what="the hog to run")
    over_vc = alice.submit("name: big\ndefaults: {virtualCluster: vision}\ntaskRoles:\n  w:\n"
                           "    resourcePerInstance: {gpu: 2}\n    commands: ['true']\n").id
    over_user = alice.submit("name: urgent\npriority: prod\ndefaults: {virtualCluster: vision}\ntaskRoles:\n"
                             "  w:\n    instances: 3\n    resourcePerInstance: {gpu: 1}\n"
                             "    commands: ['true']\n").id

    def pending(job_id: int) -> PendingView | None:
        wait_until(lambda: alice.job(job_id).pending, what=f"job {job_id} to get a reason ({alice.job(job_id)!r})")
        return alice.job(job_id).pending

    assert pending(over_vc).reason == "QUOTA"
    assert "VC vision: needs 2" in pending(over_vc).message and "1 of 4 free" in pending(over_vc).message
    assert pending(over_user).reason == "USER_QUOTA"
    assert "user alice at prod: needs 3 GPU, 1 of 4 left" in pending(over_user).message
    shown = eight_gpus.yard("job", str(over_vc), token=alice.token)
    assert "QUOTA: VC vision: needs 2" in shown.stdout
    # Her unfinished jobs: the earlier tests' (on this module's server) would widen the table.
    listed = eight_gpus.yard("jobs", "--state", "WAITING,RUNNING", token=alice.token)
    assert "USER_QUOTA alice 1/4 left, needs 3" in listed.stdout  # the table's short form
    assert "QUOTA vision 1/4 free, needs 2" in listed.stdout
    assert all(len(line) < 120 for line in listed.stdout.splitlines())
    nothing = eight_gpus.yard("logs", str(over_vc), token=alice.token)
    assert (nothing.returncode, nothing.stdout) == (0, "")
    assert nothing.stderr == (f"yard: job {over_vc} is WAITING ({render.job_status_text(alice.job(over_vc))}): "
                              "this attempt has not run yet\n")
    assert nothing.stderr.startswith(f"yard: job {over_vc} is WAITING (QUOTA: VC vision: needs 2")
    for job_id in (hog, over_vc, over_user):
        alice.stop(job_id)


def test_an_attempt_past_its_max_run_time_is_stopped_and_the_job_fails_without_retry(eight_gpus: Server) -> None:
    client = eight_gpus.admin()
    job = client.submit("name: slow\nmaxRunTimeSeconds: 1\njobRetryCount: 2\nstopGracePeriodSeconds: 1\n"
                        "taskRoles:\n  w:\n    commands: ['sleep 600']\n").id
    done = client.wait(job, timeout=scaled(30))
    assert done.state == "FAILED"
    assert "maximum run time (maxRunTimeSeconds: 1)" in done.message
    assert done.attempts[-1].state == "TIMED_OUT" and done.retriesUsed == 0
    assert [a.number for a in done.attempts] == [0]
