# The HCL twin of node-agent-system.json.
job "node-agent" {
  type        = "system"
  datacenters = ["dc1"]

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
