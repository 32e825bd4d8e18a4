"""Hosts a connection's base URL may not name unless the operator says so.

A readback sends the workspace's stored credential to the connection's base URL and stores what
comes back as an observation. A base URL on a link-local address or a cloud provider's
metadata service would turn that into a reader of the machine's own instance metadata (cloud
credentials among it). Those are refused when a connection is set (``shared.db.tenants``)
unless the operator allows them (``provely connection set --allow-private-network`` or
``PROVELY_ALLOW_PRIVATE_NETWORK=true``). Loopback and private ranges stay allowed: a sandbox or
a provider inside the operator's network is a normal setup.

The host is judged as written — an IP literal in any form ``inet_aton`` reads (``2852039166``,
``0xa9.0xfe.0xa9.0xfe``, ``169.254.43518``), IPv4-mapped IPv6 included — or by its name. A name
is not resolved here: a DNS name that resolves to such an address is the network's business
(egress rules), not something a check at configuration time can settle.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Final
from urllib.parse import urlsplit

__all__ = ["METADATA_HOSTS", "refused_host"]

_LINK_LOCAL: Final = (
    ipaddress.ip_network("169.254.0.0/16"),  # IPv4 link-local: AWS, GCP, Azure, OCI metadata
    ipaddress.ip_network("fe80::/10"),  # IPv6 link-local
)
_METADATA_ADDRESSES: Final = frozenset(
    {
        ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud metadata
        ipaddress.ip_address("fd00:ec2::254"),  # AWS metadata over IPv6
        ipaddress.ip_address("fd00:ec2::23"),  # AWS DNS over IPv6
    }
)
METADATA_HOSTS: Final = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.tencentyun.com",
        "metadata.azure.internal",
    }
)


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        found = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        try:
            found = ipaddress.IPv4Address(socket.inet_aton(host))  # 2852039166, 0xa9fea9fe …
        except (OSError, ValueError):
            return None
    if isinstance(found, ipaddress.IPv6Address) and found.ipv4_mapped is not None:
        return found.ipv4_mapped
    return found


def refused_host(url: str) -> str | None:
    """Why ``url``'s host may not be a base URL (``None``: it may)."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return None  # the URL checks of the caller say what is wrong with it
    if not host:
        return None
    host = host.rstrip(".").lower()
    if host in METADATA_HOSTS:
        return f"{host} is a cloud metadata service"
    address = _address(host)
    if address is None:
        return None
    if address in _METADATA_ADDRESSES:
        return f"{address} is a cloud metadata address"
    if any(address in network for network in _LINK_LOCAL):
        return f"{address} is a link-local address (cloud metadata services live there)"
    return None
