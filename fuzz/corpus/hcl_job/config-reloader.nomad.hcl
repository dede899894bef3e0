# Configuration rendered by templates (one inline, one from a file fetched as an artifact)
# and reloaded with a signal. teamster refuses templates and artifacts by name.
job "config-reloader" {
  datacenters = ["dc1"]

  group "proxy" {
    task "haproxy" {
      driver = "raw_exec"

      artifact {
        source      = "https://config.example.com/haproxy/haproxy.cfg.tpl"
        destination = "local/haproxy.cfg.tpl"
        mode        = "file"

        headers {
          Authorization = "Bearer ${NOMAD_META_config_token}"
        }
      }

      template {
        source      = "local/haproxy.cfg.tpl"
        destination = "local/haproxy.cfg"
        change_mode = "noop"

        wait {
          min = "5s"
          max = "30s"
        }
      }

      template {
        data          = "{{ range nomadService \"web\" }}server {{ .Address }}:{{ .Port }}\n{{ end }}"
        destination   = "local/backends.cfg"
        change_mode   = "signal"
        change_signal = "SIGHUP"
        splay         = "10s"
        perms         = "0600"
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
  }
}
