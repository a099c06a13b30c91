"""``KEEP``: what a change leaves as it is, where ``None`` is a value of its own (a limit's
``None`` means "no limit", not "unchanged"). The API's requests (``schemas/admin.py``) and the
SDK's arguments (``client.py``) share it; here, with no pydantic, the SDK has it without
building the admin models (issue 33)."""

from __future__ import annotations

from enum import Enum
from typing import Final


class Keep(Enum):
    """What a change leaves as it is (a limit's ``None`` means "no limit", not "unchanged")."""

    KEEP = "keep"


KEEP: Final = Keep.KEEP
