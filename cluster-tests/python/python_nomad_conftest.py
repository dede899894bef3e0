"""pytest fixtures for python-nomad 2.1.0's own tests.

The source distribution on PyPI ships `tests/` without its `conftest.py` and `common.py`;
this recreates the two fixtures its tests use (a client for the agent `tests.common` names,
with the token it holds at the time, and one in the `admin` namespace). The token is read
when a fixture is made, so a token the ACL tests bootstrap is used by the tests after them.
"""

import nomad
import pytest

import tests.common as common


@pytest.fixture
def nomad_setup():
    return nomad.Nomad(
        host=common.IP, port=common.NOMAD_PORT, verify=False, token=common.NOMAD_TOKEN
    )


@pytest.fixture
def nomad_setup_with_namespace():
    return nomad.Nomad(
        host=common.IP,
        port=common.NOMAD_PORT,
        verify=False,
        token=common.NOMAD_TOKEN,
        namespace=common.NOMAD_NAMESPACE,
    )
