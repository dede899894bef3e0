# The HCL twin of sleep.json.
locals {
  seconds = 60 * 60
}

job "sleep" {
  datacenters = ["dc1"]

  group "sleepers" {
    count = 2

    task "sleep" {
      driver = "raw_exec"

      config {
        command = "/bin/sleep"
        args    = [format("%d", local.seconds)]
      }

      resources {
        cpu    = 100
        memory = 32
      }
    }
  }
}
