"""The server's log (``yard up``): its format, and what never goes into it.

Query strings carry secrets: a JupyterLab session's ``?token=``, a web app's own
credentials behind the port proxy, a signed download link. The proxy and the session way
in forward requests with httpx, which logs every request's full URL at INFO; so do
libraries the server may use later. Two things keep them out of the log:

1. httpx's and httpcore's own loggers say only warnings: a line per forwarded request is
   noise anyway (a browser's page is a hundred of them), and the job's history already
   records who opened which port (``port-opened`` events).
2. Every line the server writes goes through `RedactingFormatter`, which replaces the query
   of any URL or absolute path in it (``/sessions/7/lab?token=…``) with ``?…``, the text of a
   traceback included: whatever logs a URL next cannot leak its query.
"""

from __future__ import annotations

import logging
import re

from trainyard.core.printable import shown

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
REDACTED = "?…"
# Loggers that write a line per HTTP request with its full URL.
CHATTY = ("httpx", "httpcore")

# A URL (scheme://…) or an absolute path (/…, not inside a word), then "?" and a query of at
# least one character; the query ends at whitespace, a quote, "<", ">" or a fragment.
_QUERY = re.compile(r"""(?P<target>(?:\b[A-Za-z][A-Za-z0-9+.-]*://|(?<![\w./?=&%-])/)[^\s?#"'<>]*)\?[^\s#"'<>]+""")


def redact_queries(text: str) -> str:
    """``text`` with the query of every URL and absolute path in it replaced by ``?…``."""
    return _QUERY.sub(lambda m: m.group("target") + REDACTED, text)


class RedactingFormatter(logging.Formatter):
    """A formatter whose every line (message, traceback, stack) has its URLs' queries redacted."""

    def format(self, record: logging.LogRecord) -> str:
        return shown(redact_queries(super().format(record)))  # a job's strings reach the admin's terminal


def configure_server_logging(level: int = logging.INFO) -> None:
    """The server's logging: INFO and up to stderr, as `FORMAT`, queries redacted, and the
    per-request loggers of HTTP clients quiet."""
    logging.basicConfig(level=level, format=FORMAT)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(RedactingFormatter(FORMAT))
    for name in CHATTY:
        logging.getLogger(name).setLevel(logging.WARNING)
