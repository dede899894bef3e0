"""Drive teamster's deployments with the unmodified python-nomad 2.1.0 client.

Usage: python python_nomad_deployments.py HOST PORT JOB_ID

Registers a service job whose group has `update { canary = 1, auto_revert = true,
health_check = "manual" }` and checks every `deployments` and `deployment` call:

- the answers for a job or deployment that has none (empty lists, `null`, 404 for an
  unknown deployment on every read and write);
- version 0's deployment made healthy by hand and
  successful (so version 0 is stable), version 1's canary deployment listed, read, paused,
  resumed, refused promotion while its canary is not healthy, given the canary's health,
  promoted by group, and failed with an auto-revert to version 0; a second failure is a 400.

It prints "deployments: all flows passed" at the end and exits non-zero on any failed
assertion.
"""

import copy
import sys
import time

import nomad
from nomad.api import exceptions


def wait_until(what, check, timeout=60.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.2)


def refused(kind, call):
    """The response of a call that must fail with `kind`."""
    try:
        call()
    except kind as err:
        return err.nomad_resp
    raise AssertionError("expected " + kind.__name__)


def job_spec(job_id, version_tag):
    return {
        "Job": {
            "ID": job_id,
            "Name": job_id,
            "Type": "service",
            "Datacenters": ["dc1"],
            "Update": {
                "MaxParallel": 1,
                "Canary": 1,
                "AutoRevert": True,
                "HealthCheck": "manual",
                "MinHealthyTime": 1_000_000_000,
                "HealthyDeadline": 60_000_000_000,
                "ProgressDeadline": 120_000_000_000,
            },
            "TaskGroups": [
                {
                    "Name": "g",
                    "Count": 2,
                    "Meta": {"version": version_tag},
                    "Tasks": [
                        {
                            "Name": "t",
                            "Driver": "mock",
                            "Config": {"run_for": "10m"},
                            "Resources": {"CPU": 10, "MemoryMB": 10},
                        }
                    ],
                }
            ],
        }
    }


def evaluation_done(n, eval_id):
    def check():
        try:
            e = n.evaluation.get_evaluation(eval_id)
        except exceptions.URLNotFoundNomadException:
            return None
        return e if e["Status"] in ("complete", "failed", "blocked") else None

    return wait_until("evaluation " + eval_id, check)


def unknown_deployment_paths(n):
    nope = "00000000-0000-4000-8000-000000000000"
    assert nope not in n.deployment
    for call in (
        lambda: n.deployment.get_deployment(nope),
        lambda: n.deployment.fail_deployment(nope),
        lambda: n.deployment.pause_deployment(nope, True),
        lambda: n.deployment.promote_deployment_all(nope),
        lambda: n.deployment.promote_deployment_groups(nope, ["g"]),
        lambda: n.deployment.deployment_allocation_health(nope, [nope]),
    ):
        resp = refused(exceptions.URLNotFoundNomadException, call)
        assert resp.text == "deployment not found", resp.text
    assert n.deployment.get_deployment_allocations(nope) == []
    assert n.deployments.get_deployments(prefix="ffffffff") == []


def latest_of_version(n, job_id, version):
    def check():
        d = n.job.get_deployment(job_id)
        return d if d and d["JobVersion"] == version else None

    return wait_until("the deployment of version %d" % version, check)


def main():
    host, port, job_id = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    n = nomad.Nomad(host=host, port=port, timeout=10)

    unknown_deployment_paths(n)
    assert n.job.get_deployments(job_id) == []
    assert n.job.get_deployment(job_id) is None

    v0 = job_spec(job_id, "0")
    evaluation_done(n, n.job.register_job(job_id, v0)["EvalID"])
    time.sleep(1)
    assert n.job.get_deployment(job_id) is not None, "no deployment for %s" % job_id

    # Version 0: its allocations are marked healthy by hand (health_check = "manual").
    d0 = latest_of_version(n, job_id, 0)
    assert d0["ID"] in n.deployment
    assert n.deployment[d0["ID"]]["JobID"] == job_id
    listed = [d["ID"] for d in n.deployments.get_deployments()]
    assert d0["ID"] in listed, listed
    assert [d["ID"] for d in n.deployments.get_deployments(prefix=d0["ID"][:4])] == [d0["ID"]]
    allocs = wait_until(
        "version 0's allocations",
        lambda: (lambda a: a if len(a) == 2 else None)(
            n.deployment.get_deployment_allocations(d0["ID"])
        ),
    )
    n.deployment.deployment_allocation_health(d0["ID"], healthy_allocations=[a["ID"] for a in allocs])
    wait_until(
        "version 0's deployment successful",
        lambda: n.deployment.get_deployment(d0["ID"])["Status"] == "successful",
    )

    # Version 1: one canary beside the old allocations, waiting for promotion.
    v1 = copy.deepcopy(v0)
    v1["Job"]["TaskGroups"][0]["Meta"]["version"] = "1"
    evaluation_done(n, n.job.register_job(job_id, v1)["EvalID"])
    d1 = latest_of_version(n, job_id, 1)
    dep = d1["ID"]
    assert [d["ID"] for d in n.job.get_deployments(job_id)][:2] == [dep, d0["ID"]]
    canaries = wait_until(
        "the canary placed",
        lambda: n.deployment.get_deployment(dep)["TaskGroups"]["g"]["PlacedCanaries"],
    )
    assert len(canaries) == 1, canaries
    assert canaries[0] in [a["ID"] for a in n.deployment.get_deployment_allocations(dep)]

    resp = refused(exceptions.BadRequestNomadException, lambda: n.deployment.promote_deployment_all(dep))
    assert 'Task group "g" has 0/1 healthy allocations' in resp.text, resp.text

    answer = n.deployment.pause_deployment(dep, True)
    assert answer["EvalID"] == "", answer
    assert n.deployment.get_deployment(dep)["Status"] == "paused"
    answer = n.deployment.pause_deployment(dep, False)
    assert answer["EvalID"], answer
    assert n.deployment.get_deployment(dep)["Status"] == "running"

    answer = n.deployment.deployment_allocation_health(dep, healthy_allocations=canaries)
    assert answer["EvalID"] and answer["Index"] > 0, answer
    answer = n.deployment.promote_deployment_groups(dep, ["g"])
    assert answer["DeploymentModifyIndex"] > 0, answer
    assert n.deployment.get_deployment(dep)["TaskGroups"]["g"]["Promoted"] is True

    answer = n.deployment.fail_deployment(dep)
    assert answer["RevertedJobVersion"] == 0, answer
    failed = n.deployment.get_deployment(dep)
    assert failed["Status"] == "failed", failed
    assert failed["StatusDescription"].endswith("rolling back to job version 0"), failed
    resp = refused(exceptions.BadRequestNomadException, lambda: n.deployment.fail_deployment(dep))
    assert "can't fail terminal deployment" in resp.text, resp.text
    assert n.job.get_job(job_id)["Version"] == 2
    print("deployments: all flows passed")


if __name__ == "__main__":
    main()
