# The HCL twin of web-service.json: constraint, restart, reschedule and a kill timeout.
job "web" {
  type        = "service"
  priority    = 60
  datacenters = ["dc1"]

  group "web" {
    count = 3

    constraint {
      attribute = "${attr.kernel.name}"
      operator  = "="
      value     = "linux"
    }

    restart {
      attempts = 3
      interval = "5m"
      delay    = "5s"
      mode     = "delay"
    }

    reschedule {
      attempts       = 0
      unlimited      = true
      delay          = "5s"
      delay_function = "exponential"
      max_delay      = "1m"
    }

    task "httpd" {
      driver       = "raw_exec"
      kill_timeout = "5s"

      config {
        command = "/bin/sh"
        args    = ["-c", "while true; do echo serving; sleep 5; done"]
      }

      resources {
        cpu    = 200
        memory = 128
      }
    }
  }
}
