# A job-level task (no group block): it becomes a group of one task, named after the task.
job "disk-cleanup" {
  type        = "sysbatch"
  datacenters = ["dc1"]

  meta {
    schedule = "by hand"
  }

  task "cleanup" {
    driver = "raw_exec"

    config {
      command = "/bin/sh"
      args    = ["-c", "find ${NOMAD_TASK_DIR} -mtime +7 -print; sleep 1"]
    }

    resources {
      cpu    = 20
      memory = 16
    }
  }
}
