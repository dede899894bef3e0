"""Drive teamster's ACLs with the unmodified python-nomad 2.1.0 client.

Usage: python python_nomad_acl.py HOST PORT

Against an agent started with ACLs on and not bootstrapped: a tokenless client is refused
(403), `acl.generate_bootstrap` makes the management token and a second bootstrap fails,
policies are created, read, listed, updated and deleted, tokens are created, read, listed,
updated and deleted, a client token reads jobs but cannot register one, the token's own
`get_self_token` answers it, and a deleted token is refused.

Variables are written, read, listed and deleted with the management token and refused to
the anonymous caller and the read-only token. It prints "acl: all flows passed" at the end
and exits non-zero on any failed assertion.
"""

import sys

import nomad
from nomad.api import exceptions

READONLY = 'namespace "default" {\n  policy = "read"\n}\n'


def refused(kind, call):
    try:
        call()
    except kind as err:
        return err
    raise AssertionError("expected " + kind.__name__)


def job(job_id):
    return {
        "Job": {
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
                            "Config": {"run_for": "1s"},
                            "Resources": {"CPU": 10, "MemoryMB": 10},
                        }
                    ],
                }
            ],
        }
    }


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    anonymous = nomad.Nomad(host=host, port=port, timeout=10)
    refused(exceptions.URLNotAuthorizedNomadException, anonymous.jobs.get_jobs)

    boot = anonymous.acl.generate_bootstrap()
    assert boot["Type"] == "management", boot
    root = nomad.Nomad(host=host, port=port, timeout=10, token=boot["SecretID"])
    refused(exceptions.BadRequestNomadException, anonymous.acl.generate_bootstrap)

    # Policies.
    resp = root.acl.create_policy(
        "readonly", {"Name": "readonly", "Description": "reads", "Rules": READONLY}
    )
    assert resp.ok, resp.text
    assert root.acl.get_policy("readonly")["Rules"] == READONLY
    assert [p["Name"] for p in root.acl.get_policies()] == ["readonly"]
    root.acl.update_policy(
        "readonly", {"Name": "readonly", "Description": "reads jobs", "Rules": READONLY}
    )
    assert root.acl.get_policy("readonly")["Description"] == "reads jobs"
    refused(
        exceptions.BadRequestNomadException,
        lambda: root.acl.create_policy("bad", {"Rules": 'plugin { policy = "list" }'}),
    )

    # Tokens.
    token = root.acl.create_token({"Name": "reader", "Type": "client", "Policies": ["readonly"]})
    assert token["SecretID"] and token["AccessorID"], token
    assert root.acl.get_token(token["AccessorID"])["Name"] == "reader"
    listed = root.acl.get_tokens()
    assert any(t["AccessorID"] == token["AccessorID"] for t in listed), listed
    assert all(t["SecretID"] == "" for t in listed), "a list carries a secret"
    updated = root.acl.update_token(
        token["AccessorID"],
        {"AccessorID": token["AccessorID"], "Name": "reader-2", "Type": "client", "Policies": ["readonly"]},
    )
    assert updated["Name"] == "reader-2" and updated["SecretID"] == token["SecretID"], updated

    reader = nomad.Nomad(host=host, port=port, timeout=10, token=token["SecretID"])
    root.job.register_job("py-acl", job("py-acl"))
    assert any(j["ID"] == "py-acl" for j in reader.jobs.get_jobs())
    assert reader.job.get_job("py-acl")["ID"] == "py-acl"
    refused(
        exceptions.URLNotAuthorizedNomadException,
        lambda: reader.job.register_job("py-acl-2", job("py-acl-2")),
    )
    refused(exceptions.URLNotAuthorizedNomadException, reader.acl.get_tokens)
    assert reader.acl.get_self_token()["AccessorID"] == token["AccessorID"]

    # Variables with ACLs on: the management token writes, reads, lists and deletes them;
    # the anonymous caller and a token whose policy has no variables rule are refused.
    root.variable.create_variable("py/acl/db", {"Items": {"user": "app"}})
    assert root.variable.get_variable("py/acl/db")["Items"]["user"] == "app"
    assert "py/acl/db" in root.variables
    assert len(root.variables.get_variables("py/acl/")) == 1
    refused(
        exceptions.URLNotAuthorizedNomadException,
        lambda: anonymous.variable.get_variable("py/acl/db"),
    )
    refused(
        exceptions.URLNotAuthorizedNomadException,
        lambda: reader.variable.get_variable("py/acl/db"),
    )
    refused(
        exceptions.URLNotAuthorizedNomadException,
        lambda: reader.variable.create_variable("py/acl/db", {"Items": {"user": "x"}}),
    )
    root.variable.delete_variable("py/acl/db")
    assert "py/acl/db" not in root.variables

    assert root.acl.delete_token(token["AccessorID"])
    refused(exceptions.URLNotAuthorizedNomadException, reader.jobs.get_jobs)
    assert root.acl.delete_policy("readonly")
    assert root.acl.get_policies() == []
    print("acl: all flows passed")


if __name__ == "__main__":
    main()
