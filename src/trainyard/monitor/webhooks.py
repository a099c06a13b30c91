"""Posting to a URL a user gave (a job's notices): refused where it could reach the server's
own network (server-side request forgery).

A user's webhook may not point at a loopback, link-local (169.254.0.0/16, where clouds
keep their metadata service; fe80::/10), private (10/8, 172.16/12, 192.168/16, fc00::/7,
100.64/10), multicast, reserved or unspecified address, unless the admin allows that host
or network (``notify_webhook_allow``: host names, addresses or CIDR networks). Checked when
the URL is given (``check_url``: its scheme, and its host when that is an address or a
local name) and again when it is posted to (``post_json``): the name is resolved, every
address it resolves to must pass, and the connection goes to the checked address (the
``Host`` header and TLS name stay the URL's), so that a name that resolves elsewhere a
second time cannot slip through. Only http and https; no redirect is followed; a short
timeout.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

TIMEOUT_SECONDS = 5.0  # each connect, write and read
TOTAL_SECONDS = 15.0  # reading the answer stops after this long
ANSWER_BYTES = 4096  # of the answer read, at most
LOCAL_NAMES = ("localhost", "localhost.localdomain", "metadata.google.internal", "metadata")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class Refused(ValueError):
    """The URL may not be posted to; the message says why and what to do."""


def _allowed(host: str, address: Address | None, allow: Sequence[str]) -> bool:
    for entry in allow:
        entry = entry.strip().lower()
        if not entry:
            continue
        if entry == host.lower():
            return True
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                continue
    return False


def _forbidden(address: Address) -> str | None:
    if isinstance(address, ipaddress.IPv6Address):
        # An IPv4 address inside an IPv6 one (mapped, or 6to4's 2002::/16) is that address.
        inner = address.ipv4_mapped or address.sixtofour
        if inner is not None:
            address = inner
    for name, test in (("unspecified", address.is_unspecified), ("loopback", address.is_loopback),
                       ("link-local", address.is_link_local), ("multicast", address.is_multicast),
                       ("private", address.is_private), ("reserved", address.is_reserved)):
        if test:
            return name
    if isinstance(address, ipaddress.IPv4Address) and address in ipaddress.ip_network("100.64.0.0/10"):
        return "private"  # carrier-grade NAT: not global, though not "private" to Python
    return None


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def check_address(host: str, address: Address, allow: Sequence[str]) -> None:
    why = _forbidden(address)
    if why is not None and not _allowed(host, address, allow):
        # A name's address stays unsaid: the refusal must not make the server a resolver of
        # internal names for whoever sets a webhook.
        shown = f"{host} is a {why} address" if _literal(host) is not None else f"{host} resolves to a {why} address"
        raise Refused(f"{shown}; webhooks may only reach public addresses unless the admin allows the host or "
                      "network (setting notify_webhook_allow)")


def check_url(url: str, allow: Sequence[str] = ()) -> tuple[str, str, int]:
    """Refused unless ``url`` is http(s) with a host that is not (literally) local; its
    scheme, host and port. Names are resolved only when posting (``post_json``)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused(f"not a URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise Refused(f"only http:// and https:// URLs are posted to, not {parts.scheme or 'no scheme'}")
    host = parts.hostname or ""
    if not host:
        raise Refused("the URL has no host")
    if parts.username or parts.password:
        raise Refused("the URL may not hold a user name or password; put a token in its path or query")
    port = port or (443 if parts.scheme == "https" else 80)
    address = _literal(host)
    if address is not None:
        check_address(host, address, allow)
    elif (host.lower() in LOCAL_NAMES or host.lower().endswith(".localhost")) and not _allowed(host, None, allow):
        raise Refused(f"{host} names this machine; webhooks may only reach public addresses unless the admin "
                      "allows the host (setting notify_webhook_allow)")
    return parts.scheme, host, port


def resolve(host: str, port: int, allow: Sequence[str]) -> Address:
    """The address to connect to: every address ``host`` resolves to must pass."""
    literal = _literal(host)
    if literal is not None:
        check_address(host, literal, allow)
        return literal
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:  # perhaps for a while: tried again, unlike a refusal
        raise OSError(f"{host} does not resolve: {exc}") from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    if not addresses:
        raise OSError(f"{host} does not resolve")
    for address in addresses:
        check_address(host, address, allow)
    return addresses[0]


def post_json(url: str, payload: dict[str, Any], allow: Sequence[str] = (),
              timeout: float = TIMEOUT_SECONDS) -> None:
    """POST ``payload`` to ``url`` after the checks; Refused, or httpx.HTTPError (a non-2xx
    answer included, a redirect too: it is not followed)."""
    scheme, host, port = check_url(url, allow)
    address = resolve(host, port, allow)
    parts = urlsplit(url)
    shown = f"[{address}]" if isinstance(address, ipaddress.IPv6Address) else str(address)
    pinned = urlunsplit((scheme, f"{shown}:{port}", parts.path or "/", parts.query, ""))
    default_port = port == (443 if scheme == "https" else 80)
    headers = {"Host": host if default_port else f"{host}:{port}", "User-Agent": "trainyard-notify"}
    extensions = {"sni_hostname": host} if scheme == "https" else {}
    # The receiver is the user's: its answer is read a few KiB at most, and the whole post
    # given a deadline (a server that dribbles a byte at a time would hold it for ever).
    deadline = time.monotonic() + TOTAL_SECONDS
    with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client, \
            client.stream("POST", pinned, json=payload, headers=headers, extensions=extensions) as response:
        read = 0
        for chunk in response.iter_raw():
            read += len(chunk)
            if read >= ANSWER_BYTES or time.monotonic() > deadline:
                break
    if response.is_redirect:
        raise httpx.HTTPStatusError(f"{response.status_code} redirect not followed", request=response.request,
                                    response=response)
    response.raise_for_status()
