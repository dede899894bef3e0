# Placement: constraints (plain, shortcut and explicit operators), affinities and spreads at
# the job, group and task levels, all satisfiable by one Linux dev agent (one warmer per
# host: raise `warmers` on a bigger cluster).
variable "warmers" {
  type    = number
  default = 1
}

job "cache-warmer" {
  type        = "service"
  priority    = 40
  datacenters = ["dc1", "dc2"]

  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }

  affinity {
    attribute = "${attr.nomad.version}"
    version   = ">= 1.6.0"
    weight    = 30
  }

  affinity {
    attribute = "${node.datacenter}"
    value     = "dc1"
    weight    = 70
  }

  spread {
    attribute = "${node.datacenter}"
    weight    = 100

    target "dc1" {
      percent = 70
    }

    target "dc2" {
      percent = 30
    }
  }

  group "warmers" {
    count = var.warmers

    constraint {
      operator = "distinct_hosts"
      value    = "true"
    }

    constraint {
      distinct_property = "${node.datacenter}"
      value             = "2"
    }

    affinity {
      attribute        = "${meta.disk_kinds}"
      set_contains_any = "ssd,nvme"
      weight           = -30
    }

    spread {
      attribute = "${meta.rack}"
    }

    task "warm" {
      driver = "raw_exec"

      constraint {
        attribute = "${attr.unique.storage.bytesfree}"
        operator  = "is_set"
      }

      constraint {
        attribute = "${attr.cpu.arch}"
        regexp    = "^(amd64|arm64|x86_64|aarch64)$"
      }

      affinity {
        attribute = "${attr.unique.hostname}"
        operator  = "regexp"
        value     = "^cache-"
        weight    = 20
      }

      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }

      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
