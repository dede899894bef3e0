# A gRPC service in a bridge network namespace with its own DNS settings and hostname, a
# port on a named host network, and a service with metadata and a gRPC health check that
# restarts the task. teamster refuses the port's host_network by name, and the gRPC check of a
# service without a provider (Nomad's own) as Nomad does.
job "grpc-bridge" {
  datacenters = ["dc1"]

  group "api" {
    network {
      mode     = "bridge"
      hostname = "api-${NOMAD_ALLOC_INDEX}"

      dns {
        servers  = ["10.0.0.53"]
        searches = ["service.consul"]
      }

      port "grpc" {
        to           = 9090
        host_network = "private"
      }
    }

    service {
      name         = "grpc-api"
      port         = "grpc"
      address_mode = "alloc"

      meta {
        protocol = "grpc"
      }

      check {
        type         = "grpc"
        port         = "grpc"
        grpc_service = "api.v1.Health"
        grpc_use_tls = true
        interval     = "10s"
        timeout      = "2s"

        check_restart {
          limit = 3
          grace = "30s"
        }
      }
    }

    task "api" {
      driver = "docker"

      config {
        image = "ghcr.io/example/grpc-api:2.1.0"
        ports = ["grpc"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
