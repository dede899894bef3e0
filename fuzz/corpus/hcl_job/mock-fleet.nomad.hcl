# Mock tasks sized by a `variables` block, with map variables read through lookup, a
# conditional count and labels merged into one JSON meta value.
variables {
  fleet_size  = 3
  environment = "staging"
}

variable "labels" {
  type = map(string)
  default = {
    cost_center = "ops"
    owner       = "platform"
  }
}

variable "run_for_by_env" {
  type = map(string)
  default = {
    production = "30s"
    staging    = "5s"
  }
}

locals {
  labels  = merge(var.labels, { owner = "fleet-team", tier = "batch" })
  run_for = lookup(var.run_for_by_env, var.environment, "10s")
}

job "mock-fleet" {
  type        = "batch"
  datacenters = ["dc1"]

  meta {
    environment = var.environment
    labels      = jsonencode(local.labels)
  }

  group "fleet" {
    count = var.environment == "production" ? var.fleet_size * 2 : var.fleet_size

    meta {
      size = var.fleet_size
    }

    task "mock" {
      driver = "mock"

      config {
        run_for   = local.run_for
        exit_code = 0
      }

      resources {
        cpu    = 10
        memory = 16
      }
    }
  }
}
