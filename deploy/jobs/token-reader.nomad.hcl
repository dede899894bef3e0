# A task that calls the cluster's API with its own workload identity: the default identity
# in its environment and in secrets/nomad_token, and a short-lived named identity for an
# outside service, renewed every half hour or so and signalled to the task when it is.
job "token-reader" {
  datacenters = ["*"]

  group "reader" {
    task "lookup" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "while true; do wc -c < secrets/nomad_token; sleep 30; done"]
      }

      identity {
        env  = true
        file = true
      }

      identity {
        name          = "billing"
        aud           = ["billing.example.com"]
        file          = true
        ttl           = "1h"
        change_mode   = "signal"
        change_signal = "SIGHUP"
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
