# The HCL twin of hello-batch.json: both must give the same job.
job "hello" {
  type        = "batch"
  datacenters = ["dc1"]

  group "hello" {
    count = 1

    restart {
      attempts = 0
      mode     = "fail"
    }

    task "hello" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo hello; sleep 1"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
