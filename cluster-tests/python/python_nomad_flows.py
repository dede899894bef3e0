"""Drive a live teamster cluster with the unmodified python-nomad 2.1.0 client.

Usage: python python_nomad_flows.py HOST PORT JOB_ID

Runs every flow of the compatibility issue against the agent at HOST:PORT and exits non-zero
(with the failed assertion) when teamster answers differently from Nomad.
"""

import base64
import sys
import time

import nomad
import requests
from nomad.api import exceptions


def wait_until(what, check, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.2)


def evaluation_or_none(n, eval_id):
    """The evaluation, or None while the server asked has not applied it yet."""
    try:
        return n.evaluation.get_evaluation(eval_id)
    except exceptions.URLNotFoundNomadException:
        return None


def main():
    host, port, job_id = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    n = nomad.Nomad(host=host, port=port, timeout=10)

    job = {
        "Job": {
            "ID": job_id,
            "Name": job_id,
            "Type": "service",
            "Datacenters": ["dc1"],
            "TaskGroups": [
                {
                    "Name": "g",
                    "Count": 2,
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

    # Register, read, list.
    resp = n.jobs.register_job(job)
    assert resp["EvalID"], resp
    assert resp["Index"] > 0, resp
    got = n.job.get_job(job_id)
    assert got["ID"] == job_id and got["TaskGroups"][0]["Count"] == 2, got
    assert job_id in n.jobs, "jobs.__contains__"
    assert any(j["ID"] == job_id for j in n.jobs.get_jobs()), "get_jobs"
    assert n.jobs.get_jobs(prefix=job_id[:3]), "get_jobs(prefix)"
    try:
        n.job.get_job("no-such-job")
        raise AssertionError("a missing job must raise URLNotFoundNomadException")
    except exceptions.URLNotFoundNomadException:
        pass

    # Its evaluations and allocations, then one of each.
    evals = wait_until(
        "the job's evaluation to complete",
        lambda: [e for e in n.job.get_evaluations(job_id) if e["Status"] == "complete"],
    )
    assert evals[0]["JobID"] == job_id, evals
    allocs = wait_until(
        "two allocations", lambda: (lambda a: a if len(a) == 2 else None)(n.job.get_allocations(job_id))
    )
    alloc = n.allocation.get_allocation(allocs[0]["ID"])
    assert alloc["ID"] == allocs[0]["ID"] and alloc["JobID"] == job_id, alloc
    assert any(a["ID"] == alloc["ID"] for a in n.allocations.get_allocations()), "get_allocations"

    # The allocation's files (a server forwards to the client that holds them).
    files = wait_until("the task directory", lambda: n.client.ls.list_files(alloc["ID"]))
    names = sorted(f["Name"] for f in files)
    assert "t" in names and "alloc" in names, files
    entry = n.client.stat.stat_file(alloc["ID"], "t")
    assert entry["IsDir"] is True and entry["Name"] == "t", entry
    task_files = n.client.ls.list_files(alloc["ID"], path="/t")
    assert all(f["IsDir"] for f in task_files), task_files
    # A mock task writes no log file: the logs endpoint says which file is missing.
    try:
        n.client.stream_logs.stream(alloc["ID"], "t", "stdout", plain=True)
        raise AssertionError("a mock task has no log file")
    except exceptions.URLNotFoundNomadException as e:
        assert 'task "t"' in e.nomad_resp.text, e.nomad_resp.text
    try:
        n.client.stream_logs.stream(alloc["ID"], "t", "stdsomething")
        raise AssertionError("a bad log type must be refused")
    except exceptions.BadRequestNomadException as e:
        assert "stdout/stderr" in e.nomad_resp.text, e.nomad_resp.text
    ev = n.evaluation.get_evaluation(evals[0]["ID"])
    assert ev["ID"] == evals[0]["ID"], ev
    assert any(e["ID"] == ev["ID"] for e in n.evaluations.get_evaluations()), "get_evaluations"
    summary = n.job.get_summary(job_id)
    assert "g" in summary["Summary"], summary
    versions = n.job.get_versions(job_id)
    assert versions["Versions"][0]["ID"] == job_id, versions

    # A second version, then back to the first (revert_job), as a third.
    job["Job"]["TaskGroups"][0]["Count"] = 3
    n.jobs.register_job(job)
    current = n.job.get_job(job_id)
    assert current["TaskGroups"][0]["Count"] == 3 and current["Version"] == 1, current
    try:
        n.job.revert_job(job_id, 0, enforce_prior_version=7)
        raise AssertionError("a stale EnforcePriorVersion must be refused")
    except exceptions.BadRequestNomadException as e:
        assert "enforcing version 7" in e.nomad_resp.text, e.nomad_resp.text
    resp = n.job.revert_job(job_id, 0, enforce_prior_version=1)
    assert resp["EvalID"], resp
    reverted = n.job.get_job(job_id)
    assert reverted["TaskGroups"][0]["Count"] == 2 and reverted["Version"] == 2, reverted
    versions = n.job.get_versions(job_id)["Versions"]
    assert [v["Version"] for v in versions] == [2, 1, 0], versions
    allocs = wait_until(
        "two allocations again",
        lambda: (lambda a: a if len(a) == 2 else None)(
            [a for a in n.job.get_allocations(job_id) if a["DesiredStatus"] == "run"]
        ),
    )

    # plan_job: a count change creates one and ignores nothing, a no-op creates nothing;
    # a stale check index is refused.
    job["Job"]["TaskGroups"][0]["Count"] = 3
    plan = n.job.plan_job(job_id, job, diff=True)
    updates = plan["Annotations"]["DesiredTGUpdates"]["g"]
    assert updates["Place"] == 1 and updates["Stop"] == 0, plan
    assert plan["JobModifyIndex"] == reverted["JobModifyIndex"], plan
    count = [f for f in plan["Diff"]["TaskGroups"][0]["Fields"] if f["Name"] == "Count"][0]
    assert (count["Type"], count["Old"], count["New"]) == ("Edited", "2", "3"), count
    assert count["Annotations"] == ["forces create"], count
    assert plan["FailedTGAllocs"] == {}, plan
    job["Job"]["TaskGroups"][0]["Count"] = 2
    noop = n.job.plan_job(job_id, job, diff=True)
    assert noop["Diff"]["Type"] == "None", noop["Diff"]
    assert noop["Annotations"]["DesiredTGUpdates"]["g"]["Place"] == 0, noop
    stale = dict(job, EnforceIndex=True, JobModifyIndex=plan["JobModifyIndex"] - 1)
    try:
        n.jobs.register_job(stale)
        raise AssertionError("a stale JobModifyIndex must be refused")
    except exceptions.BadRequestNomadException as e:
        assert "job modify index" in e.nomad_resp.text, e.nomad_resp.text
    assert n.job.get_job(job_id)["Version"] == 2, "nothing was registered"

    # Version diffs and stability.
    with_diffs = n.job.request(job_id, "versions", params={"diffs": "true"}, method="get").json()
    assert len(with_diffs["Diffs"]) == 2, with_diffs["Diffs"]
    assert with_diffs["Diffs"][0]["Type"] == "Edited", with_diffs["Diffs"][0]
    n.job.stable_job(job_id, 2, True)
    assert n.job.get_job(job_id)["Stable"] is True, "stable_job"

    # A scaling block: policies listed, a count outside it refused, one inside applied.
    scaled_id = job_id + "-scaled"
    scaled = {"Job": dict(job["Job"], ID=scaled_id, Name=scaled_id)}
    scaled["Job"]["TaskGroups"] = [dict(job["Job"]["TaskGroups"][0], Count=1)]
    scaled["Job"]["TaskGroups"][0]["Scaling"] = {"Min": 1, "Max": 3, "Policy": {"cooldown": "1m"}}
    n.jobs.register_job(scaled)
    policies = [p for p in n.scaling.get_scaling_policies(job=scaled_id)]
    assert len(policies) == 1, policies
    assert policies[0]["Target"] == {"Namespace": "default", "Job": scaled_id, "Group": "g"}, policies
    policy = n.scaling.get_scaling_policy(policies[0]["ID"])
    assert (policy["Min"], policy["Max"], policy["Policy"]) == (1, 3, {"cooldown": "1m"}), policy
    base = "http://%s:%d/v1/job/%s/scale" % (host, port, scaled_id)
    too_many = requests.post(base, json={"Count": 4, "Target": {"Group": "g"}}, timeout=10)
    assert too_many.status_code == 400, too_many.text
    assert "greater than scaling policy maximum" in too_many.text, too_many.text
    ok = requests.post(base, json={"Count": 3, "Target": {"Group": "g"}, "Message": "busy"}, timeout=10)
    assert ok.status_code == 200 and ok.json()["EvalID"], ok.text
    status = requests.get(base, timeout=10).json()
    group = status["TaskGroups"]["g"]
    assert group["Desired"] == 3, status
    assert group["Events"][0]["Message"] == "busy" and group["Events"][0]["Count"] == 3, status
    assert n.job.get_job(scaled_id)["TaskGroups"][0]["Count"] == 3, "scaled"

    # Nodes.
    nodes = n.nodes.get_nodes()
    assert nodes, "get_nodes"
    node = n.node.get_node(nodes[0]["ID"])
    assert node["ID"] == nodes[0]["ID"] and node["Status"] == "ready", node
    assert any(a["NodeID"] == node["ID"] for a in allocs), "allocs on the node"

    # Leader, peers, raft configuration, regions, agent.
    leader = n.status.leader.get_leader()
    peers = n.status.peers.get_peers()
    assert len(peers) == 3 and leader in peers, (leader, peers)
    conf = n.operator.get_configuration()
    assert len(conf["Servers"]) == 3, conf
    assert sum(1 for s in conf["Servers"] if s["Leader"]) == 1, conf
    assert {s["Address"] for s in conf["Servers"]} == set(peers), conf
    assert n.regions.get_regions() == ["global"]
    assert n.agent.get_agent()["config"], "agent self"
    assert len(n.agent.get_members()["Members"]) == 3, "agent members"

    # An HCL job file parsed by the agent (jobs.parse), then registered as parsed.
    hcl_id = job_id + "-hcl"
    hcl = """
    variable "count" { default = 1 }
    job "%s" {
      datacenters = ["dc1"]
      group "g" {
        count = var.count
        task "t" {
          driver = "mock"
          config { run_for = "10m" }
          resources {
            cpu    = 10
            memory = 10
          }
        }
      }
    }
    """ % hcl_id
    parsed = n.jobs.parse(hcl)
    assert parsed["ID"] == hcl_id and parsed["Name"] == hcl_id, parsed
    assert parsed["TaskGroups"][0]["Count"] == 1, parsed
    assert parsed["TaskGroups"][0]["Tasks"][0]["Resources"] == {"CPU": 10, "MemoryMB": 10}, parsed
    canonical = n.jobs.parse(hcl, canonicalize=True)
    assert canonical["Priority"] == 50 and canonical["Type"] == "service", canonical
    assert n.jobs.register_job({"Job": parsed})["EvalID"]
    assert n.job.get_job(hcl_id)["TaskGroups"][0]["Tasks"][0]["Driver"] == "mock"
    n.job.deregister_job(hcl_id, purge=True)
    try:
        n.jobs.parse('job "x" {\n  grup "g" {}\n}\n')
        raise AssertionError("a typo must be refused")
    except exceptions.BadRequestNomadException as e:
        assert "unknown block" in e.nomad_resp.text, e.nomad_resp.text

    # Periodic and parameterized jobs: periodic_job forces a launch of a periodic parent
    # (which itself is never evaluated), dispatch_job launches a child of a parameterized one
    # with a payload and meta, and the same idempotency token answers the same child.
    def mock_batch(jid, **extra):
        body = {
            "ID": jid,
            "Type": "batch",
            "Datacenters": ["dc1"],
            "TaskGroups": [
                {
                    "Name": "g",
                    "Tasks": [
                        {
                            "Name": "t",
                            "Driver": "mock",
                            "Config": {"run_for": "100ms"},
                            "Resources": {"CPU": 10, "MemoryMB": 10},
                        }
                    ],
                }
            ],
        }
        body.update(extra)
        return {"Job": body}

    def children_of(parent):
        return [j for j in n.jobs.get_jobs(prefix=parent + "/") if j["ParentID"] == parent]

    def completed(child_id):
        return [
            a
            for a in n.allocations.get_allocations()
            if a["JobID"] == child_id and a["ClientStatus"] == "complete"
        ]

    cron_id = job_id + "-cron"
    cron = mock_batch(
        cron_id, Periodic={"Spec": "0 0 1 1 *", "SpecType": "cron", "ProhibitOverlap": True}
    )
    assert n.jobs.register_job(cron)["EvalID"] == ""
    assert n.job.get_job(cron_id)["Periodic"]["ProhibitOverlap"] is True
    forced = n.job.periodic_job(cron_id)
    assert forced["EvalID"] and forced["EvalCreateIndex"] > 0, forced
    kids = children_of(cron_id)
    assert len(kids) == 1 and kids[0]["ID"].startswith(cron_id + "/periodic-"), kids
    wait_until("the forced child to complete", lambda: completed(kids[0]["ID"]))
    plain_id = job_id + "-plain"
    n.jobs.register_job(mock_batch(plain_id))
    try:
        n.job.periodic_job(plain_id)
        raise AssertionError("forcing a non-periodic job must be refused")
    except exceptions.BadRequestNomadException as e:
        assert "non-periodic" in e.nomad_resp.text, e.nomad_resp.text

    disp_id = job_id + "-dispatch"
    disp = mock_batch(
        disp_id,
        ParameterizedJob={"Payload": "required", "MetaRequired": ["image"]},
        Meta={"size": "small"},
    )
    assert n.jobs.register_job(disp)["EvalID"] == ""
    payload = base64.b64encode(b"hello").decode()
    d = n.job.dispatch_job(disp_id, payload=payload, meta={"image": "a.png"}, idempotency_token="tok-1")
    assert d["DispatchedJobID"].startswith(disp_id + "/dispatch-") and d["EvalID"], d
    assert d["JobCreateIndex"] > 0 and d["EvalCreateIndex"] > 0 and d["Index"] > 0, d
    again = n.job.dispatch_job(disp_id, payload=payload, meta={"image": "b.png"}, idempotency_token="tok-1")
    assert again["DispatchedJobID"] == d["DispatchedJobID"] and again["EvalID"] == "", again
    try:
        n.job.dispatch_job(disp_id, meta={"image": "a.png"})
        raise AssertionError("a dispatch without the required payload must be refused")
    except exceptions.BadRequestNomadException as e:
        assert "Payload is not provided but required" in e.nomad_resp.text, e.nomad_resp.text
    try:
        n.job.dispatch_job(plain_id, payload=payload)
        raise AssertionError("dispatching a job that is not parameterized must be refused")
    except exceptions.BadRequestNomadException as e:
        assert "not a parameterized job" in e.nomad_resp.text, e.nomad_resp.text
    kids = children_of(disp_id)
    assert [k["ID"] for k in kids] == [d["DispatchedJobID"]], kids
    wait_until("the dispatched child to complete", lambda: completed(d["DispatchedJobID"]))
    for parent in (cron_id, disp_id, plain_id):
        n.job.deregister_job(parent, purge=True)
    # Every namespace's jobs with `*`.
    assert any(j["ID"] == job_id for j in n.jobs.get_jobs(namespace="*")), "namespace=*"
    everywhere = n.allocations.get_allocations(namespace="*")
    assert any(a["JobID"] == job_id for a in everywhere), "allocations namespace=*"
    assert not n.allocations.get_allocations(namespace="nowhere"), "another namespace's"
    # Namespaces as objects: created, read, updated, listed, deleted.
    n.namespace.create_namespace({"Name": "pyns", "Description": "from python"})
    wait_until("the namespace readable", lambda: "pyns" in n.namespace)
    assert n.namespace.get_namespace("pyns")["Description"] == "from python"
    n.namespace.update_namespace("pyns", {"Name": "pyns", "Description": "changed"})
    wait_until(
        "the namespace changed",
        lambda: n.namespace.get_namespace("pyns")["Description"] == "changed",
    )
    names = {ns["Name"] for ns in n.namespaces.get_namespaces()}
    assert {"default", "pyns"} <= names, names
    try:
        n.namespace.delete_namespace("default")
        raise AssertionError("the default namespace must not be deletable")
    except exceptions.BadRequestNomadException as e:
        assert "can not be deleted" in e.nomad_resp.text, e.nomad_resp.text
    n.namespace.delete_namespace("pyns")
    wait_until("the namespace gone", lambda: "pyns" not in n.namespace)
    # Summaries recomputed from the allocations through raft; a right one stays right
    # (tried again if an allocation moved meanwhile).
    def reconcile_keeps_summary():
        before = n.job.get_summary(job_id)["Summary"]
        assert n.system.reconcile_summaries() is True
        return n.job.get_summary(job_id)["Summary"] == before

    wait_until("a reconcile that leaves the summary as it was", reconcile_keeps_summary)

    # Metrics (JSON by default), the servers an agent knows, search by prefix and fuzzy.
    metrics = n.metrics.get_metrics()
    assert any(g["Name"] == "teamster_raft_is_leader" for g in metrics["Gauges"]), metrics
    assert "Counters" in metrics and "Samples" in metrics and metrics["Timestamp"], metrics
    servers = n.agent.get_servers()
    assert len(servers) == 3 and all(":" in s for s in servers), servers
    found = n.search.search(job_id[:4], "jobs")
    assert job_id in found["Matches"]["jobs"], found
    assert found["Truncations"]["jobs"] is False, found
    everything = n.search.search(alloc["ID"][:6], "all")
    assert alloc["ID"] in everything["Matches"]["allocs"], everything
    assert set(everything["Matches"]) >= {"jobs", "evals", "allocs", "nodes"}, everything
    fuzzy = n.search.fuzzy_search(job_id[1:5].upper(), "jobs")
    assert {"ID": job_id, "Scope": ["default"]} in fuzzy["Matches"]["jobs"], fuzzy
    try:
        n.search.fuzzy_search("t", "jobs")
        raise AssertionError("a one-character fuzzy search must be refused")
    except exceptions.BadRequestNomadException as e:
        assert "at least 2" in e.nomad_resp.text, e.nomad_resp.text

    # The event stream: python-nomad's reader thread puts each non-heartbeat frame on a
    # queue; a registration shows up as a Job event.
    ev_id = job_id + "-events"
    stream, stream_exit, events = n.event.stream.get_stream(
        topic={"Job": ev_id}, timeout=30
    )
    stream.daemon = True
    stream.start()
    time.sleep(0.5)
    ev_job = {"Job": dict(job["Job"], ID=ev_id, Name=ev_id)}
    n.jobs.register_job(ev_job)
    deadline = time.monotonic() + 20
    seen = []
    while time.monotonic() < deadline:
        frame = events.get(timeout=max(0.1, deadline - time.monotonic()))
        seen.extend(frame.get("Events", []))
        if any(e["Type"] == "JobRegistered" and e["Key"] == ev_id for e in seen):
            break
    else:
        raise AssertionError("no JobRegistered event: %r" % seen)
    assert all(e["Topic"] == "Job" for e in seen), seen
    stream_exit.set()
    n.job.deregister_job(ev_id, purge=True)

    # Restart and signal a running allocation's task in place (a server forwards to the
    # client that runs it): Restarts counts the restart, each signal is a Signaling event.
    def running_alloc():
        for a in n.job.get_allocations(job_id):
            if a["DesiredStatus"] == "run" and a["ClientStatus"] == "running":
                return a
        return None

    def task_state(alloc_id):
        return n.allocation.get_allocation(alloc_id)["TaskStates"]["t"]

    target = wait_until("a running allocation", running_alloc)["ID"]
    restarts = task_state(target)["Restarts"]
    assert isinstance(n.client.allocation.restart_allocation(target), dict)
    wait_until(
        "the task restarted in place",
        lambda: (lambda s: s["Restarts"] == restarts + 1 and s["State"] == "running")(
            task_state(target)
        ),
    )
    assert isinstance(n.client.allocation.signal_allocation(target, "SIGUSR1"), dict)
    n.client.allocation.signal_allocation(target, "SIGHUP", task="t")
    wait_until(
        "two Signaling events",
        lambda: sum(e["Type"] == "Signaling" for e in task_state(target)["Events"]) >= 2,
    )
    for bad, args in (("SIGNOPE", ("SIGNOPE",)), ("nope", ("SIGHUP", "nope"))):
        try:
            n.client.allocation.signal_allocation(target, *args)
            raise AssertionError("a bad signal request must be refused: %r" % (args,))
        except exceptions.BadRequestNomadException as e:
            assert bad in e.nomad_resp.text, e.nomad_resp.text

    # Resource usage of the allocation (a mock task has no process: zero, nothing measured)
    # and of its node, which a server-only agent needs named.
    usage = n.client.allocation.read_allocation_stats(target)
    assert usage["Tasks"]["t"]["ResourceUsage"]["MemoryStats"]["RSS"] == 0, usage
    assert "CpuStats" in usage["ResourceUsage"] and usage["Timestamp"] > 0, usage
    node_id = n.allocation.get_allocation(target)["NodeID"]
    host = n.client.stats.read_stats(node_id=node_id)
    assert host["Memory"]["Total"] > 0 and host["CPU"] and host["Uptime"] > 0, host
    try:
        n.client.stats.read_stats()
        raise AssertionError("a server-only agent must be told which node")
    except exceptions.BadRequestNomadException as e:
        assert "node_id" in e.nomad_resp.text, e.nomad_resp.text

    # Stop one allocation: it is marked to migrate, an alloc-stop evaluation stops it and
    # places a replacement.
    victim = [a for a in n.job.get_allocations(job_id) if a["DesiredStatus"] == "run"][0]
    resp = n.allocation.stop_allocation(victim["ID"])
    assert resp["EvalID"] and resp["Index"] > 0, resp
    stop_eval = wait_until(
        "the alloc-stop evaluation", lambda: evaluation_or_none(n, resp["EvalID"])
    )
    assert stop_eval["TriggeredBy"] == "alloc-stop", stop_eval
    stopped = wait_until(
        "the stopped allocation replaced",
        lambda: (lambda a: a if a["DesiredStatus"] == "stop" and a["NextAllocation"] else None)(
            n.allocation.get_allocation(victim["ID"])
        ),
    )
    assert stopped["DesiredTransition"]["Migrate"] is True, stopped
    try:
        n.allocation.stop_allocation("00000000-0000-0000-0000-000000000000")
        raise AssertionError("stopping an unknown allocation must raise URLNotFoundNomadException")
    except exceptions.URLNotFoundNomadException:
        pass

    # Deregister (the job stays, stopped); once its allocations are terminal, a forced
    # garbage collection removes it.
    resp = n.job.deregister_job(job_id)
    assert resp["EvalID"], resp
    assert n.job.get_job(job_id)["Stop"] is True

    def collected():
        assert n.system.initiate_garbage_collection() is True
        try:
            n.job.get_job(job_id)
            return False
        except exceptions.URLNotFoundNomadException:
            return True

    wait_until("system gc to collect the stopped job", collected, timeout=60)
    forced = [e for e in n.evaluations.get_evaluations() if e["JobID"] == "force-gc"]
    assert forced, "a force-gc evaluation"
    # Variables: created (with cas=0: only if new), read, listed by prefix, a stale cas
    # refused with VariableConflict, deleted.
    first = "py/%s/first" % job_id
    written = n.variable.create_variable(first, {"Items": {"user": "test", "password": "test123"}})
    assert written["Items"]["user"] == "test", written
    second = n.variable.create_variable(
        "py/%s/second" % job_id, {"Items": {"user": "t2"}}, namespace="default", cas=0
    )
    assert second["ModifyIndex"] > 0, second
    assert first in n.variables, "variables.__contains__"
    assert n.variable.get_variable(first)["Items"]["password"] == "test123"
    assert n.variable[first]["Path"] == first
    assert len(n.variables.get_variables("py/%s/" % job_id)) == 2
    assert len(n.variables.get_variables("no_exist_var")) == 0
    try:
        n.variable["py/%s/none" % job_id]
        raise AssertionError("a missing variable must raise KeyError")
    except KeyError:
        pass
    try:
        n.variable.create_variable(first, {"Items": {"user": "x"}}, cas=0)
        raise AssertionError("a stale cas must raise VariableConflict")
    except exceptions.VariableConflict:
        pass
    n.variable.delete_variable(first, cas=written["ModifyIndex"])
    n.variable.delete_variable("py/%s/second" % job_id)
    assert first not in n.variables

    print("python-nomad flows passed against %s:%d" % (host, port))


if __name__ == "__main__":
    main()
