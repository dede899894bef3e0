# A cache that keeps its data across updates and drains: job-wide update and reschedule
# strategies, a group migrate strategy and a sticky, migrating ephemeral disk. teamster
# refuses the job-level reschedule by name (for now); the rest is acted on.
job "stateful-cache" {
  datacenters = ["dc1"]

  update {
    max_parallel     = 1
    min_healthy_time = "30s"
    healthy_deadline = "5m"
    auto_revert      = true
  }

  reschedule {
    delay          = "1m"
    delay_function = "fibonacci"
    max_delay      = "2h"
    unlimited      = true
  }

  group "cache" {
    count = 3

    migrate {
      max_parallel     = 1
      health_check     = "task_states"
      min_healthy_time = "20s"
      healthy_deadline = "3m"
    }

    ephemeral_disk {
      size    = 1024
      sticky  = true
      migrate = true
    }

    task "memcached" {
      driver = "raw_exec"

      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }

      resources {
        cpu    = 100
        memory = 128
      }
    }
  }
}
