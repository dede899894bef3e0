# Two groups of several tasks each, argument lists built with concat, a heredoc script and
# the job-wide all_at_once/namespace settings.
variable "source_url" {
  type    = string
  default = "file:///var/tmp/etl/input.csv"
}

variable "extra_flags" {
  type    = list(string)
  default = ["--verbose"]
}

locals {
  base_flags = ["--source", var.source_url]
  script     = <<-EOT
    set -e
    echo "transforming from $SOURCE"
    sleep 2
  EOT
}

job "etl-pipeline" {
  type        = "batch"
  namespace   = "default"
  datacenters = ["dc1"]
  all_at_once = true

  group "extract" {
    task "fetch" {
      driver = "raw_exec"

      config {
        command = "/bin/echo"
        args    = concat(local.base_flags, var.extra_flags, ["--out", "${NOMAD_ALLOC_DIR}/raw"])
      }

      resources {
        cpu    = 20
        memory = 16
      }
    }

    task "checksum" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "sleep 1; echo ok"]
      }

      resources {
        cpu    = 10
        memory = 16
      }
    }
  }

  group "transform" {
    count = 2

    task "transform" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", local.script]
      }

      env {
        SOURCE = var.source_url
      }

      resources {
        cpu    = 40
        memory = 32
      }
    }
  }
}
