# Two allocations of a web group, each in a network namespace of its own on the client's
# bridge (network mode "bridge"): the server listens on 8080 inside the namespace (both
# allocations on one node may), a probe reaches it on localhost, and the port is published
# on a dynamic host port. Needs root clients with Debian's containernetworking-plugins.
job "bridge-web" {
  datacenters = ["*"]

  group "web" {
    count = 2

    network {
      mode = "bridge"

      port "http" {
        to = 8080
      }
    }

    service {
      name         = "bridge-web"
      port         = "http"
      provider     = "nomad"
      address_mode = "alloc"
    }

    task "server" {
      driver = "exec"

      config {
        command = "/usr/bin/python3"
        args    = ["-m", "http.server", "8080", "--directory", "/local"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }

    task "probe" {
      driver = "raw_exec"
      user   = "nobody"

      config {
        command = "/bin/sh"
        args    = ["-c", "while sleep 5; do python3 -c 'import urllib.request as u; u.urlopen(\"http://localhost:8080/\", timeout=2)' && echo up; done"]
      }

      resources {
        cpu    = 20
        memory = 32
      }
    }
  }
}
