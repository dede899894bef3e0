# Memory oversubscription: the worker is guaranteed 64 MB and may burst to 256 MB when the
# scheduler configuration allows it (`teamster operator scheduler set-config
# -memory-oversubscription true`); otherwise the job runs with Nomad's warning and 64 MB is
# its limit. The container gets memory_max as its hard limit and memory as its reservation.
job "bursty-worker" {
  type        = "service"
  datacenters = ["dc1"]

  group "work" {
    count = 1

    task "worker" {
      driver = "docker"

      config {
        image      = "teamster:dev"
        entrypoint = ["/bin/busybox"]
        args       = ["sh", "-c", "echo limit=$NOMAD_MEMORY_LIMIT max=$NOMAD_MEMORY_MAX_LIMIT; exec sleep 3600"]
      }

      resources {
        cpu        = 100
        memory     = 64
        memory_max = 256
      }
    }
  }
}
