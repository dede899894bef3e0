# A group scaled by the Nomad Autoscaler between 2 and 10 allocations. teamster refuses the
# `scaling` block by name (it runs no scaling policies yet).
job "autoscaled-api" {
  datacenters = ["dc1"]

  group "api" {
    count = 2

    scaling {
      enabled = true
      min     = 2
      max     = 10

      policy {
        cooldown            = "2m"
        evaluation_interval = "30s"
      }
    }

    task "api" {
      driver = "raw_exec"

      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
