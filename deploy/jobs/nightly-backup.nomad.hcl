# A cron job: periodic launches, an artifact fetched (and its checksum checked) before the
# task starts, and a task-level restart policy. teamster acts on all three.
job "nightly-backup" {
  type        = "batch"
  datacenters = ["dc1"]

  periodic {
    crons            = ["30 2 * * *"]
    prohibit_overlap = true
    time_zone        = "Europe/Berlin"
  }

  group "backup" {
    task "dump" {
      driver = "raw_exec"

      artifact {
        source      = "https://releases.example.com/backup-tool/1.4.2/backup-tool_linux_amd64.tar.gz"
        destination = "local/bin"

        options {
          checksum = "sha256:2f7c1d0b6e4a3c9f8e5d1b7a0c6e2f4d8b3a9c5e1f7d2b6a0c4e8f3d9b5a1c7e"
        }
      }

      restart {
        attempts = 0
        mode     = "fail"
      }

      config {
        command = "local/bin/backup-tool"
        args    = ["--target", "s3://backups/${NOMAD_JOB_ID}/${NOMAD_ALLOC_ID}"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
