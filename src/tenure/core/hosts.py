"""Host names, as ``tenure serve`` and a worker's metrics port judge the
``Host`` a request is addressed to (against DNS rebinding) and the address
they listen on."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from tenure.core.names import shown
from tenure.errors import InvalidInput

# A DNS name (labels of letters, digits and '-', dot-separated) or an IPv4 address.
LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
HOST_NAME = re.compile(rf"(?=.{{1,253}}$){LABEL}(\.{LABEL})*\.?")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, without port) is this machine only."""
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name a ``Host`` header addresses, without its port, in lower case
    ('' for one that is not a host)."""
    try:
        return (urlsplit("//" + header).hostname or "").rstrip(".")
    except ValueError:
        return ""


def check_host_name(value: str) -> str:
    """A host a server may answer to (``--allow-host``): a DNS name or an IP
    address, without scheme or port, in lower case."""
    name = value.strip().lower()
    try:
        return str(ipaddress.ip_address(name.strip("[]")))
    except ValueError:
        pass
    if not HOST_NAME.fullmatch(name):
        raise InvalidInput(
            f"invalid host name {shown(value)}: give a name such as ops.example.com "
            "or an address, without scheme, port or path"
        )
    return name.rstrip(".")
