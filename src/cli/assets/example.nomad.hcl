# An example job, the one `nomad job init` writes: a Redis cache, run by the docker
# driver, registered as the service "redis-cache" in the cluster's own service catalog.
# Run it with `teamster job run example.nomad.hcl`; see what it would change first with
# `teamster job plan example.nomad.hcl`.
job "example" {
  # Any datacenter. "type" is "service" (long-running) unless it says "batch", "system" or
  # "sysbatch".
  datacenters = ["*"]
  type        = "service"

  # Rolling updates: one allocation at a time, each healthy for 10s within 3m, the whole
  # deployment progressing within 10m. Set canary > 0 to try a new version on that many
  # allocations first, and auto_revert to go back to the last stable version on failure.
  update {
    max_parallel      = 1
    min_healthy_time  = "10s"
    healthy_deadline  = "3m"
    progress_deadline = "10m"
    auto_revert       = false
    canary            = 0
  }

  # How allocations move off a draining node: one at a time, each healthy (its checks
  # passing) for 10s within 5m.
  migrate {
    max_parallel     = 1
    health_check     = "checks"
    min_healthy_time = "10s"
    healthy_deadline = "5m"
  }

  # Shown by the web UI and `job status`.
  ui {
    description = "Nomad **Example** Job"
    link {
      label = "Learn more about Nomad"
      url   = "https://developer.hashicorp.com/nomad"
    }
  }

  # A group's tasks are placed together, on one node, as one allocation.
  group "cache" {
    count = 1

    # A dynamic host port, labelled "db", mapped to the container's 6379.
    network {
      port "db" {
        to = 6379
      }
    }

    # Registered while the allocation runs; `teamster service info redis-cache` lists it.
    service {
      name     = "redis-cache"
      tags     = ["global", "cache"]
      port     = "db"
      provider = "nomad"
    }

    # A failing task is restarted twice within 30m, 15s apart; then the allocation fails
    # (and is rescheduled).
    restart {
      attempts = 2
      interval = "30m"
      delay    = "15s"
      mode     = "fail"
    }

    # Scratch space for the allocation's tasks, in MB.
    ephemeral_disk {
      size = 300
    }

    task "redis" {
      driver = "docker"

      config {
        image          = "redis:7"
        ports          = ["db"]
        auth_soft_fail = true
      }

      # Given 10s between leaving the service catalog and being told to stop.
      shutdown_delay = "10s"

      # The task's workload identity: a token the servers sign, in NOMAD_TOKEN and in
      # secrets/nomad_token.
      identity {
        env  = true
        file = true
      }

      # 500 MHz of CPU and 256 MB of memory.
      resources {
        cpu    = 500
        memory = 256
      }
    }
  }
}
