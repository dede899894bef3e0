# An API registered in Consul (no provider: Nomad's default) and given a Vault token, as
# most Nomad job files written for a cluster with Consul and Vault are. teamster accepts it
# as Nomad accepts it on a cluster without them: the servers add Nomad's implied constraints
# (${attr.consul.version} and ${attr.vault.version}), no teamster node fingerprints either,
# so the job stays pending and `job status` names what is missing:
#   teamster job run deploy/jobs/consul-vault-api.nomad.hcl
#   teamster job status consul-vault-api      # Placement Failure: Constraint "${attr.vault.version} ...
job "consul-vault-api" {
  datacenters = ["dc1"]

  # Shown by `job status` and the web UI's job page.
  ui {
    description = "The shop's API, registered in Consul, with a Vault token."
    link {
      label = "Runbook"
      url   = "https://example.com/runbooks/consul-vault-api"
    }
  }

  group "api" {
    count = 2

    network {
      port "http" {}
    }

    # A group's vault block is the default of its tasks.
    vault {
      role = "api-read"
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

      vault {
        policies      = ["metrics"]
        change_mode   = "signal"
        change_signal = "SIGUSR1"
      }

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
