"""What a name of a user, a group or a virtual cluster may look like.

The services enforce these rules (with a message that says what a valid name looks like);
the API's request models declare them in the OpenAPI document, so that generated clients
build valid names. Both read them from here.
"""

from __future__ import annotations

import re

# A user name: as POSIX user names, so that a user can map onto an OS account.
USER_NAME = re.compile(r"[a-z_][a-z0-9_.-]{0,63}")
# A group or virtual cluster name.
GROUP_OR_VC_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")
# An environment's name (``yard env``): also a folder's name under the environments' root.
# The job file (``spec/``, which imports nothing of ours) spells the same rule.
ENVIRONMENT_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")

# The virtual cluster that always exists: it holds what no other VC guarantees, and every
# user may submit to it.
DEFAULT_VC = "default"
# In a VC's quota, the GPU model that stands for any model.
ANY_MODEL = "*"
