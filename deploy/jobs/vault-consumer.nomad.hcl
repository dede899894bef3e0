# A task that reads a secret from Vault through a template, running as its own user.
# teamster refuses the vault block with Nomad's own message: its servers have no Vault.
job "vault-consumer" {
  datacenters = ["dc1"]

  group "api" {
    task "api" {
      driver = "exec"
      user   = "api"

      vault {
        role          = "api-read"
        change_mode   = "signal"
        change_signal = "SIGUSR1"
      }

      template {
        data        = "{{ with secret \"kv/data/api\" }}API_TOKEN={{ .Data.data.token }}{{ end }}"
        destination = "secrets/api.env"
        env         = true
      }

      config {
        command = "/usr/local/bin/api"
        args    = ["--listen", "127.0.0.1:8080"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
