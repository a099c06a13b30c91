"""The SDK's job-notice calls (``Client`` has them): an account's default notices and
e-mail address, and what was sent for a job (``yard account``, ``yard job``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from trainyard.client_input import path_segment as _seg
from trainyard.client_models import Model, Shape

if TYPE_CHECKING:
    import httpx

    from trainyard.schemas.notices import AccountNotifyView, JobNoticeView
    from trainyard.schemas.users import UserView

Reply = TypeVar("Reply")
_ME: Model[UserView] = Model("users.UserView")
_ACCOUNT_NOTIFY: Model[AccountNotifyView] = Model("notices.AccountNotifyView")
_JOB_NOTICES: Model[list[JobNoticeView]] = Model("notices.JobNoticeView", many=True)


class NoticeCalls:
    """Mixed into ``Client``: these use its ``_request`` and ``_parse``."""

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        raise NotImplementedError

    def _parse(self, shape: Shape[Reply], content: bytes) -> Reply:
        raise NotImplementedError

    # ``name`` None is the caller.

    def _me(self, name: str | None) -> str:
        return name if name is not None else self._parse(_ME, self._request("GET", "/me").content).name

    def account_notify(self, name: str | None = None) -> AccountNotifyView:
        """An account's default job notices and e-mail address (yours; an admin: anyone's)."""
        return self._parse(_ACCOUNT_NOTIFY, self._request("GET", f"/users/{_seg(self._me(name))}/notify").content)

    def set_account_notify(self, on: list[str], *, email: bool = True, webhook: str | None = None,
                           name: str | None = None) -> AccountNotifyView:
        """The default for jobs whose file has no ``notify`` (``on=[]`` clears it)."""
        body = {"on": on, "email": email, "webhook": webhook}
        return self._parse(_ACCOUNT_NOTIFY, self._request("PUT", f"/users/{_seg(self._me(name))}/notify",
                                                            json=body).content)

    def set_email(self, address: str | None, *, name: str | None = None) -> AccountNotifyView:
        """Where job notices are e-mailed (None: nowhere): your own, or (admin) anyone's."""
        return self._parse(_ACCOUNT_NOTIFY, self._request("PUT", f"/users/{_seg(self._me(name))}/email",
                                                            json={"email": address}).content)

    def job_notices(self, job_id: int) -> list[JobNoticeView]:
        """The notices a job's events made: each one's event, channel, state and last error."""
        return self._parse(_JOB_NOTICES, self._job_notices_answer(job_id))

    def _job_notices_answer(self, job_id: int) -> bytes:
        """`job_notices`' answer as the server sent it (JSON): `yard job` reads it without the
        models (cli/plain.py)."""
        return self._request("GET", f"/jobs/{job_id}/notices").content
