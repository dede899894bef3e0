# A database on a host volume and a CSI volume, with a sticky ephemeral disk, a static port
# and a task-level service with a TCP check. Accepted; it is placed on no node, as in Nomad
# without CSI: its evaluation says "missing CSI volume(s) pg-certs". (A native service
# cannot have a script check: Nomad and teamster refuse one.)
job "postgres" {
  type        = "service"
  datacenters = ["dc1"]

  group "db" {
    volume "pgdata" {
      type      = "host"
      source    = "pgdata"
      read_only = false
    }

    volume "certs" {
      type            = "csi"
      source          = "pg-certs"
      read_only       = true
      access_mode     = "single-node-reader-only"
      attachment_mode = "file-system"
    }

    ephemeral_disk {
      sticky  = true
      migrate = true
    }

    network {
      mode = "host"

      port "pg" {
        static = 5432
      }
    }

    task "postgres" {
      driver = "docker"

      volume_mount {
        volume      = "pgdata"
        destination = "/var/lib/postgresql/data"
        read_only   = false
      }

      volume_mount {
        volume      = "certs"
        destination = "/certs"
        read_only   = true
      }

      config {
        image = "postgres:16"
        ports = ["pg"]
      }

      env {
        POSTGRES_DB = "app"
        PGDATA      = "/var/lib/postgresql/data/pgdata"
      }

      service {
        name     = "postgres"
        port     = "pg"
        provider = "nomad"

        check {
          name     = "pg_port"
          type     = "tcp"
          interval = "15s"
          timeout  = "3s"
        }
      }

      resources {
        cpu    = 500
        memory = 512
      }
    }
  }
}
