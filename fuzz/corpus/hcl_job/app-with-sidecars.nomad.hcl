# Task lifecycle: a prestart task that waits for the database, a poststart sidecar, a
# poststop task, and the main task's environment rendered from a template. teamster refuses
# lifecycle and template by name.
job "app-with-sidecars" {
  datacenters = ["dc1"]

  group "app" {
    task "wait-for-db" {
      driver = "raw_exec"

      lifecycle {
        hook    = "prestart"
        sidecar = false
      }

      config {
        command = "/bin/sh"
        args    = ["-c", "until nc -z db.service.consul 5432; do sleep 1; done"]
      }

      resources {
        cpu    = 20
        memory = 16
      }
    }

    task "log-forwarder" {
      driver = "raw_exec"

      lifecycle {
        hook    = "poststart"
        sidecar = true
      }

      config {
        command = "/bin/sh"
        args    = ["-c", "tail -F ${NOMAD_ALLOC_DIR}/logs/app.stdout.0"]
      }

      resources {
        cpu    = 20
        memory = 16
      }
    }

    task "app" {
      driver = "raw_exec"

      template {
        data        = <<-EOT
          DB_HOST={{ env "attr.unique.network.ip-address" }}
          APP_ENV=production
        EOT
        destination = "secrets/app.env"
        env         = true
      }

      config {
        command = "/bin/sleep"
        args    = ["3600"]
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }

    task "flush" {
      driver = "raw_exec"

      lifecycle {
        hook = "poststop"
      }

      config {
        command = "/bin/sh"
        args    = ["-c", "echo flushed"]
      }

      resources {
        cpu    = 10
        memory = 16
      }
    }
  }
}
