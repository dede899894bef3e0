# A job whose display name differs from its ID, with a docker-free exporter: the `name`
# argument, an affinity away from spot nodes and task meta built with format/upper.
variable "scrape_port" {
  type    = number
  default = 9100
}

locals {
  exporter = "node"
}

job "metrics-exporter" {
  name        = "Metrics Exporter"
  datacenters = ["dc1"]

  meta {
    scrape_target = format("%s-exporter:%d", local.exporter, var.scrape_port)
  }

  group "exporter" {
    affinity {
      attribute = "${node.class}"
      operator  = "!="
      value     = "spot"
      weight    = -50
    }

    task "exporter" {
      driver = "raw_exec"

      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }

      env {
        EXPORTER    = upper(local.exporter)
        LISTEN_ADDR = "${NOMAD_IP_metrics}:${var.scrape_port}"
      }

      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
