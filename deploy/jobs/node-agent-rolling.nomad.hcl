# A system job that rolls a new version out one node at a time, 20 seconds apart (Nomad's
# system rolling update: max_parallel allocations per evaluation, the next step stagger
# later; no deployment, no health wait).
job "node-agent-rolling" {
  type        = "system"
  datacenters = ["dc1"]

  update {
    max_parallel = 1
    stagger      = "20s"
  }

  group "agent" {
    task "agent" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "while true; do date; sleep 30; done"]
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
