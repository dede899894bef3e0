# A web tier spread over datacenters given as a list variable; concat builds the datacenter
# list and join/format turn values into strings for the task.
variable "extra_datacenters" {
  type    = list(string)
  default = ["dc2"]
}

variable "replicas" {
  type    = number
  default = 2
}

job "static-site" {
  datacenters = concat(["dc1"], var.extra_datacenters)

  group "site" {
    count = var.replicas

    spread {
      attribute = "${node.datacenter}"
      weight    = 50
    }

    affinity {
      attribute = "${node.class}"
      operator  = "!="
      value     = "spot"
      weight    = 40
    }

    task "serve" {
      driver = "raw_exec"

      config {
        command = "/bin/sleep"
        args    = [format("%d", 2 * 3600)]
      }

      env {
        SITE_ROOT   = "${NOMAD_TASK_DIR}/public"
        DATACENTERS = join(" ", concat(["dc1"], var.extra_datacenters))
      }

      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
