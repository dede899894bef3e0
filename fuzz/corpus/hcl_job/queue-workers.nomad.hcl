# Workers named and sized from an object variable, through locals that build on locals,
# with group and task meta and explicit restart and reschedule policies.
variable "queue" {
  type    = string
  default = "Orders"
}

variable "limits" {
  type = object({
    cpu    = number
    memory = number
  })
  default = {
    cpu    = 25
    memory = 24
  }
}

locals {
  queue_id    = lower(var.queue)
  worker_name = format("%s-worker", local.queue_id)
  banner      = upper(format("consuming %s", local.queue_id))
}

job "queue-workers" {
  datacenters = ["dc1"]

  group "workers" {
    count = 2

    meta {
      queue = local.queue_id
    }

    restart {
      attempts = 3
      interval = "5m"
      delay    = "15s"
      mode     = "delay"
    }

    reschedule {
      delay          = "30s"
      delay_function = "exponential"
      max_delay      = "10m"
      unlimited      = true
    }

    task "worker" {
      driver = "raw_exec"

      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }

      env {
        WORKER_NAME = local.worker_name
        BANNER      = local.banner
      }

      meta {
        worker = local.worker_name
      }

      resources {
        cpu    = var.limits.cpu
        memory = var.limits.memory
      }
    }
  }
}
