"""Drive a teamster agent over HTTPS with client certificates, with the unmodified
python-nomad 2.1.0 client (`secure=True`, `verify=CA`, `cert=(cert, key)`).

Usage: python python_nomad_tls.py HOST PORT CA CERT KEY JOB_ID

Reads the agent and the leader, registers a batch job on the mock driver and waits for its
allocation to complete, lists the nodes; then checks that the same agent refuses a client
that presents no certificate (the agent runs with `verify_https_client`) and one that does
not trust the CA. Prints "tls: all flows passed" and exits non-zero on any failure.
"""

import sys
import time

import nomad
import requests


def wait_until(what, check, timeout=60.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.2)


def main():
    host, port, ca, cert, key, job_id = sys.argv[1:7]
    port = int(port)
    n = nomad.Nomad(host=host, port=port, secure=True, verify=ca, cert=(cert, key), timeout=10)
    assert n.agent.get_agent()["config"], "agent self"
    assert n.status.leader.get_leader(), "a leader"
    job = {
        "ID": job_id,
        "Name": job_id,
        "Type": "batch",
        "Datacenters": ["dc1"],
        "TaskGroups": [
            {
                "Name": "g",
                "Count": 1,
                "Tasks": [
                    {
                        "Name": "t",
                        "Driver": "mock",
                        "Config": {"run_for": "10ms"},
                        "Resources": {"CPU": 10, "MemoryMB": 10},
                    }
                ],
            }
        ],
    }
    n.job.register_job(job_id, {"Job": job})
    wait_until(
        "the allocation to complete",
        lambda: any(a["ClientStatus"] == "complete" for a in n.job.get_allocations(job_id)),
    )
    assert any(node["Status"] == "ready" for node in n.nodes.get_nodes()), "a ready node"

    # No client certificate: the handshake is refused.
    anonymous = nomad.Nomad(host=host, port=port, secure=True, verify=ca, timeout=10)
    try:
        anonymous.status.leader.get_leader()
    except (requests.exceptions.SSLError, requests.exceptions.ConnectionError,
            nomad.api.exceptions.BaseNomadException):
        pass
    else:
        raise AssertionError("an HTTPS client without a certificate was served")
    # Not trusting the CA (the system's roots only): the agent's certificate is refused.
    untrusting = nomad.Nomad(host=host, port=port, secure=True, verify=True, cert=(cert, key),
                             timeout=10)
    try:
        untrusting.status.leader.get_leader()
    except (requests.exceptions.SSLError, requests.exceptions.ConnectionError,
            nomad.api.exceptions.BaseNomadException):
        pass
    else:
        raise AssertionError("a certificate from an unknown CA was trusted")
    print("tls: all flows passed")


if __name__ == "__main__":
    main()
