# The example job with a task every node can run: the raw_exec driver runs a shell loop
# as a plain process (no image to pull). It writes to its log every 10 seconds
# (`teamster alloc logs -job example`) and is registered as the service "example-loop".
job "example" {
  datacenters = ["*"]
  type        = "service"

  update {
    max_parallel      = 1
    min_healthy_time  = "10s"
    healthy_deadline  = "3m"
    progress_deadline = "10m"
    auto_revert       = false
    canary            = 0
  }

  ui {
    description = "An example job any node runs"
  }

  group "loop" {
    count = 1

    network {
      port "http" {}
    }

    service {
      name     = "example-loop"
      tags     = ["example"]
      port     = "http"
      provider = "nomad"
    }

    restart {
      attempts = 2
      interval = "30m"
      delay    = "15s"
      mode     = "fail"
    }

    task "loop" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "while true; do echo \"example running on port $NOMAD_PORT_http, token in $NOMAD_SECRETS_DIR/nomad_token\"; sleep 10; done"]
      }

      identity {
        env  = true
        file = true
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
