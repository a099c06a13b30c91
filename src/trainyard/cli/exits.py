"""``yard``'s exit codes, shared by the argument parser and the commands.

0 success; 1 the server refused or the job did not succeed; 2 bad usage; 3 the server
cannot be reached (``wait``: not within ``--retry-for``); 4 missing or invalid token; 124
``wait`` timed out.
"""

from __future__ import annotations

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_AUTH = 4
EXIT_TIMEOUT = 124
