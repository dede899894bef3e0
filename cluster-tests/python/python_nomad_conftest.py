"""pytest fixtures for python-nomad 2.1.0's own tests.

The source distribution on PyPI ships `tests/` without its `conftest.py` and `common.py`;
this recreates the two fixtures its variable tests use, as the repository's conftest.py
defines them (a client for NOMAD_IP:NOMAD_PORT with NOMAD_TOKEN, and one in the `admin`
namespace).
"""

import os

import nomad
import pytest

IP = os.environ.get("NOMAD_IP", "127.0.0.1")
NOMAD_PORT = os.environ.get("NOMAD_PORT", 4646)
NOMAD_TOKEN = os.environ.get("NOMAD_TOKEN", None)
NOMAD_NAMESPACE = "admin"


@pytest.fixture
def nomad_setup():
    return nomad.Nomad(host=IP, port=NOMAD_PORT, verify=False, token=NOMAD_TOKEN)


@pytest.fixture
def nomad_setup_with_namespace():
    return nomad.Nomad(
        host=IP, port=NOMAD_PORT, verify=False, token=NOMAD_TOKEN, namespace=NOMAD_NAMESPACE
    )
