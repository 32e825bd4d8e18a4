"""Which base URLs a connection may not name without ``--allow-private-network``."""

from __future__ import annotations

import pytest

from shared.trust.addresses import refused_host

REFUSED = [
    "http://169.254.169.254/latest/meta-data/",
    "http://169.254.170.2/v2/credentials",
    "https://169.254.0.1",
    "http://[fe80::1]/",
    "http://[fe80::a:b%25eth0]:8080/",
    "http://100.100.100.200/latest/meta-data",
    "http://[fd00:ec2::254]/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://METADATA.Google.Internal./",
    "http://metadata/",
    "http://instance-data/latest/",
    "http://2852039166/",  # 169.254.169.254 as one number
    "http://0xa9fea9fe/",
    "http://0251.0376.0251.0376/",  # octal
    "http://169.254.43518/",
    "http://[::ffff:169.254.169.254]/",
]
ALLOWED = [
    "https://api.stripe.com",
    "http://127.0.0.1:12111",
    "http://localhost:8080",
    "http://10.1.2.3",
    "http://192.168.1.10/api",
    "http://[::1]:9000",
    "https://metadata.example.com",
    "http://169.255.0.1",
]


@pytest.mark.parametrize("url", REFUSED)
def test_link_local_and_metadata_hosts_are_refused(url: str) -> None:
    assert refused_host(url) is not None


@pytest.mark.parametrize("url", ALLOWED)
def test_providers_sandboxes_and_private_networks_are_allowed(url: str) -> None:
    assert refused_host(url) is None
