"""A Ray address (``--address`` or ``$RAY_ADDRESS``) checked before Ray is imported: its syntax, then whether
anything answers at its host and port. Ray itself reports a malformed address as a ValueError from deep inside,
and an unreachable one by retrying for minutes."""

from __future__ import annotations

import ipaddress
import os
import re
import socket

from madbench.data.errors import InputError


class RayUnavailable(RuntimeError):
    """A local Ray did not come up (an overloaded machine, too little shared memory): nothing of the batch ran."""

#: Words Ray takes in place of an address: a cluster already running on this machine, or a new local one.
KEYWORDS = ("auto", "local")
#: Seconds to wait for a TCP connection to the address: a head node on a network answers within milliseconds.
CONNECT_TIMEOUT_S = 5.0
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*$")
EXAMPLE = "write HOST:PORT (a head's GCS, e.g. 10.0.0.5:6379), ray://HOST:PORT (the Ray client, e.g. ray://10.0.0.5:10001) or auto"


def split_address(address: str, where: str = "--address") -> tuple[str, int] | None:
    """(host, port) of ``address``; None for ``auto`` or ``local`` (Ray finds or starts the cluster itself). An
    ``InputError`` naming ``where`` when it is neither."""
    if address in KEYWORDS:
        return None
    rest = address[len("ray://"):] if address.startswith("ray://") else address
    host, sep, port = rest.rpartition(":")
    if host.startswith("[") and host.endswith("]"):  # [::1]:6379
        host = host[1:-1]
    if not sep or not host or not port:
        raise InputError(where, f"{address!r} is not a Ray address: no HOST:PORT", EXAMPLE)
    if not port.isdigit() or not 1 <= int(port) <= 65_535:
        raise InputError(where, f"{address!r} is not a Ray address: port {port!r} is not a number from 1 to 65535", EXAMPLE)
    try:
        ipaddress.ip_address(host)
    except ValueError:
        if not _HOSTNAME.match(host):
            raise InputError(where, f"{address!r} is not a Ray address: {host!r} is neither a host name nor an IP "
                             "address", EXAMPLE) from None
    return host, int(port)


def check_address(address: str | None, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """``address`` (else ``$RAY_ADDRESS``) well formed and answering a TCP connection within ``timeout_s``; nothing
    to check when neither is set (a local Ray is started). An ``InputError`` naming the option or variable."""
    where = "--address" if address else "RAY_ADDRESS"
    address = address or os.environ.get("RAY_ADDRESS")
    if not address:
        return
    parts = split_address(address, where)
    if parts is None:
        return
    host, port = parts
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise InputError(where, f"nothing answers at {address} ({reason} within {timeout_s:g} s)",
                         "check that the cluster is up (`ray status` on the head) and the host and port are right "
                         "(6379 for the GCS, 10001 for ray://)") from None
