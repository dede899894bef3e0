# A latency-sensitive worker on a core of its own: `cores` reserves whole cores for the task
# alone (instead of MHz). The scheduler gives it the lowest free core of a node, the task
# runs pinned to it (raw_exec: its CPU affinity) and sees it in NOMAD_CPU_CORES:
#   teamster job run deploy/jobs/pinned-worker.nomad.hcl
#   teamster alloc status <alloc>        # AllocatedResources.Tasks.worker.Cpu.ReservedCores
job "pinned-worker" {
  datacenters = ["dc1"]

  group "worker" {
    task "worker" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "grep Cpus_allowed_list /proc/self/status; echo cores=$NOMAD_CPU_CORES; exec sleep 3600"]
      }

      resources {
        cores  = 1
        memory = 32
      }
    }
  }
}
