"""Answers of the API as ``cli/plain.read`` reads them whole (tests/cli/test_cli_plain_whole.py),
in a module of their own that imports nothing: test_cli_imports.py reads them in an interpreter
that must not load pydantic."""

TASK = {"role": "main", "index": 0, "state": "RUNNING", "node": "n1", "gpus": [0, 3], "gpu": 2, "cpu": 1,
        "memoryMB": 1024, "exitCode": None, "startedAt": "2026-11-21T10:00:05Z", "finishedAt": None, "message": "",
        "run": 0, "ports": {"http": [8080], "ssh": [2222]}}
RUNNING = {
    "id": 7, "name": "j", "user": "alice", "vc": "vision", "priority": "normal", "state": "RUNNING", "gpus": 2.5,
    "attempt": 1, "submittedAt": "2026-11-21T10:00:00Z", "startedAt": "2026-11-21T10:00:05.123456+02:00",
    "finishedAt": None, "exitCode": None, "message": "running", "pending": None, "retriesUsed": 1,
    "gracePeriodSeconds": 30, "spec": {"name": "j", "jobRetryCount": 2,
                                       "taskRoles": {"main": {"instances": 2, "nodes": 1}}},
    "attempts": [{"number": 0, "state": "FAILED", "startedAt": "2026-11-21T10:00:01Z",
                  "finishedAt": "2026-11-21T10:00:03Z", "exitCode": 1, "reason": "exited with 1", "borrowed": True,
                  "tasks": [{**TASK, "state": "FAILED", "exitCode": 1, "finishedAt": "2026-11-21T10:00:03Z"}]},
                 {"number": 1, "state": "RUNNING", "startedAt": "2026-11-21T10:00:05Z", "finishedAt": None,
                  "exitCode": None, "reason": "", "tasks": [TASK, {**TASK, "index": 1, "gpus": [1], "gpu": 0.5,
                                                                   "ports": {}}]}],
    "events": [{"at": "2026-11-21T10:00:00Z", "kind": "submitted", "message": "first"},
               {"at": "2026-11-21T10:00:05Z", "kind": "placed", "message": "second"}],
    "warnings": ["an unknown field: x"], "borrowed": True, "runtimeSeconds": 61.5, "heldBy": None,
    "platformRetriesUsed": 1,
    "dependencies": [{"condition": "afterok", "job": 3, "state": "SUCCEEDED", "status": "met"},
                     {"condition": "afterany", "job": 4, "state": None, "status": "never"}],
    "jobDir": {"bytes": 4096, "files": 2, "complete": False, "measuredAt": "2026-11-21T10:01:00Z",
               "removeAfter": None},
    "workdir": {"digest": "sha256:" + "ab" * 32, "sizeBytes": 157, "files": 4},
}
WAITING = {  # the fields with defaults left out, as an older server sends them
    "id": 8, "name": "w", "user": "bob", "vc": "default", "priority": "low", "state": "WAITING", "gpus": 1,
    "attempt": 0, "submittedAt": "2026-11-21T10:00:00", "startedAt": None, "finishedAt": None, "exitCode": None,
    "message": "", "retriesUsed": 0, "gracePeriodSeconds": 30, "spec": {}, "attempts": [], "events": [],
    "pending": {"reason": "QUOTA", "message": "vision has 0 of 2 GPUs free", "position": 2,
                "estimatedStart": "2026-11-21T12:00:00Z"},
}
ENDED = {**RUNNING, "id": 9, "state": "SUCCEEDED", "finishedAt": "2026-11-21T10:05:00Z", "exitCode": 0,
         "jobDir": {"bytes": 0, "files": 0, "complete": True, "measuredAt": "2026-11-21T10:05:00Z",
                    "removeAfter": "2026-11-28T10:05:00Z"}, "workdir": None}
NOTICES = [{"id": 1, "jobId": 9, "kind": "succeeded", "channel": "email", "state": "sent", "tries": 1, "error": None,
            "createdAt": "2026-11-21T10:05:00Z", "sentAt": "2026-11-21T10:05:01Z"},
           {"id": 2, "jobId": 9, "kind": "succeeded", "channel": "webhook", "state": "failed", "tries": 3,
            "error": "timed out", "createdAt": "2026-11-21T10:05:00Z", "sentAt": None}]
LINE = {"name": "9", "jobs": 1, "gpuHours": 0.25, "gpuHoursUsed": None, "gpuEfficiency": None, "cpuHours": 1,
        "cpuEfficiency": 0.5, "memoryGibHours": 2, "jobName": "j", "user": "alice", "vc": "vision"}
USAGE = {"by": "job", "since": "2026-11-21T10:00:00Z", "until": "2026-11-21T10:05:01Z", "lines": [LINE],
         "total": {**LINE, "name": "total"}, "fairShareHalfLifeSeconds": 604800}
