# A leader task with a sidecar log shipper: log rotation limits, a leader flag and an
# interrupt signal. teamster refuses logs, leader and a kill signal other than SIGTERM.
job "chatty-leader" {
  type        = "batch"
  datacenters = ["dc1"]

  group "job" {
    task "main" {
      driver      = "raw_exec"
      leader      = true
      kill_signal = "SIGINT"

      logs {
        max_files     = 5
        max_file_size = 20
      }

      config {
        command = "/bin/sh"
        args    = ["-c", "for i in 1 2 3; do echo line $i; done"]
      }

      resources {
        cpu    = 20
        memory = 16
      }
    }

    task "shipper" {
      driver = "raw_exec"

      config {
        command = "/bin/sleep"
        args    = ["60"]
      }

      resources {
        cpu    = 10
        memory = 16
      }
    }
  }
}
