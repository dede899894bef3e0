# A canary deployment of a health-checked web service: update, network ports (mapped and
# static) and a service with HTTP and TCP checks. teamster refuses these blocks by name: it
# runs no deployments and registers no services yet.
job "web-canary" {
  type        = "service"
  datacenters = ["dc1"]

  group "frontend" {
    count = 4

    update {
      max_parallel      = 2
      canary            = 1
      auto_promote      = true
      auto_revert       = true
      health_check      = "checks"
      stagger           = "30s"
      min_healthy_time  = "15s"
      healthy_deadline  = "2m"
      progress_deadline = "10m"
    }

    network {
      port "http" {
        to = 8080
      }

      port "metrics" {
        static = 9102
      }
    }

    service {
      name        = "web-canary"
      port        = "http"
      tags        = ["frontend", "urlprefix-/"]
      canary_tags = ["canary"]

      check {
        name     = "http-alive"
        type     = "http"
        path     = "/healthz"
        interval = "10s"
        timeout  = "2s"
      }

      check {
        type     = "tcp"
        port     = "metrics"
        interval = "30s"
        timeout  = "5s"
      }
    }

    task "nginx" {
      driver = "docker"

      config {
        image = "nginx:1.27"
        ports = ["http", "metrics"]
      }

      resources {
        cpu    = 200
        memory = 128
      }
    }
  }
}
