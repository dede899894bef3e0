"""Read a task's output with the unmodified python-nomad 2.1.0 from Nomad's allocation
directory: `alloc/logs/<task>.stdout.0`.

Usage: python python_nomad_logs.py HOST PORT ALLOC_ID

The allocation's task `redis` (Nomad's `job init` example, run by raw_exec) has written
three lines and waits.
Checks `client.cat.read_file`, `client.stat.stat_file`, `client.read_at.read_file_offset`,
`client.ls.list_files` and `client.stream_logs.stream` (plain and framed, from the start and
from the end). Prints "logs: all flows passed" at the end and exits non-zero on any failed
assertion.
"""

import base64
import json
import sys

import nomad
from nomad.api import exceptions

EXPECTED = "hello from redis\nready to serve\nwaiting\n"


def frames(text):
    """The JSON frames of a framed logs answer (concatenated objects)."""
    decoder = json.JSONDecoder()
    out, i = [], 0
    while i < len(text):
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        obj, i = decoder.raw_decode(text, i)
        out.append(obj)
    return out


def main():
    host, port, alloc_id = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    task = "redis"
    n = nomad.Nomad(host=host, port=port, timeout=10)
    path = "alloc/logs/%s.stdout.0" % task

    text = n.client.cat.read_file(alloc_id, path)
    assert text == EXPECTED, repr(text)

    entry = n.client.stat.stat_file(alloc_id, path)
    assert entry["Name"] == "%s.stdout.0" % task, entry
    assert entry["Size"] == len(EXPECTED) and entry["IsDir"] is False, entry

    part = n.client.read_at.read_file_offset(alloc_id, 6, 4, path)
    assert part == EXPECTED[6:10], repr(part)

    names = sorted(f["Name"] for f in n.client.ls.list_files(alloc_id, path="alloc/logs"))
    assert "%s.stdout.0" % task in names and "%s.stderr.0" % task in names, names

    plain = n.client.stream_logs.stream(alloc_id, task, "stdout", plain=True)
    assert plain == EXPECTED, repr(plain)
    tail = n.client.stream_logs.stream(alloc_id, task, "stdout", origin="end", offset=8, plain=True)
    assert tail == "waiting\n", repr(tail)
    framed = frames(n.client.stream_logs.stream(alloc_id, task, "stdout"))
    data = b"".join(base64.b64decode(f["Data"]) for f in framed if f.get("Data"))
    assert data.decode() == EXPECTED, data
    assert framed[-1]["File"] == path and framed[-1]["Offset"] == len(EXPECTED), framed

    # What the file API refuses, python-nomad reports as Nomad's errors.
    try:
        n.client.stream_logs.stream(alloc_id, "no-such-task", "stdout", plain=True)
        raise AssertionError("an unknown task must be refused")
    except exceptions.BadRequestNomadException as e:
        assert "unknown task name" in e.nomad_resp.text, e.nomad_resp.text
    try:
        n.client.cat.read_file(alloc_id, "alloc/logs/nothing.stdout.0")
        raise AssertionError("a missing file must be refused")
    except exceptions.BadRequestNomadException as e:
        assert "nothing.stdout.0" in e.nomad_resp.text, e.nomad_resp.text
    print("logs: all flows passed")


if __name__ == "__main__":
    main()
