# A system job that rolls a new version out through a deployment (Nomad 1.11's system
# deployments): a canary on half the nodes first, promoted by hand once healthy
# (`deployment promote`), then one node at a time, each next one when the last is healthy.
job "node-agent-rolling" {
  type        = "system"
  datacenters = ["dc1"]

  update {
    max_parallel     = 1
    canary           = 50
    min_healthy_time = "5s"
    healthy_deadline = "1m"
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
