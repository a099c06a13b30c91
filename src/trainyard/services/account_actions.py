"""Users and their credentials — creating, disabling, enabling and deleting users, tokens,
passwords — each composed once for the API (``api/routers/users.py``) and the portal (the
users and account pages): its own unit of work, through the services that own the rules
(``auth.py``, ``removal.py``, ``web_sessions.py``), then what must follow its commit: the
server's cached tokens of the user forgotten (so that a revoked or disabled credential is
refused from the next request), the controller woken when jobs may have been stopped, and a
deleted user's environment folders removed (never file I/O inside the transaction)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from trainyard.backends.base import EnvironmentStore
from trainyard.schemas.admin import RemovalResult
from trainyard.schemas.users import TokenResponse, TokenView, UserView
from trainyard.services import auth, environments, removal, web_sessions
from trainyard.services.server import Server
from trainyard.services.views import token_view, user_view
from trainyard.store.rows import UserRow, WebSessionRow

# -- users --------------------------------------------------------------------------------


def users(server: Server) -> list[UserView]:
    with server.db.session() as session:
        return [user_view(u) for u in auth.list_users(session)]


def create_user(server: Server, by: UserRow, name: str, *, is_admin: bool, password: str = "") -> UserView:
    """A new user, with a first password when one is given (in the same unit of work: a
    password refused leaves no user behind); else they sign in with a token."""
    with server.db.session() as session:
        created = auth.create_user(session, name, is_admin=is_admin, clock=server.clock)
        if password:
            web_sessions.change_password(session, by, created.name, password)
        return user_view(created)


def disable_user(server: Server, by: UserRow, name: str, *, stop_jobs: bool) -> RemovalResult:
    """Refuse the user's tokens and browser sessions from now on; their jobs go on unless
    ``stop_jobs``."""
    with server.db.session() as session:
        result = removal.disable_user(session, name, stop_jobs=stop_jobs, by=by, clock=server.clock)
        user_id = auth.get_user(session, name).id
    server.tokens.forget(user_ids=[user_id])
    server.wake_controller()
    return result


def enable_user(server: Server, name: str) -> UserView:
    with server.db.session() as session:
        user = removal.enable_user(session, name)
        view = user_view(user)
    server.tokens.forget(user_ids=[user.id])
    return view


def delete_user(server: Server, by: UserRow, name: str, *, force: bool) -> RemovalResult:
    """Delete a user (``removal.delete_user``); once that has committed, their custom
    environments' folders go, and their own folder of the environments root once empty."""
    files: list[Path] = []
    with server.db.session() as session:
        user_id = auth.get_user(session, name).id
        result = removal.delete_user(session, name, force=force, by=by, clock=server.clock, files=files)
    server.tokens.forget(user_ids=[user_id])
    server.wake_controller()
    for folder in files:
        environments.remove_files(folder.name, folder)
    if isinstance(server.backend, EnvironmentStore):
        with contextlib.suppress(OSError):
            (server.backend.environments_root / name).rmdir()
    return result


# -- passwords ----------------------------------------------------------------------------


def set_password(server: Server, caller: UserRow, name: str | None, new: str, *, current: str | None = None,
                 keep: WebSessionRow | None = None) -> UserRow:
    """Set ``name``'s password (None: the caller's) as ``web_sessions.change_password`` allows,
    ending the user's browser sessions but ``keep``; the user as it now is."""
    with server.db.session() as session:
        target = web_sessions.change_password(session, caller, name, new, current=current, keep=keep)
    server.tokens.forget(user_ids=[target.id])  # `GET /me` says hasPassword at once
    return target


def clear_password(server: Server, caller: UserRow, name: str) -> UserRow:
    """Remove a user's password (admin), ending their browser sessions."""
    with server.db.session() as session:
        target = web_sessions.clear_password(session, caller, name)
    server.tokens.forget(user_ids=[target.id])
    return target


# -- tokens -------------------------------------------------------------------------------


def tokens(server: Server, caller: UserRow, *, for_user: str | None = None,
           every_user: bool = False) -> list[TokenView]:
    """Live tokens, oldest first, as ``auth.list_tokens`` lets ``caller`` see them."""
    with server.db.session() as session:
        return [token_view(t) for t in auth.list_tokens(session, caller, for_user=for_user, every_user=every_user)]


def issue_token(server: Server, caller: UserRow, *, for_user: str | None, name: str = "") -> TokenResponse:
    """A new token (shown in this answer only) for ``for_user`` (None: the caller)."""
    with server.db.session() as session:
        token, owner = auth.issue_token(session, caller, for_user=for_user, name=name, clock=server.clock)
        return TokenResponse(token=token, user=owner.name)


def revoke_token(server: Server, caller: UserRow, token_id: int) -> TokenView:
    """Revoke a token of the caller's (anyone's, for an admin): refused from the next request."""
    with server.db.session() as session:
        token = auth.revoke_token(session, caller, token_id)
        view = token_view(token)
        owner_id = token.user_id
    server.tokens.forget(user_ids=[owner_id])
    return view


# -- browser sessions ---------------------------------------------------------------------


def sign_in_with_token(server: Server, token: str) -> web_sessions.SignedIn | None:
    """A browser session for a live token of an enabled user; None otherwise."""
    with server.db.session() as session:
        return web_sessions.sign_in_with_token(session, token, clock=server.clock)


def sign_out(server: Server, cookie: str) -> None:
    with server.db.session() as session:
        web_sessions.sign_out(session, cookie)


def reauthenticated(server: Server, user: UserRow, secret: str) -> bool:
    """Whether ``secret`` is ``user``'s password, or else a live token of theirs
    (``web_sessions.reauthenticated``)."""
    with server.db.session() as session:
        return web_sessions.reauthenticated(session, user, secret)
