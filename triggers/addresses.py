"""Listening addresses of the daemon's servers (`TRIGGERS_API_ADDRESS`): `host:port`.

`127.0.0.1:8080`, `[::1]:8080`, `localhost:8080`, or `:8080` for loopback; `0.0.0.0:8080`
or a host's own address listens beyond it. Port 0 lets the kernel choose.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

LOOPBACK = "127.0.0.1"
_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


@dataclass(frozen=True, slots=True)
class ListenAddress:
    """A host and a port to listen on."""

    host: str
    port: int

    @property
    def loopback(self) -> bool:
        """Whether only this machine can connect (127.0.0.0/8, ::1, `localhost`)."""
        if self.host.lower() in _LOOPBACK_NAMES:
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False  # a host name: it may resolve to any interface

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_address(text: str) -> ListenAddress:
    """`host:port` (`[v6]:port`, or `:port` for loopback).

    Raises:
        ValueError: not of that form, or the port is not 0 to 65535.
    """
    value = text.strip()
    host, colon, port = value.rpartition(":")
    if not colon or not port.isdigit() or int(port) > 65535:  # noqa: PLR2004 (the last port)
        raise ValueError(f"{text!r} is not host:port (for example 127.0.0.1:8080 or :8080)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"{text!r}: write an IPv6 address in brackets, as [::1]:8080")
    if host:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            if not all(part and part.replace("-", "").isalnum() for part in host.split(".")):
                raise ValueError(
                    f"{text!r}: {host!r} is neither an IP address nor a host name"
                ) from None
    return ListenAddress(host=host or LOOPBACK, port=int(port))
