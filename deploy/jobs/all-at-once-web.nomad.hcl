# A service whose new versions replace every allocation at once (`max_parallel = 0` turns
# deployments off, as in Nomad) and whose count starts at its scaling minimum (no `count`).
job "all-at-once-web" {
  type        = "service"
  datacenters = ["dc1"]

  update {
    max_parallel = 0
  }

  group "web" {
    scaling {
      min = 2
      max = 6
    }

    task "web" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "while true; do sleep 60; done"]
      }

      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
