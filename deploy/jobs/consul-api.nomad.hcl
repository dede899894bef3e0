# An API registered in Consul (no provider: Nomad's default), as most Nomad job files
# written for a cluster with Consul are. teamster accepts it as Nomad accepts it on a cluster
# whose clients have no Consul: the servers add Nomad's implied constraint
# ${attr.consul.version} to the group and to the task with a service, no teamster node
# fingerprints Consul, so the job stays pending and `job status` names what is missing
# (its gRPC and script checks are Consul's, kept with the job):
#   teamster job run deploy/jobs/consul-api.nomad.hcl
#   teamster job status consul-api      # Placement Failure: Constraint "${attr.consul.version} ...
job "consul-api" {
  datacenters = ["dc1"]

  # Shown by `job status` and the web UI's job page.
  ui {
    description = "The shop's API, registered in Consul."
    link {
      label = "Runbook"
      url   = "https://example.com/runbooks/consul-api"
    }
  }

  group "api" {
    count = 2

    network {
      port "http" {}
    }

    service {
      port = "http"
      tags = ["v1"]

      check {
        type     = "http"
        path     = "/health"
        interval = "10s"
        timeout  = "2s"
      }

      # Consul's check kinds and thresholds: kept with the job, run by Consul's agent
      # (teamster has none; the job stays pending).
      check {
        name                     = "grpc-health"
        type                     = "grpc"
        grpc_service             = "shop.Health"
        grpc_use_tls             = true
        tls_server_name          = "api.shop.internal"
        interval                 = "15s"
        timeout                  = "3s"
        success_before_passing   = 2
        failures_before_critical = 3
      }

      check {
        name     = "migrations-applied"
        type     = "script"
        task     = "api"
        command  = "/bin/sh"
        args     = ["-c", "test -f /local/migrated"]
        interval = "30s"
        timeout  = "5s"
        notes    = "Runs inside the api task."
      }
    }

    task "api" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "exec sleep 3600"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }

    task "metrics" {
      driver = "raw_exec"

      service {
        name = "api-metrics"
        port = "http"
      }

      config {
        command = "/bin/sh"
        args    = ["-c", "exec sleep 3600"]
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
