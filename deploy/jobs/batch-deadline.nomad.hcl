# A nightly import that must not run past its window: max_run_duration stops the
# allocation 30 minutes after it was created (it ends `complete`, "allocation exceeded
# max_run_duration"); the poststop report runs only if the import finishes in time.
# prevent_reschedule_on_lost (Nomad's deprecated form of disconnect.replace = false) keeps a
# run whose node goes away from starting a second copy elsewhere.
#   teamster job run deploy/jobs/batch-deadline.nomad.hcl
job "batch-deadline" {
  type        = "batch"
  datacenters = ["dc1"]

  group "import" {
    max_run_duration           = "30m"
    prevent_reschedule_on_lost = true

    task "import" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo importing; sleep 5; echo done"]
      }

      resources {
        cpu    = 100
        memory = 32
      }
    }

    task "report" {
      driver = "raw_exec"

      lifecycle {
        hook = "poststop"
      }

      config {
        command = "/bin/sh"
        args    = ["-c", "echo import finished"]
      }

      resources {
        cpu    = 50
        memory = 16
      }
    }
  }
}
