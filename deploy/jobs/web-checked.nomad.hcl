# Two instances of a small HTTP server on dynamic ports, registered as the service
# "web-checked" with an HTTP check; the rollout waits for the check. Runs on `agent --dev`:
#   teamster job run deploy/jobs/web-checked.nomad.hcl
#   teamster service info web-checked
job "web-checked" {
  type        = "service"
  datacenters = ["dc1"]

  group "web" {
    count = 2

    network {
      port "http" {}
    }

    update {
      max_parallel     = 1
      health_check     = "checks"
      min_healthy_time = "2s"
      healthy_deadline = "1m"
    }

    service {
      name     = "web-checked"
      port     = "http"
      provider = "nomad"
      tags     = ["demo"]

      check {
        name     = "index"
        type     = "http"
        path     = "/"
        interval = "2s"
        timeout  = "1s"
      }
    }

    task "server" {
      driver = "raw_exec"

      config {
        command = "/usr/bin/python3"
        args    = ["-m", "http.server", "${NOMAD_PORT_http}", "--bind", "${NOMAD_IP_http}"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
