"""Where root must not fetch a user's URL from (issue 35: datasets are fetched as root on the
nodes): loopback, link-local (cloud metadata), unspecified, multicast, or an address of the
machine's own. The server checks a dataset's URL with it at registration
(``services.datasets``), each node again at every connection (``backends.datafetch``).

Standard library only.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable


def refusal(address: str) -> str | None:
    """Why root must not fetch a dataset from IP ``address`` (None: it may): loopback,
    link-local (cloud metadata at 169.254.169.254), unspecified, multicast, or an address of
    this machine's own (bound to one of its interfaces: the server's API, its database)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return f"{address!r} is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for kind, found in (("loopback", ip.is_loopback), ("link-local", ip.is_link_local),
                        ("unspecified", ip.is_unspecified), ("multicast", ip.is_multicast)):
        if found:
            return f"{ip} is a {kind} address"
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((str(ip), 0))  # succeeds only for an address of this machine's
        except OSError:
            return None
    return f"{ip} is an address of this machine"


def host_name(host: str) -> str:
    """A host as compared with ``dataset_allowed_hosts``: lowercase, an IPv6 literal unbracketed."""
    return host.strip().strip("[]").lower()


def host_refusal(host: str, port: int, allowed_hosts: Iterable[str]) -> str | None:
    """Why a URL's ``host`` may not be fetched from (None: it may, or it does not resolve
    here): any of the addresses it resolves to refused, unless the admin allowed the host."""
    host = host_name(host)
    if host in {host_name(h) for h in allowed_hosts}:
        return None
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return None
    for *_, sockaddr in infos:
        if (why := refusal(str(sockaddr[0]))) is not None:
            return f"{host} resolves to {sockaddr[0]}: {why}"
    return None
