"""Settings python-nomad 2.1.0's tests import as `tests.common` (the source distribution
leaves the file out): where the agent is, from NOMAD_IP and NOMAD_PORT; the token, from
NOMAD_TOKEN until its ACL tests bootstrap one and keep it here; the namespace its
namespace tests use."""

import os

IP = os.environ.get("NOMAD_IP", "127.0.0.1")
NOMAD_PORT = os.environ.get("NOMAD_PORT", 4646)
NOMAD_TOKEN = os.environ.get("NOMAD_TOKEN", None)
NOMAD_NAMESPACE = "admin"
