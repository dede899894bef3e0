# A docker task: busybox's httpd from the teamster:dev image (deploy/build-image.sh) serving
# the task's local/ directory, on a dynamic host port published to container port 8080.
# teamster never pulls: the image must already be on the node (docs/drivers.md).
job "docker-web" {
  type        = "service"
  datacenters = ["dc1"]

  group "web" {
    count = 1

    network {
      port "http" {
        to = 8080
      }
    }

    task "httpd" {
      driver       = "docker"
      kill_timeout = "3s"

      config {
        image      = "teamster:dev"
        entrypoint = ["/bin/busybox"]
        args       = ["httpd", "-f", "-v", "-p", "8080", "-h", "/local"]
        ports      = ["http"]
        labels     = { app = "docker-web" }
      }

      env {
        GREETING = "hello from ${NOMAD_ALLOC_ID}"
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
