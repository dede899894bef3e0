# A service whose new versions replace every allocation at once: `max_parallel = 0` turns
# deployments off, as in Nomad.
job "all-at-once-web" {
  type        = "service"
  datacenters = ["dc1"]

  update {
    max_parallel = 0
  }

  group "web" {
    count = 2

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
