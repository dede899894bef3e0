# A checkout service and its payments backend on a Consul service mesh (Consul Connect),
# with an ingress gateway in front, as a Nomad job for a cluster with Consul is written.
# teamster accepts it as Nomad accepts it on a cluster whose clients have no Consul: every
# Connect service is a Consul service, so each group gets Nomad's implied constraint
# ${attr.consul.version}; no teamster node fingerprints Consul, so the job stays pending and
# `job status` names what is missing. Nothing of the mesh is acted on, and teamster does not
# add the Envoy proxy and gateway tasks Nomad's servers add to these groups:
#   teamster job run deploy/jobs/mesh-checkout.nomad.hcl
#   teamster job status mesh-checkout   # Placement Failure: Constraint "${attr.consul.version} ...
job "mesh-checkout" {
  datacenters = ["dc1"]

  group "payments" {
    count = 2

    network {
      mode = "bridge"
    }

    # The Consul namespace and admin partition the group's services register in.
    consul {
      namespace = "shop"
      partition = "retail"
    }

    service {
      name = "payments"
      port = "7070"
      tags = ["v2"]

      connect {
        sidecar_service {
          tags = ["mesh"]

          proxy {
            local_service_port = 7070

            config {
              protocol = "grpc"
            }
          }
        }

        sidecar_task {
          shutdown_delay = "5s"

          resources {
            cpu    = 100
            memory = 64
          }
        }
      }

      check {
        name     = "payments-alive"
        type     = "http"
        path     = "/healthz"
        interval = "10s"
        timeout  = "2s"
        expose   = true
      }
    }

    task "payments" {
      driver = "docker"

      config {
        image = "registry.example.com/shop/payments:2.4.1"
      }

      # The task's own Consul settings (used by its Consul templates).
      consul {
        namespace = "shop"
      }

      resources {
        cpu    = 300
        memory = 256
      }
    }
  }

  group "checkout" {
    network {
      mode = "bridge"

      port "http" {
        to = 8080
      }
    }

    service {
      name = "checkout"
      port = "http"

      connect {
        sidecar_service {
          proxy {
            upstreams {
              destination_name = "payments"
              local_bind_port  = 7070
            }

            upstreams {
              destination_name   = "ledger"
              local_bind_address = "127.0.0.2"
              local_bind_port    = 7070
              datacenter         = "dc2"

              mesh_gateway {
                mode = "local"
              }
            }
          }
        }
      }
    }

    task "checkout" {
      driver = "docker"

      config {
        image = "registry.example.com/shop/checkout:5.0.0"
        ports = ["http"]
      }

      env {
        PAYMENTS_ADDR = "${NOMAD_UPSTREAM_ADDR_payments}"
      }

      resources {
        cpu    = 200
        memory = 128
      }
    }
  }

  # An ingress gateway: a group of only a gateway service (Nomad's servers would add the
  # gateway's Envoy task to it).
  group "ingress" {
    network {
      mode = "bridge"

      port "inbound" {
        static = 8443
        to     = 8443
      }
    }

    service {
      name = "shop-ingress"
      port = "8443"

      connect {
        gateway {
          proxy {
            connect_timeout = "3s"
          }

          ingress {
            listener {
              port     = 8443
              protocol = "http"

              service {
                name  = "checkout"
                hosts = ["shop.example.com"]
              }
            }
          }
        }
      }
    }
  }
}
