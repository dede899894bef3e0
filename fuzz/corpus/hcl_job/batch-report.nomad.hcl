# A report rendered in shards: typed variables with defaults, locals built from them with
# lower/replace/join/upper/format, an env block and a batch restart/reschedule policy.
#   teamster job run --var shards=4 --var 'regions=["emea"]' deploy/jobs/batch-report.nomad.hcl
variable "report_name" {
  type        = string
  default     = "Weekly Sales"
  description = "Shown in the report header."
}

variable "regions" {
  type    = list(string)
  default = ["emea", "apac", "amer"]
}

variable "shards" {
  type    = number
  default = 2
}

variable "dry_run" {
  type    = bool
  default = false
}

locals {
  slug       = lower(replace(var.report_name, " ", "-"))
  region_csv = join(",", var.regions)
}

job "batch-report" {
  type        = "batch"
  datacenters = ["dc1"]

  meta {
    report = local.slug
    owner  = upper("finance")
  }

  group "render" {
    count = var.shards

    restart {
      attempts = 1
      delay    = "10s"
      mode     = "fail"
    }

    reschedule {
      attempts  = 2
      interval  = "1h"
      delay     = "30s"
      unlimited = false
    }

    task "render" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo rendering $REPORT for $REGIONS; sleep 2"]
      }

      env {
        REPORT  = local.slug
        REGIONS = local.region_csv
        SHARD   = "${NOMAD_ALLOC_INDEX}"
        DRY_RUN = var.dry_run
        TITLE   = format("%s (%d shards)", var.report_name, var.shards)
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
