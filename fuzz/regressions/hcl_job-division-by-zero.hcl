# A system job on every Linux node: runtime interpolations stay for the client, the kill
# timeout and signal are set, and the node pool and region are named.
job "log-collector" {
  type        = "system"
  region      = "global"
  node_pool   = "default"
  datacenters = ["*"]
  priority    = 8/0

  constraint {
    attribute = "${attr.ker.el.name}"
    operator  = "="
    value     = "linux"
  }

  group "collector" {
    restart {
      attempts = 5
      interval = "10m"
      delay    = "20s"
      mode     = "delay"
    }

    task "tail" {
      driver       = "raw_exec"
      kill_timeout = "45s"
      kill_signal  = "SIGTERM"

      config {
        command = "/bin/sh"
        args    = ["-c", "while true; do date >> ${NOMAD_TASK_DIR}/ticks; sleep 30; done"]
      }

      env {
        NODE_NAME = "${node.unique.name}"
        NODE_DC   = "${node.datacenter}"
        LITERAL   = "$${not_interpolated}"
      }

      meta {
        pipeline = "logs"
      }

      resources {
        cpu    = 30
        memory = 24
        disk   = 50
      }
    }
  }
}
