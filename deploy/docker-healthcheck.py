"""HEALTHCHECK of the image: GET /healthz of the gateway in this container, or, for an engine
(mutual TLS, no client certificate here), a TCP connect to its port. Exit 0 healthy, 1 not.

    STRONGROOM_HEALTHCHECK=https://127.0.0.1:8443/healthz   (default http://127.0.0.1:8000/healthz)
    STRONGROOM_HEALTHCHECK=tcp://127.0.0.1:8100             (an engine)
"""

import os
import socket
import ssl
import sys
import urllib.request
from urllib.parse import urlsplit

target = os.environ.get("STRONGROOM_HEALTHCHECK", "http://127.0.0.1:8000/healthz")
parts = urlsplit(target)
try:
    if parts.scheme == "tcp":
        socket.create_connection((parts.hostname, parts.port), timeout=2).close()
    else:
        # The gateway's own certificate names its public host, not 127.0.0.1: the connection is
        # local, so only liveness is checked here, not the certificate.
        context = ssl._create_unverified_context()  # noqa: S323
        with urllib.request.urlopen(target, timeout=2, context=context) as response:  # noqa: S310
            sys.exit(0 if response.status == 200 else 1)
except OSError:
    sys.exit(1)
