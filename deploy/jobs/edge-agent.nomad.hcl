# An agent on edge nodes with flaky links: a disconnect strategy keeps the original
# allocation, and a shutdown delay drains connections. teamster acts on both.
job "edge-agent" {
  datacenters = ["edge"]

  group "agent" {
    shutdown_delay = "5s"

    disconnect {
      lost_after = "1h"
      replace    = false
      reconcile  = "keep_original"
    }

    task "agent" {
      driver = "raw_exec"

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
