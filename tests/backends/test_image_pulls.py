"""Which failed pulls are worth another try: the engine's own words, as Podman 4.3 on these
machines said them (no registry is reachable from the tests, so the registry's answers are
those Podman and Docker document)."""

from __future__ import annotations

import pytest

from trainyard.backends.base import TaskKey, TaskStatus
from trainyard.backends.containers import pull_failure_is_permanent, with_image_pull
from trainyard.core.exitcodes import IMAGE_UNAVAILABLE

CONNECTION_REFUSED = ('Error: initializing source docker://localhost/trainyard-no-such-image:1: pinging container '
                      'registry localhost: Get "https://localhost/v2/": dial tcp 127.0.0.1:443: connect: '
                      'connection refused')
NO_SUCH_HOST = ('Error: initializing source docker://ubuntu:22.04: pinging container registry registry-1.docker.io: '
                'Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io on 10.255.255.53:53: '
                'no such host')


@pytest.mark.parametrize("said", [
    "Error: repository name must be lowercase",
    "Error: invalid reference format",
    "Error: initializing source docker://docker.io/library/nope:1: reading manifest 1 in docker.io/library/nope: "
    "manifest unknown",
    "Error: initializing source docker://docker.io/team/private:1: reading manifest 1 in docker.io/team/private: "
    "requested access to the resource is denied",
    "Error: initializing source docker://ghcr.io/team/x:1: unauthorized: authentication required",
    'Error: short-name "ubuntu" did not resolve to an alias and no unqualified-search registries are defined',
])
def test_a_pull_that_cannot_succeed_is_told_from_one_that_may(said: str) -> None:
    assert pull_failure_is_permanent(said)


@pytest.mark.parametrize("said", [CONNECTION_REFUSED, NO_SUCH_HOST, "Error: net/http: TLS handshake timeout",
                                  "Error: reading blob sha256:ab: 503 Service Unavailable",
                                  "toomanyrequests: You have reached your pull rate limit"])
def test_network_faults_and_timeouts_stay_retryable(said: str) -> None:
    assert not pull_failure_is_permanent(said)


def test_a_tasks_record_of_a_pull_that_cannot_succeed_ends_it_for_good_with_the_engines_reason() -> None:
    ended = TaskStatus(TaskKey(1, 0, "m", 0), running=False, exit_code=125)
    record = {"image": "localhost/Bad:1", "node": "n1", "ok": False, "seconds": 0.1,
              "error": "could not pull localhost/Bad:1 on node n1 (exit status 125; the task log has its output)"}

    permanent = with_image_pull(ended, {**record, "said": "Error: repository name must be lowercase"})
    retryable = with_image_pull(ended, {**record, "said": CONNECTION_REFUSED})
    unknown = with_image_pull(ended, record)  # a record from before the engine's words were kept

    assert (permanent.reason, permanent.message) == (
        IMAGE_UNAVAILABLE, "could not pull localhost/Bad:1 on node n1: repository name must be lowercase")
    assert retryable.reason == unknown.reason == ""
    assert retryable.message.startswith("could not pull localhost/Bad:1 on node n1 (exit status 125")
