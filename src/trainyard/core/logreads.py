"""How a log is read over the API, shared by the server's log route (``schemas/jobs.py``
re-exports these) and the SDK: here, with no pydantic, ``yard logs`` has them without the
API's models (issue 33)."""

from __future__ import annotations

# A log read answers bytes; where they sit in the log, and which task they are, come in these headers.
LOG_OFFSET_HEADER = "X-Log-Offset"  # byte offset of the first byte sent
LOG_SIZE_HEADER = "X-Log-Size"  # the log's size when read
LOG_TASK_HEADER = "X-Log-Task"  # ROLE/INDEX of the task shown; absent before the task ran
LOG_ATTEMPT_HEADER = "X-Log-Attempt"  # the attempt shown; absent before the task ran
LOG_RUN_HEADER = "X-Log-Run"  # the task's run shown in its attempt (0 first; re-run in place after a failure)
# A log is read a page at a time: this many bytes unless the request asks for fewer, or more up to the most.
LOG_PAGE_BYTES = 1 << 20
LOG_MAX_PAGE_BYTES = 8 << 20  # the server holds a page in memory
