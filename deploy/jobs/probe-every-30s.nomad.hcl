# A periodic probe with Nomad's longer cron forms: seven fields start with seconds (every
# 30 s here), six fields end with a year (Mondays at 04:00, in 2027 only).
job "probe-every-30s" {
  type        = "batch"
  datacenters = ["dc1"]

  periodic {
    crons            = ["*/30 * * * * * *", "0 4 * * 1 2027"]
    prohibit_overlap = true
  }

  group "probe" {
    task "probe" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "date; echo probe ok"]
      }

      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
